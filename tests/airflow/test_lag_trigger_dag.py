"""A lag-triggered pipeline in a real Airflow (``checkpoints.trigger``): its DAG is scheduled on an Asset
whose watcher (``lockstep_airflow.triggers.LockstepLagTrigger``, in Airflow's triggerer) starts a run
when enough records are unread, and starts none while the topic is idle or the lag is below the mark."""
from __future__ import annotations

import re
import time

from lockstep.model.checkpoint import CheckpointStatus
from lockstep.rules.lag_trigger import Fired

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


def test_a_lag_triggered_pipeline_runs_on_a_burst_and_stays_still_when_idle(airflow, bootstrap, request):
    pipeline = airflow.new_pipeline(bootstrap, "lag")
    pipeline.rewrite(checkpoints={"schedule": None, "trigger": {"lag_records": 50, "max_wait": "1h",
                                                                  "poll_interval": 1}})
    dag_id = pipeline.spec().dag_id
    client = airflow.client_for_watched(request, dag_id)

    # No checkpoint yet, so where to start is not known: the watcher starts a first (empty) one.
    runs = _settled(client, dag_id, 1)
    assert len(runs) == 1, f"the watcher started more than one first run: {runs}"
    [first] = runs
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


def test_a_lag_triggered_windowed_pipeline_fires_its_last_windows_when_the_source_goes_quiet(airflow, bootstrap,
                                                                                              request):
    import yaml

    from ..integration.test_state import T0, WINDOW, expected_windows, produce, window_outputs

    idle_s, poll_s = 15, 1
    pipeline = airflow.new_pipeline(bootstrap, "quiet")
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["transform"] = "lockstep_examples.orders:parse"
    doc["state"] = {**WINDOW, "event_time": {**WINDOW["event_time"], "idle_timeout": f"{idle_s}s", "idle_advance": True}}
    doc["checkpoints"].update(trigger={"lag_records": 21, "max_wait": "1h", "poll_interval": poll_s})
    pipeline.spec_path.write_text(yaml.safe_dump(doc))
    dag_id = pipeline.spec().dag_id
    produced = list(range(21))  # event times T0 .. T0+20: the burst's checkpoint leaves the watermark at T0+17
    produce(pipeline, produced)
    client = airflow.client_for_watched(request, dag_id)  # unpaused: the watcher's first run reads the burst from the earliest
    burst = _settled(client, dag_id, 1)[0]
    assert burst["state"] == "success", explain(client, dag_id, burst["dag_run_id"])
    s = store(pipeline)
    # The burst's checkpoint by its run, not the latest: on a loaded machine the quiet run can have started
    # (and _settled then waited for it too) before this test saw the burst's run finish (CI, 2026-12-02).
    [after_burst] = [v for v in s.recent() if v.claim.run_id == burst["dag_run_id"] and v.completed is not None]
    assert after_burst.prepared.records_in == 21 and after_burst.completed.state.watermark_ms == (T0 + 17) * 1000
    assert after_burst.completed.state.timers > 0, "windows [T0+10, +20) and [T0+20, +30) wait for the watermark"

    # Nothing more arrives. Once both partitions have been idle for 15 s, event time has gone on to
    # T0+20+15-2 = T0+33 by the clock: the watcher starts a run, and its checkpoint fires both windows.
    quiet = _settled(client, dag_id, 2)[1]
    assert quiet["state"] == "success", explain(client, dag_id, quiet["dag_run_id"])
    last = s.latest_completed()
    assert last.claim.run_id == quiet["dag_run_id"] and last.claim.fires_timers and last.prepared.records_in == 0
    fired_at = Fired.from_json(s.trigger_fired()[0])
    quiet_since = after_burst.claim.clock / 1000
    # The idle timeout, not max_wait (1 h), started it: soon after the partitions went idle. The margin is
    # for a loaded machine (a CI rehearsal with other work running measured 19.7 s against 18 s here).
    assert fired_at is not None and fired_at.at_s - quiet_since <= idle_s + poll_s + 30, \
        f"the watcher started the run {fired_at.at_s - quiet_since:.1f} s after the last records were read"
    plan_log = client.task_log(dag_id, quiet["dag_run_id"], "plan")
    assert "state.event_time.idle_advance" in plan_log, plan_log[-3000:]
    state = last.completed.state
    assert state.timers == 0 and state.watermark_ms >= (T0 + 30) * 1000
    found = dict(window_outputs(pipeline, produced))
    assert found == expected_windows(produced, state.watermark_ms)
    assert {start for _, start in found} == {T0, T0 + 10, T0 + 20}, "every window of the burst fired"
    time.sleep(6)
    assert len(_runs(client, dag_id)) == 2, "nothing is due any more: still again"
    report = verify(pipeline)
    assert report["ok"] and report["state_mismatched"] == 0, report
    assert open_transactions(pipeline) == []
