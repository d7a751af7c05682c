"""What a change to a running pipeline's spec does, before anything runs (pure): a migration plan.

``lockstep validate NEW --against RUNNING`` compares the two specs field by field and says, for each change,
when it takes effect (`Applies`):

- **next checkpoint**: the next plan takes it; checkpoints already in flight finish as they were planned
  (their claims pin the values they were planned with);
- **needs a step first**: it takes effect once a named command ran (re-keying the state, a savepoint copied
  to a new name and a restore from it);
- **refused**: the pipeline's history or state cannot carry it (offsets of another cluster, windows cut with
  another size, a dedup's seen keys under another key); the reason says the way out.

Each `Change` names the spec field, the kind of change, when it applies and why, in the words of the
engine's own refusals (`lockstep.rules.state_base`, `lockstep.rules.pinned`): a change the plan calls
refused is one the pipeline would refuse, or would carry out wrongly without saying so.
"""
from __future__ import annotations

__all__ = [
    "Applies", "Change", "change_plan", "worst",
]

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from lockstep.model.state_rows import function_state_columns
from lockstep.rules.state_base import schema_change
from lockstep.rules.window_partials import kept_partials

if TYPE_CHECKING:
    from lockstep.spec import FormatSpec, IcebergSinkSpec, PipelineSpec, StateSpec, TableSpec


class Applies(Enum):
    NEXT = "next checkpoint"
    STEP = "needs a step first"
    REFUSED = "refused"


@dataclass(frozen=True)
class Change:
    """One change between the running spec and the new one."""

    field: str
    kind: str
    applies: Applies
    why: str

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "kind": self.kind, "applies": self.applies.value, "why": self.why}

    def line(self) -> str:
        return f"{self.applies.value}: {self.field}: {self.kind}. {self.why}"


_NEW_NAME = ("run the new version as a new pipeline (another name and sink), started with `restore_from: "
             "time:<ISO>` where it should take over, and retire this one once it has caught up")
_COMPARE = "Compare its output first: `lockstep replay --spec <running> --compare <new>`"


def change_plan(old: PipelineSpec, new: PipelineSpec) -> list[Change]:
    """Every change from ``old`` (the running spec) to ``new``, in the spec's order, most severe first within a
    section; an empty list when nothing that matters changed."""
    severity = [Applies.REFUSED, Applies.STEP, Applies.NEXT]
    changes: list[Change] = []
    for section in (_identity, _source, _transform, _sink, _tables, _state, _operations):
        changes += sorted(section(old, new), key=lambda c: severity.index(c.applies))
    return changes


def _identity(old: PipelineSpec, new: PipelineSpec) -> list[Change]:
    out = []
    if old.name != new.name:
        out.append(Change("name", f"renamed from {old.name!r} to {new.name!r}", Applies.STEP,
                          "Checkpoints, state and the consumer group belong to the name: under a new one the pipeline "
                          "starts over from source.auto_offset_reset. To carry its position and state over: `lockstep "
                          "savepoint create <name> --spec <running>`, `lockstep savepoint copy <name> --spec <running> "
                          "--to-spec <new>`, and restore the new pipeline from it (restore_from)"))
    if (old.checkpoints.bucket, old.checkpoints.prefix) != (new.checkpoints.bucket, new.checkpoints.prefix):
        out.append(Change("checkpoints.store", f"moved from {old.checkpoints.store} to {new.checkpoints.store}",
                          Applies.REFUSED, "The pipeline's history (offsets, state, tables, transactions in flight) "
                          "is in the old store and its state files are named by their keys there: a new store starts "
                          f"over and nothing would settle what is in flight. Keep checkpoints.store; to move, {_NEW_NAME}"))
    return out


def _source(old: PipelineSpec, new: PipelineSpec) -> list[Change]:
    out = []
    if old.source.kafka_conn_id != new.source.kafka_conn_id:
        out.append(Change("source.kafka_conn_id", f"{old.source.kafka_conn_id} -> {new.source.kafka_conn_id}",
                          Applies.REFUSED, "Checkpoints record offsets on the old cluster: read on another one they "
                          f"name other records. To move clusters, {_NEW_NAME}"))
    added = [t for t in new.source.topics if t not in old.source.topics]
    removed = [t for t in old.source.topics if t not in new.source.topics]
    late = (" Its records older than the watermark are late (state.window.allowed_lateness)."
            if new.state is not None else "")
    out += [Change("source.topics", f"topic {t} added", Applies.NEXT, "Its partitions are read from their log "
                   f"start (no record skipped; `restore_from` to start elsewhere).{late}") for t in added]
    out += [Change("source.topics", f"topic {t} removed", Applies.NEXT, "No longer read; the consumer group keeps its "
                   "last offsets, and the topic added back goes on from there") for t in removed]
    if old.source.consumer_group != new.source.consumer_group:
        out.append(Change("source.consumer_group", f"{old.source.consumer_group} -> {new.source.consumer_group}",
                          Applies.NEXT, "Checkpoints start from the last completed checkpoint, not the group: the "
                          "offsets are published to the new group from the next commit, the old one keeps its last"))
    out += _formats("source", old.source.key, old.source.value, new.source.key, new.source.value,
                    "the next checkpoint decodes its records with it; a record that does not decode is a dead letter")
    return out


