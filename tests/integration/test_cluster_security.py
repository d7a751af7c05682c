"""A pipeline on a SASL_SSL cluster, end to end: the cluster topology's secure listeners
(SCRAM-SHA-512 over TLS, a CA of its own), reached through the ``kafka_secure`` connection only.

Plan (confluent-kafka), the Spark source and the JVM writer on the standalone workers (Java
kafka-clients) and the commit (kafka-python, plus confluent-kafka for fencing) each get the
connection in their own dialect from ``lockstep.kafka.client_configs``. The connection names only the
secure ports, so a client given the wrong dialect could not have talked to the brokers at all.
Afterwards the SCRAM password must appear nowhere the run leaves text behind.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from ..support.data import order
from ..support.topics import create_topics
from .engine_helpers import LOCKSTEP

pytestmark = pytest.mark.cluster

SECURE, WRONG = "kafka_secure", "kafka_wrong_password"
RECORDS, PARTITIONS = 300, 3


def secure_topics(extras: dict, unique: str) -> tuple[str, str, str]:
    """Source, sink and dead-letter topics, replication factor 3, created through the SASL_SSL listener."""
    names = (f"sec-in-{unique}", f"sec-out-{unique}", f"sec-dlq-{unique}")
    create_topics(extras, {names[0]: PARTITIONS, names[1]: PARTITIONS, names[2]: 1}, replication=3)
    return names


def produce(extras: dict, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({**extras, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, order(i), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def write_spec(path: Path, name: str, conn_id: str, topics: tuple[str, str, str], unique: str, master: str,
               event_dir: Path) -> Path:
    source, sink, dlq = topics
    path.write_text(yaml.safe_dump({
        "name": name,
        "source": {"topics": [source], "kafka_conn_id": conn_id, "auto_offset_reset": "earliest"},
        "transform": "lockstep_examples.orders:enrich",
        "sink": {"topic": sink, "dead_letter_topic": dlq, "kafka_conn_id": conn_id, "writer": "jvm"},
        "checkpoints": {"store": f"s3://lockstep/secure/{unique}/{name}", "max_records": 100_000, "retain": 10},
        "transactions": {"id_prefix": f"{name}-tx", "timeout_ms": 900_000},
        # Event logs on (uncompressed), so that what Spark records about the run can be searched too.
        "spark": {"master": master, "conf": {"spark.eventLog.enabled": True, "spark.eventLog.dir": str(event_dir),
                                             "spark.eventLog.compress": False}},
    }))
    return path


def lockstep(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LOCKSTEP_FAILPOINTS"}
    return subprocess.run([LOCKSTEP, *args], env=env, capture_output=True, text=True, timeout=timeout)


def failed_authentications(cluster) -> int:
    return sum(cluster.log_file(f"kafka-{n.node_id}").read_text(errors="replace").count("Failed authentication with")
               for n in cluster.kafka.nodes)


def files_containing(root: Path, secret: bytes, skip: tuple[Path, ...] = ()) -> tuple[list[str], int]:
    """Files under ``root`` (but not under ``skip``) whose bytes contain ``secret``; and how many were read."""
    found, read = [], 0
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink() or any(path.is_relative_to(s) for s in skip):
            continue
        read += 1
        if secret in path.read_bytes():
            found.append(str(path))
    return found, read


def test_a_pipeline_runs_over_sasl_ssl_and_its_password_is_written_nowhere(tmp_path, on_cluster, unique,
                                                                          monkeypatch):
    cluster = on_cluster
    assert f"AIRFLOW_CONN_{SECURE.upper()}" in os.environ, "the cluster has no kafka_secure connection"
    extras = json.loads(os.environ[f"AIRFLOW_CONN_{SECURE.upper()}"])["extra"]
    password = cluster.security.password()
    assert extras["security.protocol"] == "SASL_SSL" and extras["sasl.password"] == password
    assert extras["bootstrap.servers"] == cluster.kafka.secure_bootstrap != cluster.kafka.bootstrap
    event_dir = cluster.state_dir / "spark" / "events"
    event_dir.mkdir(parents=True, exist_ok=True)

    topics = secure_topics(extras, unique)
    produce(extras, topics[0], RECORDS)

    # The secure listener really authenticates: a wrong password is refused at once, with a clear error.
    monkeypatch.setenv(f"AIRFLOW_CONN_{WRONG.upper()}",
                       json.dumps({"conn_type": "kafka", "extra": {**extras, "sasl.password": "not-the-password"}}))
    wrong_spec = write_spec(tmp_path / "wrong.yaml", f"wrong-{unique}", WRONG, topics, unique, cluster.spark_master,
                            event_dir)
    refusals_before = failed_authentications(cluster)
    started = time.monotonic()
    refused = lockstep("run", "--spec", str(wrong_spec), "--checkpoints", "1", timeout=120)
    elapsed = time.monotonic() - started
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-3000:]
    assert f"lockstep: Kafka connection '{WRONG}': the broker rejected its credentials" in refused.stderr
    assert "SCRAM-SHA-512" in refused.stderr and "Traceback" not in refused.stderr
    assert elapsed < 20, f"a refused password took {elapsed:.0f} s to report"
    assert failed_authentications(cluster) > refusals_before  # the brokers' log: SASL on that listener

    spec = write_spec(tmp_path / "secure.yaml", f"secure-{unique}", SECURE, topics, unique, cluster.spark_master,
                      event_dir)
    run = lockstep("run", "--spec", str(spec), "--checkpoints", "1")
    output = run.stdout + run.stderr
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert f"--master {cluster.spark_master}" in output  # the standalone workers, not local mode
    assert "checkpoint 1 completed" in output and f"{RECORDS} in" in output, output[-3000:]
    assert "spark: " in output  # the driver's output, captured by the CLI

    verify = lockstep("verify", "--spec", str(spec), "--json")
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-3000:]
    report = json.loads(verify.stdout)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["covered_offsets"] == RECORDS and report["actual_outputs"] == RECORDS, report

    from lockstep.spec import load_spec
    from lockstep.steps.client_factory import s3_client, transaction_committer

    loaded = load_spec(spec)
    with transaction_committer(loaded) as committer:  # kafka-python over SASL_SSL
        assert committer.list_open(f"{loaded.transactions.id_prefix}-") == []

    # ---- the password, nowhere ----------------------------------------------------------------
    secret = password.encode()
    leaks = [name for name, text in (("lockstep run", output), ("lockstep verify", verify.stdout + verify.stderr),
                                     ("refused run", refused.stdout + refused.stderr)) if password in text]
    s3 = s3_client(loaded.checkpoints.aws_conn_id)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="lockstep")
            for o in page.get("Contents", [])]  # the whole bucket, not only this pipeline's store
    assert any(k.startswith(f"secure/{unique}/secure-{unique}/") for k in keys), keys
    leaks += [f"s3://lockstep/{k}" for k in keys if secret in s3.get_object(Bucket="lockstep", Key=k)["Body"].read()]
    # Every file the platform wrote: service logs, Spark work dirs (executor stdout/stderr), event logs,
    # broker configs. Not the secret's own file, nor the brokers' data (records and metadata log).
    skip = (cluster.security.secrets_dir, *(n.data_dir / "logs" for n in cluster.kafka.nodes))
    found, read = files_containing(cluster.state_dir, secret, skip)
    leaks += found
    assert not leaks, f"the SCRAM password appears in: {leaks}"
    # ...and the search was not vacuous: it read the logs, the executors' output and an event log.
    assert read > 10
    event_logs = [p for p in event_dir.rglob("*") if p.is_file() and b"SparkListenerApplicationStart" in p.read_bytes()]
    assert event_logs, "Spark wrote no (plain text) event log"
    assert list((cluster.state_dir / "spark").glob("worker-*/app-*/*/stderr")), "no executor output found"
    assert list((cluster.state_dir / "logs").glob("kafka-*.log"))
