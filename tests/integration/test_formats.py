"""Records with schemas, end to end on real services: written by Confluent's own serializers through a
real Schema Registry (the platform's Apicurio), decoded for the transform, encoded for the sink, read
back by Confluent's deserializers, exactly once through a crash at every failpoint of the run's path
(docs/formats.md)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.support.pipelines import PipelineUnderTest

from ..support.data import read_committed, topic_partitions
from .engine_helpers import open_transactions, run, same_output, store, verify

SCHEMAS = Path(__file__).resolve().parents[2] / "include" / "lockstep_examples" / "schemas"
ORDER = (SCHEMAS / "order.avsc").read_text()
ENRICHED = (SCHEMAS / "enriched_order.avsc").read_text()
#: The order before ``created_at`` was added (version 1 of the evolution test's subject).
ORDER_V1 = json.dumps({**json.loads(ORDER), "fields": [f for f in json.loads(ORDER)["fields"] if f["name"] != "created_at"]})


@pytest.fixture(scope="module")
def registry(platform):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from lockstep.formats.registry import registry_for

    # A timeout: without one, a request whose answer never arrives waits forever (seen once against Apicurio).
    return SchemaRegistryClient({"url": registry_for("schema_registry_default").url, "timeout": 10})


def order(i: int) -> dict:
    """Order ``i``: every 9th has a negative amount (a dead letter of the transform's)."""
    return {"order_id": f"o{i}", "customer": f"c{i % 5}", "amount": -1.0 if i % 9 == 0 else (i % 250) + 0.25,
            "currency": "EUR", "created_at": 1_700_000_000 + i}


def enriched(o: dict) -> dict:
    return {"order_id": o["order_id"], "customer": o["customer"], "amount": o["amount"], "currency": o["currency"],
            "amount_cents": round(o["amount"] * 100), "priority": o["amount"] >= 100}


def produce(pipeline: PipelineUnderTest, registry, records: list[tuple[int, bytes | dict]], schema: str = ORDER,
            serializer: str = "avro") -> None:
    """``records`` (index, record) into the source, framed by Confluent's serializer (a dict) or as given (bytes)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(registry, schema) if serializer == "avro" else JSONSerializer(schema, registry)
    producer = Producer({"bootstrap.servers": pipeline.bootstrap, "linger.ms": 5})
    parts = len(topic_partitions(AdminClient({"bootstrap.servers": pipeline.bootstrap}), pipeline.source))
    for i, record in records:
        value = record if isinstance(record, bytes) else serialize(record, SerializationContext(pipeline.source,
                                                                                                MessageField.VALUE))
        producer.produce(pipeline.source, value, key=f"o{i}".encode(), partition=i % parts)
    producer.flush(30)


def make(tmp_path: Path, bootstrap: str, unique: str, source: dict, sink: dict, transform: str,
         partitions: int = 2, spark: dict | None = None) -> PipelineUnderTest:
    name = f"f-{unique}"
    pipeline = PipelineUnderTest.create(tmp_path, bootstrap, name, unique, partitions)
    spec = {
        "name": name,
        "source": {"topics": [pipeline.source], **source},
        "transform": transform,
        "sink": {"topic": pipeline.sink, "dead_letter_topic": pipeline.dead_letters, **sink},
        "checkpoints": {"store": f"s3://lockstep/tests/{unique}", "max_records": 100_000, "retain": 100},
        "transactions": {"id_prefix": pipeline.prefix, "timeout_ms": 900_000},
        **({"spark": spark} if spark else {}),
    }
    pipeline.spec_path.write_text(yaml.safe_dump(spec))
    return pipeline


def deserialized(pipeline: PipelineUnderTest, registry, topic: str, kind: str = "avro") -> list[dict]:
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserialize = AvroDeserializer(registry) if kind == "avro" else JSONDeserializer(None, schema_registry_client=registry)
    return [deserialize(m.value(), SerializationContext(topic, MessageField.VALUE))
            for m in read_committed(pipeline.bootstrap, topic)]


def errors(pipeline: PipelineUnderTest) -> list[str]:
    return sorted(dict(m.headers() or [])["lockstep.error"].decode() for m in
                  read_committed(pipeline.bootstrap, pipeline.dead_letters))


def crash_at_every_failpoint(pipeline: PipelineUnderTest, produce_batch, already: int = 0) -> list[dict]:
    """Twelve orders (``produce_batch([(i, order), ...])``) before each run, and each run crashed at the next
    failpoint a connect-mode checkpoint passes outside the writers' tasks (the writers encode nothing: their
    failpoints are format-blind, and test_failpoints.py crashes them); then a run that recovers and completes,
    and `lockstep verify`: every order's output exactly once (``already``: the records the pipeline read
    before). Returns the orders produced."""
    from lockstep.model.failpoints import FAILPOINTS, ICEBERG_FAILPOINTS, STATE_FAILPOINTS
    from lockstep.model.output_contract import WRITER_FAILPOINTS

    points = [f for f in FAILPOINTS if f not in (*STATE_FAILPOINTS, *ICEBERG_FAILPOINTS, *WRITER_FAILPOINTS)]
    produced: list[dict] = []
    for n, point in enumerate(points):
        batch = [(i, order(i)) for i in range(n * 12, n * 12 + 12)]
        produce_batch(batch)
        produced += [o for _, o in batch]
        crashed = run(pipeline, failpoints=f"{point}=crash")
        assert crashed.returncode != 0, (point, crashed.stderr[-2000:])
    finished = run(pipeline)
    assert finished.returncode == 0, finished.stderr[-3000:]
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["covered_offsets"] == already + len(produced)
    assert open_transactions(pipeline) == []
    # every completed checkpoint, replays of crashed attempts included, computed again writes what it committed
    same_output(pipeline)
    return produced


def test_avro_in_and_out_exactly_once_through_a_crash_at_every_failpoint(tmp_path, bootstrap, unique, registry):
    """Records written by Confluent's AvroSerializer are decoded, enriched and written as Avro under the
    sink's registered subject, read back by Confluent's AvroDeserializer: each once, through a crash at
    every failpoint a connect-mode checkpoint passes outside the writers' tasks (the writers encode
    nothing: their failpoints are format-blind and test_failpoints.py crashes them)."""
    from confluent_kafka.schema_registry import Schema

    pipeline = make(tmp_path, bootstrap, unique, {"value": "avro-confluent"},
                    {"value": {"format": "avro-confluent", "schema": json.loads(ENRICHED)}},
                    "lockstep_examples.avro_orders:enrich")
    registry.register_schema(f"{pipeline.sink}-value", Schema(ENRICHED, "AVRO"))  # auto_register is off
    produced = crash_at_every_failpoint(pipeline, lambda batch: produce(pipeline, registry, batch))
    good = [o for o in produced if o["amount"] >= 0]
    assert sorted(deserialized(pipeline, registry, pipeline.sink), key=lambda r: r["order_id"]) == \
        sorted((enriched(o) for o in good), key=lambda r: r["order_id"])
    assert errors(pipeline) == ["negative amount"] * (len(produced) - len(good))
    assert open_transactions(pipeline) == []


def test_two_schema_versions_decode_and_bad_records_are_dead_lettered_with_their_reason(
        tmp_path, bootstrap, unique, registry):
    """A topic whose records carry version 1 and version 2 (a field added with a default) of its subject:
    every record decodes into the latest; a bad magic byte, an id that is no version of the subject and
    bytes that do not decode are dead-lettered as they came, each with its reason, and nothing stops."""
    from confluent_kafka.schema_registry import Schema

    from lockstep.formats.wire import frame

    pipeline = make(tmp_path, bootstrap, unique, {"value": "avro-confluent"}, {"value": "json"},
                    "lockstep_examples.orders:passthrough", partitions=1)
    subject = f"{pipeline.source}-value"
    registry.set_compatibility(subject, "BACKWARD")
    produce(pipeline, registry, [(i, {k: v for k, v in order(i).items() if k != "created_at"}) for i in range(1, 4)],
            schema=ORDER_V1)
    produce(pipeline, registry, [(i, order(i)) for i in range(4, 7)])
    v2 = registry.get_latest_version(subject)
    assert v2.version == 2
    other = registry.register_schema(f"other-{unique}-value", Schema(json.dumps({
        "type": "record", "name": "Other", "fields": [{"name": "x", "type": "long"}]}), "AVRO"))
    produce(pipeline, registry, [(7, b"\x01not framed"), (8, frame(other, b"\x02")), (9, frame(v2.schema_id, b"\xff\xff"))])
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    # Counted by the write's own pass (connect mode), which then wrote the output again beside them: the
    # first write's transactions, fenced by the second's, hold nothing a read_committed consumer sees.
    assert "checkpoint 1: 3 records do not decode" in result.stderr
    assert "counting those that do not decode apart" not in result.stderr

    values = [json.loads(m.value()) for m in read_committed(pipeline.bootstrap, pipeline.sink)]
    assert values == [  # in the source partition's order, though dead letters were placed beside them
        {k: v for k, v in order(i).items() if k != "created_at" or i >= 4} for i in range(1, 7)]
    assert errors(pipeline) == sorted([
        "value is not in the schema registry's wire format (its first byte is not the magic byte 0)",
        f"value carries schema id {other}, which is not a version of subject {subject}",
        f"value does not decode with its writer schema (id {v2.schema_id}): its payload does not decode (required "
        "field order_id is null)"])
    dead = {m.offset(): m.value() for m in read_committed(pipeline.bootstrap, pipeline.dead_letters)}
    assert sorted(dead.values()) == sorted([b"\x01not framed", frame(other, b"\x02"), frame(v2.schema_id, b"\xff\xff")])
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report


def test_a_record_that_does_not_decode_reaches_the_dead_letter_topic_when_the_transform_returns_no_error_column(
        tmp_path, bootstrap, unique):
    """JSON without a schema in, bytes out, a transform that returns the record's columns and no ``error``:
    a record that is not JSON goes to the dead-letter topic with its reason, not to the sink (the writers
    tell a dead letter by its error, which the output must then carry). Counted in the write's own pass."""
    from confluent_kafka import Producer

    pipeline = make(tmp_path, bootstrap, unique, {"value": "json"}, {}, "lockstep_examples.orders:passthrough",
                    partitions=1)
    producer = Producer({"bootstrap.servers": pipeline.bootstrap})
    for i in range(6):
        producer.produce(pipeline.source, b"not json" if i == 3 else json.dumps(order(i)).encode(), partition=0)
    producer.flush(30)
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "checkpoint 1: 1 records do not decode" in result.stderr
    assert "counting those that do not decode apart" not in result.stderr
    assert [json.loads(m.value())["order_id"] for m in read_committed(pipeline.bootstrap, pipeline.sink)] == \
        [f"o{i}" for i in (0, 1, 2, 4, 5)]
    assert [m.value() for m in read_committed(pipeline.bootstrap, pipeline.dead_letters)] == [b"not json"]
    assert errors(pipeline) == ["value is not JSON"]
    assert store(pipeline).view(1).prepared.records_dead_lettered == 1


