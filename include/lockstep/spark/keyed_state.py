"""Keyed state in a stateful pipeline's Spark run: load the state the checkpoint starts from, apply
the operator (event-time windows or dedup) to the checkpoint's records, write the new state files.

The operators are Spark SQL on DataFrames, so they run in the JVM in classic and Connect sessions
alike. The checkpoint is one batch (`lockstep.rules.watermarks`): records are judged late against
the watermark the base state left, and windows fire when this checkpoint's records move the
watermark past their end plus the allowed lateness.

- **Windows** keep the rows of windows that have not fired (all the columns the transform gives
  but ``value``, ``key``, ``headers`` and ``error``), so any Spark SQL aggregate is computed exactly
  when its window fires, over the rows of every checkpoint that fed it. A fired window's output
  names, as its provenance, the latest record (by event time) that it counted.
- **Dedup** follows `lockstep.rules.dedup`: a record within the TTL of a passed record of its key is
  a copy, dropped or dead-lettered (error ``duplicate``); the state holds each passed record's event
  time until the watermark passes it plus twice the TTL. Its output keeps each source partition's
  order. The driver judges (`lockstep.spark.dedup_judge`) over the records collected narrow; Spark
  marks the output by one join. A re-keying checkpoint judges in Spark (:func:`_dedup`).
- A record of a window that already fired, or older than the watermark less the dedup TTL, goes to
  the dead-letter topic with the error ``late``, in the checkpoint's transactions like every other
  dead letter.
- The transform's own ``headers`` stay on every output that is one of its records: dedup's passing
  records, and every dead letter (bad, late, duplicate). A fired window is no one record's, so its
  output carries Lockstep's provenance headers only; a state function's outputs carry the headers
  it returns with them (`lockstep.state_function`).

The state is incremental (`lockstep.store.state_chain`, `lockstep.rules.state_reads`): the driver
reads, of each key group the records touch, the rows of the touched keys (every row of a group with
a due timer) and hands Spark only those; Spark's new rows of those keys come back (``toArrow``) and
the driver writes a delta per group, or a new base when the group was read whole or its chain is
compacted. The files come before ``prepared.json``, whose manifest names them. What a checkpoint
read and wrote is in the manifest's ``metrics``.
"""
from __future__ import annotations

__all__ = [
    "DUPLICATE", "LATE", "collect_slices", "empty_frame", "event_ms", "judged_on_driver", "keyed", "window_starts_column",
    "window_value",
]

import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, cast

from lockstep.errors import CheckpointError, TerminalError
from lockstep.formats.codecs import decoded_columns
from lockstep.model import failpoints
from lockstep.model.checkpoint import CheckpointClaim
from lockstep.model.offsets import OffsetRange
from lockstep.model.output_contract import ACCEPTED_TYPES
from lockstep.model.state import StateManifest, iso_ms
from lockstep.model.state_rows import EVENT, GROUP, INTERNAL, KEY
from lockstep.rules.dedup import retention_ms, state_lifetime_ms
from lockstep.rules.output_tasks import task_of_partition
from lockstep.rules.state_base import base_refusal, schema_change
from lockstep.rules.state_manifest import Figures
from lockstep.rules.state_reads import ReadPlan, read_plan
from lockstep.rules.watermarks import EventClock, advance
from lockstep.spark import dedup_judge
from lockstep.spark.dedup_judge import RECORD_COLUMNS
from lockstep.spark.state_worker import state_columns
from lockstep.spec import PipelineSpec, StateSpec, WindowSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

    from lockstep.spark.target import JobSession
    from lockstep.store.state_files import StateFiles

log = logging.getLogger(__name__)

#: Threads that select the touched keys' rows of the groups a checkpoint read: one per core.
SELECT_THREADS = max(2, os.cpu_count() or 2)

#: Columns of the transform's output that are never state: the output record's own fields.
NOT_STATE = ("value", "key", "headers", "error")
PROVENANCE = ("topic", "partition", "offset")
#: The Spark type of the writers' ``headers`` column (Spark's Kafka header type).
HEADERS_TYPE = ACCEPTED_TYPES["headers"][0]
#: The dead-letter errors of the stateful operators.
LATE, DUPLICATE = "late", "duplicate"


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

    def finish(self) -> StateManifest:
        return self._finish()

    def discard(self) -> None:
        """Let go of what the run kept without writing its state (a repair's recomputation)."""
        for frame in self.cached:
            frame.unpersist()


def function_modules(spec: PipelineSpec) -> tuple[str, ...]:
    """The modules of a state function (and its migration), imported here so that a missing one fails
    before Spark does anything, and so that they can be shipped to the executors."""
    import importlib

    if spec.state is None or spec.state.function is None:
        return ()
    names = []
    for target in filter(None, (spec.state.function.process, spec.state.function.migrate)):
        module, _, function = target.partition(":")
        try:
            found = getattr(importlib.import_module(module), function, None)
        except ImportError as exc:
            raise TerminalError(f"{spec.path}: state.function: cannot import module {module!r}: {exc}") from exc
        if not callable(found):
            raise TerminalError(f"{spec.path}: state.function: {module} has no callable {function!r}")
        names.append(module)
    return tuple(names)


def _event_ms(spec: PipelineSpec, df: DataFrame) -> Column:
    """The state's event time in epoch ms (``state.event_time.column``)."""
    assert spec.state is not None
    return event_ms(spec, "state.event_time.column", spec.state.event_time.column, df, "the transform's output")


def event_ms(spec: PipelineSpec, field: str, expr: str, df: DataFrame, over: str) -> Column:
    """An event time in epoch ms, from a Spark SQL expression over ``df`` (``over`` says what that is) giving a
    TIMESTAMP or a number of epoch seconds; refused naming the spec's ``field`` otherwise. The state's event time
    and a temporal join's ``as_of`` (`lockstep.tables.materialize`) read it alike."""
    from pyspark.sql import functions as F

    try:
        kind = df.select(F.expr(expr)).schema.fields[0].dataType.simpleString()
    except Exception as exc:
        raise TerminalError(f"{spec.path}: {field} {expr!r} is not an expression over {over} "
                            f"({', '.join(df.columns)}): {str(exc).splitlines()[0]}") from exc
    if kind.startswith("timestamp"):
        return F.expr(f"unix_millis(CAST(({expr}) AS TIMESTAMP))")
    if kind in ("tinyint", "smallint", "int", "bigint", "float", "double") or kind.startswith("decimal"):
        return F.expr(f"CAST(({expr}) * 1000 AS BIGINT)")
    raise TerminalError(f"{spec.path}: {field} {expr!r} is {kind}; it must be a TIMESTAMP or a number of epoch "
                        f"seconds (cast it in {over}, for example `CAST(created_at AS BIGINT)`)")


