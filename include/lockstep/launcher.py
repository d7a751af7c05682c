"""Runs the Spark job of a checkpoint with spark-submit, outside Airflow (the CLI).

In Airflow the same command line comes from ``SparkSubmitOperator``; both use
``lockstep.sparkconf`` so the Spark side is configured identically.
"""
from __future__ import annotations

import logging
import os
import subprocess
import time

from lockstep.checkpoint import CheckpointStatus
from lockstep.errors import CheckpointError
from lockstep.sparkjob import run_checkpoint_job
from lockstep.store import CheckpointStore
from lockstep.sparkconf import job_environment, submit_command
from lockstep.spec import PipelineSpec

log = logging.getLogger("lockstep.spark")


def spark_master(spec: PipelineSpec) -> str:
    if spec.spark.master:
        return spec.spark.master
    from lockstep.connections import get_connection

    try:
        host = get_connection("spark_default").host
    except Exception:  # noqa: BLE001 - no spark connection: local mode
        host = None
    return host or "local[*]"


def run_checkpoint(spec: PipelineSpec, checkpoint_id: int, store: CheckpointStore) -> float:
    """The run step of a checkpoint; a checkpoint with no records needs no Spark at all.

    Starting Spark costs ~10 s; an empty checkpoint only has to record that it
    prepared nothing, so it is written here directly (invariant 6).
    """
    view = store.view(checkpoint_id)
    if view is not None and view.status is CheckpointStatus.CLAIMED and all(r.is_empty for r in view.claim.ranges):
        started = time.monotonic()
        run_checkpoint_job(spec, checkpoint_id, spark=None, store=store)
        log.info("checkpoint %d: no new records; prepared without starting Spark", checkpoint_id)
        return time.monotonic() - started
    try:
        return run_spark_job(spec, checkpoint_id)
    except CheckpointError as exc:
        after = store.view(checkpoint_id)
        if after is not None and after.status is CheckpointStatus.PREPARED:
            # The driver died after recording the decision: nothing is lost, the commit
            # step (this run's, or the next run's plan) commits what was prepared.
            raise CheckpointError(checkpoint_id, f"the Spark run failed after its transactions were prepared; "
                                                 f"the next commit or plan commits them (roll forward). {exc}") from exc
        raise


def run_spark_job(spec: PipelineSpec, checkpoint_id: int) -> float:
    """Run the job, streaming its output into our log; returns wall seconds."""
    argv = submit_command(spec.path, checkpoint_id, spark_master(spec), spec.spark.conf)
    started = time.monotonic()
    log.info("checkpoint %d: spark-submit %s", checkpoint_id, " ".join(argv[1:3]))
    proc = subprocess.Popen(argv, env=job_environment(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-15:]
        log.info("spark: %s", line)
    code = proc.wait()
    seconds = time.monotonic() - started
    if code != 0:
        raise CheckpointError(
            checkpoint_id,
            f"the Spark run failed (exit code {code}) after {seconds:.0f} s; nothing was committed. The next run "
            f"fences its transactions and replays its ranges. Last output:\n" + "\n".join(tail),
        )
    return seconds
