"""A failed Spark run ends the run step with the job's own cause on one line, classified: a transform
that does not fit its input fails at once (terminal), a task that raised may pass on a retry."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.integration.engine_helpers import make_pipeline, run, store
from tests.support.data import produce_orders

pytestmark = pytest.mark.integration


def broken_package(tmp_path: Path, unique: str) -> Path:
    name = f"broken_{unique}"
    package = tmp_path / "user_code" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "transforms.py").write_text(textwrap.dedent("""
        from pyspark.sql import functions as F, types as T

        def missing_column(df):
            return df.withColumn("value", F.col("amount_in_cents"))

        def _explode(value):
            raise ValueError("cannot enrich order " + value.decode()[:12])

        def raises(df):
            return df.withColumn("value", F.udf(_explode, T.StringType())(F.col("value")))
        """))
    return tmp_path / "user_code"


@pytest.mark.parametrize("transform,terminal,cause", [
    ("missing_column", True, "UNRESOLVED_COLUMN"),
    ("raises", False, "ValueError: cannot enrich order"),
])
def test_a_failed_spark_run_ends_with_its_cause_on_one_line(tmp_path, bootstrap, unique, monkeypatch,
                                                            transform, terminal, cause):
    code_dir = broken_package(tmp_path, unique)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(code_dir), os.environ.get("PYTHONPATH")])))
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2,
                             transform=f"broken_{unique}.transforms:{transform}")
    produce_orders(pipeline, 20)

    result = run(pipeline)
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("lockstep: checkpoint 1: the Spark run failed after"), last
    assert cause in last and "spark-submit" not in last and "\tat " not in last, last
    if terminal:
        assert "a retry fails the same way: fix the cause" in last, last
    else:
        assert "a retry or the next run fences its transactions" in last, last


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_a_task_that_failed_in_the_writer_is_named_by_its_own_exception(tmp_path, bootstrap, unique, writer):
    pipeline = make_pipeline(tmp_path, bootstrap, f"{unique}-{writer[:3]}", partitions=2, writer=writer)
    produce_orders(pipeline, 20)

    result = run(pipeline, failpoints="job.after_flush=raise")
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "failpoint job.after_flush raised" in last and "\tat " not in last, last
    assert "a retry or the next run fences its transactions" in last, last


def test_the_abort_of_a_failed_run_records_the_runs_own_cause(tmp_path, bootstrap, unique, monkeypatch):
    code_dir = broken_package(tmp_path, unique)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(code_dir), os.environ.get("PYTHONPATH")])))
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=1, transform=f"broken_{unique}.transforms:raises")
    produce_orders(pipeline, 5)
    assert run(pipeline).returncode == 2
    failure = store(pipeline).run_failure(1)
    assert failure is not None and failure.cause.startswith("ValueError: cannot enrich order"), failure

    # The next run's plan aborts checkpoint 1 (and fails the same way itself, as 2).
    assert run(pipeline).returncode == 2
    aborted = store(pipeline).view(1).aborted
    assert aborted.reason == f"its Spark run failed: {failure.cause}; its transactions were fenced", aborted
