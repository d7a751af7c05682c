"""``lockstep validate --connect`` against the real services: a missing topic, and a stateful spec whose
key groups differ from the state one real checkpoint stored."""
from __future__ import annotations

import json

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from .engine_helpers import lockstep, make_pipeline, run

WINDOW = {"event_time": {"column": "created_at", "out_of_orderness": "2s"},
          "window": {"key": "customer", "size": "10s", "aggregates": {"orders": "count(*)"}}}


def validate(path) -> tuple[int, dict]:
    result = lockstep("validate", str(path), "--connect", "--json", timeout=120)
    assert result.stdout.strip(), result.stderr[-3000:]
    return result.returncode, json.loads(result.stdout)


def test_connect_refuses_a_missing_topic_and_key_groups_that_differ_from_the_stored_state(
        tmp_path, bootstrap, unique, spark_connect):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["transform"] = "lockstep_examples.orders:parse"
    doc["state"] = {"key_groups": 4, **WINDOW}
    pipeline.spec_path.write_text(yaml.safe_dump(doc))

    code, report = validate(pipeline.spec_path)
    assert code == 0, report
    (spec,) = report["specs"]
    assert {t["topic"]: t["partitions"] for t in spec["topics"]} == {
        pipeline.source: 2, pipeline.sink: 2, pipeline.dead_letters: 1}

    # A missing topic: refused, and not created by the look (the platform's broker creates topics on use).
    missing = f"missing-{unique}"
    (tmp_path / "missing.yaml").write_text(yaml.safe_dump({**doc, "sink": {**doc["sink"], "dead_letter_topic": missing}}))
    code, report = validate(tmp_path / "missing.yaml")
    assert code == 1, report
    (spec,) = report["specs"]
    assert [p["field"] for p in spec["problems"]] == ["sink.dead_letter_topic"], spec
    assert f"topic {missing!r} does not exist" in spec["problems"][0]["reason"]
    assert {"field": "sink.dead_letter_topic", "topic": missing, "partitions": None} in spec["topics"]
    assert missing not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics

    # One real checkpoint stores state in 4 key groups; the spec then declares 8.
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(6):
        producer.produce(pipeline.source, json.dumps({"order_id": f"o{i}", "customer": f"c{i % 3}", "amount": 1.0,
                                                      "created_at": 1_700_000_000 + i}).encode(), partition=i % 2)
    producer.flush(30)
    done = run(pipeline)
    assert done.returncode == 0, done.stderr[-3000:]
    doc["state"]["key_groups"] = 8
    pipeline.spec_path.write_text(yaml.safe_dump(doc))
    code, report = validate(pipeline.spec_path)
    assert code == 1, report
    (spec,) = report["specs"]
    assert spec["state"] == {"checkpoint": 1, "operator": "window", "key_groups": 4, "rekey_to": None}, spec
    (problem,) = spec["problems"]
    assert problem["field"] == "state.key_groups"
    assert all(w in problem["reason"] for w in ("state.key_groups is 8", "has 4 key groups",
                                                 "lockstep state rekey", "--key-groups 8")), problem


def test_connect_analyzes_each_sql_spec_in_a_session_of_its_own(tmp_path, bootstrap, unique, spark_connect):
    """Two SQL specs in one folder: ``a`` declares a table ``customers``, ``b`` declares none but its query
    reads ``customers``. Checked in one session, ``a``'s view would let ``b`` pass; each in its own, ``b`` is
    refused on ``transform.sql``, naming the view, and ``a`` still passes."""
    from .test_tables import with_table

    pipeline, _ = with_table(tmp_path, bootstrap, unique)
    folder = tmp_path / "specs"
    folder.mkdir()
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    (folder / "a.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    other = {**doc, "name": f"{doc['name']}-b", "tables": {},
             "transactions": {**doc["transactions"], "id_prefix": f"b{doc['transactions']['id_prefix']}"},
             "transform": {"sql": "SELECT i.topic, i.partition, i.offset, i.key, c.data FROM input i "
                                  "JOIN customers c ON i.data.customer = c.key"}}
    del other["tables"]
    (folder / "b.yaml").write_text(yaml.safe_dump(other, sort_keys=False))
    code, report = validate(folder)
    by_file = {s["path"].rsplit("/", 1)[-1]: s for s in report["specs"]}
    assert code == 1, report
    assert by_file["a.yaml"]["problems"] == [], by_file["a.yaml"]
    problems = by_file["b.yaml"]["problems"]
    assert [p["field"] for p in problems] == ["transform.sql"] and "customers" in problems[0]["reason"], problems
