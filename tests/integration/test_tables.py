"""Tables from Kafka topics joined into a stream (``tables:``, docs/joins.md), on real services in connect mode.

Orders (JSON) are enriched with a ``customers`` table (the latest JSON value per key of its own topic) by a
declared inner join that dead-letters an order whose customer has no row, then reshaped by an SQL query that
also reads the table's view. Between checkpoints customers change, one is deleted (a tombstone) and one is
added; each run is crashed at the next failpoint, then one completes. Every output is checked against a
recomputation made here, from the table topic's own records up to the offsets each checkpoint pinned: each
order once, enriched with its customer as of its checkpoint, or dead-lettered once with the reason. The
table topic's records are then deleted: `lockstep verify` still recomputes every checkpoint (from the
stored versions, not the topic), and a restore from a savepoint joins against the savepoint's version and the
updates since, as its claim pins.
"""
from __future__ import annotations

import json
import time

import pytest
import yaml

from lockstep_dev.datagen import ensure_topics
from tests.support.data import read_committed

from .engine_helpers import crash_at, lockstep, open_transactions, run, same_output, store, verify
from .test_formats import make

pytestmark = pytest.mark.integration

CUSTOMER_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "tier": {"type": "string"}},
                   "required": ["name"]}
ORDER_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "customer": {"type": "string"},
                                                 "amount": {"type": "number"}}, "required": ["order_id"]}
#: The enrichment: the joined row's fields (a struct column named after the table) and, from the table's view,
#: how many customers share the order's tier.
QUERY = """
SELECT /*+ BROADCAST(t) */ i.topic, i.partition, i.offset, i.key,
       named_struct('order_id', i.data.order_id, 'customer', i.data.customer, 'name', i.customers.data.name,
                    'tier', i.customers.data.tier, 'same_tier', t.n) AS data
FROM input i LEFT JOIN (SELECT data.tier AS tier, count(*) AS n FROM customers GROUP BY data.tier) t
  ON i.customers.data.tier <=> t.tier
"""
NO_ROW = "no row in table customers for data.customer = {} (tables.customers.join)"


def with_table(tmp_path, bootstrap, unique):
    pipeline = make(tmp_path, bootstrap, unique, {"value": {"format": "json", "schema": ORDER_SCHEMA}},
                    {"value": "json"}, {"sql": QUERY})
    table_topic = f"{pipeline.source}.customers"
    ensure_topics(bootstrap, {table_topic: 2})
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["tables"] = {"customers": {"topic": table_topic, "value": {"format": "json", "schema": CUSTOMER_SCHEMA},
                                   "join": {"by": "data.customer", "how": "inner", "missing": "dead_letter"}}}
    pipeline.spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return pipeline, table_topic


def produce(bootstrap: str, topic: str, records: list[tuple[str, dict | None]], partitions: int = 2) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in records:
        producer.produce(topic, None if value is None else json.dumps(value).encode(), key=key.encode(),
                         partition=int(key[1:]) % partitions)
    producer.flush(30)


def order(i: int) -> tuple[str, dict]:
    return f"o{i}", {"order_id": f"o{i}", "customer": f"c{i % 6}", "amount": i + 0.5}


def table_as_of(records: list, ends: dict[int, int]) -> dict[str, dict]:
    """The table a checkpoint that pinned ``ends`` joins against, recomputed from the topic's records."""
    table: dict[str, dict] = {}
    for m in sorted(records, key=lambda m: (m.partition(), m.offset())):
        if m.offset() < ends.get(m.partition(), 0):
            if m.value() is None:
                table.pop(m.key().decode(), None)
            else:
                table[m.key().decode()] = json.loads(m.value())
    return table


def expected_outputs(pipeline, table_records: list, since: int = 0) -> tuple[list[dict], list[tuple[str, str]]]:
    """Each completed checkpoint's orders (from ``since``), enriched by the table it pinned, recomputed here;
    and the dead letters (order id, error)."""
    s = store(pipeline)
    orders = {(m.partition(), m.offset()): json.loads(m.value()) for m in read_committed(pipeline.bootstrap,
                                                                                          pipeline.source)}
    out, dead = [], []
    for cid in s.checkpoint_ids():
        view = s.view(cid)
        if view is None or view.completed is None or cid < since:
            continue
        pin = view.claim.tables["customers"]
        ends = {**(pin.base.ends if pin.base else {}), **{r.partition: r.end for r in pin.ranges}}
        table = table_as_of(table_records, ends)
        assert dict(view.completed.tables["customers"].ends) == ends
        for r in view.delivered_ranges:
            for offset in range(r.start, r.end):
                o = orders[(r.partition, offset)]
                row = table.get(o["customer"])
                if row is None:
                    dead.append((o["order_id"], NO_ROW.format(o["customer"])))
                    continue
                same = sum(1 for c in table.values() if c.get("tier") == row.get("tier"))
                out.append({"order_id": o["order_id"], "customer": o["customer"], "name": row["name"],
                            "tier": row.get("tier"), "same_tier": same})
    return sorted(out, key=lambda r: r["order_id"]), sorted(dead)


