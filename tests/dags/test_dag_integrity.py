"""DAG integrity: every file in dags/ imports cleanly and declares what we promise."""
from __future__ import annotations

import json
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


def test_the_table_upkeep_dag_offers_every_pipeline_with_a_table_daily_and_refuses_a_bad_age(dagbag):
    from airflow.exceptions import ParamValidationError

    from lockstep.spec import load_specs
    from lockstep_airflow.operators import EVERY_TABLE

    dag = dagbag.dags["lockstep_iceberg_upkeep"]
    with_table = {s.name for s in load_specs(ROOT / "include" / "pipelines") if s.sink.iceberg is not None}
    assert with_table, "the demo's pipeline writes a table"
    enum = dag.params.get_param("pipeline").schema["enum"]
    assert enum[0] == EVERY_TABLE and set(enum[1:]) == with_table
    assert dag.max_active_runs == 1 and "iceberg" in dag.tags and dag.doc_md
    assert dag.schedule == "@daily"
    assert type(dag.get_task("upkeep")).__name__ == "LockstepIcebergUpkeepOperator"
    age = dag.params.get_param("expire_older_than")
    assert age.resolve("12h") == "12h" and age.resolve("86400") == "86400"
    for bad in ("soon", "-1d", "7 d"):
        with pytest.raises(ParamValidationError):
            age.resolve(bad)
    with pytest.raises(ParamValidationError):
        dag.params.get_param("keep").resolve(0)


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


def test_a_table_without_a_topic_is_the_sinks_asset_tag_and_words(tmp_path):
    """A pipeline whose records land in an Iceberg table alone: its DAG names the table where others name their
    sink topic (tag, description, docs), and the table is the sink's Asset, beside the dead-letter topic's."""
    import yaml

    from lockstep.spec import load_specs

    sys.path.insert(0, str(ROOT / "plugins"))
    from lockstep_airflow.dag_factory import build_dag

    doc = yaml.safe_load((ROOT / "include" / "pipelines" / "orders.yaml").read_text())
    doc["sink"] = {"dead_letter_topic": doc["sink"]["dead_letter_topic"],
                   "iceberg": {"table": "lake.orders", "catalog_conn_id": "lake"}}
    doc.pop("description", None)
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(doc))
    [spec] = load_specs(tmp_path)
    dag = build_dag(spec)
    assert "sink:iceberg:lake.orders" in dag.tags
    assert dag.description.endswith("-> iceberg:lake.orders, exactly once")
    assert "lands its records in Iceberg table **lake.orders** alone" in dag.doc_md
    outlets = {a.extra["role"]: a.uri for a in dag.get_task("commit").outlets}
    assert outlets["sink"] == "iceberg://lake/lake.orders"
    assert outlets["dead letters"].startswith("kafka://") and outlets["dead letters"].endswith(
        "/" + doc["sink"]["dead_letter_topic"])


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

    def s3_client(conn_id: str, timeout_s: float | None = None, max_pool_connections: int | None = None) -> FakeS3:
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


def test_a_completed_checkpoint_leaves_the_dag_as_it_was_and_a_savepoint_is_proposed(tmp_path, monkeypatch):
    """Airflow writes a new DAG version whenever a DAG's serialized form changes after a run used the last one.
    The trigger form is part of it: a checkpoint completing must not change it (it did while the form proposed
    the newest checkpoints, so a running pipeline became a new DAG version at every parse); a savepoint does,
    and the form proposes it."""
    import yaml
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.serialization.serialized_objects import DagSerialization

    sys.path.insert(0, str(ROOT / "plugins"))
    from lockstep.spec import load_spec
    from lockstep.steps import client_factory, coordinator
    from lockstep_airflow.dag_factory import build_dag
    from tests.support.fake_pipeline import SOURCE, fake_world

    doc = yaml.safe_load((ROOT / "include" / "pipelines" / "orders.yaml").read_text())
    doc["source"] = {**doc["source"], "topics": [SOURCE]}
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(tmp_path / "orders.yaml")
    world = fake_world(monkeypatch, pipeline_spec=spec)
    monkeypatch.setattr(client_factory, "s3_client", lambda conn_id, timeout_s=None, max_pool_connections=None: world.s3)

    def parsed() -> tuple[str, dict]:
        data = DagSerialization.to_dict(build_dag(spec))
        return SerializedDagModel.hash(data), data["dag"]["params"]

    def complete(run_id: str) -> None:
        world.source.produce(SOURCE, 0, 10)
        plan = coordinator.plan(world.pipeline, run_id)
        world.prepare(plan)
        coordinator.commit(world.pipeline, plan.claim.checkpoint_id)

    complete("run-1")
    before, _ = parsed()
    complete("run-2")
    assert world.store.latest_completed() is not None and world.store.latest_completed().checkpoint_id == 2
    assert parsed()[0] == before
    world.store.create_savepoint("before-upgrade", 2, "2026-12-05T10:00:00+00:00")
    after, params = parsed()
    assert after != before
    assert "before-upgrade" in json.dumps(params)


