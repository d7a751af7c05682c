"""Generated JSON orders for the demo, the tests and the benchmarks.

Deterministic from the index, so a run can be reproduced; every
``malformed_every``-th record is deliberately broken so the dead-letter path is
exercised. A valid order is about 100-200 bytes.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, cast

CURRENCIES = ("EUR", "USD", "GBP")


#: The customers the orders name (``customer-<i % CUSTOMERS>``, `order`).
CUSTOMERS = 997
TIERS = ("bronze", "silver", "gold")
COUNTRIES = ("DE", "FR", "NL", "PL")
#: Seconds a Schema Registry request may take (confluent-kafka's client waits forever without one).
REGISTRY_TIMEOUT_S = 10


def order(i: int, malformed_every: int = 0, pad: int = 0) -> bytes:
    if malformed_every and i % malformed_every == 0:
        return f"not json {i}".encode() if i % (2 * malformed_every) else json.dumps({"order_id": f"o{i}"}).encode()
    doc = {"order_id": f"o{i}", "customer": f"customer-{i % CUSTOMERS}", "amount": round((i * 7919 % 30000) / 100, 2),
           "currency": CURRENCIES[i % 3], "created_at": 1_700_000_000 + i}
    if pad:
        doc["note"] = "x" * pad
    return json.dumps(doc).encode()


#: A bulk producer's settings: large lz4 batches, a deep queue.
#: Idempotent: a retried batch (a partition whose leader was not yet known, just after the topic was made)
#: neither duplicates nor overtakes the ones after it, so record i lands at its planned place in partition
#: ``i % partitions`` (the benchmarks' read-back depends on it; without it 914 of 1M records over 1,024 new
#: partitions landed out of order).
BULK = {"linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000,
        "enable.idempotence": True, "log_level": 3}


def send(bootstrap: str, topic: str, records: Iterable[tuple[bytes, int, bytes | None]], timeout_s: float = 120,
         timestamp_ms: int | None = None) -> int:
    """Produce ``records`` ((value, partition, key) each) to ``topic``, waiting out a full queue, and raise if
    any is not delivered within ``timeout_s``; returns the bytes of the values sent. ``timestamp_ms``: every
    record's timestamp (default: the producer's clock), for data whose time must precede generated event times."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **BULK})
    total = 0
    for n, (value, partition, key) in enumerate(records):
        total += len(value)
        while True:
            try:
                producer.produce(topic, value, key=key, partition=partition, timestamp=timestamp_ms or 0)
                break
            except BufferError:
                producer.poll(0.1)
        if n % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(timeout_s)
    if remaining:
        raise RuntimeError(f"{remaining} generated records were not delivered to {topic}")
    return total


def send_together(bootstrap: str, batches: Mapping[str, Iterable[tuple[bytes, int, bytes | None]]],
                  timeout_s: float = 120) -> int:
    """Produce each topic's records ((value, partition, key) each) in one Kafka transaction: a ``read_committed``
    reader, and so a checkpoint's plan (it reads to the last stable offsets), sees all of them or none. What
    must arrive together (orders and their payments, which an interval join pairs) then never lands in two
    checkpoints because a scheduled run started between two sends. Returns the bytes of the values sent."""
    import uuid

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **BULK, "transactional.id": f"lockstep-datagen-{uuid.uuid4()}",
                         "transaction.timeout.ms": int(timeout_s * 1000) + 60_000})
    producer.init_transactions(timeout_s)
    producer.begin_transaction()
    total = 0
    for topic, records in batches.items():
        for n, (value, partition, key) in enumerate(records):
            total += len(value)
            while True:
                try:
                    producer.produce(topic, value, key=key, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.1)
            if n % 10_000 == 0:
                producer.poll(0)
    producer.commit_transaction(timeout_s)
    return total


#: Seconds to wait for a topic's metadata (its partitions, each with a leader) before giving up.
METADATA_TIMEOUT_S = 30.0


