"""The engine on the cluster topology (``lockstep dev up --cluster``): 3 Kafka brokers with
replication factor 3 and min ISR 2, a Spark standalone master with 2 workers whose environment
knows nothing of this repository, the durable S3 server. The real CLI runs every checkpoint;
the Spark master comes from the ``spark_default`` connection, as in a deployment.
"""
from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from lockstep.model.checkpoint import CheckpointStatus

from ..support.data import produce_orders, read_committed
from ..support.pipelines import PipelineUnderTest
from .engine_helpers import LOCKSTEP, make_pipeline, open_transactions, run, store, verify

pytestmark = pytest.mark.cluster


def cluster_pipeline(tmp_path: Path, cluster, unique: str, **kwargs) -> PipelineUnderTest:
    return make_pipeline(tmp_path, cluster.kafka.bootstrap, unique, replication=3, mode="submit", **kwargs)


def assert_exactly_once(pipeline: PipelineUnderTest, covered: int) -> None:
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["covered_offsets"] == covered, report
    assert open_transactions(pipeline) == []


def user_package(tmp_path: Path, unique: str, delay_s: float = 0.0) -> tuple[str, Path]:
    """A transform package outside ``include/``, importable by the driver only (PYTHONPATH).

    Its UDF calls a function of another module of the package, so the executors' Python workers
    must import that module: they can only if Spark shipped the package to them.
    """
    name = f"user_udf_{unique}"
    package = tmp_path / "user_code" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "labels.py").write_text(textwrap.dedent(f"""
        import time

        def label(value):
            time.sleep({delay_s})
            return "cluster:" + value.decode("utf-8", "replace")
        """))
    (package / "transform.py").write_text(textwrap.dedent(f"""
        from pyspark.sql import functions as F, types as T

        from {name}.labels import label

        def tag(df):
            return df.withColumn("value", F.udf(label, T.StringType())(F.col("value")))
        """))
    return f"{name}.transform:tag", tmp_path / "user_code"


def test_python_udf_of_the_users_own_module_runs_on_the_workers(tmp_path, on_cluster, unique, monkeypatch):
    transform, code_dir = user_package(tmp_path, unique)
    pipeline = cluster_pipeline(tmp_path, on_cluster, unique, partitions=4, transform=transform)
    monkeypatch.setenv("PYTHONPATH", str(code_dir))  # the driver's (and verify's) environment only
    produce_orders(pipeline, 400)

    result = run(pipeline, "--checkpoints", "2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"--master {on_cluster.spark_master}" in result.stderr + result.stdout
    assert f"shipped user_udf_{unique}.zip" in result.stderr + result.stdout
    assert_exactly_once(pipeline, 400)
    values = {m.value() for m in read_committed(pipeline.bootstrap, pipeline.sink)}
    assert len(values) == 400 and all(v.startswith(b"cluster:") for v in values)


def executor_pids(cluster) -> list[int]:
    """Executor JVMs launched by the cluster's workers (children of the worker processes)."""
    workers = {pid for name, pid in cluster.state.pids.items() if name.startswith("spark-worker")}
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[-1].split()[1])
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
            except (OSError, ValueError, IndexError):
                continue
            if ppid in workers and "CoarseGrainedExecutorBackend" in cmd:
                pids.append(int(entry.name))
    return pids


def ongoing(pipeline: PipelineUnderTest) -> list[str]:
    from lockstep.kafka.committer import TransactionCommitter
    from lockstep.model.transactions import TransactionState

    with TransactionCommitter(pipeline.bootstrap) as committer:
        return committer.list_open(f"{pipeline.prefix}-", states=(TransactionState.ONGOING,))


