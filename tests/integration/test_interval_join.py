"""A stream-stream interval join (``state.interval_join``, docs/joins.md) on real services in connect mode: orders
and payments, a payment paired with its order when it comes within 15 minutes after it, an order without one
written alone once the watermark passes its interval (a left join). Each run is crashed at the next failpoint
the checkpoint passes outside the writers' tasks (the state's among them); then every pair and every lone order
is checked against a recomputation made here from what was produced: each once, none missing, no other; and
`lockstep verify` (one call per key over the whole input) agrees."""
from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml
from confluent_kafka import Producer

from lockstep.model.failpoints import FAILPOINTS, ICEBERG_FAILPOINTS
from lockstep.model.output_contract import WRITER_FAILPOINTS
from lockstep_dev.datagen import ensure_topics

from ..support.data import read_committed
from .engine_helpers import crash_at, lockstep, make_pipeline, open_transactions, run, same_output, store, verify

pytestmark = pytest.mark.integration

T0 = 1_700_000_000
QUERY = """
SELECT *, get_json_object(CAST(value AS STRING), '$.order_id') AS order_id,
       CAST(get_json_object(CAST(value AS STRING), '$.at') AS BIGINT) AS at
FROM input
"""
#: Far in event time, to every partition of both topics: the watermark then passes every interval before it.
FAR = T0 + 1_000_000


def payments_of(i: int) -> list[int]:
    """Minutes after order ``i`` its payments come: none, one within 15 minutes, one too late, or two."""
    return [[], [3], [20], [0, 15], [14], [16, 2]][i % 6]


def produce(bootstrap: str, orders: str, payments: str, indexes: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in indexes:
        at = T0 + i * 60
        producer.produce(orders, json.dumps({"order_id": f"o{i}", "at": at}).encode(), partition=i % 2)
        for n, minutes in enumerate(payments_of(i)):
            producer.produce(payments, json.dumps({"order_id": f"o{i}", "payment": f"p{i}-{n}",
                                                   "at": at + minutes * 60}).encode(), partition=(i + n) % 2)
    producer.flush(30)


def test_an_interval_join_pairs_each_payment_with_its_order_once_and_writes_lone_orders_once(
        tmp_path, bootstrap, unique, spark_connect):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=200)
    payments = f"{pipeline.source}.payments"
    ensure_topics(bootstrap, {payments: 2})
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["source"]["topics"] = [pipeline.source, payments]
    doc["transform"] = {"sql": QUERY}
    doc["state"] = {"key_groups": 4, "event_time": {"column": "at", "out_of_orderness": "1h"},
                    "interval_join": {"key": "order_id", "left": pipeline.source, "right": payments,
                                      "after": "15m", "how": "left"}}
    pipeline.spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))

    points = [f for f in FAILPOINTS if f not in WRITER_FAILPOINTS and f not in ICEBERG_FAILPOINTS]
    for n, point in enumerate(points):
        produce(bootstrap, pipeline.source, payments, range(12 * n, 12 * n + 12))
        crash_at(pipeline, point)
    produced = 12 * len(points)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in (0, 1):  # the watermark past every interval: every lone order is written
        producer.produce(pipeline.source, json.dumps({"order_id": f"far{p}", "at": FAR}).encode(), partition=p)
        producer.produce(payments, json.dumps({"order_id": "nobody", "payment": f"x{p}", "at": FAR}).encode(),
                         partition=p)
    producer.flush(30)
    done = run(pipeline, "--checkpoints", "2", "--max-records", "10000")
    assert done.returncode == 0, done.stderr[-3000:]

    expected: Counter = Counter()
    for i in range(produced):
        paid = [(f"p{i}-{n}", m) for n, m in enumerate(payments_of(i)) if 0 <= m <= 15]
        for payment, _ in paid:
            expected[(f"o{i}", payment)] += 1
        if not paid:
            expected[(f"o{i}", None)] += 1  # a lone order, once its 15 minutes have passed
    out = [json.loads(m.value()) for m in read_committed(bootstrap, pipeline.sink)]
    found = Counter((o["left"]["order_id"], o["right"]["payment"] if o["right"] else None) for o in out)
    assert found == expected, (found - expected, expected - found)
    assert all(o["key"] == o["left"]["order_id"] for o in out)
    assert all(o["right_time_ms"] - o["left_time_ms"] <= 15 * 60_000 for o in out if o["right"])
    manifest = store(pipeline).latest_completed().completed.state
    assert manifest.operator == "interval_join" and manifest.keys == 3  # far0, far1 and nobody still wait
    report = verify(pipeline)
    assert report["ok"] and report["complete"] and report["expected_outputs"] == len(out), report
    same_output(pipeline)  # each checkpoint computed again from its buffered state and its clock: the same

    # A savepoint, then orders and payments after it, one checkpoint; a restore from the savepoint reads them
    # again from the savepoint's state and writes the same pairs and lone orders a second time.
    assert lockstep("savepoint", "create", "sp", "--spec", str(pipeline.spec_path)).returncode == 0
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(12):
        at = FAR + 600 + i * 60
        producer.produce(pipeline.source, json.dumps({"order_id": f"r{i}", "at": at}).encode(), partition=i % 2)
        for n, minutes in enumerate(payments_of(i)):
            producer.produce(payments, json.dumps({"order_id": f"r{i}", "payment": f"q{i}-{n}",
                                                   "at": at + minutes * 60}).encode(), partition=(i + n) % 2)
    for p in (0, 1):  # and the watermark past them
        producer.produce(pipeline.source, json.dumps({"order_id": f"farther{p}", "at": FAR + 10_000}).encode(),
                         partition=p)
        producer.produce(payments, json.dumps({"order_id": "nobody", "payment": "y", "at": FAR + 10_000}).encode(),
                         partition=p)
    producer.flush(30)
    assert run(pipeline).returncode == 0
    first = store(pipeline).latest_completed().checkpoint_id
    restored = run(pipeline, "--restore-from", "sp")
    assert restored.returncode == 0, restored.stderr[-3000:]
    s = store(pipeline)
    again = s.latest_completed()
    assert again.claim.state_base == s.get_savepoint("sp").state

    def written_by(checkpoint: int) -> Counter:
        return Counter(m.value() for m in read_committed(bootstrap, pipeline.sink)
                       if dict(m.headers())["lockstep.checkpoint"] == str(checkpoint).encode())

    assert written_by(again.checkpoint_id) == written_by(first) and written_by(first)
    # the new orders' pairs and lone orders, and far0 and far1, which waited in the savepoint's state, alone
    assert Counter(json.loads(v)["left"]["order_id"] for v in written_by(first).elements()) == Counter(
        {f"r{i}": max(1, sum(1 for m in payments_of(i) if 0 <= m <= 15)) for i in range(12)} | {"far0": 1, "far1": 1})
    assert open_transactions(pipeline) == []
