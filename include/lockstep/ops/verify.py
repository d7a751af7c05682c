"""The auditor behind ``lockstep verify``: was every covered input record's transform
output written exactly once?

Expected: the transform re-applied (in a local Spark session, nothing written) to
the input ranges of the completed checkpoints, one expected output per covering
checkpoint. Actual: the provenance headers of every record in the sink and
dead-letter topics, read with ``read_committed`` - what a downstream consumer sees.

Replayed dead letters (records with ``REPLAY_HEADER``) are accounted apart: one output per original
offset each completed replay checkpoint fed to the transform (its ``replayed.json``), and no
original offset may be in the sink more than once across the pipeline and its replays.

What cannot be checked is reported, never a crash: input ranges retention deleted (below the
source's log start), a checkpoint whose ranges Spark could not read, and output records whose
provenance headers cannot be parsed. Records another producer wrote to the sink topics (no
provenance headers, or provenance from a topic that is not one of this pipeline's sources) are
counted apart and ignored. ``exit_code`` maps the result to 0 (exactly once), 1 (loss, duplicates or
unexpected outputs found) and 2 (no problem found, but not everything could be checked).
"""
from __future__ import annotations

__all__ = [
    "audit_session", "exit_code", "verify_pipeline",
]

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lockstep.connections import kafka_config
from lockstep.kafka.client_configs import JAVA
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.model.output_contract import (
    CHECKPOINT_HEADER,
    PIPELINE_HEADER,
    REPLAY_HEADER,
    ROUTE_COLUMN,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)
from lockstep.ops.table_check import TableCheck, table_check
from lockstep.rules.output_diff import compare_counts
from lockstep.rules.ranges import within
from lockstep.spark.dead_letter_replay import SUFFIX, Original, completed_replays, fed_counter
from lockstep.spark.kafka_reader import forget_read_settings, read_ranges
from lockstep.spark.routes import routed
from lockstep.spec import PipelineSpec
from lockstep.store.checkpoint_store import CheckpointStore
from lockstep.transform import load_transform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row

    from lockstep.formats.codecs import Formats
    from lockstep.model.checkpoint import SpecFingerprint
    from lockstep.ops.verify_state import StateVerifyReport
    from lockstep.spark.raised import Raised
    from lockstep.spark.target import JobSession
    from lockstep.tables.materialize import MaterializedTables
    from lockstep.tables.pins import TableVersion
    from lockstep.transform import Transform

Offset = tuple[str, int, int]


@dataclass(frozen=True)
class Unchecked:
    """Input offsets verify could not check, and why."""

    range: OffsetRange
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"range": str(self.range), "records": self.range.count, "reason": self.reason}


def clip_to_log_start(ranges: dict[int, tuple[OffsetRange, ...]], log_starts: Mapping[TopicPartition, int]
                      ) -> tuple[dict[int, tuple[OffsetRange, ...]], list[Unchecked]]:
    """Each checkpoint's ranges from the partition's log start on, and the parts below it, which
    retention deleted and so can no longer be re-read to say what their outputs should be."""
    kept: dict[int, tuple[OffsetRange, ...]] = {}
    deleted: list[Unchecked] = []
    for cid, rs in ranges.items():
        clipped = []
        for r in rs:
            log_start = log_starts.get(r.tp, 0)
            if r.start < log_start:
                gone = OffsetRange(r.topic, r.partition, r.start, min(r.end, log_start))
                deleted.append(Unchecked(gone, f"checkpoint {cid}: deleted by retention (the log starts at {log_start})"))
            if r.end > log_start:
                clipped.append(OffsetRange(r.topic, r.partition, max(r.start, log_start), r.end))
        kept[cid] = tuple(clipped)
    return kept, deleted


class Provenance(ValueError):
    """A record's provenance headers are there but cannot be read."""


