"""The record formats by the names a spec gives them (docs/formats.md), and which kind each is: the words the
spec's shape (`lockstep.spec.shape`) and its format section (`lockstep.spec.formats`) read. Pure data: a new
format adds its name here and its work to this room (`resolution`, `wire`, `codecs`), nothing in the spec.

Record formats of a key or a value: raw ``bytes`` (the default), ``string``, ``json`` (with a declared JSON
Schema or without: then a VARIANT), ``avro`` (with a declared schema), ``protobuf`` (a descriptor set and a
message), and the Confluent Schema Registry's framing (a magic byte, a 4-byte schema id, then the payload):
``avro-confluent``, ``json-confluent`` and ``protobuf-confluent`` (whose payload starts with the message
indexes).
"""
from __future__ import annotations

__all__ = [
    "AVRO_FORMATS", "FORMATS", "PROTOBUF_FORMATS", "REGISTRY_FORMATS", "TABLE_FORMATS", "UNSUPPORTED_FORMATS",
]

#: Every format a key or a value may have.
FORMATS = ("bytes", "string", "json", "avro", "protobuf", "avro-confluent", "json-confluent", "protobuf-confluent")
#: Formats a schema registry frames, and the registry's name of their schema type.
REGISTRY_FORMATS = {"avro-confluent": "AVRO", "json-confluent": "JSON", "protobuf-confluent": "PROTOBUF"}
#: Formats whose schema is an Avro schema: an Iceberg table beside the topic reads their values back as its
#: record's columns (`lockstep.formats.codecs.Formats.table_record`).
AVRO_FORMATS = ("avro", "avro-confluent")
#: Formats whose schema is a Protobuf descriptor set (`lockstep.formats.protobuf`) and a message.
PROTOBUF_FORMATS = ("protobuf", "protobuf-confluent")
#: The formats a table's key or value may have (the registry's and Protobuf are not supported for tables yet).
TABLE_FORMATS = ("bytes", "string", "json", "avro")
#: Formats named elsewhere that Lockstep refuses, with the reason (none today).
UNSUPPORTED_FORMATS: dict[str, str] = {}
