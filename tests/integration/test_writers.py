"""The two writers (``sink.writer: jvm``, the default, and ``python``) honour the same output
contract: the same records, keys, provenance and user headers, dead letters, exactly once.

Each writer runs a pipeline of its own over the same input; the test compares what a
read_committed consumer sees, record by record (keyed by source partition and offset), and checks
both against the one definition of the contract (`lockstep.model.output_contract`): the headers, the
committable each writer hands back, the record `job.mid_produce` fires at.
"""
from __future__ import annotations

import json
import re

import pytest

from lockstep.model.output_contract import (
    CHECKPOINT_HEADER,
    COMMITTABLE_FIELDS,
    COMMITTABLE_SCHEMA,
    ERROR_HEADER,
    LEADING_HEADERS,
    MID_PRODUCE_AFTER_RECORDS,
    PIPELINE_HEADER,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
    mid_produce_message,
)

from ..support.data import MALFORMED_EVERY, produce_orders, read_committed
from .engine_helpers import make_pipeline, open_transactions, run, store, verify

RECORDS = 120


def written(bootstrap, topic) -> dict[tuple[int, int], tuple[bytes | None, bytes, list, int | None]]:
    """(source partition, source offset) -> (key, value, headers other than the source topic and the
    pipeline's name (each writer's pipeline has its own), sink partition when the record has a key: the
    partitioner spreads null keys at random)."""
    out = {}
    for m in read_committed(bootstrap, topic):
        names = [k for k, _ in m.headers()]
        assert tuple(names[:len(LEADING_HEADERS)]) == LEADING_HEADERS, f"{topic}: headers {names}"
        headers = dict(m.headers())
        assert headers[PIPELINE_HEADER].decode().startswith("t-writers-"), f"{topic}: the writer names its pipeline"
        where = (int(headers[SOURCE_PARTITION]), int(headers[SOURCE_OFFSET]))
        assert where not in out, f"{topic}: source record {where} written twice"
        out[where] = (m.key(), m.value(), [(k, v) for k, v in m.headers() if k not in (SOURCE_TOPIC, PIPELINE_HEADER)],
                      m.partition() if m.key() is not None else None)
    return out


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, bootstrap):
    """Both writers over the same input: {writer: (pipeline, sink records, dead letters)}."""
    results = {}
    for writer in ("jvm", "python"):
        unique = f"writers-{writer}-{tmp_path_factory.mktemp('u').name[-6:]}"
        pipeline = make_pipeline(tmp_path_factory.mktemp(writer), bootstrap, unique, partitions=3,
                                 transform="lockstep_examples.orders:enrich_with_headers", writer=writer)
        produce_orders(pipeline, RECORDS)
        result = run(pipeline)
        assert result.returncode == 0, f"{writer} writer: {result.stderr[-3000:]}"
        assert f"with the {writer} writer" in result.stdout + result.stderr
        results[writer] = (pipeline, written(bootstrap, pipeline.sink), written(bootstrap, pipeline.dead_letters),
                           committables(result.stdout + result.stderr))
    return results


