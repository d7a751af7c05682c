"""``checkpoints.tasks: one`` in a real Airflow: a DAG run is one ``checkpoint`` task that plans, runs and commits
in one process (two task starts fewer between a record and its commit), with the same log lines, note, link and
asset event as the three tasks; a retry recovers the checkpoint its failed try left, exactly once."""
from __future__ import annotations

import pytest

from lockstep.model.checkpoint import CheckpointStatus

from ..integration.engine_helpers import open_transactions, store, verify
from ..support.data import produce_orders, read_committed
from .test_pipeline_dag import checkpoint_link, explain, note, run_dag


@pytest.fixture(scope="module")
def pipeline(airflow, bootstrap):
    p = airflow.new_pipeline(bootstrap, "one")
    p.rewrite(checkpoints={"tasks": "one"})
    return p


@pytest.fixture(scope="module")
def client(airflow, pipeline):
    return airflow.client_for(pipeline.spec().dag_id)


def test_one_task_plans_runs_and_commits_a_checkpoint(client, pipeline, bootstrap):
    dag_id = pipeline.spec().dag_id
    produce_orders(pipeline, 200)
    run_id, state = run_dag(client, dag_id)
    assert state == "success", explain(client, dag_id, run_id)
    assert set(client.task_instances(dag_id, run_id)) == {"checkpoint"}
    latest = store(pipeline).latest_completed()
    cid = latest.checkpoint_id
    assert latest.claim.run_id == run_id and latest.prepared.records_in == 200
    log = client.task_log(dag_id, run_id, "checkpoint")
    # The three steps' lines, in order, in the one log.
    lines = [f"checkpoint {cid}: planned 200 records", f"checkpoint {cid}: prepared with 2 transactions",
             f"checkpoint {cid}: completed"]
    at = [log.find(line) for line in lines]
    assert all(i >= 0 for i in at) and at == sorted(at), (at, log[-4000:])
    page = f"/plugin/lockstep-checkpoints/lockstep/?pipeline={pipeline.name}&checkpoint={cid}#checkpoint-{cid}"
    assert checkpoint_link(client, dag_id, run_id, "checkpoint") == page
    assert note(client, dag_id, run_id).endswith(
        f"completed: {latest.prepared.records_out:,} written, {latest.prepared.records_dead_lettered:,} dead-lettered")
    assert client.xcom(dag_id, run_id, "checkpoint")["status"] == "completed"
    assert len(read_committed(bootstrap, pipeline.sink)) == latest.prepared.records_out
    report = verify(pipeline)
    assert report["ok"] and report["actual_outputs"] == 200, report  # written and dead-lettered


def test_a_retry_of_the_one_task_recovers_what_its_failed_try_left(client, pipeline):
    """The first try commits every transaction and fails before marking the checkpoint completed; the retry's
    plan finds it prepared and rolls it forward, so its records are visible once."""
    dag_id = pipeline.spec().dag_id
    produce_orders(pipeline, 60, start=5000)
    before = store(pipeline).latest_completed().checkpoint_id
    run_id, state = run_dag(client, dag_id, {"lockstep_failpoints": "commit.after_kafka_commit=raise",
                                             "lockstep_failpoints_tries": 1})
    assert state == "success", explain(client, dag_id, run_id)
    ti = client.task_instances(dag_id, run_id)["checkpoint"]
    assert ti["try_number"] == 2, ti
    first = client.task_log(dag_id, run_id, "checkpoint", try_number=1)
    assert f"lockstep {pipeline.name} commit failed: checkpoint {before + 1}:" in first, first[-3000:]
    retry = client.task_log(dag_id, run_id, "checkpoint", try_number=2)
    assert f"checkpoint {before + 1}: found prepared but not completed; rolling it forward" in retry, retry[-3000:]
    assert store(pipeline).view(before + 1).status is CheckpointStatus.COMPLETED
    assert open_transactions(pipeline) == []
    report = verify(pipeline, "--since-checkpoint", str(before + 1))
    assert report["ok"] and report["lost"] == report["duplicated"] == 0, report


def test_a_lag_triggered_one_task_run_plans_on_top_of_the_checkpoint_in_flight_and_commits_after_it(
        airflow, bootstrap, request, tmp_path):
    """A lag-triggered one-task DAG lets a second run start while one runs (its watcher fires one run ahead):
    that run plans its checkpoint on top of the one in flight (``checkpoints.pipelined``: from its ends), runs
    it, and its commit waits for the first checkpoint's, so a run overlaps the commit before it and the
    checkpoints complete in order. Two manual runs show it without depending on when the watcher looks, nor on
    how fast the first checkpoint is: the first is held in its commit, prepared (the failpoint
    ``commit.after_verify`` set to ``pause``), until the second's task logs that its commit waits for it, then
    released."""
    from .conftest import wait_for
    from .test_lag_trigger_dag import _settled

    p = airflow.new_pipeline(bootstrap, "ahead")
    p.rewrite(checkpoints={"schedule": None, "tasks": "one", "pipelined": True,
                           "trigger": {"lag_records": 1_000_000_000, "max_wait": "1h", "poll_interval": 1}})
    dag_id = p.spec().dag_id
    client = airflow.client_for_watched(request, dag_id)
    _settled(client, dag_id, 1)  # the watcher's first checkpoint, which finds where to start
    produce_orders(p, 10_000)
    signal = tmp_path / "commit.after_verify"  # the paused task writes it and goes on once it is gone
    first = client.trigger(dag_id, {"lockstep_failpoints": "commit.after_verify=pause",
                                    "lockstep_failpoint_signals": str(tmp_path)})
    try:
        wait_for(signal.exists, "the first run's checkpoint prepared and held at commit.after_verify", timeout=180)
        s = store(p)
        [claimed] = [i for i in s.checkpoint_ids() if s.view(i).claim.run_id == first]
        produce_orders(p, 10_000, start=10_000)
        second = client.trigger(dag_id)
        waiting = (f"checkpoint {claimed + 1}: commits after checkpoint {claimed}, which it was planned on top of: "
                   "waiting")
        wait_for(lambda: waiting in client.task_log(dag_id, second, "checkpoint"),
                 "the second run's checkpoint run, its commit waiting for the first's", timeout=180, interval=1)
        assert signal.exists(), "the first checkpoint went on by itself (its pause expired) before it was released"
        assert s.view(claimed).status is CheckpointStatus.PREPARED
    finally:
        signal.unlink(missing_ok=True)
    assert client.wait_for_run(dag_id, first, timeout=300) == "success", explain(client, dag_id, first)
    assert client.wait_for_run(dag_id, second, timeout=300) == "success", explain(client, dag_id, second)
    a, b = s.view(claimed), s.view(claimed + 1)
    assert (a.claim.run_id, b.claim.run_id) == (first, second)
    assert b.claim.after == claimed and {r.tp.key: r.start for r in b.claim.ranges} == a.claim.end_offsets
    assert a.prepared.records_in + b.prepared.records_in == 20_000
    log = client.task_log(dag_id, second, "checkpoint")
    assert f"planned on top of checkpoint {claimed}, prepared by run {first}" in log, log[-3000:]
    assert b.completed.completed_at >= a.completed.completed_at, (a.completed, b.completed)
    assert open_transactions(p) == []
    report = verify(p)
    assert report["ok"] and (report["lost"], report["duplicated"]) == (0, 0), report