def _check_columns(spec: PipelineSpec, df: DataFrame) -> None:
    missing = [c for c in ("value", *PROVENANCE) if c not in df.columns]
    if missing:
        raise TerminalError(f"{spec.path}: transform {spec.transform} returned columns {df.columns}, missing {missing}: a "
                            "stateful pipeline's transform keeps the input's value, topic, partition and offset (bad "
                            "and late records go to the dead-letter topic with them)")
    if "headers" in df.columns:
        kind = df.schema["headers"].dataType.simpleString()
        if kind not in ACCEPTED_TYPES["headers"]:
            raise TerminalError(f"{spec.path}: transform {spec.transform} returned `headers` of type {kind}; the "
                                f"writers take {HEADERS_TYPE} (Spark's Kafka header type): cast it, or drop the "
                                "column")


def judged_on_driver(spec: PipelineSpec, base: StateManifest | None) -> bool:
    """Whether the checkpoint's dedup is judged on the driver (`lockstep.spark.dedup_judge`): a dedup's held
    keys never change, so the passed records go beside the rows loaded; not when re-keying, where Spark
    computes every row's new key group and judges in the JVM (:func:`_dedup`). Its output is then the
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
    if refused:
        raise CheckpointError(cid, refused)
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # window bounds are written in UTC
    # The decoded input (`data`, `key_data`: docs/formats.md) served the key and the event time; the state
    # keeps the transform's own columns.
    decoded = decoded_columns(spec)
    x = keyed(spec, transformed).drop(*decoded)
    if state.window is not None:
        # A window's output is its aggregate, never a record's value: only the records that go to the
        # dead-letter topic as they came (errors, and records late against the base's watermark) keep
        # theirs in the cached frame, which is then a fraction of the input's bytes.
        before = base.watermark_ms if base else None
        as_record = F.col("error").isNotNull() | _late_for_windows(state.window, before)
        x = x.withColumn("value", F.when(as_record, F.col("value")))
        if "headers" in x.columns:  # the same for the transform's headers: only dead letters write them
            x = x.withColumn("headers", F.when(as_record, F.col("headers")))
    x = x.persist()
    started = time.monotonic()
    good = x.filter(F.col("error").isNull())
    # The records collected narrow give the watermark's event times too.
    on_driver = judged_on_driver(spec, base)
    records = _collect(good, claim.ranges, read_by_task is not None) if on_driver else None
    in_place = False
    if records is not None and read_by_task is not None:
        in_place = _read_in_place(records, task_of_partition(claim.ranges, read_by_task))
        records = records.drop_columns([SPARK_PARTITION])
        if not in_place:
            log.info("checkpoint %d: the transform moved records between Spark partitions or out of offset order: "
                     "the output is placed by a shuffle", cid)
    if records is not None:
        highest = records.group_by(["topic", "partition"]).aggregate([(EVENT, "max")])
        seen = [{"topic": t, "partition": p, "m": m} for t, p, m in zip(
            highest["topic"].to_pylist(), highest["partition"].to_pylist(), highest[f"{EVENT}_max"].to_pylist(),
            strict=True)]
    else:
        seen = [r.asDict() for r in good.groupBy("topic", "partition").agg(F.max(EVENT).alias("m")).collect()]
    clock = advance(base.partitions if base else {}, base.watermark_ms if base else None,
                    {f"{r['topic']}:{r['partition']}": int(r["m"]) for r in seen},
                    [r.tp.key for r in claim.ranges], claim.clock,
                    state.event_time.out_of_orderness_ms, state.event_time.idle_timeout_ms,
                    state.event_time.idle_advance)
    metrics = {"watermark_seconds": round(time.monotonic() - started, 3)}
    log.info("checkpoint %d: watermark %s -> %s%s", cid, iso_ms(clock.before), iso_ms(clock.after),
             f" (idle partitions: {', '.join(clock.idle)})" if clock.idle else "")
    data_columns = [c for c in transformed.columns if c not in NOT_STATE and c not in INTERNAL and c not in decoded]
    started = time.monotonic()
    if state.function is not None:
        shape = empty_frame(spark, state_columns(state.function.fields))
    elif state.window is not None:
        shape = x.select(*INTERNAL, *data_columns)
    else:
        shape = x.select(*INTERNAL)
    want = {f.name: f.dataType.simpleString() for f in shape.schema.fields}
    migrating = bool(base and base.all_files and state.function is not None and state.function.migrate
                     and schema_change(base.columns, want))
    plan = read_plan(base, state, clock.after, migrating)
    if plan.full:
        log.info("checkpoint %d: reading and writing the whole state: %s", cid, plan.why)
    with files.caching_later():  # the decoded files go to the local cache while Spark writes the output
        loaded = _load(spark, spec, cid, base, files, shape, good, plan, records)
    current = loaded.frame
    lifetime = state_lifetime_ms(state)
    if lifetime is not None and clock.before is not None:  # rows past their lifetime read as absent (and are dropped)
        current = current.filter(F.col(EVENT) + F.lit(lifetime) > F.lit(clock.before))
    metrics["load_seconds"] = round(time.monotonic() - started, 3)
    metrics["rows_loaded"] = float(sum(t.num_rows for t in loaded.selected.values()))
    metrics["groups_read"] = float(len(loaded.chains))
    bad = x.filter(F.col("error").isNotNull())
    cached: list[DataFrame] = [x]
    new_state: DataFrame | None = None
    added: pa.Table | None = None
    if records is not None:
        started = time.monotonic()
        everything, added, marked = _dedup_on_driver(spark, state, clock, x, records, loaded)
        in_place = in_place and not marked.endswith(ON_SERVER)  # marks kept there are joined by a shuffle
        log.info("checkpoint %d: dedup judged %d records on the driver, marked %s%s", cid, records.num_rows, marked,
                 "; the output stays in the partitions it was read in" if in_place else "")
        metrics["apply_seconds"] = round(time.monotonic() - started, 3)
        columns = dict(want)
    else:
        if state.window is not None:
            output, new_state = _windows(state, clock, good, current, data_columns, window_encoder)
        elif state.dedup is not None:
            output, new_state, judged = _dedup(state, clock, good, current)
            cached += judged
        else:
            output, new_state = _function(state, clock, good, current,
                                          [c for c in transformed.columns if c not in ("error", "headers", *decoded)])
        columns = {f.name: f.dataType.simpleString() for f in new_state.schema.fields}
        everything = _records(bad).unionByName(output)

    def finish() -> StateManifest:
        began = time.monotonic()
        if added is not None:
            table = _beside_loaded(state, clock, loaded, added)
        else:
            assert new_state is not None
            table = new_state.toArrow()
        metrics["apply_seconds"] = round(metrics.get("apply_seconds", 0.0) + time.monotonic() - began, 3)
        began = time.monotonic()
        with files.caching_later():  # one trim of the cache for all the files written
            manifest = _write(spec, cid, base, plan, loaded, table, files, columns, clock, metrics)
        files.settle_cache()  # the files read and written, decoded, for the next checkpoint on this host
        metrics["write_seconds"] = round(time.monotonic() - began, 3)
        for frame in cached:
            frame.unpersist()
        log.info("checkpoint %d: state %s: %d keys, %d rows, %d bytes in %d files (%d deltas); it read %d groups "
                 "(%d rows) and wrote %d files (%d bytes, %d compactions, %d delta merges) (load %.2f s, apply %.2f s, "
                 "write %.2f s); %d timers pending", cid, state.operator, manifest.keys, manifest.rows, manifest.bytes,
                 manifest.file_count, manifest.delta_count, metrics["groups_read"], metrics["rows_loaded"],
                 metrics["files_written"], metrics["bytes_written"], metrics["compactions"], metrics["delta_merges"],
                 metrics["load_seconds"], metrics["apply_seconds"], metrics["write_seconds"], manifest.timers)
        return replace(manifest, metrics=dict(metrics))

    return StatefulRun(everything, clock, finish, metrics, cached, in_place)


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


#: A dedup collects its records to the driver in slices of at most this many offsets, one Spark job each, when
#: a checkpoint has more: the server holds one slice's results at a time (a build-up's 10M records in one
#: collect, about 700 MB of Arrow, ran a 6 GiB server out of heap).
COLLECT_SLICE = 1_000_000


def collect_slices(ranges: Sequence[OffsetRange], most: int = COLLECT_SLICE) -> list[OffsetRange]:
    """The slices of ``ranges`` a dedup collects its records in, each of at most ``most`` offsets; none
    (one collect of everything) when the ranges hold no more than that."""
    if sum(r.end - r.start for r in ranges) <= most:
        return []
    return [OffsetRange(r.topic, r.partition, start, min(start + most, r.end))
            for r in ranges for start in range(r.start, r.end, most)]


#: The Spark partition each record collected was in (:func:`_collect`), for :func:`_read_in_place`.
SPARK_PARTITION = "__ls_spark_partition"


def _collect(good: DataFrame, ranges: Sequence[OffsetRange], partitions: bool = False) -> pa.Table:
    """The records' :data:`~lockstep.spark.dedup_judge.RECORD_COLUMNS`, on the driver, in the order Spark
    holds them; with ``partitions``, each one's Spark partition too (:data:`SPARK_PARTITION`)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    narrow = good.select(*RECORD_COLUMNS, *([F.spark_partition_id().alias(SPARK_PARTITION)] if partitions else []))
    slices = collect_slices(ranges)
    if not slices:
        return narrow.toArrow()
    return pa.concat_tables([narrow.filter((F.col("topic") == r.topic) & (F.col("partition") == r.partition)
                                           & (F.col("offset") >= r.start) & (F.col("offset") < r.end)).toArrow()
                             for r in slices])