def found_outputs(pipeline, since_offsets: dict | None = None) -> tuple[list[dict], list[tuple[str, str]]]:
    out = [json.loads(m.value()) for m in read_committed(pipeline.bootstrap, pipeline.sink)]
    dead = [(json.loads(m.value())["order_id"], dict(m.headers() or [])["lockstep.error"].decode())
            for m in read_committed(pipeline.bootstrap, pipeline.dead_letters)]
    return sorted(out, key=lambda r: r["order_id"]), sorted(dead)


def test_a_stream_table_join_is_exactly_once_against_each_checkpoints_pinned_table(tmp_path, bootstrap, unique):
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient

    from lockstep.model.failpoints import FAILPOINTS, ICEBERG_FAILPOINTS, STATE_FAILPOINTS
    from lockstep.model.output_contract import WRITER_FAILPOINTS

    pipeline, table_topic = with_table(tmp_path, bootstrap, unique)
    # c0..c3 to start with; c4 and c5 have no row (their orders are dead letters until c4 is added)
    produce(bootstrap, table_topic, [(f"c{i}", {"name": f"customer {i}", "tier": "gold" if i % 2 else "silver"})
                                     for i in range(4)])
    produce(bootstrap, pipeline.source, [order(i) for i in range(-12, 0)])
    assert run(pipeline).returncode == 0  # a first checkpoint against the first version of the table
    points = [f for f in FAILPOINTS if f not in (*STATE_FAILPOINTS, *ICEBERG_FAILPOINTS, *WRITER_FAILPOINTS)]
    for n, point in enumerate(points):
        produce(bootstrap, pipeline.source, [order(i) for i in range(n * 12, n * 12 + 12)])
        # a customer changes before every run; c1 is deleted (a tombstone) at the 3rd, c4 added at the 5th
        produce(bootstrap, table_topic, [(f"c{n % 4}", {"name": f"customer {n % 4} v{n}", "tier": f"t{n % 3}"})])
        if n == 2:
            produce(bootstrap, table_topic, [("c1", None)])
        if n == 4:
            produce(bootstrap, table_topic, [("c4", {"name": "customer 4", "tier": "t1"})])
        crash_at(pipeline, point)  # and the failpoint is what stopped it
    finished = run(pipeline)
    assert finished.returncode == 0, finished.stderr[-3000:]

    table_records = read_committed(bootstrap, table_topic)
    expected = expected_outputs(pipeline, table_records)
    assert expected[0] and expected[1], "some orders are enriched and some dead-lettered"
    versions = {json.dumps(v.completed.tables["customers"].ends, sort_keys=True)
                for v in map(store(pipeline).view, store(pipeline).checkpoint_ids()) if v and v.completed}
    assert len(versions) >= 3, "orders met several versions of the table"
    assert {r["tier"] for r in expected[0]} >= {"gold", "silver", "t0"}
    assert found_outputs(pipeline) == expected
    assert open_transactions(pipeline) == []
    s = store(pipeline)
    latest = s.latest_completed()
    final = latest.completed.tables["customers"] if latest is not None and latest.completed else None
    assert final is not None and final.keys == len(table_as_of(table_records, dict(final.ends)))

    # Garbage collection kept the files of every completed checkpoint's version and deleted the rest (the
    # versions of the checkpoints the crashes aborted).
    named = {f for v in map(s.view, s.checkpoint_ids()) if v and v.completed for t in v.completed.tables.values()
             for f in t.files}
    listed = {k for k in s.state_files().listing() if "/table-" in k}
    assert named <= listed and listed - named == set(), sorted(listed - named)

    # The table topic's records are deleted (retention, or a compaction that dropped old versions): verify
    # recomputes every checkpoint from the versions the checkpoints stored, never from the topic.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ends = {p: o for p, o in latest.completed.tables["customers"].ends.items()}
    for future in admin.delete_records([KafkaPartition(table_topic, p, o) for p, o in ends.items()]).values():
        future.result(30)
    report = verify(pipeline)
    assert report["ok"] and (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["covered_offsets"] == 12 * (len(points) + 1)
    same_output(pipeline)  # each checkpoint computed again against the table version it committed: the same

    # A savepoint, then orders and a customer change; a restore from the savepoint starts from its table
    # version and reads the table's updates since (the deleted records are not read again).
    created = lockstep("savepoint", "create", "before-last", "--spec", str(pipeline.spec_path))
    assert created.returncode == 0, created.stderr
    saved = s.get_savepoint("before-last")
    assert saved.tables["customers"] == latest.completed.tables["customers"]
    produce(bootstrap, pipeline.source, [order(i) for i in range(1000, 1012)])
    produce(bootstrap, table_topic, [("c5", {"name": "customer 5", "tier": "gold"})])
    assert run(pipeline).returncode == 0
    restored = run(pipeline, "--restore-from", "before-last")
    assert restored.returncode == 0, restored.stderr[-3000:]
    again = s.latest_completed()
    assert again.claim.restored_from == "before-last"
    pin = again.claim.tables["customers"]
    assert pin.base == saved.tables["customers"] and pin.records == 1  # c5's record only
    table_records += read_committed(bootstrap, table_topic)  # the records since the deletion: c5's
    expected_out, expected_dead = expected_outputs(pipeline, table_records, since=again.checkpoint_id)
    restored_ids = {f"o{i}" for i in range(1000, 1012)}
    out, dead = found_outputs(pipeline)
    # the restore wrote the last 12 orders again, each against the restored checkpoint's pinned table
    again_out = [r for r in out if r["order_id"] in restored_ids]
    assert sorted({json.dumps(r, sort_keys=True) for r in again_out}) == sorted(
        json.dumps(r, sort_keys=True) for r in expected_out)
    assert all(r["name"] == "customer 5" for r in expected_out if r["customer"] == "c5")
    report = verify(pipeline, "--since-checkpoint", str(again.checkpoint_id))
    assert report["ok"], report


def test_an_sql_join_reads_the_tables_view_and_a_left_join_keeps_every_record(tmp_path, bootstrap, unique):
    """Without a declared join, an SQL query joins the table's view itself (here a LEFT JOIN on the raw key):
    every order once, with null where its customer has no row."""
    query = """
    SELECT i.topic, i.partition, i.offset, i.key,
           named_struct('order_id', i.data.order_id, 'name', c.data.name) AS data
    FROM input i LEFT JOIN customers c ON i.data.customer = c.key
    """
    pipeline, table_topic = with_table(tmp_path, bootstrap, unique)
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["transform"] = {"sql": query}
    del doc["tables"]["customers"]["join"]
    pipeline.spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    produce(bootstrap, table_topic, [("c1", {"name": "one"}), ("c2", {"name": "two"})])
    produce(bootstrap, pipeline.source, [order(i) for i in range(12)])
    first = run(pipeline)
    assert first.returncode == 0, first.stderr[-3000:]
    got = {r["order_id"]: r.get("name") for r in (json.loads(m.value())
                                                  for m in read_committed(bootstrap, pipeline.sink))}
    assert got == {f"o{i}": {1: "one", 2: "two"}.get(i % 6) for i in range(12)}
    report = verify(pipeline)
    assert report["ok"] and report["covered_offsets"] == 12, report

    # `lockstep state stats` and `state show --table` show the committed table
    stats = lockstep("state", "stats", "--spec", str(pipeline.spec_path), "--json")
    assert stats.returncode == 0, stats.stderr
    (figures,) = json.loads(stats.stdout)["tables"]
    assert (figures["table"], figures["keys"], figures["files"]) == ("customers", 2, 1)
    shown = lockstep("state", "show", "--spec", str(pipeline.spec_path), "--table", "customers", "--key", "c2",
                     "--json")
    assert shown.returncode == 0, shown.stderr
    assert [(r["key"], json.loads(r["value"])) for r in json.loads(shown.stdout)["rows"]] == [("c2", {"name": "two"})]

    # `lockstep validate --connect` finds the table's topic and analyzes the query against the table's view
    checked = lockstep("validate", str(pipeline.spec_path), "--connect", "--json", timeout=120)
    (found,) = json.loads(checked.stdout)["specs"]
    assert checked.returncode == 0 and {"field": "tables.customers.topic", "topic": table_topic,
                                        "partitions": 2} in found["topics"], found
    doc["transform"] = {"sql": query.replace("c.data.name", "c.data.nmae")}
    doc["tables"]["customers"]["topic"] = f"{table_topic}.missing"
    pipeline.spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    checked = lockstep("validate", str(pipeline.spec_path), "--connect", "--json", timeout=120)
    (found,) = json.loads(checked.stdout)["specs"]
    assert checked.returncode == 1, found
    assert {p["field"] for p in found["problems"]} == {"tables.customers.topic", "transform.sql"}, found
    assert any("nmae" in p["reason"] for p in found["problems"]), found


# ---- a table's keys are its decoded keys; a table record that does not decode ------------------------------------
ENRICH = """
SELECT topic, partition, offset, key, named_struct('order_id', data.order_id, 'name', customers.data.name) AS data
FROM input
"""


def keyed_table(tmp_path, bootstrap, unique, key: dict | None = None, by: str = "data.customer"):
    """Orders (JSON) joined (inner, dead-lettering an order without a row) with ``customers``, whose key format is
    ``key`` (a string by default), by ``by``; the query keeps each order's id and its customer's name."""
    pipeline, table_topic = with_table(tmp_path, bootstrap, unique)
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["transform"] = {"sql": ENRICH}
    doc["tables"]["customers"]["join"]["by"] = by
    if key is not None:
        doc["tables"]["customers"]["key"] = key
    pipeline.spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return pipeline, table_topic


def produce_raw(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None, int, int]]) -> None:
    """``records`` as (key, value, partition, timestamp ms), as they are."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, partition, at in records:
        producer.produce(topic, value, key=key, partition=partition, timestamp=at)
    producer.flush(30)


def names(pipeline) -> dict[str, str | None]:
    return {r["order_id"]: r["name"] for r in (json.loads(m.value()) for m in read_committed(pipeline.bootstrap,
                                                                                             pipeline.sink))}


def dead_letters(pipeline) -> list[tuple[str, bytes, str]]:
    return [(dict(m.headers() or [])["lockstep.source.topic"].decode(), m.value(),
             dict(m.headers() or [])["lockstep.error"].decode())
            for m in read_committed(pipeline.bootstrap, pipeline.dead_letters)]


def test_two_encodings_of_one_key_are_one_row_and_a_tombstone_of_either_deletes_it(tmp_path, bootstrap, unique):
    """A JSON-keyed table whose producers wrote one key two ways (``{"id":"c1"}``, ``{"id": "c1"}``, in two
    partitions, as their bytes hash): one row, the later record's, and each order joins it once; then a
    tombstone of the first encoding deletes the key, so the next checkpoint's orders of c1 have no row."""
    key = {"format": "json", "schema": {"type": "object", "properties": {"id": {"type": "string"}},
                                        "required": ["id"]}}
    pipeline, table_topic = keyed_table(tmp_path, bootstrap, unique, key, by="named_struct('id', data.customer)")
    t0 = int(time.time() * 1000) - 60_000  # explicit, and recent: older records are deleted by retention
    produce_raw(bootstrap, table_topic, [(b'{"id":"c1"}', b'{"name":"one"}', 0, t0),
                                         (b'{"id": "c1"}', b'{"name":"uno"}', 1, t0 + 1000),
                                         (b'{"id":"c2"}', b'{"name":"two"}', 0, t0)])
    produce(bootstrap, pipeline.source, [("o1", {"order_id": "o1", "customer": "c1"}),
                                         ("o2", {"order_id": "o2", "customer": "c2"}),
                                         ("o3", {"order_id": "o3", "customer": "c1"})])
    first = run(pipeline)
    assert first.returncode == 0, first.stderr[-3000:]
    got = [json.loads(m.value())["order_id"] for m in read_committed(bootstrap, pipeline.sink)]
    assert sorted(got) == ["o1", "o2", "o3"], got  # each once
    assert names(pipeline) == {"o1": "uno", "o2": "two", "o3": "uno"}
    assert store(pipeline).view(1).completed.tables["customers"].keys == 2

    produce_raw(bootstrap, table_topic, [(b'{"id":"c1"}', None, 0, t0 + 2000)])
    produce(bootstrap, pipeline.source, [("o5", {"order_id": "o5", "customer": "c1"}),
                                         ("o6", {"order_id": "o6", "customer": "c2"})])
    second = run(pipeline)
    assert second.returncode == 0, second.stderr[-3000:]
    assert sorted(names(pipeline)) == ["o1", "o2", "o3", "o6"]
    assert [(t, json.loads(v)["order_id"], e.split(" for ")[0]) for t, v, e in dead_letters(pipeline)] == [
        (pipeline.source, "o5", "no row in table customers")]
    assert store(pipeline).view(2).completed.tables["customers"].keys == 1