def provenance(headers: Mapping[str, bytes | None]) -> Original | None:
    """The input record an output was made from, from its provenance headers; None for a record
    without them (another producer's). Raises `Provenance` for headers that are there but unreadable."""
    if SOURCE_OFFSET not in headers and SOURCE_TOPIC not in headers:
        return None
    topic, partition, offset = (headers.get(h) for h in (SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET))
    if topic is None or partition is None or offset is None:
        missing = [h for h, v in ((SOURCE_TOPIC, topic), (SOURCE_PARTITION, partition), (SOURCE_OFFSET, offset))
                   if v is None]
        raise Provenance(f"provenance header{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing or empty")
    try:
        return topic.decode(), int(partition), int(offset)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Provenance(f"provenance headers unreadable: {exc}") from exc


@dataclass
class ReplayAccount:
    checked: int = 0  #: replayed outputs found (records with `REPLAY_HEADER`)
    expected: int = 0
    lost: list[Original] = field(default_factory=list)
    duplicated: list[Original] = field(default_factory=list)
    unexpected: list[Original] = field(default_factory=list)
    sink_twice: list[Original] = field(default_factory=list)  #: original offsets in the sink more than once


def account(expected: Counter[Original], actual: Counter[Original], sink_by_original: Counter[Original]) -> ReplayAccount:
    """Replayed outputs: ``expected`` counts, per original offset, the completed replay checkpoints
    that fed it to the transform (one output each, sink or dead letter); ``actual`` counts the
    records with the replay header per original offset; ``sink_by_original`` counts every sink
    record (pipeline and replays) per original offset: more than one is a duplicate downstream."""
    result = ReplayAccount(checked=sum(actual.values()), expected=sum(expected.values()))
    result.lost, result.duplicated, result.unexpected = compare_counts(expected, actual)
    result.sink_twice = sorted(k for k, n in sink_by_original.items() if n > 1)
    return result