class TopicAdmin(Protocol):
    """What the waits below read: confluent-kafka's ``AdminClient.list_topics``."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...


def _admin(bootstrap: str) -> TopicAdmin:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _ready_partitions(admin: TopicAdmin, topic: str, timeout_s: float) -> int:
    """How many partitions the metadata lists for ``topic``, each with a leader; 0 while the broker answering
    does not know the topic yet (an error in its metadata) or a partition has no leader yet."""
    found = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if found is None or found.error is not None:
        return 0
    parts = found.partitions.values()
    if any(getattr(p, "error", None) is not None or getattr(p, "leader", 0) < 0 for p in parts):
        return 0
    return len(found.partitions)


def wait_for_partitions(admin: TopicAdmin, topics: Mapping[str, int | None], timeout_s: float = METADATA_TIMEOUT_S,
                        where: str = "Kafka", clock: Callable[[], float] = time.monotonic,
                        sleep: Callable[[float], None] = time.sleep) -> dict[str, int]:
    """Each topic's partition count once the metadata lists at least the expected number of partitions (None:
    at least one), each with a leader. A topic just created is known to the controller before every broker's
    metadata has it: a read right after its creation can list 0 partitions (the demo's first run once divided
    by that). Polls until ``timeout_s`` and then raises, saying which topics were awaited and what was seen."""
    deadline = clock() + timeout_s
    seen: dict[str, int] = {}
    while True:
        for topic, wanted in topics.items():
            if seen.get(topic, 0) < (wanted or 1):
                seen[topic] = _ready_partitions(admin, topic, max(1.0, min(10.0, deadline - clock())))
        waiting = {t: w for t, w in topics.items() if seen[t] < (w or 1)}
        if not waiting:
            return seen
        if clock() >= deadline:
            raise RuntimeError(
                f"{where} did not list the partitions of "
                + ", ".join(f"topic {t} ({seen[t]} with a leader, {'at least 1' if w is None else w} expected)"
                            for t, w in waiting.items())
                + f" within {timeout_s:g} s of asking: a topic just created that no broker's metadata has yet, or "
                  "one that does not exist. Check the broker (`lockstep dev status`) and run again")
        sleep(0.2)


def partition_count(bootstrap: str, topic: str, timeout_s: float = METADATA_TIMEOUT_S) -> int:
    """The topic's partition count, once its metadata lists its partitions (`wait_for_partitions`): never 0,
    which a round-robin over them would divide by."""
    return wait_for_partitions(_admin(bootstrap), {topic: None}, timeout_s, where=f"Kafka at {bootstrap}")[topic]


def produce_orders(bootstrap: str, topic: str, count: int, start: int = 0, malformed_every: int = 0,
                   pad: int = 0, partitions: int | None = None) -> None:
    """Produce ``count`` orders round-robin over ``partitions`` (all of the topic's by default)."""
    parts = partitions if partitions is not None else partition_count(bootstrap, topic)
    send(bootstrap, topic, ((order(i, malformed_every, pad), i % parts, None) for i in range(start, start + count)))


def produce_avro_orders(bootstrap: str, topic: str, registry_url: str, count: int, start: int = 0,
                        malformed_every: int = 0) -> None:
    """``count`` orders framed by Confluent's own AvroSerializer (``lockstep_examples/schemas/order.avsc``,
    registered under ``<topic>-value``), round-robin over the topic's partitions; every ``malformed_every``-th
    is bytes outside the registry's wire format instead (a dead letter of the pipeline's)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from lockstep.paths import project_root

    schema = (project_root() / "include" / "lockstep_examples" / "schemas" / "order.avsc").read_text()
    # A timeout (seconds; the client's default is none): a request the registry never answered (seen once:
    # a kept-alive connection gone quiet) then fails and is retried by the client, instead of hanging.
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url, "timeout": REGISTRY_TIMEOUT_S}), schema)
    context = SerializationContext(topic, MessageField.VALUE)
    parts = partition_count(bootstrap, topic)

    def value(i: int) -> bytes:
        if malformed_every and i % malformed_every == 0:
            return f"not avro {i}".encode()
        return cast(bytes, serialize(json.loads(order(i)), context))

    send(bootstrap, topic, ((value(i), i % parts, f"o{i}".encode()) for i in range(start, start + count)))


def customer(i: int, version: int = 0) -> bytes:
    """Customer ``i`` as JSON (the demo's ``customers`` table); its tier changes with ``version``."""
    return json.dumps({"name": f"Customer {i}", "tier": TIERS[(i + version) % len(TIERS)],
                       "country": COUNTRIES[i % len(COUNTRIES)]}).encode()


def produce_customers(bootstrap: str, topic: str, version: int = 0, every: int = 1, missing_every: int = 0) -> int:
    """The customers (keyed ``customer-<i>``) whose ``i`` is a multiple of ``every`` at ``version``, but for every
    ``missing_every``-th one, which never gets a row (its orders have no customer); returns how many were sent."""
    parts = partition_count(bootstrap, topic)
    chosen = [i for i in range(0, CUSTOMERS, every) if not (missing_every and i % missing_every == 0)]
    send(bootstrap, topic, ((customer(i, version), i % parts, f"customer-{i}".encode()) for i in chosen))
    return len(chosen)


def payment(i: int) -> tuple[int, bytes] | None:
    """Order ``i``'s payment, if it has one (two orders in three): its minutes after the order (0 to 19, so some
    come after the demo's 15-minute interval) and its JSON."""
    if i % 3 == 0:
        return None
    minutes = i % 20
    return minutes, json.dumps({"payment_id": f"pay{i}", "order_id": f"o{i}", "created_at": 1_700_000_000 + i
                                + minutes * 60, "amount": round((i * 7919 % 30000) / 100, 2)}).encode()


def produce_orders_and_payments(bootstrap: str, orders_topic: str, payments_topic: str, count: int, start: int = 0,
                                malformed_every: int = 0) -> int:
    """Orders ``start`` to ``start + count`` and their payments (`payment`), round-robin over each topic's
    partitions, in one transaction (`send_together`); returns how many payments were sent."""
    orders = partition_count(bootstrap, orders_topic)
    payments_parts = partition_count(bootstrap, payments_topic)
    made = [(p[1], i % payments_parts, f"o{i}".encode()) for i in range(start, start + count)
            if (p := payment(i)) is not None]
    send_together(bootstrap, {orders_topic: [(order(i, malformed_every), i % orders, None)
                                             for i in range(start, start + count)], payments_topic: made})
    return len(made)


def produce_payments(bootstrap: str, topic: str, count: int, start: int = 0) -> int:
    """The payments of orders ``start`` to ``start + count`` (`payment`), round-robin over the topic's partitions;
    returns how many were sent."""
    parts = partition_count(bootstrap, topic)
    made = [(p[1], i % parts, f"o{i}".encode()) for i in range(start, start + count) if (p := payment(i)) is not None]
    send(bootstrap, topic, made)
    return len(made)


def ensure_topics(bootstrap: str, topics: dict[str, int], config: dict[str, str] | None = None) -> None:
    """Create missing topics with the given partition counts (replication factor 1) and ``config``, and return
    once the metadata lists each one's partitions with their leaders (`wait_for_partitions`): what is produced
    or read next finds them all."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=30).topics)
    missing = [NewTopic(name, n, 1, config=dict(config or {})) for name, n in topics.items() if name not in existing]
    for future in (admin.create_topics(missing).values() if missing else []):
        future.result(timeout=30)
    # An existing topic may hold more partitions than asked for; a created one holds exactly those asked for.
    wait_for_partitions(admin, {name: (n if name not in existing else None) for name, n in topics.items()},
                        where=f"Kafka at {bootstrap}")


def iter_orders(count: int, start: int = 0, malformed_every: int = 0) -> Iterator[bytes]:
    return (order(i, malformed_every) for i in range(start, start + count))