def test_an_incompatible_sink_schema_is_refused_before_any_transaction_opens(tmp_path, bootstrap, unique, registry):
    from confluent_kafka.schema_registry import Schema

    changed = json.loads(ENRICHED)
    for f in changed["fields"]:
        if f["name"] == "amount_cents":
            f["type"] = "string"  # long -> string: not BACKWARD compatible
    pipeline = make(tmp_path, bootstrap, unique, {"value": "avro-confluent"},
                    {"value": {"format": "avro-confluent", "schema": changed, "auto_register": True}},
                    "lockstep_examples.avro_orders:enrich", partitions=1)
    subject = f"{pipeline.sink}-value"
    registry.register_schema(subject, Schema(ENRICHED, "AVRO"))
    registry.set_compatibility(subject, "BACKWARD")
    produce(pipeline, registry, [(i, order(i)) for i in range(1, 5)])
    refused = run(pipeline)
    assert refused.returncode != 0
    last = refused.stderr.strip().splitlines()[-1]
    assert "checkpoint 1: not claimed" in last and subject in last and "incompatible" in last, refused.stderr[-2000:]
    assert "field amount_cents was long, now string" in last, last  # the field, though Apicurio gives no reason
    assert list(store(pipeline).checkpoint_ids()) == []
    assert read_committed(pipeline.bootstrap, pipeline.sink) == [] and open_transactions(pipeline) == []
    assert registry.get_versions(subject) == [1]  # nothing registered


