"""A pipeline DAG in connect mode: the run task drives the checkpoint's job from its own process
in a session of the platform's Spark Connect server (no spark-submit), and the DAG run commits
exactly once."""
from __future__ import annotations

import pytest

from lockstep.model.checkpoint import CheckpointStatus
from lockstep.ops.airflow_client import AirflowClient

from ..integration.engine_helpers import open_transactions, store, verify
from ..support.data import produce_orders
from .test_pipeline_dag import explain, run_dag


@pytest.fixture(scope="module")
def connect_pipeline(airflow, bootstrap, spark_connect):
    return airflow.new_pipeline(bootstrap, "afx", spark={"mode": "connect", "remote": spark_connect})


def test_dag_runs_its_checkpoint_in_a_connect_session(airflow, connect_pipeline, spark_connect):
    client = AirflowClient(airflow.url, airflow.username, airflow.password)
    dag_id = connect_pipeline.spec().dag_id
    client.wait_for_dag(dag_id)
    client.unpause(dag_id)

    produce_orders(connect_pipeline, 200)
    run_id, state = run_dag(client, dag_id)
    assert state == "success", explain(client, dag_id, run_id)
    run_log = client.task_log(dag_id, run_id, "run")
    assert f"Spark Connect {spark_connect} (spark.remote)" in run_log and "Spark Connect session" in run_log
    assert "spark-submit" not in run_log
    # The platform's workers come from a forkserver that imported Lockstep's task modules: the task inherited them.
    assert "Lockstep's task modules were preloaded by the worker" in run_log, run_log[-3000:]
    latest = store(connect_pipeline).latest_completed()
    assert latest is not None and latest.status is CheckpointStatus.COMPLETED
    report = verify(connect_pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["expected_outputs"] == report["actual_outputs"] == 200
    assert open_transactions(connect_pipeline) == []
