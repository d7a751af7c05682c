"""Pipelines through the real Airflow scheduler: REST trigger, params, savepoint
backfill, failure lines in task logs, recovery on the next run."""
from __future__ import annotations

import uuid

import pytest

from lockstep.model.checkpoint import CheckpointStatus
from lockstep.ops.airflow_client import AirflowClient, AirflowError
from lockstep.store.checkpoint_store import COMPARISON
from lockstep_airflow.run_notes import origin

from ..integration.engine_helpers import open_transactions, store, verify
from ..support.data import MALFORMED_EVERY, produce_orders, read_committed
from .conftest import wait_for


@pytest.fixture(scope="module")
def pipeline(airflow, bootstrap):
    """One manual-only pipeline for this module, in the folder Airflow reads specs from."""
    return airflow.new_pipeline(bootstrap, "af")


@pytest.fixture(scope="module")
def client(airflow, pipeline):
    return airflow.client_for(pipeline.spec().dag_id, "lockstep_savepoints")


def run_dag(client: AirflowClient, dag_id: str, conf: dict | None = None) -> tuple[str, str]:
    run_id = client.trigger(dag_id, conf)
    return run_id, client.wait_for_run(dag_id, run_id, timeout=600)


def run_when_listed(client: AirflowClient, dag_id: str, conf: dict) -> tuple[str, str]:
    """``run_dag`` for a DAG whose ``pipeline`` param lists the pipelines as the dag-processor last parsed it:
    a trigger refused because the pipeline is not listed yet is tried again until it is."""
    def attempt() -> str | None:
        try:
            return client.trigger(dag_id, conf)
        except AirflowError as exc:
            if "is not one of" in str(exc):
                return None
            raise
    run_id = wait_for(attempt, f"{dag_id} to list {conf['pipeline']}", timeout=120)
    return run_id, client.wait_for_run(dag_id, run_id, timeout=600)


def note(client: AirflowClient, dag_id: str, run_id: str) -> str:
    """The run's note, which the Lockstep listener writes in the scheduler as the run ends."""
    return wait_for(lambda: client.dag_run(dag_id, run_id).get("note"), f"the note of {run_id}", timeout=30)


def checkpoint_link(client: AirflowClient, dag_id: str, run_id: str, task_id: str) -> str:
    return client.extra_links(dag_id, run_id, task_id).get("Checkpoint") or ""


def explain(client: AirflowClient, dag_id: str, run_id: str) -> str:
    """Task states and the logs of failed tasks, for an assertion message."""
    parts = []
    for task_id, ti in client.task_instances(dag_id, run_id).items():
        parts.append(f"{task_id}: {ti['state']}")
        if ti["state"] in ("failed", "up_for_retry"):
            parts.append(client.task_log(dag_id, run_id, task_id)[-3000:])
    return "\n".join(parts)


def test_triggered_run_commits_a_checkpoint_and_logs_its_lifecycle(client, pipeline, bootstrap, statsd):
    dag_id = pipeline.spec().dag_id
    before = store(pipeline).latest_completed()
    produce_orders(pipeline, 200)
    run_id, state = run_dag(client, dag_id)
    assert state == "success", explain(client, dag_id, run_id)
    latest = store(pipeline).latest_completed()
    cid = latest.checkpoint_id
    assert before is None or cid > before.checkpoint_id
    assert latest.claim.run_id == run_id
    # The run and its checkpoint point at each other: the note and each task's "Checkpoint" link.
    page = f"/plugin/lockstep-checkpoints/lockstep/?pipeline={pipeline.name}&checkpoint={cid}#checkpoint-{cid}"
    assert note(client, dag_id, run_id) == (
        f"lockstep · [checkpoint {cid}]({page}): 200 records {origin({'start_source': latest.claim.start_source})} · completed: "
        f"{latest.prepared.records_out:,} written, {latest.prepared.records_dead_lettered:,} dead-lettered")
    assert {t: checkpoint_link(client, dag_id, run_id, t) for t in ("plan", "run", "commit")} == \
        {"plan": page, "run": page, "commit": page}

    plan_log = client.task_log(dag_id, run_id, "plan")
    assert f"checkpoint {cid}: planned 200 records" in plan_log
    run_log = client.task_log(dag_id, run_id, "run")
    assert f"checkpoint {cid}: prepared with 2 transactions" in run_log  # the Spark driver's own output
    commit_log = client.task_log(dag_id, run_id, "commit")
    assert f"checkpoint {cid}: completed" in commit_log and "180 out, 20 dead-lettered" in commit_log
    assert len(read_committed(bootstrap, pipeline.sink)) >= 180
    assert len(read_committed(bootstrap, pipeline.dead_letters)) >= 200 // MALFORMED_EVERY
    # The plan and commit tasks sent the pipeline's lag as StatsD gauges: after the commit nothing
    # is in flight or unread (nothing was produced since), and the last checkpoint completed just now.
    gauges = wait_for(lambda: (g := statsd.gauges(f"airflow.lockstep.{pipeline.name}."))
                      and g.get("checkpoints_in_flight") == 0 and g, "lag gauges after the commit", timeout=30)
    assert gauges["records_in_flight"] == 0 and gauges["records_unread"] == 0, gauges
    assert 0 <= gauges["last_completed_age_s"] < 600, gauges
    assert any(line.startswith(f"airflow.lockstep.{pipeline.name}.records_in_flight:") and not line.startswith(
        f"airflow.lockstep.{pipeline.name}.records_in_flight:0|") for line in statsd.lines), \
        "the plan task's gauges showed the claimed records in flight"


