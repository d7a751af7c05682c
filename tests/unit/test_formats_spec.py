"""The spec's record formats (``source.value``, ``sink.key``, ...) and what the formats agree on
(`lockstep.formats.wire`): pure, no services."""
from __future__ import annotations

import json

import pytest

from lockstep.errors import SpecError
from lockstep.formats import wire
from lockstep.spec import BYTES, parse_spec

ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "order_id", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "note", "type": ["null", "string"], "default": None}]}


def spec(source: dict | None = None, sink: dict | None = None, file: str = "p.yaml"):
    return parse_spec({"name": "p", "source": {"topics": ["in"], **(source or {})}, "transform": "m:f",
                       "sink": {"topic": "out", "dead_letter_topic": "dlq", **(sink or {})},
                       "checkpoints": {"store": "s3://bucket/p"}}, file)


def problems(source: dict | None = None, sink: dict | None = None, file: str = "p.yaml") -> dict[str, str]:
    with pytest.raises(SpecError) as err:
        spec(source, sink, file)
    return {p.field: p.reason for p in err.value.problems}


def test_without_formats_keys_and_values_stay_bytes():
    s = spec()
    assert (s.source.key, s.source.value, s.sink.key, s.sink.value) == (BYTES, BYTES, BYTES, BYTES)
    assert not s.source.value.decoded and s.source.registry_conn_id == "schema_registry_default"


def test_the_short_form_names_the_format_and_the_subject_follows_the_topic():
    s = spec({"value": "avro-confluent", "key": "string"}, {"value": {"format": "json-confluent",
                                                                        "schema": {"type": "object", "properties": {
                                                                            "a": {"type": "string"}}}}})
    assert s.source.value.registry and s.source.value.subject_for("in", "value") == "in-value"
    assert s.source.key.format == "string" and not s.source.key.registry
    assert s.sink.value.schema_from == "inline" and json.loads(s.sink.value.schema or "")["type"] == "object"
    assert not s.sink.value.auto_register  # off unless asked


def test_a_schema_file_is_read_beside_the_spec(tmp_path):
    (tmp_path / "order.avsc").write_text(json.dumps(ORDER))
    s = spec({"value": {"format": "avro", "schema": "order.avsc"}}, file=str(tmp_path / "p.yaml"))
    assert json.loads(s.source.value.schema or "") == ORDER and s.source.value.schema_from == str(tmp_path / "order.avsc")


def test_bad_formats_are_refused_naming_the_field(tmp_path):
    found = problems({"value": {"format": "avro"}, "key": {"format": "xml"}},
                     {"value": {"format": "avro-confluent", "schema": "missing.avsc", "compatibility": "LOOSE"},
                      "key": {"format": "string", "subject": "s"}}, file=str(tmp_path / "p.yaml"))
    assert "is required for format avro" in found["source.value.schema"]
    assert "must be one of bytes, string, json, avro, protobuf, avro-confluent" in found["source.key.format"]
    assert "cannot read schema file" in found["sink.value.schema"] and "missing.avsc" in found["sink.value.schema"]
    assert "must be one of BACKWARD" in found["sink.value.compatibility"]
    assert "is for the registry formats" in found["sink.key.subject"]


def test_a_source_cannot_auto_register_and_a_schema_must_be_json():
    found = problems({"value": {"format": "avro-confluent", "auto_register": True}},
                     {"value": {"format": "avro", "schema": "{not json"}})
    assert "unknown key" in found["source.value.auto_register"]
    assert "is not JSON" in found["sink.value.schema"]


def test_wire_framing_round_trips_and_names_a_bad_magic_byte():
    framed = wire.frame(258, b"payload")
    assert framed[:5] == b"\x00\x00\x00\x01\x02" and wire.unframe(framed) == (258, b"payload")
    with pytest.raises(ValueError, match="magic byte"):
        wire.unframe(b"\x01\x00\x00\x00\x01x")


def test_required_avro_fields_are_those_that_cannot_be_null():
    assert wire.avro_required_fields(json.dumps(ORDER)) == ("order_id", "amount")


