"""Checkpoints in connect mode: each run is a session on the platform's long-lived Spark Connect
server, with the same claim, transactions, prepared metadata and failure semantics as a
spark-submit run — a killed client and a killed server included."""
from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from lockstep.errors import TransientCheckpointError
from lockstep.model.checkpoint import CheckpointStatus

from ..support.data import produce_orders
from .engine_helpers import make_pipeline, open_transactions, run, store, verify

SLOW = "lockstep_examples.slow:enrich_slowly"


def exactly_once(pipeline, records: int) -> dict:
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["expected_outputs"] == report["actual_outputs"] == records
    return report


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_checkpoints_run_in_connect_sessions_exactly_once(tmp_path, bootstrap, unique, spark_connect, writer):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=200, remote=spark_connect,
                             writer=writer)
    produce_orders(pipeline, 500)

    result = run(pipeline, "--checkpoints", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    sessions = re.findall(r"checkpoint (\d+): Spark Connect session (\S+) on", output)
    assert [c for c, _ in sessions] == ["1", "2", "3"], output[-3000:]
    # one warm session for the three (`lockstep.spark.connect`): the server's generated code is compiled once
    assert len({s for _, s in sessions}) == 1, sessions
    # the transform's package went to the session once; the next two found it there, unchanged
    assert sum("(in the session already)" in line for line in output.splitlines()) == 2, output[-3000:]
    assert "spark-submit" not in output
    views = [store(pipeline).view(i) for i in (1, 2, 3)]
    assert [v.status for v in views] == [CheckpointStatus.COMPLETED] * 3
    assert sum(t.records + t.dead_letters for v in views for t in v.prepared.transactions) == 500
    exactly_once(pipeline, 500)
    assert open_transactions(pipeline) == []


def _planned(pipeline) -> int:
    """Plan one checkpoint under the run id of a CLI process that has exited, so that a later
    `lockstep run` may recover it (a live owner's checkpoint is left alone)."""
    import socket

    from lockstep.rules.run_ownership import cli_run_id
    from lockstep.steps.coordinator import Pipeline, plan

    owner = cli_run_id(socket.gethostname(), _exited_pid(), "test")
    return plan(Pipeline.open(pipeline.spec()), run_id=owner).claim.checkpoint_id


def _exited_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _run_step_in_a_process(pipeline, checkpoint_id: int) -> subprocess.Popen:
    """The run step of one checkpoint as the Airflow run task does it, in a process of its own."""
    code = ("import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout); "
            "from lockstep.steps.client_factory import checkpoint_store; from lockstep.steps.run import run_checkpoint; "
            "from lockstep.spec import load_spec; spec = load_spec(sys.argv[1]); "
            "run_checkpoint(spec, int(sys.argv[2]), checkpoint_store(spec))")
    return subprocess.Popen([sys.executable, "-c", code, str(pipeline.spec_path), str(checkpoint_id)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ))


def _wait_for_line(proc: subprocess.Popen, needle: str, timeout_s: float = 120) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"no line with {needle!r}; output:\n{''.join(seen)[-3000:]}")


def test_a_killed_client_is_interrupted_and_fenced_by_the_next_attempt(tmp_path, bootstrap, unique, spark_connect,
                                                                         caplog):
    """The run task's process is SIGKILLed while its Spark job writes. The server keeps running the
    job; the retry of the run step joins the killed attempt's session, interrupts it, writes the
    checkpoint again under the same transactional ids (fencing the killed attempt's), and the
    commit leaves exactly once."""
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, remote=spark_connect, transform=SLOW)
    produce_orders(pipeline, 400)
    cid = _planned(pipeline)

    killed = _run_step_in_a_process(pipeline, cid)
    seen = _wait_for_line(killed, "reading 2 ranges")
    time.sleep(2)  # its tasks are producing now (about 20 ms per record)
    assert killed.poll() is None, "".join(seen) + killed.stdout.read()
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    assert store(pipeline).view(cid).status is CheckpointStatus.CLAIMED

    from lockstep.steps.coordinator import Pipeline, commit
    from lockstep.steps.run import run_checkpoint

    with caplog.at_level(logging.INFO, logger="lockstep.spark.connect"):
        run_checkpoint(pipeline.spec(), cid, store(pipeline))
    assert "interrupted 1 operation(s) an earlier attempt left running" in caplog.text
    assert store(pipeline).view(cid).status is CheckpointStatus.PREPARED
    commit(Pipeline.open(pipeline.spec()), cid)
    assert store(pipeline).view(cid).status is CheckpointStatus.COMPLETED
    exactly_once(pipeline, 400)
    assert open_transactions(pipeline) == []


