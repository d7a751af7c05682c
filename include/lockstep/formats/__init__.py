"""Record formats, in one room (docs/formats.md): everything a format is, from the spec's words to the bytes.

Its modules, from the ground up (each on the floor of docs/DESIGN.md's map its role belongs to):

- ``protobuf``: a Protobuf schema as the formats carry it (a descriptor set and a message), the one
  reader of descriptor sets; pure, beside the spec, which checks a format section with it.
- ``wire``: what the formats agree on (the registry's framing, the dead-letter reasons, what a schema
  says a record carries); pure.
- ``registry``: the Schema Registry's REST client (I/O).
- ``resolution``: the schemas a checkpoint reads and writes with, resolved on the driver through the
  registry before any record moves.
- ``codecs``: the formats as Spark expressions (decode before the transform, encode after it); the only
  module of the room that imports Spark.

- ``names``: the formats by the names a spec gives them, and which kind each is (the spec's words).

The JVM side mirrors ``protobuf`` and ``codecs`` in the Java package ``dev.lockstep.formats``
(``jvm/jvm-writer/dev/lockstep/formats/``). A new format adds its name to ``names``, its framing to ``wire``
(if it has its own), its resolution to ``resolution`` and its Spark expressions to ``codecs`` (and a JVM codec
beside ``ProtobufCodec`` if Spark has none): this package, its JVM mirror and their tests."""

__all__ = [
    "codecs", "names", "protobuf", "registry", "resolution", "wire",
]
