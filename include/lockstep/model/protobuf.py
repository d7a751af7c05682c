"""Protobuf schemas as the formats use them (docs/formats.md, "Protobuf"): a descriptor set and a message.

Pure: no Spark, no registry. A Protobuf schema travels as text (`FormatSpec.schema`, `Reading.reader`)
in one form, the base64 of a serialized ``FileDescriptorSet`` whose files come dependencies first (what
``protoc --include_imports --descriptor_set_out`` writes), so the Avro and JSON paths' plumbing carries
it unchanged. The JVM's codec (``jvm/jvm-writer/.../ProtobufCodec.java``) builds the message's
descriptor from the same bytes, and derives the same Spark type as `message_ddl`, field by field.

A Schema Registry holds a Protobuf schema as one file: Confluent's serializers register the base64 of
its ``FileDescriptorProto`` (Apicurio returns it as registered), with a reference per import. The
well-known ``google/protobuf/*.proto`` imports are resolved here; any other reference is refused.
"""
from __future__ import annotations

__all__ = [
    "FDP", "Messages", "UnsupportedProtobuf", "changes", "codec_key", "decode_indexes", "descriptor_set",
    "encode_indexes", "from_registry", "index_path", "load", "message_ddl", "messages", "registry_text",
    "resolve_message", "schema_text",
]

import base64
import binascii
import hashlib
from collections.abc import Sequence

from google.protobuf import descriptor_pb2

FDP = descriptor_pb2.FieldDescriptorProto
#: A message type by full name: (its descriptor, its index path in its file, its file's name).
Messages = dict[str, tuple[descriptor_pb2.DescriptorProto, tuple[int, ...], str]]


class UnsupportedProtobuf(ValueError):
    """A Protobuf schema, or a part of one, that the formats cannot read or write, and why."""


# ---- the schema's text ----------------------------------------------------------------------------------------
def descriptor_set(data: bytes, origin: str) -> descriptor_pb2.FileDescriptorSet:
    """A serialized FileDescriptorSet (``protoc --descriptor_set_out``), or `UnsupportedProtobuf` naming ``origin``."""
    from google.protobuf.message import DecodeError

    fds = descriptor_pb2.FileDescriptorSet()
    try:
        fds.ParseFromString(data)
    except DecodeError as exc:
        raise UnsupportedProtobuf(f"{origin} is not a Protobuf descriptor set (made by protoc --include_imports "
                                  f"--descriptor_set_out): {exc}") from None
    if not fds.file:
        raise UnsupportedProtobuf(f"{origin} is not a Protobuf descriptor set: it holds no file (made by protoc "
                                  "--include_imports --descriptor_set_out)")
    return fds


def schema_text(fds: descriptor_pb2.FileDescriptorSet) -> str:
    """The schema's text form: base64 of the serialized descriptor set."""
    return base64.b64encode(fds.SerializeToString()).decode("ascii")


def load(text: str) -> descriptor_pb2.FileDescriptorSet:
    """The descriptor set of a schema's text form (`schema_text`)."""
    return descriptor_set(base64.b64decode(text), "the schema")


def codec_key(text: str, message: str) -> int:
    """The short key the JVM caches the message's codec by: a 63-bit hash of the schema and the message."""
    return int.from_bytes(hashlib.sha256(f"{message}\n{text}".encode()).digest()[:8], "big") >> 1


# ---- messages -------------------------------------------------------------------------------------------------
def messages(fds: descriptor_pb2.FileDescriptorSet) -> Messages:
    """Every message type by full name: (its descriptor, its index path in its file, its file's name)."""
    found: Messages = {}

    def walk(prefix: str, types: Sequence[descriptor_pb2.DescriptorProto], path: tuple[int, ...], file: str) -> None:
        for i, m in enumerate(types):
            name = f"{prefix}{m.name}"
            found.setdefault(name, (m, path + (i,), file))
            walk(name + ".", m.nested_type, path + (i,), file)

    for f in fds.file:
        walk(f"{f.package}." if f.package else "", f.message_type, (), f.name)
    return found


def resolve_message(fds: descriptor_pb2.FileDescriptorSet, name: str | None, file: str | None = None) -> str:
    """The full name of the message ``name`` (full, or short when one message has it); None: the first message
    of ``file`` (the registry's file), else of the set's last file (the one protoc was given)."""
    found = messages(fds)
    if name is None:
        main = next((f for f in fds.file if f.name == file), None) if file else fds.file[-1]
        if main is None or not main.message_type:
            raise UnsupportedProtobuf("the schema declares no message; name one with `message:`")
        return f"{main.package}.{main.message_type[0].name}" if main.package else main.message_type[0].name
    if name.lstrip(".") in found:
        return name.lstrip(".")
    matches = sorted(full for full in found if full.rsplit(".", 1)[-1] == name)
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UnsupportedProtobuf(f"message {name!r} is ambiguous ({', '.join(matches)}): give its full name")
    raise UnsupportedProtobuf(f"the schema has no message {name!r} (it has {', '.join(sorted(found)) or 'none'})")