def test_json_schema_records_of_confluents_serializer_round_trip(tmp_path, bootstrap, unique, registry):
    """JSON Schema framed by Confluent's JSONSerializer in, and out under the sink's subject (registered by
    the plan: auto_register), read back by Confluent's JSONDeserializer. In submit mode: the spark-submit
    job is handed the registry's connection, as it is the Kafka and S3 ones."""
    order_schema = json.dumps({"type": "object", "title": "Order", "properties": {
        "order_id": {"type": "string"}, "customer": {"type": "string"}, "amount": {"type": "number"},
        "currency": {"type": "string"}, "created_at": {"type": ["integer", "null"]}},
        "required": ["order_id", "customer", "amount", "currency"]})
    out_schema = {"type": "object", "title": "EnrichedOrder", "properties": {
        "order_id": {"type": "string"}, "customer": {"type": "string"}, "amount": {"type": "number"},
        "currency": {"type": "string"}, "amount_cents": {"type": "integer"}, "priority": {"type": "boolean"}},
        "required": ["order_id", "amount_cents"]}
    pipeline = make(tmp_path, bootstrap, unique, {"value": "json-confluent"},
                    {"value": {"format": "json-confluent", "schema": out_schema, "auto_register": True}},
                    "lockstep_examples.avro_orders:enrich", partitions=1, spark={"mode": "submit"})
    produced = [order(i) for i in range(1, 12)]
    produce(pipeline, registry, list(enumerate(produced, 1)), schema=order_schema, serializer="json")
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    pipeline.rewrite(spark={"mode": "connect"})  # then through a crash at every failpoint, in connect mode
    produced += crash_at_every_failpoint(pipeline, lambda batch: produce(
        pipeline, registry, [(i + 100, o) for i, o in batch], schema=order_schema, serializer="json"), len(produced))
    good = [enriched(o) for o in produced if o["amount"] >= 0]
    assert sorted(deserialized(pipeline, registry, pipeline.sink, "json"), key=lambda r: r["order_id"]) == \
        sorted(good, key=lambda r: r["order_id"])
    assert errors(pipeline) == ["negative amount"] * (len(produced) - len(good))