def test_a_table_record_that_does_not_decode_is_dead_lettered_and_its_keys_previous_row_still_joins(
        tmp_path, bootstrap, unique):
    """A customer's new value that is not JSON: under ``on_error: fail`` the checkpoint stops for good, naming the
    record and the way out, and writes nothing; with the policy set back to ``dead_letter`` (the default), the
    next run goes on: the record goes to the dead-letter topic as it came, with the reason (its provenance the
    table topic's), and the customer's row stays the one before it, which the checkpoint's orders join; a later
    good value replaces it."""
    pipeline, table_topic = keyed_table(tmp_path, bootstrap, unique)
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["tables"]["customers"]["on_error"] = "fail"
    pipeline.spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    t0 = int(time.time() * 1000) - 60_000  # explicit, and recent: older records are deleted by retention
    produce_raw(bootstrap, table_topic, [(b"c1", b'{"name":"one"}', 0, t0), (b"c2", b'{"name":"two"}', 0, t0)])
    produce(bootstrap, pipeline.source, [("o1", {"order_id": "o1", "customer": "c1"})])
    assert run(pipeline).returncode == 0
    produce_raw(bootstrap, table_topic, [(b"c2", b"not json", 0, t0 + 1000), (b"c1", b'{"name":"uno"}', 1, t0 + 1000)])
    produce(bootstrap, pipeline.source, [("o2", {"order_id": "o2", "customer": "c2"}),
                                         ("o3", {"order_id": "o3", "customer": "c1"})])
    strict = run(pipeline)
    last = strict.stderr.strip().splitlines()[-1]
    assert strict.returncode != 0 and f"record {table_topic}:0@2 does not decode" in last, strict.stderr[-3000:]
    assert "tables.customers.on_error is fail" in last and "on_error: dead_letter" in last, last
    assert names(pipeline) == {"o1": "one"} and dead_letters(pipeline) == [], "nothing written"
    doc["tables"]["customers"]["on_error"] = "dead_letter"
    pipeline.spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    second = run(pipeline)
    assert second.returncode == 0, second.stderr[-3000:]
    assert names(pipeline) == {"o1": "one", "o2": "two", "o3": "uno"}
    ((topic, value, error),) = dead_letters(pipeline)
    assert (topic, value) == (table_topic, b"not json")
    assert error.startswith("table customers: value does not match its schema") and "keeps the row it had" in error, error
    view = store(pipeline).latest_completed()
    assert view.completed.tables["customers"].keys == 2 and view.prepared.records_dead_lettered == 1
    # It is a table's row, not the transform's input: `deadletters` lists it as one and a replay leaves it out
    # (fed to the transform as an order, it would be rejected again, or worse, written as one).
    listed = lockstep("deadletters", "list", "--spec", str(pipeline.spec_path), "--json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert [(r["original"].split(":")[0], r["table"]) for r in json.loads(listed.stdout)] == [(table_topic, True)]
    replayed = lockstep("deadletters", "replay", "--spec", str(pipeline.spec_path), "--json")
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    ((row,),) = [json.loads(replayed.stdout)]
    assert (row["skipped_tables"], row["replayed"], row["dead_letters_read"]) == (1, 0, 1), row
    assert any("table's topic" in w for w in row["warnings"]), row
    assert names(pipeline) == {"o1": "one", "o2": "two", "o3": "uno"} and len(dead_letters(pipeline)) == 1
    assert len(list(read_committed(pipeline.bootstrap, pipeline.sink))) == 3


# ---- an event-time (temporal) join ------------------------------------------------------------------------------
T0 = 1_700_000_000  # epoch seconds
PRICE_SCHEMA = {"type": "object", "properties": {"price": {"type": "number"}}}
ORDER_AT_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "product": {"type": "string"},
                                                    "created_at": {"type": "integer"}}, "required": ["order_id"]}
