"""The run's ``iceberg`` stage (``sink.iceberg``): the records the checkpoint wrote to ``sink.topic`` become the
table's rows, one data file per source partition, staged as one snapshot on the checkpoint's branch
(`lockstep.iceberg.table_sink`) before prepared.json names it.

A row holds the transform's output columns but Lockstep's own (the provenance, headers, error and route columns
the writers read, and the Kafka read's timestamps): ``value`` and ``key`` as the writers write them, and any other
column the transform returned.
Beside them, where it came from: ``lockstep_source_topic``, ``lockstep_source_partition``,
``lockstep_source_offset``, and ``lockstep_checkpoint``, the checkpoint that wrote it. Dead letters and
records routed to other topics are not the table's.

The rows of a source partition are in files of their own: a repair that gives a source partition back to the
next checkpoint (its Kafka transaction lost) publishes the checkpoint's other files, and the next checkpoint
writes that partition's rows again, exactly as it does to Kafka.

The Spark tasks write the files, each a file per source partition (and table partition, ``sink.iceberg.
partitioning``) it holds rows of (`table_sink.SourceFiles`), streamed as its rows come; the driver stages the
snapshot that adds them. Nothing crosses to the driver but what names each file and the table's entry for it.
"""
from __future__ import annotations

__all__ = [
    "Staged", "stage_rows",
]

import logging
import pickle
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from lockstep.iceberg.staged_table import PROVENANCE_COLUMNS, TableFile
from lockstep.model import failpoints
from lockstep.model.output_contract import ROUTE_COLUMN, sink_record_sizes

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

    from lockstep.iceberg.staged_table import StagedTable
    from lockstep.iceberg.table_sink import FileTarget
    from lockstep.spec import PipelineSpec

log = logging.getLogger("lockstep.spark.job")

#: The writers' columns, and the Kafka read's, that are not the table's (the provenance columns stand for them).
_LOCKSTEP_COLUMNS = frozenset({"topic", "partition", "offset", "headers", "error", ROUTE_COLUMN, "timestamp",
                               "timestampType"})
#: Lockstep's internal columns start so.
_INTERNAL = ("__ls_", "_lockstep")
#: The records' own headers, kept beside the rows until their size is known.
_HEADERS = "__ls_table_headers"
#: The bytes of the value written, kept for the size estimate when the table holds the value's record instead.
_VALUE_BYTES = "__ls_table_value_bytes"
#: The written value read back as its record (`lockstep.formats.codecs.Formats.table_record`).
_RECORD = "__ls_table_record"
#: Whether a record is a dead letter (its ``error`` set): counted and left out by the tasks, not the table's.
_DEAD = "__ls_table_dead"
#: What each task hands back: a row per file it wrote (with the table's entry for it, pickled), and one without a
#: path counting the records it left out (too large for the topic, and dead letters).
_TASK_RESULT = "path string, source string, records long, dropped long, dead long, entry binary"


class Staged(NamedTuple):
    """The snapshot staged, and how many dead letters the tasks saw (and left out) in the output they read."""

    table: StagedTable
    dead_letters: int


