"""A pipeline's tables in its Spark run: each table's version as the claim pins it, materialized from
its stored files and the pinned records of its topic, written back as files, and offered to the
transform (docs/joins.md).

A table holds the latest record per key of its topic: a record sets its key's row, a record with a
null value (a tombstone) removes it. A key's latest record is its highest offset; a key found in
several partitions takes the latest timestamp (then the higher partition). Records without a key are
not rows of any table and are skipped.

Stored like keyed state (`lockstep.store.state_chain`, one chain per table): the checkpoint that reads
table records writes a **delta** (the new latest row, or a tombstone, of each key those records touch)
or, when the deltas have grown (`lockstep.rules.tables.compact_table`), a new **base** of the whole
table, under ``state/<checkpoint>/table-<name>[.delta].parquet``, before ``prepared.json`` names them.
The rows keep the raw key and value: decoding happens when the view is made, so a table's files never
depend on a schema.

The table reaches the transform two ways:
- SQL transforms read a view of the table's name: ``key`` (decoded by ``key``: a string by default),
  ``value`` (raw), ``data`` (the value decoded, with a value format), ``partition``, ``offset``,
  ``timestamp``. A row that does not decode is left out of the view, and logged.
- ``join:`` joins it into every input record before the transform (Python or SQL): the record gets a
  column named after the table, a struct of those fields, null without a row (``how: left``); an inner
  join drops the records without a row, or dead-letters them with the reason (``missing``).

The table is small next to the stream it enriches (it is held by the driver, as the Arrow table it
writes), so the join is a broadcast: the input is not shuffled, and each source partition's records stay
in one task, in offset order, as the writers' repair needs.
"""
from __future__ import annotations

__all__ = [
    "MaterializedTables", "VIEW_COLUMNS", "join_tables", "materialize", "table_frame",
    "versions_frame",
]

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, cast

from lockstep.errors import CheckpointError
from lockstep.model.state_rows import KEY, TOMBSTONE
from lockstep.model.tables import TablePin, TableVersion
from lockstep.rules.tables import compact_table
from lockstep.spec import PipelineSpec, TableSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

    from lockstep.spark.target import JobSession
    from lockstep.store.state_files import StateFiles

log = logging.getLogger(__name__)

#: The columns of a table's rows in its files, besides ``__ls_key`` (the key's bytes in hex) and, in a
#: delta, ``__ls_tombstone``.
ROW_COLUMNS = ("key", "value", "partition", "offset", "timestamp_ms")
ROW_DDL = "key binary, value binary, partition int, offset bigint, timestamp_ms bigint"
#: The columns of a table's view, in order (``data`` only with a value format).
VIEW_COLUMNS = ("key", "value", "data", "partition", "offset", "timestamp")


@dataclass
class MaterializedTables:
    """The run's tables: each one's frame (its view's columns) and the version the run wrote."""

    frames: dict[str, DataFrame] = field(default_factory=dict)
    versions: dict[str, TableVersion] = field(default_factory=dict)
    #: a versioned table's every version (`versions_frame`), for joins as_of an event time
    histories: dict[str, DataFrame] = field(default_factory=dict)

    def add(self, spark: JobSession, table: TableSpec, rows: pa.Table | None) -> None:
        """Table ``table`` with ``rows`` (its files' rows): its view, and its versions when a join reads them."""
        self.frames[table.name] = table_frame(spark, table, rows)
        if table.join is not None and table.join.as_of is not None:
            self.histories[table.name] = versions_frame(spark, table, rows)

    def register_views(self) -> None:
        """Each table as a temporary view of its name, in the frames' own session (SQL transforms read them)."""
        for name, frame in self.frames.items():
            frame.createOrReplaceTempView(name)


def materialize(spark: JobSession, spec: PipelineSpec, checkpoint_id: int, pins: Mapping[str, TablePin],
                files: StateFiles, kafka: Mapping[str, object]) -> MaterializedTables:
    """Every table of ``spec`` at checkpoint ``checkpoint_id``: its pinned base, plus its pinned records,
    written as the checkpoint's files (a retry writes the same bytes, or beside them: `StateFiles.create`)."""
    out = MaterializedTables()
    for table in spec.tables:
        pin = pins.get(table.name)
        if pin is None:
            raise CheckpointError(checkpoint_id, f"its claim pins no version of table {table.name}: the table was "
                                                 "added to the spec after the checkpoint was planned. Let the "
                                                 "checkpoint be aborted (or abort it) and plan the next one")
        started = time.monotonic()
        rows, version = _update(spark, table, checkpoint_id, pin, files, kafka)
        out.versions[table.name] = version
        out.add(spark, table, rows)
        log.info("checkpoint %d: table %s: %d keys after %d offsets of %s (%s, %d files, %d bytes) in %.1f s",
                 checkpoint_id, table.name, version.keys, pin.records, table.topic,
                 "carried forward" if version.written_by != checkpoint_id else "written", len(version.files),
                 version.bytes, time.monotonic() - started)
    return out


