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
    "MaterializedTables", "NO_ROW", "VIEW_COLUMNS", "join_tables", "materialize", "stored_rows", "table_frame",
]

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from lockstep.errors import CheckpointError
from lockstep.model.state_rows import KEY, TOMBSTONE
from lockstep.model.tables import TablePin, TableVersion
from lockstep.rules.tables import compact_table
from lockstep.spec import PipelineSpec, TableSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from lockstep.spark.target import JobSession
    from lockstep.store.state_files import StateFiles

log = logging.getLogger(__name__)

#: The columns of a table's rows in its files, besides ``__ls_key`` (the key's bytes in hex) and, in a
#: delta, ``__ls_tombstone``.
ROW_COLUMNS = ("key", "value", "partition", "offset", "timestamp_ms")
ROW_DDL = "key binary, value binary, partition int, offset bigint, timestamp_ms bigint"
#: The columns of a table's view, in order (``data`` only with a value format).
VIEW_COLUMNS = ("key", "value", "data", "partition", "offset", "timestamp")
#: Why an inner join dead-letters a record (`TableJoin.missing`).
NO_ROW = "no row in table {table} for {by} (tables.{table}.join)"


@dataclass
class MaterializedTables:
    """The run's tables: each one's frame (its view's columns) and the version the run wrote."""

    frames: dict[str, DataFrame] = field(default_factory=dict)
    versions: dict[str, TableVersion] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

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
        out.frames[table.name] = table_frame(spark, table, rows)
        out.metrics[f"table_{table.name}_seconds"] = round(time.monotonic() - started, 3)
        out.metrics[f"table_{table.name}_keys"] = float(version.keys)
        log.info("checkpoint %d: table %s: %d keys after %d offsets of %s (%s, %d files, %d bytes) in %.1f s",
                 checkpoint_id, table.name, version.keys, pin.records, table.topic,
                 "carried forward" if version.written_by != checkpoint_id else "written", len(version.files),
                 version.bytes, time.monotonic() - started)
    return out


def stored_rows(files: StateFiles, version: TableVersion | None) -> pa.Table | None:
    """A table version's rows, its chain merged (None: no rows)."""
    from lockstep.store import state_chain

    if version is None or not version.files:
        return None
    digests = version.digests if len(version.digests) == len(version.files) else (None,) * len(version.files)
    chain = [files.table(k, version.written_by, d) for k, d in zip(version.files, digests, strict=True)]
    return state_chain.merge(chain)


def _update(spark: JobSession, table: TableSpec, checkpoint_id: int, pin: TablePin, files: StateFiles,
            kafka: Mapping[str, object]) -> tuple[pa.Table | None, TableVersion]:
    """The table's rows at this checkpoint and the version that holds them (the base's when nothing was read)."""
    from lockstep.store import state_chain

    base = pin.base
    current = stored_rows(files, base)
    ends = dict(base.ends) if base is not None else {}
    ends.update({r.partition: r.end for r in pin.ranges})
    if not pin.records:
        version = base if base is not None else TableVersion(table.name, table.topic, checkpoint_id, ends)
        return current, version
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
                              state_chain.key_count(rows))


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
    """The table's view: its rows decoded by its formats (`VIEW_COLUMNS`); a row that does not decode is
    left out. Broadcast: joins against it keep the input's partitioning."""
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
                F.timestamp_millis(F.col("timestamp_ms")).alias("timestamp")]
    return F.broadcast(frame.select(*columns))


def join_tables(spec: PipelineSpec, tables: MaterializedTables, decoded: DataFrame) -> DataFrame:
    """``decoded`` (the input, each record's `DECODE_ERROR` set when it did not decode) with every table
    that declares ``join`` joined in, in the spec's order: a column of the table's name, a struct of its
    row. An inner join drops the records without a row, or sets their `DECODE_ERROR` to `NO_ROW` so that
    they go to the dead-letter topic as they came (`lockstep.spark.codecs.undecodable`)."""
    from pyspark.sql import functions as F

    from lockstep.spark.codecs import DECODE_ERROR

    for table in spec.tables:
        j = table.join
        if j is None:
            continue
        frame = tables.frames[table.name]
        row = "__ls_row_" + table.name
        match = "__ls_match_" + table.name
        right = F.broadcast(frame.select(F.col("key").alias(match),
                                         F.struct(*[F.col(c) for c in frame.columns]).alias(row)))
        left = decoded.withColumn(match, F.expr(j.by))
        joined = left.join(right, on=match, how="left").drop(match)
        present = F.col(row).isNotNull()
        if j.how == "inner" and j.missing == "drop":
            joined = joined.filter(present | F.col(DECODE_ERROR).isNotNull())
        elif j.how == "inner":
            why = F.lit(NO_ROW.format(table=table.name, by=j.by))
            joined = joined.withColumn(DECODE_ERROR, F.when(F.col(DECODE_ERROR).isNull() & ~present, why)
                                       .otherwise(F.col(DECODE_ERROR)))
        decoded = joined.withColumnRenamed(row, table.name)
    return decoded