def run_killing_an_executor(pipeline: PipelineUnderTest, cluster) -> tuple[int, str]:
    """`lockstep run` of one checkpoint; once a task's transaction holds records on the broker, one
    executor JVM is SIGKILLed. Returns the CLI's exit code and output."""
    proc = subprocess.Popen([LOCKSTEP, "run", "--spec", str(pipeline.spec_path)], env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while not ongoing(pipeline):
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "no transaction was ever open"
            time.sleep(0.2)
        victims = executor_pids(cluster)
        assert victims, "no executor JVM found"
        os.kill(victims[0], signal.SIGKILL)
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, output


def test_an_executor_killed_while_producing_is_retried_on_the_other_worker(tmp_path, on_cluster, unique, monkeypatch):
    # A transform slow enough (5 ms a record) that the tasks are still producing when one dies.
    transform, code_dir = user_package(tmp_path, unique, delay_s=0.005)
    pipeline = cluster_pipeline(tmp_path, on_cluster, unique, partitions=2, transform=transform)
    monkeypatch.setenv("PYTHONPATH", str(code_dir))
    produce_orders(pipeline, 3000)

    returncode, output = run_killing_an_executor(pipeline, on_cluster)
    assert returncode == 0, output[-4000:]
    assert "Lost executor" in output or "ExecutorLostFailure" in output, output[-4000:]

    view = store(pipeline).latest_completed()
    assert view.checkpoint_id == 1
    # The retried attempt initialised the same transactional id again: a higher epoch, which
    # fenced (aborted) the killed attempt's open transaction.
    assert max(t.epoch for t in view.prepared.transactions) >= 1, view.prepared.transactions
    assert_exactly_once(pipeline, 3000)


# No crash-then-recover test here: an executor JVM dying mid-produce on the cluster is the two
# killed-executor tests (submit and connect: the task retried on the other worker, the killed
# attempt fenced); a crash the next run recovers from is recovered by the plan and the commit, in the
# CLI's own process whatever the topology: test_failpoints.py crashes them at every failpoint on one
# node, and the short soak kills them on this cluster at random moments.


def coordinator_of(bootstrap: str, transactional_id: str) -> int:
    """The broker leading the transaction coordinator of ``transactional_id`` (DescribeTransactions)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return admin.describe_transactions([transactional_id])[transactional_id].coordinator_id
    finally:
        admin.close()


def test_commit_survives_the_coordinator_broker_being_killed_after_prepare(tmp_path, on_cluster, unique):
    from lockstep.steps.coordinator import Pipeline, commit, plan
    from lockstep.steps.run import run_checkpoint

    pipeline = cluster_pipeline(tmp_path, on_cluster, unique, partitions=3)
    produce_orders(pipeline, 300)
    spec = pipeline.spec()
    p = Pipeline.open(spec)
    claim = plan(p, run_id="cluster-coordinator-test").claim
    run_checkpoint(spec, claim.checkpoint_id, p.store)
    prepared = p.store.view(claim.checkpoint_id).prepared
    assert prepared is not None and prepared.transactions

    victim = coordinator_of(pipeline.bootstrap, prepared.transactions[0].transactional_id)
    service = f"kafka-{victim}"
    on_cluster.stop(service, kill=True)  # SIGKILL, like a host that dies
    try:
        outcome = commit(p, claim.checkpoint_id)
        assert outcome.status is CheckpointStatus.COMPLETED, outcome
    finally:
        on_cluster.start_kafka_node(on_cluster.kafka_node(service))
        from lockstep_dev import kafka_nodes as kafka_svc
        from lockstep_dev.procs import wait_until

        wait_until(lambda: kafka_svc.is_ready(on_cluster.kafka.bootstrap, 3), "the killed broker back", 120)
    assert_exactly_once(pipeline, 300)


@pytest.fixture
def cluster_connect(on_cluster):
    """The cluster's Spark Connect server (its executors on the standalone workers), for one test:
    while it runs it holds the workers' cores, which the spark-submit tests need."""
    on_cluster.start("spark-connect")
    try:
        yield on_cluster.spark_connect.url
    finally:
        on_cluster.stop("spark-connect")


def test_connect_mode_an_executor_killed_while_producing_is_retried_on_the_other_worker(
        tmp_path, on_cluster, cluster_connect, unique, monkeypatch):
    """Connect mode on the cluster: the server's executors run on the workers. One dies mid-produce;
    Spark retries its task on the other worker under the same transactional id, which fences the
    killed attempt's transaction; the user's package reached the workers as a session artifact.
    Six source partitions go through two transactions: sink.parallelism auto is the cluster's
    executor cores (one on each worker)."""
    transform, code_dir = user_package(tmp_path, unique, delay_s=0.005)
    pipeline = make_pipeline(tmp_path, on_cluster.kafka.bootstrap, unique, replication=3, partitions=6,
                             transform=transform, remote=cluster_connect)
    monkeypatch.setenv("PYTHONPATH", str(code_dir))
    produce_orders(pipeline, 3000)

    returncode, output = run_killing_an_executor(pipeline, on_cluster)
    assert returncode == 0, output[-4000:]
    assert "Spark Connect session" in output and "spark-submit" not in output, output[-4000:]
    assert f"shipped user_udf_{unique}.zip" in output

    view = store(pipeline).latest_completed()
    assert view.checkpoint_id == 1
    assert max(t.epoch for t in view.prepared.transactions) >= 1, view.prepared.transactions
    assert len(view.prepared.transactions) == 2, view.prepared.transactions
    assert sorted(tp.partition for t in view.prepared.transactions for tp in t.sources) == list(range(6))
    assert_exactly_once(pipeline, 3000)
