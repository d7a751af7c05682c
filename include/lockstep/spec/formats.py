"""A key's or a value's format (``source.value``, ``sink.key``, a table's ``key``...) and its schema.

A format decides how the writers encode and the job decodes records, so its schema is read when the spec is
loaded (a file beside the spec, or inline) and a Protobuf descriptor set is checked to hold the message named:
a bad schema fails validation, not a checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lockstep.formats.names import PROTOBUF_FORMATS, REGISTRY_FORMATS, UNSUPPORTED_FORMATS
from lockstep.spec.checker import MISSING, Checker, declared_default, declared_words, describe
from lockstep.spec.fields import Section as SectionShape
from lockstep.spec.shape import SPEC

__all__ = ["BYTES", "FormatSpec", "read_format"]




@dataclass(frozen=True)
class FormatSpec:
    """How a key or a value is framed and encoded (``source.value``, ``sink.key``, ...).

    On the source, the decoded record is handed to the transform as a column (``data`` for the value,
    ``key_data`` for the key) beside the raw bytes; on the sink, the writer encodes the transform's
    ``data`` / ``key_data`` into ``value`` / ``key`` (`lockstep.formats.codecs`)."""

    format: str = "bytes"
    #: The declared schema's text (Avro or JSON Schema, as JSON; Protobuf: the base64 of its descriptor set,
    #: `lockstep.formats.protobuf`), read from ``schema`` when the spec is loaded; on a source with a registry
    #: it is the reader schema, on a sink the schema written with.
    schema: str | None = None
    #: Where the schema came from (a file, or "inline"), for messages.
    schema_from: str | None = None
    #: The registry subject (registry formats); None: ``<topic>-value`` / ``<topic>-key``.
    subject: str | None = None
    #: Sink only: register ``schema`` under ``subject`` when it is not there yet (after the registry's
    #: compatibility check). Off: the plan refuses a schema that is not registered.
    auto_register: bool = False
    #: Sink only: the compatibility level the plan sets on the subject when it registers a schema.
    compatibility: str | None = None
    #: Protobuf formats: the message type, as the spec names it (its full name, or its short name when one
    #: message has it); None: the first message of the schema's main file.
    message: str | None = None

    @property
    def protobuf(self) -> bool:
        return self.format in PROTOBUF_FORMATS

    @property
    def registry(self) -> bool:
        return self.format in REGISTRY_FORMATS

    @property
    def decoded(self) -> bool:
        """Whether Lockstep decodes (or encodes) it at all: every format but raw bytes."""
        return self.format != "bytes"

    def subject_for(self, topic: str, part: str) -> str:
        """The registry subject: the declared one, else the topic name strategy's ``<topic>-<part>``."""
        return self.subject or f"{topic}-{part}"


BYTES = FormatSpec()


def read_format(c: Checker, doc: object, path: str, folder: Path | None, sink: bool,
            declared: SectionShape | None = None) -> FormatSpec:
    """One ``key:`` or ``value:`` section: its format, its schema (a file beside the spec, or inline).
    ``declared``: its shape, when it is not at ``path`` in the spec's (a table's, under a name of the user's)."""
    shape = declared if declared is not None else SPEC.section_at(path)
    fallback = FormatSpec(format=str(shape.fields["format"].default))
    if doc is None or doc is MISSING:
        return fallback
    if isinstance(doc, str):  # `value: avro-confluent`, the short form
        doc = {"format": doc}
    d = c.section(doc, path, shape.keys)
    kind = c.text(d, path, "format", shape.fields["format"].default)
    words = shape.fields["format"].enum
    if kind in UNSUPPORTED_FORMATS:
        c.fail(f"{path}.format", UNSUPPORTED_FORMATS[kind])
        return fallback
    if kind is not None and kind not in words:
        c.fail(f"{path}.format", f"must be one of {', '.join(words)}, got {kind!r}")
        return fallback
    message = c.text(d, path, "message", None)
    if kind in PROTOBUF_FORMATS:
        schema, where, message = _protobuf_schema(c, d.get("schema"), message, path, folder)
    else:
        if "message" in d:
            c.fail(f"{path}.message", f"is for the Protobuf formats ({', '.join(PROTOBUF_FORMATS)}), not {kind}")
        schema, where = _schema(c, d.get("schema"), f"{path}.schema", folder)
    if kind == "protobuf" and schema is None and "schema" not in d:
        c.fail(f"{path}.schema", "is required for format protobuf: a descriptor set file beside the spec (protoc "
                                 "--include_imports --descriptor_set_out); protobuf-confluent takes it from the registry")
    if kind == "avro" and schema is None and "schema" not in d:
        c.fail(f"{path}.schema", "is required for format avro: the Avro schema (a .avsc file beside the spec, or "
                                 "inline); avro-confluent takes it from the registry")
    if kind in ("bytes", "string") and "schema" in d:
        c.fail(f"{path}.schema", f"format {kind} has no schema")
    subject = c.text(d, path, "subject", None)
    if subject is not None and kind not in REGISTRY_FORMATS:
        c.fail(f"{path}.subject", f"is for the registry formats ({', '.join(REGISTRY_FORMATS)}), not {kind}")
    auto = c.boolean(d, path, "auto_register", declared_default(path, "auto_register")) if sink else False
    if auto and schema is None:
        c.fail(f"{path}.auto_register", "needs a schema to register")
    level = c.text(d, path, "compatibility", None) if sink else None
    if level is not None and level.upper() not in declared_words(path, "compatibility"):
        c.fail(f"{path}.compatibility", f"must be one of {', '.join(declared_words(path, 'compatibility'))}, got {level!r}")
        level = None
    return FormatSpec(format=kind or "bytes", schema=schema, schema_from=where, subject=subject, auto_register=bool(auto),
                      compatibility=level.upper() if level else None, message=message)


