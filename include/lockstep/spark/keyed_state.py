"""Keyed state in a stateful pipeline's Spark run: load the state the checkpoint starts from, apply
the operator (event-time windows or dedup) to the checkpoint's records, write the new state files.
This module runs those steps in order (:func:`start`, then :meth:`StatefulRun.finish`); each has its
own module in ``lockstep.spark``.

The operators are Spark SQL on DataFrames, so they run in the JVM in classic and Connect sessions
alike. The checkpoint is one batch (`lockstep.rules.watermarks`): records are judged late against
the watermark the base state left, and windows fire when this checkpoint's records move the
watermark past their end plus the allowed lateness. The records come keyed (`lockstep.spark.keyed_rows`).

- **Windows** (`lockstep.spark.windows`) keep, of each window that has not fired, its partial aggregates
  when every aggregate merges (`lockstep.rules.window_partials`), else its rows (all the columns the
  transform gives but ``value``, ``key``, ``headers`` and ``error``), so any Spark SQL aggregate is
  computed exactly when its window fires, over the rows of every checkpoint that fed it. A fired
  window's output names, as its provenance, the latest record (by event time) that it counted.
- **Dedup** (`lockstep.spark.dedup_run`) follows `lockstep.rules.dedup`: a record within the TTL of a
  passed record of its key is a copy, dropped or dead-lettered (error ``duplicate``); the state holds
  each passed record's event time until the watermark passes it plus twice the TTL. Its output keeps
  each source partition's order. The driver judges (`lockstep.spark.dedup_judge`) over the records
  collected narrow; Spark marks the output by one join. A re-keying checkpoint judges in Spark
  (`lockstep.spark.dedup_run`'s ``_dedup``).
- A record of a window that already fired, or older than the watermark less the dedup TTL, goes to
  the dead-letter topic with the error ``late``, in the checkpoint's transactions like every other
  dead letter.
- The transform's own ``headers`` stay on every output that is one of its records: dedup's passing
  records, and every dead letter (bad, late, duplicate). A fired window is no one record's, so its
  output carries Lockstep's provenance headers only; a state function's outputs carry the headers
  it returns with them (`lockstep.state_function`, run by `lockstep.spark.state_function_run`).

The state is incremental (`lockstep.store.state_chain`, `lockstep.rules.state_reads`): the driver
reads (`lockstep.spark.state_read`), of each key group the records touch, the rows of the touched keys
(every row of a group with a due timer) and hands Spark only those; Spark's new rows of those keys come
back (``toArrow``) and the driver writes (`lockstep.spark.state_write`) a delta per group, or a new base
when the group was read whole or its chain is compacted. The files come before ``prepared.json``, whose
manifest names them. What a checkpoint read and wrote is in the manifest's ``metrics``.
"""
from __future__ import annotations

#: Besides the run's own names, those of its steps' modules that other modules import from here.
__all__ = [
    "DUPLICATE", "LATE", "StateAfter", "collect_slices", "empty_frame", "event_ms", "function_modules",
    "judged_on_driver", "keyed", "last_window_end", "size_of", "window_starts_column", "window_value",
]

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from lockstep.errors import CheckpointError
from lockstep.formats.codecs import decoded_columns
from lockstep.model.checkpoint import CheckpointClaim
from lockstep.model.state_manifest import StateManifest, iso_ms
from lockstep.model.state_rows import EVENT, GROUP, INTERNAL, KEY, is_partial_window
from lockstep.rules.dedup import state_lifetime_ms
from lockstep.rules.output_tasks import task_of_partition
from lockstep.rules.state_base import base_refusal, schema_change
from lockstep.rules.state_reads import ReadPlan, read_plan
from lockstep.rules.watermarks import EventClock, advance
from lockstep.rules.window_drain import drained
from lockstep.rules.window_partials import kept_partials
from lockstep.spark.dedup_run import (
    ON_SERVER,
    SPARK_PARTITION,
    _beside_loaded,
    _collect,
    _dedup,
    _dedup_on_driver,
    _read_in_place,
    collect_slices,
)
from lockstep.spark.keyed_rows import DUPLICATE, LATE, NOT_STATE, _records, empty_frame, event_ms, keyed
from lockstep.spark.state_function_run import _function, function_modules
from lockstep.spark.state_read import Loaded, _load
from lockstep.spark.state_worker import state_columns
from lockstep.spark.state_write import _write
from lockstep.spark.windows import (
    _late_for_windows,
    _windows,
    last_window_end,
    partial_shape,
    size_of,
    window_starts_column,
    window_state_refusal,
    window_value,
)
from lockstep.spec import PipelineSpec, StateSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

    from lockstep.spark.target import JobSession
    from lockstep.store.state_files import StateFiles

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StateAfter:
    """The state a checkpoint's run leaves where the run changed it, without writing it: the new rows of every
    key it read or gave records to (``rows``, none past their lifetime), those keys (``touched``: a key read and
    let go has no rows), and the watermark. Every other key's rows are the base's."""

    rows: pa.Table
    touched: frozenset[str]
    #: the key groups of the keys touched
    groups: frozenset[int]
    watermark_ms: int | None


