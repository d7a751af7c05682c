"""A pipeline's tables in its Spark run: each table's version as the claim pins it, materialized from
its stored files and the pinned records of its topic, written back as files, and offered to the
transform (docs/joins.md).

A table holds the latest record per key of its topic: a record sets its key's row, a record with a
null value (a tombstone) removes it. A key is its **decoded** key (by the table's ``key`` format), so two
encodings of one key (``{"id":1}`` and ``{"id": 1}``) are one row, and a tombstone of either deletes it. A
key's latest record is its highest offset; a key found in several partitions (two encodings may hash
apart) takes the latest timestamp (then the higher partition). Records without a key are not rows of any
table and are skipped. A record whose key or value does not decode is no row: its key keeps the row it
had, and the record goes to the pipeline's dead-letter topic as it came, with the reason, in the
checkpoint's transactions (`MaterializedTables.dead_letters`), never a silent deletion.

Stored like keyed state (`lockstep.store.state_chain`, one chain per table): the checkpoint that reads
table records writes a **delta** (the new latest row, or a tombstone, of each key those records touch)
or, when the deltas have grown (`lockstep.tables.pinning.compact_table`), a new **base** of the whole
table, under ``state/<checkpoint>/table-<name>[.delta].parquet``, before ``prepared.json`` names them.
The rows keep the raw key and value (of the key's latest record), keyed by the decoded key (``__ls_key``:
the hex of the decoded key's JSON; of the raw bytes for a string or bytes key, as before keys were decoded);
the view decodes them again, so a changed value schema reads the same files anew.

The table reaches the transform two ways:
- SQL transforms read a view of the table's name: ``key`` (decoded by ``key``: a string by default),
  ``value`` (raw), ``data`` (the value decoded, with a value format), ``partition``, ``offset``,
  ``timestamp``. A stored row that does not decode (its schema changed since it was read) is left out.
- ``join:`` joins it into every input record before the transform (Python or SQL): the record gets a
  column named after the table, a struct of those fields, null without a row (``how: left``); an inner
  join drops the records without a row, or dead-letters them with the reason (``missing``).

The table is small next to the stream it enriches (it is held by the driver, as the Arrow table it
writes), so the join is a broadcast: the input is not shuffled, and each source partition's records stay
in one task, in offset order, as the writers' repair needs.
"""
from __future__ import annotations

__all__ = [
    "DEAD_LETTER_COLUMNS", "MaterializedTables", "VIEW_COLUMNS", "committed", "join_tables", "materialize",
    "table_frame", "versions_frame",
]

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, cast

from lockstep.errors import CheckpointError
from lockstep.model.state_rows import KEY, TOMBSTONE
from lockstep.spec import PipelineSpec, TableSpec
from lockstep.tables import chain
from lockstep.tables.pins import TablePin, TableVersion

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

    from lockstep.formats.resolution import Reading
    from lockstep.spark.target import JobSession
    from lockstep.store.state_files import StateFiles

log = logging.getLogger(__name__)

#: The columns of a table's rows in its files, besides ``__ls_key`` (the key's bytes in hex) and, in a
#: delta, ``__ls_tombstone``.
ROW_COLUMNS = ("key", "value", "partition", "offset", "timestamp_ms")
ROW_DDL = "key binary, value binary, partition int, offset bigint, timestamp_ms bigint"
#: The columns of a table's dead letters (`MaterializedTables.dead_letters`) besides their reason, `DECODE_ERROR`.
DEAD_LETTER_COLUMNS = ("key", "value", "topic", "partition", "offset")
#: The columns of a table's view, in order (``data`` only with a value format).
VIEW_COLUMNS = ("key", "value", "data", "partition", "offset", "timestamp")


@dataclass
class MaterializedTables:
    """The run's tables: each one's frame (its view's columns) and the version the run wrote."""

    frames: dict[str, DataFrame] = field(default_factory=dict)
    versions: dict[str, TableVersion] = field(default_factory=dict)
    #: a versioned table's every version (`versions_frame`), for joins as_of an event time
    histories: dict[str, DataFrame] = field(default_factory=dict)
    #: per table, the records this run read that do not decode (`DEAD_LETTER_COLUMNS`, `DECODE_ERROR`)
    undecodable: dict[str, pa.Table] = field(default_factory=dict)

    def dead_letters(self, spark: JobSession) -> DataFrame | None:
        """The table records that do not decode, as dead letters in the input's columns (`DEAD_LETTER_COLUMNS`)
        with their reason in `DECODE_ERROR`, for the run to write beside the input's
        (`lockstep.formats.codecs.undecodable`); None when every record decoded."""
        import pyarrow as pa

        bad = [t for t in self.undecodable.values() if t.num_rows]
        if not bad:
            return None
        return cast("SparkSession", spark).createDataFrame(pa.concat_tables(bad).combine_chunks())

    def add(self, spark: JobSession, table: TableSpec, rows: pa.Table | None) -> None:
        """Table ``table`` with ``rows`` (its files' rows): its view, and its versions when a join reads them."""
        self.frames[table.name] = table_frame(spark, table, rows)
        if table.join is not None and table.join.as_of is not None:
            self.histories[table.name] = versions_frame(spark, table, rows)

    def register_views(self) -> None:
        """Each table as a temporary view of its name, in the frames' own session (SQL transforms read them)."""
        for name, frame in self.frames.items():
            frame.createOrReplaceTempView(name)


