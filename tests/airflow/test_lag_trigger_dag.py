"""A lag-triggered pipeline in a real Airflow (``checkpoints.trigger``): its DAG is scheduled on an Asset
whose watcher (``lockstep_airflow.triggers.LockstepLagTrigger``, in Airflow's triggerer) starts a run
when enough records are unread, and starts none while the topic is idle or the lag is below the mark."""
from __future__ import annotations

import re
import time

from lockstep.model.checkpoint import CheckpointStatus

from ..integration.engine_helpers import open_transactions, store, verify
from ..support.data import produce_orders
from .conftest import wait_for
from .test_pipeline_dag import explain


def _runs(client, dag_id: str) -> list[dict]:
    return sorted(client.dag_runs(dag_id), key=lambda r: r.get("queued_at") or r.get("logical_date") or "")


def _settled(client, dag_id: str, count: int) -> list[dict]:
    """Wait until the DAG has ``count`` runs, all finished; return them."""
    def done() -> list[dict] | None:
        runs = _runs(client, dag_id)
        return runs if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs) else None
    return wait_for(done, f"{count} finished runs of {dag_id}", timeout=240, interval=1.0)


def test_a_lag_triggered_pipeline_runs_on_a_burst_and_stays_still_when_idle(airflow, bootstrap):
    pipeline = airflow.new_pipeline(bootstrap, "lag")
    pipeline.rewrite(checkpoints={"schedule": None, "trigger": {"lag_records": 50, "max_wait": "1h",
                                                                  "poll_interval": 1}})
    dag_id = pipeline.spec().dag_id
    client = airflow.client_for(dag_id)

    # No checkpoint yet, so where to start is not known: the watcher starts a first (empty) one.
    [first] = _settled(client, dag_id, 1)
    assert first["state"] == "success", explain(client, dag_id, first["dag_run_id"])
    assert first["run_type"] == "asset_triggered", first
    assert store(pipeline).latest_completed().prepared.records_in == 0

    # Idle, then a lag below the mark: no run starts (the watcher looks every second).
    time.sleep(8)
    produce_orders(pipeline, 30)
    time.sleep(8)
    assert len(_runs(client, dag_id)) == 1, _runs(client, dag_id)

    # The burst passes the mark: one run, one checkpoint of all 60 records; then still again.
    produce_orders(pipeline, 30, start=30)
    runs = _settled(client, dag_id, 2)
    assert runs[1]["state"] == "success", explain(client, dag_id, runs[1]["dag_run_id"])
    latest = store(pipeline).latest_completed()
    assert latest.status is CheckpointStatus.COMPLETED and latest.prepared.records_in == 60
    assert latest.claim.run_id == runs[1]["dag_run_id"]
    plan_log = client.task_log(dag_id, runs[1]["dag_run_id"], "plan")
    assert re.search(r"started by its lag watcher: \d+ records unread, at least checkpoints.trigger.lag_records \(50\)",
                     plan_log), plan_log[-3000:]
    time.sleep(8)
    assert len(_runs(client, dag_id)) == 2, _runs(client, dag_id)
    assert latest.checkpoint_id == store(pipeline).latest_completed().checkpoint_id

    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["expected_outputs"] == report["actual_outputs"] == 60
    assert open_transactions(pipeline) == []
