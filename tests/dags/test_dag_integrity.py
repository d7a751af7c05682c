"""DAG integrity: every file in dags/ imports cleanly and declares what we promise."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DAG_FILES = sorted((ROOT / "dags").glob("*.py"))


@pytest.fixture(scope="module")
def dagbag():
    """The repository's DAGs over the repository's specs, whatever other tests pointed
    LOCKSTEP_PIPELINES_DIR at."""
    sys.path.insert(0, str(ROOT / "plugins"))  # Airflow puts the plugins folder on sys.path
    from airflow.dag_processing.dagbag import DagBag

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKSTEP_PIPELINES_DIR", str(ROOT / "include" / "pipelines"))
        yield DagBag(str(ROOT / "dags"))


def test_there_are_dag_files():
    assert DAG_FILES, "dags/ has no DAG files"


#: The DAG file that declares no DAG: it shows the specs that do not validate as its import error.
SPEC_ERRORS = ROOT / "dags" / "lockstep_spec_errors.py"


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_dag_file_imports_without_errors(dagbag, path):
    assert str(path) not in dagbag.import_errors, dagbag.import_errors.get(str(path))
    declares = any(d.fileloc == str(path) for d in dagbag.dags.values())
    assert declares != (path == SPEC_ERRORS), f"{path.name} declares {'no' if not declares else 'a'} DAG"


def test_a_spec_that_does_not_validate_leaves_every_other_pipeline_its_dag(tmp_path):
    """Beside the repository's specs, one with a bad field and two that collide: every valid pipeline keeps
    its DAG (and the savepoints DAG lists it); the bad one and the colliding pair have none, and
    lockstep_spec_errors.py's import error names each file and field. Airflow marks every DAG of a file
    with an import error stale, so the error is another file's."""
    import shutil

    import yaml

    sys.path.insert(0, str(ROOT / "plugins"))
    from airflow.dag_processing.dagbag import DagBag

    from lockstep.spec import load_specs

    for spec in ("orders.yaml", "orders_per_customer.yaml"):  # two that name no schema file beside them
        shutil.copy(ROOT / "include" / "pipelines" / spec, tmp_path / spec)
    good = load_specs(tmp_path)
    doc = yaml.safe_load((ROOT / "include" / "pipelines" / "orders.yaml").read_text())
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump({**doc, "name": "broken", "checkpoints": {
        **doc["checkpoints"], "max_records": "many"}, "transactions": {"id_prefix": "broken"}}))
    for twin in ("twin_a", "twin_b"):
        (tmp_path / f"{twin}.yaml").write_text(yaml.safe_dump({**doc, "name": twin, "transactions": {"id_prefix": "twin"}}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKSTEP_PIPELINES_DIR", str(tmp_path))
        bag = DagBag(str(ROOT / "dags"))
    pipelines = str(ROOT / "dags" / "lockstep_pipelines.py")
    assert pipelines not in bag.import_errors, bag.import_errors.get(pipelines)
    assert {d for d, dag in bag.dags.items() if dag.fileloc == pipelines} == {s.dag_id for s in good}
    assert set(bag.dags["lockstep_savepoints"].params.get_param("pipeline").schema["enum"]) == {s.name for s in good}
    error = bag.import_errors[str(SPEC_ERRORS)]
    assert "3 pipeline specs" in error and "every other pipeline keeps its DAG" in error, error
    assert f"{tmp_path / 'broken.yaml'}: checkpoints.max_records:" in error, error
    assert f"{tmp_path / 'twin_b.yaml'}: transactions.id_prefix: 'twin' is also used by {tmp_path / 'twin_a.yaml'}" in error


def test_one_dag_per_pipeline_spec_with_plan_run_commit(dagbag):
    from lockstep.spec import load_specs

    for spec in load_specs(ROOT / "include" / "pipelines"):
        dag = dagbag.dags[spec.dag_id]
        assert sorted(dag.task_ids) == ["commit", "plan", "run"]
        assert dag.get_task("run").upstream_task_ids == {"plan"}
        assert dag.get_task("commit").upstream_task_ids == {"run"}
        assert dag.max_active_runs == 1 and "lockstep" in dag.tags and dag.doc_md
        # What the DAG list shows under the DAG's name: the spec's description, else what it does.
        assert dag.description == (spec.description or f"Lockstep: {', '.join(spec.source.topics)} -> "
                                                        f"{spec.sink.topic}, exactly once")
        # The run task is the CLI's run step (lockstep.steps.run), so both resolve the master alike.
        assert type(dag.get_task("run")).__name__ == "LockstepRunOperator"
        assert set(dag.params) == {"restore_from", "max_records", "dry_run"}
        assert dag.get_task("commit").retries >= 1


def test_params_refuse_bad_values_with_the_rule(dagbag):
    dag = dagbag.dags["lockstep_orders_enrich"]
    restore = dag.params.get_param("restore_from")
    for bad in ("../etc/passwd", "a/b", "checkpoint:x", ""):
        with pytest.raises(Exception) as refused:
            restore.resolve(bad)
        assert "does not match" in str(refused.value)
    assert restore.resolve("checkpoint:41") == "checkpoint:41"
    assert restore.resolve("nightly-2026.11.21") == "nightly-2026.11.21"
    from airflow.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        dag.params.get_param("max_records").resolve(0)


def test_a_lag_triggered_pipeline_is_scheduled_on_its_watched_asset(tmp_path, monkeypatch):
    """checkpoints.trigger: the DAG's schedule is an Asset whose watcher is Lockstep's lag trigger, with
    the pipeline in its arguments (watchers with equal arguments share a trigger), and the DAG says so."""
    import yaml

    from lockstep.spec import load_specs

    sys.path.insert(0, str(ROOT / "plugins"))
    from lockstep_airflow.dag_factory import build_dag
    from lockstep_airflow.triggers import LockstepLagTrigger

    doc = yaml.safe_load((ROOT / "include" / "pipelines" / "orders.yaml").read_text())
    doc["checkpoints"].pop("schedule", None)
    doc["checkpoints"]["trigger"] = {"lag_records": 5000, "max_wait": "10m", "poll_interval": 3}
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(doc))
    [spec] = load_specs(tmp_path)
    dag = build_dag(spec)
    [asset] = dag.timetable.asset_condition.objects
    [watcher] = asset.watchers
    assert asset.name == f"lockstep_{spec.name}_lag"
    assert isinstance(watcher.trigger, LockstepLagTrigger)
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath == "lockstep_airflow.triggers.LockstepLagTrigger"
    assert kwargs == {"spec_path": str(spec.path), "pipeline": spec.name, "poll_s": 3}
    assert LockstepLagTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert "trigger:lag>=5000" in dag.tags and "**Lag-triggered**" in dag.doc_md and "600 s" in dag.doc_md


@pytest.mark.parametrize("trigger", [True, False])
def test_one_task_per_checkpoint_and_its_run_ahead_room(tmp_path, trigger):
    """checkpoints.tasks: one builds a DAG of the single checkpoint task with the sink Assets as its outlets. A
    lag-triggered one lets its next run start while one commits (room for 4 active runs; the task waits in its
    process for the checkpoint in flight); a cron one stays at one run at a time and does not wait in-process."""
    import yaml

    from lockstep.spec import load_specs

    sys.path.insert(0, str(ROOT / "plugins"))
    from lockstep_airflow.dag_factory import ONE_AHEAD_MAX_ACTIVE_RUNS, build_dag
    from lockstep_airflow.operators import IN_FLIGHT_WAIT, LockstepCheckpointOperator

    doc = yaml.safe_load((ROOT / "include" / "pipelines" / "orders.yaml").read_text())
    doc["checkpoints"]["tasks"] = "one"
    if trigger:
        doc["checkpoints"].pop("schedule", None)
        doc["checkpoints"]["trigger"] = {"lag_records": 1, "poll_interval": 1}
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(doc))
    [spec] = load_specs(tmp_path)
    dag = build_dag(spec)
    [task] = dag.tasks
    assert task.task_id == "checkpoint" and isinstance(task, LockstepCheckpointOperator)
    assert {a.extra["role"] for a in task.outlets} == {"sink", "dead letters"}
    assert dag.max_active_runs == (ONE_AHEAD_MAX_ACTIVE_RUNS if trigger else 1)
    assert task.wait_in_flight == (IN_FLIGHT_WAIT if trigger else None)
    assert "in one task (`checkpoints.tasks: one`)" in dag.doc_md