def committed(spark: JobSession, spec: PipelineSpec, files: StateFiles, versions: Mapping[str, TableVersion],
              where: str) -> MaterializedTables:
    """Every table of ``spec`` at the versions a checkpoint committed (``versions``), read from their files
    (never from the tables' topics, which Kafka may have compacted since): what ``lockstep verify`` and
    ``lockstep replay --compare`` join a completed checkpoint's records with. ``where`` names the checkpoint
    in the error for a table it records no version of."""
    from lockstep.errors import MetadataError

    missing = [t.name for t in spec.tables if t.name not in versions]
    if missing:
        raise MetadataError(where, f"records no version of table {', '.join(missing)}")
    tables = MaterializedTables()
    for table in spec.tables:
        tables.add(spark, table, files.read_table(versions[table.name]))
        tables.versions[table.name] = versions[table.name]
    return tables


def materialize(spark: JobSession, spec: PipelineSpec, checkpoint_id: int, pins: Mapping[str, TablePin],
                files: StateFiles, kafka: Mapping[str, object]) -> MaterializedTables:
    """Every table of ``spec`` at checkpoint ``checkpoint_id``: its pinned base, plus its pinned records,
    written as the checkpoint's files (a retry writes the same bytes, or beside them: `StateFiles.create`)."""
    from lockstep.formats.codecs import DECODE_ERROR

    out = MaterializedTables()
    for table in spec.tables:
        pin = pins.get(table.name)
        if pin is None:
            raise CheckpointError(checkpoint_id, f"its claim pins no version of table {table.name}: the table was "
                                                 "added to the spec after the checkpoint was planned. Let the "
                                                 "checkpoint be aborted (or abort it) and plan the next one")
        started = time.monotonic()
        rows, version, bad = _update(spark, table, checkpoint_id, pin, files, kafka)
        out.versions[table.name] = version
        out.add(spark, table, rows)
        if bad is not None and bad.num_rows and table.on_error == "fail":
            raise CheckpointError(checkpoint_id, _undecodable_refusal(table, bad))
        if bad is not None and bad.num_rows:
            out.undecodable[table.name] = bad
            log.warning("checkpoint %d: table %s: %d records of %s do not decode (the first: %s); their keys keep "
                        "the rows they had, and they go to the dead-letter topic with the reason", checkpoint_id,
                        table.name, bad.num_rows, table.topic, bad.column(DECODE_ERROR)[0].as_py())
        log.info("checkpoint %d: table %s: %d keys after %d offsets of %s (%s, %d files, %d bytes) in %.1f s",
                 checkpoint_id, table.name, version.keys, pin.records, table.topic,
                 "carried forward" if version.written_by != checkpoint_id else "written", len(version.files),
                 version.bytes, time.monotonic() - started)
    return out


def _undecodable_refusal(table: TableSpec, bad: pa.Table) -> str:
    """Why a checkpoint stops at table records that do not decode (``tables.<name>.on_error: fail``), naming the
    first of them, and the ways out."""
    from lockstep.formats.codecs import DECODE_ERROR

    first = bad.slice(0, 1).to_pylist()[0]
    where = f"{first.get('topic')}:{first.get('partition')}@{first.get('offset')}"
    more = f" and {bad.num_rows - 1} more" if bad.num_rows > 1 else ""
    return (f"table {table.name}: record {where}{more} does not decode ({first.get(DECODE_ERROR)}), and "
            f"tables.{table.name}.on_error is fail: nothing was written. The record is inside the offsets this "
            f"checkpoint pinned, so every attempt meets it: set tables.{table.name}.on_error: dead_letter to send "
            "it to the dead-letter topic (its key keeps the row it had), then write the fixed row to "
            f"{table.topic}")


