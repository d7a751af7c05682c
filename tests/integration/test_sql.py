"""SQL pipelines end to end on real services (connect mode, the default): a query over the view ``input``
filters and reshapes Avro orders (``data.<field>``), dead-letters through its ``error`` column, exactly
once and `lockstep verify` clean; a query with a misspelt column fails the checkpoint terminally before
any transaction opens, its one last line naming the spec, Spark's line and position; a stateful pipeline's
windows read an SQL query's columns (docs/formats.md, "SQL transforms")."""
from __future__ import annotations

import json

import pytest

from tests.support.data import produce_orders, read_committed, topic_partitions

from .engine_helpers import make_pipeline, open_transactions, run, store, verify
from .test_formats import make, order, produce, registry  # noqa: F401 - registry is a fixture used here

pytestmark = pytest.mark.integration

QUERY = """
SELECT topic, partition, offset, key,
       to_json(named_struct('order', data.order_id, 'cents', CAST(round(data.amount * 100) AS BIGINT))) AS value,
       CASE WHEN data.amount < 0 THEN 'negative amount' END AS error
FROM input
WHERE data.currency = 'EUR'
"""


def test_an_sql_pipeline_filters_reshapes_and_dead_letters_exactly_once(tmp_path, bootstrap, unique, registry):  # noqa: F811
    pipeline = make(tmp_path, bootstrap, unique, {"value": "avro-confluent"}, {}, {"sql_file": "orders.sql"})
    (pipeline.spec_path.parent / "orders.sql").write_text(QUERY)  # beside the spec, as the spec names it
    # every 9th order has a negative amount (a dead letter), every 4th is in USD (filtered out)
    orders = [(i, {**order(i), "currency": "USD" if i % 4 == 0 else "EUR"}) for i in range(1, 25)]
    produce(pipeline, registry, orders[:12])
    first = run(pipeline)
    assert first.returncode == 0, first.stderr[-3000:]
    produce(pipeline, registry, orders[12:])
    second = run(pipeline)
    assert second.returncode == 0, second.stderr[-3000:]

    eur = [o for _, o in orders if o["currency"] == "EUR"]
    got = sorted((json.loads(m.value()) for m in read_committed(pipeline.bootstrap, pipeline.sink)),
                 key=lambda r: r["order"])
    assert got == sorted(({"order": o["order_id"], "cents": round(o["amount"] * 100)} for o in eur if o["amount"] >= 0),
                         key=lambda r: r["order"])
    dead = [dict(m.headers() or [])["lockstep.error"].decode()
            for m in read_committed(pipeline.bootstrap, pipeline.dead_letters)]
    assert dead == ["negative amount"] * sum(o["amount"] < 0 for o in eur) and dead
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["covered_offsets"] == len(orders)
    assert open_transactions(pipeline) == []


def test_a_misspelt_column_fails_terminally_before_any_transaction_opens(tmp_path, bootstrap, unique):
    from confluent_kafka import Consumer, TopicPartition

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2,
                             transform={"sql": "SELECT *,\n       upper(CAST(valeu AS STRING)) AS shout\nFROM input"})
    produce_orders(pipeline, 10)

    result = run(pipeline)
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("lockstep: checkpoint 1: the Spark run failed after"), last
    assert f"{pipeline.spec_path}: transform.sql: Spark refused the query: line 2, position " in last, last
    assert "`valeu` cannot be resolved" in last and "a retry fails the same way: fix the cause" in last, last
    assert open_transactions(pipeline) == []
    assert store(pipeline).view(1).prepared is None
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"peek-{unique}"})
    try:  # nothing in the sink, not even uncommitted: no producer wrote to it
        for topic in (pipeline.sink, pipeline.dead_letters):
            assert all(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] == 0
                       for p in topic_partitions(consumer, topic)), topic
    finally:
        consumer.close()