def _examples_beside(tmp_path: Path, **extra: dict) -> tuple[Path, list]:
    """The repository's example specs copied into ``tmp_path/pipelines`` (their SQL files with them, their
    schema files where they name them: ``../lockstep_examples``), plus ``extra`` specs (file stem -> orders.yaml's
    document updated with it); the folder and the examples' specs."""
    import shutil

    import yaml

    from lockstep.spec import load_specs

    folder = tmp_path / "pipelines"
    shutil.copytree(ROOT / "include" / "pipelines", folder)
    (tmp_path / "lockstep_examples").symlink_to(ROOT / "include" / "lockstep_examples")
    examples = load_specs(folder)
    doc = yaml.safe_load((ROOT / "include" / "pipelines" / "orders.yaml").read_text())
    for stem, changes in extra.items():
        (folder / f"{stem}.yaml").write_text(yaml.safe_dump({**doc, **changes}))
    return folder, examples


def _dagbag(folder: Path):
    sys.path.insert(0, str(ROOT / "plugins"))
    from airflow.dag_processing.dagbag import DagBag

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKSTEP_PIPELINES_DIR", str(folder))
        return DagBag(str(ROOT / "dags"))


def test_a_source_topic_longer_than_a_tag_keeps_every_pipeline_its_dag(tmp_path):
    """A source topic of 180 characters (Kafka allows 249) beside the six examples: ``source:<topic>`` is longer
    than Airflow's 100-character tags, and it used to fail the pipelines' file, 0 of 6 examples keeping a DAG.
    Now every example keeps its DAG and the long one has its own, its tags shortened to fit with a digest."""
    from lockstep.spec import load_spec

    topic = "t" * 170 + ".orders-x"
    folder, examples = _examples_beside(tmp_path, long_topic={
        "name": "long-topic", "source": {"topics": [topic], "kafka_conn_id": "kafka_default"},
        "sink": {"topic": "s" * 200, "dead_letter_topic": "long-topic-dead-letters"},
        "transactions": {"id_prefix": "long-topic"}})
    long_spec = load_spec(folder / "long_topic.yaml")
    bag = _dagbag(folder)
    assert not bag.import_errors, bag.import_errors
    assert {s.dag_id for s in examples} | {long_spec.dag_id} <= set(bag.dags)
    assert len(examples) == 6
    from airflow.sdk.definitions.dag import TAG_MAX_LEN

    assert all(len(tag) <= TAG_MAX_LEN for dag in bag.dags.values() for tag in dag.tags)
    tags = bag.dags[long_spec.dag_id].tags
    [source] = [t for t in tags if t.startswith("source:")]
    [sink] = [t for t in tags if t.startswith("sink:")]
    assert len(source) == len(sink) == TAG_MAX_LEN and source.startswith("source:ttt") and "~" in source, tags
    assert "lockstep" in tags


def test_long_tags_are_cut_to_airflows_limit_with_a_stable_digest_that_tells_two_topics_apart():
    sys.path.insert(0, str(ROOT / "plugins"))
    from airflow.sdk.definitions.dag import TAG_MAX_LEN as AIRFLOWS

    from lockstep_airflow.dag_factory import TAG_MAX_LEN, fit_tag

    assert TAG_MAX_LEN == AIRFLOWS
    short = "source:" + "a" * 93
    assert fit_tag(short) == short  # exactly the limit: as it is
    a, b = "source:" + "a" * 200 + "1", "source:" + "a" * 200 + "2"
    assert len(fit_tag(a)) == len(fit_tag(b)) == TAG_MAX_LEN
    assert fit_tag(a) != fit_tag(b) and fit_tag(a) == fit_tag(a)
    assert fit_tag(a).startswith("source:aaa") and fit_tag(a)[-9] == "~"