def _update(spark: JobSession, table: TableSpec, checkpoint_id: int, pin: TablePin, files: StateFiles,
            kafka: Mapping[str, object]) -> tuple[pa.Table | None, TableVersion]:
    """The table's rows at this checkpoint and the version that holds them (the base's when nothing was read)."""
    from lockstep.store import state_chain

    base = pin.base
    current = files.read_table(base)
    ends = dict(base.ends) if base is not None else {}
    ends.update({r.partition: r.end for r in pin.ranges})
    if not pin.records:
        version = base if base is not None else TableVersion(table.name, table.topic, checkpoint_id, ends)
        return current, version
    first = _first_written(table, checkpoint_id, pin, files, current, ends)
    if first is not None:
        return first
    if table.versions_ms is not None:
        from lockstep.store.table_chain import versioned_delta

        delta = versioned_delta(current, _records(spark, pin, kafka), table.versions_ms)
    else:
        delta = _delta(spark, pin, kafka)
    chain = [] if base is None else list(base.files)
    body = state_chain.parquet(delta)
    if compact_table(list(base.file_bytes) if base is not None else [], len(body), checkpoint_id):
        merged = state_chain.merge([t for t in (current, delta) if t is not None])
        assert merged is not None
        body = state_chain.parquet(merged)
        where, digest = files.put_table(files.table_key(checkpoint_id, table.name), body)
        keys: tuple[str, ...] = (where,)
        digests: tuple[str, ...] = (digest,)
        sizes: tuple[int, ...] = (len(body),)
        rows: pa.Table | None = merged
    else:
        assert base is not None
        where, digest = files.put_table(files.table_key(checkpoint_id, table.name, delta=True), body)
        keys, digests, sizes = (*chain, where), (*base.digests, digest), (*base.file_bytes, len(body))
        rows = state_chain.merge([t for t in (current, delta) if t is not None])
    return rows, TableVersion(table.name, table.topic, checkpoint_id, ends, keys, digests, sizes,
                              _live_keys(rows))


def _first_written(table: TableSpec, checkpoint_id: int, pin: TablePin, files: StateFiles, current: pa.Table | None,
                   ends: dict[int, int]) -> tuple[pa.Table | None, TableVersion] | None:
    """The version an earlier attempt of this same pin wrote, from its file: the first of the aborted checkpoints
    whose pins this one replays (``pin.earlier``), else an earlier attempt of this checkpoint (a retry). Not the
    topic again: compaction or retention may have removed records of the pinned offsets since, and the version
    built from what is left would differ from the one the first attempt joined (docs/joins.md). None: no
    attempt got as far as writing it."""
    from lockstep.store import state_chain

    base = pin.base
    for cid in (*pin.earlier, checkpoint_id):
        for delta in (True, False) if base is not None else (False,):
            key = files.table_key(cid, table.name, delta=delta)
            found = files.written(key)
            if found is None:
                continue
            rows, digest, size = found
            if delta:
                assert base is not None
                rows = state_chain.merge([t for t in (current, rows) if t is not None])
                keys, digests, sizes = (*base.files, key), (*base.digests, digest), (*base.file_bytes, size)
            else:
                keys, digests, sizes = (key,), (digest,), (size,)
            log.info("checkpoint %d: table %s: its pinned version as %s wrote it (%s), not read from %s again",
                     checkpoint_id, table.name, f"aborted checkpoint {cid}" if cid != checkpoint_id
                     else "an earlier attempt", files.url(key), table.topic)
            return rows, TableVersion(table.name, table.topic, checkpoint_id, ends, keys, digests, sizes,
                                      _live_keys(rows))
    return None


def _live_keys(rows: pa.Table | None) -> int:
    """How many keys have a row now (a versioned table's rows hold earlier values and deletions too, and so may a
    table whose spec dropped ``versions`` since, until its keys are touched)."""
    from lockstep.store import state_chain
    from lockstep.store.table_chain import latest_rows

    return state_chain.key_count(latest_rows(rows))


