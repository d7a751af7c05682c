"""The schemas a checkpoint reads and writes with, resolved on the driver before any record moves.

- **Reading** (a source's key or value): for a registry format, every version of the topic's subject
  (the writer schemas its records may carry, by id) and the reader schema every record is decoded
  into: the spec's declared schema, else the subject's latest version. A record whose id is no version
  of the subject is dead-lettered (`lockstep.formats.wire.UNKNOWN_ID`).
- **Writing** (the sink's key or value): the schema written with and, for a registry format, its id
  under the sink's subject. A declared schema the subject does not hold is registered only with
  ``auto_register``, and only after the registry's own compatibility check passes; otherwise the
  plan refuses it (`sink_refusal`), naming the subject and the registry's reasons, before any
  transaction opens.

Protobuf schemas (`lockstep.formats.protobuf`) are carried as the base64 of a descriptor set: the registry's
form (one file's descriptor) is turned into it here, and a declared one is registered in the registry's form.
"""
from __future__ import annotations

__all__ = [
    "Reading", "Writing", "missing_subject", "pin", "readings", "writings",
]

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from lockstep.errors import TerminalError
from lockstep.formats.registry import RegistryError, SchemaRegistry, registry_for
from lockstep.spec import REGISTRY_FORMATS, FormatSpec, PipelineSpec


@dataclass(frozen=True)
class Reading:
    """How one part (``value`` or ``key``) of the source's records is decoded."""

    part: str
    format: FormatSpec
    #: The schema every record is decoded into (Avro or JSON Schema text), None for string/bytes/schemaless JSON.
    reader: str | None
    #: Registry formats: writer schema text by id, for each topic's subject.
    writers: Mapping[int, str] = field(default_factory=dict)
    #: Registry formats: topic -> the subject its records' ids must be versions of.
    subjects: Mapping[str, str] = field(default_factory=dict)
    #: Registry formats: topic -> the ids of its subject's versions.
    ids: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: Protobuf formats: the full name of the message every record is decoded as.
    message: str | None = None


@dataclass(frozen=True)
class Writing:
    """How the transform's ``data`` (or ``key_data``) is encoded into the sink's value (or key)."""

    part: str
    format: FormatSpec
    schema: str | None
    schema_id: int | None = None
    subject: str | None = None
    #: Protobuf formats: the full name of the message written.
    message: str | None = None
    #: With ``sink.routes`` and the topic name strategy (no declared ``subject``): the route's topic this
    #: writing is for (its subject is ``<topic>-<part>``); None: ``sink.topic``'s, or every topic's.
    topic: str | None = None

    @property
    def pin_key(self) -> str:
        """Its schema id's key in the claim (`pin`): ``sink.value``, or ``sink.value@<route topic>``."""
        return f"sink.{self.part}" + (f"@{self.topic}" if self.topic is not None else "")

    @property
    def where(self) -> str:
        """The schema, as messages name it."""
        if self.subject is not None:
            return f"subject {self.subject}, id {self.schema_id}"
        return self.format.schema_from or "no schema"


def readings(spec: PipelineSpec, pinned: Mapping[str, int] | None = None,
             read: Collection[str] | None = None) -> tuple[Reading, ...]:
    """The source's decoded parts (none for a source of raw bytes). ``pinned``: the claim's schema ids
    (`pin`); a part's reader schema is the one its claim pinned, else the declared one, else the latest.

    ``read``: the source topics whose records are decoded (those with records in the checkpoint's ranges);
    None: every source topic. A topic outside it needs no subject (a new topic nobody has written to yet):
    its subject, if the registry holds none, is left out. A missing subject of a topic in it is terminal
    (`missing_subject`)."""
    out = []
    for part, fmt, registry, message in _decoded_parts(spec, "source"):
        if registry is None:
            out.append(Reading(part, fmt, fmt.schema, message=message))
            continue
        subjects = {topic: fmt.subject_for(topic, part) for topic in spec.source.topics}
        writers: dict[int, str] = {}
        ids: dict[str, tuple[int, ...]] = {}
        latest = None
        absent: list[str] = []
        for topic, subject in subjects.items():
            try:
                versions = registry.subject_schemas(subject)
            except RegistryError as exc:
                if exc.status != 404:
                    raise
                if read is None or topic in read:
                    raise missing_subject(spec, part, topic, subject, registry.name) from None
                absent.append(topic)  # nothing of it is read: its records, when they come, need the subject
                continue
            _check_type(spec, f"source.{part}", fmt, versions[-1].schema_type, subject)
            writers.update({v.id: v.text for v in versions})
            ids[topic] = tuple(sorted(v.id for v in versions))
            latest = latest or versions[-1].text
        subjects = {topic: subject for topic, subject in subjects.items() if topic not in absent}
        if not subjects:  # no subject at all, so no schema to decode into, even for no record
            topic = absent[0]
            raise missing_subject(spec, part, topic, fmt.subject_for(topic, part), registry.name)
        # The reader schema its claim pinned, else the declared one, else the first subject's latest version.
        key = f"source.{part}"
        pinned_text = registry.schema(pinned[key]).text if fmt.schema is None and pinned and key in pinned else None
        if fmt.protobuf:
            reader, message = _protobuf_reader(spec, key, fmt, pinned_text or latest, next(iter(subjects.values())))
            out.append(Reading(part, fmt, reader, writers, subjects, ids, message))
            continue
        out.append(Reading(part, fmt, fmt.schema or pinned_text or latest, writers, subjects, ids))
    return tuple(out)


