"""Protobuf records end to end on real services: written by Confluent's own ``ProtobufSerializer`` through the
platform's Schema Registry (Apicurio), decoded in the JVM by Lockstep's codec (docs/formats.md, "Protobuf"),
transformed, encoded as ``protobuf-confluent`` and read back by Confluent's ``ProtobufDeserializer``, exactly
once through a crash between the commits of a checkpoint's transactions."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lockstep.formats.wire import frame

from ..support.data import read_committed
from .engine_helpers import crash_at, open_transactions, run, verify
from .test_formats import enriched, errors, make, order

SCHEMAS = Path(__file__).resolve().parents[2] / "include" / "lockstep_examples" / "schemas"
PACKAGE = "dev.lockstep.examples"


@pytest.fixture(scope="module")
def registry(platform):
    """Confluent's registry client, with a request timeout: seen here, a request that Apicurio answered (a 404 of
    the serializer's ``/associations`` lookup, on a reused connection) never reached the client, which without a
    timeout waits for ever; a timed-out request is retried by the client."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from lockstep.formats.registry import registry_for

    return SchemaRegistryClient({"url": registry_for("schema_registry_default").url, "timeout": 10})


@pytest.fixture(scope="module")
def classes() -> dict[str, type]:
    """The message classes of ``orders.desc``, made at runtime from its descriptors (no generated code), and
    ``OrderV2``: the next version of ``Order``, with a field added."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from lockstep.formats.protobuf import descriptor_set

    pool, pool_v2 = descriptor_pool.DescriptorPool(), descriptor_pool.DescriptorPool()
    for file in descriptor_set((SCHEMAS / "orders.desc").read_bytes(), "orders.desc").file:
        pool.Add(file)
        file.message_type[0].field.add(name="note", number=6, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                                       label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        pool_v2.Add(file)
    made = {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
            for name in ("Order", "EnrichedOrder")}
    return {**made, "OrderV2": message_factory.GetMessageClass(pool_v2.FindMessageTypeByName(f"{PACKAGE}.Order"))}


def produce(pipeline, registry, classes, records: list[tuple[int, bytes | dict]], kind: str = "Order") -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = ProtobufSerializer(classes[kind], registry, {"use.deprecated.format": False})
    producer = Producer({"bootstrap.servers": pipeline.bootstrap, "linger.ms": 5})
    for i, record in records:
        value = record if isinstance(record, bytes) else serialize(
            classes[kind](**record), SerializationContext(pipeline.source, MessageField.VALUE))
        producer.produce(pipeline.source, value, key=f"o{i}".encode(), partition=i % 2)
    producer.flush(30)


def test_protobuf_in_and_out_exactly_once_and_bad_records_dead_lettered(tmp_path, bootstrap, unique, registry,
                                                                          classes):
    """Orders framed by ProtobufSerializer, with two versions of the subject's schema (a field added), are all
    decoded with its latest, enriched, and written as
    EnrichedOrder (the second message of the file: message indexes [1]) under the sink's subject, which the plan
    registers; ProtobufDeserializer reads each once, through a crash between the commits. A bad magic byte, an
    id of another subject, message indexes naming another message and bytes that do not parse are dead-lettered
    as they came, each with its reason."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from lockstep.formats.registry import registry_for

    shutil.copy(SCHEMAS / "orders.desc", tmp_path / "orders.desc")
    pipeline = make(tmp_path, bootstrap, unique, {"value": "protobuf-confluent"},
                    {"value": {"format": "protobuf-confluent", "schema": "orders.desc", "message": "EnrichedOrder",
                               "auto_register": True}},
                    "lockstep_examples.avro_orders:enrich")
    first = [(i, order(i)) for i in range(1, 13)]
    produce(pipeline, registry, classes, first)
    crash_at(pipeline, "commit.between_commits")

    subject = f"{pipeline.source}-value"
    written = registry.get_latest_version(subject).schema_id
    other = registry.register_schema(f"other-{unique}-value", Schema('{"type": "long"}', "AVRO"))
    payload = classes["Order"](order_id="x", customer="c", amount=1.0, currency="EUR").SerializeToString()
    bad = [(13, b"\x01not framed"), (14, frame(other, b"\x00" + payload)), (15, frame(written, b"\x02\x0a" + payload)),
           (16, frame(written, b"\x00\xff\xff"))]
    second = [(i, order(i)) for i in range(17, 24)]
    produce(pipeline, registry, classes, bad + second[:3])
    produce(pipeline, registry, classes, [(i, {**o, "note": "v2"}) for i, o in second[3:]], kind="OrderV2")
    assert len(registry_for("schema_registry_default").versions(subject)) == 2  # (not the client's cached latest)
    finished = run(pipeline)
    assert finished.returncode == 0, finished.stderr[-3000:]

    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    produced = [o for _, o in first + second]
    good = [enriched(o) for o in produced if o["amount"] >= 0]
    deserialize = ProtobufDeserializer(classes["EnrichedOrder"], {"use.deprecated.format": False})
    read = []
    for m in read_committed(pipeline.bootstrap, pipeline.sink):
        assert m.value()[5:7] == b"\x02\x02"  # message indexes [1]: EnrichedOrder, the file's second message
        e = deserialize(m.value(), SerializationContext(pipeline.sink, MessageField.VALUE))
        read.append({f: getattr(e, f) for f in ("order_id", "customer", "amount", "currency", "amount_cents",
                                                "priority")})
    assert sorted(read, key=lambda r: r["order_id"]) == sorted(good, key=lambda r: r["order_id"])

    reasons = errors(pipeline)
    undecodable = f"value does not decode with its writer schema (id {written}): "
    assert [r for r in reasons if r != "negative amount"] == sorted([
        "value is not in the schema registry's wire format (its first byte is not the magic byte 0)",
        f"value carries schema id {other}, which is not a version of subject {subject}",
        undecodable + "its message indexes [5] do not name the message read ([0] in its writer schema)",
        next(r for r in reasons if r.startswith(undecodable + f"it is not a Protobuf {PACKAGE}.Order: "))])
    assert reasons.count("negative amount") == len(produced) - len(good)
    dead = sorted(m.value() for m in read_committed(pipeline.bootstrap, pipeline.dead_letters))
    assert [d for d in dead if d in {b for _, b in bad}] == sorted(b for _, b in bad)  # as they came
    assert open_transactions(pipeline) == []

    sink_schema = registry.get_latest_version(f"{pipeline.sink}-value").schema
    assert sink_schema.schema_type == "PROTOBUF"  # registered by the plan, in the form Confluent's clients read