def _read_in_place(records: pa.Table, assigned: dict[str, int]) -> bool:
    """Whether the collected ``records`` (with :data:`SPARK_PARTITION`, in the order Spark held them) lie each
    in the Spark partition of its source partition's task (``assigned``: ``topic:partition`` -> task,
    `lockstep.rules.output_tasks.task_of_partition`), each source partition's in offset order: as the reader
    gave them (`lockstep.rules.output_tasks.task_groups`), unless the transform moved them (a repartition,
    a sort). The records that did not reach the judgement (errors) come from the same partitions."""
    import numpy as np
    import pyarrow.compute as pc

    if not records.num_rows:  # nothing to tell by: the records that did not reach the judgement are placed
        return False
    names = pc.binary_join_element_wise(records["topic"], pc.cast(records["partition"], "string"), ":")
    encoded = pc.dictionary_encode(names).combine_chunks()
    tasks = np.array([assigned.get(name, -1) for name in encoded.dictionary.to_pylist()], dtype=np.int64)
    index = encoded.indices.to_numpy(zero_copy_only=False)
    if not np.array_equal(tasks[index], records[SPARK_PARTITION].to_numpy()):
        return False
    order = np.argsort(index, kind="stable")  # each source partition's records, in the order Spark held them
    same = index[order][1:] == index[order][:-1]
    return bool(np.all(np.diff(records["offset"].to_numpy()[order])[same] > 0))


def _records(rows: DataFrame) -> DataFrame:
    """Rows of the transform's output as the writer takes them (dead letters keep the input's value),
    with the transform's own ``headers`` (null without them: the writers then write only Lockstep's)."""
    from pyspark.sql import functions as F

    key = F.col("key").cast("binary") if "key" in rows.columns else F.lit(None).cast("binary")
    headers = F.col("headers") if "headers" in rows.columns else no_headers()
    return rows.select(F.col("value").cast("binary").alias("value"), key.alias("key"), "topic",
                       F.col("partition").cast("int").alias("partition"), F.col("offset").cast("bigint").alias("offset"),
                       F.col("error").cast("string").alias("error"), headers.alias("headers"))


def no_headers() -> Column:
    """The ``headers`` of an output that is no one record of the transform's (a fired window)."""
    from pyspark.sql import functions as F

    return F.lit(None).cast(HEADERS_TYPE)


@dataclass
class Loaded:
    """What a checkpoint read of its base state: the rows it works on, as a DataFrame, and per key
    group read, the decoded chain (for a compaction) and the rows taken from it (before the TTL)."""

    frame: DataFrame
    chains: dict[int, list[pa.Table]] = field(default_factory=dict)
    selected: dict[int, pa.Table] = field(default_factory=dict)


