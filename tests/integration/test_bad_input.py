"""Bad input must neither crash a checkpoint nor lose a record (the no-silent-loss invariant): each case ends
in the sink or, with its reason, in the dead-letter topic, exactly once, with either writer.

One pipeline per writer gets every odd record at once (a record too large for the sink topic, a dead
letter too large for the dead-letter topic, values that are not UTF-8, a null value) among normal
orders; the tests then look at what each writer wrote and compare the two. A transform whose Python
row function raises for one record is its own pipeline (the writer plays no part there).
"""
from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from lockstep.model.output_contract import (
    ERROR_HEADER,
    ORIGINAL_SIZE_HEADER,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)

from ..support.data import read_committed
from .engine_helpers import make_pipeline, open_transactions, run, verify

SINK_LIMIT, DEAD_LETTER_LIMIT = 2000, 3000
NORMAL = 20


def order(i: int, **fields) -> bytes:
    return json.dumps({"order_id": f"o{i}", "customer": f"c{i % 7}", "amount": i + 0.5, "currency": "EUR",
                       **fields}).encode()


# (partition, value) in produce order; the odd ones by name so the tests can find them.
ODD = {
    "too_large_for_sink": order(900, customer="x" * 5000),
    "too_large_for_dead_letters": b"not json " + b"y" * 5000,
    "not_utf8": b'\xff\xfe{"order_id": "o901", "amount": 1.5, "currency": "EUR"}',
    "not_utf8_inside_json": b'{"order_id": "o\xff902", "customer": "c\xc3", "amount": 2.5, "currency": "EUR"}',
    "null": None,
}


