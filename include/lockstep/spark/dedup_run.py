"""Dedup over keyed state, by `lockstep.rules.dedup`: a record within the TTL of a passed record of its
key is a copy, dropped or dead-lettered (error ``duplicate``); the state holds each passed record's event
time until the watermark passes it plus twice the TTL, and a record older than the watermark less the
TTL is ``late``. The output keeps each source partition's order.

Two ways to the one judgement: the driver judges (`lockstep.spark.dedup_judge`) over the records
collected narrow (:func:`_collect`) and Spark marks the output by one join (:func:`_dedup_on_driver`);
a re-keying checkpoint judges in Spark (:func:`_dedup`)."""
from __future__ import annotations

__all__ = ["COLLECT_SLICE", "MARKS_INLINE_BYTES", "ON_SERVER", "SPARK_PARTITION", "collect_slices"]

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from lockstep.model.offsets import OffsetRange
from lockstep.model.state_rows import EVENT, GROUP, INTERNAL, KEY
from lockstep.rules.dedup import retention_ms
from lockstep.rules.watermarks import EventClock
from lockstep.spark import dedup_judge
from lockstep.spark.dedup_judge import RECORD_COLUMNS
from lockstep.spark.keyed_rows import DUPLICATE, LATE, PROVENANCE, _records
from lockstep.spark.state_read import Loaded, _held
from lockstep.spec import StateSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

    from lockstep.spark.target import JobSession


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