def _transform(old: PipelineSpec, new: PipelineSpec) -> list[Change]:
    if (old.transform, old.transform_sql) == (new.transform, new.transform_sql):
        return []
    what = "the SQL query" if new.is_sql or old.is_sql else f"{old.transform} -> {new.transform}"
    return [Change("transform", f"{what} changed", Applies.NEXT, "The next checkpoint runs the new code; checkpoints "
                   f"in flight and replays of aborted ones keep the records their claims pinned. {_COMPARE}")]


def _sink(old: PipelineSpec, new: PipelineSpec) -> list[Change]:
    out = []
    o, n = old.sink, new.sink
    if o.kafka_conn_id != n.kafka_conn_id:
        out.append(Change("sink.kafka_conn_id", f"{o.kafka_conn_id} -> {n.kafka_conn_id}", Applies.NEXT,
                          "The next plan writes to the new cluster once the checkpoints in flight are settled on the "
                          "old one (a run refuses to carry one over: let it commit or abort first)"))
    for name in ("topic", "dead_letter_topic"):
        was, now = getattr(o, name), getattr(n, name)
        if was == now:
            continue
        table = n.iceberg.table if n.iceberg is not None else "?"
        why = ("The next checkpoint writes there; what was written stays in the old topic" if was and now else
               f"From the next checkpoint the records land in Iceberg table {table} alone; what was written stays in "
               "the old topic" if now is None else
               f"From the next checkpoint the records go to {now} too, beside Iceberg table {table}")
        out.append(Change(f"sink.{name}", f"{was or 'none'} -> {now or 'none'}", Applies.NEXT, why))
    routes_old, routes_new = dict(o.routes), dict(n.routes)
    for topic, condition in routes_new.items():
        if topic not in routes_old:
            out.append(Change("sink.routes", f"route {topic} added", Applies.NEXT,
                              f"From the next checkpoint the records where {condition} go there. {_COMPARE}"))
        elif routes_old[topic] != condition:
            out.append(Change("sink.routes", f"route {topic}'s condition changed", Applies.NEXT,
                              f"{routes_old[topic]} -> {condition}. {_COMPARE}"))
    out += [Change("sink.routes", f"route {t} removed", Applies.NEXT, "Its records go to sink.topic (or the next "
                   "route whose condition holds)") for t in routes_old if t not in routes_new]
    if list(routes_old) != [t for t in routes_new if t in routes_old] and set(routes_old) <= set(routes_new):
        out.append(Change("sink.routes", "routes reordered", Applies.NEXT, "The first route whose condition holds "
                          "takes a record"))
    out += _formats("sink", o.key, o.value, n.key, n.value, "the next checkpoint encodes with it; a registry schema "
                    "is checked against the subject's compatibility at the next plan, and an incompatible one is "
                    "refused before any transaction opens")
    for name in ("writer", "parallelism", "on_error"):
        if getattr(o, name) != getattr(n, name):
            out.append(Change(f"sink.{name}", f"{getattr(o, name)} -> {getattr(n, name)}", Applies.NEXT,
                              "Checkpoints in flight keep what they were planned with"))
    return out + _iceberg(o.iceberg, n.iceberg)


_IN_FLIGHT = "checkpoints in flight publish to the table they staged in"


