"""What the record formats agree on, defined once: the Schema Registry's wire framing, the reasons a
record that does not decode is dead-lettered with, and what a schema says a record must carry.

Pure: no Spark, no registry. `lockstep.formats.codecs` builds its Spark expressions from these, and
tests and tools frame and check records with the same definitions.
"""
from __future__ import annotations

__all__ = [
    "avro_read_problems", "header", "unframe",
]

import json
import struct
from collections.abc import Mapping

#: Confluent's wire format: byte 0 is this magic byte, bytes 1-4 the schema id (big-endian), then the payload.
MAGIC_BYTE = 0
HEADER_BYTES = 5

# ---- the reasons a record is dead-lettered with (the `lockstep.error` header) -------------------------------
#: ``{part}`` is "value" or "key", ``{id}`` the schema id, ``{subject}`` the registry subject.
BAD_MAGIC = "{part} is not in the schema registry's wire format (its first byte is not the magic byte 0)"
UNKNOWN_ID = "{part} carries schema id {id}, which is not a version of subject {subject}"
UNDECODABLE = "{part} does not decode with its writer schema (id {id}): {why}"
NOT_JSON = "{part} is not JSON"
DOES_NOT_MATCH = "{part} does not match its schema ({where}): {why}"
#: An output the sink's schema cannot hold (a required field left null).
DOES_NOT_FIT = "the transform's {column} does not fit the sink's schema ({where}): {why}"


def frame(schema_id: int, payload: bytes) -> bytes:
    """A payload in the registry's wire format."""
    return header(schema_id) + payload


def header(schema_id: int) -> bytes:
    return struct.pack(">bI", MAGIC_BYTE, schema_id)


def unframe(data: bytes) -> tuple[int, bytes]:
    """(schema id, payload) of a framed record; ValueError naming what is wrong otherwise."""
    if len(data) < HEADER_BYTES or data[0] != MAGIC_BYTE:
        raise ValueError(BAD_MAGIC.format(part="the record"))
    return struct.unpack(">I", data[1:HEADER_BYTES])[0], data[HEADER_BYTES:]


# ---- Avro ---------------------------------------------------------------------------------------------------
def avro_required_fields(schema_text: str) -> tuple[str, ...]:
    """The top-level fields of an Avro record schema that can never be null (not a union with null).

    A record decoded by Spark's ``from_avro`` in PERMISSIVE mode from bytes that do not decode comes
    back with every field null; a valid record never has a required field null. So a null in one of
    these names a record that did not decode (or, on the sink, an output the schema cannot hold)."""
    doc = json.loads(schema_text)
    if not isinstance(doc, Mapping) or doc.get("type") != "record":
        return ()
    return tuple(str(f["name"]) for f in doc.get("fields", []) if not _nullable(f.get("type")))


def _nullable(kind: object) -> bool:
    if kind == "null":
        return True
    if isinstance(kind, list):
        return any(_nullable(k) for k in kind)
    if isinstance(kind, Mapping):
        return kind.get("type") == "null"
    return False


# ---- JSON Schema --------------------------------------------------------------------------------------------
_JSON_TYPES = {"string": "string", "integer": "bigint", "number": "double", "boolean": "boolean"}


class UnsupportedSchema(ValueError):
    """A JSON Schema construct that has no Spark type here (a ``$ref``, ``oneOf``, a free-form object)."""


def json_schema_ddl(schema_text: str) -> str:
    """The Spark type (DDL) of the records a JSON Schema describes: an object becomes a struct of its
    ``properties`` in their order, ``integer`` a bigint, ``number`` a double, an array an array of its
    ``items``' type; ``format: date-time`` strings stay strings. Raises `UnsupportedSchema` naming the
    field it cannot type."""
    doc = json.loads(schema_text)
    ddl = _json_type(doc, "$")
    if not ddl.startswith("struct<"):
        raise UnsupportedSchema("$: the schema of a record must be an object with properties")
    return ddl