@pytest.mark.parametrize("conf, rule", [
    ({"restore_from": "../../etc"}, "does not match"),
    ({"restore_from": "a/b"}, "does not match"),
    ({"max_records": 0}, "minimum"),
    ({"dry_run": "yes"}, "is not of type"),
])
def test_bad_params_are_refused_before_anything_runs(client, pipeline, conf, rule):
    with pytest.raises(AirflowError) as refused:
        client.trigger(pipeline.spec().dag_id, conf)
    assert "HTTP 400" in str(refused.value) and rule in str(refused.value)
    # The plugin's middleware answers in one sentence, without jsonschema's dump of the schema.
    assert "; expected " in str(refused.value) and "Failed validating" not in str(refused.value), refused.value


def test_dry_run_shows_ranges_and_claims_nothing(client, pipeline):
    dag_id = pipeline.spec().dag_id
    produce_orders(pipeline, 10, start=1000)
    ids_before = list(store(pipeline).checkpoint_ids())
    run_id, state = run_dag(client, dag_id, {"dry_run": True})
    assert state == "success"
    states = {t: ti["state"] for t, ti in client.task_instances(dag_id, run_id).items()}
    assert states == {"plan": "success", "run": "skipped", "commit": "skipped"}
    assert "dry run: nothing claimed" in client.task_log(dag_id, run_id, "plan")
    assert list(store(pipeline).checkpoint_ids()) == ids_before
    planned = client.xcom(dag_id, run_id, "plan")
    assert planned["dry_run"] is True and planned["records"] >= 10 and planned["ranges"], planned
    text = note(client, dag_id, run_id)
    assert text.startswith(f"lockstep · dry run: checkpoint {planned['checkpoint_id']} would take "
                           f"{planned['records']} records {origin(planned)}"), text
    assert f"`{planned['ranges'][0]}`" in text and text.endswith("; nothing was claimed"), text
    kept = store(pipeline).last_dry_run()  # for the Checkpoints page
    assert (kept.run_id, kept.checkpoint_id, sum(r.count for r in kept.ranges)) == \
        (run_id, planned["checkpoint_id"], planned["records"])


def test_savepoint_from_the_ui_then_restore_replays_from_it(client, pipeline):
    dag_id = pipeline.spec().dag_id
    assert run_dag(client, dag_id)[1] == "success"  # settle anything pending
    sp_name = f"sp-{uuid.uuid4().hex[:6]}"
    sp_run, state = run_when_listed(client, "lockstep_savepoints", {"pipeline": pipeline.name, "action": "create",
                                                                    "name": sp_name})
    assert state == "success"
    savepoint = store(pipeline).get_savepoint(sp_name)
    assert f"savepoint {sp_name} of {pipeline.name} created" in client.task_log("lockstep_savepoints", sp_run,
                                                                                  "savepoint")
    produce_orders(pipeline, 40, start=2000)
    assert run_dag(client, dag_id)[1] == "success"
    # The next parse of the DAG file proposes the savepoint in the trigger form (read from the store).
    wait_for(lambda: sp_name in client._call("GET", f"/api/v2/dags/{dag_id}/details")["params"]["restore_from"]
             ["schema"].get("examples", []), f"{sp_name} proposed by restore_from", timeout=90)

    run_id, state = run_dag(client, dag_id, {"restore_from": sp_name})
    assert state == "success"
    restored = store(pipeline).latest_completed()
    assert restored.claim.run_id == run_id and restored.claim.restored_from == sp_name
    assert f"): 40 records restored from savepoint {sp_name} · completed" in note(client, dag_id, run_id)
    assert {r.tp.key: r.start for r in restored.claim.ranges} == dict(savepoint.end_offsets)
    plan_log = client.task_log(dag_id, run_id, "plan")
    assert f"savepoint:{sp_name}" in plan_log
    # The plan shows the restore's diff first, as `lockstep restore-plan` and a dry run do.
    assert client.xcom(dag_id, run_id, "plan")["restore"] == {"re_emitted": 40, "new": 0}
    assert "40 records would be written again, 0 read for the first time" in plan_log
    report = verify(pipeline, "--since-checkpoint", str(restored.checkpoint_id))
    assert report["ok"] and report["actual_outputs"] == 40, report

    # Later runs continue from the restored checkpoint, not from before the replay.
    produce_orders(pipeline, 10, start=3000)
    assert run_dag(client, dag_id)[1] == "success"
    after = store(pipeline).latest_completed()
    assert {r.tp.key: r.start for r in after.claim.ranges} == dict(restored.completed.end_offsets)