@dataclass
class VerifyReport:
    checkpoints: list[int]
    covered_offsets: int
    expected_outputs: int
    actual_outputs: int
    lost: list[Offset] = field(default_factory=list)
    duplicated: list[Offset] = field(default_factory=list)
    unexpected: list[Offset] = field(default_factory=list)
    #: Outputs of dead-letter replays (`lockstep deadletters replay`), checked apart.
    replay: ReplayAccount = field(default_factory=ReplayAccount)
    replay_checkpoints: list[int] = field(default_factory=list)
    #: Input offsets that could not be checked; outputs found for them are left out of the counts.
    unchecked: list[Unchecked] = field(default_factory=list)
    #: Output records whose provenance headers are there but unreadable, by ``topic:partition@offset``.
    unreadable: list[str] = field(default_factory=list)
    #: Output records another producer wrote to the sink topics, by ``topic:partition@offset``: ignored.
    other_producers: list[str] = field(default_factory=list)
    #: Checkpoints completed after a repair, with what was lost and given back to the next checkpoint
    #: (whose ranges, and so this check, cover the given-back input).
    repaired: dict[int, str] = field(default_factory=dict)
    #: With ``sink.routes``: input offsets whose output is in another of the sink topics than the routes
    #: send it to (or in a sink topic when it is a dead letter), as ``(input, topic found, topic expected)``.
    misrouted: list[tuple[Offset, str, str]] = field(default_factory=list)
    #: With ``sink.iceberg``: the table's rows on its main branch checked against the records of ``sink.topic``,
    #: by provenance (None: no table).
    table: TableCheck | None = None

    @property
    def complete(self) -> bool:
        """Every covered offset and every output record could be checked."""
        return not (self.unchecked or self.unreadable)

    @property
    def ok(self) -> bool:
        r = self.replay
        return not (self.lost or self.duplicated or self.unexpected or r.lost or r.duplicated or r.unexpected
                    or r.sink_twice or self.misrouted or (self.table is not None and not self.table.ok))

    def to_json(self) -> dict[str, object]:
        def sample(xs: Sequence[Offset]) -> list[str]:
            return [f"{t}:{p}@{o}" for t, p, o in xs[:20]]

        return {"ok": self.ok, "checkpoints": self.checkpoints, "covered_offsets": self.covered_offsets,
                "expected_outputs": self.expected_outputs, "actual_outputs": self.actual_outputs,
                "lost": len(self.lost), "duplicated": len(self.duplicated), "unexpected": len(self.unexpected),
                "lost_sample": sample(self.lost), "duplicated_sample": sample(self.duplicated),
                "unexpected_sample": sample(self.unexpected),
                "replayed": {"checkpoints": self.replay_checkpoints, "expected_outputs": self.replay.expected,
                             "checked": self.replay.checked, "lost": len(self.replay.lost),
                             "duplicated": len(self.replay.duplicated), "unexpected": len(self.replay.unexpected),
                             "in_sink_twice": len(self.replay.sink_twice),
                             "lost_sample": sample(self.replay.lost),
                             "duplicated_sample": sample(self.replay.duplicated),
                             "unexpected_sample": sample(self.replay.unexpected),
                             "in_sink_twice_sample": sample(self.replay.sink_twice)},
                "complete": self.complete, "unchecked": [u.to_json() for u in self.unchecked],
                "unchecked_offsets": sum(u.range.count for u in self.unchecked),
                "unreadable": len(self.unreadable), "unreadable_sample": self.unreadable[:20],
                "other_producers": len(self.other_producers), "other_producers_sample": self.other_producers[:20],
                "repaired": {str(cid): text for cid, text in self.repaired.items()},
                "misrouted": len(self.misrouted),
                "misrouted_sample": [f"{t}:{p}@{o} in {found}, expected {want}"
                                     for (t, p, o), found, want in self.misrouted[:20]],
                **({"table": self.table.to_json()} if self.table is not None else {})}

    def summary(self) -> str:
        return (f"verified {len(self.checkpoints)} completed checkpoints covering {self.covered_offsets} input offsets: "
                f"{self.expected_outputs} outputs expected, {self.actual_outputs} found; {len(self.lost)} lost, "
                f"{len(self.duplicated)} duplicated, {len(self.unexpected)} unexpected" + self._routes_summary()
                + (f"\n{self.table.summary()}" if self.table is not None else "")
                + self._replay_summary() + self._gaps_summary())

    def _routes_summary(self) -> str:
        if not self.misrouted:
            return ""
        (t, p, o), found, want = self.misrouted[0]
        return (f"\nmisrouted: {len(self.misrouted)} outputs are in another topic than sink.routes send them to, "
                f"for example the output of {t}:{p}@{o} in {found} (expected {want})")

    def _gaps_summary(self) -> str:
        lines = [f"\ncheckpoint {cid} completed after repair: {text}" for cid, text in sorted(self.repaired.items())]
        for u in self.unchecked:
            lines.append(f"\nnot checked: {u.range} ({u.range.count} offsets): {u.reason}")
        if self.unreadable:
            lines.append(f"\nnot checked: {len(self.unreadable)} output records with unreadable provenance headers, "
                         f"for example {', '.join(self.unreadable[:3])}")
        if self.other_producers:
            lines.append(f"\nignored: {len(self.other_producers)} records of other producers in the sink topics, "
                         f"for example {', '.join(self.other_producers[:3])}")
        return "".join(lines)

    def _replay_summary(self) -> str:
        r = self.replay
        if not (self.replay_checkpoints or r.checked or r.sink_twice):
            return ""
        return (f"\nreplayed dead letters: {len(self.replay_checkpoints)} completed replay checkpoints, "
                f"{r.expected} outputs expected, {r.checked} replayed records checked; {len(r.lost)} lost, "
                f"{len(r.duplicated)} duplicated, {len(r.unexpected)} unexpected, {len(r.sink_twice)} original "
                "offsets in the sink more than once")


def completed_ranges(store: CheckpointStore, since: int | None, repaired: dict[int, str] | None = None,
                     tables: dict[int, Mapping[str, TableVersion]] | None = None,
                     schemas: dict[int, Mapping[str, int]] | None = None,
                     codes: dict[int, SpecFingerprint | None] | None = None) -> dict[int, tuple[OffsetRange, ...]]:
    """The input ranges each completed checkpoint from ``since`` on delivered: a repaired one's without
    the ranges it gave back to the next checkpoint (put in ``repaired``, with what was lost); each one's
    table versions go in ``tables``, the schema ids its claim pinned in ``schemas``, the code its claim
    says computed it in ``codes``."""
    result: dict[int, tuple[OffsetRange, ...]] = {}
    for cid in store.checkpoint_ids(after=since - 1 if since else None):
        view = store.view(cid)
        if view is not None and view.completed is not None:
            result[cid] = view.delivered_ranges
            if view.completed.repair is not None and repaired is not None:
                repaired[cid] = view.completed.repair.summary
            if tables is not None:
                tables[cid] = view.completed.tables
            if schemas is not None:
                schemas[cid] = view.claim.schema_ids
            if codes is not None:
                codes[cid] = view.claim.code
    return result