def _load(spark: JobSession, spec: PipelineSpec, cid: int, base: StateManifest | None, files: StateFiles,
          shape: DataFrame, good: DataFrame, plan: ReadPlan, records: pa.Table | None = None) -> Loaded:
    """The base state's rows this checkpoint needs, as a DataFrame with ``shape``'s columns (an empty
    one without state): in full, every row; else, of each group the records touch, the rows of the
    keys they touch, and every row of a group with a due timer (`lockstep.rules.state_reads`).

    ``records``: the records, collected already (a dedup judged on the driver): the touched keys are
    theirs, and the rows stay on the driver (``frame`` is then empty).

    A column the state lacks is read as null (a nullable field added to the transform); a column the
    state has and the transform no longer gives, or one whose type changed, is refused by name."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from lockstep.store import state_chain

    assert spec.state is not None
    want = {f.name: f.dataType.simpleString() for f in shape.schema.fields}
    if base is None or not base.all_files:
        return Loaded(shape.limit(0))
    migrate = spec.state.function is not None and spec.state.function.migrate
    problems = schema_change(base.columns, want)
    if problems and not migrate:
        raise CheckpointError(cid, f"the state of checkpoint {base.written_by} cannot be read with the transform's "
                                   f"new columns: {'; '.join(problems)}. Keep the field in the transform (its type "
                                   "too), or give the pipeline a new name to start without state")
    touched: dict[int, pa.Array] = {}
    if plan.full:
        groups = sorted(base.files)
    else:
        if records is not None:
            keys = records.select([KEY, GROUP]).group_by([KEY, GROUP]).aggregate([])
        else:
            keys = good.select(KEY, GROUP).distinct().toArrow()
        touched = {int(g): keys.filter(pc.equal(keys[GROUP], g))[KEY].combine_chunks()
                   for g in pc.unique(keys[GROUP]).to_pylist()}
        groups = sorted((set(touched) | plan.whole) & set(base.files))
    loaded = Loaded(shape.limit(0))
    loaded.chains = files.chains(base, groups)

    def selected(group: int) -> pa.Table | None:
        chain = loaded.chains[group]
        if not plan.reads_whole(group):
            chain = [state_chain.select(t, touched[group]) for t in chain]
        return state_chain.merge(chain)

    # A group at a time on each core: pyarrow's compute releases the interpreter lock, and a restore's
    # selection probes every row it read (10M keys at 10M keys of dedup state).
    with ThreadPoolExecutor(min(SELECT_THREADS, len(loaded.chains)) or 1, thread_name_prefix="lockstep-state-select") \
            as pool:
        for group, merged in zip(loaded.chains, pool.map(selected, loaded.chains), strict=True):
            if merged is not None and merged.num_rows:
                loaded.selected[group] = merged
    if not loaded.selected or records is not None:
        return loaded
    # One chunk: a Connect session's createDataFrame was seen keeping only the first chunk of a table
    # concatenated from several files (pyspark 4.0.0), dropping every other key group's rows.
    table = pa.concat_tables(list(loaded.selected.values()), promote_options="default").combine_chunks()
    frame = cast("SparkSession", spark).createDataFrame(table)  # pyspark types both sessions alike
    if problems:
        frame = _migrated(spec, base, frame)
    else:
        frame = frame.select(*[(F.col(c) if c in frame.columns else F.lit(None)).cast(t).alias(c)
                               for c, t in want.items()])
    if base.key_groups != spec.state.key_groups:  # re-keying (in full): every key's group anew
        frame = frame.withColumn(GROUP, F.pmod(F.xxhash64(F.col(KEY)), F.lit(spec.state.key_groups)).cast("int"))
    loaded.frame = frame
    return loaded


def empty_frame(spark: JobSession, columns: tuple[tuple[str, str], ...]) -> DataFrame:
    from lockstep.spark.state_worker import schema_ddl

    return cast("SparkSession", spark).createDataFrame([], schema_ddl(columns))


def _migrated(spec: PipelineSpec, base: StateManifest, frame: DataFrame) -> DataFrame:
    """State of an earlier schema, through the spec's ``state.function.migrate``, row by row."""
    from lockstep.spark.state_worker import FunctionSettings, migrate_rows, schema_ddl, state_columns

    assert spec.state is not None and spec.state.function is not None
    f = spec.state.function
    log.warning("state of checkpoint %d has schema version %d and fields %s; migrating it to version %d with %s",
                base.written_by, base.schema_version, ", ".join(base.columns), f.version, f.migrate)
    settings = FunctionSettings(f.process, f.fields, None, (), f.migrate, base.schema_version)
    old = tuple(n for n in base.columns if n not in dict(state_columns(())))
    return frame.mapInPandas(migrate_rows(settings, old), schema_ddl(state_columns(f.fields)))  # type: ignore[arg-type]


def window_value(w: WindowSpec, encode: Callable[[Column], Column] | None = None) -> Column:
    """A fired window's output value, from a row of (``__ls_key``, ``__ls_start``, the aggregates): the
    key (as ``key_name``), ``window_start``/``window_end`` in ISO-8601 UTC, the aggregates, as JSON or
    as ``encode`` makes the record (the sink's format)."""
    from pyspark.sql import functions as F

    fmt = "yyyy-MM-dd'T'HH:mm:ss" + (".SSS" if w.slide_ms % 1000 or w.size_ms % 1000 else "") + "'Z'"
    return (encode or F.to_json)(F.struct(
        F.col(KEY).alias(w.key_name),
        F.date_format(F.timestamp_millis(F.col("__ls_start")), fmt).alias("window_start"),
        F.date_format(F.timestamp_millis(F.col("__ls_start") + F.lit(w.size_ms)), fmt).alias("window_end"),
        *[F.col(name) for name, _ in w.aggregates]))


def window_starts_column(w: WindowSpec) -> Column:
    """The starts of the windows of a row's event time (``__ls_event_ms``), as an array."""
    from pyspark.sql import functions as F

    slide, size = F.lit(w.slide_ms), F.lit(w.size_ms)
    last = F.col(EVENT) - F.pmod(F.col(EVENT), slide)
    return F.sequence(last - size + slide, last, slide)


