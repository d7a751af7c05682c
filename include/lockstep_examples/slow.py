"""The orders transform, slowed down in the JVM (about ``DELAY_MS`` per record, no Python UDF):
for tests and demonstrations that need a Spark run still writing when something is killed."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lockstep_examples.orders import enrich

DELAY_MS = 20


def enrich_slowly(df: DataFrame) -> DataFrame:
    # java.lang.Thread.sleep per row; reflect() returns null for a void method, so the value is kept.
    pause = F.expr(f"reflect('java.lang.Thread', 'sleep', cast({DELAY_MS} as bigint))")
    return enrich(df.withColumn("value", F.coalesce(pause.cast("binary"), F.col("value"))))
