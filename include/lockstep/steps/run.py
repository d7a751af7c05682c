"""The run step of a checkpoint, for the CLI and Airflow alike: its Spark job through spark-submit,
or in a session of a long-lived Spark Connect server (`lockstep.spark.target` decides).

The ``lockstep`` CLI and the DAG's run task call :func:`run_checkpoint` (through
`lockstep.steps.coordinator`), so the target (mode, master or Connect endpoint, `lockstep.spark.target`),
the command line, the environment (with the spec's connections), the failure classification and the
empty-checkpoint shortcut are the same wherever a run starts. The CLI's whole checkpoint (plan, run,
commit) is `lockstep.steps.cycle`.
"""
from __future__ import annotations

__all__ = [
    "Stoppable", "run_checkpoint",
]

import logging
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import TYPE_CHECKING, Protocol

from lockstep.connections import connection_env, redact
from lockstep.errors import (
    JOB_CAUSE_PREFIX,
    JOB_EXIT_TERMINAL,
    CheckpointError,
    LockstepError,
    TransientCheckpointError,
)
from lockstep.model.checkpoint import CheckpointStatus, CheckpointView, RunFailure
from lockstep.spark.conf import job_environment, submit_command
from lockstep.spark.job import run_checkpoint_job, values_for_run
from lockstep.spark.target import CONNECT, SparkTarget, spark_target
from lockstep.spec import PipelineSpec
from lockstep.store.checkpoint_store import PipelineStore

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

#: Lines of a spark-submit's output that say nothing about the checkpoint: the JVM's notice of the
#: vector incubator module Spark 4 loads, and a progress bar should one be switched on again. They
#: go to the debug log, so a task log shows Lockstep's own lines and the warnings that matter.
SPARK_NOISE = ("WARNING: Using incubator modules:", "[Stage ")


def is_noise(line: str) -> bool:
    return line.lstrip("\r").startswith(SPARK_NOISE)


def run_checkpoint(spec: PipelineSpec, checkpoint_id: int, store: PipelineStore,
                   env: Mapping[str, str] | None = None,
                   on_start: Callable[[Stoppable], None] | None = None) -> float:
    """The run step of a checkpoint; a checkpoint with no records needs no Spark at all.

    Starting Spark costs ~10 s; an empty checkpoint only has to record that it
    prepared nothing, so it is written here directly (the empty-checkpoint invariant), unless its
    claim fires timers (a stateful pipeline's windows due while the source is quiet) or writes again
    the lost share of a stateful partial commit.
    """
    view = store.view(checkpoint_id)
    if view is not None and view.status is CheckpointStatus.CLAIMED and not view.claim.needs_spark:
        started = time.monotonic()
        run_checkpoint_job(spec, checkpoint_id, spark=None, store=store, view=view)
        log.info("checkpoint %d: no new records; prepared without starting Spark", checkpoint_id)
        return time.monotonic() - started
    if view is not None and view.status is CheckpointStatus.CLAIMED:
        values_for_run(spec, view)  # a refused spec edit fails here, not after Spark's start-up
    target = spark_target(spec)
    try:
        if target.mode == CONNECT:
            return run_connect_job(spec, checkpoint_id, store, target, on_start, view=view)
        return run_spark_job(spec, checkpoint_id, env, on_start, master=target.address)
    except (CheckpointError, TransientCheckpointError) as exc:
        after = store.view(checkpoint_id)
        if after is not None and after.status is CheckpointStatus.CLAIMED and exc.cause:
            _note_failure(store, spec.name, checkpoint_id, exc.cause)
        if after is not None and after.status is CheckpointStatus.PREPARED:
            # The driver died after recording the decision: nothing is lost, the commit
            # step (this run's, or the next run's plan) commits what was prepared.
            # Say only that: the job failure's own way out (fence and replay) is for an unprepared one.
            cause = exc.cause or str(exc)
            raise CheckpointError(checkpoint_id, f"the Spark run failed after its transactions were prepared "
                                                 f"({cause}); nothing is lost: the commit step, or the next run's "
                                                 "plan, commits them (roll forward)") from exc
        raise


def _note_failure(store: PipelineStore, pipeline: str, checkpoint_id: int, cause: str) -> None:
    from datetime import datetime

    try:
        store.record_run_failure(RunFailure(pipeline, checkpoint_id, datetime.now(UTC).isoformat(), cause))
    except LockstepError as exc:  # the failure itself is what the task reports; the note is a courtesy
        log.warning("checkpoint %d: could not note the run's failure in S3 (%s)", checkpoint_id, exc)


class Stoppable(Protocol):
    """What ``on_start`` receives: the running job, which the task's ``on_kill`` stops."""

    def stop(self) -> None: ...