def test_in_a_connect_session_each_application_keeps_its_own_input_and_validate_analyzes(tmp_path, spark_connect):
    """Spark Connect analyzes ``spark.sql`` lazily, by name: a run that applies the query twice (a stateful repair,
    `lockstep verify`) must not see its first output read the second input. And `lockstep validate --connect`'s
    analysis over an empty input of the reader's columns: a good query passes, a misspelt column is refused
    with Spark's line and position."""
    import dataclasses

    from lockstep.spark.connect import connect_mode, new_session
    from lockstep.spec import parse_spec
    from lockstep.sql.analyzer import analyze
    from lockstep.transform import load_transform

    spec = parse_spec({"name": "s", "source": {"topics": ["a"]}, "sink": {"topic": "b", "dead_letter_topic": "c"},
                       "checkpoints": {"store": "s3://lockstep/x"},
                       "transform": {"sql": "SELECT * FROM input WHERE offset % 2 = 0"}}, str(tmp_path / "s.yaml"))
    with connect_mode():
        spark = new_session(spark_connect)
        try:
            def records(start: int):
                return spark.range(start, start + 4).selectExpr(
                    "CAST(CAST(id AS STRING) AS BINARY) AS value", "'a' AS topic", "0 AS partition", "id AS offset")

            transform = load_transform(spec)
            first, second = transform(records(0)), transform(records(100))
            assert sorted(r["offset"] for r in first.collect()) == [0, 2]
            assert sorted(r["offset"] for r in second.collect()) == [100, 102]

            assert analyze(spark, spec) is None
            bad = dataclasses.replace(spec, transform_sql="SELECT *,\n  timestmap FROM input")
            refused = analyze(spark, bad)
            assert refused is not None and refused.startswith(
                f"{spec.path}: transform.sql: Spark refused the query: line 2, position 2: "), refused
            assert "`timestmap` cannot be resolved" in refused and "\n" not in refused, refused
            syntax = analyze(spark, dataclasses.replace(spec, transform_sql="SELECT * FORM input"))
            assert syntax is not None and "line 1, position 14: [PARSE_SYNTAX_ERROR]" in syntax, syntax
            # sink.routes' conditions read the query's output: one over a column it lacks is refused by name.
            sink = dataclasses.replace(spec.sink, routes=(("b.even", "offset % 4 = 0"), ("b.odd", "offest = 1")))
            routed = dataclasses.replace(spec, sink=sink)
            misspelt = analyze(spark, routed)
            assert misspelt is not None and misspelt.startswith(
                f"{spec.path}: sink.routes.b.odd: Spark refused the condition 'offest = 1': "), misspelt
            good = dataclasses.replace(routed, sink=dataclasses.replace(sink, routes=sink.routes[:1]))
            assert analyze(spark, good) is None
        finally:
            spark.stop()


PARSE = """
SELECT *,
       CASE WHEN get_json_object(CAST(value AS STRING), '$.order_id') IS NULL
            THEN 'not a JSON order with order_id' END AS error,
       get_json_object(CAST(value AS STRING), '$.customer') AS customer,
       CAST(get_json_object(CAST(value AS STRING), '$.amount') AS DOUBLE) AS amount,
       CAST(get_json_object(CAST(value AS STRING), '$.created_at') AS BIGINT) AS created_at
FROM input
"""


def test_a_stateful_pipeline_takes_an_sql_transform(tmp_path, bootstrap, unique):
    """Event-time windows over an SQL query's columns, as over a Python transform's: every window the watermark
    passed is emitted once with its counts, the unparsable orders are dead letters, and verify agrees."""
    from .test_state import WINDOW, dead_letter_errors, expected_windows, produce, stateful, window_outputs

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    stateful(pipeline, WINDOW, {"sql": PARSE})
    produced = list(range(40))
    produce(pipeline, produced)
    done = run(pipeline)
    assert done.returncode == 0, done.stderr[-3000:]

    manifest = store(pipeline).latest_completed().completed.state
    found = window_outputs(pipeline, produced)
    assert found and sorted(found) == sorted(expected_windows(produced, manifest.watermark_ms).items())
    assert dead_letter_errors(pipeline) == {"not a JSON order with order_id": 4}
    report = verify(pipeline)
    assert report["ok"] and report["complete"] and report["state_mismatched"] == 0, report
    assert open_transactions(pipeline) == []


#: The demo's orders_by_size.sql alike: it returns `data` and `error`, not the input's `key`, `value` or headers.
DATA_ONLY = """
SELECT topic, partition, offset,
       named_struct('order_id', data.order_id, 'amount', data.amount) AS data,
       CASE WHEN data.amount < 0 THEN 'negative amount' END AS error
FROM input
"""