def stage_rows(spec: PipelineSpec, cid: int, written: DataFrame, sink_max_bytes: int | None,
               not_the_tables: tuple[str, ...] = (), record: Callable[[Column], Column] | None = None) -> Staged:
    """The rows of checkpoint ``cid``'s output ``written`` (as the writers took it, every column the transform
    returned but ``not_the_tables``) that went to ``sink.topic`` (or, without one, that are not dead letters),
    written by the Spark tasks and staged on the checkpoint's branch. A record larger than the topic takes
    (``sink_max_bytes``, estimated as the writers estimate it) went to the dead-letter topic instead: not the
    table's either. None: no topic, no limit. The tasks count the dead letters they leave out: a table alone's
    checkpoint writes its Kafka transactions only when there are some. ``record``: how the table reads the
    written ``value`` back as its record (the sink's Avro schema): the record's fields are the table's columns in
    place of ``value``."""
    from pyspark.sql import functions as F

    from lockstep.iceberg.table_sink import IcebergTable, WrittenFile

    iceberg = spec.sink.iceberg
    assert iceberg is not None  # the caller's condition
    rows = written
    dead = [F.col("error").isNotNull().alias(_DEAD)] if "error" in rows.columns else []
    if ROUTE_COLUMN in rows.columns:
        rows = rows.where(F.col(ROUTE_COLUMN).isNull())
    columns: list[Any] = [c for c in rows.columns
                          if c not in _LOCKSTEP_COLUMNS and c not in not_the_tables and not c.startswith(_INTERNAL)]
    headers = [F.col("headers").alias(_HEADERS)] if "headers" in rows.columns and sink_max_bytes is not None else []
    if record is not None and "value" in columns:
        rows, columns = _as_record(rows, columns, record, iceberg.table)
        if sink_max_bytes is not None:
            headers.append(F.octet_length("value").cast("long").alias(_VALUE_BYTES))
    rows = rows.select(*columns, F.col("topic").alias(PROVENANCE_COLUMNS[0]),
                       F.col("partition").cast("int").alias(PROVENANCE_COLUMNS[1]),
                       F.col("offset").cast("bigint").alias(PROVENANCE_COLUMNS[2]),
                       F.lit(cid).cast("bigint").alias(PROVENANCE_COLUMNS[3]), *headers, *dead)
    table = IcebergTable(iceberg.catalog_conn_id, iceberg.table)
    target = table.target(spec.name, cid, _arrow_schema(rows.drop(_HEADERS, _DEAD, _VALUE_BYTES)), iceberg.partitioning)
    results = rows.mapInArrow(partial(_write_task, target, spec.name, cid, sink_max_bytes), _TASK_RESULT).collect()
    files = [WrittenFile(TableFile(r["path"], r["records"], (r["source"],)), pickle.loads(r["entry"]))
             for r in results if r["path"]]
    dropped, dead_letters = sum(r["dropped"] for r in results), sum(r["dead"] for r in results)
    if dropped:
        log.info("checkpoint %d: %d records too large for the sink topic went to the dead-letter topic: not the "
                 "table's rows either", cid, dropped)
    failpoints.hit("iceberg.after_files")
    staged = table.stage_files(spec.name, cid, files)
    log.info("checkpoint %d: %d rows for Iceberg table %s in %d files, staged as snapshot %s on branch %s", cid,
             staged.records, iceberg.table, len(staged.files), staged.snapshot_id, staged.branch)
    failpoints.hit("iceberg.after_staged")
    return Staged(staged, dead_letters)


def _as_record(rows: DataFrame, columns: list[Any], record: Callable[[Column], Column],
               table: str) -> tuple[DataFrame, list[Any]]:
    """``rows`` with the written value read back as its record (a dead letter's is null: not the table's), and
    ``columns`` with the record's fields in place of ``value``; a field named as another of the table's columns is
    refused, naming both."""
    from pyspark.sql import functions as F

    from lockstep.errors import TerminalError

    ok = F.col("error").isNull() if "error" in rows.columns else F.lit(True)
    rows = rows.withColumn(_RECORD, F.when(ok, record(F.col("value"))))
    fields = list(rows.schema[_RECORD].dataType.fieldNames())  # type: ignore[attr-defined]
    clash = sorted(set(fields) & ((set(columns) - {"value"}) | set(PROVENANCE_COLUMNS)))
    if clash:
        raise TerminalError(f"Iceberg table {table}: the sink value's record has the field(s) {', '.join(clash)}, "
                            "which the table also takes from the transform's output (or as Lockstep's provenance): "
                            "rename one of them, or drop the column from the transform's output (docs/iceberg.md)")
    at = columns.index("value")
    return rows, [*columns[:at], *[F.col(_RECORD).getField(f).alias(f) for f in fields], *columns[at + 1:]]