@dataclass
class StatefulRun:
    """One checkpoint's stateful step: ``output`` for the writer, then :meth:`finish` writes the state."""

    output: DataFrame
    clock: EventClock
    _finish: Callable[[], StateManifest]
    metrics: dict[str, float] = field(default_factory=dict)
    #: the frames the run keeps (persisted) until its state is written, or it is discarded
    cached: list[DataFrame] = field(default_factory=list)
    #: ``output`` is in the partitions its records were read in, each its task's, each source partition's
    #: records in offset order (checked on the records collected), so the writer takes it as it is
    in_place: bool = False

    #: the state the run leaves, not written (`StateAfter`): what ``lockstep replay --compare`` compares
    _after: Callable[[], StateAfter] | None = None

    def finish(self) -> StateManifest:
        return self._finish()

    def after(self) -> StateAfter:
        """The state this run leaves where it changed it, without writing it."""
        assert self._after is not None  # every run `start` makes has one
        return self._after()

    def discard(self) -> None:
        """Let go of what the run kept without writing its state (a repair's recomputation)."""
        for frame in self.cached:
            frame.unpersist()


def judged_on_driver(spec: PipelineSpec, base: StateManifest | None) -> bool:
    """Whether the checkpoint's dedup is judged on the driver (`lockstep.spark.dedup_judge`): a dedup's held
    keys never change, so the passed records go beside the rows loaded; not when re-keying, where Spark
    computes every row's new key group and judges in the JVM (`lockstep.spark.dedup_run`). Its output is then the
    records read, marked: it can stay in the partitions they were read in (``StatefulRun.in_place``)."""
    return (spec.state is not None and spec.state.dedup is not None
            and (base is None or base.key_groups == spec.state.key_groups))


def start(spark: JobSession, spec: PipelineSpec, claim: CheckpointClaim, transformed: DataFrame,
          files: StateFiles, window_encoder: Callable[[Column], Column] | None = None,
          read_by_task: int | None = None) -> StatefulRun:
    """Apply the spec's stateful operator to this checkpoint's transformed records.

    ``window_encoder``: how a fired window's record becomes its value in the sink's format
    (`lockstep.formats.codecs.window_encoder`); None: JSON. ``read_by_task``: the records were read in this
    many Spark partitions, partition ``t`` holding task ``t``'s source partitions
    (`lockstep.rules.output_tasks.task_groups`).

    Nothing here reads the wall clock: idleness is measured against the clock the claim pinned
    (``claim.clock``), so every attempt over the claim decides the same way."""
    from pyspark.sql import functions as F

    assert spec.state is not None
    state = spec.state
    cid = claim.checkpoint_id
    base = claim.state_base
    _arrow_memory()
    refused = base_refusal(spec, base, files.rekey_to())
    if refused is None and state.window is not None and base is not None and base.all_files:
        refused = window_state_refusal(state.window, list(base.columns), base.written_by)
    if refused:
        raise CheckpointError(cid, refused)
    continued = drained(state, base)  # a window's earlier sizes (not refused: base_refusal would have said)
    if not isinstance(continued, str) and continued is not state and continued.window is not None:
        state, spec, w = continued, replace(spec, state=continued), continued.window
        if base is not None and base.shape.get("size_ms") != w.size_ms:
            size, until = w.earlier[-1]
            log.warning("checkpoint %d: the windows' size changed from %d ms to %d ms: the windows of records before "
                        "%s fire at %d ms, those from then on at %d ms", cid, size, w.size_ms, iso_ms(until), size,
                        w.size_ms)
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # window bounds are written in UTC
    # The decoded input (`data`, `key_data`: docs/formats.md) served the key and the event time; the state
    # keeps the transform's own columns.
    decoded = decoded_columns(spec)
    x = _input(spec, transformed, decoded, base).persist()
    started = time.monotonic()
    good = x.filter(F.col("error").isNull())
    # The records collected narrow give the watermark's event times too.
    records, in_place = _collected(spec, claim, good, read_by_task)
    seen = _seen(good) if records is None and base is not None and base.all_files else None
    clock = _clock(state, claim, good, records if records is not None else seen)
    metrics = {"watermark_seconds": round(time.monotonic() - started, 3)}
    log.info("checkpoint %d: watermark %s -> %s%s", cid, iso_ms(clock.before), iso_ms(clock.after),
             f" (idle partitions: {', '.join(clock.idle)})" if clock.idle else "")
    data_columns = [c for c in transformed.columns if c not in NOT_STATE and c not in INTERNAL and c not in decoded]
    started = time.monotonic()
    shape = _shape(spark, state, x, data_columns, base)
    want = {f.name: f.dataType.simpleString() for f in shape.schema.fields}
    plan, loaded, current = _read_base(spark, spec, claim, files, shape, want, good, clock, records, seen)
    metrics["load_seconds"] = round(time.monotonic() - started, 3)
    metrics["rows_loaded"] = float(sum(t.num_rows for t in loaded.selected.values()))
    metrics["groups_read"] = float(len(loaded.chains))
    if records is not None:
        applied = _apply_on_driver(spark, state, cid, clock, x, records, loaded, in_place, want, metrics)
    else:
        record_columns = [c for c in transformed.columns if c not in ("error", "headers", *decoded)]
        applied = _apply_in_spark(state, clock, x, good, current, data_columns, record_columns, window_encoder)
    finish = functools.partial(_finish, spec, cid, base, plan, loaded, files, clock, metrics, applied)
    return StatefulRun(applied.output, clock, finish, metrics, applied.cached, applied.in_place,
                       functools.partial(_after, state, clock, loaded, applied))