WINDOW_SCHEMA = {"type": "record", "name": "CustomerWindow", "fields": [
    {"name": "customer", "type": "string"}, {"name": "window_start", "type": "string"},
    {"name": "window_end", "type": "string"}, {"name": "orders", "type": "long"}, {"name": "total", "type": "double"}]}


def test_windows_over_avro_records_fire_in_the_sinks_avro_schema(tmp_path, bootstrap, unique, registry):
    """A stateful pipeline over Avro orders: the transform flattens the decoded record, the windows
    aggregate it, and each fired window is written in the sink's Avro schema (registered by the plan),
    read back by Confluent's AvroDeserializer; `lockstep verify` recomputes them and agrees."""
    from datetime import UTC, datetime

    pipeline = make(tmp_path, bootstrap, unique, {"value": "avro-confluent"},
                    {"value": {"format": "avro-confluent", "schema": WINDOW_SCHEMA, "auto_register": True}},
                    "lockstep_examples.avro_orders:flatten")
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    # The key and the event time read the decoded record; the aggregates read the transform's flat columns.
    doc["state"] = {"key_groups": 4, "event_time": {"column": "data.created_at"},
                    "window": {"key": "data.customer", "key_name": "customer", "size": "10s",
                               "aggregates": {"orders": "count(*)", "total": "sum(amount)"}}}
    pipeline.spec_path.write_text(yaml.safe_dump(doc))
    produced = [order(i) for i in range(40)]
    produce(pipeline, registry, list(enumerate(produced)))
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]

    watermark_s = store(pipeline).latest_completed().completed.state.watermark_ms // 1000
    expected: dict[tuple[str, str], tuple[int, float]] = {}
    for o in produced:
        start = o["created_at"] - o["created_at"] % 10
        if start + 10 <= watermark_s:
            key = (o["customer"], datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            n, total = expected.get(key, (0, 0.0))
            expected[key] = (n + 1, total + o["amount"])
    found = {(w["customer"], w["window_start"]): (w["orders"], w["total"])
             for w in deserialized(pipeline, registry, pipeline.sink)}
    assert expected and found.keys() == expected.keys()
    assert all(found[k][0] == v[0] and abs(found[k][1] - v[1]) < 1e-9 for k, v in expected.items())
    report = verify(pipeline)
    assert report["ok"] and report["expected_outputs"] == len(expected), report
    assert (report["lost"], report["duplicated"], report["wrong"]) == (0, 0, 0), report


def test_a_checkpoint_decodes_into_the_reader_schema_its_claim_pinned(tmp_path, bootstrap, unique, registry):
    """The reader schema (the subject's latest version, the spec declaring none) is pinned when the
    checkpoint is planned: a version registered between its plan and its run changes nothing for it (a
    retried run, a repair and a replay decode alike); the next checkpoint reads into the new one."""
    from confluent_kafka.schema_registry import Schema

    from lockstep.steps.coordinator import Pipeline, commit, plan
    from lockstep.steps.run import run_checkpoint

    pipeline = make(tmp_path, bootstrap, unique, {"value": "avro-confluent"}, {"value": "json"},
                    "lockstep_examples.orders:passthrough", partitions=1)
    subject = f"{pipeline.source}-value"
    produce(pipeline, registry, [(i, order(i)) for i in range(1, 4)])
    v1 = registry.get_latest_version(subject).schema_id
    p = Pipeline.open(pipeline.spec())
    cid = plan(p, run_id="planned-before-v2").claim.checkpoint_id
    assert store(pipeline).view(cid).claim.schema_ids == {"source.value": v1}
    registry.set_compatibility(subject, "BACKWARD")
    with_channel = json.loads(ORDER)
    with_channel["fields"].append({"name": "channel", "type": "string", "default": "web"})
    v2 = registry.register_schema(subject, Schema(json.dumps(with_channel), "AVRO"))
    run_checkpoint(p.spec, cid, p.store)
    commit(p, cid)
    produce(pipeline, registry, [(i, order(i)) for i in range(4, 6)])  # still written with version 1
    assert run(pipeline).returncode == 0
    assert store(pipeline).view(cid + 1).claim.schema_ids == {"source.value": v2}
    channels = {json.loads(m.value())["order_id"]: json.loads(m.value()).get("channel")
                for m in read_committed(pipeline.bootstrap, pipeline.sink)}
    assert channels == {"o1": None, "o2": None, "o3": None, "o4": "web", "o5": "web"}


def test_a_new_empty_source_topic_needs_no_subject_until_a_checkpoint_reads_its_records(
        tmp_path, bootstrap, unique, registry):
    """An Avro topic with five records beside a new topic nobody has written to yet, so without a subject (the
    topic name strategy's ``<topic>-value``), listed first: the checkpoint reads nothing of the new topic and
    completes, its reader schema pinned from the other topic's subject. Once a record comes to the new topic
    while its subject is still missing, the checkpoint that would read it is refused before its claim, naming
    the topic, the subject and the way out; with the subject registered, the next run reads it."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import Schema

    from lockstep_dev.datagen import ensure_topics

    pipeline = make(tmp_path, bootstrap, unique, {"value": "avro-confluent"}, {"value": "json"},
                    "lockstep_examples.orders:passthrough", partitions=1)
    new = f"{pipeline.source}.new"
    ensure_topics(bootstrap, {new: 1})
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["source"]["topics"] = [new, pipeline.source]
    pipeline.spec_path.write_text(yaml.safe_dump(doc))
    produce(pipeline, registry, [(i, order(i)) for i in range(1, 6)])
    first = run(pipeline)
    assert first.returncode == 0, first.stderr[-3000:]
    sunk = lambda: sorted(json.loads(m.value())["order_id"] for m in read_committed(bootstrap, pipeline.sink))
    assert sunk() == [f"o{i}" for i in range(1, 6)]
    latest = registry.get_latest_version(f"{pipeline.source}-value").schema_id
    assert store(pipeline).view(1).claim.schema_ids == {"source.value": latest}

    # A record in the new topic (an order as Confluent's serializer framed it for the other one): now read.
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(new, read_committed(bootstrap, pipeline.source)[0].value(), key=b"o1", partition=0)
    producer.flush(30)
    refused = run(pipeline)
    assert refused.returncode != 0
    last = refused.stderr.strip().splitlines()[-1]
    assert all(w in last for w in ("checkpoint 2: not claimed", f"subject '{new}-value' of topic {new}",
                                   "reads records of", "Register", "source.value.subject")), refused.stderr[-2000:]
    assert list(store(pipeline).checkpoint_ids()) == [1]
    assert errors(pipeline) == [] and len(sunk()) == 5

    registry.register_schema(f"{new}-value", Schema(ORDER, "AVRO"))
    done = run(pipeline)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(sunk()) + len(errors(pipeline)) == 6  # its id is a version of the new subject, or a dead letter


def test_dedup_over_avro_records_passes_each_order_once_in_the_sinks_avro(tmp_path, bootstrap, unique, registry):
    """Dedup keyed by a field of the decoded record: the copies are dropped, the records it passes are
    encoded from the transform's `data` in the sink's schema, read back by Confluent's AvroDeserializer."""
    pipeline = make(tmp_path, bootstrap, unique, {"value": "avro-confluent"},
                    {"value": {"format": "avro-confluent", "schema": json.loads(ORDER), "auto_register": True}},
                    "lockstep_examples.orders:passthrough")
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["state"] = {"key_groups": 4, "event_time": {"column": "data.created_at"},
                    "dedup": {"key": "data.order_id", "ttl": "1h"}}
    pipeline.spec_path.write_text(yaml.safe_dump(doc))
    orders = [order(i) for i in range(12)]
    produce(pipeline, registry, [(i, o) for i, o in enumerate(orders)] + [(i + 1, orders[i]) for i in range(0, 12, 3)])
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(deserialized(pipeline, registry, pipeline.sink), key=lambda r: r["order_id"]) == \
        sorted(orders, key=lambda r: r["order_id"])
    report = verify(pipeline)
    assert report["ok"] and (report["lost"], report["duplicated"]) == (0, 0), report


def test_the_formats_without_a_registry_decode_and_encode_in_spark(spark_connect):
    """string, json without a schema (a VARIANT), json with a JSON Schema and plain Avro, on a Spark
    Connect session: what decodes, what is dead-lettered with which reason, and what the sink encodes."""
    from pyspark.sql import SparkSession

    from lockstep.spark.connect import connect_mode

    with connect_mode():  # this process's environment as it was after: later tests start classic sessions
        spark = SparkSession.builder.remote(spark_connect).getOrCreate()
        try:
            _formats_without_a_registry(spark)
        finally:  # not left as this worker's active session for later tests
            spark.stop()


def _formats_without_a_registry(spark) -> None:
    import io

    import fastavro
    from pyspark.sql import functions as F

    from lockstep.formats import codecs
    from lockstep.formats.resolution import Reading, Writing
    from lockstep.spec import FormatSpec

    avro = json.dumps({"type": "record", "name": "O", "fields": [{"name": "id", "type": "string"},
                                                                 {"name": "n", "type": "long"}]})
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(json.loads(avro)), {"id": "a", "n": 7})
    json_schema = json.dumps({"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
                              "required": ["id"]})
    rows = [(b'{"id": "a", "n": 7}', buf.getvalue()), (b"{not json", b"\x02"), (None, None)]
    df = spark.createDataFrame(rows, "value binary, key binary").withColumn("topic", F.lit("t"))

    def decoded(reading: Reading) -> list[tuple]:
        out = codecs.decode(df, [reading]).select(F.to_json(F.struct(codecs.DATA_COLUMN[reading.part])).alias("d"),
                                                 codecs.DECODE_ERROR)
        return [(json.loads(r[0]).get(codecs.DATA_COLUMN[reading.part]), r[1]) for r in out.collect()]

    assert decoded(Reading("value", FormatSpec("string"), None))[0] == ('{"id": "a", "n": 7}', None)
    schemaless = decoded(Reading("value", FormatSpec("json"), None))
    assert schemaless[0] == ({"id": "a", "n": 7}, None) and schemaless[1] == (None, "value is not JSON")
    assert schemaless[2] == (None, None)  # a null value (a tombstone) is not an error
    typed = decoded(Reading("value", FormatSpec("json", json_schema, "s.json"), json_schema))
    assert typed[0] == ({"id": "a", "n": 7}, None)
    assert "value does not match its schema (s.json): required field id is missing or null" in typed[1][1]
    keyed = decoded(Reading("key", FormatSpec("avro", avro, "o.avsc"), avro))
    assert keyed[0] == ({"id": "a", "n": 7}, None)
    assert "key does not match its schema (o.avsc)" in keyed[1][1]

    out = spark.createDataFrame([("a", 7, None), ("b", None, None), ("c", 1, "bad")],
                                "id string, n bigint, error string").withColumn("data", F.struct("id", "n"))
    out = out.withColumn("value", F.lit(b"raw"))
    encoded = codecs.encode(out, [Writing("value", FormatSpec("avro", avro, "o.avsc"), avro)], "m:f").collect()
    assert fastavro.schemaless_reader(io.BytesIO(encoded[0]["value"]), fastavro.parse_schema(json.loads(avro))) == \
        {"id": "a", "n": 7}
    assert encoded[1]["error"] == "the transform's `data` does not fit the sink's schema (o.avsc): required field n is null"
    assert encoded[1]["value"] == b"raw" and (encoded[2]["error"], encoded[2]["value"]) == ("bad", b"raw")


