"""``lockstep verify`` for a stateful pipeline: recompute its output from its whole committed input
in one batch, without its state files or checkpoint boundaries, and compare with the sink.

- **Windows**: every window the final watermark has passed, aggregated over every valid input record
  except those dead-lettered as ``late``, must be in the sink exactly once with the same value; no
  (key, window) may be there twice, and none the recompute does not expect.
- **Dedup**, by `lockstep.rules.dedup`'s definition of a copy: no two passed records of a key within
  the TTL of each other; every valid input record not dead-lettered as ``late`` passed or is a copy
  of a record that passed; every input record is accounted for exactly once (passed, dead-lettered
  as ``duplicate`` or ``late``, or dropped as a duplicate).
- **The committed state** (windows, dedup): the latest completed checkpoint's state files, each key
  group's chain of base and deltas merged, must hold exactly what the recompute leaves pending: the
  rows of every window the final watermark has not closed (or, a state of partial aggregates, each such
  window's aggregates and latest record, recomputed from the rows with the spec's aggregates); a
  dedup's passed records' event times until the watermark passes them plus twice the TTL (rows past
  that a chain still holds are not counted: they are dropped when read).
- **A state function**: run once over the whole input (one call per key, the final watermark); its
  outputs, as a multiset of values, must equal the sink's. A function whose output depends on how
  the input was cut into checkpoints differs by design: the report says so, it does not hide it.

What cannot be recomputed is reported, never guessed: history removed by retention (the first
retained checkpoint started from state), or restores (the same input read twice on purpose; a restore that goes
on where the checkpoint before it ended, as a rescale from a savepoint of the latest checkpoint does, reads
nothing twice and is recomputed).
"""
from __future__ import annotations

__all__ = [
    "SinkRecord", "StateVerifyReport", "cast_rows", "read_sink", "verify_stateful",
]

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lockstep.connections import kafka_config
from lockstep.kafka.client_configs import JAVA
from lockstep.model.offsets import OffsetRange
from lockstep.model.output_contract import (
    CHECKPOINT_HEADER,
    ERROR_HEADER,
    PIPELINE_HEADER,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)
from lockstep.spec import PipelineSpec
from lockstep.store.checkpoint_store import CheckpointStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lockstep.model.checkpoint import CheckpointView
    from lockstep.ops.table_check import TableCheck
    from lockstep.spark.target import JobSession
    from lockstep.spec import WindowSpec


@dataclass
class StateVerifyReport:
    operator: str
    checkpoints: list[int]
    covered_offsets: int
    expected_outputs: int = 0
    actual_outputs: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    #: outputs there once, with another value than the recompute's
    wrong: list[str] = field(default_factory=list)
    late: int = 0
    watermark: str | None = None
    #: state rows or keys that the committed state and the recompute do not agree on
    state_mismatched: list[str] = field(default_factory=list)
    #: the live rows of the committed state that were compared (None: not compared)
    state_rows: int | None = None
    #: what could not be recomputed, and why
    unchecked: list[str] = field(default_factory=list)
    note: str = ""
    #: With ``sink.iceberg``: the table's rows against the records of ``sink.topic`` (None: no table, or not read)
    table: TableCheck | None = None

    @property
    def complete(self) -> bool:
        return not self.unchecked

    @property
    def ok(self) -> bool:
        return (not (self.lost or self.duplicated or self.unexpected or self.wrong or self.state_mismatched)
                and (self.table is None or self.table.ok))

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "stateful": True, "operator": self.operator, "checkpoints": self.checkpoints,
                "covered_offsets": self.covered_offsets, "expected_outputs": self.expected_outputs,
                "actual_outputs": self.actual_outputs, "lost": len(self.lost), "duplicated": len(self.duplicated),
                "unexpected": len(self.unexpected), "wrong": len(self.wrong), "lost_sample": self.lost[:20],
                "duplicated_sample": self.duplicated[:20], "unexpected_sample": self.unexpected[:20],
                "wrong_sample": self.wrong[:20], "state_mismatched": len(self.state_mismatched),
                "state_mismatched_sample": self.state_mismatched[:20], "state_rows": self.state_rows,
                "late": self.late, "watermark": self.watermark,
                "complete": self.complete, "unchecked": self.unchecked, "note": self.note,
                **({"table": self.table.to_json()} if self.table is not None else {})}

    def summary(self) -> str:
        lines = [f"verified the {self.operator} state of {len(self.checkpoints)} completed checkpoints covering "
                 f"{self.covered_offsets} input offsets by recomputing them in one batch: {self.expected_outputs} "
                 f"outputs expected, {self.actual_outputs} found; {len(self.lost)} lost, {len(self.duplicated)} "
                 f"duplicated, {len(self.unexpected)} unexpected, {len(self.wrong)} with another value; "
                 f"{self.late} late records dead-lettered; watermark {self.watermark or 'none'}"]
        if self.state_rows is not None:
            lines.append(f"committed state: {self.state_rows} live rows, {len(self.state_mismatched)} not as recomputed")
        if self.table is not None:
            lines.append(self.table.summary())
        for name, items in (("lost", self.lost), ("duplicated", self.duplicated), ("unexpected", self.unexpected),
                            ("wrong", self.wrong), ("state not as recomputed", self.state_mismatched)):
            if items:
                lines.append(f"{name}: {', '.join(items[:5])}{' ...' if len(items) > 5 else ''}")
        lines += [f"not checked: {u}" for u in self.unchecked]
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)