def set_max_message_bytes(bootstrap: str, topic: str, limit: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def by_source(records) -> dict[tuple[int, int], object]:
    out = {}
    for m in records:
        headers = dict(m.headers())
        where = (int(headers[SOURCE_PARTITION]), int(headers[SOURCE_OFFSET]))
        assert where not in out, f"source record {where} written twice"
        out[where] = m
    return out


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, bootstrap):
    """Per writer: (pipeline, {odd name: source (partition, offset)}, sink by source, dead letters by source)."""
    suffix = tmp_path_factory.mktemp("u").name[-6:]
    results = {}
    for writer in ("jvm", "python"):
        unique = f"bad-{writer[:3]}-{suffix}"  # same length for both writers: same record sizes
        pipeline = make_pipeline(tmp_path_factory.mktemp(writer), bootstrap, unique, partitions=2, writer=writer)
        set_max_message_bytes(bootstrap, pipeline.sink, SINK_LIMIT)
        set_max_message_bytes(bootstrap, pipeline.dead_letters, DEAD_LETTER_LIMIT)
        producer = Producer({"bootstrap.servers": bootstrap})
        where: dict[str, tuple[int, int]] = {}
        delivered: dict[int, tuple[int, int]] = {}

        def produce(value, partition, tag, producer=producer, pipeline=pipeline, delivered=delivered):
            def on_delivery(err, msg):
                assert err is None, err
                delivered[tag] = (msg.partition(), msg.offset())
            producer.produce(pipeline.source, value, key=b"k", partition=partition, on_delivery=on_delivery)

        for i in range(NORMAL):
            produce(order(i), i % 2, i)
            if i % 4 == 1:
                name = list(ODD)[i // 4]
                produce(ODD[name], i % 2, name)
        producer.flush(30)
        where = {name: delivered[name] for name in ODD}
        result = run(pipeline)
        assert result.returncode == 0, f"{writer} writer: {result.stderr[-3000:]}"
        results[writer] = (pipeline, where, by_source(read_committed(bootstrap, pipeline.sink)),
                           by_source(read_committed(bootstrap, pipeline.dead_letters)))
    return results


WRITERS = pytest.mark.parametrize("writer", ["jvm", "python"])


@WRITERS
def test_the_checkpoint_is_exactly_once_with_every_bad_record_accounted_for(outputs, writer):
    pipeline, where, sink, dead = outputs[writer]
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert len(sink) + len(dead) == NORMAL + len(ODD)
    assert open_transactions(pipeline) == []
    assert all(m.value().startswith(b'{"order_id":') for m in sink.values())


@WRITERS
def test_a_record_too_large_for_the_sink_topic_is_dead_lettered_with_its_size(outputs, writer):
    pipeline, where, sink, dead = outputs[writer]
    m = dead[where["too_large_for_sink"]]
    headers = dict(m.headers())
    size = int(headers[ORIGINAL_SIZE_HEADER])
    assert size > SINK_LIMIT
    assert headers[ERROR_HEADER].decode() == (
        f"record of {size} bytes exceeds the sink's limit of {SINK_LIMIT} bytes "
        f"(max.message.bytes of topic {pipeline.sink}); key, value and headers dropped")
    # Lockstep's headers only (provenance kept, so verify counts it), no key, an empty value.
    assert [k for k, _ in m.headers()] == [SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET, "lockstep.checkpoint",
                                           "lockstep.pipeline", ERROR_HEADER, ORIGINAL_SIZE_HEADER]
    assert (m.key(), m.value()) == (None, b"")


@WRITERS
def test_a_dead_letter_too_large_for_the_dead_letter_topic_keeps_both_reasons(outputs, writer):
    pipeline, where, sink, dead = outputs[writer]
    m = dead[where["too_large_for_dead_letters"]]
    headers = dict(m.headers())
    size = int(headers[ORIGINAL_SIZE_HEADER])
    assert size > DEAD_LETTER_LIMIT
    assert headers[ERROR_HEADER].decode() == (
        f"not a JSON order with order_id; record of {size} bytes exceeds the dead-letter topic's limit of "
        f"{DEAD_LETTER_LIMIT} bytes (max.message.bytes of topic {pipeline.dead_letters}); "
        "key, value and headers dropped")
    assert m.value() == b""


@WRITERS
def test_values_that_are_not_utf8_are_dead_lettered_or_written_never_dropped(outputs, writer):
    pipeline, where, sink, dead = outputs[writer]
    m = dead[where["not_utf8"]]  # not JSON once decoded: a dead letter with its bytes untouched
    assert dict(m.headers())[ERROR_HEADER] == b"not a JSON order with order_id"
    assert m.value() == ODD["not_utf8"]
    # Valid JSON around invalid UTF-8: Spark's parser reads it (invalid bytes become U+FFFD), so it
    # is enriched like any order: exactly one output either way.
    inside = where["not_utf8_inside_json"]
    assert (inside in sink) != (inside in dead)
    if inside in sink:
        assert json.loads(sink[inside].value())["amount"] == 2.5


@WRITERS
def test_a_null_value_is_dead_lettered_as_a_null_value_with_its_reason(outputs, writer):
    pipeline, where, sink, dead = outputs[writer]
    m = dead[where["null"]]
    assert dict(m.headers())[ERROR_HEADER] == b"not a JSON order with order_id"
    assert m.value() is None


def test_both_writers_write_the_same_records_for_bad_input(outputs):
    def comparable(writer):
        pipeline, _, sink, dead = outputs[writer]
        unique = pipeline.sink[len("out-"):]

        def record(m):
            headers = [(k, v.replace(unique.encode(), b"<u>") if v else v) for k, v in m.headers()
                       if k != SOURCE_TOPIC]
            return m.key(), m.value(), headers
        return ({k: record(m) for k, m in sink.items()}, {k: record(m) for k, m in dead.items()})

    assert comparable("jvm") == comparable("python")


def test_a_row_function_that_raises_dead_letters_that_record_with_the_exception(tmp_path, bootstrap, unique):
    """``lockstep.rows.guarded``: the exception of one record becomes its ``error``; the run goes on."""
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2,
                             transform="lockstep_examples.python_rows:enrich")
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(pipeline.source, order(i), partition=i % 2)
    producer.produce(pipeline.source, order(99, amount="twelve"), partition=1)
    producer.flush(30)

    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    sink = read_committed(bootstrap, pipeline.sink)
    dead = read_committed(bootstrap, pipeline.dead_letters)
    assert sorted(json.loads(m.value())["amount_cents"] for m in sink) == [i * 100 + 50 for i in range(10)]
    assert len(dead) == 1
    assert dict(dead[0].headers())[ERROR_HEADER] == \
        b"order_in_cents raised ValueError: could not convert string to float: 'twelve'"
    assert dead[0].value() == order(99, amount="twelve")
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report


@WRITERS
def test_a_null_value_a_transform_keeps_is_written_as_a_tombstone(tmp_path, bootstrap, unique, writer):
    """Lockstep itself never drops or rewrites a null value: ``passthrough`` keeps it, so the sink gets
    a tombstone (same key, null value) with its provenance, next to the other records."""
    pipeline = make_pipeline(tmp_path, bootstrap, f"{unique}-{writer[:3]}", partitions=1,
                             transform="lockstep_examples.orders:passthrough", writer=writer)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        producer.produce(pipeline.source, order(i), key=f"k{i}".encode())
    producer.produce(pipeline.source, None, key=b"k1")
    producer.flush(30)

    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    sink = by_source(read_committed(bootstrap, pipeline.sink))
    assert read_committed(bootstrap, pipeline.dead_letters) == []
    assert sorted(sink) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert (sink[(0, 3)].key(), sink[(0, 3)].value()) == (b"k1", None)
