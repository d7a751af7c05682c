"""Benchmark inputs: generated JSON order topics, per-run sink topics and pipeline specs."""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: ``datagen.order`` with this much padding is about 200 bytes (the issue's record size).
PAD = 80
TRANSFORM = "lockstep_examples.bench:transform"
#: The same on the order the spec's ``json`` format decoded (`json_source`).
JSON_TRANSFORM = "lockstep_examples.bench:json_transform"
#: Records passed through as they are: Lockstep's own path without the transform's work (the large input).
IDENTITY = "lockstep_examples.bench:identity"


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
    """``topic`` created, and used only once every partition has a leader (`kafka_nodes.wait_for_leaders`)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from lockstep_dev import kafka_nodes

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})]).values():
        future.result(timeout=60)
    kafka_nodes.wait_for_leaders(admin, [topic], partitions)


def create_topics(bootstrap: str, topics: list[str], partitions: int = 1) -> None:
    """``topics`` of ``partitions`` each, in one admin request (hundreds of them would take a while one by one),
    used once every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from lockstep_dev import kafka_nodes

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        future.result(timeout=120)
    kafka_nodes.wait_for_leaders(admin, topics, partitions)


def touch_partitions(bootstrap: str, topic: str, partitions: int) -> None:
    """One small record into each partition of ``topic``: a sink a pipeline has been writing to has had
    its first write in every partition, and the broker's cost of a partition's first write (its log's
    first segment files) is no cost of the runs measured after."""
    from lockstep_dev.datagen import send

    send(bootstrap, topic, ((b"warm-up", p, None) for p in range(partitions)))


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


def end_offsets(bootstrap: str, topic: str, committed: bool = True) -> dict[int, int]:
    """Last stable offset of every partition (read_committed "latest"); ``committed=False``: the high
    watermarks, open transactions' records included."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka import TopicPartition as KTP
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    parts = admin.list_topics(topic, timeout=30).topics[topic].partitions
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets({KTP(topic, p): OffsetSpec.latest() for p in parts}, isolation_level=level,
                                 request_timeout=30)
    return {k.partition: f.result().offset for k, f in futures.items()}


def read_committed(bootstrap: str, topic: str, starts: Mapping[int, int], ends: Mapping[int, int],
                   take: Callable[[Any], Any] | None = None, timeout_s: float = 1800) -> tuple[int, list[Any]]:
    """The committed records of ``topic`` from ``starts`` (0 where absent) up to ``ends`` (read_committed):
    how many, and ``take(message)`` of each when given (a count alone keeps nothing: millions of records)."""
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as KTP

    from lockstep_bench.measure import RunFailed

    todo = {p: e for p, e in ends.items() if e > starts.get(p, 0)}
    # A transactional partition ends with a commit marker, which the consumer's position never passes:
    # the partition's end-of-file event (its fetch position reached the end) says it is read.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-check-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed", "log_level": 3,
                         "enable.partition.eof": True})
    count, taken = 0, []
    deadline = time.monotonic() + timeout_s
    # consecutive empty polls (5 s of them): the records before a partition's end may all be aborted or markers
    quiet = 0
    try:
        consumer.assign([KTP(topic, p, starts.get(p, 0)) for p in todo])
        while todo and quiet < 50:
            if time.monotonic() > deadline:
                raise RunFailed(f"reading {topic} timed out with partitions {sorted(todo)} unfinished")
            batch = consumer.consume(10_000, timeout=0.1)  # a short batch waits its whole timeout
            quiet = 0 if batch else quiet + 1
            for msg in batch:
                offset, partition = msg.offset(), msg.partition()
                error = msg.error()
                if error is not None:
                    if (error.code() == KafkaError._PARTITION_EOF and partition in todo
                            and offset is not None and offset >= todo[partition]):
                        todo.pop(partition)
                    continue
                if offset is None or partition is None or offset >= ends.get(partition, 0):
                    continue
                count += 1
                if take is not None:
                    taken.append(take(msg))
            for tp in consumer.position([KTP(topic, p) for p in list(todo)]):
                if tp.offset >= todo[tp.partition]:
                    todo.pop(tp.partition)
    finally:
        consumer.close()
    return count, taken


def json_source() -> dict[str, Any]:
    """``source.value`` of `JSON_TRANSFORM`'s pipelines: the order as JSON with its JSON Schema."""
    from lockstep_examples.bench import ORDER_JSON_SCHEMA

    return {"format": "json", "schema": ORDER_JSON_SCHEMA}


def write_spec(folder: Path, name: str, source: str, sink: str, max_records: int, master: str = "local[*]",
               producer: dict[str, Any] | None = None, spark_conf: dict[str, str] | None = None, retain: int = 20,
               writer: str = "jvm", remote: str | None = None, transform: str | dict[str, str] = TRANSFORM,
               state: dict[str, Any] | None = None, schedule: str | None = None, source_value: Any = None,
               sink_value: Any = None, tables: dict[str, Any] | None = None,
               trigger: dict[str, Any] | None = None, tasks: str | None = None,
               pipelined: bool | None = None) -> Path:
    """A Lockstep pipeline over ``source`` with the benchmark transform and a fresh checkpoint root;
    ``remote``: its checkpoints run in sessions of that Spark Connect server (``spark.mode: connect``);
    ``state``: the spec's ``state`` section (a stateful pipeline, with a transform that keeps its columns);
    ``schedule``: its DAG's cron (none: triggered only); ``source_value``/``sink_value``: the record formats of
    the source's and the sink's values (the spec's ``source.value``/``sink.value``; none: bytes); ``tables``: the
    spec's ``tables`` section (docs/joins.md); ``trigger``: its ``checkpoints.trigger`` (lag-triggered);
    ``tasks``: its ``checkpoints.tasks``; ``pipelined``: its ``checkpoints.pipelined`` (None: the default)."""
    spec = {
        "name": name,
        "source": {"topics": [source], "auto_offset_reset": "earliest",
                   **({"value": source_value} if source_value is not None else {})},
        **({"tables": tables} if tables else {}),
        "transform": transform,
        **({"state": state} if state else {}),
        "sink": {"topic": sink, "dead_letter_topic": f"{sink}-dlq", "writer": writer,
                 **({"value": sink_value} if sink_value is not None else {})},
        "checkpoints": {"store": f"s3://lockstep/bench/{name}", "max_records": max(1, max_records), "retain": retain,
                        **({"schedule": schedule} if schedule else {}),
                        **({"schedule": None, "trigger": trigger} if trigger else {}),
                        **({"tasks": tasks} if tasks else {}),
                        **({"pipelined": pipelined} if pipelined is not None else {})},
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
