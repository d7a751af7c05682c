"""The Iceberg race's peer: a bounded Kafka → Iceberg job with Iceberg's Flink sink (and, with ``--sink``, Flink's
exactly-once Kafka sink from the same scan).

    HADOOP_CLASSPATH=hadoop-client-api.jar:hadoop-client-runtime.jar \
    <flink venv>/bin/python include/lockstep_bench/jobs/flink_iceberg_job.py --bootstrap HOST:PORT --source in \
        --ends '{"0": 1000}' --table bench.orders --catalog-uri http://HOST:PORT --jars a.jar,b.jar --parallelism 2

Run with the Flink venv's Python (``lockstep_bench.peers.FLINK_ICEBERG``) and ``include/`` on PYTHONPATH; the
statements come from ``lockstep_bench.flink_sql.iceberg_statements``. PyFlink's Table API on a local mini-cluster
in BATCH runtime mode: the Kafka source is bounded by the end offsets, and Iceberg's sink commits its files in one
snapshot when the input ends (as Flink's Kafka sink commits its transactions). The catalog's S3 endpoint and keys
come from the environment (``AIRFLOW_CONN_ICEBERG_DEFAULT``'s extra, as the platform sets it), never argv. Hadoop's
client jars go on ``HADOOP_CLASSPATH`` (the gateway JVM's classpath): Iceberg's Flink catalog needs Hadoop's
``Configuration`` there, not in ``pipeline.jars``. Prints one ``BENCH_RESULT {json}`` line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--ends", required=True, help='{"partition": end offset} JSON')
    parser.add_argument("--table", required=True, help="namespace.table, made by the job")
    parser.add_argument("--catalog-uri", required=True)
    parser.add_argument("--warehouse", default="s3://lockstep/iceberg")
    parser.add_argument("--jars", required=True, help="comma-separated: the Kafka connector and Iceberg's jars")
    parser.add_argument("--parallelism", type=int, required=True)
    parser.add_argument("--sink", help="also write the records to this Kafka topic, exactly once")
    parser.add_argument("--transactional-id-prefix", default=f"bench-flink-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args(argv)
    ends = {int(p): int(e) for p, e in json.loads(args.ends).items()}
    extra = json.loads(os.environ["AIRFLOW_CONN_ICEBERG_DEFAULT"])["extra"]

    from lockstep_bench.flink_sql import iceberg_catalog, iceberg_statements

    catalog = iceberg_catalog(args.catalog_uri, args.warehouse, extra["s3.endpoint"], extra["s3.access-key-id"],
                              extra["s3.secret-access-key"], extra.get("s3.region", "us-east-1"))
    ddl, inserts = iceberg_statements(args.bootstrap, args.source, ends, args.table,
                                      f"bench-flink-iceberg-{uuid.uuid4().hex[:6]}", args.sink,
                                      args.transactional_id_prefix)
    started = time.monotonic()
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    with tempfile.TemporaryDirectory(prefix="bench-flink-iceberg-") as scratch:
        conf = Configuration()
        conf.set_string("pipeline.jars", ";".join(Path(j).resolve().as_uri() for j in args.jars.split(",")))
        conf.set_string("parallelism.default", str(args.parallelism))
        conf.set_string("io.tmp.dirs", scratch)
        conf.set_string("web.upload.dir", scratch)
        t_env = TableEnvironment.create(EnvironmentSettings.new_instance().in_batch_mode()
                                        .with_configuration(conf).build())
        session_s = time.monotonic() - started
        t_env.execute_sql(catalog)
        for statement in ddl:
            t_env.execute_sql(statement)
        job_started = time.monotonic()
        statements = t_env.create_statement_set()
        for insert in inserts:
            statements.add_insert_sql(insert)
        statements.execute().wait()
        job_s = time.monotonic() - job_started
    print("BENCH_RESULT " + json.dumps({"session_s": round(session_s, 3), "job_s": round(job_s, 3),
                                        "total_s": round(time.monotonic() - started, 3),
                                        "parallelism": args.parallelism, "kafka_sink": args.sink is not None}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