def _decoded_parts(spec: PipelineSpec, side: Literal["source", "sink"]
                   ) -> Iterator[tuple[str, FormatSpec, SchemaRegistry | None, str | None]]:
    """The parts of the source's or the sink's records that a format decodes or encodes (value, then key),
    each as (part, format, registry, message). A format without a registry has no registry, and a Protobuf
    one its message (`_declared_message`); a registry part has the registry its schemas come from and no
    message yet (that comes with the subject's schema). What `readings` and `writings` both walk before
    reading and writing part ways."""
    section = spec.source if side == "source" else spec.sink
    for part, fmt in (("value", section.value), ("key", section.key)):
        if not fmt.decoded:
            continue
        if not fmt.registry:
            yield part, fmt, None, _declared_message(spec, f"{side}.{part}", fmt) if fmt.protobuf else None
        else:
            yield part, fmt, registry_for(section.registry_conn_id), None


def missing_subject(spec: PipelineSpec, part: str, topic: str, subject: str, registry: str) -> TerminalError:
    """A source topic whose records are read has no subject in the registry: none of them can be decoded, and
    every attempt fails the same way until the subject is registered (or the spec names another)."""
    return TerminalError(f"{spec.path}: source.{part}: subject {subject!r} of topic {topic} is not in schema "
                         f"registry {registry}, and the checkpoint reads records of {topic}: they cannot be decoded. "
                         f"Register the schema its producers write with under {subject!r} (a Confluent serializer "
                         f"with auto.register.schemas does), or set source.{part}.subject to the subject they use")


def _declared_message(spec: PipelineSpec, where: str, fmt: FormatSpec) -> str | None:
    """The full name of a declared Protobuf schema's message, checked to have a Spark type; a message the
    schema cannot give one is terminal, naming the field."""
    from lockstep.formats import protobuf

    if fmt.schema is None:
        return fmt.message
    try:
        fds = protobuf.load(fmt.schema)
        message = protobuf.resolve_message(fds, fmt.message)
        protobuf.message_ddl(fds, message)
    except protobuf.UnsupportedProtobuf as exc:
        raise TerminalError(f"{spec.path}: {where}: message {fmt.message or '(the first)'} of {fmt.schema_from} "
                            f"cannot be read or written: {exc}") from None
    return message


def _protobuf_reader(spec: PipelineSpec, where: str, fmt: FormatSpec, latest: str | None,
                     subject: str) -> tuple[str | None, str | None]:
    """(the descriptor set every record is decoded with, its message): the declared one, else the subject's
    latest version, in `lockstep.formats.protobuf`'s text form; a schema Lockstep cannot read is terminal."""
    from lockstep.formats import protobuf

    if fmt.schema is not None:
        return fmt.schema, _declared_message(spec, where, fmt)
    if latest is None:
        return None, fmt.message
    try:
        fds, main = protobuf.from_registry(latest)
        message = protobuf.resolve_message(fds, fmt.message, main)
        protobuf.message_ddl(fds, message)
    except protobuf.UnsupportedProtobuf as exc:
        raise TerminalError(f"{spec.path}: {where}: the Protobuf schema of subject {subject!r} cannot be read: {exc}; "
                            f"or declare {where}.schema (a descriptor set file)") from None
    return protobuf.schema_text(fds), message