def _iceberg(o: IcebergSinkSpec | None, n: IcebergSinkSpec | None) -> list[Change]:
    """``sink.iceberg``: a table added, removed or moved applies at the next checkpoint; a new partitioning needs
    the table partitioned so first (a run never changes a table's partitioning; it stops naming both)."""
    if o == n:
        return []
    if o is None or n is None:
        added = n is not None
        table = n.table if n is not None else o.table if o is not None else ""
        return [Change("sink.iceberg", f"table {table} {'added' if added else 'removed'}", Applies.NEXT,
                       "From the next checkpoint the records written to sink.topic land in the table too (created "
                       "at the first rows); the records written before are not copied into it" if added else
                       f"The next checkpoint writes to Kafka only; {_IN_FLIGHT}, which keeps its rows")]
    out = []
    if (o.catalog_conn_id, o.table) != (n.catalog_conn_id, n.table):
        out.append(Change("sink.iceberg.table", f"{o.catalog_conn_id}/{o.table} -> {n.catalog_conn_id}/{n.table}",
                          Applies.NEXT, f"The next checkpoint lands in the new table; {_IN_FLIGHT}, which keeps its "
                          "rows"))
    if o.partitioning != n.partitioning and n.partitioning is not None:
        said = ", ".join(map(str, n.partitioning)) or "none"
        was = "as it is" if o.partitioning is None else f"[{', '.join(map(str, o.partitioning)) or 'none'}]"
        out.append(Change("sink.iceberg.partitioning", f"{was} -> [{said}]", Applies.STEP,
                          f"Lockstep never changes a table's partitioning: evolve {n.table}'s partition spec to "
                          f"[{said}] first (Spark SQL's ALTER TABLE ... ADD/DROP PARTITION FIELD, or pyiceberg's "
                          "update_spec), or the next run stops naming both. A new table is created so"))
    elif o.partitioning != n.partitioning:
        out.append(Change("sink.iceberg.partitioning", "unset", Applies.NEXT,
                          "The table is written as it is partitioned"))
    return out


def _formats(side: str, old_key: FormatSpec, old_value: FormatSpec, new_key: FormatSpec, new_value: FormatSpec,
             effect: str) -> list[Change]:
    out = []
    for part, a, b in (("key", old_key, new_key), ("value", old_value, new_value)):
        if a == b:
            continue
        kind = (f"format {a.format} -> {b.format}" if a.format != b.format else
                "schema changed" if (a.schema, a.schema_from, a.message) != (b.schema, b.schema_from, b.message)
                else "format settings changed")
        out.append(Change(f"{side}.{part}", kind, Applies.NEXT, effect[0].upper() + effect[1:]))
    return out


def _tables(old: PipelineSpec, new: PipelineSpec) -> list[Change]:
    out = []
    before: dict[str, TableSpec] = {t.name: t for t in old.tables}
    after: dict[str, TableSpec] = {t.name: t for t in new.tables}
    for name, t in after.items():
        was = before.get(name)
        if was is None:
            out.append(Change(f"tables.{name}", "table added", Applies.NEXT, f"The next checkpoint reads {t.topic} "
                              "from its log start before its records meet the table"))
            continue
        if was.topic != t.topic:
            out.append(Change(f"tables.{name}.topic", f"{was.topic} -> {t.topic}", Applies.NEXT, "A new table: the "
                              "next checkpoint builds it from the new topic's log start"))
        if was.key != t.key:
            out.append(Change(f"tables.{name}.key", "key format changed", Applies.REFUSED, "The table's rows are "
                              "keyed by their decoded key: rows kept under the old decoding would not meet records "
                              "of the new. Rename the table (tables.<new name>): it is built again from its topic"))
        if was.value != t.value:
            out.append(Change(f"tables.{name}.value", "value format changed", Applies.NEXT, "Rows keep their raw "
                              "value: the next checkpoint decodes the table anew; a row that no longer decodes is "
                              "left out of the view"))
        if (was.join, was.versions_ms, was.on_error) != (t.join, t.versions_ms, t.on_error):
            out.append(Change(f"tables.{name}", "join or versions changed", Applies.NEXT, _COMPARE))
    out += [Change(f"tables.{name}", "table removed", Applies.NEXT, "No longer read or joined; its files stay in the "
                   "store until retention removes the checkpoints that name them")
            for name in before if name not in after]
    return out


def _state(old: PipelineSpec, new: PipelineSpec) -> list[Change]:
    a, b = old.state, new.state
    if a is None and b is None:
        return []
    if a is None:
        assert b is not None
        return [Change("state", f"{b.operator} added", Applies.NEXT, "The operator starts without state at the next "
                       "checkpoint: records read before are not in it")]
    if b is None:
        return [Change("state", f"{a.operator} removed", Applies.NEXT, "The stored state is no longer read; windows "
                       "that have not fired never will")]
    if a.operator != b.operator:
        return [Change("state", f"operator {a.operator} -> {b.operator}", Applies.REFUSED,
                       f"State of one operator is never read by another. {_NEW_NAME[0].upper()}{_NEW_NAME[1:]}")]
    out = []
    if a.key_groups != b.key_groups:
        out.append(Change("state.key_groups", f"{a.key_groups} -> {b.key_groups}", Applies.STEP,
                          f"Every key moves to another group: re-key explicitly with `lockstep state rekey --spec "
                          f"<running> --key-groups {b.key_groups}`; the next checkpoint then writes the whole state in "
                          f"{b.key_groups} groups (a plan without it refuses)"))
    out += _event_time(a, b)
    for operator in (_window, _dedup, _function, _interval):
        out += operator(a, b)
    return out