def other_code(spec: PipelineSpec, codes: Mapping[int, SpecFingerprint | None]) -> dict[int, str]:
    """The checkpoints another version of the code computed (`lockstep.steps.code_version`), each with what
    differs and the checkpoint from which on today's code ran: what `set_aside` says of one whose output today's
    code would not have written."""
    from lockstep.steps.code_version import code_changes, code_fingerprint

    now = code_fingerprint(spec)
    differ = {cid: code_changes(code, now) for cid, code in codes.items()}
    first_now = min((cid for cid, changed in differ.items() if not changed and cid > max(
        (c for c, d in differ.items() if d), default=0)), default=None)
    since = (f"; today's code wrote checkpoints from {first_now} on (`lockstep verify --since-checkpoint "
             f"{first_now}`)") if first_now is not None else ""
    return {cid: f"checkpoint {cid}: written by other code (its {', '.join(changed)} {'is' if len(changed) == 1 else 'are'} "
                 f"not the spec's now), and {{n}} of its offsets differ from what today's code writes: verify it with "
                 f"the spec and code that wrote it{since}"
            for cid, changed in sorted(differ.items()) if changed}


def set_aside(report: VerifyReport, elsewhere: Mapping[int, str], ranges: Mapping[int, tuple[OffsetRange, ...]]) -> None:
    """The findings (lost, duplicated, unexpected, misrouted) inside the ranges of checkpoints other code wrote
    (``elsewhere``: `other_code`), taken out of the report's failures and reported as not checked: today's code
    cannot say what that code should have written (a deliberate change, e.g. a new filter, is no loss). Such a
    checkpoint whose output today's code would write alike stays checked."""
    def owner(offset: Offset) -> int | None:
        return next((cid for cid in elsewhere if within(offset, list(ranges.get(cid, ())))), None)

    moved: Counter[int] = Counter()
    for name in ("lost", "duplicated", "unexpected"):
        kept = []
        for offset in getattr(report, name):
            cid = owner(offset)
            if cid is None:
                kept.append(offset)
            else:
                moved[cid] += 1
        setattr(report, name, kept)
    misrouted_kept = []
    for item in report.misrouted:
        cid = owner(item[0])
        if cid is None:
            misrouted_kept.append(item)
        else:
            moved[cid] += 1
    report.misrouted = misrouted_kept
    report.unchecked += [Unchecked(r, elsewhere[cid].replace("{n}", str(n))) for cid, n in sorted(moved.items())
                         for r in ranges.get(cid, ())]


