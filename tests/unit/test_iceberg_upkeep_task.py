"""The ``lockstep_iceberg_upkeep`` DAG's task (`LockstepIcebergUpkeepOperator`), its decisions with the upkeep
itself replaced: which tables it looks after, that one table's failure leaves the others done, and which failures
are retried. The upkeep's own work is `test_table_upkeep`'s and the integration tests'."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins"))

from airflow.sdk.exceptions import AirflowException, AirflowFailException  # noqa: E402

from lockstep.errors import TerminalError, TransientError  # noqa: E402
from lockstep.ops import table_upkeep  # noqa: E402
from lockstep.ops.table_upkeep import Upkeep  # noqa: E402
from lockstep_airflow.operators import EVERY_TABLE, LockstepIcebergUpkeepOperator  # noqa: E402

PARAMS = {"pipeline": EVERY_TABLE, "keep": 3, "expire_older_than": "2d", "orphans_older_than": "36h", "dry_run": False}


@pytest.fixture
def pipelines(tmp_path: Path) -> Path:
    """Three pipelines: ``a`` and ``b`` with a table, ``plain`` without."""
    base = {"source": {"topics": ["in"]}, "transform": "lockstep_examples.orders:enrich",
            "checkpoints": {"store": "s3://lockstep/unit"}}
    for name in ("a", "b", "plain"):
        sink = {"topic": f"{name}-out", "dead_letter_topic": f"{name}-dlq"}
        if name != "plain":
            sink["iceberg"] = {"table": f"lake.{name}", "catalog_conn_id": "lake"}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**base, "name": name, "sink": sink,
                                                                "transactions": {"id_prefix": name}}))
    return tmp_path


def execute(pipelines: Path, outcomes: dict[str, Exception | None], **params: object) -> tuple[dict, list]:
    calls: list = []

    def upkeep(spec, keep, expire_s, orphans_s, dry_run, by, report):
        calls.append((spec.name, keep, expire_s, orphans_s, dry_run, by))
        if outcomes.get(spec.name) is not None:
            raise outcomes[spec.name]
        report(f"{spec.name}: done")
        return [Upkeep(f"lake.{spec.name}", action, 5, 1) for action in ("compact", "expire", "orphans")]

    mp = pytest.MonkeyPatch()
    mp.setattr(table_upkeep, "upkeep", upkeep)
    try:
        op = LockstepIcebergUpkeepOperator(task_id="upkeep", pipelines_dir=str(pipelines))
        return op.execute({"params": {**PARAMS, **params}, "run_id": "scheduled__2026-12-05"}), calls
    finally:
        mp.undo()


def test_every_pipeline_with_a_table_is_looked_after_with_the_runs_params(pipelines) -> None:
    done, calls = execute(pipelines, {})
    assert [c[0] for c in calls] == ["a", "b"], "the pipeline without a table has no upkeep"
    assert calls[0][1:] == (3, 172800.0, 129600.0, False, "Airflow lockstep_iceberg_upkeep run scheduled__2026-12-05")
    assert list(done) == ["a", "b"] and [u["action"] for u in done["a"]] == ["compact", "expire", "orphans"]
    one, calls = execute(pipelines, {}, pipeline="b", dry_run=True)
    assert list(one) == ["b"] and calls[0][4] is True


def test_one_tables_failure_leaves_the_others_done_and_is_retried_unless_a_retry_cannot_help(pipelines) -> None:
    with pytest.raises(AirflowException) as failed:
        execute(pipelines, {"a": TransientError("the catalog at http://lake did not answer")})
    assert not isinstance(failed.value, AirflowFailException), "a catalog away is worth a retry"
    message = str(failed.value)
    assert "failed for 1 of 2 table(s): a: the catalog at http://lake did not answer" in message
    assert "the others' upkeep is done" in message

    with pytest.raises(AirflowFailException, match="failed for 2 of 2 table"):
        execute(pipelines, {"a": TerminalError("x"), "b": TerminalError("y")})


def test_a_pipeline_without_a_table_or_a_bad_age_fails_at_once_naming_it(pipelines) -> None:
    with pytest.raises(AirflowFailException, match="no pipeline 'plain' with sink.iceberg in .*; known: a, b"):
        execute(pipelines, {}, pipeline="plain")
    with pytest.raises(AirflowFailException, match="orphans_older_than 'soon': seconds, or .*; nothing was done"):
        execute(pipelines, {}, orphans_older_than="soon")
