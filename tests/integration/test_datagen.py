"""The input generators of the demo and the benchmarks (one bulk producer, `lockstep_dev.datagen.send`) deliver
every record they are asked for, where they are asked to, or fail saying how many did not arrive."""
from __future__ import annotations

import json

from confluent_kafka import Consumer

from lockstep_bench.formats import high_watermarks, produce_avro
from lockstep_bench.keyed_state import produce
from lockstep_dev.datagen import (
    CUSTOMERS,
    produce_avro_orders,
    produce_customers,
    produce_orders,
    produce_orders_and_payments,
    produce_payments,
)

from ..support.topics import create_topics


def _per_partition(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "datagen-test"})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in meta.partitions}
    finally:
        consumer.close()


def test_every_generator_delivers_each_record_round_robin(bootstrap, unique):
    from lockstep.formats.registry import registry_for
    from lockstep.formats.wire import MAGIC_BYTE
    from lockstep_examples.bench import ORDER_SCHEMA

    names = {kind: f"datagen-{kind}-{unique}" for kind in ("json", "avro", "framed", "state", "customers", "payments")}
    create_topics(bootstrap, {topic: 3 for topic in names.values()})
    produce_orders(bootstrap, names["json"], 301)
    registry = registry_for("schema_registry_default")
    produce_avro_orders(bootstrap, names["avro"], registry.url, 30, malformed_every=10)
    schema_id = registry.register(f"{names['framed']}-value", json.dumps(ORDER_SCHEMA), "AVRO")
    seconds, total = produce_avro(bootstrap, names["framed"], 300, 3, schema_id)
    produce(bootstrap, names["state"], list(range(90)), 3)
    sent = produce_customers(bootstrap, names["customers"], missing_every=40)
    changed = produce_customers(bootstrap, names["customers"], version=1, every=10, missing_every=40)
    payments = produce_payments(bootstrap, names["payments"], 30, start=0)

    assert _per_partition(bootstrap, names["json"]) == {0: 101, 1: 100, 2: 100}
    assert _per_partition(bootstrap, names["avro"]) == {0: 10, 1: 10, 2: 10}
    assert high_watermarks(bootstrap, names["framed"]) == 300 and total > 300 * 5 and seconds > 0
    assert _per_partition(bootstrap, names["state"]) == {0: 30, 1: 30, 2: 30}
    # every customer but each 40th, then every 10th again (a new version) but each 40th
    assert (sent, changed) == (CUSTOMERS - 25, 100 - 25)
    assert sum(_per_partition(bootstrap, names["customers"]).values()) == sent + changed
    assert payments == 20 and _per_partition(bootstrap, names["payments"]) == {0: 0, 1: 10, 2: 10}  # 2 in 3 orders

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"datagen-{unique}", "auto.offset.reset": "earliest"})
    consumer.subscribe([names["avro"]])
    seen = []
    while len(seen) < 30:
        seen += [m for m in consumer.consume(30, timeout=5) if not m.error()]
    consumer.close()
    framed = [m for m in seen if m.value()[:1] == bytes([MAGIC_BYTE])]
    assert len(framed) == 27 and all(m.key().startswith(b"o") for m in seen)


def test_orders_and_their_payments_land_in_one_transaction(bootstrap, unique):
    """The demo's interval join reads orders and payments: sent in one transaction, a checkpoint planned at any
    moment sees both or neither (before, a scheduled run between two sends read orders without their payments,
    and the join wrote 2,100 of them alone)."""
    from collections import Counter

    from ..support.data import read_committed

    orders, payments = f"dg-orders-{unique}", f"dg-payments-{unique}"
    create_topics(bootstrap, {orders: 2, payments: 2})
    assert produce_orders_and_payments(bootstrap, orders, payments, 30, start=0, malformed_every=10) == 20
    assert len(read_committed(bootstrap, orders)) == 30 and len(read_committed(bootstrap, payments)) == 20
    # Each partition ends with the transaction's commit marker, one offset past its records.
    assert _per_partition(bootstrap, orders) == {0: 15 + 1, 1: 15 + 1}
    paid = Counter(i % 2 for i in range(30) if i % 3)
    assert _per_partition(bootstrap, payments) == {p: n + 1 for p, n in paid.items()}