@dataclass(frozen=True)
class SinkRecord:
    topic: str
    value: bytes
    error: str | None
    provenance: tuple[str, int, int] | None
    #: the checkpoint that wrote it (its ``lockstep.checkpoint`` header), None when unreadable
    checkpoint: int | None = None


def read_sink(spec: PipelineSpec, progress: Callable[[int], None] | None = None) -> list[SinkRecord]:
    """This pipeline's committed records in the sink and dead-letter topics."""
    from lockstep.kafka.reader import read_committed

    found: list[SinkRecord] = []

    def batch_read() -> None:
        if progress:
            progress(len(found))

    for record in read_committed(kafka_config(spec.sink.kafka_conn_id), (*spec.sink.topics, spec.sink.dead_letter_topic),
                                 f"lockstep-verify-{spec.name}", lambda topic: f"reading {topic} to verify {spec.name}",
                                 after_batch=batch_read):
        headers = dict(record.headers)
        owner = headers.get(PIPELINE_HEADER)
        if owner is not None and owner.decode(errors="replace") != spec.name:
            continue
        prov = None
        source_topic = headers.get(SOURCE_TOPIC)
        if source_topic is not None:
            prov = (source_topic.decode(), int(headers[SOURCE_PARTITION] or b"-1"), int(headers[SOURCE_OFFSET] or b"-1"))
        err = headers.get(ERROR_HEADER)
        written_by = headers.get(CHECKPOINT_HEADER)
        found.append(SinkRecord(record.topic, record.value or b"", err.decode() if err else None, prov,
                                int(written_by) if written_by and written_by.isdigit() else None))
    return found


def _continues(before: CheckpointView | None, restored: CheckpointView) -> bool:
    """A restore that goes on exactly where the checkpoint before it ended (a savepoint of the latest checkpoint,
    as a rescale takes one): from its state and its end offsets, nothing read twice, so one batch still
    recomputes it."""
    if before is None or before.completed is None or before.completed.state is None:
        return False
    base = restored.claim.state_base
    ends = before.completed.end_offsets
    return (base is not None and base.written_by == before.completed.state.written_by
            and all(r.start == ends.get(r.tp.key) for r in restored.claim.ranges)
            and set(ends) <= {r.tp.key for r in restored.claim.ranges})


