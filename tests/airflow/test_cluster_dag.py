"""A pipeline DAG on the cluster topology: the scheduler's run task submits to the Spark
standalone master named in the spec, over 3 brokers (RF 3, min ISR 2) and the durable S3
server; a crash in the Spark run is recovered by the run task's retry, exactly once."""
from __future__ import annotations

import pytest

from lockstep.ops.airflow_client import AirflowClient

from ..integration.engine_helpers import open_transactions, store, verify
from ..support.data import produce_orders
from .conftest import CLUSTER_AWS, CLUSTER_KAFKA, add_connections, cluster_connections
from .test_pipeline_dag import explain, run_dag


@pytest.fixture(scope="module")
def cluster_pipeline(airflow, cluster):
    """A pipeline on the cluster topology, through connections added to the running Airflow (as a
    user adds them) and to this process's environment (the checks below read the cluster too)."""
    connections = cluster_connections(cluster)
    add_connections(airflow, connections)
    with pytest.MonkeyPatch.context() as env:
        for name, value in connections.items():
            env.setenv(name, value)
        yield airflow.new_pipeline(cluster.kafka.bootstrap, "afc", partitions=3, replication=3,
                                   kafka_conn_id=CLUSTER_KAFKA, aws_conn_id=CLUSTER_AWS, master=cluster.spark_master)


def test_dag_runs_on_the_spark_cluster_and_recovers_a_crashed_run(airflow, cluster_pipeline, cluster):
    client = AirflowClient(airflow.url, airflow.username, airflow.password)
    dag_id = cluster_pipeline.spec().dag_id
    client.wait_for_dag(dag_id)
    client.unpause(dag_id)

    # The Spark driver fails after its tasks left their transactions open, on the run task's first try
    # only: its retry submits to the cluster again, fences them and writes the same ranges, and the DAG
    # run succeeds. (Executor JVMs dying mid-produce on the cluster: tests/integration/test_cluster.py;
    # a crash recovered by the next DAG run, and a run that succeeds at once: test_pipeline_dag.py, on
    # one node: the scheduler's part does not depend on the topology, so this test pays two
    # spark-submits on the cluster, not four.)
    produce_orders(cluster_pipeline, 390)
    run_id, state = run_dag(client, dag_id, {"lockstep_failpoints": "job.before_prepared=raise",
                                             "lockstep_failpoints_tries": 1})
    assert state == "success", explain(client, dag_id, run_id)
    crashed_log = client.task_log(dag_id, run_id, "run", try_number=1)
    assert "failpoint job.before_prepared raised" in crashed_log
    assert f"spark-submit --master {cluster.spark_master}" in crashed_log
    retry_log = client.task_log(dag_id, run_id, "run", try_number=2)
    assert "not armed on try 2" in retry_log
    assert f"spark-submit --master {cluster.spark_master}" in retry_log
    latest = store(cluster_pipeline).latest_completed()
    assert latest is not None and latest.checkpoint_id == max(store(cluster_pipeline).checkpoint_ids())
    assert open_transactions(cluster_pipeline) == []
    report = verify(cluster_pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["covered_offsets"] == 390
