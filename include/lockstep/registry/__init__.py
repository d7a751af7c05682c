"""The Schema Registry of the registry formats (docs/formats.md): its client (`client`) and what a
run reads and writes with (`schemas`: the writer schemas of a source's subjects, the reader schema, the
sink's registered schema and its id). Used by the plan (the sink's check), the Spark run (the codecs),
``lockstep validate`` and the tools that register the demo's schemas."""

__all__ = [
    "client", "schemas",
]