def verify_stateful(spec: PipelineSpec, store: CheckpointStore, spark: JobSession,
                    progress: Callable[[int], None] | None = None) -> StateVerifyReport:
    from lockstep.spark.kafka_reader import read_ranges
    from lockstep.spark.keyed_state import LATE, keyed
    from lockstep.transform import load_transform

    assert spec.state is not None
    views = [v for v in (store.view(i) for i in store.checkpoint_ids()) if v is not None and v.completed is not None]
    report = StateVerifyReport(spec.state.operator, [v.checkpoint_id for v in views],
                               sum(r.count for v in views for r in v.delivered_ranges))
    if not views:
        report.unchecked.append("no checkpoint has completed yet")
        return report
    final = views[-1].completed.state if views[-1].completed is not None else None
    if views[0].claim.state_base is not None:
        report.unchecked.append(f"checkpoint {views[0].checkpoint_id}, the oldest retained, started from the state of "
                                f"checkpoint {views[0].claim.state_base.written_by}: the input before it is no longer "
                                "recorded (checkpoints.retain), so the state cannot be recomputed from the start")
        return report
    restored = [v.checkpoint_id for before, v in zip([None, *views], views, strict=False)
                if v.claim.restored_from is not None and not _continues(before, v)]
    if restored:
        report.unchecked.append(f"checkpoints {restored} restored from a savepoint or checkpoint: input read twice on "
                                "purpose cannot be recomputed as one batch")
        return report
    ranges = _merged([r for v in views for r in v.delivered_ranges])
    if isinstance(ranges, str):
        report.unchecked.append(ranges)
        return report
    if final is None or not ranges:
        report.unchecked.append("no state and no input recorded yet")
        return report
    from lockstep.model.state_manifest import iso_ms

    report.watermark = iso_ms(final.watermark_ms)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    from lockstep.formats.codecs import Formats

    # The transform's input and output in the spec's formats, as the runs made them: each checkpoint's records
    # decoded with the schema ids its claim pinned (not the registry's latest, which may have moved since);
    # the records that do not decode are dead letters, never the state's.
    pinned = _by_pins(views)
    if isinstance(pinned, str):
        report.unchecked.append(pinned)
        return report
    kafka, transform = kafka_config(spec.source.kafka_conn_id, JAVA), load_transform(spec)
    frames = [Formats(spec, dict(pins), read={r.topic for r in rs}).transformed(read_ranges(spark, kafka, rs),
                                                                                 transform)[0]
              for pins, rs in pinned.items()]
    transformed = frames[0]
    for frame in frames[1:]:
        transformed = transformed.unionByName(frame, allowMissingColumns=True)
    x = keyed(spec, transformed)
    sink = read_sink(spec, progress)
    late = [r.provenance for r in sink if r.error == LATE and r.provenance is not None]
    report.late = len(late)
    good = x.filter("error IS NULL")
    if late:
        gone = cast_rows(spark, late)
        good = good.join(gone, ["topic", "partition", "offset"], "left_anti")
    outputs = [r for r in sink if r.topic == spec.sink.topic]
    if spec.sink.iceberg is not None:
        from collections import Counter

        from lockstep.ops.table_check import table_check

        report.table = table_check(spec, None, Counter(r.provenance for r in outputs if r.provenance is not None), [])
    committed = store.state_files().read_state(final)
    if spec.state.window is not None:
        from lockstep.rules.window_drain import drained

        continued = drained(spec.state, final)  # the sizes its windows had before (`lockstep.rules.window_drain`)
        windowed = spec if isinstance(continued, str) else replace(spec, state=continued)
        _check_windows(windowed, good, final.watermark_ms, outputs, report, _value_docs(spark, spec, outputs),
                       _aggregates_by_checkpoint(views))
        _check_window_state(windowed, good, final.watermark_ms, committed, report)
    elif spec.state.dedup is not None:
        _check_dedup(spec, good, sink, report, final.watermark_ms, committed)
    else:
        _check_function(spec, good, final.watermark_ms, outputs, report)
    _set_aside_other_code(spec, views, report)
    return report