_SCALARS = {FDP.TYPE_DOUBLE: "double", FDP.TYPE_FLOAT: "float", FDP.TYPE_INT32: "int", FDP.TYPE_SINT32: "int",
            FDP.TYPE_SFIXED32: "int", FDP.TYPE_UINT32: "bigint", FDP.TYPE_FIXED32: "bigint", FDP.TYPE_INT64: "bigint",
            FDP.TYPE_SINT64: "bigint", FDP.TYPE_SFIXED64: "bigint", FDP.TYPE_UINT64: "decimal(20,0)",
            FDP.TYPE_FIXED64: "decimal(20,0)", FDP.TYPE_BOOL: "boolean", FDP.TYPE_STRING: "string",
            FDP.TYPE_BYTES: "binary", FDP.TYPE_ENUM: "string"}


def message_ddl(fds: descriptor_pb2.FileDescriptorSet, message: str) -> str:
    """The Spark type (DDL) of a message's records, as the JVM's codec builds them: a struct of its fields in
    declaration order; a nested message a struct, a repeated field an array, a map field a map, an enum its
    value's name (a string), int32/sint32/sfixed32 an int, uint32/fixed32 and the 64-bit ints a bigint,
    uint64/fixed64 a decimal(20,0), bytes a binary. A message that contains itself has no Spark type:
    `UnsupportedProtobuf` names the field."""
    found = messages(fds)
    return _struct(found, message, (message,), "")


def _struct(found: Messages, name: str, seen: tuple[str, ...], where: str) -> str:
    m = found[name][0]
    return "struct<" + ",".join(f"`{f.name}`:{_field(found, f, seen, where + f.name)}" for f in m.field) + ">"


def _field(found: Messages, f: descriptor_pb2.FieldDescriptorProto, seen: tuple[str, ...], where: str) -> str:
    repeated = f.label == FDP.LABEL_REPEATED
    if f.type == FDP.TYPE_GROUP:
        raise UnsupportedProtobuf(f"field {where}: a group (proto2's) is not supported; make it a message field")
    if f.type == FDP.TYPE_MESSAGE:
        target = f.type_name.lstrip(".")
        if target not in found:
            raise UnsupportedProtobuf(f"field {where}: its type {target} is not in the schema")
        entry = found[target][0]
        if repeated and entry.options.map_entry:
            key, value = (next(x for x in entry.field if x.number == n) for n in (1, 2))
            return f"map<{_field(found, key, seen, where + '.key')},{_field(found, value, seen, where + '.value')}>"
        if target in seen:
            raise UnsupportedProtobuf(f"field {where}: message {target} contains itself, which has no Spark type")
        kind = _struct(found, target, seen + (target,), where + ".")
    elif f.type in _SCALARS:
        kind = _SCALARS[f.type]
    else:
        raise UnsupportedProtobuf(f"field {where}: its type {FDP.Type.Name(f.type)} is not supported")
    return f"array<{kind}>" if repeated else kind


def changes(old: descriptor_pb2.FileDescriptorSet, new: descriptor_pb2.FileDescriptorSet, message: str) -> list[str]:
    """How ``message`` differs in ``new`` from ``old``, field by field (by number, into nested messages): a field
    removed, or whose type or cardinality changed. The registry decides compatibility; this names the fields,
    for registries that only answer yes or no (Apicurio's Confluent-compatible API gives no reasons)."""
    before, after = messages(old), messages(new)
    out: list[str] = []

    def walk(name: str, where: str, seen: frozenset[str]) -> None:
        if name not in before or name not in after or name in seen:
            return
        was = {f.number: f for f in before[name][0].field}
        now = {f.number: f for f in after[name][0].field}
        for number, f in sorted(was.items()):
            path = f"{where}{f.name}"
            if number not in now:
                out.append(f"field {path} ({number}) was removed")
            elif _kind(now[number]) != _kind(f):
                out.append(f"field {path} ({number}) was {_kind(f)}, now {_kind(now[number])}")
            elif f.type == FDP.TYPE_MESSAGE:
                walk(f.type_name.lstrip("."), path + ".", seen | {name})

    walk(message, "", frozenset())
    return out


