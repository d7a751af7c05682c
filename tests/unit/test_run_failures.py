"""A failed Spark run, as the run step reports it: the job's own one-line cause, and the class that
decides whether the task is retried (job exit code -> error class -> Airflow exception)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lockstep.errors import (
    JOB_EXIT_TERMINAL,
    JOB_EXIT_TRANSIENT,
    CheckpointError,
    TerminalError,
    TransientCheckpointError,
    TransientError,
    root_cause,
)
from lockstep.steps.run import job_failure

# What PySpark 4 raises in the driver when a Python function raised in a task (captured text, abridged).
PYTHON_TASK_FAILED = """
  An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/work/include/lockstep_examples/orders.py", line 6, in to_cents
    raise ValueError(f"cannot parse amount of record {x}")
ValueError: cannot parse amount of record 0
"""
# A Java task failure (the JVM writer) as py4j renders it.
JAVA_TASK_FAILED = """An error occurred while calling o81.save.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 times, most recent failure: Lost task 0.0 in stage 1.0 (TID 1) (10.0.0.1 executor driver): java.lang.IllegalStateException: lockstep failpoint job.after_flush raised
\tat lockstep.Failpoints.hit(Failpoints.java:40)
\tat lockstep.PartitionTransaction.commit(PartitionTransaction.java:88)
Driver stacktrace:
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2856)
Caused by: java.lang.IllegalStateException: lockstep failpoint job.after_flush raised
"""
CAUSED_BY_ONLY = """py4j.protocol.Py4JJavaError: An error occurred while calling o1.x.
: java.lang.RuntimeException: wrapper
\tat a.b(C.java:1)
Caused by: org.apache.kafka.common.errors.TimeoutException: Topic out not present in metadata after 60000 ms.
"""


class Raised(Exception):
    pass


def test_the_cause_of_a_python_task_failure_is_its_exception_line_not_the_java_stack():
    assert root_cause(Raised(PYTHON_TASK_FAILED)) == "ValueError: cannot parse amount of record 0"


def test_the_cause_of_a_java_task_failure_is_the_lost_tasks_exception():
    assert root_cause(Raised(JAVA_TASK_FAILED)) == \
        "java.lang.IllegalStateException: lockstep failpoint job.after_flush raised"


def test_without_a_lost_task_the_last_caused_by_is_the_cause():
    assert root_cause(Raised(CAUSED_BY_ONLY)) == \
        "org.apache.kafka.common.errors.TimeoutException: Topic out not present in metadata after 60000 ms."


def test_a_plain_exception_is_named_with_its_type_and_a_long_cause_is_cut():
    assert root_cause(RuntimeError("failpoint job.before_prepared raised")) == \
        "RuntimeError: failpoint job.before_prepared raised"
    assert len(root_cause(RuntimeError("x" * 1000), limit=50)) == 50


def test_a_terminal_exit_is_a_terminal_error_with_the_jobs_cause_and_a_way_out():
    exc = job_failure(42, JOB_EXIT_TERMINAL, "[UNRESOLVED_COLUMN] `amount` cannot be resolved", "last", 12.0)
    assert isinstance(exc, CheckpointError) and isinstance(exc, TerminalError)
    assert str(exc).startswith("checkpoint 42: the Spark run failed after 12 s: [UNRESOLVED_COLUMN]")
    assert "fix the cause" in str(exc) and "\n" not in str(exc)


@pytest.mark.parametrize("code", [JOB_EXIT_TRANSIENT, 1, -9, 137])
def test_a_transient_or_unknown_exit_is_retried(code):
    exc = job_failure(7, code, None if code != JOB_EXIT_TRANSIENT else "ValueError: boom", "Killed", 3.0)
    assert isinstance(exc, TransientCheckpointError) and isinstance(exc, TransientError)
    assert exc.checkpoint_id == 7
    assert ("ValueError: boom" if code == JOB_EXIT_TRANSIENT else f"exit code {code}") in str(exc)


def _operators():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))
    from lockstep_airflow import operators

    return operators


def test_a_terminal_error_fails_the_airflow_task_without_retries():
    from airflow.sdk.exceptions import AirflowFailException

    exc = _operators()._loud("plan", "orders", None, TerminalError(
        "cannot restore: savepoint 'nope' not found; trigger a new run with restore_from naming an existing one"))
    assert isinstance(exc, AirflowFailException)
    assert str(exc) == ("lockstep orders plan failed: no checkpoint claimed: cannot restore: savepoint 'nope' not "
                        "found; trigger a new run with restore_from naming an existing one")


def test_a_transient_error_is_retried_by_airflow():
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    exc = _operators()._loud("run", "orders", 5, TransientCheckpointError(5, "the Spark run failed: boom"))
    assert isinstance(exc, AirflowException) and not isinstance(exc, AirflowFailException)
    assert str(exc).startswith("lockstep orders run failed: checkpoint 5: the Spark run failed: boom")


def test_a_record_budget_below_one_is_refused_not_changed():
    from types import SimpleNamespace

    from lockstep.steps.coordinator import plan

    pipeline = SimpleNamespace(spec=SimpleNamespace(checkpoints=SimpleNamespace(max_records=5000)))
    with pytest.raises(TerminalError, match="a record budget of 0 takes nothing: give 1 or more, or none for the "
                                            "spec's 5000"):
        plan(pipeline, run_id="manual__1", max_records=0)
