"""Shared helpers for engine tests: a throwaway pipeline on the session platform,
input data, the real CLI as a subprocess, and broker-side checks."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

LOCKSTEP = str(Path(sys.executable).parent / "lockstep")
MALFORMED_EVERY = 10  # every 10th input record is not valid JSON


@dataclass
class PipelineUnderTest:
    name: str
    spec_path: Path
    bootstrap: str
    source: str
    sink: str
    dead_letters: str
    prefix: str

    def spec(self):
        from lockstep.spec import load_spec

        return load_spec(self.spec_path)

    def rewrite(self, **changes: dict) -> None:
        """Edit sections of the spec file (e.g. raise the transaction timeout)."""
        doc = yaml.safe_load(self.spec_path.read_text())
        for section, values in changes.items():
            doc[section].update(values)
        self.spec_path.write_text(yaml.safe_dump(doc))


def make_pipeline(tmp_path: Path, bootstrap: str, unique: str, partitions: int = 4,
                  max_records: int = 100_000, timeout_ms: int = 900_000, transform: str = "lockstep_examples.orders:enrich",
                  margin_ms: int = 60_000, writer: str | None = None, replication: int = 1,
                  master: str | None = "local[2]") -> PipelineUnderTest:
    """A pipeline of fresh topics; ``master=None`` leaves the Spark master to the spark_default connection."""
    name = f"t-{unique}"
    pipeline = PipelineUnderTest(name, tmp_path / f"{name}.yaml", bootstrap, f"in-{unique}", f"out-{unique}",
                            f"dlq-{unique}", f"tx-{unique}")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(pipeline.source, partitions, replication), NewTopic(pipeline.sink, partitions, replication),
              NewTopic(pipeline.dead_letters, 1, replication)]
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)
    spec = {
        "name": name,
        "source": {"topics": [pipeline.source]},
        "transform": transform,
        "sink": {"topic": pipeline.sink, "dead_letter_topic": pipeline.dead_letters,
                 **({"writer": writer} if writer else {})},
        "checkpoints": {"store": f"s3://lockstep/tests/{unique}", "max_records": max_records, "retain": 100},
        "transactions": {"id_prefix": pipeline.prefix, "timeout_ms": timeout_ms, "commit_margin_ms": margin_ms},
        "spark": {"master": master} if master else {},
    }
    pipeline.spec_path.write_text(yaml.safe_dump(spec))
    return pipeline


def produce_orders(pipeline: PipelineUnderTest, count: int, start: int = 0, timestamp_ms: int | None = None) -> None:
    """``count`` orders spread over every partition; every 10th one malformed; with ``timestamp_ms``
    every record carries that timestamp instead of the time it was produced."""
    producer = Producer({"bootstrap.servers": pipeline.bootstrap, "linger.ms": 5})
    partitions = len(AdminClient({"bootstrap.servers": pipeline.bootstrap}).list_topics(pipeline.source, timeout=10)
                     .topics[pipeline.source].partitions)
    for i in range(start, start + count):
        if i % MALFORMED_EVERY == 0:
            value = f"not json {i}"
        else:
            value = json.dumps({"order_id": f"o{i}", "customer": f"c{i % 7}", "amount": (i % 300) + 0.5,
                                "currency": "EUR"})
        producer.produce(pipeline.source, value.encode(), partition=i % partitions,
                         **({"timestamp": timestamp_ms} if timestamp_ms is not None else {}))
    producer.flush(30)


def lockstep(*args: str, failpoints: str | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    env.pop("LOCKSTEP_FAILPOINTS", None)
    if failpoints:
        env["LOCKSTEP_FAILPOINTS"] = failpoints
    return subprocess.run([LOCKSTEP, *args], env=env, capture_output=True, text=True, timeout=timeout)


def run(pipeline: PipelineUnderTest, *extra: str, failpoints: str | None = None) -> subprocess.CompletedProcess:
    return lockstep("run", "--spec", str(pipeline.spec_path), *extra, failpoints=failpoints)


def verify(pipeline: PipelineUnderTest, *extra: str) -> dict:
    result = lockstep("verify", "--spec", str(pipeline.spec_path), "--json", *extra)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert (result.returncode == 0) == (report["ok"] and report["drift_ok"]), report
    return report


def open_transactions(pipeline: PipelineUnderTest) -> list[str]:
    from lockstep.committer import TransactionCommitter

    with TransactionCommitter(pipeline.bootstrap) as committer:
        return committer.list_open(f"{pipeline.prefix}-")


def read_committed(bootstrap: str, topic: str, timeout: float = 30.0) -> list:
    """Every record of ``topic`` a read_committed consumer sees, up to the last stable offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        remaining, records = set(parts), []
        deadline = time.monotonic() + timeout
        while remaining:
            assert time.monotonic() < deadline, f"reading {topic}: partitions {remaining} never reached their end"
            for msg in consumer.consume(500, timeout=1):
                if msg.error():
                    remaining.discard(msg.partition())
                else:
                    records.append(msg)
        return records
    finally:
        consumer.close()


def store(pipeline: PipelineUnderTest):
    from lockstep.runtime import checkpoint_store

    return checkpoint_store(pipeline.spec())


def group_offsets(pipeline: PipelineUnderTest) -> dict[str, int]:
    """The pipeline consumer group's committed offsets, keyed like checkpoint end offsets."""
    from lockstep import topics

    spec = pipeline.spec()
    admin = AdminClient({"bootstrap.servers": pipeline.bootstrap})
    tps = topics.partitions(admin, spec.source.topics)
    found = topics.group_offsets({"bootstrap.servers": pipeline.bootstrap}, spec.source.consumer_group, tps)
    return {tp.key: offset for tp, offset in found.items()}
