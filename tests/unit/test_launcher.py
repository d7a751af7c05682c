"""Where a checkpoint's Spark run goes: one rule for the CLI and the Airflow run task."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockstep.spark.target import connection_master, spark_target
from lockstep.spec import load_spec

SPEC = """
name: m
source: {topics: [in]}
transform: lockstep_examples.orders:enrich
sink: {topic: out, dead_letter_topic: dlq}
checkpoints: {store: s3://lockstep/p}
transactions: {id_prefix: tx}
"""


KAFKA = {"conn_type": "kafka", "host": None, "login": None, "password": None, "port": None,
         "extra": {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                   "sasl.username": "u", "sasl.password": "kafka-secret-1"}}
S3 = {"conn_type": "aws", "host": None, "login": "key", "password": "s3-secret-1", "port": None,
      "extra": {"endpoint_url": "http://s3:9000"}}


@pytest.fixture
def connections(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(KAFKA))
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(S3))


@pytest.fixture
def spec_file(tmp_path: Path):
    def write(master: str | None, mode: str | None = None):
        spark = {**({"master": master} if master else {}), **({"mode": mode} if mode else {})}
        text = SPEC + (f"spark: {json.dumps(spark)}\n" if spark else "")
        path = tmp_path / "m.yaml"
        path.write_text(text)
        return load_spec(path)
    return write


def test_the_spec_master_wins_over_the_connection(spec_file, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "spark://10.0.0.9:7077"}))
    assert spark_target(spec_file("local[2]")).address == "local[2]"


def test_submit_mode_without_a_spec_master_takes_the_spark_default_connections(spec_file, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "spark://h", "port": 7077}))
    assert spark_target(spec_file(None, mode="submit")).address == "spark://h:7077"


def test_submit_mode_with_no_master_anywhere_is_local_mode(spec_file, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    assert spark_target(spec_file(None, mode="submit")).address == "local[*]"


def test_a_spec_without_a_spark_section_runs_on_the_spark_connect_default_connection(spec_file, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[*]"}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT",
                       json.dumps({"conn_type": "spark_connect", "host": "sc://10.0.0.7", "port": 15002}))
    target = spark_target(spec_file(None))
    assert (target.mode, target.address, target.source) == ("connect", "sc://10.0.0.7:15002",
                                                            "connection spark_connect_default")


def test_connection_master_reads_host_and_port_like_the_spark_provider():
    assert connection_master("spark://127.0.0.1:7077", None) == "spark://127.0.0.1:7077"
    assert connection_master("spark://h", 7077) == "spark://h:7077"
    assert connection_master("yarn", None) == "yarn"
    assert connection_master(None, None) == "local[*]"


def test_the_job_gets_the_specs_connections_in_its_environment_not_its_command_line(spec_file, connections,
                                                                                      monkeypatch, tmp_path):
    """The CLI and the Airflow run task hand the job (which has no Airflow) the connections they
    resolved, in the form the job's connection lookup reads first."""
    from lockstep.steps import run as launcher

    out = tmp_path / "env.json"
    argv: list[list[str]] = []

    def command(*args):
        argv.append(["bash", "-c", f"printenv AIRFLOW_CONN_KAFKA_DEFAULT AIRFLOW_CONN_AWS_DEFAULT > {out}"])
        return argv[-1]

    monkeypatch.setattr(launcher, "submit_command", command)
    launcher.run_spark_job(spec_file("local[1]"), 7, env={"PATH": "/usr/bin:/bin"})
    kafka, s3 = (json.loads(line) for line in out.read_text().splitlines())
    assert (kafka, s3) == (KAFKA, S3)
    assert not any("secret" in a for a in argv[0])


def test_leaving_the_run_step_early_stops_spark_submit_and_its_children(spec_file, connections, monkeypatch):
    """spark-submit runs in its own session (for Airflow's on_kill), so a Ctrl-C would not reach it:
    an interrupted run step must stop the whole group itself."""
    import os
    import subprocess

    from lockstep.steps import run as launcher

    monkeypatch.setattr(launcher, "submit_command", lambda *a: ["bash", "-c", "sleep 60 & sleep 60; wait"])
    started: list[subprocess.Popen] = []

    def interrupted(run):
        started.append(run.proc)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        launcher.run_spark_job(spec_file("local[1]"), 7, env=dict(os.environ), on_start=interrupted)
    proc = started[0]
    assert proc.poll() is not None
    # Nothing of its group runs any more. The orphaned `sleep` was killed with the group, but only init reaps
    # it, on its own time: until then it is a zombie of the group (dead, its exit status not collected), which
    # is not what this test is about. So: every process of the group gone or a zombie, within a few seconds
    # for the kill to be delivered on a loaded machine.
    import time

    deadline = time.monotonic() + 10
    while _running_in_group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running_in_group(proc.pid) == []


def _running_in_group(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` that are not dead (neither zombie nor exiting)."""
    from lockstep_soak.kill import processes

    return [pid for pid, (state, _ppid, group) in processes().items() if group == pgid and state not in ("Z", "X")]


def test_a_run_that_dies_after_prepare_says_roll_forward_not_replay(spec_file, monkeypatch):
    """The job failure's way out (fence, replay) is wrong once the transactions are prepared: the
    run step's last word must be the roll forward, with the job's own cause."""
    from lockstep.errors import CheckpointError
    from lockstep.model.checkpoint import CheckpointClaim, CheckpointView, PreparedCheckpoint
    from lockstep.model.offsets import OffsetRange
    from lockstep.steps import run as launcher

    claim = CheckpointClaim("m", 3, "run", "2026-11-23T00:00:00+00:00", (OffsetRange("in", 0, 0, 5),), "checkpoint")
    views = iter([CheckpointView(claim), CheckpointView(claim, PreparedCheckpoint("m", 3, "t", (), 5, 5, 0, 1.0))])

    class Store:
        def view(self, checkpoint_id):
            return next(views)

    def died(*_a, **_k):
        raise launcher.job_failure(3, 86, None, "lockstep failpoint job.after_prepared: crashing the process", 31.0)

    monkeypatch.setattr(launcher, "run_spark_job", died)
    with pytest.raises(CheckpointError) as failed:
        launcher.run_checkpoint(spec_file(None, mode="submit"), 3, Store())
    message = str(failed.value)
    assert message.startswith("checkpoint 3: the Spark run failed after its transactions were prepared (it ended "
                              "with exit code 86")
    assert message.endswith("nothing is lost: the commit step, or the next run's plan, commits them (roll forward)")
    assert "replays its ranges" not in message


def test_a_connect_spark_default_connection_puts_the_run_on_that_server(spec_file, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "sc://10.0.0.5",
                                                                 "port": 15003}))
    target = spark_target(spec_file(None))
    assert (target.mode, target.address, target.source) == ("connect", "sc://10.0.0.5:15003", "connection spark_default")


def test_a_connect_run_failure_is_sorted_like_a_spark_submit_exit(spec_file, monkeypatch):
    """Connect mode runs the driver code in this process: a refused plan (AnalysisException) is
    terminal, anything else retried, and the cause is the error's, as the job's exit code says."""
    from pyspark.errors import AnalysisException

    from lockstep.errors import CheckpointError, TransientCheckpointError
    from lockstep.spark import connect as spark_connect
    from lockstep.spark.target import SparkTarget
    from lockstep.steps import run as launcher

    class Run:
        spark = object()

    class Session:
        def __enter__(self):
            return Run()

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(spark_connect, "checkpoint_session", lambda *a: Session())
    target = SparkTarget("connect", "sc://h:1", "spark.remote")
    for raised, expected in ((AnalysisException("[UNRESOLVED_COLUMN] `amount` cannot be resolved"), CheckpointError),
                             (RuntimeError("broker away"), TransientCheckpointError)):
        def job(*_a, raised=raised, **_k):
            raise raised
        monkeypatch.setattr(launcher, "run_checkpoint_job", job)
        with pytest.raises(expected) as caught:
            launcher.run_connect_job(spec_file(None), 4, store=None, target=target)
        assert "checkpoint 4" in str(caught.value) and str(raised).split("]")[-1].strip() in str(caught.value)


def test_a_connect_run_failure_masks_connection_secrets_in_its_traceback(spec_file, connections, monkeypatch, caplog):
    """The Connect run logs the job's traceback in this process; a password of a known connection
    that reaches an error message is masked there as in the cause."""
    import logging

    from lockstep.connections import get_connection
    from lockstep.errors import TransientCheckpointError
    from lockstep.spark import connect as spark_connect
    from lockstep.spark.target import SparkTarget
    from lockstep.steps import run as launcher

    get_connection("kafka_default")  # known, as the run's kafka_config would make it

    class Session:
        def __enter__(self):
            return type("Run", (), {"spark": object()})()

        def __exit__(self, *exc):
            return False

    def job(*_a, **_k):
        raise RuntimeError("SASL authentication failed for password kafka-secret-1")

    monkeypatch.setattr(spark_connect, "checkpoint_session", lambda *a: Session())
    monkeypatch.setattr(launcher, "run_checkpoint_job", job)
    with caplog.at_level(logging.ERROR, logger="lockstep.steps.run"), pytest.raises(TransientCheckpointError) as caught:
        launcher.run_connect_job(spec_file(None), 4, store=None, target=SparkTarget("connect", "sc://h:1", "spark.remote"))
    assert "SASL authentication failed" in caplog.text and "kafka-secret-1" not in caplog.text
    assert "kafka-secret-1" not in str(caught.value)


@pytest.mark.parametrize("line, noise", [
    ("WARNING: Using incubator modules: jdk.incubator.vector", True),
    ("\r[Stage 0:>                                                          (0 + 2) / 2]", True),
    ("checkpoint 3: prepared with 2 transactions", False),
    ("26/11/25 10:00:00 WARN TaskSetManager: Lost task 0.0", False),
])
def test_the_jvms_notices_and_progress_bars_stay_out_of_the_task_log(line, noise):
    from lockstep.steps.run import is_noise

    assert is_noise(line) is noise