def test_a_killed_server_fails_the_run_as_retryable_and_the_next_run_recovers(tmp_path, bootstrap, unique,
                                                                              spark_connect, platform):
    """The Connect server dies while the tasks write: the run step fails as retryable, naming the
    checkpoint; with the server back, the next run fences what the dead tasks left open and
    replays the ranges: exactly once."""
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, remote=spark_connect, transform=SLOW)
    produce_orders(pipeline, 500)
    cid = _planned(pipeline)

    from lockstep.steps.run import run_checkpoint

    writing = threading.Event()

    class Writing(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "reading 2 ranges" in record.getMessage():
                writing.set()

    def kill_when_writing() -> None:
        writing.wait(120)
        time.sleep(1.5)  # the tasks are producing now (about 20 ms per record, 5 s in all)
        platform.stop("spark-connect", kill=True)

    handler = Writing()
    logging.getLogger("lockstep.spark.job").addHandler(handler)
    logging.getLogger("lockstep.spark.job").setLevel(logging.INFO)

    killer = threading.Thread(target=kill_when_writing)
    killer.start()
    try:
        with pytest.raises(TransientCheckpointError) as failed:
            run_checkpoint(pipeline.spec(), cid, store(pipeline))
    finally:
        writing.set()
        killer.join()
        logging.getLogger("lockstep.spark.job").removeHandler(handler)
        platform.start("spark-connect")
    assert f"checkpoint {cid}" in str(failed.value) and "retry" in str(failed.value)
    assert store(pipeline).view(cid).status is CheckpointStatus.CLAIMED

    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    assert store(pipeline).view(cid).status is CheckpointStatus.ABORTED
    exactly_once(pipeline, 500)
    assert open_transactions(pipeline) == []


def test_an_unreachable_server_fails_the_run_naming_its_address_and_connection(tmp_path, bootstrap, unique,
                                                                              monkeypatch):
    """Connect is the default mode: a run whose spark_connect_default points at no server ends, after
    the client's bounded retries, with one line naming the address, the connection and the way
    out, not with gRPC's stack; nothing was committed and the next run can take over."""
    from lockstep_dev import procs

    port = procs.free_port()
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT",
                       json.dumps({"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": port}))
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=1)
    produce_orders(pipeline, 10)

    result = run(pipeline)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert f"the Spark Connect server at sc://127.0.0.1:{port} (from connection spark_connect_default) did not " \
           "answer" in last, result.stderr[-3000:]
    assert "checkpoint 1" in last and "point the spark_connect_default connection at one that does" in last
    assert "Traceback" not in result.stderr and "grpc._channel" not in result.stderr, result.stderr[-3000:]
    assert store(pipeline).view(1).status is CheckpointStatus.CLAIMED


