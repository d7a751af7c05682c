"""The transform's rows as keyed state sees them: each with its state key, event time and key group
(:func:`keyed`), and back as the writers take them (:func:`_records`). What every stateful operator
(`lockstep.spark.windows`, `lockstep.spark.dedup_run`, `lockstep.spark.state_function_run`) shares, and
what ``lockstep verify`` recomputes with (through `lockstep.spark.keyed_state`'s surface)."""
from __future__ import annotations

__all__ = [
    "DUPLICATE", "HEADERS_TYPE", "LATE", "NOT_STATE", "PROVENANCE", "empty_frame", "event_ms", "keyed", "no_headers",
]

from typing import TYPE_CHECKING, cast

from lockstep.errors import TerminalError
from lockstep.model.output_contract import ACCEPTED_TYPES
from lockstep.model.state_rows import EVENT, GROUP, KEY
from lockstep.spec import PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from lockstep.spark.target import JobSession


#: Columns of the transform's output that are never state: the output record's own fields.
NOT_STATE = ("value", "key", "headers", "error")
PROVENANCE = ("topic", "partition", "offset")

#: The Spark type of the writers' ``headers`` column (Spark's Kafka header type).
HEADERS_TYPE = ACCEPTED_TYPES["headers"][0]

#: The dead-letter errors of the stateful operators.
LATE, DUPLICATE = "late", "duplicate"


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


def empty_frame(spark: JobSession, columns: tuple[tuple[str, str], ...]) -> DataFrame:
    from lockstep.spark.state_worker import schema_ddl

    return cast("SparkSession", spark).createDataFrame([], schema_ddl(columns))