def _update(spark: JobSession, table: TableSpec, checkpoint_id: int, pin: TablePin, files: StateFiles,
            kafka: Mapping[str, object]) -> tuple[pa.Table | None, TableVersion, pa.Table | None]:
    """The table's rows at this checkpoint, the version that holds them (the base's when nothing was read),
    and the pinned records that do not decode (None: none read)."""
    base = pin.base
    current = chain.read(files, base)
    ends = dict(base.ends) if base is not None else {}
    ends.update({r.partition: r.end for r in pin.ranges})
    if not pin.records:
        version = base if base is not None else TableVersion(table.name, table.topic, checkpoint_id, ends)
        return current, version, None
    first = chain.first_written(files, table, checkpoint_id, pin, current, ends)
    if first is not None:  # its dead letters are the pinned records' as they decode (an attempt's were aborted)
        return (*first, _undecodable(spark, table, pin, kafka))
    if table.versions_ms is not None:
        records, bad = _records(spark, table, pin, kafka)
        delta = chain.versioned_delta(current, records, table.versions_ms) if records.num_rows else _no_change(records)
    else:
        delta, bad = _delta(spark, table, pin, kafka)
    rows, version = chain.write(files, table, checkpoint_id, pin, current, delta, ends)
    return rows, version, bad


def _keyed(spark: JobSession, table: TableSpec, pin: TablePin, kafka: Mapping[str, object]) -> DataFrame:
    """The pinned records with a key, decoded by the table's formats: each with its decoded key's identity
    (`KEY`: the hex of the decoded key's JSON, so every encoding of one key has one; the raw bytes' for a string
    or bytes key) and why it does not decode (`DECODE_ERROR`, null when it does)."""
    from pyspark.sql import functions as F

    from lockstep.formats.codecs import DATA_COLUMN, DECODE_ERROR, decode
    from lockstep.spark.kafka_reader import read_ranges

    ranges = tuple(r for r in pin.ranges if not r.is_empty)
    records = read_ranges(spark, kafka, ranges).filter(F.col("key").isNotNull())
    readings = _readings(table)
    decoded = decode(records, readings) if readings else records.withColumn(DECODE_ERROR, F.lit(None).cast("string"))
    if table.key.decoded and table.key.format != "string":
        identity = F.hex(F.to_json(F.struct(F.col(DATA_COLUMN["key"]).alias("k"))))
    else:
        identity = F.hex(F.col("key"))
    why = F.concat(F.lit(f"table {table.name}: "), F.col(DECODE_ERROR),
                   F.lit(f" (tables.{table.name}); not a row: its key keeps the row it had"))
    return decoded.withColumn(KEY, identity).withColumn(DECODE_ERROR, F.when(F.col(DECODE_ERROR).isNotNull(), why))


def _readings(table: TableSpec) -> list[Reading]:
    """How a table's key and value decode (declared schemas only: no registry format for tables)."""
    from lockstep.formats.resolution import Reading

    return [Reading(part, fmt, fmt.schema) for part, fmt in (("value", table.value), ("key", table.key))
            if fmt.decoded]


def _rows_and_dead(table: TableSpec, collected: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A collected frame of `_row_columns` split into the table's rows and its dead letters (`DEAD_LETTER_COLUMNS`
    and `DECODE_ERROR`, in offset order)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from lockstep.formats.codecs import DECODE_ERROR

    typed = pa.table({
        KEY: collected[KEY].cast(pa.string()), "key": collected["key"].cast(pa.binary()),
        "value": collected["value"].cast(pa.binary()), "partition": collected["partition"].cast(pa.int32()),
        "offset": collected["offset"].cast(pa.int64()), "timestamp_ms": collected["timestamp_ms"].cast(pa.int64()),
        DECODE_ERROR: collected[DECODE_ERROR].cast(pa.string()),
    })
    bad = pc.is_valid(typed[DECODE_ERROR])
    rows = typed.filter(pc.invert(bad)).drop_columns([DECODE_ERROR])
    dead = typed.filter(bad).sort_by([("partition", "ascending"), ("offset", "ascending")])
    return rows, pa.table({
        "key": dead["key"], "value": dead["value"], "topic": pa.array([table.topic] * dead.num_rows, pa.string()),
        "partition": dead["partition"], "offset": dead["offset"], DECODE_ERROR: dead[DECODE_ERROR]})


