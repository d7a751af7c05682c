"""The Protobuf formats' pure parts (`lockstep.formats.protobuf`, the spec's ``protobuf`` sections): a descriptor's
Spark type, the registry's message indexes, the registry's form of a schema."""
from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2

from lockstep.errors import SpecError
from lockstep.formats import protobuf
from lockstep.spec import load_spec

FDP = descriptor_pb2.FieldDescriptorProto
EXAMPLES = Path(__file__).resolve().parents[2] / "include" / "lockstep_examples" / "schemas"


def every_kind() -> descriptor_pb2.FileDescriptorSet:
    """A message with a field of every kind the formats map: scalars, an enum, a nested message, repeated, a map."""
    f = descriptor_pb2.FileDescriptorProto(name="t/kinds.proto", package="t", syntax="proto3")
    f.enum_type.add(name="Colour").value.add(name="RED", number=0)
    inner = f.message_type.add(name="Inner")
    inner.field.add(name="n", number=1, type=FDP.TYPE_SINT32, label=FDP.LABEL_OPTIONAL)
    m = f.message_type.add(name="Kinds")
    for number, (name, kind) in enumerate([
            ("d", FDP.TYPE_DOUBLE), ("f", FDP.TYPE_FLOAT), ("i32", FDP.TYPE_INT32), ("s32", FDP.TYPE_SFIXED32),
            ("u32", FDP.TYPE_UINT32), ("x32", FDP.TYPE_FIXED32), ("i64", FDP.TYPE_INT64), ("s64", FDP.TYPE_SINT64),
            ("u64", FDP.TYPE_UINT64), ("x64", FDP.TYPE_FIXED64), ("b", FDP.TYPE_BOOL), ("s", FDP.TYPE_STRING),
            ("raw", FDP.TYPE_BYTES)], 1):
        m.field.add(name=name, number=number, type=kind, label=FDP.LABEL_OPTIONAL)
    m.field.add(name="colour", number=20, type=FDP.TYPE_ENUM, type_name=".t.Colour", label=FDP.LABEL_OPTIONAL)
    m.field.add(name="inner", number=21, type=FDP.TYPE_MESSAGE, type_name=".t.Inner", label=FDP.LABEL_OPTIONAL)
    m.field.add(name="inners", number=22, type=FDP.TYPE_MESSAGE, type_name=".t.Inner", label=FDP.LABEL_REPEATED)
    m.field.add(name="tags", number=23, type=FDP.TYPE_STRING, label=FDP.LABEL_REPEATED)
    entry = m.nested_type.add(name="CountsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=FDP.TYPE_STRING, label=FDP.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=FDP.TYPE_MESSAGE, type_name=".t.Inner", label=FDP.LABEL_OPTIONAL)
    m.field.add(name="counts", number=24, type=FDP.TYPE_MESSAGE, type_name=".t.Kinds.CountsEntry",
                label=FDP.LABEL_REPEATED)
    return descriptor_pb2.FileDescriptorSet(file=[f])


def test_a_message_becomes_a_struct_of_its_fields_in_declaration_order() -> None:
    assert protobuf.message_ddl(every_kind(), "t.Kinds") == (
        "struct<`d`:double,`f`:float,`i32`:int,`s32`:int,`u32`:bigint,`x32`:bigint,`i64`:bigint,`s64`:bigint,"
        "`u64`:decimal(20,0),`x64`:decimal(20,0),`b`:boolean,`s`:string,`raw`:binary,`colour`:string,"
        "`inner`:struct<`n`:int>,`inners`:array<struct<`n`:int>>,`tags`:array<string>,"
        "`counts`:map<string,struct<`n`:int>>>")


def test_a_message_that_contains_itself_is_refused_naming_the_field() -> None:
    fds = every_kind()
    inner = fds.file[0].message_type[0]
    inner.field.add(name="child", number=2, type=FDP.TYPE_MESSAGE, type_name=".t.Inner", label=FDP.LABEL_OPTIONAL)
    with pytest.raises(protobuf.UnsupportedProtobuf, match=r"field inner\.child: message t\.Inner contains itself"):
        protobuf.message_ddl(fds, "t.Kinds")


def test_messages_are_found_by_full_or_short_name_and_default_to_the_first() -> None:
    fds = every_kind()
    assert protobuf.resolve_message(fds, "Kinds") == "t.Kinds"
    assert protobuf.resolve_message(fds, ".t.Inner") == "t.Inner"
    assert protobuf.resolve_message(fds, "CountsEntry") == "t.Kinds.CountsEntry"
    assert protobuf.resolve_message(fds, None) == "t.Inner"
    with pytest.raises(protobuf.UnsupportedProtobuf, match="has no message 'Nope'"):
        protobuf.resolve_message(fds, "Nope")


@pytest.mark.parametrize(("path", "wire"), [((0,), b"\x00"), ((1,), b"\x02\x02"), ((1, 0), b"\x04\x02\x00"),
                                            ((0, 2), b"\x04\x00\x04"), ((70,), b"\x02\x8c\x01")])
def test_message_indexes_are_confluents_zigzag_varints(path: tuple[int, ...], wire: bytes) -> None:
    assert protobuf.encode_indexes(path) == wire
    assert protobuf.decode_indexes(wire + b"\x0a\x02o1") == (path, len(wire))


def test_the_long_form_of_the_first_message_reads_as_it_too() -> None:
    assert protobuf.decode_indexes(b"\x02\x00\x0a") == ((0,), 2)


@pytest.mark.parametrize("wire", [b"", b"\x02", b"\x04\x02", b"\x80"])
def test_cut_short_message_indexes_are_refused(wire: bytes) -> None:
    with pytest.raises(ValueError, match="message indexes"):
        protobuf.decode_indexes(wire)


def test_index_paths_of_top_level_and_nested_messages() -> None:
    fds = every_kind()
    assert protobuf.index_path(fds, "t.Inner") == (0,)
    assert protobuf.index_path(fds, "t.Kinds") == (1,)
    assert protobuf.index_path(fds, "t.Kinds.CountsEntry") == (1, 0)
    assert protobuf.index_path(fds, "t.Other") is None


def test_the_registrys_base64_file_descriptor_becomes_a_descriptor_set_and_back() -> None:
    fds = every_kind()
    registered = protobuf.registry_text(fds, "t.Kinds")
    assert base64.b64decode(registered) == fds.file[0].SerializeToString()
    again, main = protobuf.from_registry(registered)
    assert main == "t/kinds.proto" and again == fds
    assert protobuf.load(protobuf.schema_text(again)) == fds


def test_well_known_imports_are_resolved_and_others_refused() -> None:
    f = descriptor_pb2.FileDescriptorProto(name="t/at.proto", package="t", syntax="proto3",
                                           dependency=["google/protobuf/timestamp.proto"])
    m = f.message_type.add(name="At")
    m.field.add(name="at", number=1, type=FDP.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp",
                label=FDP.LABEL_OPTIONAL)
    fds, _ = protobuf.from_registry(base64.b64encode(f.SerializeToString()).decode())
    assert [x.name for x in fds.file] == ["google/protobuf/timestamp.proto", "t/at.proto"]
    assert protobuf.message_ddl(fds, "t.At") == "struct<`at`:struct<`seconds`:bigint,`nanos`:int>>"
    f.dependency.append("other/money.proto")
    with pytest.raises(protobuf.UnsupportedProtobuf, match="imports other/money.proto"):
        protobuf.from_registry(base64.b64encode(f.SerializeToString()).decode())
    with pytest.raises(protobuf.UnsupportedProtobuf, match="cannot be registered by Lockstep"):
        protobuf.registry_text(descriptor_pb2.FileDescriptorSet(file=[f]), "t.At")


def test_changes_name_removed_and_retyped_fields_into_nested_messages() -> None:
    new = every_kind()
    kinds = new.file[0].message_type[1]
    fields = {f.name: f for f in kinds.field}
    fields["d"].type = FDP.TYPE_STRING
    fields["tags"].label = FDP.LABEL_OPTIONAL
    new.file[0].message_type[0].field[0].type = FDP.TYPE_INT64  # Inner.n
    new.file[0].message_type[0].field.add(name="m", number=2, type=FDP.TYPE_BOOL, label=FDP.LABEL_OPTIONAL)  # added
    kinds.field.remove(fields["raw"])
    assert protobuf.changes(every_kind(), new, "t.Kinds") == [
        "field d (1) was double, now string", "field raw (13) was removed", "field inner.n (1) was sint32, now int64",
        "field inners.n (1) was sint32, now int64", "field tags (23) was repeated string, now string",
        "field counts.value.n (1) was sint32, now int64"]
    assert protobuf.changes(every_kind(), every_kind(), "t.Kinds") == []


def test_a_schema_registered_as_proto_text_is_refused_with_the_way_out() -> None:
    with pytest.raises(protobuf.UnsupportedProtobuf, match=r"\.proto text.*declare the schema in the spec"):
        protobuf.from_registry('syntax = "proto3"; message A { string a = 1; }')


def test_codec_keys_differ_by_schema_and_message() -> None:
    text = protobuf.schema_text(every_kind())
    keys = {protobuf.codec_key(text, "t.Kinds"), protobuf.codec_key(text, "t.Inner"),
            protobuf.codec_key(protobuf.schema_text(descriptor_pb2.FileDescriptorSet(file=[])), "t.Kinds")}
    assert len(keys) == 3 and all(0 <= k < 2**63 for k in keys)


# ---- the spec's protobuf sections ---------------------------------------------------------------------------------
SPEC: dict[str, Any] = {
    "name": "orders-proto",
    "source": {"topics": ["orders"], "value": {"format": "protobuf", "schema": "orders.desc", "message": "Order"}},
    "transform": "lockstep_examples.avro_orders:enrich",
    "sink": {"topic": "out", "dead_letter_topic": "dlq",
             "value": {"format": "protobuf-confluent", "schema": "orders.desc", "message": "EnrichedOrder"}},
    "checkpoints": {"store": "s3://lockstep/checkpoints"},
}


def spec_in(tmp_path: Path, **sections: Any) -> Path:
    import yaml

    (tmp_path / "orders.desc").write_bytes((EXAMPLES / "orders.desc").read_bytes())
    doc = copy.deepcopy(SPEC)
    for part, value in sections.items():
        side, key = part.split("_")
        doc[side][key] = value
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_protobuf_format_names_a_descriptor_set_beside_the_spec_and_a_message(tmp_path: Path) -> None:
    from lockstep.formats.resolution import readings

    spec = load_spec(spec_in(tmp_path))
    assert (spec.source.value.message, spec.sink.value.message) == ("Order", "EnrichedOrder")
    assert spec.sink.value.registry and not spec.source.value.registry
    assert protobuf.load(spec.source.value.schema or "") == protobuf.descriptor_set(
        (EXAMPLES / "orders.desc").read_bytes(), "orders.desc")
    assert spec.source.value.schema_from == str(tmp_path / "orders.desc")
    (reading,) = readings(spec)  # the run reads with the message's full name
    assert reading.message == "dev.lockstep.examples.Order" and reading.reader == spec.source.value.schema


@pytest.mark.parametrize(("section", "field", "reason"), [
    ({"format": "protobuf"}, "source.value.schema", "is required for format protobuf"),
    ({"format": "protobuf", "schema": "orders.desc", "message": "Nope"}, "source.value.message", "has no message 'Nope'"),
    ({"format": "protobuf", "schema": "absent.desc"}, "source.value.schema", "cannot read descriptor set file"),
    ({"format": "protobuf", "schema": "p.yaml"}, "source.value.schema", "is not a Protobuf descriptor set"),
    ({"format": "avro", "schema": {"type": "string"}, "message": "Order"}, "source.value.message",
     "is for the Protobuf formats"),
])
def test_bad_protobuf_sections_are_refused_naming_the_field(tmp_path: Path, section: dict[str, Any], field: str,
                                                           reason: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(spec_in(tmp_path, source_value=section))
    found = {p.field: p.reason for p in info.value.problems}
    assert reason in found.get(field, ""), found


def test_a_proto2_group_is_refused_naming_the_field() -> None:
    fds = every_kind()
    fds.file[0].message_type[1].field.add(name="legacy", number=30, type=FDP.TYPE_GROUP, type_name=".t.Inner",
                                          label=FDP.LABEL_OPTIONAL)
    with pytest.raises(protobuf.UnsupportedProtobuf, match="field legacy: a group"):
        protobuf.message_ddl(fds, "t.Kinds")