def keyed(spec: PipelineSpec, transformed: DataFrame) -> DataFrame:
    """The transform's rows with the state key, the event time (ms) and the key group, and ``error``
    set for rows without a key or an event time."""
    from pyspark.sql import functions as F

    assert spec.state is not None
    state = spec.state
    _check_columns(spec, transformed)
    x = (transformed.withColumn(KEY, F.expr(state.key).cast("string"))
         .withColumn(EVENT, _event_ms(spec, transformed))
         .withColumn(GROUP, F.pmod(F.xxhash64(F.col(KEY)), F.lit(state.key_groups)).cast("int")))
    error = F.col("error") if "error" in transformed.columns else F.lit(None).cast("string")
    return x.withColumn("error", F.coalesce(
        error,
        F.when(F.col(KEY).isNull(), F.lit(f"state key ({state.key}) is null")),
        F.when(F.col(EVENT).isNull(), F.lit(f"event time ({state.event_time.column}) is null"))))


def _last_end(w: WindowSpec, t: Column) -> Column:
    """The end of the last window an event time belongs to."""
    from pyspark.sql import functions as F

    return t - F.pmod(t, F.lit(w.slide_ms)) + F.lit(w.size_ms)


def _late_for_windows(w: WindowSpec, before: int | None) -> Column:
    """A record every window of which had fired before the checkpoint started (its base's watermark)."""
    from pyspark.sql import functions as F

    if before is None:
        return F.lit(False)
    return _last_end(w, F.col(EVENT)) + F.lit(w.allowed_lateness_ms) <= F.lit(before)


def _windows(state: StateSpec, clock: EventClock, good: DataFrame, loaded: DataFrame,
             data_columns: list[str], encode: Callable[[Column], Column] | None = None) -> tuple[DataFrame, DataFrame]:
    from pyspark.sql import functions as F

    w = state.window
    assert w is not None
    size, lateness = F.lit(w.size_ms), F.lit(w.allowed_lateness_ms)

    before, after = clock.before, clock.after
    is_late = _late_for_windows(w, before)
    late = good.filter(is_late).withColumn("error", F.lit(LATE))
    rows = good.filter(~is_late).select(*INTERNAL, *data_columns).unionByName(loaded)
    exploded = rows.withColumn("__ls_start", F.explode(window_starts_column(w)))
    end = F.col("__ls_start") + size + lateness
    open_before = (end > F.lit(before)) if before is not None else F.lit(True)
    fires = (end <= F.lit(after)) if after is not None else F.lit(False)
    fired = (exploded.filter(open_before & fires)
             .groupBy(KEY, "__ls_start")
             .agg(*[F.expr(expr).alias(name) for name, expr in w.aggregates],
                  F.max_by(F.struct(*PROVENANCE), F.struct(EVENT, *PROVENANCE)).alias("__ls_from")))
    output = fired.select(window_value(w, encode).cast("binary").alias("value"), F.col(KEY).cast("binary").alias("key"),
                          F.col("__ls_from.topic").alias("topic"), F.col("__ls_from.partition").cast("int").alias("partition"),
                          F.col("__ls_from.offset").cast("bigint").alias("offset"),
                          F.lit(None).cast("string").alias("error"),
                          no_headers().alias("headers"))  # many records' aggregate: provenance headers only
    keep = (_last_end(w, F.col(EVENT)) + lateness > F.lit(after)) if after is not None else F.lit(True)
    return _records(late).unionByName(output), rows.filter(keep)


def _dedup(state: StateSpec, clock: EventClock, good: DataFrame,
           loaded: DataFrame) -> tuple[DataFrame, DataFrame, list[DataFrame]]:
    """(output, new state, the kept frames to unpersist), by `lockstep.rules.dedup`'s rule (whose
    ``judge`` is this function in Python): a record within the TTL of a passed record of its key is
    a copy; a checkpoint judges a key's records in order of (event time, provenance). The dedup of a
    checkpoint that re-keys its state (every row read, each given its new key group by Spark); any
    other is judged on the driver (:func:`_dedup_on_driver`), by the same rule.

    Each key is first judged by an aggregate, not a window over the records: only one narrow row per
    key is shuffled (its first record, its last event time), beside the least and greatest event
    time the state holds of it. A key the state does not hold whose records lie within the TTL of
    its first passes its first; a key whose least or greatest held time is within the TTL of its
    first and last record passes none. Those are the common cases, and only the other keys are kept
    (persisted, with their first record). Of those, a key that is not new (records that span the
    TTL, or held times that cover only some) has its records and held times collected, sorted and
    folded in order (:func:`_fold`, ``aggregate`` over the array, in the JVM); one look at the kept
    keys (``isEmpty``) leaves the fold out of the plan when there is none, as in most checkpoints.
    The records that pass are marked in the records by a join that AQE broadcasts once it sees how
    few they are: the output and the new state (every row, loaded and added) read that one judgement."""
    from pyspark.sql import functions as F

    d = state.dedup
    assert d is not None
    ttl = d.ttl_ms
    before, after = clock.before, clock.after
    is_late = (F.col(EVENT) + F.lit(ttl) <= F.lit(before)) if before is not None else F.lit(False)
    fresh = good.filter(~is_late)
    record = F.struct(EVENT, *PROVENANCE)
    keys = (fresh.groupBy(KEY).agg(F.min(record).alias("__ls_f"), F.max(EVENT).alias("__ls_last"),
                                   F.first(GROUP).alias(GROUP))
            .join(loaded.groupBy(KEY).agg(F.min(EVENT).alias("__ls_hmin"), F.max(EVENT).alias("__ls_hmax")), KEY, "left"))
    first, last = F.col(f"__ls_f.{EVENT}"), F.col("__ls_last")

    def covers(h: Column) -> Column:  # a held time within the TTL of the key's first and last record
        return (F.abs(first - h) < F.lit(ttl)) & (F.abs(last - h) < F.lit(ttl))

    new = F.col("__ls_hmin").isNull() & (last - first < F.lit(ttl))
    covered = F.coalesce(covers(F.col("__ls_hmin")) | covers(F.col("__ls_hmax")), F.lit(False))
    # Kept: the keys not all copies (few, in the common case), each with its first record.
    open_keys = (keys.filter(~covered)
                 .select(KEY, GROUP, *[F.col(f"__ls_f.{c}").alias(c) for c in (EVENT, *PROVENANCE)], new.alias("__ls_new"))
                 .persist())
    kept_frames = [open_keys]
    firsts = open_keys.filter(F.col("__ls_new")).drop("__ls_new")
    # The rest (a held time between the least and the greatest may still cover them: the fold finds out).
    mixed = open_keys.filter(~F.col("__ls_new")).select(KEY)
    if mixed.isEmpty():
        added = firsts
    else:
        added = firsts.unionByName(_fold(fresh, loaded, F.broadcast(mixed), ttl)).persist()
        kept_frames.append(added)
    output = _marked(state, good, is_late, added.select(KEY, *PROVENANCE), passes=True, broadcast=False)
    new_rows = added.select(*INTERNAL)
    kept = loaded.unionByName(new_rows)
    if after is not None:
        kept = kept.filter(F.col(EVENT) + F.lit(retention_ms(ttl)) > F.lit(after))
    return output, kept, kept_frames