TEMPORAL_QUERY = """
SELECT topic, partition, offset, key,
       named_struct('order_id', data.order_id, 'product', data.product, 'price', prices.data.price,
                    'priced_at', prices.offset) AS data
FROM input
"""


def temporal(tmp_path, bootstrap, unique):
    pipeline = make(tmp_path, bootstrap, unique, {"value": {"format": "json", "schema": ORDER_AT_SCHEMA}},
                    {"value": "json"}, {"sql": TEMPORAL_QUERY})
    table_topic = f"{pipeline.source}.prices"
    # compacted, as a table's topic is: time retention would delete versions timestamped in 2023 at once
    ensure_topics(bootstrap, {table_topic: 2}, {"cleanup.policy": "compact"})
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["tables"] = {"prices": {"topic": table_topic, "value": {"format": "json", "schema": PRICE_SCHEMA},
                                "versions": "30d",
                                "join": {"by": "data.product", "as_of": "data.created_at", "how": "inner",
                                         "missing": "dead_letter"}}}
    pipeline.spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return pipeline, table_topic


def produce_prices(bootstrap: str, topic: str, versions: list[tuple[str, int, float | None]]) -> None:
    """(product, seconds after T0, price or None: deleted) each, timestamped then."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for product, at, price in versions:
        producer.produce(topic, None if price is None else json.dumps({"price": price}).encode(),
                         key=product.encode(), partition=int(product[1:]) % 2, timestamp=(T0 + at) * 1000)
    producer.flush(30)


def price_as_of(records: list, ends: dict[int, int], product: str, at_ms: int) -> tuple[float, int] | None:
    """The price (and its offset) ``product`` had at ``at_ms``, among the versions a checkpoint pinned: the last
    at or before it by (timestamp, partition, offset); None when that is a deletion or there is none."""
    versions = sorted((m.timestamp()[1], m.partition(), m.offset(), m.value()) for m in records
                      if m.key().decode() == product and m.offset() < ends.get(m.partition(), 0))
    valid = [v for v in versions if v[0] <= at_ms]
    if not valid or valid[-1][3] is None:
        return None
    return json.loads(valid[-1][3])["price"], valid[-1][2]


def test_a_temporal_join_meets_each_record_with_the_version_valid_at_its_event_time(tmp_path, bootstrap, unique):
    """Prices change, are deleted and corrected late (a version older than ones already read) between
    checkpoints, each run crashed at the next failpoint: every order meets the price its product had at the
    order's event time among the versions its checkpoint pinned, recomputed here; an order before its product's
    first price, after a deletion, or of a product without prices is dead-lettered once with the reason."""
    from lockstep.model.failpoints import FAILPOINTS, ICEBERG_FAILPOINTS, STATE_FAILPOINTS
    from lockstep.model.output_contract import WRITER_FAILPOINTS

    pipeline, table_topic = temporal(tmp_path, bootstrap, unique)
    produce_prices(bootstrap, table_topic, [("p0", 0, 10.0), ("p0", 100, 11.0), ("p0", 200, None), ("p0", 300, 12.0),
                                            ("p1", 50, 20.0)])

    def orders(n: int) -> list[tuple[str, dict]]:  # 12 orders of p0..p2 between T0 - 50 s and T0 + 400 s
        return [(f"o{i}", {"order_id": f"o{i}", "product": f"p{i % 3}", "created_at": T0 - 50 + (i * 37) % 450})
                for i in range(n * 12, n * 12 + 12)]

    produce(bootstrap, pipeline.source, orders(0))
    assert run(pipeline).returncode == 0
    points = [f for f in FAILPOINTS if f not in (*STATE_FAILPOINTS, *ICEBERG_FAILPOINTS, *WRITER_FAILPOINTS)]
    late = [("p1", 10, 19.0), ("p1", 250, 21.0), ("p0", 150, 11.5), ("p1", 120, None), ("p0", 350, 12.5)]
    for n, point in enumerate(points, start=1):
        produce(bootstrap, pipeline.source, orders(n))
        if n <= len(late):  # a version between checkpoints, some of them older than versions already read
            produce_prices(bootstrap, table_topic, [late[n - 1]])
        crash_at(pipeline, point)
    finished = run(pipeline)
    assert finished.returncode == 0, finished.stderr[-3000:]

    report = verify(pipeline)
    assert report["ok"] and report["covered_offsets"] == 12 * (len(points) + 1), report
    same_output(pipeline)  # each checkpoint computed again meets the versions valid at its records' times: the same
    # A savepoint, more orders and a late correction, then a restore from the savepoint: the restored checkpoint
    # reads the orders after it again, against the savepoint's versions and the versions read since.
    assert lockstep("savepoint", "create", "sp", "--spec", str(pipeline.spec_path)).returncode == 0
    produce(bootstrap, pipeline.source, orders(len(points) + 1))
    produce_prices(bootstrap, table_topic, [("p2", -100, 30.0)])  # p2's first price, dated before every order
    assert run(pipeline).returncode == 0
    restored = run(pipeline, "--restore-from", "sp")
    assert restored.returncode == 0, restored.stderr[-3000:]
    s = store(pipeline)
    again = s.latest_completed()
    assert again.claim.tables["prices"].base == s.get_savepoint("sp").tables["prices"]
    assert again.claim.tables["prices"].records == 1  # the correction, read on top of the savepoint's version
    report = verify(pipeline, "--since-checkpoint", str(again.checkpoint_id))
    assert report["ok"] and report["covered_offsets"] == 12, report

    records = read_committed(bootstrap, table_topic)
    sent = {(m.partition(), m.offset()): json.loads(m.value()) for m in read_committed(bootstrap, pipeline.source)}
    want, dead = [], []
    for cid in s.checkpoint_ids():
        view = s.view(cid)
        if view is None or view.completed is None:
            continue
        ends = dict(view.completed.tables["prices"].ends)
        for r in view.delivered_ranges:
            for offset in range(r.start, r.end):
                o = sent[(r.partition, offset)]
                found = price_as_of(records, ends, o["product"], o["created_at"] * 1000)
                if found is None:
                    dead.append((o["order_id"], f"no row in table prices for data.product = {o['product']} as of "
                                                f"{o['created_at'] * 1000} (epoch ms) (tables.prices.join)"))
                else:
                    want.append({"order_id": o["order_id"], "product": o["product"], "price": found[0],
                                 "priced_at": found[1]})
    def canonical(r: dict) -> str:
        return json.dumps(r, sort_keys=True)

    got = sorted((json.loads(m.value()) for m in read_committed(bootstrap, pipeline.sink)), key=canonical)
    got_dead = sorted((json.loads(m.value())["order_id"], dict(m.headers() or [])["lockstep.error"].decode())
                      for m in read_committed(bootstrap, pipeline.dead_letters))
    # every checkpoint's outputs, the restored one's too (its orders twice: once per checkpoint that read them)
    assert got == sorted(want, key=canonical) and len(got) > 12
    assert got_dead == sorted(dead) and dead
    assert {r["price"] for r in got} >= {10.0, 11.0, 12.0, 20.0, 30.0}, "orders met several versions"
    assert open_transactions(pipeline) == []


# ---- what a replay of an aborted checkpoint reuses (rules.replay, docs/semantics.md) ---------------------------
#: The replays' output: each order with its customer's tier; version 2 adds a field (a transform that now adds one).
TIERED_V1 = {"type": "record", "name": "Tiered", "fields": [{"name": "order_id", "type": ["null", "string"]},
                                                            {"name": "tier", "type": ["null", "string"]}]}
TIERED_V2 = {**TIERED_V1, "fields": [*TIERED_V1["fields"], {"name": "channel", "type": ["null", "string"],
                                                            "default": None}]}
TIERED_QUERY = "SELECT topic, partition, offset, key, named_struct('order_id', data.order_id, 'tier', " \
               "customers.data.tier{}) AS data FROM input"


def tiered(tmp_path, bootstrap, unique, schema: dict, query: str):
    """Orders (JSON) left-joined with a ``customers`` table, written in Avro under a registry subject."""
    pipeline = make(tmp_path, bootstrap, unique, {"value": {"format": "json", "schema": ORDER_SCHEMA}},
                    {"value": {"format": "avro-confluent", "schema": schema, "auto_register": True}}, {"sql": query})
    table_topic = f"{pipeline.source}.customers"
    ensure_topics(bootstrap, {table_topic: 2})
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["tables"] = {"customers": {"topic": table_topic, "value": {"format": "json", "schema": CUSTOMER_SCHEMA},
                                   "join": {"by": "data.customer"}}}
    pipeline.spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return pipeline, table_topic


def customers(tier: str, *which: int) -> list[tuple[str, dict | None]]:
    return [(f"c{i}", {"name": f"customer {i}", "tier": tier}) for i in which]


def outputs(pipeline) -> dict[str, tuple[int, dict]]:
    """Each order's output: the schema id it was written with and its record (Avro, Confluent's framing)."""
    import io
    import struct

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from fastavro import schemaless_reader

    from lockstep.formats.registry import registry_for

    registry = SchemaRegistryClient({"url": registry_for("schema_registry_default").url, "timeout": 10})
    out = {}
    for m in read_committed(pipeline.bootstrap, pipeline.sink):
        magic, schema_id = struct.unpack(">bI", m.value()[:5])
        assert magic == 0
        record = schemaless_reader(io.BytesIO(m.value()[5:]), json.loads(registry.get_schema(schema_id).schema_str))
        out[record["order_id"]] = (schema_id, record)
    return out


def test_a_replay_joins_the_table_version_its_crashed_first_attempt_pinned(tmp_path, bootstrap, unique):
    """Checkpoint 1 is planned, its run crashes at job.before_prepared (after it built its table version); the
    table changes; the next run aborts it and replays its ranges against the version the first attempt joined,
    not against the topic as it stands then (issue 67: 13 of 24 orders carried a tier the first attempt never saw)."""
    pipeline, table_topic = tiered(tmp_path, bootstrap, unique, TIERED_V1, TIERED_QUERY.format(""))
    produce(bootstrap, table_topic, customers("old", 0, 1, 2, 3))
    produce(bootstrap, pipeline.source, [order(i) for i in range(12)])
    produce(bootstrap, table_topic, customers("before", 0, 1))  # updates before the first attempt's plan
    crash_at(pipeline, "job.before_prepared")
    first = store(pipeline).view(1).claim
    produce(bootstrap, table_topic, customers("after", 0, 1, 2, 3, 4, 5))  # updates after its crash
    replayed = run(pipeline)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    tiers = {order_id: record["tier"] for order_id, (_, record) in outputs(pipeline).items()}
    # as the first attempt joined them: c0, c1 updated before its plan, c2, c3 as they were, c4, c5 unknown then
    assert tiers == {f"o{i}": {0: "before", 1: "before", 2: "old", 3: "old"}.get(i % 6) for i in range(12)}, tiers
    view = store(pipeline).view(2)
    assert view.completed is not None and view.claim.ranges == first.ranges
    assert view.claim.tables["customers"].same_version(first.tables["customers"])
    assert "checkpoint 2 replays aborted checkpoint 1's ranges with its pins" in replayed.stderr


def test_a_replay_after_the_sink_schema_changed_writes_with_the_new_schema_and_says_so(tmp_path, bootstrap, unique):
    """The transform now adds a field and the spec's sink schema with it, while a checkpoint planned with the old
    ones is in flight: its replay is a new claim with fresh pins (the new schema, the table as it stands) and
    one line names the change, instead of replaying the old schema at every later plan."""
    pipeline, table_topic = tiered(tmp_path, bootstrap, unique, TIERED_V1, TIERED_QUERY.format(""))
    produce(bootstrap, table_topic, customers("old", 0, 1, 2, 3))
    produce(bootstrap, pipeline.source, [order(i) for i in range(12)])
    crash_at(pipeline, "job.before_prepared")
    v1 = store(pipeline).view(1).claim.schema_ids["sink.value"]
    produce(bootstrap, table_topic, customers("late", 2))
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["sink"]["value"]["schema"] = TIERED_V2
    doc["transform"] = {"sql": TIERED_QUERY.format(", 'channel', 'web'")}
    pipeline.spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    replayed = run(pipeline)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert ("checkpoint 2 replays aborted checkpoint 1's ranges with fresh pins: the spec changed since "
            "(sink.value.schema (now inline))") in replayed.stderr, replayed.stderr[-3000:]
    claim = store(pipeline).view(2).claim
    v2 = claim.schema_ids["sink.value"]
    assert v2 != v1 and claim.replays is None
    written = outputs(pipeline)
    assert {schema_id for schema_id, _ in written.values()} == {v2} and len(written) == 12
    assert {order_id: (record["tier"], record["channel"]) for order_id, (_, record) in written.items()} == {
        f"o{i}": ({0: "old", 1: "old", 2: "late", 3: "old"}.get(i % 6), "web") for i in range(12)}
