"""``sink.routes``: which of the pipeline's topics each output record goes to (docs/formats.md, *Routes*).

After the transform, each record gets `ROUTE_COLUMN`: the topic of the first route whose condition
holds, else null (``sink.topic``). Both writers read it (`lockstep.model.output_contract`), and every
topic is written inside the checkpoint's transactions, so a checkpoint's records land in all their
topics or in none. The conditions read the transform's output as it is before Lockstep encodes it
(``data.country`` with a sink value format, any column an SQL query returns).
"""
from __future__ import annotations

__all__ = [
    "route", "routed",
]

from typing import TYPE_CHECKING

from lockstep.errors import TerminalError
from lockstep.model.output_contract import ROUTE_COLUMN
from lockstep.spec import PipelineSpec
from lockstep.sql.runtime import first_line
from lockstep.transform import Transform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def routed(spec: PipelineSpec, transform: Transform) -> Transform:
    """``transform``, then `route` when the spec has routes (else ``transform`` itself)."""
    if not spec.sink.routes:
        return transform

    def with_routes(df: DataFrame) -> DataFrame:
        return route(spec, transform(df))

    with_routes.__name__ = with_routes.__qualname__ = getattr(transform, "__name__", "transform")
    return with_routes


def route(spec: PipelineSpec, out: DataFrame) -> DataFrame:
    """``out`` with `ROUTE_COLUMN`. A dead letter's is null: it goes to the dead-letter topic, and its columns
    may hold anything. Each condition is analyzed now, before anything is written: one Spark refuses, or
    that is not true or false, fails the checkpoint for good, naming its route and the columns it may read."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    topic = F.lit(None).cast("string")
    for name, condition in reversed(spec.sink.routes):
        where = f"{spec.path}: sink.routes.{name}"
        test = F.expr(condition)
        try:
            kind = out.select(test.alias("routed")).schema["routed"].dataType
        except AnalysisException as exc:  # a ParseException is one too
            raise TerminalError(f"{where}: Spark refused the condition {condition!r}: {first_line(str(exc))}. The "
                                f"condition reads the transform's output, whose columns are {', '.join(out.columns)} "
                                "(it is checked before anything is written)") from exc
        if not isinstance(kind, BooleanType):
            raise TerminalError(f"{where}: the condition {condition!r} is {kind.simpleString()}, not true or false: "
                                "write a test, such as data.country = 'DE'")
        topic = F.when(test, F.lit(name)).otherwise(topic)
    if "error" in out.columns:
        topic = F.when(F.col("error").isNull(), topic)
    return out.withColumn(ROUTE_COLUMN, topic)
