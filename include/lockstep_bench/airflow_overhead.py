"""Airflow's scheduling overhead per checkpoint run, measured apart from everything else.

Runs last, after every other figure is taken, because ``airflow standalone`` keeps a
core busy. The pipeline's input stays empty, so every DAG run is an empty
checkpoint (no Spark): the run's wall time is almost all Airflow — scheduling the
three tasks one after the other and starting a task process for each. Overhead is
the run's wall time (trigger to success, polled every 0.25 s) minus the time the
tasks themselves report as running.
"""
from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockstep.ops.airflow_client import TERMINAL, AirflowClient
from lockstep_bench import many_pipelines, workloads

if TYPE_CHECKING:
    from lockstep_dev.platform import Platform


def _seconds(start: str | None, end: str | None) -> float:
    if not start or not end:
        return 0.0
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _run_once(client: AirflowClient, dag_id: str, timeout: float = 300) -> dict[str, Any]:
    started = time.monotonic()
    run_id = client.trigger(dag_id)
    while True:
        state = client.run_state(dag_id, run_id)
        if state in TERMINAL:
            break
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"Airflow run {run_id} still {state} after {timeout:.0f} s")
        time.sleep(0.25)
    wall = time.monotonic() - started
    tasks = {t: _seconds(ti.get("start_date"), ti.get("end_date")) for t, ti in client.task_instances(dag_id, run_id).items()}
    return {"run_id": run_id, "state": state, "wall_s": round(wall, 2), "tasks_s": round(sum(tasks.values()), 2),
            "overhead_s": round(wall - sum(tasks.values()), 2), "per_task_s": {k: round(v, 2) for k, v in tasks.items()}}


def measure(platform: Platform, work_dir: Path, repeats: int, log: Callable[[str], None],
            fleet: Any = None) -> list[dict[str, Any]]:
    """The overhead runs; ``fleet`` (``many_pipelines.Fleet``) measures with the same Airflow: its scheduler
    logs at DEBUG, ``fleet.airflow_ready()`` once it answers, ``fleet.with_airflow(client)`` after the runs."""
    bootstrap = platform.kafka.bootstrap
    name = f"bench-airflow-{uuid.uuid4().hex[:6]}"
    topic = f"{name}-in"
    workloads.create_topic(bootstrap, topic, 1)
    workloads.create_topic(bootstrap, f"{topic}-out", 1)
    specs = work_dir / "airflow-specs"
    spec_path = workloads.write_spec(specs, name, topic, f"{topic}-out", 1000)
    os.environ["LOCKSTEP_PIPELINES_DIR"] = str(specs)  # passed through to Airflow
    extra_env = many_pipelines.SCHEDULER_DEBUG if fleet is not None else {}
    os.environ.update(extra_env)
    log("starting airflow standalone for the scheduling-overhead measurement")
    started = time.monotonic()
    platform.up(with_airflow=True, out=sys.stderr)
    try:
        client = AirflowClient(platform.airflow.url, "admin", platform.airflow.admin_password() or "")
        from lockstep.spec import load_spec

        dag_id = load_spec(spec_path).dag_id
        client.wait_for_dag(dag_id)
        client.unpause(dag_id)
        log(f"airflow ready after {time.monotonic() - started:.0f} s")
        if fleet is not None:
            fleet.airflow_ready()
        rows = []
        for n in range(repeats + 1):  # run 0 warms up (first task processes, DAG serialization)
            row = {"repeat": n, "warm_up": n == 0, **_run_once(client, dag_id)}
            rows.append(row)
            log(f"airflow run {n}: {row['state']} in {row['wall_s']:.1f} s, tasks {row['tasks_s']:.1f} s, "
                f"overhead {row['overhead_s']:.1f} s")
        if fleet is not None:
            fleet.with_airflow(client)
        return rows
    finally:
        platform.stop("airflow", out=sys.stderr)
        os.environ.pop("LOCKSTEP_PIPELINES_DIR", None)
        for key in extra_env:
            os.environ.pop(key, None)