def _input(spec: PipelineSpec, transformed: DataFrame, decoded: Sequence[str], base: StateManifest | None) -> DataFrame:
    """The transform's rows keyed (`lockstep.spark.keyed_rows.keyed`), without the decoded input's columns;
    a window's keep a record's value and headers only where it goes to the dead-letter topic."""
    from pyspark.sql import functions as F

    assert spec.state is not None
    x = keyed(spec, transformed).drop(*decoded)
    if spec.state.window is not None:
        # A window's output is its aggregate, never a record's value: only the records that go to the
        # dead-letter topic as they came (errors, and records late against the base's watermark) keep
        # theirs in the cached frame, which is then a fraction of the input's bytes.
        before = base.watermark_ms if base else None
        as_record = F.col("error").isNotNull() | _late_for_windows(spec.state.window, before)
        x = x.withColumn("value", F.when(as_record, F.col("value")))
        if "headers" in x.columns:  # the same for the transform's headers: only dead letters write them
            x = x.withColumn("headers", F.when(as_record, F.col("headers")))
    return x


def _collected(spec: PipelineSpec, claim: CheckpointClaim, good: DataFrame,
               read_by_task: int | None) -> tuple[pa.Table | None, bool]:
    """(the valid records collected narrow, for a dedup judged on the driver, else None; whether its output
    can stay in the partitions they were read in, each source partition's in offset order)."""
    on_driver = judged_on_driver(spec, claim.state_base)
    records = _collect(good, claim.ranges, read_by_task is not None) if on_driver else None
    in_place = False
    if records is not None and read_by_task is not None:
        in_place = _read_in_place(records, task_of_partition(claim.ranges, read_by_task))
        records = records.drop_columns([SPARK_PARTITION])
        if not in_place:
            log.info("checkpoint %d: the transform moved records between Spark partitions or out of offset order: "
                     "the output is placed by a shuffle", claim.checkpoint_id)
    return records, in_place


def _seen(good: DataFrame) -> pa.Table:
    """Each (source partition, key) of the records with their latest event time, in one Spark job: the
    watermark's event times and the keys whose state the checkpoint reads (`lockstep.spark.state_read`), which
    were two jobs over the records."""
    from pyspark.sql import functions as F

    return good.groupBy("topic", "partition", KEY, GROUP).agg(F.max(EVENT).alias(EVENT)).toArrow()