def _marked(state: StateSpec, records: DataFrame, is_late: Column, marks: DataFrame | None, passes: bool,
            broadcast: bool = True) -> DataFrame:
    """A dedup's output, every one of the checkpoint's ``records`` in one pass, in the partitions and the
    order they came in: those with an error as they are, the late ones (``is_late``) with ``late``, the
    copies with ``duplicate`` (or left out, when not dead-lettered), the records that passed without an
    error. ``marks``: the key and provenance of the records that passed (``passes``) or of the copies (not
    ``passes``), whichever are fewer; None: there are none. One join, against the marks ``broadcast`` (so
    the records stay where they are; not for marks Spark computed, which AQE broadcasts when it sees how
    few they are), and the marks appear once in the plan (a Connect plan repeats a shared subtree, local
    relation and all)."""
    from pyspark.sql import functions as F

    assert state.dedup is not None
    if marks is None:
        judged, passed = records, F.lit(not passes)
    else:
        marking = marks.withColumn("__ls_mark", F.lit(True))
        judged = records.join(F.broadcast(marking) if broadcast else marking, [KEY, *PROVENANCE], "left")
        passed = F.col("__ls_mark").isNotNull() if passes else F.col("__ls_mark").isNull()
    error = F.coalesce(F.col("error"), F.when(is_late, F.lit(LATE)),
                       F.when(~passed, F.lit(DUPLICATE))).cast("string")
    judged = judged.withColumn("error", error)
    if state.dedup.duplicates != "dead_letter":
        judged = judged.filter(F.col("error").isNull() | (F.col("error") != F.lit(DUPLICATE)))
    return _records(judged.drop("__ls_mark"))


#: Marks of more bytes than this are kept on the server (a local checkpoint) before the output's plan
#: names them: Spark Connect sends a plan whole, a local relation inline in it up to 64 MiB, and gRPC
#: refuses a message over 128 MiB.
MARKS_INLINE_BYTES = 8 << 20


#: How :func:`_dedup_on_driver` says its marks were kept on the server.
ON_SERVER = " (on the server)"


def _dedup_on_driver(spark: JobSession, state: StateSpec, clock: EventClock, x: DataFrame, records: pa.Table,
                     loaded: Loaded) -> tuple[DataFrame, pa.Table, str]:
    """(output, the records that passed as state rows, what was marked: ``passes`` or ``copies``, ``none``
    if nothing was, with `` (on the server)`` when the marks were kept there): the judgement of `lockstep.spark.dedup_judge` over
    the collected ``records`` and the rows the driver loaded, marked in Spark's records by a join against
    the key and provenance of the passes or of the copies, whichever are fewer (none in a build-up of
    new keys; a hundred of a checkpoint of repeats with a hundred new keys): a small local relation,
    broadcast by the planner. The passes' rows go beside the loaded ones (:func:`_beside_loaded`)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    d = state.dedup
    assert d is not None
    ttl, before = d.ttl_ms, clock.before
    judgement = dedup_judge.judge(records, _held(state, clock, loaded, (KEY, EVENT)), ttl, before)
    passed = judgement.passed
    is_late = (F.col(EVENT) + F.lit(ttl) <= F.lit(before)) if before is not None else F.lit(False)
    passes = passed.num_rows <= judgement.copies.num_rows
    marked = (passed if passes else judgement.copies).select([KEY, *PROVENANCE])
    marks = None
    what = "passes" if passes else "copies"
    if marked.num_rows:
        marks = cast("SparkSession", spark).createDataFrame(marked)
        if marked.nbytes > MARKS_INLINE_BYTES:
            marks = marks.localCheckpoint(eager=True)
            what += ON_SERVER
    else:
        what = "none"
    # Marks kept on the server are too many to broadcast: the join then shuffles, and the run places the output.
    output = _marked(state, x, is_late, marks, passes, broadcast=not what.endswith(ON_SERVER))
    added = passed.select(list(INTERNAL))
    if clock.after is not None:
        added = added.filter(pc.greater(pc.add(added[EVENT], pa.scalar(retention_ms(ttl), pa.int64())), clock.after))
    return output, added, what


def _held(state: StateSpec, clock: EventClock, loaded: Loaded, columns: tuple[str, ...]) -> pa.Table:
    """The rows loaded (``columns`` of them), less those the base's watermark had let go (read as absent)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tables = [t.select([c for c in columns if c in t.column_names]) for t in loaded.selected.values()]
    if not tables:
        return pa.table({c: pa.array([], pa.string() if c == KEY else pa.int64()) for c in columns})
    held = pa.concat_tables(tables, promote_options="default")
    lifetime = state_lifetime_ms(state)
    if lifetime is not None and clock.before is not None:
        held = held.filter(pc.greater(pc.add(held[EVENT], lifetime), clock.before))
    return held


def _fold(fresh: DataFrame, loaded: DataFrame, mixed: DataFrame, ttl: int) -> DataFrame:
    """The records that pass of the ``mixed`` keys: each key's records sorted by (event time,
    provenance) and folded in order, a record passing unless a held time or a record passed before it
    is within the TTL (`lockstep.rules.dedup`). Records and held times meet in one aggregate."""
    from pyspark.sql import functions as F

    records = fresh.join(mixed, KEY).select(KEY, GROUP, F.struct(EVENT, *PROVENANCE).alias("__ls_r"),
                                            F.lit(None).cast("bigint").alias("__ls_h"))
    held = loaded.join(mixed, KEY).select(KEY, GROUP, F.lit(None).cast(records.schema["__ls_r"].dataType).alias("__ls_r"),
                                          F.col(EVENT).alias("__ls_h"))
    both = records.unionByName(held)
    chains = both.groupBy(KEY).agg(F.array_sort(F.collect_list("__ls_r")).alias("__ls_r"),
                                   F.collect_list("__ls_h").alias("__ls_held"), F.first(GROUP).alias(GROUP))
    # The records come sorted, so of those passed before a record the last is the nearest: the fold
    # carries its time and the indexes of the passes (a hot key may pass many times in a checkpoint:
    # copying ints, not records, and comparing once, not with every pass).
    e = f"__ls_r[i].{EVENT}"
    fold = F.expr(f"aggregate(sequence(0, size(__ls_r) - 1), named_struct('last', CAST(NULL AS BIGINT), "
                  f"'passed', CAST(array() AS ARRAY<INT>)), (acc, i) -> "
                  f"IF(exists(__ls_held, h -> abs({e} - h) < {ttl}) OR coalesce(abs({e} - acc.last) < {ttl}, false), "
                  f"acc, named_struct('last', {e}, 'passed', concat(acc.passed, array(i)))), "
                  f"acc -> transform(acc.passed, i -> __ls_r[i]))")
    return (chains.select(KEY, GROUP, F.explode(fold).alias("__ls_p"))
            .select(KEY, GROUP, *[F.col(f"__ls_p.{c}").alias(c) for c in (EVENT, *PROVENANCE)]))