def test_plain_protobuf_in_and_out_in_a_classic_session(tmp_path, bootstrap, unique, classes):
    """``protobuf`` without a registry: the payload is the message, read with the spec's descriptor set and
    written with it; bytes that do not parse are dead-lettered naming the schema file. In submit mode (a classic
    session, where the Java UDFs are registered through py4j, not Spark Connect)."""
    import yaml
    from confluent_kafka import Producer

    shutil.copy(SCHEMAS / "orders.desc", tmp_path / "orders.desc")
    pipeline = make(tmp_path, bootstrap, unique, {"value": {"format": "protobuf", "schema": "orders.desc"}},
                    {"value": {"format": "protobuf", "schema": "orders.desc", "message": "EnrichedOrder"}},
                    "lockstep_examples.avro_orders:enrich", partitions=1)
    pipeline.spec_path.write_text(yaml.safe_dump({**yaml.safe_load(pipeline.spec_path.read_text()),
                                                  "spark": {"mode": "submit"}}))
    producer = Producer({"bootstrap.servers": pipeline.bootstrap})
    produced = [order(i) for i in range(1, 6)]
    for o in produced:
        producer.produce(pipeline.source, classes["Order"](**o).SerializeToString())
    producer.produce(pipeline.source, b"\xff\xff")
    producer.flush(30)
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]

    read = [classes["EnrichedOrder"].FromString(m.value()) for m in read_committed(pipeline.bootstrap, pipeline.sink)]
    assert [(e.order_id, e.amount_cents, e.priority) for e in read] == [
        (e["order_id"], e["amount_cents"], e["priority"]) for e in map(enriched, produced)]
    assert errors(pipeline) == [f"value does not match its schema ({tmp_path / 'orders.desc'}): it is not a Protobuf "
                                f"{PACKAGE}.Order: While parsing a protocol message, the input ended unexpectedly "
                                "in the middle of a field.  This could mean either that the input has been truncated "
                                "or that an embedded message misreported its own length."]


