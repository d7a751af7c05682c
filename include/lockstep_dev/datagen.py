"""Generated JSON orders for the demo, the tests and the benchmarks.

Deterministic from the index, so a run can be reproduced; every
``malformed_every``-th record is deliberately broken so the dead-letter path is
exercised. A valid order is about 100-200 bytes.
"""
from __future__ import annotations

import json
from collections.abc import Iterator

CURRENCIES = ("EUR", "USD", "GBP")


def order(i: int, malformed_every: int = 0, pad: int = 0) -> bytes:
    if malformed_every and i % malformed_every == 0:
        return f"not json {i}".encode() if i % (2 * malformed_every) else json.dumps({"order_id": f"o{i}"}).encode()
    doc = {"order_id": f"o{i}", "customer": f"customer-{i % 997}", "amount": round((i * 7919 % 30000) / 100, 2),
           "currency": CURRENCIES[i % 3], "created_at": 1_700_000_000 + i}
    if pad:
        doc["note"] = "x" * pad
    return json.dumps(doc).encode()


def produce_orders(bootstrap: str, topic: str, count: int, start: int = 0, malformed_every: int = 0,
                   pad: int = 0, partitions: int | None = None) -> None:
    """Produce ``count`` orders round-robin over ``partitions`` (all of the topic's by default)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    if partitions is None:
        meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30).topics[topic]
        partitions = len(meta.partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, order(i, malformed_every, pad), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} generated records were not delivered to {topic}")


def produce_avro_orders(bootstrap: str, topic: str, registry_url: str, count: int, start: int = 0,
                        malformed_every: int = 0) -> None:
    """``count`` orders framed by Confluent's own AvroSerializer (``lockstep_examples/schemas/order.avsc``,
    registered under ``<topic>-value``), round-robin over the topic's partitions; every ``malformed_every``-th
    is bytes outside the registry's wire format instead (a dead letter of the pipeline's)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from lockstep.paths import project_root

    schema = (project_root() / "include" / "lockstep_examples" / "schemas" / "order.avsc").read_text()
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), schema)
    context = SerializationContext(topic, MessageField.VALUE)
    partitions = len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30).topics[topic].partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"})
    for i in range(start, start + count):
        if malformed_every and i % malformed_every == 0:
            value = f"not avro {i}".encode()
        else:
            value = serialize(json.loads(order(i)), context)
        producer.produce(topic, value, key=f"o{i}".encode(), partition=i % partitions)
        producer.poll(0)
    producer.flush(60)


def ensure_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create missing topics with the given partition counts (replication factor 1)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=30).topics)
    missing = [NewTopic(name, n, 1) for name, n in topics.items() if name not in existing]
    for future in (admin.create_topics(missing).values() if missing else []):
        future.result(timeout=30)


def iter_orders(count: int, start: int = 0, malformed_every: int = 0) -> Iterator[bytes]:
    return (order(i, malformed_every) for i in range(start, start + count))