def _beside_loaded(state: StateSpec, clock: EventClock, loaded: Loaded, added: pa.Table) -> pa.Table:
    """A dedup's new state of the keys it read or gave records to: the rows loaded (less those the
    base's watermark had let go, which Spark read as absent) and the records that passed, as Spark
    added them. A key may hold several rows: a passed record each (`lockstep.rules.dedup`)."""
    import pyarrow as pa

    if not loaded.selected:
        return added
    held = _held(state, clock, loaded, tuple(added.column_names))
    held = pa.table({c: held[c].cast(added.schema.field(c).type) for c in added.column_names})
    return pa.concat_tables([held, added], promote_options="default")


def _function(state: StateSpec, clock: EventClock, good: DataFrame, loaded: DataFrame,
              record_columns: list[str]) -> tuple[DataFrame, DataFrame]:
    """The user's function per key, over ``cogroup(new records, state).applyInPandas``; its result is kept
    (a local checkpoint) so that the output and the state written come from the same calls."""
    from pyspark.sql import functions as F

    from lockstep.spark.state_worker import (
        KIND,
        OUT_HEADERS,
        OUT_HEADERS_SCHEMA,
        OUT_KEY,
        FunctionSettings,
        apply_function,
        result_columns,
        schema_ddl,
        state_columns,
    )

    f = state.function
    assert f is not None
    seen = [c if c != EVENT else "event_time_ms" for c in (*record_columns, EVENT)]
    settings = FunctionSettings(f.process, f.fields, clock.after, tuple(seen), options=tuple(f.options.items()))
    records = good.select(*record_columns, *[c for c in INTERNAL if c not in record_columns])
    result = (records.groupBy(KEY).cogroup(loaded.groupBy(KEY))
              .applyInPandas(apply_function(settings), schema_ddl(result_columns(f.fields))))
    result = result.localCheckpoint(eager=True)
    # The headers the function gave an output row, from their JSON text back to Spark's Kafka header type.
    headers = F.transform(F.from_json(F.col(OUT_HEADERS), OUT_HEADERS_SCHEMA),
                          lambda h: F.struct(h["key"].alias("key"), F.unbase64(h["value"]).alias("value")))
    output = result.filter(F.col(KIND) == "out").select(
        "value", F.col(OUT_KEY).alias("key"), "topic", "partition", "offset", F.lit(None).cast("string").alias("error"),
        headers.cast(HEADERS_TYPE).alias("headers"))
    # Timers are a JSON list of epoch ms (an array column did not survive pandas -> Arrow in cogroup,
    # pyspark 4.0.0); `lockstep.store.state_chain.timers` counts them.
    return output, result.filter(F.col(KIND) == "state").select(*[n for n, _ in state_columns(f.fields)])