def expected_outputs(spec: PipelineSpec, spark: JobSession, ranges: dict[int, tuple[OffsetRange, ...]],
                     unchecked: list[Unchecked] | None = None,
                     topics: dict[Offset, set[str]] | None = None, store: CheckpointStore | None = None,
                     tables: Mapping[int, Mapping[str, TableVersion]] | None = None,
                     schemas: Mapping[int, Mapping[str, int]] | None = None,
                     to_table: Counter[Offset] | None = None) -> Counter[Offset]:
    """The transform's outputs per input offset, re-computed from the ranges. A checkpoint whose
    ranges Spark cannot read (or transform) goes to ``unchecked`` with the cause, not up as an error.
    With ``sink.routes``, ``topics`` gets the topic each offset's outputs go to: its route's (or
    ``sink.topic``), the dead-letter topic for a dead letter; without ``sink.topic``, the table (`table_mark`) for
    any other output, and ``to_table`` counts those outputs. With tables, each checkpoint's records meet
    the table versions its completed checkpoint records (``tables``, by checkpoint), read from ``store``'s
    files (never from the tables' topics, which Kafka may have compacted since); checkpoints that carried a
    version forward share its frames. Each checkpoint's records are decoded into, and its outputs encoded
    with, the registry schemas its claim pinned (``schemas``, by checkpoint), as its run did: not the
    registry's latest versions, which may have moved since (a claim without pins: the latest, as then).
    The Formats of one set of pins is built once (its registry lookups)."""
    from lockstep.errors import root_cause
    from lockstep.formats.codecs import Formats

    transform = routed(spec, load_transform(spec))  # a condition Spark refuses leaves the range unchecked
    # records that do not decode are dead letters, never the transform's; one Formats per set of pinned ids
    formats_by_pins: dict[tuple[tuple[str, int], ...], Formats] = {}
    # the topics whose records some checkpoint read: only their subjects must exist, as for the runs
    read = {r.topic for rs in ranges.values() for r in rs if not r.is_empty}
    kafka = kafka_config(spec.source.kafka_conn_id, JAVA)  # Lockstep's reader (Java kafka-clients)
    expected: Counter[Offset] = Counter()
    made: dict[tuple[tuple[str, tuple[str, ...]], ...], MaterializedTables] = {}
    for cid, rs in ranges.items():
        if not rs:
            continue
        try:
            pinned = tuple(sorted((schemas or {}).get(cid, {}).items()))
            formats = formats_by_pins.get(pinned)
            if formats is None:
                formats = formats_by_pins[pinned] = Formats(spec, dict(pinned), read=read)
            enrich = _tables_of(spec, spark, store, (tables or {}).get(cid, {}), cid, made) if spec.tables else None
            rows = _recomputed(spec, spark, kafka, rs, cid, formats, transform, enrich)
        except Exception as exc:
            if unchecked is None:
                raise
            unchecked.extend(Unchecked(r, f"checkpoint {cid}: its input could not be read: {root_cause(exc)}")
                             for r in rs)
            continue
        finally:
            forget_read_settings(spark)  # each read's settings (credentials) leave the session once it is done
        expected.update((r["topic"], r["partition"], r["offset"]) for r in rows)
        if topics is not None and (spec.sink.routes or spec.sink.table_only):
            for r in (row.asDict() for row in rows):
                dead = r.get("error") is not None
                to = spec.sink.dead_letter_topic if dead else r.get(ROUTE_COLUMN) or spec.sink.topic or table_mark(spec)
                at = (r["topic"], r["partition"], r["offset"])
                topics.setdefault(at, set()).add(to)
                if to_table is not None and not dead and spec.sink.table_only:
                    to_table[at] += 1
    return expected


def _recomputed(spec: PipelineSpec, spark: JobSession, kafka: dict[str, object], rs: tuple[OffsetRange, ...],
                checkpoint_id: int, formats: Formats, transform: Transform,
                enrich: Callable[[DataFrame], DataFrame] | None, raised: Raised | None = None) -> list[Row]:
    """One checkpoint's outputs' provenance (and error, route), recomputed; records for which the transform or a
    route raises a Spark data error are set aside as the run set them aside (`lockstep.spark.raised`)."""
    from functools import partial

    from lockstep.spark.raised import data_error, isolate, probe

    out, decoded = formats.transformed(read_ranges(spark, kafka, rs), transform, enrich,
                                       enrich_errors=enrich is not None, raised=raised)
    columns = ("topic", "partition", "offset", *(c for c in ("error", ROUTE_COLUMN)
                                                 if (spec.sink.routes or spec.sink.table_only) and c in out.columns))
    try:
        return formats.with_dead_letters(out, decoded, columns).collect()
    except Exception as exc:
        error = data_error(exc) if raised is None and spec.state is None and spec.sink.on_error == "dead_letter" else None
        if error is None:
            raise
        found = isolate(partial(probe, spark, kafka, formats, transform, enrich, enrich is not None), rs, error,
                        checkpoint_id, spec)
        return _recomputed(spec, spark, kafka, rs, checkpoint_id, formats, transform, enrich, found)