def test_compare_from_the_ui_reports_the_same_output_and_gates_on_a_change(client, pipeline, tmp_path):
    """The lockstep_compare DAG: the pipeline's own spec computes the same output for its retained checkpoints;
    a fixed transform (outside the pipelines folder) changes its dead letters, and `fail_on_change` fails."""
    import yaml

    dag_id = pipeline.spec().dag_id
    produce_orders(pipeline, 20, start=7000)  # a checkpoint of its own: the test does not lean on the module's others
    run_id, state = run_dag(client, dag_id)
    assert state == "success", explain(client, dag_id, run_id)
    client.wait_for_dag("lockstep_compare")
    client.unpause("lockstep_compare")
    run_id, state = run_when_listed(client, "lockstep_compare", {"pipeline": pipeline.name,
                                                                  "spec": str(pipeline.spec_path), "last": None})
    assert state == "success", explain(client, "lockstep_compare", run_id)
    log = client.task_log("lockstep_compare", run_id, "compare")
    assert ": the same output" in log, log[-3000:]
    summary = client.xcom("lockstep_compare", run_id, "compare")
    completed = [c for c in store(pipeline).checkpoint_ids() if store(pipeline).view(c).completed is not None]
    assert summary["same"] and summary["compared"] == completed and summary["total"]["before"] > 0, summary
    assert store(pipeline).note(COMPARISON)["compared_at"] == summary["compared_at"]  # the Checkpoints page's

    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(yaml.safe_dump({**yaml.safe_load(pipeline.spec_path.read_text()),
                                     "transform": "lockstep_examples.orders:enrich_accepting_text"}))
    run_id, state = run_when_listed(client, "lockstep_compare", {"pipeline": pipeline.name, "spec": str(fixed),
                                                                  "last": None, "fail_on_change": True})
    assert state == "failed"
    log = client.task_log("lockstep_compare", run_id, "compare")
    assert f"compare: the output changes through {fixed}" in log and "dead letters 0 gained" in log, log[-3000:]


def test_a_failed_checkpoint_logs_one_line_and_the_next_run_recovers(client, pipeline):
    dag_id = pipeline.spec().dag_id
    produce_orders(pipeline, 60, start=4000)
    run_id, state = run_dag(client, dag_id, {"lockstep_failpoints": "job.after_flush=raise"})
    assert state == "failed"
    failed = store(pipeline).view(max(store(pipeline).checkpoint_ids()))
    assert failed.claim.run_id == run_id and failed.status is CheckpointStatus.CLAIMED
    run_log = client.task_log(dag_id, run_id, "run")
    line = next(x for x in run_log.splitlines() if f"lockstep {pipeline.name} run failed:" in x)
    # One line: the checkpoint, the cause the job reported (not the spark-submit command), the way on.
    assert f"run failed: checkpoint {failed.checkpoint_id}: the Spark run failed after" in line, line
    assert "failpoint job.after_flush raised" in line and "spark-submit" not in line, line
    assert "a retry or the next run fences its transactions and replays its ranges" in line, line
    text = note(client, dag_id, run_id)  # the same summary, without the pipeline and checkpoint it says already
    assert f"): 60 records from checkpoint {failed.checkpoint_id - 1} · run failed: the Spark run failed after" \
        in text, text
    assert "failpoint job.after_flush raised" in text and text.endswith("replays its ranges"), text

    next_id, state = run_dag(client, dag_id)
    assert state == "success", explain(client, dag_id, next_id)
    assert store(pipeline).view(failed.checkpoint_id).status is CheckpointStatus.ABORTED
    assert f"checkpoint {failed.checkpoint_id} aborted" in client.task_log(dag_id, next_id, "plan")
    replay = store(pipeline).latest_completed()
    assert replay.claim.ranges == failed.claim.ranges
    assert open_transactions(pipeline) == []
    report = verify(pipeline, "--since-checkpoint", str(replay.checkpoint_id))
    assert report["ok"] and report["actual_outputs"] == 60, report