def committables(output: str) -> list[str]:
    """The committables exactly as the writer's tasks handed them back (the driver logs each task's
    result document before parsing it), as JSON text."""
    found = []
    for line in re.findall(r"task result (\{.*\})\s*$", output, flags=re.M):
        committable = json.loads(line)["committable"]
        if committable is not None:
            found.append(json.dumps(committable))
    return found


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_writer_is_exactly_once_with_provenance_and_user_headers(outputs, writer):
    pipeline, sink, dead, _ = outputs[writer]
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert len(sink) + len(dead) == RECORDS and len(dead) == RECORDS // MALFORMED_EVERY
    assert open_transactions(pipeline) == []
    checkpoint = str(store(pipeline).latest_completed().checkpoint_id).encode()
    for key, value, headers, _ in sink.values():
        names = [k for k, _ in headers]
        # Lockstep's headers first, then the transform's own.
        assert names == [SOURCE_PARTITION, SOURCE_OFFSET, CHECKPOINT_HEADER, "currency"], names
        assert dict(headers)[CHECKPOINT_HEADER] == checkpoint
        assert dict(headers)["currency"] in (b"EUR", b"USD", b"GBP")
        assert key is not None and value.startswith(b'{"order_id":')
    for _key, value, headers, _ in dead.values():
        names = [k for k, _ in headers]
        # A dead letter is its input record as it came: the input's own headers (it had none), not the transform's.
        assert names == [SOURCE_PARTITION, SOURCE_OFFSET, CHECKPOINT_HEADER, ERROR_HEADER], names
        assert dict(headers)[ERROR_HEADER] == b"not a JSON order with order_id"
        assert value.startswith(b"not json")


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_writer_hands_back_the_contracts_committable(outputs, writer):
    """The committable as the writer emitted it (not as the driver re-serialised it): the contract's
    schema id, then exactly the contract's fields in its order; one per task that wrote records."""
    pipeline, _, _, emitted = outputs[writer]
    prepared = store(pipeline).view(store(pipeline).latest_completed().checkpoint_id).prepared
    assert len(emitted) == len(prepared.transactions) > 0
    for text in emitted:
        doc = json.loads(text)
        assert list(doc) == ["schema", *COMMITTABLE_FIELDS], list(doc)
        assert doc["schema"] == COMMITTABLE_SCHEMA
    assert sorted(json.loads(t)["transactional_id"] for t in emitted) == \
        sorted(t.transactional_id for t in prepared.transactions)


def test_jvm_and_python_writers_write_the_same_records_to_the_same_partitions(outputs):
    """Same values, keys and headers; and a key lands in the same sink partition with either writer
    (both use murmur2, the Java client's partitioner)."""
    _, jvm_sink, jvm_dead, _ = outputs["jvm"]
    _, py_sink, py_dead, _ = outputs["python"]
    assert jvm_sink.keys() == py_sink.keys() and jvm_dead.keys() == py_dead.keys()
    assert jvm_sink == py_sink
    assert jvm_dead == py_dead


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_a_task_whose_rows_are_all_filtered_out_leaves_no_transaction(tmp_path, bootstrap, unique, writer):
    """Partition 0 holds only orders the transform filters out, partition 1 only orders it keeps:
    task 0 produces nothing, so it must return no committable and leave nothing open."""
    import json

    from confluent_kafka import Producer

    from lockstep_examples.bench import MIN_AMOUNT

    pipeline = make_pipeline(tmp_path, bootstrap, f"{unique}-{writer}", partitions=2,
                             transform="lockstep_examples.bench:transform", writer=writer)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        amount = MIN_AMOUNT / 2 if i % 2 == 0 else MIN_AMOUNT * 2
        order = {"order_id": f"o{i}", "customer": "c", "amount": amount, "currency": "EUR", "created_at": i,
                 "note": ""}
        producer.produce(pipeline.source, json.dumps(order).encode(), partition=i % 2)
    producer.flush(30)

    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    completed = store(pipeline).latest_completed()
    prepared = store(pipeline).view(completed.checkpoint_id).prepared
    assert len(prepared.transactions) == 1, prepared.transactions  # the task that kept its rows
    assert prepared.records_out == 20
    assert len(read_committed(bootstrap, pipeline.sink)) == 20
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert open_transactions(pipeline) == []


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_mid_produce_fires_at_the_contracts_record_in_either_writer(tmp_path, bootstrap, unique, writer):
    """Each writer says where `job.mid_produce` stopped it: after the contract's number of records
    of the task, counted by the writer itself, before the next one."""
    pipeline = make_pipeline(tmp_path, bootstrap, f"{unique}-{writer}", partitions=1, writer=writer)
    produce_orders(pipeline, 20)
    failed = run(pipeline, failpoints="job.mid_produce=raise")
    assert failed.returncode != 0
    expected = "failpoint job.mid_produce raised" + mid_produce_message(0, MID_PRODUCE_AFTER_RECORDS)
    assert expected in failed.stdout + failed.stderr, (failed.stdout + failed.stderr)[-3000:]