def _tables_of(spec: PipelineSpec, spark: JobSession, store: CheckpointStore | None,
               versions: Mapping[str, TableVersion], checkpoint_id: int,
               made: dict[tuple[tuple[str, tuple[str, ...]], ...], MaterializedTables]
               ) -> Callable[[DataFrame], DataFrame] | None:
    """Checkpoint ``checkpoint_id``'s tables (``versions``) as its run had them: views of their names (for
    SQL), and the joins the spec declares (None: none declared). ``made`` keeps them by version: a version a
    later checkpoint carried forward is not read and shipped to Spark again."""
    from functools import partial

    from lockstep.tables.materialize import committed, join_tables

    assert store is not None, "verifying a pipeline with tables needs its store"
    key = tuple((t.name, versions[t.name].files) for t in spec.tables if t.name in versions)
    tables = made.get(key)
    if tables is None:
        tables = made[key] = committed(spark, spec, store.state_files(), versions, f"checkpoint {checkpoint_id}")
    tables.register_views()  # the views this checkpoint's query reads, whatever an earlier one registered
    return partial(join_tables, spec, tables) if any(t.join is not None for t in spec.tables) else None


@dataclass
class Outputs:
    """What the sink topics hold, per original input offset."""

    actual: Counter[Offset] = field(default_factory=Counter)  #: the pipeline's own outputs (from ``since`` on)
    #: The sink topic (``sink.topic`` or a route's) each of the pipeline's own outputs is in, with routes.
    topics: dict[Offset, set[str]] = field(default_factory=dict)
    replayed: Counter[Original] = field(default_factory=Counter)  #: outputs of dead-letter replays
    in_sink: Counter[Original] = field(default_factory=Counter)  #: sink records of both
    #: the pipeline's own outputs in ``sink.topic`` (not a route's, not a dead letter): an Iceberg table's rows
    main: Counter[Offset] = field(default_factory=Counter)
    #: the replays' outputs in ``sink.topic`` by replay checkpoint: an Iceberg table's rows too, from the replays
    #: that wrote the table (all since replays keep ``sink.iceberg``)
    replayed_main: dict[int, Counter[Original]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)
    other_producers: list[str] = field(default_factory=list)

    def table_records(self, wrote_table: Callable[[int], bool]) -> Counter[Offset]:
        """The records of ``sink.topic`` an Iceberg table holds as rows: the pipeline's own, and those of the replay
        checkpoints that ``wrote_table``."""
        tabled = sum((n for cid, n in self.replayed_main.items() if cid and wrote_table(cid)), Counter())
        return self.main + tabled

    def add(self, spec: PipelineSpec, since: int | None, where: str, topic: str,
            headers: Mapping[str, bytes | None]) -> None:
        """One output record at ``where`` (``topic:partition@offset``) of sink topic ``topic``."""
        try:
            original = provenance(headers)
            if original is not None and REPLAY_HEADER not in headers and since:
                if int(headers.get(CHECKPOINT_HEADER) or b"0") < since:
                    return
        except ValueError as exc:  # Provenance, or a checkpoint header that is not a number
            self.unreadable.append(f"{where} ({exc})")
            return
        owner = headers.get(PIPELINE_HEADER)
        if (original is None or original[0] not in spec.source.topics
                or (owner is not None and owner.decode(errors="replace") not in (spec.name, spec.name + SUFFIX))):
            # not this pipeline's: no provenance, another source, or another pipeline's name
            self.other_producers.append(where)
            return
        if REPLAY_HEADER in headers:
            self.replayed[original] += 1
            if topic == spec.sink.topic:
                raw = (headers.get(REPLAY_HEADER) or b"").decode(errors="replace")
                by = int(raw) if raw.isdigit() else 0  # 0: no replay checkpoint wrote it, so no row of the table
                self.replayed_main.setdefault(by, Counter())[original] += 1
        else:
            self.actual[original] += 1
            if topic == spec.sink.topic:
                self.main[original] += 1
            if spec.sink.routes and topic in spec.sink.topics:
                self.topics.setdefault(original, set()).add(topic)
        if topic in spec.sink.topics:
            self.in_sink[original] += 1