def _clock(state: StateSpec, claim: CheckpointClaim, good: DataFrame, records: pa.Table | None) -> EventClock:
    """The watermark this checkpoint moves to (`lockstep.rules.watermarks.advance`), from each source
    partition's latest event time: of the records collected (or `_seen`) when there are, else computed by Spark."""
    from pyspark.sql import functions as F

    base = claim.state_base
    if records is not None:
        highest = records.group_by(["topic", "partition"]).aggregate([(EVENT, "max")])
        seen = [{"topic": t, "partition": p, "m": m} for t, p, m in zip(
            highest["topic"].to_pylist(), highest["partition"].to_pylist(), highest[f"{EVENT}_max"].to_pylist(),
            strict=True)]
    else:
        seen = [r.asDict() for r in good.groupBy("topic", "partition").agg(F.max(EVENT).alias("m")).collect()]
    return advance(base.partitions if base else {}, base.watermark_ms if base else None,
                   {f"{r['topic']}:{r['partition']}": int(r["m"]) for r in seen},
                   [r.tp.key for r in claim.ranges], claim.clock,
                   state.event_time.out_of_orderness_ms, state.event_time.idle_timeout_ms,
                   state.event_time.idle_advance)


def _shape(spark: JobSession, state: StateSpec, x: DataFrame, data_columns: list[str],
           base: StateManifest | None) -> DataFrame:
    """An empty frame of the state's columns as this checkpoint reads them: a function's fields, a window's
    partial aggregates (`lockstep.spark.windows`) or its data columns (the windows' rows; also a state of rows
    that becomes partials now), or a dedup's internal columns alone."""
    if state.function is not None:
        return empty_frame(spark, state_columns(state.function.fields))
    if state.window is not None:
        rows = x.select(*INTERNAL, *data_columns)
        if kept_partials(state.window) is not None and (base is None or not base.all_files
                                                  or is_partial_window(base.columns)):
            return partial_shape(state.window, rows)
        return rows
    return x.select(*INTERNAL)


def _read_base(spark: JobSession, spec: PipelineSpec, claim: CheckpointClaim, files: StateFiles, shape: DataFrame,
               want: dict[str, str], good: DataFrame, clock: EventClock,
               records: pa.Table | None, seen: pa.Table | None = None) -> tuple[ReadPlan, Loaded, DataFrame]:
    """(what the checkpoint reads, what it read, the rows loaded less those past their lifetime): the
    base state's rows this checkpoint needs (`lockstep.spark.state_read`)."""
    from pyspark.sql import functions as F

    state = spec.state
    assert state is not None
    base, cid = claim.state_base, claim.checkpoint_id
    migrating = bool(base and base.all_files and state.function is not None and state.function.migrate
                     and schema_change(base.columns, want))
    plan = read_plan(base, state, clock.after, migrating)
    if plan.full:
        log.info("checkpoint %d: reading and writing the whole state: %s", cid, plan.why)
    with files.caching_later():  # the decoded files go to the local cache while Spark writes the output
        loaded = _load(spark, spec, cid, base, files, shape, good, plan, records, seen)
    current = loaded.frame
    lifetime = state_lifetime_ms(state)
    if lifetime is not None and clock.before is not None:  # rows past their lifetime read as absent (and are dropped)
        current = current.filter(F.col(EVENT) + F.lit(lifetime) > F.lit(clock.before))
    return plan, loaded, current


@dataclass
class _Applied:
    """What the operator made of the checkpoint: ``output`` for the writer, the state's ``columns``, and its
    new rows as Spark computes them (``new_state``) or as the driver added them (``added``)."""

    output: DataFrame
    columns: dict[str, str]
    cached: list[DataFrame]
    new_state: DataFrame | None = None
    added: pa.Table | None = None
    in_place: bool = False


def _apply_on_driver(spark: JobSession, state: StateSpec, cid: int, clock: EventClock, x: DataFrame,
                     records: pa.Table, loaded: Loaded, in_place: bool, want: dict[str, str],
                     metrics: dict[str, float]) -> _Applied:
    """A dedup judged on the driver (`lockstep.spark.dedup_run._dedup_on_driver`)."""
    started = time.monotonic()
    output, added, marked = _dedup_on_driver(spark, state, clock, x, records, loaded)
    in_place = in_place and not marked.endswith(ON_SERVER)  # marks kept there are joined by a shuffle
    log.info("checkpoint %d: dedup judged %d records on the driver, marked %s%s", cid, records.num_rows, marked,
             "; the output stays in the partitions it was read in" if in_place else "")
    metrics["apply_seconds"] = round(time.monotonic() - started, 3)
    return _Applied(output, dict(want), [x], added=added, in_place=in_place)


