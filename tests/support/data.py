"""Test input and reading output on a real broker: generated orders and a read_committed reader.

The orders are the tests' own, not ``lockstep_dev.datagen``'s: every ``MALFORMED_EVERY``-th one is
"not json <i>" (one kind of bad record, so tests count dead letters as ``count // MALFORMED_EVERY``)
and a test can stamp every record with one timestamp (restores by time). ``datagen`` feeds the
demo and the benchmark with two kinds of bad records and no timestamps.
"""
from __future__ import annotations

import json
import time
from typing import Any

MALFORMED_EVERY = 10  # every 10th input record is not valid JSON


def order(i: int) -> bytes:
    """Order ``i``: valid JSON, or "not json <i>" for every ``MALFORMED_EVERY``-th index."""
    if i % MALFORMED_EVERY == 0:
        return f"not json {i}".encode()
    return json.dumps({"order_id": f"o{i}", "customer": f"c{i % 7}", "amount": (i % 300) + 0.5,
                       "currency": "EUR"}).encode()


def topic_partitions(client: Any, topic: str, timeout: float = 30.0) -> list[int]:
    """The partition ids of ``topic`` as ``client`` (a confluent_kafka AdminClient or Consumer) sees them.

    Right after a topic is created, a broker of a multi-broker cluster may answer metadata with the
    topic and no partitions yet; ask again until they are there."""
    deadline = time.monotonic() + timeout
    while True:
        topic_metadata = client.list_topics(topic, timeout=10).topics.get(topic)
        if topic_metadata is not None and topic_metadata.error is None and topic_metadata.partitions:
            return sorted(topic_metadata.partitions)
        assert time.monotonic() < deadline, f"topic {topic} has no partitions in the metadata after {timeout:.0f}s"
        time.sleep(0.2)


def produce_orders(pipeline: Any, count: int, start: int = 0, timestamp_ms: int | None = None) -> None:
    """Orders ``start`` .. ``start + count - 1`` into ``pipeline.source`` on ``pipeline.bootstrap``,
    spread over every partition; with ``timestamp_ms`` every record carries that timestamp instead of
    the time it was produced."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    producer = Producer({"bootstrap.servers": pipeline.bootstrap, "linger.ms": 5})
    partitions = len(topic_partitions(AdminClient({"bootstrap.servers": pipeline.bootstrap}), pipeline.source))
    for i in range(start, start + count):
        producer.produce(pipeline.source, order(i), partition=i % partitions,
                         **({"timestamp": timestamp_ms} if timestamp_ms is not None else {}))
    producer.flush(30)


def read_committed(bootstrap: str, topic: str, timeout: float = 30.0) -> list:
    """Every record of ``topic`` a read_committed consumer sees, up to the last stable offset."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        parts = topic_partitions(consumer, topic)
        # from each partition's log start, which deleted records move past offset 0
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        remaining, records = set(parts), []
        deadline = time.monotonic() + timeout
        while remaining:
            assert time.monotonic() < deadline, f"reading {topic}: partitions {remaining} never reached their end"
            for msg in consumer.consume(500, timeout=0.1):  # a short batch waits its whole timeout
                if msg.error():
                    remaining.discard(msg.partition())
                else:
                    records.append(msg)
        return records
    finally:
        consumer.close()
