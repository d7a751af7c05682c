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
from lockstep.model.output_contract import ROUTE_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lockstep.iceberg.staged_table import StagedTable
    from lockstep.spec import PipelineSpec

log = logging.getLogger("lockstep.spark.job")

#: The writers' columns, and the Kafka read's, that are not the table's (the provenance columns stand for them).
_LOCKSTEP_COLUMNS = frozenset({"topic", "partition", "offset", "headers", "error", ROUTE_COLUMN, "timestamp",
                               "timestampType"})
#: Lockstep's internal columns start so.
_INTERNAL = ("__ls_", "_lockstep")


def stage_rows(spec: PipelineSpec, cid: int, written: DataFrame) -> StagedTable:
    """The rows of checkpoint ``cid``'s output ``written`` (as the writers took it, every column the transform
    returned) that went to ``sink.topic``, written and staged on the checkpoint's branch."""
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
    rows = rows.select(*columns, F.col("topic").alias(PROVENANCE_COLUMNS[0]),
                       F.col("partition").cast("int").alias(PROVENANCE_COLUMNS[1]),
                       F.col("offset").cast("bigint").alias(PROVENANCE_COLUMNS[2]),
                       F.lit(cid).cast("bigint").alias(PROVENANCE_COLUMNS[3]))
    arrow = rows.toArrow()
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


def _plain(t: object) -> object:
    """Arrow's large strings and binaries as Iceberg reads them back (plain ones)."""
    import pyarrow as pa

    if t == pa.large_string():
        return pa.string()
    if t == pa.large_binary():
        return pa.binary()
    return t