def writings(spec: PipelineSpec, register: bool = False, dry_run: bool = False,
             pinned: Mapping[str, int] | None = None) -> tuple[Writing, ...]:
    """The sink's encoded parts. ``register``: the plan's call, which may register a declared schema
    (``auto_register``); the run writes with the schema its claim pinned (``pinned``), or looks it up.
    ``dry_run``: a schema that ``auto_register`` would register is accepted, without its id."""
    out = []
    for part, fmt, registry, message in _decoded_parts(spec, "sink"):
        if registry is None:
            out.append(Writing(part, fmt, fmt.schema, message=message))
            continue
        # Each route's topic has a subject of its own under the topic name strategy; a declared one is shared.
        routed = (None, *(t for t, _ in spec.sink.routes)) if fmt.subject is None else (None,)
        for topic in routed:
            written = topic or spec.sink.topic
            assert written is not None  # a sink format needs sink.topic: the spec refuses one without
            subject = fmt.subject_for(written, part)
            key = Writing(part, fmt, None, topic=topic).pin_key
            if pinned and key in pinned:  # what the plan accepted, whatever the subject holds since
                schema_id = pinned[key]
                registered = registry.schema(schema_id).text
                if fmt.protobuf:
                    text, message = _protobuf_reader(spec, f"sink.{part}", fmt, registered, subject)
                    out.append(Writing(part, fmt, text, schema_id, subject, message, topic))
                else:
                    out.append(Writing(part, fmt, registered, schema_id, subject, topic=topic))
                continue
            out.append(replace(_registered(spec, registry, part, fmt, subject, register, dry_run),
                                           topic=topic))
    return tuple(out)


def _registered(spec: PipelineSpec, registry: SchemaRegistry, part: str, fmt: FormatSpec, subject: str,
                register: bool, dry_run: bool = False) -> Writing:
    where = f"{spec.path}: sink.{part}"
    kind = REGISTRY_FORMATS[fmt.format]
    if fmt.schema is None:  # write with the subject's latest version
        try:
            latest = registry.version(subject)
        except RegistryError as exc:
            if exc.status != 404:
                raise
            raise TerminalError(f"{where}: subject {subject!r} has no schema in registry {registry.name}, and the "
                                f"spec declares none: declare sink.{part}.schema (with auto_register: true to register "
                                "it), or register one") from None
        _check_type(spec, f"sink.{part}", fmt, latest.schema_type, subject)
        if fmt.protobuf:
            text, message = _protobuf_reader(spec, f"sink.{part}", fmt, latest.text, subject)
            return Writing(part, fmt, text, latest.id, subject, message)
        return Writing(part, fmt, latest.text, latest.id, subject)
    registered = fmt.schema  # what the registry holds: Protobuf in its own form (one file's descriptor)
    message = None
    if fmt.protobuf:
        from lockstep.formats import protobuf

        message = _declared_message(spec, f"sink.{part}", fmt)
        try:
            registered = protobuf.registry_text(protobuf.load(fmt.schema), message or "")
        except protobuf.UnsupportedProtobuf as exc:
            raise TerminalError(f"{where}: the schema ({fmt.schema_from}) cannot be used with subject {subject!r}: "
                                f"{exc}") from None
    found = registry.lookup(subject, registered, kind)
    if found is not None:
        return Writing(part, fmt, fmt.schema, found.id, subject, message)
    problems = registry.compatibility_problems(subject, registered, kind)
    if problems and kind == "AVRO" and not registry.gave_reasons:
        problems = _avro_reasons(registry, subject, fmt.schema) or problems
    elif problems and kind == "PROTOBUF" and not registry.gave_reasons:
        problems = _protobuf_reasons(registry, subject, registered, message or "") or problems
    if problems:
        raise TerminalError(f"{where}: the schema ({fmt.schema_from}) is incompatible with subject {subject!r} "
                            f"in registry {registry.name}: {'; '.join(problems)}. Nothing was written; change the "
                            "schema so the subject's compatibility accepts it (a new field needs a default)")
    if not fmt.auto_register:
        raise TerminalError(f"{where}: the schema ({fmt.schema_from}) is not registered under subject {subject!r} in "
                            f"registry {registry.name} (it would be compatible). Nothing was written; register it, or "
                            f"set sink.{part}.auto_register: true")
    if dry_run:
        return Writing(part, fmt, fmt.schema, None, subject, message)
    if not register:
        raise TerminalError(f"{where}: the schema ({fmt.schema_from}) is not registered under subject {subject!r}; "
                            "the checkpoint's plan registers it (auto_register): plan again")
    if fmt.compatibility is not None:
        registry.set_compatibility(subject, fmt.compatibility)
    schema_id = registry.register(subject, registered, kind)
    return Writing(part, fmt, fmt.schema, schema_id, subject, message)