def _json_type(doc: object, where: str) -> str:
    if not isinstance(doc, Mapping):
        raise UnsupportedSchema(f"{where}: expected a schema object, got {doc!r}")
    for construct in ("$ref", "oneOf", "anyOf", "allOf"):
        if construct in doc:
            raise UnsupportedSchema(f"{where}: {construct} is not supported; declare the field's type")
    kind = doc.get("type")
    if isinstance(kind, list):  # ["string", "null"]: nullable, which every Spark field is
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise UnsupportedSchema(f"{where}: a field of several types ({kind}) has no Spark type")
        kind = kinds[0]
    if kind in _JSON_TYPES:
        return _JSON_TYPES[str(kind)]
    if kind == "array":
        return f"array<{_json_type(doc.get('items', {}), where + '[]')}>"
    if kind == "object" or (kind is None and "properties" in doc):
        props = doc.get("properties")
        if not isinstance(props, Mapping) or not props:
            raise UnsupportedSchema(f"{where}: an object without properties has no Spark type")
        return "struct<" + ",".join(f"`{name}`:{_json_type(sub, f'{where}.{name}')}" for name, sub in props.items()) + ">"
    raise UnsupportedSchema(f"{where}: type {kind!r} is not supported (string, integer, number, boolean, array, object)")


#: The kinds of `json_flat_fields` (Lockstep's JVM JSON decoder, ``dev.lockstep.formats.JsonDecode``) by Spark type.
_FLAT_JSON_KINDS = {"string": "s", "bigint": "l", "double": "d", "boolean": "b"}


def json_flat_fields(schema_text: str) -> str | None:
    """A JSON Schema's record as the fields of Lockstep's JVM JSON decoder (``name:kind`` joined by ``,``, kinds
    ``s l d b``), when it is an object of strings, integers, numbers and booleans only; None otherwise (nested
    objects, arrays, a name with a comma), and those records are decoded by Spark's ``from_json`` alone."""
    try:
        ddl = json_schema_ddl(schema_text)
    except (UnsupportedSchema, ValueError):
        return None
    doc = json.loads(schema_text)
    fields = []
    for name, sub in doc.get("properties", {}).items():
        kind = _FLAT_JSON_KINDS.get(_json_type(sub, f"$.{name}"))
        if kind is None or "," in name:
            return None
        fields.append(f"{name}:{kind}")
    return ",".join(fields) if fields and ddl else None


def json_required_fields(schema_text: str) -> tuple[str, ...]:
    """The top-level ``required`` properties of a JSON Schema object."""
    doc = json.loads(schema_text)
    return tuple(str(f) for f in doc.get("required", [])) if isinstance(doc, Mapping) else ()


#: Avro's promotions (the writer's type -> reader types that read it), per the specification's resolution rules.
_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}


def avro_read_problems(reader_text: str, writer_text: str) -> list[str]:
    """Why records written with ``writer_text`` cannot be read with ``reader_text`` (empty: they can), by
    Avro's resolution rules over record fields, naming each field: a field of the reader the writer lacks
    and that has no default, or a field whose type the writer's does not promote to.

    The registry decides compatibility; this says why, for registries that only answer yes or no
    (Apicurio's Confluent-compatible API gives no reasons)."""
    return _record_problems(json.loads(reader_text), json.loads(writer_text), "")


def _name(kind: object) -> str:
    if isinstance(kind, Mapping):
        return str(kind.get("type"))
    if isinstance(kind, list):
        return "union"
    return str(kind)


def _record_problems(reader: object, writer: object, where: str) -> list[str]:
    if not (isinstance(reader, Mapping) and isinstance(writer, Mapping) and reader.get("type") == "record"
            and writer.get("type") == "record"):
        return []
    written = {f["name"]: f for f in writer.get("fields", [])}
    problems = []
    for field in reader.get("fields", []):
        path = f"{where}{field['name']}"
        if field["name"] not in written:
            if "default" not in field:
                problems.append(f"field {path} is new and has no default, so records without it cannot be read")
            continue
        problems += _type_problems(field["type"], written[field["name"]]["type"], path)
    return problems


def _type_problems(reader: object, writer: object, path: str) -> list[str]:
    if isinstance(writer, list):  # every branch the writer may have used must be readable
        return [p for branch in writer for p in _type_problems(reader, branch, path)][:1]
    if isinstance(reader, list):
        if any(not _type_problems(branch, writer, path) for branch in reader):
            return []
        return [f"field {path} was {_name(writer)}, now {_name(reader)}: no branch of the union reads it"]
    r, w = _name(reader), _name(writer)
    if r == "record" and w == "record":
        return _record_problems(reader, writer, path + ".")
    if r == w or r in _PROMOTIONS.get(w, set()):
        return []
    return [f"field {path} was {w}, now {r}, which Avro does not promote {w} to"]