def test_an_error_building_one_pipelines_dag_leaves_every_other_its_dag_and_names_the_spec(tmp_path, monkeypatch):
    """Whatever fails while one pipeline's DAG is built (here a planted error in its docs): every other
    pipeline keeps its DAG, the failed one has none, and lockstep_spec_errors.py's import error names its spec
    file and the cause."""
    sys.path.insert(0, str(ROOT / "plugins"))
    from lockstep_airflow import dag_factory

    folder, examples = _examples_beside(tmp_path)
    broken = next(s for s in examples if s.name == "orders-avro")
    real_doc_md = dag_factory.doc_md

    def doc_md(spec):
        if spec.name == broken.name:
            raise RuntimeError("planted: this DAG cannot be built")
        return real_doc_md(spec)

    monkeypatch.setattr(dag_factory, "doc_md", doc_md)
    bag = _dagbag(folder)
    pipelines = str(ROOT / "dags" / "lockstep_pipelines.py")
    assert pipelines not in bag.import_errors, bag.import_errors.get(pipelines)
    assert {d for d, dag in bag.dags.items() if dag.fileloc == pipelines} == {
        s.dag_id for s in examples if s is not broken}
    error = bag.import_errors[str(SPEC_ERRORS)]
    assert "1 pipeline spec" in error and f"({Path(broken.path).name})" in error, error
    assert f"{broken.path}: its DAG {broken.dag_id} cannot be built: RuntimeError: planted: this DAG cannot be " \
           "built" in error, error
    assert "lockstep_downstream_example" in bag.dags


def test_a_tasks_parse_builds_only_its_own_dag_and_still_sees_a_collision(tmp_path, monkeypatch):
    """A task's process parses the pipelines' file for its one DAG (Airflow's parsing context names it): it
    builds that DAG, with its tasks, and no other pipeline's; a spec added since, whose prefix collides with
    the pipeline's, leaves the task no DAG, as the dag-processor's parse leaves the pipeline none."""
    import shutil

    import yaml

    sys.path.insert(0, str(ROOT / "plugins"))
    from airflow.dag_processing.dagbag import DagBag

    for spec in ("orders.yaml", "orders_per_customer.yaml"):
        shutil.copy(ROOT / "include" / "pipelines" / spec, tmp_path / spec)
    doc = yaml.safe_load((ROOT / "include" / "pipelines" / "orders.yaml").read_text())
    for i in range(20):  # other pipelines, never built by this task
        (tmp_path / f"other_{i:02d}.yaml").write_text(yaml.safe_dump({**doc, "name": f"other-{i:02d}",
                                                                      "transactions": {"id_prefix": f"other-{i:02d}"}}))
    from lockstep_airflow import dag_factory

    built: list[str] = []
    real_build = dag_factory.build_dag
    monkeypatch.setattr(dag_factory, "build_dag", lambda spec, *a, **k: built.append(spec.name) or real_build(spec, *a, **k))
    monkeypatch.setenv("LOCKSTEP_PIPELINES_DIR", str(tmp_path))
    pipelines = str(ROOT / "dags" / "lockstep_pipelines.py")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "lockstep_orders_enrich")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "plan")
    bag = DagBag(pipelines)
    assert pipelines not in bag.import_errors, bag.import_errors.get(pipelines)
    assert sorted(bag.dags) == ["lockstep_orders_enrich"] and built == ["orders-enrich"]
    assert {"plan", "run", "commit"} <= set(bag.dags["lockstep_orders_enrich"].task_dict)
    prefix = yaml.safe_load((tmp_path / "orders.yaml").read_text())["transactions"]["id_prefix"]
    (tmp_path / "zz_newcomer.yaml").write_text(yaml.safe_dump({**doc, "name": "newcomer",
                                                               "transactions": {"id_prefix": f"{prefix}-new"}}))
    built.clear()
    assert DagBag(pipelines).dags == {} and built == []
    monkeypatch.delenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID")
    monkeypatch.delenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID")
    monkeypatch.setattr("lockstep_airflow.params.read_restore_points", lambda spec, clients=None: [])
    everything = DagBag(pipelines)
    assert "lockstep_orders_enrich" not in everything.dags and "lockstep_other_00" in everything.dags