def _avro_reasons(registry: SchemaRegistry, subject: str, schema: str) -> list[str]:
    """Why the registry refused ``schema`` under ``subject``'s compatibility level, field by field
    (`lockstep.formats.wire.avro_read_problems`), for a registry that only answers yes or no."""
    from lockstep.formats.wire import avro_read_problems

    latest = registry.version(subject).text
    level = registry.compatibility(subject)
    reasons = []
    if level.startswith(("BACKWARD", "FULL")):  # the new schema reads the subject's records
        reasons += [f"{p} (the subject is {level})" for p in avro_read_problems(schema, latest)]
    if level.startswith(("FORWARD", "FULL")):  # the subject's latest schema reads the new records
        reasons += [f"{p} (the subject is {level}: readers with the latest schema)" for p in avro_read_problems(latest, schema)]
    return reasons


def _protobuf_reasons(registry: SchemaRegistry, subject: str, registered: str, message: str) -> list[str]:
    """How the message differs from the subject's latest version, field by field, for a registry that only
    answers yes or no (`lockstep.formats.protobuf.changes`)."""
    from lockstep.formats import protobuf

    try:
        latest, _ = protobuf.from_registry(registry.version(subject).text)
        new, _ = protobuf.from_registry(registered)
    except protobuf.UnsupportedProtobuf:
        return []
    level = registry.compatibility(subject)
    return [f"{p} (the subject is {level})" for p in protobuf.changes(latest, new, message)]


def _check_type(spec: PipelineSpec, where: str, fmt: FormatSpec, found: str, subject: str) -> None:
    wanted = REGISTRY_FORMATS[fmt.format]
    if found.upper() != wanted:
        raise TerminalError(f"{spec.path}: {where}: format {fmt.format} reads {wanted} schemas, but subject {subject!r} "
                            f"holds a {found} schema; set the format to the subject's")


def pin(spec: PipelineSpec, dry_run: bool = False, read: Collection[str] | None = None) -> dict[str, int]:
    """The registry schemas a checkpoint is planned with (`CheckpointClaim.schema_ids`): each registry
    source part's reader schema when the spec declares none (the latest version of the first source topic's
    subject the registry holds, as `readings` takes it unpinned), and each registry sink part's schema,
    checked against the subject (`writings`; registered with ``auto_register``, not in a ``dry_run``).
    Raises `TerminalError` with why a sink schema cannot be written with.

    ``read``: the source topics the checkpoint reads records of; a registry part's subject missing for one
    of them is terminal (`missing_subject`), before anything is claimed. A topic it does not read (a new,
    empty one) needs no subject; with ``read`` None, a missing subject is left for the run to judge."""
    ids: dict[str, int] = {}
    for part, fmt in (("value", spec.source.value), ("key", spec.source.key)):
        if not fmt.registry:
            continue
        registry = registry_for(spec.source.registry_conn_id)
        latest: dict[str, int | None] = {}  # subject -> its latest version's id, None: not in the registry
        for topic in spec.source.topics:
            subject = fmt.subject_for(topic, part)
            checked = read is not None and topic in read
            if not checked and (fmt.schema is not None or f"source.{part}" in ids):
                continue
            if subject not in latest:
                try:
                    latest[subject] = registry.version(subject).id
                except RegistryError as exc:
                    if exc.status != 404:
                        raise
                    latest[subject] = None
            found = latest[subject]
            if found is None and checked:
                raise missing_subject(spec, part, topic, subject, registry.name)
            if found is not None and fmt.schema is None:
                ids.setdefault(f"source.{part}", found)
    for w in writings(spec, register=not dry_run, dry_run=dry_run):
        if w.schema_id is not None:
            ids[w.pin_key] = w.schema_id
    return ids