#: Records a JSON Schema's reader meets, as bytes: what Lockstep's JVM decoder answers (the first group) and what it
#: leaves to Spark's ``from_json`` (the second): ``(payload, answered)``.
_JSON_RECORDS = [(p, True) for p in (
    b'{"id":"a","n":7,"x":1.5,"ok":true}', b'{"id":"a","x":3}', b'{"id":null,"n":null}', b"{}",
    b'{"id":"a","extra":{"k":[1,2,{"z":null}]},"more":[{"id":5}],"n":1}', b' { "id" : "a" , "ok" : false }\n',
    b'{"id":"\\u00e9\\n\\"q\\""}', b'{"x":-0.0,"n":-0}', b'{"n":9223372036854775807}', b'{"n":-9223372036854775808}',
    b'{"x":1e400}', b'{"x":1E-3,"n":0}', b'{"x":12345678901234567890}',
)] + [(p, False) for p in (
    '{"id":"é"}'.encode(), b'{"id":"\xff"}', b'{"id":5}', b'{"id":{"a":1}}', b'{"id":[1]}', b'{"n":"7"}',
    b'{"n":1.5}', b'{"n":1e3}', b'{"n":99999999999999999999}', b'{"ok":"true"}', b'{"ok":1}', b'{"x":"NaN"}',
    b'{"x":NaN}', b'{"n":007}', b'{"id":"a","id":"b"}', b'{"e":1,"e":2}', b'{"ID":"a"}', b'{"Id":"a","id":"b"}',
    b'{"id":"a"} x', b'{"id":"a"}{"id":"b"}', b"[1]", b'"s"', b"1", b"null", b"", b"   ", b"{",
    b'{"id":"a",}', b"{'id':'a'}", b'{"id":"a"/*c*/}', b'{id:"a"}',
)]