class SubmitRun:
    """A spark-submit run: its process group (driver JVM, Python workers)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            log.warning("stopping spark-submit (pid %d) and its driver", self.proc.pid)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_connect_job(spec: PipelineSpec, checkpoint_id: int, store: PipelineStore, target: SparkTarget,
                    on_start: Callable[[Stoppable], None] | None = None, view: CheckpointView | None = None) -> float:
    """The run in a session of the Spark Connect server at ``target``, driven from this process.

    The job code is the spark-submit driver's (`run_checkpoint_job`), and its failures are sorted
    the same way (`spark.job.job_outcome`): terminal, or retried. The connections are this process's.
    """
    from lockstep.spark.connect import checkpoint_session, server_away
    from lockstep.spark.job import job_outcome
    from lockstep.transform import StaleSession

    started = time.monotonic()
    log.info("checkpoint %d: Spark Connect %s (%s)", checkpoint_id, redact(target.address), target.source)
    try:
        for fresh in (False, True):
            try:
                with checkpoint_session(target.address, spec.name, checkpoint_id, spec.spark.conf) as run:
                    if on_start is not None:
                        on_start(run)
                    run_checkpoint_job(spec, checkpoint_id, run.spark, store, view=view)
                break
            except StaleSession as exc:  # released on the way out: the next id is a new session
                if fresh:
                    raise
                log.info("checkpoint %d: %s; running in a new session", checkpoint_id, exc)
    except Exception as exc:
        import traceback

        cause, terminal = job_outcome(exc)
        away = server_away(exc, target.address, target.source)
        if away is None:
            # The traceback carries the server's error text; known connection secrets are masked in
            # it, as in the cause below.
            log.error("checkpoint %d: the Spark Connect run failed:\n%s", checkpoint_id,
                      redact("".join(traceback.format_exception(exc)).rstrip()))
        else:  # gRPC's stack says nothing the cause does not; the cause names the server
            log.debug("the Spark Connect client's error:\n%s", redact("".join(traceback.format_exception(exc))))
        raise run_failure(checkpoint_id, away or cause, terminal, time.monotonic() - started) from exc
    return time.monotonic() - started


def run_spark_job(spec: PipelineSpec, checkpoint_id: int, env: Mapping[str, str] | None = None,
                  on_start: Callable[[Stoppable], None] | None = None, master: str | None = None) -> float:
    """Run the job, streaming its output into our log; returns wall seconds.

    The job has no Airflow: the spec's connections, resolved here (from Airflow inside a task,
    from ``AIRFLOW_CONN_*`` in the CLI), reach it through its environment, never its command line.

    spark-submit runs in a session of its own so that ``on_start``'s caller (Airflow's
    ``on_kill``) can stop it with its driver JVM and Python workers as one process group; for the
    same reason a Ctrl-C no longer reaches it from the terminal, so leaving here any other way
    than its exit stops that group.
    """
    argv = submit_command(spec.path, checkpoint_id, master or spark_target(spec).address, spec.spark.conf,
                          spec.replay_of is not None)
    registries = [conn for fmts, conn in (((spec.source.key, spec.source.value), spec.source.registry_conn_id),
                                          ((spec.sink.key, spec.sink.value), spec.sink.registry_conn_id))
                  if any(f.registry for f in fmts)]
    job_env = {**(os.environ if env is None else env), **connection_env(
        [spec.source.kafka_conn_id, spec.sink.kafka_conn_id, spec.checkpoints.aws_conn_id, *registries])}
    started = time.monotonic()
    log.info("checkpoint %d: spark-submit %s", checkpoint_id, " ".join(argv[1:3]))
    proc = subprocess.Popen(argv, env=job_environment(job_env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)
    last, cause = "", None
    try:
        if on_start is not None:
            on_start(SubmitRun(proc))
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if is_noise(line):
                log.debug("spark: %s", line)
                continue
            if line.startswith(JOB_CAUSE_PREFIX):
                cause = line[len(JOB_CAUSE_PREFIX):]
            elif line.strip():
                last = line.strip()
            log.info("spark: %s", line)
        code = proc.wait()
    except BaseException:  # KeyboardInterrupt included: never leave a driver running behind us
        stop_group(proc)
        raise
    seconds = time.monotonic() - started
    if code != 0:
        raise job_failure(checkpoint_id, code, cause, last, seconds)
    return seconds


def job_failure(checkpoint_id: int, code: int, cause: str | None, last_line: str, seconds: float) -> Exception:
    """What a failed Spark run means for the run task: the job's own cause and classification
    (its exit code), or for a job that could not say (killed, never started) its last line, retried."""
    if cause is None:
        cause = f"it ended with exit code {code} without a cause (killed, or spark-submit could not start it); " \
                f"its last line: {last_line[:300] or '(none)'}"
    return run_failure(checkpoint_id, cause, code == JOB_EXIT_TERMINAL, seconds)


def run_failure(checkpoint_id: int, cause: str, terminal: bool, seconds: float) -> Exception:
    """The run step's error for a failed Spark run: terminal (the same input fails the same way)
    or retried, with the way out either way."""
    cause = redact(cause)  # it lands in the task log's summary, XCom, S3 and the run note
    exc: CheckpointError | TransientCheckpointError
    if terminal:
        exc = CheckpointError(checkpoint_id, f"the Spark run failed after {seconds:.0f} s: {cause}; a retry fails "
                                             "the same way: fix the cause, then trigger a new run (the next run "
                                             "fences this checkpoint's transactions and replays its ranges)")
    else:
        exc = TransientCheckpointError(checkpoint_id, f"the Spark run failed after {seconds:.0f} s: {cause}; nothing "
                                                      "was committed: a retry or the next run fences its "
                                                      "transactions and replays its ranges")
    exc.cause = cause  # the bare cause, for the abort reason
    return exc


def stop_group(proc: subprocess.Popen[str], grace_s: float = 10.0) -> None:
    """SIGTERM spark-submit's process group (driver JVM, Python workers), SIGKILL after ``grace_s``."""
    import signal

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