def _set_aside_other_code(spec: PipelineSpec, views: list[CheckpointView], report: StateVerifyReport) -> None:
    """When today's code finds differences and some checkpoints were written by other code
    (`lockstep.steps.code_version`), the differences are reported as not checked, naming those checkpoints and
    what differs: the state's history is recomputed in one batch from its start, with today's code, which cannot
    say what other code should have written (a new filter is no loss). A change whose history recomputes alike
    (new window aggregates over kept rows, checked window by window) stays checked."""
    from lockstep.steps.code_version import code_changes, code_fingerprint

    if report.ok:
        return
    now = code_fingerprint(spec)
    other = {v.checkpoint_id: code_changes(v.claim.code, now) for v in views}
    other = {cid: parts for cid, parts in other.items() if parts}
    if not other:
        return
    found = [*report.lost, *report.duplicated, *report.unexpected, *report.wrong, *report.state_mismatched]
    parts = sorted({p for ps in other.values() for p in ps})
    ids = sorted(other)
    report.unchecked.append(
        f"checkpoint{'s' if len(ids) > 1 else ''} {_spans(ids)} written by other code "
        f"({'their' if len(ids) > 1 else 'its'} {', '.join(parts)} "
        f"{'is' if len(parts) == 1 else 'are'} not the spec's now), and recomputing the state's history with today's "
        f"code finds {len(found)} differences ({', '.join(found[:3])}{' ...' if len(found) > 3 else ''}): verify "
        "with the spec and code that wrote them; `lockstep replay --compare` shows, checkpoint by checkpoint, what "
        "today's code would write instead")
    report.lost, report.duplicated, report.unexpected, report.wrong, report.state_mismatched = [], [], [], [], []