def table_mark(spec: PipelineSpec) -> str:
    """How verify names the table where a table-only pipeline's outputs go, beside its topics."""
    return f"Iceberg table {spec.sink.iceberg.table if spec.sink.iceberg is not None else '?'}"


def read_outputs(spec: PipelineSpec, since: int | None, progress: Callable[[int], None] | None = None) -> Outputs:
    """Every committed record of the sink topics (``sink.topic`` and the routes') and the dead-letter topic,
    sorted into `Outputs`; without ``sink.topic``, the Iceberg table's rows (from checkpoint ``since`` on) are the
    sink's records."""
    from lockstep.kafka.reader import read_committed

    outputs = Outputs()
    seen = 0

    def batch_read() -> None:
        if progress:
            progress(seen)

    for record in read_committed(kafka_config(spec.sink.kafka_conn_id), (*spec.sink.topics, spec.sink.dead_letter_topic),
                                 f"lockstep-verify-{spec.name}", lambda topic: f"reading {topic} to verify {spec.name}",
                                 after_batch=batch_read):
        outputs.add(spec, since, record.where, record.topic, dict(record.headers))
        seen += 1
    if spec.sink.table_only and spec.sink.iceberg is not None:
        from lockstep.iceberg.table_sink import IcebergTable

        iceberg = spec.sink.iceberg
        for original, n in IcebergTable(iceberg.catalog_conn_id, iceberg.table).provenance(since).items():
            if original[0] not in spec.source.topics:
                outputs.other_producers.append(f"{iceberg.table} rows of {original[0]}:{original[1]}@{original[2]}")
                continue
            outputs.actual[original] += n
            outputs.main[original] += n
            outputs.topics.setdefault(original, set()).add(table_mark(spec))
    return outputs


def verify(spec: PipelineSpec, store: CheckpointStore, spark: JobSession, since: int | None = None,
           progress: Callable[[int], None] | None = None, replay_store: CheckpointStore | None = None,
           log_starts: Mapping[TopicPartition, int] | None = None) -> VerifyReport:
    """``replay_store``: the store of the spec's replay pipeline (opened from the spec when None);
    ``log_starts``: the source partitions' log start offsets (read from the source when None)."""
    if replay_store is None:
        from lockstep.spark.dead_letter_replay import replay_spec
        from lockstep.steps.client_factory import checkpoint_store

        replay_store = checkpoint_store(replay_spec(spec))
    repaired: dict[int, str] = {}
    versions: dict[int, Mapping[str, TableVersion]] = {}
    schemas: dict[int, Mapping[str, int]] = {}
    codes: dict[int, SpecFingerprint | None] = {}
    covered = completed_ranges(store, since, repaired, versions, schemas, codes)
    if log_starts is None:
        log_starts = source_log_starts(spec, covered)
    ranges, unchecked = clip_to_log_start(covered, log_starts)
    routes: dict[Offset, set[str]] = {}
    to_table: Counter[Offset] = Counter()
    expected = expected_outputs(spec, spark, ranges, unchecked, routes, store, versions, schemas, to_table)
    replays = completed_replays(replay_store)
    outputs = read_outputs(spec, since, progress)
    gone = [u.range for u in unchecked]
    expected = Counter({k: n for k, n in expected.items() if not within(k, gone)})
    actual = Counter({k: n for k, n in outputs.actual.items() if not within(k, gone)})
    report = VerifyReport(sorted(covered), sum(r.count for rs in covered.values() for r in rs),
                          sum(expected.values()), sum(actual.values()),
                          replay=account(fed_counter(replays), outputs.replayed, outputs.in_sink),
                          replay_checkpoints=sorted(replays), unchecked=unchecked, unreadable=outputs.unreadable,
                          other_producers=outputs.other_producers, repaired=repaired)
    report.lost, report.duplicated, report.unexpected = compare_counts(expected, actual)
    report.misrouted = misrouted(routes, outputs.topics, gone)
    if spec.sink.table_only:  # the table is the sink: its rows against the outputs recomputed for it
        report.table = table_check(spec, since, to_table, gone, rows=outputs.main)
    elif spec.sink.iceberg is not None:
        # The replays' records are rows too. From a checkpoint on (``since``), the rows are the checkpoints' from
        # there, which a replay's do not number alike: the replayed offsets are left out of the table's check then
        # (the replay account above checks their records in the topic).
        tabled = outputs.table_records(lambda cid: _wrote_table(replay_store, cid))
        report.table = (table_check(spec, since, tabled, gone) if not since else
                        table_check(spec, since, outputs.main, gone, leave_out=set(outputs.replayed)))
    set_aside(report, other_code(spec, codes), ranges)
    return report


