"""One write through the ``lockstep-kafka`` data source, in a session of the kind asked for: run as a
script by test_jvm_sink_connect.py, so the classic session (its own driver JVM) and the Spark
Connect client never share a Python process.

    python jvm_sink_write.py (classic | classic-without-jar | sc://HOST:PORT) SETTINGS_JSON ROWS

Writes ROWS generated rows in 2 Spark partitions with `lockstep.spark.jvm_writer.write_with_jvm` and prints
the task result documents, one per line.
"""
from __future__ import annotations

import json
import sys

from lockstep.spark.conf import local_session
from lockstep.spark.jvm_writer import write_with_jvm
from lockstep.spark.writer_settings import WriterSettings


def rows(spark, count: int):
    """The output contract's columns, every optional one included: keys (some null), user headers,
    every tenth row an error (a dead letter)."""
    from pyspark.sql import functions as F

    return spark.range(0, count, 1, 2).select(
        F.concat(F.lit("value-"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.when(F.col("id") % 5 == 0, F.lit(None)).otherwise(
            F.concat(F.lit("key-"), (F.col("id") % 7).cast("string"))).alias("key"),
        F.lit("orders").alias("topic"),
        (F.col("id") % 3).cast("int").alias("partition"),
        F.col("id").alias("offset"),
        F.array(F.struct(F.lit("origin").alias("key"),
                         F.concat(F.lit("row-"), F.col("id").cast("string")).cast("binary").alias("value")))
        .alias("headers"),
        F.when(F.col("id") % 10 == 3, F.lit("bad input")).otherwise(F.lit(None).cast("string")).alias("error"),
    )


def main(kind: str, settings_json: str, count: int) -> None:
    if kind == "classic":
        spark = local_session("jvm-sink-classic")
    elif kind == "classic-without-jar":  # spark.jars without lockstep-jvm-writer.jar
        from lockstep.paths import spark_kafka_jars

        spark = local_session("jvm-sink-no-jar", extra={"spark.jars": ",".join(spark_kafka_jars())})
    else:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(kind).getOrCreate()
    settings = WriterSettings(**json.loads(settings_json))
    for line in write_with_jvm(spark, rows(spark, count), settings):
        print(line)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