def _event_time(a: StateSpec, b: StateSpec) -> list[Change]:
    out = []
    if a.event_time.column != b.event_time.column:
        out.append(Change("state.event_time.column", f"{a.event_time.column} -> {b.event_time.column}", Applies.NEXT,
                          "Event times are read from the new column from the next checkpoint; the watermark never "
                          "moves back, so records whose new times are behind it are late"))
    for name in ("out_of_orderness_ms", "idle_timeout_ms", "idle_advance"):
        x, y = getattr(a.event_time, name), getattr(b.event_time, name)
        unit = " ms" if name.endswith("_ms") else ""
        if x != y:
            out.append(Change(f"state.event_time.{name.removesuffix('_ms')}", f"{x}{unit} -> {y}{unit}", Applies.NEXT,
                              "The watermark follows it from the next checkpoint; what has fired is not fired again"))
    return out


def _window(a: StateSpec, b: StateSpec) -> list[Change]:
    x, y = a.window, b.window
    if x is None or y is None:
        return []
    refused = ("The pending windows were cut, and their aggregates kept, under the old spec: read under the new one "
               "they would fire with wrong contents, so the plan refuses (the state records its shape). "
               + _NEW_NAME[0].upper() + _NEW_NAME[1:])
    out = []
    if x.key != y.key:
        out.append(Change("state.window.key", f"{x.key} -> {y.key}", Applies.REFUSED, refused))
    if (x.size_ms, x.slide_ms) != (y.size_ms, y.slide_ms):
        what = f"size/slide {x.size_ms}/{x.slide_ms} ms -> {y.size_ms}/{y.slide_ms} ms"
        if x.size_ms == x.slide_ms and y.size_ms == y.slide_ms:
            out.append(Change("state.window.size", what, Applies.NEXT, "The open windows drain: the windows of records "
                              "before a switch time (the first multiple of both sizes after the latest event time the "
                              "state has seen) fire at the old size, later ones at the new; no window is cut, and "
                              "verify recomputes each at its size"))
        else:
            out.append(Change("state.window.size", what, Applies.REFUSED, "Sliding windows overlap any switch time, "
                              "so their size does not change while the pipeline runs. " + _NEW_NAME[0].upper()
                              + _NEW_NAME[1:]))
    if x.aggregates != y.aggregates:
        if kept_partials(x) is None and kept_partials(y) is None:
            out.append(Change("state.window.aggregates", "aggregates changed", Applies.NEXT, "The state keeps the "
                              "open windows' rows: from the next checkpoint they fire with the new aggregates, and "
                              "the windows fired before keep theirs (verify recomputes each window with the "
                              "aggregates of the checkpoint that fired it)"))
        elif kept_partials(x) is None:
            out.append(Change("state.window.aggregates", "aggregates changed", Applies.NEXT, "The next checkpoint "
                              "turns the open windows' rows into partial aggregates of the new list; the windows "
                              "fired before keep theirs"))
        else:
            out.append(Change("state.window.aggregates", "aggregates changed", Applies.REFUSED, "The state keeps "
                              "partial aggregates of the old list, which cannot serve other aggregates (the plan "
                              "refuses). Declare `keep_rows: true` from the start to change aggregates later; now, "
                              + _NEW_NAME))
    if x.keep_rows and not y.keep_rows:
        out.append(Change("state.window.keep_rows", "rows -> partial aggregates", Applies.NEXT, "The next checkpoint "
                          "turns the kept rows into partial aggregates"))
    elif y.keep_rows and not x.keep_rows:
        out.append(Change("state.window.keep_rows", "partial aggregates -> rows", Applies.REFUSED, "Partial aggregates "
                          "cannot become the rows they summed (the pipeline refuses). " + _NEW_NAME[0].upper()
                          + _NEW_NAME[1:]))
    if x.allowed_lateness_ms != y.allowed_lateness_ms:
        out.append(Change("state.window.allowed_lateness", f"{x.allowed_lateness_ms} -> {y.allowed_lateness_ms} ms",
                          Applies.NEXT, "Windows fired already are not fired again"))
    return out