def test_a_query_that_keeps_only_data_dead_letters_each_record_as_its_input_came(tmp_path, bootstrap, unique):
    """A JSON source with a schema, a query that keeps only ``data`` and rejects negative amounts: every dead
    letter's key, value and headers are its input record's, byte for byte (written in an order and spacing
    the sink's encoder would not give), with the reason after Lockstep's provenance headers."""
    from confluent_kafka import Producer

    from lockstep.model.output_contract import ERROR_HEADER, LEADING_HEADERS, SOURCE_OFFSET, SOURCE_PARTITION

    schema = {"type": "object", "required": ["order_id", "amount"],
              "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}}
    pipeline = make(tmp_path, bootstrap, unique, {"value": {"format": "json", "schema": schema}}, {"value": "json"},
                    {"sql": DATA_ONLY})
    producer = Producer({"bootstrap.servers": pipeline.bootstrap})
    sent: dict[tuple[int, int], tuple[bytes, bytes, list]] = {}

    for i in range(12):
        amount = -i - 0.5 if i % 3 == 0 else i + 0.25
        value = f'{{ "amount" : {amount},  "order_id":"o{i}", "note": "\\u00e9 {i}" }}'.encode()
        headers = [("trace", f"t{i}".encode()), ("raw", bytes([0, 255, i]))]

        def delivered(err, msg, headers=headers):
            assert err is None, err
            sent[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), headers)

        producer.produce(pipeline.source, value, key=f"k-{i}".encode(), partition=i % 2, on_delivery=delivered,
                         headers=headers)
    producer.flush(30)
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]

    dead = read_committed(pipeline.bootstrap, pipeline.dead_letters)
    assert len(dead) == 4
    for m in dead:
        headers = m.headers()
        where = dict(headers)
        key, value, user_headers = sent[(int(where[SOURCE_PARTITION]), int(where[SOURCE_OFFSET]))]
        assert (m.key(), m.value()) == (key, value)
        assert [h for h, _ in headers[:len(LEADING_HEADERS)]] == list(LEADING_HEADERS)
        assert headers[len(LEADING_HEADERS):] == [*user_headers, (ERROR_HEADER, b"negative amount")]
    assert sorted(json.loads(m.value())["order_id"] for m in read_committed(pipeline.bootstrap, pipeline.sink)) == \
        sorted(f"o{i}" for i in range(12) if i % 3)
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert open_transactions(pipeline) == []


def test_a_record_the_query_raises_for_is_dead_lettered_with_sparks_reason_and_the_others_written(
        tmp_path, bootstrap, unique):
    """The issue's case in a query: five good records and one whose amount is "abc", which the query's cast (ANSI
    mode) raises CAST_INVALID_INPUT for: that one goes to the dead-letter topic as it came with Spark's reason, the
    five are written, in one checkpoint."""
    from confluent_kafka import Producer

    query = "SELECT * FROM input WHERE CAST(get_json_object(CAST(value AS STRING), '$.amount') AS INT) > 10"
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, transform={"sql": query})
    producer = Producer({"bootstrap.servers": pipeline.bootstrap})
    values = [json.dumps({"order_id": f"o{i}", "amount": a}).encode() for i, a in enumerate([50, 150, "abc", 20, 5, 99])]
    for i, value in enumerate(values):
        producer.produce(pipeline.source, value, partition=i % 2)
    producer.flush(30)

    done = run(pipeline)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(m.value() for m in read_committed(pipeline.bootstrap, pipeline.sink)) == \
        sorted(values[i] for i in (0, 1, 3, 5))
    [dead] = read_committed(pipeline.bootstrap, pipeline.dead_letters)
    assert dead.value() == values[2]
    error = dict(dead.headers())["lockstep.error"].decode()
    assert error.startswith("transform.sql (the query) raised [CAST_INVALID_INPUT] The value 'abc'"), error
    report = verify(pipeline)  # it sets the record aside as the run did
    assert report["ok"] and report["complete"], report
    assert (report["covered_offsets"], report["actual_outputs"]) == (6, 4 + 1), report
    assert open_transactions(pipeline) == []