def _wrote_table(replay_store: CheckpointStore, checkpoint_id: int) -> bool:
    """Whether replay checkpoint ``checkpoint_id`` staged its records in the table (a replay made before replays kept
    ``sink.iceberg`` wrote the topic alone, so its records are no rows)."""
    view = replay_store.view(checkpoint_id)
    return view is not None and view.prepared is not None and view.prepared.iceberg is not None


def misrouted(expected: Mapping[Offset, set[str]], found: Mapping[Offset, set[str]],
              gone: list[OffsetRange]) -> list[tuple[Offset, str, str]]:
    """The outputs found in a sink topic other than the one the routes send them to (an input offset whose
    recomputed output is a dead letter expects only the dead-letter topic), as ``(input, found, expected)``.
    Offsets not recomputed (not covered, or gone) are left to the counts."""
    wrong = []
    for offset, topics in sorted(found.items()):
        want = expected.get(offset)
        if want is None or within(offset, gone):
            continue
        wrong += [(offset, topic, " or ".join(sorted(want))) for topic in sorted(topics - want)]
    return wrong


def source_log_starts(spec: PipelineSpec, ranges: dict[int, tuple[OffsetRange, ...]]) -> dict[TopicPartition, int]:
    """The log start offset of every partition the ranges cover, from the source cluster."""
    from lockstep.kafka.broker_offsets import log_start_offsets
    from lockstep.steps.client_factory import kafka_admin

    tps = sorted({r.tp for rs in ranges.values() for r in rs})
    return log_start_offsets(kafka_admin(spec.source.kafka_conn_id), tps) if tps else {}


def exit_code(report: VerifyReport | StateVerifyReport, drift_ok: bool = True) -> int:
    """0: exactly once, all checked; 1: loss, duplicates or unexpected outputs (or drift) found;
    2: nothing wrong found, but not everything could be checked (``report.unchecked`` says what)."""
    if not report.ok or not drift_ok:
        return 1
    return 0 if report.complete else 2


def verify_pipeline(spec: PipelineSpec, since: int | None = None,
                    progress: Callable[[int], None] | None = None) -> VerifyReport | StateVerifyReport:
    """The audit as ``lockstep verify`` and the demo run it: the spec's own checkpoint store, and
    for the expected outputs the Spark its checkpoints run on: a session of the pipeline's Spark
    Connect server in connect mode (no JVM to start here), else a local Spark session of its own.
    Either is stopped afterwards."""
    from lockstep.steps.client_factory import checkpoint_store

    store = checkpoint_store(spec)
    with audit_session(spec, "verify") as spark:
        if spec.state is not None:  # recomputed from the whole input: ``since`` does not apply
            from lockstep.ops.verify_state import verify_stateful

            return verify_stateful(spec, store, spark, progress)
        return verify(spec, store, spark, since, progress)


@contextmanager
def audit_session(spec: PipelineSpec, purpose: str) -> Iterator[JobSession]:
    """A Spark session where the pipeline's checkpoints run, for a tool that computes their output again
    (``verify``, ``replay --compare``): a session of its Spark Connect server in connect mode (no JVM to start
    here), else a local session of its own; stopped afterwards."""
    from lockstep.spark.target import CONNECT, spark_target

    target = spark_target(spec)
    if target.mode == CONNECT:
        from lockstep.spark.connect import connect_mode, new_session

        with connect_mode():
            spark = new_session(target.address)
            try:
                yield spark
            finally:
                spark.stop()
        return
    from lockstep.spark.conf import local_session

    session = local_session(f"lockstep-{purpose}-{spec.name}")
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