def _dedup(a: StateSpec, b: StateSpec) -> list[Change]:
    x, y = a.dedup, b.dedup
    if x is None or y is None:
        return []
    out = []
    if x.key != y.key:
        out.append(Change("state.dedup.key", f"{x.key} -> {y.key}", Applies.REFUSED, "The keys seen are the old key's: "
                          "under a new key every record would pass once more. " + _NEW_NAME[0].upper() + _NEW_NAME[1:]))
    for name in ("ttl_ms", "duplicates"):
        if getattr(x, name) != getattr(y, name):
            out.append(Change(f"state.dedup.{name.removesuffix('_ms')}", f"{getattr(x, name)} -> {getattr(y, name)}",
                              Applies.NEXT, "Keys already seen are judged by it from the next checkpoint"))
    return out


def _function(a: StateSpec, b: StateSpec) -> list[Change]:
    x, y = a.function, b.function
    if x is None or y is None or a.interval_join is not None:
        return []
    out = []
    problems = schema_change(dict(function_state_columns(x.fields)), dict(function_state_columns(y.fields)))
    if y.version < x.version:
        problems.append(f"state.function.version went back from {x.version} to {y.version}")
    if problems and y.migrate is None:
        out.append(Change("state.function.state", "state schema changed", Applies.REFUSED, "; ".join(problems) + ". "
                          "Keep the field (a new nullable field is fine), or name a migration in "
                          "state.function.migrate and raise state.function.version"))
    elif problems or (x.fields != y.fields) or x.version != y.version:
        how = f"migrated by {y.migrate}" if y.migrate and (problems or x.version != y.version) else "read as it is"
        out.append(Change("state.function.state", f"state schema v{x.version} -> v{y.version}", Applies.NEXT,
                          f"The next checkpoint's stored state is {how} (a new field reads as null)"))
    if x.key != y.key:
        out.append(Change("state.function.key", f"{x.key} -> {y.key}", Applies.REFUSED, "Each key's state is kept "
                          "under the old key. " + _NEW_NAME[0].upper() + _NEW_NAME[1:]))
    for name in ("process", "ttl_ms", "options"):
        if getattr(x, name) != getattr(y, name):
            out.append(Change(f"state.function.{name.removesuffix('_ms')}", "changed", Applies.NEXT,
                              f"From the next checkpoint, on the stored state. {_COMPARE}"))
    return out


def _interval(a: StateSpec, b: StateSpec) -> list[Change]:
    x, y = a.interval_join, b.interval_join
    if x is None or y is None:
        return []
    out = []
    if (x.key, x.left, x.right) != (y.key, y.left, y.right):
        out.append(Change("state.interval_join", "key or sides changed", Applies.REFUSED, "The rows waiting for a match "
                          "are the old sides' under the old key. " + _NEW_NAME[0].upper() + _NEW_NAME[1:]))
    if (x.after_ms, x.before_ms, x.how) != (y.after_ms, y.before_ms, y.how):
        out.append(Change("state.interval_join", "bounds or how changed", Applies.NEXT, "From the next checkpoint; rows "
                          "already let go under the old bounds do not come back"))
    return out


#: Fields that change how and when checkpoints run, never what they compute.
_OPERATIONAL: tuple[tuple[str, Callable[[PipelineSpec], object]], ...] = (
    ("checkpoints.schedule", lambda s: s.checkpoints.schedule),
    ("checkpoints.trigger", lambda s: s.checkpoints.trigger),
    ("checkpoints.max_records", lambda s: s.checkpoints.max_records),
    ("checkpoints.retain", lambda s: s.checkpoints.retain),
    ("checkpoints.tasks", lambda s: s.checkpoints.tasks),
    ("checkpoints.pipelined", lambda s: s.checkpoints.pipelined),
    ("checkpoints.skip_deleted_ranges", lambda s: s.checkpoints.skip_deleted_ranges),
    ("transactions.id_prefix", lambda s: s.transactions.id_prefix),
    ("transactions.timeout_ms", lambda s: s.transactions.timeout_ms),
    ("transactions.commit_margin_ms", lambda s: s.transactions.commit_margin_ms),
    ("spark", lambda s: s.spark),
    ("producer", lambda s: dict(s.producer)),
    ("owner, tags, alerts", lambda s: (s.owner, s.tags, s.alerts)),
)


def _operations(old: PipelineSpec, new: PipelineSpec) -> list[Change]:
    return [Change(name, "changed", Applies.NEXT, "How and when checkpoints run, not what they write; checkpoints in "
                   "flight keep what they were planned with") for name, get in _OPERATIONAL if get(old) != get(new)]


def worst(changes: Iterable[Change]) -> Applies | None:
    """The most severe class among ``changes`` (None: no change)."""
    order = [Applies.REFUSED, Applies.STEP, Applies.NEXT]
    found = {c.applies for c in changes}
    return next((a for a in order if a in found), None)