def test_json_records_decode_to_what_spark_from_json_makes_of_them_whichever_decoder_answers(spark_connect):
    """The ``json`` format with a flat JSON Schema: Lockstep's JVM decoder answers the plain records and Spark's
    ``from_json`` the rest, and each record decodes to exactly what ``from_json`` alone makes of it (the
    decoder is a faster way to the same value, never a different value), its decode error included."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lockstep.formats import codecs, wire
    from lockstep.formats.resolution import Reading
    from lockstep.spark.connect import connect_mode
    from lockstep.spec import FormatSpec

    schema = json.dumps({"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer"},
                                                          "x": {"type": "number"}, "ok": {"type": "boolean"}},
                         "required": ["id"]})
    fields = wire.json_flat_fields(schema)
    assert fields is not None
    rows = [(i, payload) for i, (payload, _) in enumerate(_JSON_RECORDS)] + [(len(_JSON_RECORDS), None)]
    with connect_mode():
        spark = SparkSession.builder.remote(spark_connect).create()
        try:
            df = spark.createDataFrame(rows, "i int, value binary").withColumn("topic", F.lit("t"))
            reading = Reading("value", FormatSpec("json", schema, "s.json"), schema)
            decoded = codecs.decode(df, [reading])
            spark_alone = F.from_json(F.col("value").cast("string"), wire.json_schema_ddl(schema), {"mode": "PERMISSIVE"})
            out = decoded.select("i", F.to_json(F.struct(F.col(codecs.DATA_COLUMN["value"]).alias("d"))).alias("data"),
                                 F.to_json(F.struct(spark_alone.alias("d"))).alias("spark"), codecs.DECODE_ERROR,
                                 F.call_function(codecs._json_name(fields), F.col("value"), F.lit(fields)).isNotNull()
                                 .alias("answered")).orderBy("i").collect()
        finally:
            spark.stop()
    assert [r["data"] for r in out] == [r["spark"] for r in out]
    assert [r["answered"] for r in out] == [answered for _, answered in _JSON_RECORDS] + [False]
    errors = {r["i"]: r[codecs.DECODE_ERROR] for r in out}
    assert errors[0] is None and errors[len(_JSON_RECORDS)] is None  # a plain record, a null value
    assert "required field id is missing or null" in errors[2]  # answered by the decoder: id is null
    at = {payload: i for i, (payload, _) in enumerate(_JSON_RECORDS)}
    assert errors[at[b'{"id":5}']] is None  # from_json makes a string of a number: no error, as before
    assert "required field id is missing or null" in errors[at[b"{"]]  # left to from_json: not JSON


def test_the_benchmarks_transform_on_the_decoded_order_writes_what_it_writes_parsing_the_order_itself(spark_connect):
    """The freshness race's stateless pipeline declares its orders as ``json`` with their JSON Schema and runs
    ``json_transform`` on ``data`` (the decoder's fast path answers them); it must keep the same orders and write
    the same bytes as ``transform``, which parses each order itself, and as the raw client's ``transform_value``."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lockstep.formats import codecs, wire
    from lockstep.formats.resolution import Reading
    from lockstep.spark.connect import connect_mode
    from lockstep.spec import FormatSpec
    from lockstep_dev import datagen
    from lockstep_examples import bench

    schema = json.dumps(bench.ORDER_JSON_SCHEMA)
    assert wire.json_flat_fields(schema) is not None
    orders = [datagen.order(i, pad=80) for i in range(300)]
    # an integer amount: Spark writes it back as a double in both ways (the raw client keeps it an integer)
    orders += [b'{"order_id":"o-x","customer":"c","amount":45,"currency":"EUR","created_at":1,"note":"n"}']
    with connect_mode():
        spark = SparkSession.builder.remote(spark_connect).create()
        try:
            df = spark.createDataFrame([(i, v) for i, v in enumerate(orders)], "offset long, value binary") \
                .withColumn("topic", F.lit("t")).withColumn("partition", F.lit(0))
            parsed = {r["offset"]: bytes(r["value"]) for r in bench.transform(df).select("offset", "value").collect()}
            decoded = codecs.decodable(codecs.decode(df, [Reading("value", FormatSpec("json", schema, "inline"), schema)]))
            formatted = {r["offset"]: bytes(r["value"])
                         for r in bench.json_transform(decoded).select("offset", "value").collect()}
        finally:
            spark.stop()
    assert 0 < len(parsed) < len(orders)  # the filter kept some and dropped some
    assert formatted == parsed
    assert parsed[300] == b'{"order_id":"o-x","customer":"c","amount":45.0,"currency":"EUR","created_at":1,"note":"n",' \
        b'"amount_cents":4500}'
    assert {i: v for i, v in parsed.items() if i < 300} == \
        {i: bench.transform_value(v) for i, v in enumerate(orders[:300]) if bench.transform_value(v) is not None}


def test_the_writes_own_count_of_dead_letters_is_trusted_only_when_it_saw_each_record_once(spark_connect):
    """On a Connect session, as a run counts: an observation on the decoded input, read after an action
    over the output. Every record seen: the count of those that did not decode. A transform that stops
    reading (a limit) or keeps no row of the input (pruned by the optimizer): no count, the run counts apart.
    Analyzing the output first (its schema) must not lose the count (the server's plan cache).
    And a write again placed over more Spark partitions than tasks leaves the extra ones empty."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lockstep.formats import codecs
    from lockstep.model.offsets import OffsetRange
    from lockstep.spark.connect import connect_mode
    from lockstep.spark.placement import place

    with connect_mode():
        spark = SparkSession.builder.remote(spark_connect).create()
        try:
            df = spark.range(0, 700, 1, 4).select(
                F.lit("t").alias("topic"), (F.col("id") % 4).cast("int").alias("partition"), F.col("id").alias("offset"),
                F.when(F.col("id") % 7 == 0, F.lit("bad")).alias(codecs.DECODE_ERROR))

            def counted(transform) -> int | None:
                observation = codecs.watch(spark)
                assert observation is not None  # a Connect session counts in the write's pass
                out = transform(codecs.decodable(codecs._observed(df, observation)))
                out.schema  # noqa: B018 - analyzed first, as the run checks the output's columns
                out.write.format("noop").mode("append").save()
                return codecs.counted_undecodable(observation.get, 700)

            assert counted(lambda d: d) == 100
            assert counted(lambda d: d.limit(5)) is None
            assert counted(lambda d: d.filter(F.lit(False))) is None

            ranges = [OffsetRange("t", p, 0, 175) for p in range(4)]
            placed = place(df, ranges, 2, sort=False, partitions=5)
            rows = placed.select(F.spark_partition_id().alias("at"), "partition").distinct().collect()
            assert re.search(r"hashpartitioning\(__ls_slot#\d+, 5\)", placed._explain_string())
            assert sorted((r["at"], r["partition"]) for r in rows) == [(0, 0), (0, 2), (1, 1), (1, 3)]
        finally:
            spark.stop()
