"""A pipeline DAG on the cluster topology: the scheduler's run task submits to the Spark
standalone master named in the spec, over 3 brokers (RF 3, min ISR 2) and the durable S3
server; a crash in the Spark run is recovered by the next DAG run, exactly once."""
from __future__ import annotations

import pytest

from lockstep.model.checkpoint import CheckpointStatus
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

    # The Spark driver fails after its tasks left their transactions open (both attempts of the run
    # task): the DAG run fails, and the next one submits to the cluster again, fences them and replays
    # the same ranges. (Executor JVMs dying mid-produce on the cluster: tests/integration/test_cluster.py;
    # a DAG run that succeeds at once: test_pipeline_dag.py, on one node: the scheduler's part does not
    # depend on the topology, so this test pays three spark-submits on the cluster, not four.)
    produce_orders(cluster_pipeline, 390)
    crashed_id, state = run_dag(client, dag_id, {"lockstep_failpoints": "job.before_prepared=raise"})
    assert state == "failed"
    crashed_log = client.task_log(dag_id, crashed_id, "run")
    assert "failpoint job.before_prepared raised" in crashed_log
    assert f"spark-submit --master {cluster.spark_master}" in crashed_log
    crashed = store(cluster_pipeline).view(max(store(cluster_pipeline).checkpoint_ids()))
    assert crashed.status is CheckpointStatus.CLAIMED

    next_id, state = run_dag(client, dag_id)
    assert state == "success", explain(client, dag_id, next_id)
    assert f"spark-submit --master {cluster.spark_master}" in client.task_log(dag_id, next_id, "run")
    assert store(cluster_pipeline).view(crashed.checkpoint_id).status is CheckpointStatus.ABORTED
    assert open_transactions(cluster_pipeline) == []
    report = verify(cluster_pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["covered_offsets"] == 390