def _spans(ids: list[int]) -> str:
    """``1-3, 7``: sorted ids as runs."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def cast_rows(spark: JobSession, offsets: list[tuple[str, int, int]]) -> DataFrame:
    from typing import cast

    from pyspark.sql import SparkSession

    return cast(SparkSession, spark).createDataFrame(offsets, "topic string, partition int, offset bigint")


def _by_pins(views: list[CheckpointView]) -> dict[tuple[tuple[str, int], ...], tuple[OffsetRange, ...]] | str:
    """The completed checkpoints' input by the schema ids their claims pinned, one range per partition each
    (most pipelines: one set of pins), or why it cannot be read so (a set of pins whose checkpoints are not
    contiguous: the spec's schemas changed and changed back)."""
    by_pins: dict[tuple[tuple[str, int], ...], list[OffsetRange]] = {}
    for v in views:
        by_pins.setdefault(tuple(sorted(v.claim.schema_ids.items())), []).extend(v.delivered_ranges)
    merged: dict[tuple[tuple[str, int], ...], tuple[OffsetRange, ...]] = {}
    for pins, ranges in by_pins.items():
        one = _merged(ranges)
        if isinstance(one, str):
            return f"{one} (among the checkpoints that pinned the schema ids {dict(pins)})"
        if one:
            merged[pins] = one
    return merged


def _merged(ranges: list[OffsetRange]) -> tuple[OffsetRange, ...] | str:
    """The delivered ranges as one range per partition, or why they are not contiguous."""
    by_tp: dict[Any, list[OffsetRange]] = {}
    for r in ranges:
        if not r.is_empty:
            by_tp.setdefault(r.tp, []).append(r)
    merged = []
    for tp, rs in sorted(by_tp.items()):
        rs.sort(key=lambda r: r.start)
        for a, b in zip(rs, rs[1:], strict=False):
            if b.start != a.end:
                return (f"{tp.key}: the completed checkpoints' ranges are not contiguous ({a} then {b}): input "
                        "skipped or read twice cannot be recomputed as one batch")
        merged.append(OffsetRange(tp.topic, tp.partition, rs[0].start, rs[-1].end))
    return tuple(merged)


def _compare(report: StateVerifyReport, expected: dict[str, Any], actual: list[tuple[str, Any]]) -> None:
    counts = Counter(k for k, _ in actual)
    values = dict(actual)
    report.expected_outputs, report.actual_outputs = len(expected), len(actual)
    report.lost = sorted(k for k in expected if k not in counts)
    report.duplicated = sorted(k for k, n in counts.items() if n > 1)
    report.unexpected = sorted(k for k in counts if k not in expected)
    report.wrong = sorted(f"{k}: {values[k]} (expected {expected[k]})" for k in expected
                          if k in values and values[k] != expected[k])


def _value_docs(spark: JobSession, spec: PipelineSpec, outputs: list[SinkRecord]) -> list[dict[str, Any]]:
    """The sink records' values as JSON documents: decoded with the sink's schemas (by each record's id) when
    the sink writes Avro or the registry's JSON, else read as the JSON they are."""
    from typing import cast

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lockstep.formats.codecs import DATA_COLUMN, decode, sink_reading

    reading = sink_reading(spec)
    if reading is None:
        return [json.loads(r.value) for r in outputs]
    frame = cast(SparkSession, spark).createDataFrame([(spec.sink.topic, r.value) for r in outputs],
                                                      "topic string, value binary")
    rows = decode(frame, [reading]).select(F.to_json(DATA_COLUMN["value"]).alias("doc")).collect()
    return [json.loads(r["doc"]) if r["doc"] is not None else {} for r in rows]


Aggregates = tuple[tuple[str, str], ...]


def _aggregates_by_checkpoint(views: list[CheckpointView]) -> dict[int, Aggregates]:
    """The window aggregates each completed checkpoint fired its windows with, as its state's shape records them
    (`lockstep.rules.state_base.state_shape`); a state of an earlier version recorded none."""
    found: dict[int, Aggregates] = {}
    for v in views:
        state = v.completed.state if v.completed is not None else None
        aggregates = state.shape.get("aggregates") if state is not None else None
        if isinstance(aggregates, list):
            found[v.checkpoint_id] = tuple((str(name), str(expr)) for name, expr in aggregates)
    return found


def _check_windows(spec: PipelineSpec, good: DataFrame, watermark: int | None, outputs: list[SinkRecord],
                   report: StateVerifyReport, docs: list[dict[str, Any]] | None = None,
                   fired_with: dict[int, Aggregates] | None = None) -> None:
    """Every window the watermark closed, once, with its aggregates' values: each window's output is compared with
    the window recomputed with the aggregates of the checkpoint that fired it (``fired_with``; the spec's for a
    checkpoint that recorded none), so a change of aggregates is checked on both sides of it."""
    assert spec.state is not None and spec.state.window is not None
    w = spec.state.window
    docs = docs if docs is not None else [json.loads(r.value) for r in outputs]
    actual = [(f"{doc.get(w.key_name)}@{doc.get('window_start')}", _same(doc)) for doc in docs]
    used = {r.checkpoint: (fired_with or {}).get(r.checkpoint, w.aggregates) if r.checkpoint is not None
            else w.aggregates for r in outputs}
    by_aggregates = {aggregates: _expected_windows(replace(w, aggregates=aggregates), good, watermark)
                     for aggregates in {w.aggregates, *used.values()}}
    expected = dict(by_aggregates[w.aggregates])
    for (key, _), r in zip(actual, outputs, strict=True):  # each output against its checkpoint's aggregates
        of_its_own = by_aggregates[used[r.checkpoint]]
        if key in of_its_own:
            expected[key] = of_its_own[key]
    _compare(report, expected, actual)


def _expected_windows(w: WindowSpec, good: DataFrame, watermark: int | None) -> dict[str, Any]:
    """The windows the watermark closed, recomputed with ``w``'s aggregates, by ``<key>@<window start>``."""
    from pyspark.sql import functions as F

    from lockstep.model.state_rows import KEY
    from lockstep.spark.keyed_state import size_of, window_starts_column, window_value

    if watermark is None:
        return {}
    windows = good.withColumn("__ls_start", F.explode(window_starts_column(w)))
    end = F.col("__ls_start") + size_of(w, F.col("__ls_start")) + F.lit(w.allowed_lateness_ms)
    fired = windows.filter(end <= F.lit(watermark))
    rows = (fired.groupBy(KEY, "__ls_start").agg(*[F.expr(e).alias(n) for n, e in w.aggregates])
            .select(window_value(w).alias("v")).collect())
    expected = {}
    for row in rows:
        doc = json.loads(row["v"])
        expected[f"{doc[w.key_name]}@{doc['window_start']}"] = _same(doc)
    return expected


def _same(value: Any) -> Any:
    """A value as the window checks compare it: floating values (in documents too) to 9 significant digits. A
    floating sum depends on the order it adds in: the run's partial sums across checkpoints, or its partitions,
    add in another order than the recompute's one batch, and may differ in the last digits."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _same(v) for k, v in value.items()}
    return value


def _differ(report: StateVerifyReport, expected: Counter[Any], actual: Counter[Any]) -> None:
    report.state_rows = sum(actual.values())
    report.state_mismatched = ([f"missing from the state: {k}" for k in sorted(expected - actual, key=str)]
                               + [f"in the state, not expected: {k}" for k in sorted(actual - expected, key=str)])


def _check_window_state(spec: PipelineSpec, good: DataFrame, watermark: int | None, committed: Any,
                        report: StateVerifyReport) -> None:
    """The state holds each valid record of every window the watermark has not closed, once; or, a state of
    partial aggregates, each such window's aggregates over them and its latest record."""
    from pyspark.sql import functions as F

    from lockstep.model.state_rows import EVENT, KEY, is_partial_window
    from lockstep.spark.keyed_state import last_window_end

    assert spec.state is not None and spec.state.window is not None
    w = spec.state.window
    if committed is not None and is_partial_window(committed.column_names):
        _check_window_partials(spec, good, watermark, committed, report)
        return
    last_end = last_window_end(w, F.col(EVENT)) + F.lit(w.allowed_lateness_ms)
    pending = good if watermark is None else good.filter(last_end > F.lit(watermark))
    columns = (KEY, "topic", "partition", "offset")
    expected = Counter(tuple(r) for r in pending.select(*columns).collect())
    actual = Counter(tuple(r[c] for c in columns) for r in committed.to_pylist()) if committed is not None else Counter()
    _differ(report, expected, actual)


def _check_window_partials(spec: PipelineSpec, good: DataFrame, watermark: int | None, committed: Any,
                           report: StateVerifyReport) -> None:
    """Each window the watermark has not closed, recomputed from every valid record with the spec's own
    aggregates (not from partials): its aggregates and the event time and provenance of its latest record,
    against the state's row of it (floating values as `_same` reads them)."""
    from pyspark.sql import functions as F

    from lockstep.model.state_rows import EVENT, FROM_OFFSET, FROM_PARTITION, FROM_TOPIC, KEY, WINDOW_START
    from lockstep.rules.window_partials import kept_partials
    from lockstep.spark.keyed_state import size_of, window_starts_column

    assert spec.state is not None and spec.state.window is not None
    w = spec.state.window
    windows = good.withColumn(WINDOW_START, F.explode(window_starts_column(w)))
    if watermark is not None:
        end = F.col(WINDOW_START) + size_of(w, F.col(WINDOW_START)) + F.lit(w.allowed_lateness_ms)
        windows = windows.filter(end > F.lit(watermark))
    names = [n for n, _ in w.aggregates]
    partials = kept_partials(w)
    assert partials is not None  # a state of partials goes on only under aggregates that merge
    recomputed = (windows.groupBy(KEY, WINDOW_START)
                  .agg(F.max(F.struct(EVENT, "topic", "partition", "offset")).alias("latest"),
                       *[F.expr(e).alias(n) for n, e in w.aggregates])
                  .select(KEY, WINDOW_START, "latest.*", *names).collect())

    expected = Counter(tuple(_same(v) for v in r) for r in recomputed)
    columns = (KEY, WINDOW_START, EVENT, FROM_TOPIC, FROM_PARTITION, FROM_OFFSET, *[p.column for p in partials])
    actual = Counter(tuple(_same(r.get(c)) for c in columns) for r in committed.to_pylist())
    _differ(report, expected, actual)


def _check_dedup(spec: PipelineSpec, good: DataFrame, sink: list[SinkRecord], report: StateVerifyReport,
                 watermark: int | None = None, committed: Any = None) -> None:
    """The sink against `lockstep.rules.dedup`'s rule (``audit``), the definition the operator and the
    state's retention follow. Which records pass may depend on where checkpoints cut the input (a
    key whose records span more than the TTL), so the checks are the rule's, not a recomputed set:
    each key at least once (``expected_outputs`` counts keys), no two passed records of a key within
    the TTL (duplicated), every valid record not dead-lettered as late passed or is a copy of one
    that did (lost), and the committed state holds each passed record the watermark has not let go."""
    from lockstep.model.state_rows import EVENT, KEY
    from lockstep.rules.dedup import Record, audit, retained
    from lockstep.spark.keyed_state import DUPLICATE

    assert spec.state is not None and spec.state.dedup is not None
    rows = good.select(KEY, EVENT, "topic", "partition", "offset").collect()
    key_of = {(r["topic"], r["partition"], r["offset"]): (r[KEY], Record(r[EVENT], r["topic"], r["partition"], r["offset"]))
              for r in rows}
    records: dict[str, list[Record]] = {}
    for key, record in key_of.values():
        records.setdefault(key, []).append(record)
    passed = [key_of.get(r.provenance) for r in sink if r.topic == spec.sink.topic and r.provenance]
    duplicates = sum(1 for r in sink if r.error == DUPLICATE)
    report.expected_outputs = len(records)
    report.actual_outputs = len(passed)
    report.unexpected = sorted(f"{r.provenance}" for r in sink if r.topic == spec.sink.topic
                               and r.provenance not in key_of)
    by_key: dict[str, list[Record]] = {}
    for found in passed:
        if found is not None:
            by_key.setdefault(found[0], []).append(found[1])
    ttl = spec.state.dedup.ttl_ms
    checked = audit(records, by_key, ttl, watermark)
    report.lost = [f"{k} at {r.topic}:{r.partition}:{r.offset} (event {r.event_ms} ms)" for k, r in checked.uncovered]
    report.duplicated = checked.too_close
    if spec.state.dedup.duplicates == "dead_letter" and len(passed) + duplicates != len(key_of):
        report.wrong.append(f"{len(key_of)} valid input records, but {len(passed)} passed and {duplicates} "
                            "dead-lettered as duplicates")
    # The state: each passed record's event time, until the watermark lets it go (rows past that are
    # not counted: they are dropped when read).
    live = [] if committed is None else \
        [r for r in committed.select([KEY, EVENT]).to_pylist() if retained(r[EVENT], ttl, watermark)]
    _differ(report, checked.held, Counter((r[KEY], r[EVENT]) for r in live))


def _check_function(spec: PipelineSpec, good: DataFrame, watermark: int | None, outputs: list[SinkRecord],
                    report: StateVerifyReport) -> None:
    from pyspark.sql import functions as F

    from lockstep.model.state_rows import EVENT, INTERNAL
    from lockstep.spark.keyed_state import empty_frame
    from lockstep.spark.state_worker import (
        KEY,
        KIND,
        FunctionSettings,
        apply_function,
        result_columns,
        schema_ddl,
        state_columns,
    )

    assert spec.state is not None and spec.state.function is not None
    f = spec.state.function
    columns = [c for c in good.columns if c not in ("error", "headers") and c not in INTERNAL]
    seen = [c if c != EVENT else "event_time_ms" for c in (*columns, EVENT)]
    settings = FunctionSettings(f.process, f.fields, watermark, tuple(seen), options=tuple(f.options.items()))
    empty = empty_frame(good.sparkSession, state_columns(f.fields))
    result = (good.select(*columns, *INTERNAL).groupBy(KEY).cogroup(empty.groupBy(KEY))
              .applyInPandas(apply_function(settings), schema_ddl(result_columns(f.fields))))
    expected = Counter(bytes(r["value"]) for r in result.filter(F.col(KIND) == "out").select("value").collect())
    actual = Counter(r.value for r in outputs)
    report.expected_outputs, report.actual_outputs = sum(expected.values()), sum(actual.values())
    report.lost = sorted(v.decode(errors="replace") for v in expected - actual)
    report.unexpected = sorted(v.decode(errors="replace") for v in actual - expected)
    report.note = ("a state function is checked against one run over the whole input: a function whose output "
                   "depends on where checkpoints cut the input differs from it by design")