def _write(spec: PipelineSpec, cid: int, base: StateManifest | None, plan: ReadPlan, loaded: Loaded,
           table: pa.Table, files: StateFiles, columns: dict[str, str], clock: EventClock,
           metrics: dict[str, float]) -> StateManifest:
    """The new state's files, then the manifest that names them with the groups nobody touched.

    ``table`` holds the new rows of every key the checkpoint read or gave records to. A group read
    whole gets a new base; another gets a delta of those keys (tombstones for keys whose state is
    gone), merged with the chain's deltas into one when they are too many, or a new base when the
    deltas are big against the base (`lockstep.rules.compaction`; a new base drops expired keys).
    The deltas of several groups go in one file, the checkpoint's pack, which each of their chains names
    (`lockstep.store.state_chain.packed`): a restore reads a file per checkpoint, not per group and
    checkpoint. A group left with no rows leaves the manifest."""
    import pyarrow.compute as pc

    from lockstep.model.state import GroupState
    from lockstep.rules.compaction import Compaction, compaction_due, deltas_to_merge
    from lockstep.rules.state_manifest import after_delta, as_base, manifest, pack_shares
    from lockstep.store import state_chain

    state = spec.state
    assert state is not None
    table = state_chain.unexpired(table, state, clock.after)
    incremental = base is not None and not plan.full
    files_by_group: dict[int, tuple[str, ...]] = dict(base.files) if base is not None and incremental else {}
    groups: dict[int, GroupState] = dict(base.groups) if base is not None and incremental else {}
    new_groups = set(pc.unique(table[GROUP]).to_pylist()) if table.num_rows else set()
    written = compactions = merges = unchanged = 0
    size = 0
    #: bytes written as deltas, as bases of compacted chains, and as other bases (new or read-whole groups)
    by_kind = {"delta": 0, "compaction": 0, "base": 0}

    #: the files to upload: (rank, key, kind, bytes, what to record of the key and digest it got), uploaded by
    #: rank: a compaction's first, then the deltas, then other bases
    uploads: list[tuple[int, str, str, bytes, Callable[[str, str], None]]] = []
    rank = {"compaction": 0, "delta": 1, "delta-merge": 1, "base": 2}

    def put(key: str, body: bytes, kind: str, then: Callable[[str, str], None]) -> None:
        nonlocal written, size
        uploads.append((rank[kind], key, kind, body, then))
        written += 1
        size += len(body)
        by_kind["delta" if kind == "delta-merge" else kind] += len(body)

    # First what becomes of each group (a delta needs its bytes to decide), then the uploads, a
    # compaction's first: a checkpoint that compacts is interrupted at state.mid_upload (its first
    # file) while it rewrites a chain, the moment the soak's S3 faults aim at. The order of the
    # uploads is nobody else's business: the manifest, written after them all, names what counts.
    whole_groups: set[int] = set()
    deltas: dict[int, tuple[Compaction, pa.Table, pa.Table | None, pa.Table, bytes]] = {}
    for group in sorted(new_groups | set(loaded.chains)):
        old = groups.get(group)
        if not incremental or old is None or plan.reads_whole(group):
            whole_groups.add(group)  # every row of the group: a new base (taken when uploaded)
            continue
        rows = _group_rows(table, group, new_groups)
        before = loaded.selected.get(group)
        same = state_chain.unchanged_keys(rows, before)
        touched = before[KEY] if before is not None else rows[KEY].slice(0, 0)
        if len(same):  # keys the checkpoint touched and left as they were: not in the delta
            touched = pc.filter(touched, pc.invert(pc.is_in(touched, value_set=same)))
            changed = rows.filter(pc.invert(pc.is_in(rows[KEY], value_set=same)))
        else:
            changed = rows
        change = state_chain.delta(changed, touched, group)
        if not change.num_rows:
            unchanged += 1
            continue  # nothing changed in the group: its files stay as they are
        body = state_chain.parquet(change)
        step = compaction_due(old.file_bytes, len(body), state.compaction, group, cid)
        deltas[group] = (step, rows, before, change, body)

    #: the groups that get a delta (or their newest deltas merged with it): (group, kind, its delta's rows, its
    #: delta's bytes alone when known, what to record of the file's key, digest and the group's bytes of it)
    packing: list[tuple[int, str, pa.Table, bytes | None, Callable[[str, str, int], None]]] = []
    for group in sorted([*deltas, *whole_groups]):
        old = groups.get(group)
        whole: pa.Table | None
        if group in whole_groups:
            whole = _group_rows(table, group, new_groups)
        else:
            step, rows, before, change, body = deltas.pop(group)
            assert old is not None
            if step is not Compaction.BASE:
                chain, digests = files_by_group[group], old.digests
                file_bytes = old.file_bytes
                kind = "delta"
                alone: bytes | None = body  # the delta's file when it is the checkpoint's only one
                if step is Compaction.DELTAS:  # the newest deltas become one; the base stays as it is
                    merges += 1
                    kind, alone = "delta-merge", None
                    n = deltas_to_merge(old.file_bytes, len(body))
                    change = state_chain.merge_deltas([*loaded.chains[group][-n:], change])
                    chain, digests, file_bytes = chain[:-n], digests[:-n], file_bytes[:-n]
                figures = (_figures(before, state, clock.before), _figures(rows, state, clock.after))

                def delta_put(key: str, name: str, share: int, group: int = group, chain: tuple[str, ...] = chain,
                              old: GroupState = old, figures: tuple[Figures, Figures] = figures,
                              file_bytes: tuple[int, ...] = file_bytes, digests: tuple[str, ...] = digests) -> None:
                    files_by_group[group] = (*chain, key)
                    groups[group] = after_delta(old, *figures, file_bytes, digests, share, name)

                packing.append((group, kind, change, alone, delta_put))
                continue
            compactions += 1
            merged = state_chain.merge([*loaded.chains[group], change])
            whole = state_chain.unexpired(merged, state, clock.after) if merged is not None else None
        compacting = incremental and old is not None and not plan.reads_whole(group)
        files_by_group.pop(group, None)
        groups.pop(group, None)
        if whole is None or not whole.num_rows:
            continue
        body = state_chain.parquet(whole)

        def base_put(key: str, name: str, group: int = group, figures: Figures = _figures(whole, state, clock.after),
                     size: int = len(body)) -> None:
            files_by_group[group] = (key,)
            groups[group] = as_base(figures, size, name)

        put(files.key(cid, group), body, "compaction" if compacting else "base", base_put)
    if len(packing) == 1:  # one group's delta: a file of its own
        group, kind, change, alone, record = packing[0]
        body = alone if alone is not None else state_chain.parquet(change)

        def one_put(key: str, name: str, record: Callable[[str, str, int], None] = record,
                    share: int = len(body)) -> None:
            record(key, name, share)

        put(files.key(cid, group, delta=True), body, kind, one_put)
    elif packing:  # several groups' deltas: one pack, each group's chain naming it with its share of the bytes
        body = state_chain.parquet(state_chain.packed([change for _, _, change, _, _ in packing]))
        shares = pack_shares(len(body), [change.num_rows for _, _, change, _, _ in packing])

        def pack_put(key: str, name: str) -> None:
            for (_, _, _, _, record), share in zip(packing, shares, strict=True):
                record(key, name, share)

        put(files.pack_key(cid), body, "delta-merge" if any(k == "delta-merge" for _, k, _, _, _ in packing)
            else "delta", pack_put)
    # The uploads: the first alone (a checkpoint that compacts is interrupted at state.mid_upload while it
    # rewrites a chain), then the rest side by side. Where another attempt of this checkpoint already wrote
    # other bytes under a file's name, ours go under another (`StateFiles.create`).
    uploads.sort(key=lambda u: u[0])
    if uploads:
        _, first, first_kind, first_body, first_then = uploads[0]
        key, name = files.put_table(first, first_body)
        failpoints.hit("state.mid_upload", f" (checkpoint {cid}, {first_kind} {key})")
        first_then(key, name)
        done = files.put_tables([(k, b) for _, k, _, b, _ in uploads[1:]])
        for (_, _, _, _, then), (key, name) in zip(uploads[1:], done, strict=True):
            then(key, name)
    metrics.update(rows=float(table.num_rows), files_written=float(written), bytes_written=float(size),
                   groups_unchanged=float(unchanged),
                   compactions=float(compactions), delta_merges=float(merges), delta_bytes=float(by_kind["delta"]),
                   compaction_bytes=float(by_kind["compaction"]), base_bytes=float(by_kind["base"]))
    return manifest(state.operator, state.key_groups, cid, files_by_group, groups, columns, clock.after,
                    clock.partitions, state.schema_version)


def _group_rows(table: pa.Table, group: int, new_groups: set[int]) -> pa.Table:
    import pyarrow.compute as pc

    return table.filter(pc.equal(table[GROUP], group)) if group in new_groups else table.slice(0, 0)


def _figures(table: pa.Table | None, state: StateSpec, watermark: int | None) -> Figures:
    """The keys, rows and pending timers of some state rows (none: all zero)."""
    from lockstep.store import state_chain

    if table is None:
        return Figures()
    timers, earliest = state_chain.timers(table, state, watermark)
    return Figures(state_chain.key_count(table), table.num_rows, timers, earliest)