def _records(spark: JobSession, pin: TablePin, kafka: Mapping[str, object]) -> pa.Table:
    """Every pinned record with a key, each a version of its key (a versioned table's; collected)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from lockstep.spark.kafka_reader import read_ranges

    ranges = tuple(r for r in pin.ranges if not r.is_empty)
    collected = (read_ranges(spark, kafka, ranges).filter(F.col("key").isNotNull())
                 .select(F.hex(F.col("key")).alias(KEY), "key", "value", F.col("partition").cast("int"),
                         F.col("offset").cast("bigint"), F.unix_millis(F.col("timestamp")).alias("timestamp_ms"))
                 .toArrow())
    return pa.table({
        KEY: collected[KEY].cast(pa.string()), "key": collected["key"].cast(pa.binary()),
        "value": collected["value"].cast(pa.binary()), "partition": collected["partition"].cast(pa.int32()),
        "offset": collected["offset"].cast(pa.int64()), "timestamp_ms": collected["timestamp_ms"].cast(pa.int64()),
    })


def _delta(spark: JobSession, pin: TablePin, kafka: Mapping[str, object]) -> pa.Table:
    """The latest record of each key the pinned records touch, a tombstone for a null value (one Spark job,
    collected: a table's changes per checkpoint are few next to the stream's records)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from lockstep.spark.kafka_reader import read_ranges

    ranges = tuple(r for r in pin.ranges if not r.is_empty)
    records = read_ranges(spark, kafka, ranges).filter(F.col("key").isNotNull())
    per_partition = records.groupBy("key", "partition").agg(F.max_by(
        F.struct(F.col("value"), F.col("offset"), (F.unix_millis(F.col("timestamp"))).alias("timestamp_ms")),
        F.col("offset")).alias("r"))
    latest = per_partition.groupBy("key").agg(F.max_by(
        F.struct(F.col("r.value").alias("value"), F.col("partition").cast("int").alias("partition"),
                 F.col("r.offset").cast("bigint").alias("offset"), F.col("r.timestamp_ms").alias("timestamp_ms")),
        F.struct(F.col("r.timestamp_ms"), F.col("partition"))).alias("r"))
    collected = latest.select(F.hex(F.col("key")).alias(KEY), F.col("key"), "r.value", "r.partition", "r.offset",
                              "r.timestamp_ms").toArrow()
    tombstone = pc.is_null(collected["value"])
    return pa.table({
        KEY: collected[KEY].cast(pa.string()), "key": collected["key"].cast(pa.binary()),
        "value": collected["value"].cast(pa.binary()), "partition": collected["partition"].cast(pa.int32()),
        "offset": collected["offset"].cast(pa.int64()), "timestamp_ms": collected["timestamp_ms"].cast(pa.int64()),
        TOMBSTONE: tombstone,
    })


def table_frame(spark: JobSession, table: TableSpec, rows: pa.Table | None) -> DataFrame:
    """The table's view: each key's row (a versioned table's latest value) decoded by its formats
    (`VIEW_COLUMNS`); a row that does not decode is left out. Broadcast: joins against it keep the input's
    partitioning."""
    from pyspark.sql import functions as F

    from lockstep.store.table_chain import latest_rows

    frame = _decoded(spark, table, latest_rows(rows))  # one row per key, even of rows kept with versions before
    return F.broadcast(frame.select(*VIEW_COLUMNS[:2], *(["data"] if table.value.decoded else []),
                                    *VIEW_COLUMNS[3:]))


def versions_frame(spark: JobSession, table: TableSpec, rows: pa.Table | None) -> DataFrame:
    """A versioned table's every version, decoded (the view's columns and ``timestamp_ms``; a deletion has a
    null ``value``), for joins ``as_of`` an event time."""
    return _decoded(spark, table, rows)


def _decoded(spark: JobSession, table: TableSpec, rows: pa.Table | None) -> DataFrame:
    from pyspark.sql import functions as F

    from lockstep.registry.schemas import Reading
    from lockstep.spark.codecs import DATA_COLUMN, DECODE_ERROR, decode

    session = cast("SparkSession", spark)
    if rows is None or not rows.num_rows:  # no rows to infer a schema from (a Connect session refuses to)
        frame = session.createDataFrame([], ROW_DDL)
    else:
        frame = session.createDataFrame(rows.select(list(ROW_COLUMNS)).combine_chunks())
    readings = [Reading(part, fmt, fmt.schema) for part, fmt in (("value", table.value), ("key", table.key))
                if fmt.decoded]
    if readings:
        frame = decode(frame, readings).filter(F.col(DECODE_ERROR).isNull())
    columns = [F.col(DATA_COLUMN["key"]).alias("key") if table.key.decoded else F.col("key"), F.col("value")]
    if table.value.decoded:
        columns.append(F.col("data"))
    columns += [F.col("partition"), F.col("offset"),
                F.timestamp_millis(F.col("timestamp_ms")).alias("timestamp"), F.col("timestamp_ms")]
    return frame.select(*columns)