def test_a_parse_reads_every_pipelines_restore_points_on_one_s3_client_per_connection(tmp_path, monkeypatch, caplog):
    """The dag-processor parses the pipelines' file every min_file_process_interval and reads each pipeline's
    store for its trigger form's restore points. The parse builds one S3 client per AWS connection and shares it
    (a boto3 client costs about 17 ms of CPU to build: 0.5 s of a 30-pipeline parse went to building them)."""
    import logging

    import yaml

    sys.path.insert(0, str(ROOT / "plugins"))
    from lockstep.steps import client_factory
    from lockstep_airflow.dag_factory import pipeline_dags
    from lockstep_airflow.params import PARSE_TIMEOUT_S
    from tests.support.fake_s3 import FakeS3

    built: list[tuple[str, float | None]] = []

    def s3_client(conn_id: str, timeout_s: float | None = None) -> FakeS3:
        built.append((conn_id, timeout_s))
        return FakeS3()

    monkeypatch.setattr(client_factory, "s3_client", s3_client)
    doc = yaml.safe_load((ROOT / "include" / "pipelines" / "orders.yaml").read_text())
    for name, conn in (("a", "aws_default"), ("b", "aws_default"), ("c", "aws_other"), ("d", "aws_default")):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({
            **doc, "name": f"orders-{name}", "transactions": {"id_prefix": f"orders-{name}"},
            "checkpoints": {**doc["checkpoints"], "store": f"s3://lockstep/{name}", "aws_conn_id": conn}}))
    with caplog.at_level(logging.WARNING):
        dags = pipeline_dags(tmp_path)
    assert len(dags) == 4
    assert sorted(built) == [("aws_default", PARSE_TIMEOUT_S), ("aws_other", PARSE_TIMEOUT_S)]
    assert not [r for r in caplog.records if "restore points not readable" in r.getMessage()], caplog.text