def test_a_missing_savepoint_fails_the_plan_once_with_the_right_way_out(client, pipeline):
    """A terminal error is not retried: the plan task fails on its first try, and its summary says
    to trigger again with an existing savepoint (a scheduled run would restore nothing)."""
    dag_id = pipeline.spec().dag_id
    run_id, state = run_dag(client, dag_id, {"restore_from": "does-not-exist"})
    assert state == "failed"
    plan = client.task_instances(dag_id, run_id)["plan"]
    assert plan["state"] == "failed" and plan["try_number"] == 1, plan
    log = client.task_log(dag_id, run_id, "plan")
    summary = f"lockstep {pipeline.name} plan failed: no checkpoint claimed: cannot restore: savepoint " \
              "'does-not-exist' not found"
    assert summary in log, log[-3000:]
    line = next(x for x in log.splitlines() if summary in x)
    assert "Trigger a new run with restore_from naming an existing savepoint" in line
    assert "the next run recovers" not in line, line  # a scheduled run would not restore: no false promise
    # The summary is the last thing the task says: after it only Airflow's own failure record (whose
    # exception value is the summary again) and its folded post-execute group.
    assert note(client, dag_id, run_id).startswith("lockstep · no checkpoint claimed · plan failed: ")
    assert checkpoint_link(client, dag_id, run_id, "plan") == ""  # nothing claimed: no link
    after = log.splitlines()[log.splitlines().index(line) + 1:]
    assert [x for x in after if "::group::" not in x and "::endgroup::" not in x
            and not x.startswith("error Task failed with exception")] == [], after


def asset_events(client: AirflowClient, uri: str) -> list[dict]:
    from urllib.parse import quote

    assets = client._call("GET", f"/api/v2/assets?uri_pattern={quote(uri, safe='')}")["assets"]
    asset = next(a for a in assets if a["uri"] == uri)
    events = client._call("GET", f"/api/v2/assets/events?asset_id={asset['id']}&order_by=timestamp")
    return events["asset_events"]


DOWNSTREAM = "lockstep_downstream_example"


def downstream_on(client: AirflowClient, uri: str) -> str:
    """The example downstream DAG, unpaused, once its schedule includes the asset ``uri`` (the DAG
    file is re-parsed after the module's pipeline spec appeared)."""
    client.wait_for_dag(DOWNSTREAM)
    wait_for(lambda: uri in str(client._call("GET", f"/api/v2/dags/{DOWNSTREAM}/details").get("asset_expression")),
             f"{DOWNSTREAM} scheduled on {uri}", timeout=120)
    client.unpause(DOWNSTREAM)
    return DOWNSTREAM


