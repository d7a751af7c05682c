"""The JVM writer's data source (``lockstep-kafka``) behaves the same under a Spark Connect session
as under a classic one: the same records, headers and dead letters reach Kafka, and the tasks hand
back the same committables (the output contract's), read back through the DataFrame API alone.

Both sides write the same generated rows (2 Spark partitions) with `lockstep.spark.jvm_writer.write_with_jvm`
into topics of their own; the test commits the prepared transactions as the commit step would and
compares what a read_committed consumer sees.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep.kafka.committer import TransactionCommitter
from lockstep.model.checkpoint import PreparedTransaction
from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION, parse_task_result

from ..support.data import read_committed
from ..support.topics import create_topics

ROWS = 200
CHECKPOINT = 7
WRITE_SCRIPT = Path(__file__).with_name("jvm_sink_write.py")


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    """A Spark Connect server (local[2]) as the dev platform starts one (`lockstep_dev.spark_connect`):
    Lockstep's spark.jars and safety settings, on a free port."""
    from lockstep_dev import procs, spark_connect

    config = spark_connect.ConnectConfig(port=procs.free_port(), data_dir=tmp_path_factory.mktemp("connect"),
                                         master="local[2]")
    log = config.data_dir / "server.log"
    pid = spark_connect.start(config, log, os.environ)
    try:
        procs.wait_until(lambda: spark_connect.is_ready(config), "the Spark Connect server", timeout=180,
                         alive=lambda: procs.is_running(pid, spark_connect.MARKER), log_file=log)
        yield config.url
    finally:
        procs.stop_group(pid, spark_connect.MARKER)


def write(kind: str, bootstrap: str, prefix: str, sink: str, dead: str) -> list[str]:
    settings = {"bootstrap": bootstrap, "producer_config": {}, "id_prefix": prefix, "pipeline": "dsv2", "checkpoint_id": CHECKPOINT,
                "timeout_ms": 120_000, "sink_topic": sink, "dead_letter_topic": dead}
    result = subprocess.run([sys.executable, str(WRITE_SCRIPT), kind, json.dumps(settings), str(ROWS)],
                            capture_output=True, text=True, timeout=600, env={**os.environ})
    assert result.returncode == 0, f"{kind}: {result.stderr[-3000:]}"
    return [line for line in result.stdout.splitlines() if line.startswith("{")]


def commit_all(bootstrap: str, results: list[str]) -> list[dict]:
    """Commits every prepared transaction, as the commit step does; returns the committables."""
    committables = []
    with TransactionCommitter(bootstrap) as committer:
        for line in results:
            _, _, committable = parse_task_result(line)
            if committable is not None:
                t = PreparedTransaction.from_json(committable, "test")
                committer.commit(t.transactional_id, t.producer_id, t.epoch)
                committables.append(json.loads(json.dumps(committable)))
    return committables


def records(bootstrap: str, topic: str) -> dict[tuple[int, int], tuple]:
    out = {}
    for m in read_committed(bootstrap, topic):
        headers = dict(m.headers())
        out[(int(headers[SOURCE_PARTITION]), int(headers[SOURCE_OFFSET]))] = (m.key(), m.value(), m.headers())
    return out


def comparable(committable: dict, prefix: str, sink: str, dead: str) -> dict:
    """A committable without what differs by nature between two writes (ids, epochs, clock),
    its topics named by role."""
    assert committable["transactional_id"] == f"{prefix}-{CHECKPOINT}-{committable['task_index']}"
    kept = {k: v for k, v in committable.items() if k not in ("transactional_id", "producer_id", "epoch",
                                                                 "opened_at_ms")}
    kept["partitions"] = sorted(p.replace(sink + ":", "SINK:").replace(dead + ":", "DEAD:")
                                for p in committable["partitions"])
    return kept


def test_a_connect_session_writes_what_a_classic_session_writes(connect_url, bootstrap, unique):
    written = {}
    for kind, url in (("classic", "classic"), ("connect", connect_url)):
        prefix, sink, dead = f"dsv2-{kind}-{unique}", f"dsv2-{kind}-{unique}-out", f"dsv2-{kind}-{unique}-dlq"
        create_topics(bootstrap, {sink: 3, dead: 1})
        results = write(url, bootstrap, prefix, sink, dead)
        assert [parse_task_result(r)[0] for r in results] == [0, 1], results
        committables = commit_all(bootstrap, results)
        written[kind] = (sorted((comparable(c, prefix, sink, dead) for c in committables),
                                key=lambda c: c["task_index"]),
                         records(bootstrap, sink), records(bootstrap, dead))

    classic, connect = written["classic"], written["connect"]
    assert len(classic[0]) == 2 and sum(c["records"] + c["dead_letters"] for c in classic[0]) == ROWS
    assert connect[0] == classic[0]
    assert len(classic[1]) == ROWS - ROWS // 10 and len(classic[2]) == ROWS // 10
    assert connect[1] == classic[1]
    assert connect[2] == classic[2]


def test_a_session_without_the_writer_jar_is_told_to_run_make_setup(bootstrap, unique):
    settings = {"bootstrap": bootstrap, "producer_config": {}, "id_prefix": f"dsv2-nojar-{unique}", "pipeline": "dsv2",
                "checkpoint_id": CHECKPOINT, "timeout_ms": 60_000, "sink_topic": "unused", "dead_letter_topic": "unused"}
    result = subprocess.run([sys.executable, str(WRITE_SCRIPT), "classic-without-jar", json.dumps(settings), "10"],
                            capture_output=True, text=True, timeout=600, env={**os.environ})
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("lockstep.errors.TerminalError: Lockstep's JVM writer (data source lockstep-kafka) is not on "
                           "Spark's classpath"), last
    assert "make setup" in last and "spark.jars" in last, last