def join_tables(spec: PipelineSpec, tables: MaterializedTables, decoded: DataFrame) -> DataFrame:
    """``decoded`` (the input, each record's `DECODE_ERROR` set when it did not decode) with every table
    that declares ``join`` joined in, in the spec's order: a column of the table's name, a struct of its
    row (the view's columns), null without one. With ``as_of``, the row is the version the key had at the
    record's event time: the last of its versions (by timestamp, partition, offset) at or before it, none
    when that is a deletion or there is none. An inner join drops the records without a row, or sets their
    `DECODE_ERROR` to why (`NO_ROW`) so that they go to the dead-letter topic as they came
    (`lockstep.spark.codecs.undecodable`)."""
    from pyspark.sql import functions as F

    from lockstep.spark.codecs import DECODE_ERROR
    from lockstep.spark.keyed_state import event_ms

    for table in spec.tables:
        j = table.join
        if j is None:
            continue
        row = "__ls_row_" + table.name
        match = "__ls_match_" + table.name
        left = decoded.withColumn(match, F.expr(j.by))
        at = None
        if j.as_of is None:
            frame = tables.frames[table.name]
            right = F.broadcast(frame.select(F.col("key").alias(match),
                                             F.struct(*[F.col(c) for c in frame.columns]).alias(row)))
            joined = left.join(right, on=match, how="left")
        else:
            at = "__ls_at_" + table.name
            history = "__ls_versions_" + table.name
            left = left.withColumn(at, event_ms(spec, f"tables.{table.name}.join.as_of", j.as_of, left, "the input"))
            joined = left.join(F.broadcast(_histories(tables.histories[table.name], match, history)), on=match,
                               how="left")
            chosen = F.try_element_at(F.filter(F.col(history), partial(_valid_at, F.col(at))), F.lit(-1))
            joined = joined.withColumn(row, F.when(chosen.isNotNull() & ~chosen["gone"], chosen["row"])) \
                .drop(history)
        present = F.col(row).isNotNull()
        if j.how == "inner" and j.missing == "drop":
            joined = joined.filter(present | F.col(DECODE_ERROR).isNotNull())
        elif j.how == "inner":
            why = F.concat(F.lit(f"no row in table {table.name} for {j.by} = "),
                           F.coalesce(F.col(match).cast("string"), F.lit("null")),
                           *([F.lit(" as of "), F.coalesce(F.col(at).cast("string"), F.lit("null")),
                              F.lit(" (epoch ms)")] if at is not None else []),
                           F.lit(f" (tables.{table.name}.join)"))
            joined = joined.withColumn(DECODE_ERROR, F.when(F.col(DECODE_ERROR).isNull() & ~present, why)
                                       .otherwise(F.col(DECODE_ERROR)))
        decoded = joined.drop(match, *([at] if at is not None else [])).withColumnRenamed(row, table.name)
    return decoded


def _valid_at(at: Column, version: Column) -> Column:
    """Whether ``version`` had begun at event time ``at`` (ms)."""
    return version["t"] <= at


def _histories(versions: DataFrame, match: str, column: str) -> DataFrame:
    """Per key, its versions in order: (t: timestamp ms, p, o, gone: a deletion, row: the view's columns)."""
    from pyspark.sql import functions as F

    view = [c for c in versions.columns if c != "timestamp_ms"]
    entries = versions.select(F.col("key").alias(match), F.struct(
        F.col("timestamp_ms").alias("t"), F.col("partition").alias("p"), F.col("offset").alias("o"),
        F.col("value").isNull().alias("gone"), F.struct(*[F.col(c) for c in view]).alias("row")).alias("v"))

    def before(a: Column, b: Column) -> Column:
        return (F.when(a["t"] < b["t"], -1).when(a["t"] > b["t"], 1).when(a["p"] < b["p"], -1)
                .when(a["p"] > b["p"], 1).when(a["o"] < b["o"], -1).when(a["o"] > b["o"], 1).otherwise(0))

    return entries.groupBy(match).agg(F.array_sort(F.collect_list("v"), before).alias(column))