def _row_columns(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    from lockstep.formats.codecs import DECODE_ERROR

    return frame.select(F.col(KEY), F.col("key"), F.col("value"), F.col("partition").cast("int").alias("partition"),
                        F.col("offset").cast("bigint").alias("offset"),
                        F.unix_millis(F.col("timestamp")).alias("timestamp_ms"), F.col(DECODE_ERROR))


def _undecodable(spark: JobSession, table: TableSpec, pin: TablePin, kafka: Mapping[str, object]) -> pa.Table:
    """The pinned records that do not decode, as dead letters (one Spark job, collected)."""
    from pyspark.sql import functions as F

    from lockstep.formats.codecs import DECODE_ERROR

    return _rows_and_dead(table, _row_columns(_keyed(spark, table, pin, kafka)
                                              .filter(F.col(DECODE_ERROR).isNotNull())).toArrow())[1]


def _records(spark: JobSession, table: TableSpec, pin: TablePin,
             kafka: Mapping[str, object]) -> tuple[pa.Table, pa.Table]:
    """Every pinned record with a key that decodes, each a version of its key (a versioned table's), and those
    that do not decode, as dead letters (one Spark job, collected)."""
    return _rows_and_dead(table, _row_columns(_keyed(spark, table, pin, kafka)).toArrow())


def _no_change(records: pa.Table) -> pa.Table:
    """An empty delta (every record read did not decode): the checkpoint's version is its base's rows."""
    import pyarrow as pa

    empty = records.slice(0, 0)
    return empty.append_column(TOMBSTONE, pa.array([], pa.bool_()))


def _delta(spark: JobSession, table: TableSpec, pin: TablePin,
           kafka: Mapping[str, object]) -> tuple[pa.Table, pa.Table]:
    """The latest record of each decoded key the pinned records touch, a tombstone for a null value, and the
    records that do not decode, as dead letters (one Spark job, collected: a table's changes per checkpoint are
    few next to the stream's records). A record that does not decode is no candidate: its key's latest record
    is the latest that decodes, else the row it had."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from lockstep.formats.codecs import DECODE_ERROR

    records = _keyed(spark, table, pin, kafka)
    good = records.filter(F.col(DECODE_ERROR).isNull())
    per_partition = good.groupBy(KEY, "partition").agg(F.max_by(
        F.struct(F.col("key"), F.col("value"), F.col("offset"), F.col("timestamp")), F.col("offset")).alias("r"))
    latest = per_partition.groupBy(KEY).agg(F.max_by(
        F.struct(F.col("r.key").alias("key"), F.col("r.value").alias("value"), F.col("partition"),
                 F.col("r.offset").alias("offset"), F.col("r.timestamp").alias("timestamp")),
        F.struct(F.col("r.timestamp"), F.col("partition"))).alias("r"))
    rows = latest.select(F.col(KEY), "r.key", "r.value", "r.partition", "r.offset", "r.timestamp",
                         F.lit(None).cast("string").alias(DECODE_ERROR))
    dead = records.filter(F.col(DECODE_ERROR).isNotNull()).select(KEY, "key", "value", "partition", "offset",
                                                                   "timestamp", DECODE_ERROR)
    delta, bad = _rows_and_dead(table, _row_columns(rows.unionByName(dead)).toArrow())
    return delta.append_column(TOMBSTONE, pc.is_null(delta["value"]).cast(pa.bool_())), bad


def table_frame(spark: JobSession, table: TableSpec, rows: pa.Table | None) -> DataFrame:
    """The table's view: each key's row (a versioned table's latest value) decoded by its formats
    (`VIEW_COLUMNS`); a row that does not decode is left out. Broadcast: joins against it keep the input's
    partitioning."""
    from pyspark.sql import functions as F

    from lockstep.tables.chain import latest_rows

    frame = _decoded(spark, table, latest_rows(rows))  # one row per key, even of rows kept with versions before
    return F.broadcast(frame.select(*VIEW_COLUMNS[:2], *(["data"] if table.value.decoded else []),
                                    *VIEW_COLUMNS[3:]))


def versions_frame(spark: JobSession, table: TableSpec, rows: pa.Table | None) -> DataFrame:
    """A versioned table's every version, decoded (the view's columns and ``timestamp_ms``; a deletion has a
    null ``value``), for joins ``as_of`` an event time."""
    return _decoded(spark, table, rows)


def _decoded(spark: JobSession, table: TableSpec, rows: pa.Table | None) -> DataFrame:
    from pyspark.sql import functions as F

    from lockstep.formats.codecs import DATA_COLUMN, DECODE_ERROR, decode

    session = cast("SparkSession", spark)
    if rows is None or not rows.num_rows:  # no rows to infer a schema from (a Connect session refuses to)
        frame = session.createDataFrame([], ROW_DDL)
    else:
        frame = session.createDataFrame(rows.select(list(ROW_COLUMNS)).combine_chunks())
    readings = _readings(table)
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
    (`lockstep.formats.codecs.undecodable`)."""
    from pyspark.sql import functions as F

    from lockstep.formats.codecs import DECODE_ERROR
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