def test_the_commit_updates_the_sink_asset_only_when_a_checkpoint_completed_with_records(client, pipeline,
                                                                                        bootstrap, airflow,
                                                                                        monkeypatch):
    """Downstream DAGs can be scheduled on the sink topic: its Asset gets an event (checkpoint id,
    records, offsets) from a completed checkpoint, none from an aborted or an empty one."""
    dag_id = pipeline.spec().dag_id
    sink = f"kafka://{bootstrap.split(',')[0]}/{pipeline.sink}"
    before = len(asset_events(client, sink))
    downstream = downstream_on(client, sink)
    runs_before = len(client.dag_runs(downstream))

    produce_orders(pipeline, 30, start=6000)
    run_id, state = run_dag(client, dag_id, {"lockstep_failpoints": "job.before_prepared=raise"})
    assert state == "failed"
    assert len(asset_events(client, sink)) == before  # the checkpoint did not complete: no event

    run_id, state = run_dag(client, dag_id)  # aborts the failed checkpoint, replays its ranges, commits
    assert state == "success", explain(client, dag_id, run_id)
    # The downstream DAG runs once, for the committed checkpoint; the failed one started nothing.
    try:
        reacted = wait_for(lambda: [r for r in client.dag_runs(downstream) if r["state"] in ("success", "failed")]
                           if len(client.dag_runs(downstream)) > runs_before else None,
                           "the downstream DAG to run after the commit", timeout=120)
    finally:  # later modules' commits need not run it
        client._call("PATCH", f"/api/v2/dags/{downstream}", {"is_paused": True})
    assert len(client.dag_runs(downstream)) == runs_before + 1
    assert reacted[0]["state"] == "success", explain(client, downstream, reacted[0]["dag_run_id"])
    received = client.xcom(downstream, reacted[0]["dag_run_id"], "committed_output")
    events = asset_events(client, sink)
    assert len(events) >= before + 1
    latest = store(pipeline).latest_completed()
    newest = events[-1]
    assert newest["extra"]["pipeline"] == pipeline.name
    assert newest["extra"]["checkpoint_id"] == latest.checkpoint_id
    assert newest["extra"]["end_offsets"] == dict(latest.completed.end_offsets)
    assert newest["extra"]["records"] == latest.prepared.records_out > 0
    # It received every commit's event since it last ran (the DAG was paused before), the newest
    # last, and none for the failed checkpoint, whose ranges the newest one replayed.
    ours = sorted((r for r in received if r["uri"] == sink), key=lambda r: r["checkpoint_id"])
    assert ours[-1] == {"uri": sink, **newest["extra"]}, received

    # verify's drift audit reads the same events by the Asset's name and finds each one a completed
    # checkpoint with its records and offsets.
    from lockstep.ops import drift

    monkeypatch.setenv(drift.AIRFLOW_USER_ENV, airflow.username)
    monkeypatch.setenv(drift.AIRFLOW_PASSWORD_ENV, airflow.password)
    extras = drift.read_asset_events(airflow.url, pipeline.name)
    assert extras == [e["extra"] for e in events]
    s = store(pipeline)
    views = {i: s.view(i) for i in s.checkpoint_ids()}
    assert [f for f in drift.asset_drift(extras, views) if not f.explained] == []
    forged = [*extras, {**newest["extra"], "checkpoint_id": latest.checkpoint_id - 1}]  # the failed checkpoint
    assert any("never committed" in f.message for f in drift.asset_drift(forged, views))
    assert all(store(pipeline).view(r["checkpoint_id"]).status is CheckpointStatus.COMPLETED for r in ours), ours

    count = len(events)
    run_id, state = run_dag(client, dag_id)  # nothing new: completed empty, commit skipped, no event
    assert state == "success", explain(client, dag_id, run_id)
    assert client.task_instances(dag_id, run_id)["commit"]["state"] == "skipped"
    assert len(asset_events(client, sink)) == count


def test_the_iceberg_upkeep_dag_looks_after_a_pipelines_table_and_the_page_shows_it(airflow, platform, bootstrap):
    """lockstep_iceberg_upkeep through the real scheduler, triggered with params for one pipeline with a table: its
    task compacts, expires and removes orphans, logs each line, returns the figures, and the Checkpoints page shows
    them with the run that did it; the table keeps every row."""
    from lockstep.store.checkpoint_store import TABLE_UPKEEP

    from ..integration.engine_helpers import run

    platform.start("iceberg")  # the Iceberg REST catalog of the iceberg_default connection Airflow was given
    p = airflow.new_pipeline(bootstrap, "ice")
    table = f"lake_{p.name.replace('-', '_')}.orders"
    p.rewrite(sink={"iceberg": {"table": table}})
    for start in (0, 20):  # two checkpoints: the first one's files are compacted with --keep 1
        produce_orders(p, 20, start=start)
        done = run(p)
        assert done.returncode == 0, done.stderr[-3000:]
    client = airflow.client_for("lockstep_iceberg_upkeep")
    run_id, state = run_when_listed(client, "lockstep_iceberg_upkeep", {
        "pipeline": p.name, "keep": 1, "expire_older_than": "0", "orphans_older_than": "0", "dry_run": False})
    assert state == "success", explain(client, "lockstep_iceberg_upkeep", run_id)
    log = client.task_log("lockstep_iceberg_upkeep", run_id, "upkeep")
    assert f"{table}: compacted the" in log and f"{table}: expired" in log and f"{table}: removed" in log, log[-3000:]
    figures = client.xcom("lockstep_iceberg_upkeep", run_id, "upkeep")
    assert [a["action"] for a in figures[p.name]] == ["compact", "expire", "orphans"], figures
    assert figures[p.name][0]["rows"] > 0, figures
    # Unpaused, the DAG also makes its daily run (every table, the default ages), before or after this one: the
    # latest figures are one of the two runs'.
    note = store(p).note(TABLE_UPKEEP)
    assert all(note[a]["by"].startswith("Airflow lockstep_iceberg_upkeep run ") for a in ("compact", "expire",
                                                                                          "orphans")), note
    page = airflow.get("/lockstep/", params={"pipeline": p.name}).text
    assert f"Table upkeep of <code>{table}</code>" in page and "by Airflow lockstep_iceberg_upkeep run " in page
    report = verify(p)
    assert report["table"]["ok"] and report["table"]["rows"] == 36, report["table"]
