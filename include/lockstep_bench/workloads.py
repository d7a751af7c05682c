"""Benchmark inputs: generated JSON order topics, per-run sink topics and pipeline specs."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

#: ``datagen.order`` with this much padding is about 200 bytes (the issue's record size).
PAD = 80
TRANSFORM = "lockstep_examples.bench:transform"


@dataclass(frozen=True)
class Workload:
    """One input topic: ``records`` generated orders round-robin over ``partitions``."""

    topic: str
    records: int
    partitions: int
    bytes: int
    generate_seconds: float

    @property
    def label(self) -> str:
        return f"{self.records:,} records / {self.partitions} partitions"


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})]).values():
        future.result(timeout=60)


def delete_topic(bootstrap: str, topic: str) -> None:
    """Best effort: sink topics of finished runs are deleted to keep the broker's disk small."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        for future in admin.delete_topics([topic]).values():
            future.result(timeout=60)
    except Exception:  # noqa: BLE001 - a leftover topic only costs disk
        pass


def make_input(bootstrap: str, records: int, partitions: int, name: str | None = None) -> Workload:
    """Create a topic and fill it with ``records`` orders of about 200 bytes, none malformed."""
    from lockstep_dev.datagen import order, produce_orders

    topic = name or f"bench-in-{partitions}p-{records}-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions)
    started = time.monotonic()
    produce_orders(bootstrap, topic, records, pad=PAD, partitions=partitions)
    seconds = time.monotonic() - started
    return Workload(topic, records, partitions, records * len(order(records // 2, pad=PAD)), seconds)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Last stable offset of every partition (read_committed "latest")."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka import TopicPartition as KTP
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    parts = admin.list_topics(topic, timeout=30).topics[topic].partitions
    futures = admin.list_offsets({KTP(topic, p): OffsetSpec.latest() for p in parts},
                                 isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30)
    return {k.partition: f.result().offset for k, f in futures.items()}


def write_spec(folder: Path, name: str, source: str, sink: str, max_records: int, master: str = "local[*]",
               producer: dict | None = None, spark_conf: dict | None = None, retain: int = 20,
               writer: str = "jvm", remote: str | None = None, transform: str = TRANSFORM,
               state: dict | None = None) -> Path:
    """A Lockstep pipeline over ``source`` with the benchmark transform and a fresh checkpoint root;
    ``remote``: its checkpoints run in sessions of that Spark Connect server (``spark.mode: connect``);
    ``state``: the spec's ``state`` section (a stateful pipeline, with a transform that keeps its columns)."""
    spec = {
        "name": name,
        "source": {"topics": [source], "auto_offset_reset": "earliest"},
        "transform": transform,
        **({"state": state} if state else {}),
        "sink": {"topic": sink, "dead_letter_topic": f"{sink}-dlq", "writer": writer},
        "checkpoints": {"store": f"s3://lockstep/bench/{name}", "max_records": max(1, max_records), "retain": retain},
        "transactions": {"id_prefix": name, "timeout_ms": 900_000},
        "spark": {**({"mode": "connect", "remote": remote} if remote else {"master": master}),
                  **({"conf": spark_conf} if spark_conf else {})},
    }
    if producer:
        spec["producer"] = producer
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
