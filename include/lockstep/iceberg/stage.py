"""The run's ``iceberg`` stage (``sink.iceberg``): the records the checkpoint wrote to ``sink.topic`` become the
table's rows, one data file per source partition, staged as one snapshot on the checkpoint's branch
(`lockstep.iceberg.table_sink`) before prepared.json names it.

A row holds the transform's output columns but Lockstep's own (the provenance, headers, error and route columns
the writers read, and the Kafka read's timestamps): ``value`` and ``key`` as the writers write them, and any other
column the transform returned.
Beside them, where it came from: ``lockstep_source_topic``, ``lockstep_source_partition``,
``lockstep_source_offset``, and ``lockstep_checkpoint``, the checkpoint that wrote it. Dead letters and
records routed to other topics are not the table's.

The rows of a source partition are in one file of their own: a repair that gives a source partition back to the
next checkpoint (its Kafka transaction lost) publishes the checkpoint's other files, and the next checkpoint
writes that partition's rows again, exactly as it does to Kafka.

They are collected to the driver (Arrow), which writes the files: the first version of the sink, measured in
docs/iceberg.md.
"""
from __future__ import annotations

__all__ = [
    "stage_rows",
]

import logging
from typing import TYPE_CHECKING

from lockstep.iceberg.staged_table import PROVENANCE_COLUMNS
from lockstep.model import failpoints
from lockstep.model.output_contract import ROUTE_COLUMN, sink_record_size

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from lockstep.iceberg.staged_table import StagedTable
    from lockstep.spec import PipelineSpec

log = logging.getLogger("lockstep.spark.job")

#: The writers' columns, and the Kafka read's, that are not the table's (the provenance columns stand for them).
_LOCKSTEP_COLUMNS = frozenset({"topic", "partition", "offset", "headers", "error", ROUTE_COLUMN, "timestamp",
                               "timestampType"})
#: Lockstep's internal columns start so.
_INTERNAL = ("__ls_", "_lockstep")
#: The records' own headers, kept beside the rows until their size is known.
_HEADERS = "__ls_table_headers"


def stage_rows(spec: PipelineSpec, cid: int, written: DataFrame, sink_max_bytes: int) -> StagedTable:
    """The rows of checkpoint ``cid``'s output ``written`` (as the writers took it, every column the transform
    returned) that went to ``sink.topic``, written and staged on the checkpoint's branch. A record larger than the
    topic takes (``sink_max_bytes``, estimated as the writers estimate it) went to the dead-letter topic instead:
    not the table's either."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from lockstep.iceberg.table_sink import IcebergTable, RowsOfSource

    iceberg = spec.sink.iceberg
    assert iceberg is not None  # the caller's condition
    rows = written
    if "error" in rows.columns:
        rows = rows.where(F.col("error").isNull())
    if ROUTE_COLUMN in rows.columns:
        rows = rows.where(F.col(ROUTE_COLUMN).isNull())
    columns = [c for c in rows.columns if c not in _LOCKSTEP_COLUMNS and not c.startswith(_INTERNAL)]
    headers = [F.col("headers").alias(_HEADERS)] if "headers" in rows.columns else []
    rows = rows.select(*columns, F.col("topic").alias(PROVENANCE_COLUMNS[0]),
                       F.col("partition").cast("int").alias(PROVENANCE_COLUMNS[1]),
                       F.col("offset").cast("bigint").alias(PROVENANCE_COLUMNS[2]),
                       F.lit(cid).cast("bigint").alias(PROVENANCE_COLUMNS[3]), *headers)
    arrow = _within(rows.toArrow(), spec.name, cid, sink_max_bytes)
    schema = pa.schema([f.with_type(_plain(f.type)) for f in arrow.schema])
    arrow = arrow.cast(schema)
    parts = []
    if arrow.num_rows:
        keys = pc.binary_join_element_wise(arrow[PROVENANCE_COLUMNS[0]],
                                           pc.cast(arrow[PROVENANCE_COLUMNS[1]], pa.string()), ":")
        arrow = arrow.append_column("_source", keys).sort_by([("_source", "ascending"),
                                                               (PROVENANCE_COLUMNS[2], "ascending")])
        sources = arrow["_source"].to_pylist()
        start = 0
        for i in range(1, len(sources) + 1):
            if i == len(sources) or sources[i] != sources[start]:
                parts.append(RowsOfSource(sources[start], arrow.slice(start, i - start).drop_columns(["_source"])))
                start = i
    table = IcebergTable(iceberg.catalog_conn_id, iceberg.table)
    staged = table.stage(spec.name, cid, parts, schema, written=lambda: failpoints.hit("iceberg.after_files"))
    log.info("checkpoint %d: %d rows for Iceberg table %s in %d files, staged as snapshot %s on branch %s", cid,
             staged.records, iceberg.table, len(staged.files), staged.snapshot_id, staged.branch)
    failpoints.hit("iceberg.after_staged")
    return staged


def _within(arrow: pa.Table, pipeline: str, cid: int, limit: int) -> pa.Table:
    """The rows whose records the sink topic took: without those the writers found too large for it
    (`lockstep.model.output_contract.sink_record_size`, their one estimate), and without the headers column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def sizes(name: str) -> list[int]:
        return pc.binary_length(arrow[name]).fill_null(0).to_pylist() if name in arrow.column_names else [0] * n

    n = arrow.num_rows
    keys, values = sizes("key"), sizes("value")
    users = arrow[_HEADERS].to_pylist() if _HEADERS in arrow.column_names else [None] * n
    topics, parts, offsets = (arrow[c].to_pylist() for c in PROVENANCE_COLUMNS[:3])
    keep = [sink_record_size(keys[i], values[i], topics[i], parts[i], offsets[i], cid, pipeline,
                             [(h["key"], h["value"]) for h in users[i] or ()]) <= limit for i in range(n)]
    kept = arrow if all(keep) else arrow.filter(pa.array(keep))
    dropped = n - kept.num_rows
    if dropped:
        log.info("checkpoint %d: %d records too large for the sink topic went to the dead-letter topic: not the "
                 "table's rows either", cid, dropped)
    return kept.drop_columns([_HEADERS]) if _HEADERS in kept.column_names else kept


def _plain(t: object) -> object:
    """Arrow's large strings and binaries as Iceberg reads them back (plain ones)."""
    import pyarrow as pa

    if t == pa.large_string():
        return pa.string()
    if t == pa.large_binary():
        return pa.binary()
    return t