def _apply_in_spark(state: StateSpec, clock: EventClock, x: DataFrame, good: DataFrame, current: DataFrame,
                    data_columns: list[str], record_columns: list[str],
                    window_encoder: Callable[[Column], Column] | None) -> _Applied:
    """Windows, a re-keying dedup or a state function, in Spark: the output is the operator's with the
    records that had an error before it."""
    from pyspark.sql import functions as F

    bad = x.filter(F.col("error").isNotNull())
    cached: list[DataFrame] = [x]
    if state.window is not None:
        output, new_state, kept = _windows(state, clock, good, current, data_columns, window_encoder)
        cached += kept
    elif state.dedup is not None:
        output, new_state, judged = _dedup(state, clock, good, current)
        cached += judged
    else:
        output, new_state = _function(state, clock, good, current, record_columns)
    columns = {f.name: f.dataType.simpleString() for f in new_state.schema.fields}
    return _Applied(_records(bad).unionByName(output), columns, cached, new_state=new_state)


def _finish(spec: PipelineSpec, cid: int, base: StateManifest | None, plan: ReadPlan, loaded: Loaded,
            files: StateFiles, clock: EventClock, metrics: dict[str, float], applied: _Applied) -> StateManifest:
    """The new state's rows on the driver, its files and manifest written (`lockstep.spark.state_write`),
    and what the run kept let go."""
    state = spec.state
    assert state is not None
    began = time.monotonic()
    table = _new_rows(state, clock, loaded, applied)
    metrics["apply_seconds"] = round(metrics.get("apply_seconds", 0.0) + time.monotonic() - began, 3)
    began = time.monotonic()
    with files.caching_later():  # one trim of the cache for all the files written
        manifest = _write(spec, cid, base, plan, loaded, table, files, applied.columns, clock, metrics)
    files.settle_cache()  # the files read and written, decoded, for the next checkpoint on this host
    metrics["write_seconds"] = round(time.monotonic() - began, 3)
    for frame in applied.cached:
        frame.unpersist()
    log.info("checkpoint %d: state %s: %d keys, %d rows, %d bytes in %d files (%d deltas); it read %d groups "
             "(%d rows) and wrote %d files (%d bytes, %d compactions, %d delta merges) (load %.2f s, apply %.2f s, "
             "write %.2f s); %d timers pending", cid, state.operator, manifest.keys, manifest.rows, manifest.bytes,
             manifest.file_count, manifest.delta_count, metrics["groups_read"], metrics["rows_loaded"],
             metrics["files_written"], metrics["bytes_written"], metrics["compactions"], metrics["delta_merges"],
             metrics["load_seconds"], metrics["apply_seconds"], metrics["write_seconds"], manifest.timers)
    return replace(manifest, metrics=dict(metrics))


def _new_rows(state: StateSpec, clock: EventClock, loaded: Loaded, applied: _Applied) -> pa.Table:
    """The new rows of every key the checkpoint read or gave records to, on the driver."""
    if applied.added is not None:
        return _beside_loaded(state, clock, loaded, applied.added)
    assert applied.new_state is not None
    return applied.new_state.toArrow()


def _after(state: StateSpec, clock: EventClock, loaded: Loaded, applied: _Applied) -> StateAfter:
    from lockstep.store import state_chain

    new = _new_rows(state, clock, loaded, applied)
    touched, groups = set(new[KEY].to_pylist()), set(new[GROUP].to_pylist())
    for group, selected in loaded.selected.items():
        touched.update(selected[KEY].to_pylist())
        groups.add(group)
    return StateAfter(state_chain.unexpired(new, state, clock.after), frozenset(touched), frozenset(groups),
                      clock.after)


def _arrow_memory() -> None:
    """Arrow's memory in this driver from jemalloc, unless ``ARROW_DEFAULT_MEMORY_POOL`` names a pool. A
    restore's first checkpoint decodes its touched groups' files in a new process (240 MB at 10M keys of
    dedup state): with pyarrow's default, mimalloc, that first decode of the 32 bases took 1.15 s (1.8 s of
    CPU), with jemalloc 0.73 s (1.1 s); a second decode in the same process takes 0.4 s with either."""
    import os

    import pyarrow as pa

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # a pyarrow built without it
        pass