def test_an_incompatible_protobuf_sink_schema_is_refused_naming_the_field(tmp_path, bootstrap, unique, registry):
    """A sink descriptor whose EnrichedOrder changes a field's type is refused by the plan before any
    transaction, naming the field, though Apicurio answers only "incompatible"; nothing is registered."""
    from confluent_kafka.schema_registry import Schema

    from lockstep.formats import protobuf

    fds = protobuf.descriptor_set((SCHEMAS / "orders.desc").read_bytes(), "orders.desc")
    original = protobuf.registry_text(fds, f"{PACKAGE}.EnrichedOrder")
    next(f for f in fds.file[0].message_type[1].field if f.name == "amount_cents").type = 9  # int64 -> string
    (tmp_path / "changed.desc").write_bytes(fds.SerializeToString())
    pipeline = make(tmp_path, bootstrap, unique, {"value": "protobuf-confluent"},
                    {"value": {"format": "protobuf-confluent", "schema": "changed.desc", "message": "EnrichedOrder",
                               "auto_register": True}},
                    "lockstep_examples.avro_orders:enrich", partitions=1)
    subject = f"{pipeline.sink}-value"
    registry.register_schema(subject, Schema(original, "PROTOBUF"))
    registry.set_compatibility(subject, "BACKWARD")
    registry.register_schema(f"{pipeline.source}-value", Schema(original, "PROTOBUF"))
    refused = run(pipeline)
    assert refused.returncode != 0
    last = refused.stderr.strip().splitlines()[-1]
    assert "checkpoint 1: not claimed" in last and subject in last and "incompatible" in last, refused.stderr[-2000:]
    assert "field amount_cents (5) was int64, now string" in last, last
    assert read_committed(pipeline.bootstrap, pipeline.sink) == [] and open_transactions(pipeline) == []
    assert registry.get_versions(subject) == [1]


def test_protobuf_exactly_once_through_a_crash_at_every_failpoint(tmp_path, bootstrap, unique, registry, classes):
    """ProtobufSerializer's orders in, protobuf-confluent out, through a crash at every failpoint a connect-mode
    checkpoint passes outside the writers' tasks; ProtobufDeserializer reads each output once."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from .test_formats import crash_at_every_failpoint

    shutil.copy(SCHEMAS / "orders.desc", tmp_path / "orders.desc")
    pipeline = make(tmp_path, bootstrap, unique, {"value": "protobuf-confluent"},
                    {"value": {"format": "protobuf-confluent", "schema": "orders.desc", "message": "EnrichedOrder",
                               "auto_register": True}},
                    "lockstep_examples.avro_orders:enrich")
    produced = crash_at_every_failpoint(pipeline, lambda batch: produce(pipeline, registry, classes, batch))
    deserialize = ProtobufDeserializer(classes["EnrichedOrder"], {"use.deprecated.format": False})
    read = [deserialize(m.value(), SerializationContext(pipeline.sink, MessageField.VALUE))
            for m in read_committed(pipeline.bootstrap, pipeline.sink)]
    assert sorted(e.order_id for e in read) == sorted(o["order_id"] for o in produced if o["amount"] >= 0)