def test_a_json_schema_becomes_a_spark_type_or_is_refused_naming_the_field():
    ddl = wire.json_schema_ddl(json.dumps({"type": "object", "properties": {
        "id": {"type": "string"}, "n": {"type": ["integer", "null"]}, "tags": {"type": "array", "items": {"type": "string"}},
        "at": {"type": "object", "properties": {"x": {"type": "number"}, "ok": {"type": "boolean"}}}}}))
    assert ddl == "struct<`id`:string,`n`:bigint,`tags`:array<string>,`at`:struct<`x`:double,`ok`:boolean>>"
    with pytest.raises(wire.UnsupportedSchema, match=r"\$\.v: oneOf is not supported"):
        wire.json_schema_ddl(json.dumps({"type": "object", "properties": {"v": {"oneOf": []}}}))


def test_a_flat_json_schema_is_given_to_the_jvm_decoder_and_any_other_to_spark_alone():
    flat = {"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": ["integer", "null"]},
                                             "x": {"type": "number"}, "ok": {"type": "boolean"}}}
    assert wire.json_flat_fields(json.dumps(flat)) == "id:s,n:l,x:d,ok:b"
    for nested in ({"at": {"type": "object", "properties": {"x": {"type": "number"}}}},
                   {"tags": {"type": "array", "items": {"type": "string"}}},
                   {"a,b": {"type": "string"}}, {"v": {"oneOf": []}}):
        assert wire.json_flat_fields(json.dumps({"type": "object", "properties": {**flat["properties"], **nested}})) \
            is None, nested
    assert wire.json_flat_fields(json.dumps({"type": "string"})) is None


@pytest.mark.parametrize(("reader", "writer", "expected"), [
    # a field added with a default reads old records; without one, it does not
    ({"name": "note", "type": ["null", "string"], "default": None}, None, []),
    ({"name": "note", "type": "string"}, None, ["field note is new and has no default"]),
    # promotions Avro allows, and one it does not
    ({"name": "n", "type": "long"}, {"name": "n", "type": "int"}, []),
    ({"name": "n", "type": "string"}, {"name": "n", "type": "long"}, ["field n was long, now string"]),
    ({"name": "n", "type": ["null", "double"]}, {"name": "n", "type": "float"}, []),
])
def test_avro_read_problems_name_the_field(reader, writer, expected):
    base = [{"name": "id", "type": "string"}]
    r = {"type": "record", "name": "R", "fields": base + [reader]}
    w = {"type": "record", "name": "R", "fields": base + ([writer] if writer else [])}
    found = wire.avro_read_problems(json.dumps(r), json.dumps(w))
    assert len(found) == len(expected) and all(f.startswith(e) for f, e in zip(found, expected, strict=True)), found


@pytest.mark.parametrize("fmt, schema", [
    ("json", {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
    ("avro", {"type": "record", "name": "O", "fields": [{"name": "id", "type": "string"}]}),
])
def test_a_declared_json_or_avro_schema_is_never_read_as_a_protobuf_descriptor_set(fmt, schema):
    """Only a Protobuf part has a message: a JSON Schema or an Avro schema is not base64 (whose decoding
    failed on some of them, by their length, and let others through by chance)."""
    from lockstep.formats.resolution import readings, writings

    part = {"format": fmt, "schema": json.dumps(schema)}
    s = spec({"value": part}, {"value": part})
    assert [(r.part, json.loads(r.reader or ""), r.message) for r in readings(s)] == [("value", schema, None)]
    assert [(w.part, json.loads(w.schema or ""), w.message) for w in writings(s)] == [("value", schema, None)]


@pytest.mark.parametrize(("metrics", "records", "counted"), [
    ({"records": 10, "undecodable": 3}, 10, 3),
    ({"records": 10, "undecodable": 0}, 10, 0),
    ({}, 10, None),  # the optimizer pruned the input: the write reported nothing
    ({"records": 4, "undecodable": 0}, 10, None),  # a limit stopped the read; transaction markers in the offsets
    ({"records": 20, "undecodable": 6}, 10, None),  # a stage Spark ran again counted twice
    ({"records": 10, "undecodable": 11}, 10, None),
    ({"records": 10}, 10, None),
])
def test_the_writes_own_count_of_dead_letters_is_taken_only_when_it_saw_each_record_once(metrics, records, counted):
    from lockstep.formats.codecs import counted_undecodable

    assert counted_undecodable(metrics, records) == counted


def test_the_writers_columns_gain_an_error_column_for_dead_letters():
    from lockstep.formats.codecs import with_error

    assert with_error(("value", "topic")) == ("value", "topic", "error")
    assert with_error(["value", "error"]) == ("value", "error")