def _write_task(target: FileTarget, pipeline: str, cid: int, limit: int | None,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One Spark task's share: its rows the sink topic took, a file per source partition (`SourceFiles`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from lockstep.iceberg.table_sink import SourceFiles

    files = SourceFiles(target, uuid.uuid4().hex[:12])
    dropped = dead = 0
    for batch in batches:
        table = pa.Table.from_batches([batch])
        if _DEAD in table.column_names:
            flags = table[_DEAD].fill_null(False)
            dead += int(pc.sum(flags).as_py() or 0)
            table = table.filter(pc.invert(flags)).drop_columns([_DEAD])
        kept = _within(table, pipeline, cid, limit) if limit is not None else table
        dropped += table.num_rows - kept.num_rows
        for source, part in _by_source(kept):
            files.add(source, part)
    rows = [{"path": w.file.path, "source": w.file.sources[0], "records": w.file.records, "dropped": 0, "dead": 0,
             "entry": pickle.dumps(w.data_file)} for w in files.close()]
    if dropped or dead:
        rows.append({"path": None, "source": None, "records": 0, "dropped": dropped, "dead": dead, "entry": None})
    schema = pa.schema([("path", pa.string()), ("source", pa.string()), ("records", pa.int64()),
                        ("dropped", pa.int64()), ("dead", pa.int64()), ("entry", pa.binary())])
    yield pa.RecordBatch.from_pylist(rows, schema=schema)


def _within(batch: pa.RecordBatch | pa.Table, pipeline: str, cid: int, limit: int) -> pa.Table:
    """The rows whose records the sink topic took: without those the writers found too large for it
    (`lockstep.model.output_contract.sink_record_sizes`, their one estimate), and without the headers column."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    n = table.num_rows

    def lengths(values: object) -> np.ndarray:
        return np.asarray(pc.binary_length(values).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)

    def column(name: str) -> np.ndarray:
        return lengths(table[name]) if name in table.column_names else np.zeros(n, dtype=np.int64)

    user_bytes, users = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    if _HEADERS in table.column_names:
        lists = table[_HEADERS].combine_chunks()
        users = np.asarray(pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        flat = pc.list_flatten(lists)
        if len(flat):
            parents = np.asarray(pc.list_parent_indices(lists).to_numpy(zero_copy_only=False))
            weights = lengths(flat.field("key")) + lengths(flat.field("value"))
            user_bytes = np.bincount(parents, weights=weights, minlength=n).astype(np.int64)
        table = table.drop_columns([_HEADERS])
    value = column("value")
    if _VALUE_BYTES in table.column_names:  # the table holds the value's record: the bytes written, measured before
        value = np.asarray(table[_VALUE_BYTES].fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        table = table.drop_columns([_VALUE_BYTES])
    topic, partition, offset = PROVENANCE_COLUMNS[:3]
    sizes = sink_record_sizes(column("key"), value, lengths(table[topic]),
                              lengths(pc.cast(table[partition], pa.string())),
                              lengths(pc.cast(table[offset], pa.string())), cid, pipeline, user_bytes, users)
    keep = sizes <= limit
    return table if keep.all() else table.filter(pa.array(keep))


def _by_source(table: pa.Table) -> Iterator[tuple[str, pa.Table]]:
    """``table``'s rows by source partition (``topic:partition``): most batches hold one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not table.num_rows:
        return
    topic, partition = table[PROVENANCE_COLUMNS[0]], table[PROVENANCE_COLUMNS[1]]
    topics, partitions = pc.unique(topic), pc.unique(partition)
    if len(topics) == 1 and len(partitions) == 1:
        yield f"{topics[0].as_py()}:{partitions[0].as_py()}", table
        return
    keys = pc.binary_join_element_wise(topic, pc.cast(partition, pa.string()), ":")
    for key in pc.unique(keys).to_pylist():
        yield key, table.filter(pc.equal(keys, key))


def _arrow_schema(rows: DataFrame) -> pa.Schema:
    """The rows' Arrow schema as the tasks write it and Iceberg reads it back (plain strings and binaries)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from lockstep.iceberg.table_sink import plain_type

    schema = to_arrow_schema(rows.schema)
    return pa.schema([f.with_type(plain_type(f.type)) for f in schema])