def _kind(f: descriptor_pb2.FieldDescriptorProto) -> str:
    kind = f.type_name.lstrip(".") if f.type in (FDP.TYPE_MESSAGE, FDP.TYPE_ENUM) else \
        FDP.Type.Name(f.type).removeprefix("TYPE_").lower()
    return f"repeated {kind}" if f.label == FDP.LABEL_REPEATED else kind


# ---- the registry's message indexes ----------------------------------------------------------------------------
def index_path(fds: descriptor_pb2.FileDescriptorSet, message: str) -> tuple[int, ...] | None:
    """Where ``message`` is in its file, as the registry's framing names it (``(0,)``: the file's first
    message, ``(1, 0)``: the first nested message of the second), or None when the schema has no such message."""
    found = messages(fds).get(message)
    return found[1] if found else None


def encode_indexes(path: Sequence[int]) -> bytes:
    """Confluent's message indexes: the single byte 0 for the first message, else a zigzag varint count then
    each index as a zigzag varint."""
    if tuple(path) == (0,):
        return b"\x00"
    return b"".join(_varint(_zigzag(n)) for n in (len(path), *path))


def decode_indexes(data: bytes) -> tuple[tuple[int, ...], int]:
    """(the message indexes, how many bytes they take) at the start of ``data`` (what follows the 5-byte
    header); ValueError when they are not readable."""
    count, at = _read_varint(data, 0)
    count = _unzigzag(count)
    if count == 0:
        return (0,), at
    if count < 0 or count > len(data):
        raise ValueError(f"the message indexes are not readable (a count of {count})")
    path = []
    for _ in range(count):
        value, at = _read_varint(data, at)
        path.append(_unzigzag(value))
    return tuple(path), at


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("the message indexes are cut short")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at


# ---- the registry's form ---------------------------------------------------------------------------------------
def from_registry(text: str) -> tuple[descriptor_pb2.FileDescriptorSet, str]:
    """(the descriptor set, its main file's name) of a Protobuf schema a registry holds: the base64 of a
    ``FileDescriptorProto``, as Confluent's serializers register it. Its imports of the well-known
    ``google/protobuf/*.proto`` files are resolved from the protobuf library; other references, and a schema
    registered as ``.proto`` text, are refused (`UnsupportedProtobuf`)."""
    file = descriptor_pb2.FileDescriptorProto()
    try:
        file.ParseFromString(base64.b64decode(text, validate=True))
        valid = bool(file.name)
    except (binascii.Error, ValueError):
        valid = False
    if not valid:
        raise UnsupportedProtobuf("the registry holds it as .proto text, which Lockstep does not parse: register it "
                                  "as a descriptor (as Confluent's serializers do), or declare the schema in the spec")
    fds = descriptor_pb2.FileDescriptorSet()
    added: set[str] = set()
    _add_well_known(fds, file, added)
    fds.file.append(file)
    return fds, file.name


def _add_well_known(fds: descriptor_pb2.FileDescriptorSet, file: descriptor_pb2.FileDescriptorProto,
                    added: set[str]) -> None:
    from google.protobuf import descriptor_pool

    for dep in file.dependency:
        if dep in added:
            continue
        if not dep.startswith("google/protobuf/"):
            raise UnsupportedProtobuf(f"it imports {dep} (a schema reference), which Lockstep does not resolve; "
                                      "only the well-known google/protobuf/*.proto imports are")
        _import_well_known(dep)
        proto = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(dep).CopyToProto(proto)
        _add_well_known(fds, proto, added)
        added.add(dep)
        fds.file.append(proto)


def _import_well_known(name: str) -> None:
    import importlib

    module = "google.protobuf." + name.removeprefix("google/protobuf/").removesuffix(".proto").replace("/", ".") + "_pb2"
    try:
        importlib.import_module(module)
    except ImportError:
        raise UnsupportedProtobuf(f"it imports {name}, which is not a well-known type this protobuf library has") from None


def registry_text(fds: descriptor_pb2.FileDescriptorSet, message: str) -> str:
    """What to register for a spec's descriptor set: the base64 ``FileDescriptorProto`` of the file declaring
    ``message``, as Confluent's serializers register it; `UnsupportedProtobuf` when that file imports other than
    the well-known types (a reference Lockstep does not register)."""
    file_name = messages(fds)[message][2]
    file = next(f for f in fds.file if f.name == file_name)
    others = [d for d in file.dependency if not d.startswith("google/protobuf/")]
    if others:
        raise UnsupportedProtobuf(f"{file_name} imports {', '.join(others)}: a schema with references cannot be "
                                  "registered by Lockstep; register it with your tools and leave out `schema:`")
    return base64.b64encode(file.SerializeToString()).decode("ascii")