def _protobuf_schema(c: Checker, value: object, message: str | None, path: str,
                     folder: Path | None) -> tuple[str | None, str | None, str | None]:
    """A Protobuf format's declared schema: a descriptor set file beside the spec, as its text form (the base64
    of the file, `lockstep.formats.protobuf`), its origin, and the message as given, checked to be one of the set's
    (`lockstep.formats.protobuf.resolve_message` gives its full name, and `message_ddl` its Spark type, when the
    run resolves its schemas)."""
    import base64

    from lockstep.formats.protobuf import UnsupportedProtobuf, descriptor_set, messages

    if value is None:
        return None, None, message
    if not isinstance(value, str) or not value.strip():
        c.fail(f"{path}.schema", f"must be a descriptor set file beside the spec (protoc --include_imports "
                                 f"--descriptor_set_out), got {describe(value)}")
        return None, None, message
    file = (folder / value.strip()) if folder is not None else Path(value.strip())
    try:
        data = file.read_bytes()
    except OSError as exc:
        c.fail(f"{path}.schema", f"cannot read descriptor set file {str(file)!r}: {exc.strerror or exc}")
        return None, None, message
    try:  # the formats' one reader of descriptor sets, which the run reads this file's text with
        fds = descriptor_set(data, str(file))
    except UnsupportedProtobuf:
        fds = None
    if fds is None or not all(f.name for f in fds.file):
        c.fail(f"{path}.schema", f"{file} is not a Protobuf descriptor set (made by protoc --include_imports "
                                 "--descriptor_set_out)")
        return None, None, message
    names = set(messages(fds))
    if message is not None and message.lstrip(".") not in names and message not in {n.rsplit(".", 1)[-1] for n in names}:
        c.fail(f"{path}.message", f"the schema has no message {message!r} (it has {', '.join(sorted(names)) or 'none'}; "
                                  f"{file})")
        return None, None, message
    return base64.b64encode(data).decode("ascii"), str(file), message


def _schema(c: Checker, value: object, where: str, folder: Path | None) -> tuple[str | None, str | None]:
    """A declared schema as JSON text: a mapping (YAML of the schema), JSON text, or a file name relative to
    the spec's folder; (None, None) when none is declared."""
    import json

    if value is None:
        return None, None
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=False), "inline"
    if not isinstance(value, str) or not value.strip():
        c.fail(where, f"must be a schema file beside the spec, or the schema itself, got {describe(value)}")
        return None, None
    text = value.strip()
    origin = "inline"
    if not text.startswith(("{", "[", '"')):
        file = (folder / text) if folder is not None else Path(text)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            c.fail(where, f"cannot read schema file {str(file)!r}: {exc.strerror or exc}")
            return None, None
        origin = str(file)
    try:
        json.loads(text)
    except ValueError as exc:
        c.fail(where, f"the schema ({origin}) is not JSON: {exc}")
        return None, None
    return text, origin
