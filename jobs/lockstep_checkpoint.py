"""spark-submit entry point: the bounded Spark run of one Lockstep checkpoint.

    spark-submit jobs/lockstep_checkpoint.py --spec include/pipelines/orders.yaml --checkpoint-id 42

Reads the checkpoint's claimed ranges from S3, transforms them, writes each task's
output in a Kafka transaction that is flushed but not committed, and records the
prepared checkpoint in S3. Connections come from AIRFLOW_CONN_* variables.
"""
from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="pipeline spec YAML")
    parser.add_argument("--checkpoint-id", required=True, type=int)
    parser.add_argument("--replay", action="store_true",
                        help="a checkpoint of the spec's dead-letter replay pipeline (lockstep deadletters replay)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from lockstep.logs import quiet_clients

    quiet_clients()

    import time
    from concurrent.futures import ThreadPoolExecutor

    started = time.monotonic()
    from pyspark.sql import SparkSession

    from lockstep.spark.job import run_checkpoint_job
    from lockstep.spec import load_spec
    from lockstep.steps.client_factory import checkpoint_store

    spec = load_spec(args.spec)
    if args.replay:
        from lockstep.spark.dead_letter_replay import replay_spec

        spec = replay_spec(spec)
    with ThreadPoolExecutor(1) as pool:
        # The S3 client (boto3 import, credentials, endpoint) is built while the JVM starts.
        store = pool.submit(checkpoint_store, spec)
        spark = SparkSession.builder.appName(f"lockstep-{spec.name}-{args.checkpoint_id}").getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
    logging.getLogger("lockstep.spark.job").info("checkpoint %d: Spark session ready in %.1f s", args.checkpoint_id,
                                           time.monotonic() - started)
    try:
        run_checkpoint_job(spec, args.checkpoint_id, spark, store.result())
    except Exception as exc:  # noqa: BLE001 - every failure is reported to the run step, then the exit code
        return report_failure(exc)
    finally:
        spark.stop()
    return 0


def report_failure(exc: Exception) -> int:
    """The traceback for the log, then one cause line and the exit code for the run step to classify."""
    import traceback

    from lockstep.errors import JOB_CAUSE_PREFIX, JOB_EXIT_TERMINAL, JOB_EXIT_TRANSIENT
    from lockstep.spark.job import job_outcome

    traceback.print_exc(file=sys.stdout)
    cause, terminal = job_outcome(exc)
    print(f"{JOB_CAUSE_PREFIX}{cause}", flush=True)
    return JOB_EXIT_TERMINAL if terminal else JOB_EXIT_TRANSIENT


if __name__ == "__main__":
    sys.exit(main())
