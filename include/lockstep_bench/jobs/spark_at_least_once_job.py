"""spark-submit entry point of the benchmark's competitor: Spark's own at-least-once Kafka pipeline.

    spark-submit include/lockstep_bench/jobs/spark_at_least_once_job.py --bootstrap HOST:PORT --source in --sink out \
        --starting '{"in": {"0": 0}}' --ending '{"in": {"0": 1000}}'

Spark's Kafka source over the same offset range Lockstep reads, the same transform, the same
provenance headers, and Spark's Kafka sink (``df.write.format("kafka")``): no transactions, so a
retried task duplicates its output. Prints one ``BENCH_RESULT {json}`` line for the benchmark.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--starting", required=True, help="Spark startingOffsets JSON")
    parser.add_argument("--ending", required=True, help="Spark endingOffsets JSON")
    parser.add_argument("--transform", default="lockstep_examples.bench:transform")
    args = parser.parse_args(argv)

    started = time.monotonic()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lockstep.spark.conf import KAFKA_READ_OPTIONS

    spark = SparkSession.builder.appName("bench-spark-at-least-once").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    session_seconds = time.monotonic() - started
    module, _, function = args.transform.partition(":")
    transform = getattr(importlib.import_module(module), function)
    try:
        job_started = time.monotonic()
        df = (spark.read.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.source)
              .option("startingOffsets", args.starting)
              .option("endingOffsets", args.ending)
              .option("kafka.isolation.level", "read_committed")
              .options(**KAFKA_READ_OPTIONS)
              .load())
        out = transform(df)
        # The same provenance headers Lockstep writes, so every competitor produces the same records.
        from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC

        headers = F.array(
            F.struct(F.lit(SOURCE_TOPIC).alias("key"), F.col("topic").cast("binary").alias("value")),
            F.struct(F.lit(SOURCE_PARTITION).alias("key"),
                     F.col("partition").cast("string").cast("binary").alias("value")),
            F.struct(F.lit(SOURCE_OFFSET).alias("key"),
                     F.col("offset").cast("string").cast("binary").alias("value")),
        )
        writer = (out.select(F.col("key"), F.col("value"), headers.alias("headers")).write.format("kafka")
                  .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.sink))
        # The producer settings Lockstep's writers start from, so the sinks differ only in transactions.
        from lockstep.spark.writer_settings import THROUGHPUT_PRODUCER_CONFIG

        for key, value in THROUGHPUT_PRODUCER_CONFIG.items():
            writer = writer.option(f"kafka.{key}", value)
        writer.save()
        job_seconds = time.monotonic() - job_started
    finally:
        spark.stop()
    print("BENCH_RESULT " + json.dumps({"session_seconds": round(session_seconds, 3),
                                         "job_seconds": round(job_seconds, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