def test_a_runs_kept_results_stay_in_its_own_session_while_another_session_is_open(spark_connect):
    """pyspark binds a local checkpoint's result to the thread's active session, and a session made
    while another is open does not become the active one: the kept result then named a relation of
    another session ("No DataFrame with id ... is found in the session", a state function's run in CI
    after an earlier session in the same process). The run's session is the active one while it runs."""
    from lockstep.spark.connect import checkpoint_session, connect_mode, new_session

    with connect_mode():
        other = new_session(spark_connect)  # left open, as a verify or a validate in the process leaves it
        try:
            with checkpoint_session(spark_connect, "kept-results", 1) as run:
                kept = run.spark.range(5).localCheckpoint(eager=True)
                assert [f.name for f in kept.schema.fields] == ["id"]
                assert kept.filter("id > 1").count() == 3
            assert other.range(2).count() == 2, "the other session is untouched, and still works"
        finally:
            other.stop()


def test_the_servers_default_parallelism_read_from_a_plan_is_the_one_a_job_counts(spark_connect):
    """`kafka_reader.default_parallelism` reads the range's splits from its plan (no job); a real server's plan
    says what the job over the range counts."""
    from lockstep.spark.connect import connect_mode, new_session
    from lockstep.spark.kafka_reader import default_parallelism

    with connect_mode():
        spark = new_session(spark_connect)
        try:
            counted = spark.range(0, 1 << 16).selectExpr("spark_partition_id() AS p").selectExpr("max(p) AS last")
            assert default_parallelism(spark) == counted.first()["last"] + 1
            assert "splits=" in spark.range(0, 1 << 16)._explain_string(mode="simple")  # not the job's fallback
        finally:
            spark.stop()


def _consumer_groups(bootstrap: str, attempts: int = 3) -> list[str]:
    """The broker's consumer groups, asked again with a new client when the listing does not answer in time
    (the request's own timeout, or the wait for its result): once, on three workers starting their platforms
    together, one request went unanswered for the 30 s it was given."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    for attempt in range(attempts):
        try:
            listed = AdminClient({"bootstrap.servers": bootstrap}).list_consumer_groups(request_timeout=20)
            return [g.group_id for g in listed.result(timeout=30).valid]
        except (FutureTimeout, KafkaException) as exc:
            error = exc.args[0] if exc.args else None
            timed_out = isinstance(exc, FutureTimeout) or (isinstance(error, KafkaError)
                                                           and error.code() == KafkaError._TIMED_OUT)
            if not timed_out or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def test_a_servers_warm_up_checkpoints_run_the_checkpoint_path_and_leave_nothing_behind(platform, spark_connect):
    """`lockstep_dev.warm_checkpoints`, which a platform asked to (`Platform(warm_checkpoints=True)`, the
    keyed-state benchmark's restore) runs on a Connect server it starts: real checkpoints of each kind,
    the dedup's second reading its first's state back, then its topics, stores and consumer groups gone."""
    from confluent_kafka.admin import AdminClient

    from lockstep.spark.conf import job_environment
    from lockstep_dev import s3, warm_checkpoints

    records = 2_000  # the platform's default (`warm_checkpoints.RECORDS`) warms the JIT up; the path is the same
    done = warm_checkpoints.run(spark_connect, platform.state.bucket,  # one round: each is the same, new pipelines
                                job_environment({**os.environ, **platform.client_env()}), records=records, rounds=1)
    half = records // 2
    assert {kind: run["records"] for kind, run in done.items()} == {
        "stateless": records, "dedup-1": half, "dedup-2": half, "windows": records}
    # The second dedup checkpoint's repeats (half of its records) touched keys the first one's state holds.
    assert done["dedup-1"]["rows_loaded"] == 0 and done["dedup-2"]["rows_loaded"] == half // 2, done
    topics = AdminClient({"bootstrap.servers": platform.kafka.bootstrap}).list_topics(timeout=30).topics
    assert not [t for t in topics if t.startswith("lockstep-warm-up-")]
    assert not [g for g in _consumer_groups(platform.kafka.bootstrap) if g.startswith("lockstep-lockstep-warm-up-")]
    listed = s3.client(platform.s3).list_objects_v2(Bucket=platform.state.bucket, Prefix="lockstep-warm-up-")
    assert not listed.get("Contents"), listed.get("Contents")
