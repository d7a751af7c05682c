"""An SQL pipeline's query analyzed without reading anything: ``lockstep validate --connect`` runs it over an
empty input with the reader's columns, decoded as the run decodes them, so Spark's refusal (a syntax error,
an unknown column) is reported before the spec is merged. The run applies the query with
`lockstep.sql.runtime`, which this uses too.
"""
from __future__ import annotations

__all__ = [
    "analyze",
]

from typing import TYPE_CHECKING

from lockstep.errors import TerminalError
from lockstep.sql.runtime import run_query

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lockstep.spec import PipelineSpec

#: The columns Lockstep's Kafka reader gives each record (``KafkaRangesSource.schema`` in the writer's jar).
READER_SCHEMA = ("key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
                 "timestampType int")


def analyze(spark: SparkSession, spec: PipelineSpec) -> str | None:
    """Why Spark refuses the spec's query over an empty input with the reader's columns, decoded as the run
    decodes them (``data`` with a source format), with the tables' views and declared joins, or None when it takes
    it (``lockstep validate --connect``); then the conditions of ``sink.routes`` over the query's output. No record
    is read."""
    from pyspark.sql import functions as F

    from lockstep.formats.codecs import DECODE_ERROR, decodable, decode
    from lockstep.formats.resolution import readings
    from lockstep.spark.routes import route
    from lockstep.tables.materialize import MaterializedTables, join_tables

    empty = spark.createDataFrame([], READER_SCHEMA)
    parts = readings(spec)  # the source's schemas as the run reads them (a registry's latest): no sink lookups
    try:
        decoded = decode(empty, parts) if parts else empty.withColumn(DECODE_ERROR, F.lit(None).cast("string"))
        if spec.tables:  # each table's view, empty, and the declared joins' columns, as the run has them
            tables = MaterializedTables()
            for t in spec.tables:
                tables.add(spark, t, None)
            tables.register_views()
            decoded = join_tables(spec, tables, decoded)
        out = run_query(spec, decodable(decoded))
        if spec.sink.routes:  # the routes' conditions read the query's output
            route(spec, out)
    except TerminalError as exc:
        return str(exc)
    return None
