"""Pipeline specs: one YAML file per pipeline, validated all at once.

A spec decides where data goes and which transactional ids Lockstep may fence, so a typo must
never be silently ignored: unknown keys are errors, and every problem is reported together with
its file and field path (`SpecError`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from lockstep.errors import SpecError, SpecProblem
from lockstep.spec.fields import UNSET, Field
from lockstep.spec.fields import Section as SectionShape
from lockstep.spec.shape import (
    BUCKET_PATTERN,
    COMPATIBILITY_LEVELS,
    DEFAULT_KEY_GROUPS,
    DEFAULT_KEY_NAME,
    DEFAULT_OWNER,
    DEFAULT_REGISTRY_CONN_ID,
    DUPLICATE_ACTIONS,
    EMAIL_PATTERN,
    FORMATS,
    ID_PREFIX_PATTERN,
    IDENTIFIER_PATTERN,
    NAME_PATTERN,
    RESERVED_PRODUCER_KEYS,
    RESERVED_TABLE_NAMES,
    SCHEDULE_PRESETS,
    SPARK_MODES,
    SPEC,
    STATE_FIELD_TYPES,
    TABLE,
    TAG_PATTERN,
    TOPIC_PATTERN,
    TRANSFORM_PATTERN,
    TRANSFORM_SQL,
    WRITERS,
)

# The spec's shape (keys, defaults, bounds, words, patterns) is declared once in `lockstep.spec.shape`;
# these names stay here for the code that imports them from the spec.
#: The shape's constants re-exported, the names the rest of Lockstep imports from here, and ``shape`` (the
#: spec's declaration, for ``lockstep spec schema``).
__all__ = [
    "COMPATIBILITY_LEVELS", "CompactionPolicy", "DEFAULT_KEY_GROUPS", "DEFAULT_KEY_NAME", "DEFAULT_OWNER",
    "DEFAULT_REGISTRY_CONN_ID", "DUPLICATE_ACTIONS", "FORMATS", "FormatSpec", "PipelineSpec", "REGISTRY_FORMATS",
    "RESERVED_PRODUCER_KEYS", "SCHEDULE_PRESETS", "SPARK_MODES", "STATE_FIELD_TYPES", "SourceSpec", "SparkSpec",
    "StateSpec", "TableJoin", "TableSpec", "TriggerSpec", "WRITERS", "WindowSpec", "cross_check", "load_each",
    "load_spec", "shape", "spec_files",
]

NAME_RE = re.compile(NAME_PATTERN)
TOPIC_RE = re.compile(TOPIC_PATTERN)
ID_PREFIX_RE = re.compile(ID_PREFIX_PATTERN)
TRANSFORM_RE = re.compile(TRANSFORM_PATTERN)
BUCKET_RE = re.compile(BUCKET_PATTERN)
_MISSING = object()


class StoreLocation(NamedTuple):
    """Where a pipeline's checkpoints live: S3 bucket and key prefix (no trailing slash)."""

    bucket: str
    prefix: str


#: Record formats of a key or a value (docs/formats.md): raw ``bytes`` (the default), ``string``,
#: ``json`` (with a declared JSON Schema or without: then a VARIANT), ``avro`` (with a declared schema),
#: ``protobuf`` (a descriptor set and a message), and the Confluent Schema Registry's framing (a magic
#: byte, a 4-byte schema id, then the payload): ``avro-confluent``, ``json-confluent`` and
#: ``protobuf-confluent`` (whose payload starts with the message indexes). ``FORMATS`` lists them.
#: Formats a schema registry frames, and the registry's name of their schema type.
REGISTRY_FORMATS = {"avro-confluent": "AVRO", "json-confluent": "JSON", "protobuf-confluent": "PROTOBUF"}
#: Formats whose schema is a Protobuf descriptor set (`lockstep.formats.protobuf`) and a message.
PROTOBUF_FORMATS = ("protobuf", "protobuf-confluent")
#: Formats named elsewhere that Lockstep refuses, with the reason (none today).
UNSUPPORTED_FORMATS: dict[str, str] = {}


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


@dataclass(frozen=True)
class SourceSpec:
    topics: tuple[str, ...]
    kafka_conn_id: str
    auto_offset_reset: str
    consumer_group: str
    #: What the plan does when a source topic was deleted and created again since the last completed
    #: checkpoint (its topic id changed): ``fail`` (refuse, the default), ``earliest`` or ``latest``
    #: (read the new topic from its start, or from its end).
    on_topic_recreated: str = "fail"
    #: How the source's keys and values are decoded for the transform (raw bytes by default).
    key: FormatSpec = BYTES
    value: FormatSpec = BYTES
    #: The Schema Registry connection of the registry formats.
    registry_conn_id: str = DEFAULT_REGISTRY_CONN_ID



@dataclass(frozen=True)
class SinkSpec:
    topic: str
    dead_letter_topic: str
    kafka_conn_id: str
    #: Which writer produces the output: "jvm" (in the Spark executor's JVM, the default) or
    #: "python" (confluent-kafka in a Python worker, fed through Arrow). Same transactions, same headers.
    writer: str = "jvm"
    #: At most this many Spark tasks write a checkpoint's output, so at most this many Kafka
    #: transactions per checkpoint, however many source partitions it reads; None ("auto"): the
    #: Spark cluster's default parallelism (its cores), at most
    #: ``lockstep.model.transactional_ids.MAX_AUTO_PARALLELISM``.
    parallelism: int | None = None
    #: How the transform's ``key_data`` / ``data`` are encoded into the records' key and value.
    key: FormatSpec = BYTES
    value: FormatSpec = BYTES
    registry_conn_id: str = DEFAULT_REGISTRY_CONN_ID
    #: ``sink.routes``: (topic, Spark SQL condition over the transform's output), in the spec's order. A
    #: record goes to the first route whose condition holds, else to ``topic``; a dead letter, whatever
    #: its route, to ``dead_letter_topic``. All of a checkpoint's topics are written in its transactions.
    routes: tuple[tuple[str, str], ...] = ()
    #: ``sink.on_error``: a record whose transform or route condition raises a Spark data error (ANSI) is a
    #: dead letter with Spark's reason ("dead_letter"), or fails the checkpoint terminally ("fail").
    on_error: str = "dead_letter"

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics outputs go to: ``topic`` (the records no route takes), then each route's."""
        return (self.topic, *(t for t, _ in self.routes))


@dataclass(frozen=True)
class TriggerSpec:
    """``checkpoints.trigger``: start a checkpoint when the source's unread records reach
    ``lag_records``, or when some have waited ``max_wait_s`` since the last checkpoint completed;
    never while the topic is idle (unless ``state.event_time.idle_advance`` makes a window due). The
    source is looked at every ``poll_s``."""

    lag_records: int
    max_wait_s: int
    poll_s: int = 5


@dataclass(frozen=True)
class CheckpointSpec:
    store: str
    bucket: str
    prefix: str
    aws_conn_id: str
    schedule: str | None
    max_records: int
    retain: int
    skip_deleted_ranges: bool
    #: Lag-driven checkpoints instead of a schedule (``schedule`` is then null).
    trigger: TriggerSpec | None = None
    #: A DAG run's tasks: ``three`` (plan, run, commit) or ``one`` (a ``checkpoint`` task doing all three).
    tasks: str = "three"

    @property
    def one_task(self) -> bool:
        return self.tasks == "one"


@dataclass(frozen=True)
class TransactionSpec:
    id_prefix: str
    timeout_ms: int
    commit_margin_ms: int
    #: A commit that begins with less than this share (percent) of ``timeout_ms`` left before the first
    #: transaction would time out logs a warning (and the commit task sends it as a gauge).
    warn_time_left_percent: int = 25


@dataclass(frozen=True)
class SparkSpec:
    master: str | None
    conf: Mapping[str, str] = field(default_factory=dict)
    #: "submit" (a spark-submit per checkpoint), "connect" (a session on a long-lived Spark
    #: Connect server), or None: the ``spark_default`` connection decides (`lockstep.spark.target`).
    mode: str | None = None
    #: The Spark Connect endpoint (``sc://host:port``) for connect mode; else from the connections.
    remote: str | None = None


DURATION_RE = re.compile(r"(\d+)\s*(ms|s|m|h|d)?")
#: What every duration field of a spec takes (`duration_ms`), as its messages say it.
DURATION_RULE = "a number with ms, s, m, h or d (500ms, 30s, 15m, 2h, 1d), or whole seconds"
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
IDENTIFIER_RE = re.compile(IDENTIFIER_PATTERN)


@dataclass(frozen=True)
class EventTime:
    """Event time and its watermark, shared by the stateful operators.

    ``column`` is a Spark SQL expression over the transform's output: a TIMESTAMP, or a number of
    epoch seconds. The watermark is the minimum over the source partitions of (the largest event
    time seen - ``out_of_orderness_ms``); a partition without records for ``idle_timeout_ms`` no
    longer holds it back. With ``idle_advance``, once every partition has been idle that long, event
    time is taken to go on with the claim's pinned clock, so the last windows of a burst fire while the
    source is quiet (`lockstep.rules.watermarks.advance`)."""

    column: str
    out_of_orderness_ms: int
    idle_timeout_ms: int
    idle_advance: bool = False


@dataclass(frozen=True)
class WindowSpec:
    """Event-time windows per key: tumbling (``slide_ms == size_ms``) or sliding."""

    key: str
    key_name: str
    size_ms: int
    slide_ms: int
    allowed_lateness_ms: int
    #: output field -> Spark SQL aggregate expression over the transform's columns, in YAML order
    aggregates: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class DedupSpec:
    """A record within ``ttl_ms`` of event time of a passed record of its key is a duplicate; the
    rule, its late cut and its retention are `lockstep.rules.dedup`'s."""

    key: str
    ttl_ms: int
    #: "drop" or "dead_letter" (to the dead-letter topic, error ``duplicate``)
    duplicates: str


FUNCTION_RE = TRANSFORM_RE


@dataclass(frozen=True)
class FunctionSpec:
    """A user's Python function per key (`lockstep.state_api`): its new records, its state, its timers."""

    key: str
    #: ``module:function``
    process: str
    #: declared state fields -> Spark types, in YAML order
    fields: tuple[tuple[str, str], ...]
    version: int
    #: ``module:function`` turning a state of an earlier version into this one; None: none given
    migrate: str | None = None
    #: event-time TTL: a key whose last record is older than the watermark by this much loses its state
    ttl_ms: int | None = None
    #: what Lockstep's own functions are told besides the records (``ctx.options``; an interval join's sides)
    options: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class IntervalJoinSpec:
    """``state.interval_join``: records of ``left`` and ``right`` with the same key, the right one's event time
    within ``[left's - before, left's + after]`` (docs/joins.md, `lockstep.tables.interval_join`)."""

    key: str
    left: str
    right: str
    after_ms: int = 0
    before_ms: int = 0
    how: str = "inner"

    def function(self) -> FunctionSpec:
        """The state function that runs it."""
        from lockstep.tables.interval_join import PROCESS, STATE_FIELDS

        return FunctionSpec(key=self.key, process=PROCESS, fields=STATE_FIELDS, version=1, options={
            "left": self.left, "right": self.right, "after_ms": self.after_ms, "before_ms": self.before_ms,
            "how": self.how})


@dataclass(frozen=True)
class CompactionPolicy:
    """When a key group's chain of files is merged into a new base (``state.compaction``)."""

    #: compact when the chain would hold more deltas than this
    max_deltas: int = 16
    #: compact when the deltas' bytes would pass this multiple of the base's
    max_delta_ratio: float = 1.0


@dataclass(frozen=True)
class StateSpec:
    """A stateful pipeline's operator, its event time and its key groups (fixed once state exists)."""

    key_groups: int
    event_time: EventTime
    window: WindowSpec | None = None
    dedup: DedupSpec | None = None
    function: FunctionSpec | None = None
    #: ``interval_join``: run as Lockstep's own state function (`lockstep.tables.interval_join`), which ``function``
    #: then names; this keeps what the spec said, and the operator's name
    interval_join: IntervalJoinSpec | None = None
    #: when a key group's chain of delta files is merged into a new base (`lockstep.store.state_chain`)
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)

    @property
    def ttl_ms(self) -> int | None:
        """The event-time TTL of the state's keys (dedup's ``ttl``, a function's ``ttl``), None for windows."""
        return self.dedup.ttl_ms if self.dedup is not None else self.function.ttl_ms if self.function else None

    @property
    def operator(self) -> str:
        if self.interval_join is not None:
            return "interval_join"
        return "window" if self.window is not None else "dedup" if self.dedup is not None else "function"

    @property
    def key(self) -> str:
        chosen = self.window or self.dedup or self.function
        assert chosen is not None
        return chosen.key

    @property
    def schema_version(self) -> int:
        return self.function.version if self.function is not None else 1


EMAIL_RE = re.compile(EMAIL_PATTERN)
TAG_RE = re.compile(TAG_PATTERN)


@dataclass(frozen=True)
class TableJoin:
    """``tables.<name>.join``: join the table into every input record before the transform, on ``by`` (a
    Spark SQL expression over the decoded input) equal to the table's key (docs/joins.md)."""

    #: ``by``: a Spark SQL expression over the decoded input, equal to the table's key
    by: str
    #: ``left``: every record (the table's column null without a row); ``inner``: records with a row only
    how: str = "left"
    #: an inner join's records without a row: ``drop`` them or ``dead_letter`` them
    missing: str = "drop"
    #: an event-time (temporal) join: the record's event time (a Spark SQL expression: a TIMESTAMP or epoch
    #: seconds); each record meets the version its key had then. None: the latest version.
    as_of: str | None = None


@dataclass(frozen=True)
class TableSpec:
    """``tables.<name>``: the latest value per key of ``topic`` as of each checkpoint's pinned offsets,
    kept by Lockstep (`lockstep.tables.materialize`); a view named ``name`` in SQL transforms."""

    name: str
    topic: str
    key: FormatSpec = FormatSpec(format="string")
    value: FormatSpec = field(default_factory=FormatSpec)
    join: TableJoin | None = None
    #: ``versions``: how long (ms) each key's earlier values are kept behind the table's newest record, for
    #: joins ``as_of`` an event time; None: the latest value only.
    versions_ms: int | None = None
    #: ``on_error``: a table record that does not decode is a dead letter ("dead_letter") or fails the checkpoint
    #: for good ("fail").
    on_error: str = "dead_letter"

    @property
    def versioned(self) -> bool:
        return self.versions_ms is not None


@dataclass(frozen=True)
class AlertsSpec:
    """Whom a failed checkpoint notifies, once per failure streak (`lockstep.rules.alerts`): a webhook
    (an Airflow connection of type http: a JSON POST whose ``text`` a chat's incoming webhook shows) and
    e-mail addresses (sent through an SMTP connection)."""

    webhook_conn_id: str | None = None
    email: tuple[str, ...] = ()
    smtp_conn_id: str = "smtp_default"


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    description: str
    source: SourceSpec
    transform: str
    sink: SinkSpec
    checkpoints: CheckpointSpec
    transactions: TransactionSpec
    spark: SparkSpec
    #: producer settings for the writers' clients, as the YAML gives them
    producer: Mapping[str, object]
    path: str
    #: The keyed state of a stateful pipeline (windows or dedup); None for a stateless one.
    state: StateSpec | None = None
    #: Set on the derived pipeline that replays dead letters (``lockstep.spark.replay.replay_spec``): the
    #: name of the pipeline whose dead letters it replays. Never read from YAML.
    replay_of: str | None = None
    #: Who runs the pipeline: its DAG's owner in Airflow (the DAG list filters by it).
    owner: str = DEFAULT_OWNER
    #: Tags added to its DAG's own (``lockstep``, source, sink).
    tags: tuple[str, ...] = ()
    #: Whom a failed checkpoint notifies; None: no one.
    alerts: AlertsSpec | None = None
    #: An SQL pipeline's query over the view ``input`` (``transform: {sql: ...}`` or ``{sql_file: ...}``), as
    #: read when the spec is loaded; None for a Python transform. ``transform`` then only names it for people
    #: (``SQL (query.sql)``), and `lockstep.transform.load_transform` runs the query instead of importing.
    transform_sql: str | None = None
    #: Where the query came from: its file (as read), or ``inline``; for messages.
    transform_sql_from: str | None = None
    #: Tables by name (``tables:``), in the spec's order; empty without.
    tables: tuple[TableSpec, ...] = ()

    @property
    def is_sql(self) -> bool:
        """Whether the transform is an SQL query (`transform_sql`) rather than a Python function."""
        return self.transform_sql is not None

    @property
    def dag_id(self) -> str:
        """Airflow DAG ids in this project all start with `lockstep_`; '-' is avoided for readability."""
        return "lockstep_" + self.name.replace("-", "_")

    @property
    def checkpoint_location(self) -> StoreLocation:
        """Each pipeline owns `<prefix>/<name>` in the store, so pipelines may share one bucket."""
        prefix = f"{self.checkpoints.prefix}/{self.name}" if self.checkpoints.prefix else self.name
        return StoreLocation(self.checkpoints.bucket, prefix)

    @property
    def transform_target(self) -> tuple[str, str]:
        """(module, function) of the transform, whichever of the two accepted syntaxes was used. An SQL
        pipeline (`transform_sql`) has none: check `is_sql` first."""
        module, _, function = self.transform.partition(":")
        return module, function


#: A mapping of a YAML document, as ``yaml.safe_load`` returns it: its keys are not always strings.
Section = dict[object, object]


class _Checker:
    """Reads one YAML document field by field, collecting problems instead of stopping at the first.

    A reader (``text``, ``integer``, ...) returns the value once it is checked, or None after noting
    the problem: Any, because ``parse_spec`` builds the spec's dataclasses from what they return and
    raises `SpecError` before a spec with a None where a value belongs leaves it.
    """

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[SpecProblem] = []

    def fail(self, path: str, reason: str) -> None:
        self.problems.append(SpecProblem(self.file, path, reason))

    def mapping(self, doc: object, path: str, optional: bool = True) -> Section:
        if doc is _MISSING or (doc is None and optional):
            if not optional:
                self.fail(path, "is required")
            return {}
        if not isinstance(doc, dict):
            self.fail(path or "<document>", f"must be a mapping, got {_kind(doc)}")
            return {}
        return doc

    def section(self, doc: object, path: str, allowed: set[str], optional: bool = True) -> Section:
        d = self.mapping(doc, path, optional)
        for key in sorted(set(d) - allowed, key=str):
            self.fail(_join(path, str(key)), f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return d

    def text(self, doc: Section, path: str, key: str, default: object = _MISSING,
             pattern: re.Pattern[str] | None = None, rule: str = "") -> Any:
        value = doc.get(key, default)
        where = _join(path, key)
        if value is _MISSING:
            if not any(p.field == path for p in self.problems):  # a missing section is reported once
                self.fail(where, "is required")
        elif value is None and default is None:
            return None
        elif not isinstance(value, str) or not value:
            self.fail(where, f"must be a non-empty string, got {_kind(value)}")
        elif pattern is not None and not pattern.fullmatch(value):
            self.fail(where, f"{value!r} is invalid: {rule}")
        else:
            return value
        return None

    def integer(self, doc: Section, path: str, key: str, default: int, low: int, high: int | None) -> Any:
        value = doc.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(_join(path, key), f"must be an integer, got {_kind(value)}")
        elif value < low or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f">= {low}"
            self.fail(_join(path, key), f"must be {bounds}, got {value}")
        else:
            return value
        return None

    def boolean(self, doc: Section, path: str, key: str, default: bool) -> Any:
        value = doc.get(key, default)
        if not isinstance(value, bool):
            self.fail(_join(path, key), f"must be true or false, got {_kind(value)}")
            return None
        return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(value: object) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"


# The declaration's side of the checker: what `lockstep.spec.shape` says of a field, as the readers take it.

def _keys(path: str) -> set[str]:
    """The keys a section allows (``""``: the top level)."""
    return SPEC.section_at(path).keys


def _declared(path: str, key: str) -> Field:
    return SPEC.at(_join(path, key))


def _default(path: str, key: str) -> Any:
    """A field's declared default: None for an optional one without (null allowed), _MISSING for a required one."""
    f = _declared(path, key)
    if f.default is UNSET:
        return None if f.nullable else _MISSING
    return f.default


def _integer(c: _Checker, d: Section, path: str, key: str) -> Any:
    """An integer field with its declared default and bounds (a required one's default is its low bound: its
    absence is reported once, by the caller)."""
    f = _declared(path, key)
    low, high = f.bounds
    return c.integer(d, path, key, f.default if isinstance(f.default, int) else low, low, high)


def _enum(path: str, key: str) -> tuple[str, ...]:
    return _declared(path, key).enum


def _one_of(words: tuple[str, ...]) -> str:
    """``must be fail, earliest or latest``."""
    return f"must be {', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else f"must be {words[0]}"


def _word(c: _Checker, d: Section, path: str, key: str) -> Any:
    """A text field that takes one of its declared words; a wrong one is refused as its pattern would be."""
    words = _enum(path, key)
    return c.text(d, path, key, _default(path, key), re.compile("|".join(map(re.escape, words))), _one_of(words))


TOPIC_RULE = "Kafka topic names are 1-249 characters of [A-Za-z0-9._-] and not '.' or '..'"


def _topic(c: _Checker, doc: Section, path: str, key: str) -> Any:  # a reader's result, as _Checker's
    value = c.text(doc, path, key, pattern=TOPIC_RE, rule=TOPIC_RULE)
    if value in (".", ".."):
        c.fail(_join(path, key), f"{value!r} is invalid: {TOPIC_RULE}")
        return None
    return value


def _topics(c: _Checker, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        c.fail("source.topics", f"must be a non-empty list of topic names, got {_kind(value)}")
        return ()
    checked = [_topic(c, {f"topics[{i}]": t}, "source", f"topics[{i}]") for i, t in enumerate(value)]
    if len(set(map(str, value))) != len(value):
        c.fail("source.topics", "lists a topic more than once")
    return tuple(t for t in checked if t)


def _format(c: _Checker, doc: object, path: str, folder: Path | None, sink: bool,
            declared: SectionShape | None = None) -> FormatSpec:
    """One ``key:`` or ``value:`` section: its format, its schema (a file beside the spec, or inline).
    ``declared``: its shape, when it is not at ``path`` in the spec's (a table's, under a name of the user's)."""
    shape = declared if declared is not None else SPEC.section_at(path)
    fallback = FormatSpec(format=str(shape.fields["format"].default))
    if doc is None or doc is _MISSING:
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
    auto = c.boolean(d, path, "auto_register", _default(path, "auto_register")) if sink else False
    if auto and schema is None:
        c.fail(f"{path}.auto_register", "needs a schema to register")
    level = c.text(d, path, "compatibility", None) if sink else None
    if level is not None and level.upper() not in _enum(path, "compatibility"):
        c.fail(f"{path}.compatibility", f"must be one of {', '.join(_enum(path, 'compatibility'))}, got {level!r}")
        level = None
    return FormatSpec(format=kind or "bytes", schema=schema, schema_from=where, subject=subject, auto_register=bool(auto),
                      compatibility=level.upper() if level else None, message=message)


def _protobuf_schema(c: _Checker, value: object, message: str | None, path: str,
                     folder: Path | None) -> tuple[str | None, str | None, str | None]:
    """A Protobuf format's declared schema: a descriptor set file beside the spec, as its text form (the base64
    of the file, `lockstep.formats.protobuf`), its origin, and the message as given, checked to be one of the set's
    (`lockstep.formats.protobuf.resolve_message` gives its full name, and `message_ddl` its Spark type, when the
    run resolves its schemas)."""
    import base64

    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    if value is None:
        return None, None, message
    if not isinstance(value, str) or not value.strip():
        c.fail(f"{path}.schema", f"must be a descriptor set file beside the spec (protoc --include_imports "
                                 f"--descriptor_set_out), got {_kind(value)}")
        return None, None, message
    file = (folder / value.strip()) if folder is not None else Path(value.strip())
    try:
        data = file.read_bytes()
    except OSError as exc:
        c.fail(f"{path}.schema", f"cannot read descriptor set file {str(file)!r}: {exc.strerror or exc}")
        return None, None, message
    fds = descriptor_pb2.FileDescriptorSet()
    try:
        fds.ParseFromString(data)
    except DecodeError:
        pass
    if not fds.file or not all(f.name for f in fds.file):
        c.fail(f"{path}.schema", f"{file} is not a Protobuf descriptor set (made by protoc --include_imports "
                                 "--descriptor_set_out)")
        return None, None, message
    names = _protobuf_messages(fds)
    if message is not None and message.lstrip(".") not in names and message not in {n.rsplit(".", 1)[-1] for n in names}:
        c.fail(f"{path}.message", f"the schema has no message {message!r} (it has {', '.join(sorted(names)) or 'none'}; "
                                  f"{file})")
        return None, None, message
    return base64.b64encode(data).decode("ascii"), str(file), message


def _protobuf_messages(fds: Any) -> set[str]:
    """The full names of a descriptor set's messages (nested ones too)."""
    names: set[str] = set()

    def walk(prefix: str, types: Any) -> None:
        for m in types:
            names.add(prefix + m.name)
            walk(f"{prefix}{m.name}.", m.nested_type)

    for f in fds.file:
        walk(f"{f.package}." if f.package else "", f.message_type)
    return names


def _schema(c: _Checker, value: object, where: str, folder: Path | None) -> tuple[str | None, str | None]:
    """A declared schema as JSON text: a mapping (YAML of the schema), JSON text, or a file name relative to
    the spec's folder; (None, None) when none is declared."""
    import json

    if value is None:
        return None, None
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=False), "inline"
    if not isinstance(value, str) or not value.strip():
        c.fail(where, f"must be a schema file beside the spec, or the schema itself, got {_kind(value)}")
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


def _source(c: _Checker, doc: object, name: str, folder: Path | None = None) -> SourceSpec:
    d = c.section(doc, "source", _keys("source"), optional=False)
    checked = _topics(c, d.get("topics"))
    reset = _word(c, d, "source", "auto_offset_reset")
    return SourceSpec(
        topics=tuple(checked),
        kafka_conn_id=c.text(d, "source", "kafka_conn_id", _default("source", "kafka_conn_id")),
        auto_offset_reset=reset,
        consumer_group=c.text(d, "source", "consumer_group", f"lockstep-{name}"),
        on_topic_recreated=_word(c, d, "source", "on_topic_recreated"),
        key=_format(c, d.get("key"), "source.key", folder, sink=False),
        value=_format(c, d.get("value"), "source.value", folder, sink=False),
        registry_conn_id=c.text(d, "source", "registry_conn_id", _default("source", "registry_conn_id")),
    )


def _sink(c: _Checker, doc: object, source: SourceSpec, folder: Path | None = None) -> SinkSpec:
    d = c.section(doc, "sink", _keys("sink"), optional=False)
    topic, dlq = _topic(c, d, "sink", "topic"), _topic(c, d, "sink", "dead_letter_topic")
    if topic and topic in source.topics:
        c.fail("sink.topic", f"{topic!r} is also a source topic; a pipeline must not feed itself")
    if dlq and dlq == topic:
        c.fail("sink.dead_letter_topic", "must differ from sink.topic, or bad records would look like output")
    conn = c.text(d, "sink", "kafka_conn_id", source.kafka_conn_id or _default("source", "kafka_conn_id"))
    writer = c.text(d, "sink", "writer", _default("sink", "writer"))
    if writer not in _enum("sink", "writer"):
        c.fail("sink.writer", f"must be one of {', '.join(_enum('sink', 'writer'))}, got {writer!r}")
    parallelism = None
    if isinstance(d.get("parallelism"), str) and d["parallelism"] != "auto":
        c.fail("sink.parallelism", f"must be auto or a positive integer, got {d['parallelism']!r}")
    elif d.get("parallelism", "auto") != "auto":
        parallelism = _integer(c, d, "sink", "parallelism")
    key = _format(c, d.get("key"), "sink.key", folder, sink=True)
    value = _format(c, d.get("value"), "sink.value", folder, sink=True)
    return SinkSpec(topic=topic, dead_letter_topic=dlq, kafka_conn_id=conn, writer=writer, parallelism=parallelism,
                    key=key, value=value,
                    registry_conn_id=c.text(d, "sink", "registry_conn_id", source.registry_conn_id
                                            or _default("source", "registry_conn_id")),
                    routes=_routes(c, d.get("routes"), source, topic, dlq), on_error=_on_error(c, d))


def _on_error(c: _Checker, d: Section) -> str:
    """``sink.on_error``: dead_letter (the default) or fail."""
    value = c.text(d, "sink", "on_error", _default("sink", "on_error"))
    if value not in _enum("sink", "on_error"):
        c.fail("sink.on_error", f"must be one of {', '.join(_enum('sink', 'on_error'))}, got {value!r}")
    return value


def _routes(c: _Checker, doc: object, source: SourceSpec, topic: str | None,
            dlq: str | None) -> tuple[tuple[str, str], ...]:
    """``sink.routes``: topic -> a Spark SQL condition, in order (docs/formats.md, *Routes*)."""
    if doc is None:
        return ()
    routes = c.mapping(doc, "sink.routes")
    checked: list[tuple[str, str]] = []
    for name, condition in routes.items():
        where = f"sink.routes.{name}"
        if not isinstance(name, str) or not TOPIC_RE.fullmatch(name) or name in (".", ".."):
            c.fail(where, f"a route's key is the topic it writes to: {TOPIC_RULE}")
        elif name in source.topics:
            c.fail(where, f"{name!r} is also a source topic; a pipeline must not feed itself")
        elif name in (topic, dlq):
            c.fail(where, f"{name!r} is sink.{'topic' if name == topic else 'dead_letter_topic'} already: "
                          "records no route takes go to sink.topic, and dead letters to sink.dead_letter_topic")
        elif not isinstance(condition, str) or not condition.strip():
            c.fail(where, "must be a Spark SQL condition over the transform's output, such as "
                          f"\"data.country = 'DE'\", got {_kind(condition)}")
        else:
            checked.append((name, condition.strip()))
    return tuple(checked)


def _tables(c: _Checker, doc: object, source: SourceSpec, folder: Path | None) -> tuple[TableSpec, ...]:
    """``tables``: name -> a table section (docs/joins.md)."""
    if doc is None:
        return ()
    shape = TABLE.section
    assert shape is not None
    join_shape = shape.fields["join"].section
    assert join_shape is not None
    tables: list[TableSpec] = []
    for name, raw in c.mapping(doc, "tables").items():
        path = f"tables.{name}"
        if not isinstance(name, str) or not IDENTIFIER_RE.fullmatch(name):
            c.fail(path, f"a table's name is the view SQL reads it by: {IDENTIFIER_PATTERN}")
            continue
        if name.lower() in RESERVED_TABLE_NAMES:
            c.fail(path, f"{name!r} is the view of the input; give the table another name")
            continue
        d = c.section(raw, path, shape.keys, optional=False)
        topic = _topic(c, d, path, "topic")
        if topic is not None and topic in source.topics:
            c.fail(f"{path}.topic", f"{topic!r} is a source topic; a table reads a topic of its own")
        key = _format(c, d.get("key"), f"{path}.key", folder, sink=False, declared=shape.fields["key"].section)
        value = _format(c, d.get("value"), f"{path}.value", folder, sink=False,
                        declared=shape.fields["value"].section)
        join = None
        if d.get("join") is not None:
            j = c.section(d["join"], f"{path}.join", join_shape.keys)
            on = j.get("by", _MISSING)
            if on is _MISSING:
                c.fail(f"{path}.join.by", "is required: a Spark SQL expression over the input equal to the table's "
                                          "key (data.customer_id)")
            elif not isinstance(on, str) or not on.strip():
                c.fail(f"{path}.join.by", f"must be a Spark SQL expression, got {_kind(on)}")
            how = _choice(c, j, f"{path}.join", "how", join_shape)
            missing = _choice(c, j, f"{path}.join", "missing", join_shape)
            if how == "left" and "missing" in j:
                c.fail(f"{path}.join.missing", "is for an inner join: a left join keeps every record")
            as_of = j.get("as_of")
            if as_of is not None and (not isinstance(as_of, str) or not as_of.strip()):
                c.fail(f"{path}.join.as_of", f"must be a Spark SQL expression (the record's event time), got "
                                             f"{_kind(as_of)}")
                as_of = None
            elif as_of is not None and d.get("versions") is None:
                c.fail(f"{path}.versions", "is required for a join as_of an event time: how long to keep each key's "
                                           "earlier values (7d, say)")
            if isinstance(on, str) and on.strip() and how and missing:
                join = TableJoin(on.strip(), how, missing, as_of.strip() if isinstance(as_of, str) else None)
        versions = _duration(c, d, path, "versions", None, positive=True) if d.get("versions") is not None else None
        on_error = _choice(c, d, path, "on_error", shape)
        if topic is not None:
            tables.append(TableSpec(name, topic, key, value, join, versions, on_error or "dead_letter"))
    topics = [t.topic for t in tables]
    for t in sorted({t for t in topics if topics.count(t) > 1}):
        c.fail("tables", f"topic {t!r} is read by more than one table")
    return tuple(tables)


def _choice(c: _Checker, d: Section, path: str, key: str, shape: SectionShape) -> Any:
    words = shape.fields[key].enum
    return c.text(d, path, key, shape.fields[key].default, re.compile("|".join(map(re.escape, words))),
                  _one_of(words))


def parse_store_url(url: str) -> StoreLocation | None:
    """Split `s3://bucket[/prefix]`; None when it is not such a URL."""
    if not url.startswith("s3://"):
        return None
    bucket, _, prefix = url[len("s3://"):].partition("/")
    prefix = prefix.strip("/")
    if not BUCKET_RE.fullmatch(bucket) or ".." in bucket or "//" in prefix:
        return None
    return StoreLocation(bucket, prefix)


def _schedule(c: _Checker, d: Section) -> Any:  # a reader's result, as _Checker's
    value = d.get("schedule")
    if value is None:
        return None
    if not isinstance(value, str):
        c.fail("checkpoints.schedule", f"must be a cron string, an Airflow preset or null, got {_kind(value)}")
    elif value.startswith("@"):
        if value in _enum("checkpoints", "schedule"):
            return value
        c.fail("checkpoints.schedule", f"unknown preset {value!r} (known: {', '.join(sorted(SCHEDULE_PRESETS))})")
    elif (reason := cron_problem(value)) is None:
        return value
    else:
        c.fail("checkpoints.schedule", f"{value!r} is not a valid cron expression: {reason}")
    return None


def cron_problem(value: str) -> str | None:
    """Why Airflow would refuse ``value`` as a cron schedule, or None: croniter, which Airflow's cron
    timetable parses with, decides, so a spec that passes here also gets its DAG (``99 * * * *`` does not).
    Five fields (six with seconds), as Airflow takes them."""
    from croniter import CroniterBadCronError, CroniterBadDateError, croniter

    if len(value.split()) not in (5, 6):
        return f"it has {len(value.split())} fields; a cron expression has 5 (minute hour day month weekday)"
    try:
        croniter(value)
    except (CroniterBadCronError, CroniterBadDateError, ValueError, KeyError) as exc:
        return str(exc) or type(exc).__name__
    return None


def _trigger(c: _Checker, d: Section) -> Any:  # a reader's result, as _Checker's
    if d.get("trigger") is None:
        return None
    t = c.section(d["trigger"], "checkpoints.trigger", _keys("checkpoints.trigger"))
    if "lag_records" not in t:
        c.fail("checkpoints.trigger.lag_records", "is required: the unread records that start a checkpoint")
    if d.get("schedule") is not None:
        c.fail("checkpoints.schedule", "must be null (or left out) when checkpoints.trigger is set: the lag starts "
                                       "checkpoints, not a schedule")
    lag = _integer(c, t, "checkpoints.trigger", "lag_records")
    wait = _declared_duration(c, t, "checkpoints.trigger", "max_wait")
    poll = _declared_duration(c, t, "checkpoints.trigger", "poll_interval")
    if None in (lag, wait, poll):
        return None
    return TriggerSpec(lag_records=lag, max_wait_s=wait, poll_s=poll)


def _checkpoints(c: _Checker, doc: object) -> CheckpointSpec:
    d = c.section(doc, "checkpoints", _keys("checkpoints"), optional=False)
    store = c.text(d, "checkpoints", "store")
    location = parse_store_url(store) if store else None
    if store and location is None:
        c.fail("checkpoints.store", f"{store!r} is not s3://bucket[/prefix] with a valid bucket name")
    return CheckpointSpec(
        store=store,
        bucket=location.bucket if location else "",
        prefix=location.prefix if location else "",
        aws_conn_id=c.text(d, "checkpoints", "aws_conn_id", _default("checkpoints", "aws_conn_id")),
        schedule=_schedule(c, d),
        max_records=_integer(c, d, "checkpoints", "max_records"),
        retain=_integer(c, d, "checkpoints", "retain"),
        skip_deleted_ranges=c.boolean(d, "checkpoints", "skip_deleted_ranges", _default("checkpoints", "skip_deleted_ranges")),
        trigger=_trigger(c, d),
        tasks=_word(c, d, "checkpoints", "tasks"),
    )


def _transactions(c: _Checker, doc: object, name: str) -> TransactionSpec:
    d = c.section(doc, "transactions", _keys("transactions"))
    prefix = c.text(d, "transactions", "id_prefix", name or "x", ID_PREFIX_RE, "allowed are 1-200 of [A-Za-z0-9._-]")
    timeout = _integer(c, d, "transactions", "timeout_ms")
    margin = _integer(c, d, "transactions", "commit_margin_ms")
    if timeout is not None and margin is not None and margin >= timeout:
        c.fail("transactions.commit_margin_ms", f"must be less than transactions.timeout_ms ({timeout}), got {margin}")
    warn = _integer(c, d, "transactions", "warn_time_left_percent")
    return TransactionSpec(id_prefix=prefix, timeout_ms=timeout, commit_margin_ms=margin, warn_time_left_percent=warn)


def _spark(c: _Checker, doc: object) -> SparkSpec:
    d = c.section(doc, "spark", _keys("spark"))
    master = c.text(d, "spark", "master", None)
    mode = c.text(d, "spark", "mode", None)
    if mode is not None and mode not in _enum("spark", "mode"):
        c.fail("spark.mode", f"must be one of {', '.join(_enum('spark', 'mode'))}, got {mode!r}")
    remote = c.text(d, "spark", "remote", None)
    if remote is not None and not remote.startswith("sc://"):
        c.fail("spark.remote", f"must be a Spark Connect URL (sc://HOST:PORT), got {remote!r}")
    elif remote is not None and ";" in remote:
        # Parameters would land in logs with the URL; a token belongs in the environment.
        c.fail("spark.remote", "takes sc://HOST:PORT only, no ;parameters: give a token in the run's "
                               "environment as SPARK_CONNECT_AUTHENTICATE_TOKEN, never in the spec")
    if remote is not None and mode == "submit":
        c.fail("spark.remote", "is the endpoint of connect mode; spark.mode says submit")
    conf = c.mapping(d.get("conf"), "spark.conf")
    rendered: dict[str, str] = {}
    for key, value in conf.items():
        where = f"spark.conf[{key}]"
        if not isinstance(key, str) or not isinstance(value, (str, int, bool)):
            c.fail(where, f"keys must be strings and values strings, integers or booleans, got {_kind(value)}")
            continue
        rendered[key] = str(value).lower() if isinstance(value, bool) else str(value)
        if key == "spark.speculation" and rendered[key].strip().lower() == "true":
            c.fail(where, "speculation must stay off: a speculative task attempt would fence the "
                          "transaction of the attempt that wins")
    return SparkSpec(master=master, conf=rendered, mode=mode, remote=remote)


def _producer(c: _Checker, doc: object) -> dict[str, object]:
    d = c.mapping(doc, "producer")
    for key in sorted(set(_declared("", "producer").refused_keys).intersection(d)):
        c.fail(f"producer[{key}]", "is set by Lockstep (it owns transactional ids and timeouts); "
                                   "use transactions.* instead")
    # keys as the YAML has them, unchecked: a producer client refuses a key that is not a string
    return dict(d)  # type: ignore[arg-type]


def duration_ms(value: object) -> int | None:
    """``"500ms"``, ``"10s"``, ``"1m"``, ``"2h"``, ``"1d"`` (a space before the unit is allowed) or a whole
    number of seconds (an integer, or digits alone), in ms; None if not one. The one grammar of every
    duration field of a spec (`DURATION_RULE`)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1000 if value >= 0 else None
    if isinstance(value, str) and (m := DURATION_RE.fullmatch(value.strip())):
        return int(m.group(1)) * _DURATION_MS[m.group(2) or "s"]
    return None


def _declared_duration(c: _Checker, d: Section, path: str, key: str, default: object = _MISSING) -> Any:
    """A duration field as declared: its default (unless the caller's depends on another field), whether it
    must be more than 0, and its unit."""
    f = _declared(path, key)
    if default is _MISSING and f.default is not UNSET:
        default = f.default
    return _duration(c, d, path, key, default, positive=f.positive, unit_ms=f.unit_ms)


def _duration(c: _Checker, d: Section, path: str, key: str, default: object = _MISSING, positive: bool = False,
              unit_ms: int = 1) -> Any:
    """A duration field, in the unit its spec field keeps (ms, or seconds with ``unit_ms=1000``): every
    field reads the same grammar (`duration_ms`) and says the same thing when it cannot."""
    value = d.get(key, default)
    where = _join(path, key)
    if value is _MISSING:
        c.fail(where, "is required")
        return None
    ms = duration_ms(value)
    if ms is None:
        c.fail(where, f"must be a duration: {DURATION_RULE}, got {_kind(value)}")
    elif positive and ms == 0:
        c.fail(where, "must be more than 0")
    elif ms % unit_ms:
        c.fail(where, f"must be a whole number of seconds, got {_kind(value)}")
    else:
        return ms // unit_ms
    return None


def _expression(c: _Checker, d: Section, path: str, key: str) -> Any:
    """A Spark SQL expression: checked here for being text only; Spark checks it when the run starts."""
    value = d.get(key, _MISSING)
    if value is _MISSING:
        c.fail(_join(path, key), "is required")
    elif not isinstance(value, str) or not value.strip():
        c.fail(_join(path, key), f"must be a Spark SQL expression, got {_kind(value)}")
    else:
        return value.strip()
    return None


def _state(c: _Checker, doc: object) -> StateSpec | None:
    if doc is None or doc is _MISSING:
        return None
    d = c.section(doc, "state", _keys("state"))
    groups = _integer(c, d, "state", "key_groups")
    k = c.section(d.get("compaction"), "state.compaction", _keys("state.compaction"))
    r = _declared("state.compaction", "max_delta_ratio")
    ratio = k.get("max_delta_ratio", r.default)
    assert r.low is not None and r.high is not None and r.low_exclusive
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not r.low < ratio <= r.high:
        c.fail("state.compaction.max_delta_ratio",
               f"must be a number above {r.low:g} (at most {r.high:g}), got {_kind(ratio)}")
        ratio = r.default
    compaction = CompactionPolicy(max_deltas=_integer(c, k, "state.compaction", "max_deltas"),
                                  max_delta_ratio=float(ratio))
    e = c.section(d.get("event_time", _MISSING), "state.event_time", _keys("state.event_time"), optional=False)
    event_time = EventTime(column=_expression(c, e, "state.event_time", "column"),
                           out_of_orderness_ms=_declared_duration(c, e, "state.event_time", "out_of_orderness"),
                           idle_timeout_ms=_declared_duration(c, e, "state.event_time", "idle_timeout"),
                           idle_advance=c.boolean(e, "state.event_time", "idle_advance",
                                                  _default("state.event_time", "idle_advance")))
    kinds = [k for k in ("window", "dedup", "function", "interval_join") if d.get(k) is not None]
    if len(kinds) != 1:
        c.fail("state", "needs exactly one operator: window, dedup, function or interval_join" if not kinds
               else f"has {' and '.join(kinds)}; a pipeline has one stateful operator")
        return None
    window = dedup = function = None
    interval: IntervalJoinSpec | None = None
    if kinds == ["window"]:
        w = c.section(d["window"], "state.window", _keys("state.window"))
        key = _expression(c, w, "state.window", "key")
        size = _declared_duration(c, w, "state.window", "size")
        slide = _declared_duration(c, w, "state.window", "slide", w.get("size", "0s"))
        if size and slide and (slide > size or size % slide):
            c.fail("state.window.slide", f"must divide state.window.size ({size} ms) and not exceed it, got {slide} ms")
        name = c.text(w, "state.window", "key_name", key if key and IDENTIFIER_RE.fullmatch(key) else DEFAULT_KEY_NAME,
                      IDENTIFIER_RE, "a field name: letters, digits and _")
        aggs = c.mapping(w.get("aggregates", _MISSING), "state.window.aggregates", optional=False)
        if not aggs and not any(p.field == "state.window.aggregates" for p in c.problems):
            c.fail("state.window.aggregates", "must name at least one output field and its aggregate")
        checked: list[tuple[str, str]] = []
        for field_name, expr in aggs.items():
            where = f"state.window.aggregates.{field_name}"
            if not isinstance(field_name, str) or not IDENTIFIER_RE.fullmatch(field_name):
                c.fail(where, "output field names are letters, digits and _")
            elif field_name in (name, "window_start", "window_end"):
                c.fail(where, f"{field_name!r} is already a field of the output (key_name, window_start, window_end)")
            elif not isinstance(expr, str) or not expr.strip():
                c.fail(where, f"must be a Spark SQL aggregate such as count(*) or sum(amount), got {_kind(expr)}")
            else:
                checked.append((field_name, expr.strip()))
        window = WindowSpec(key=key, key_name=name, size_ms=size, slide_ms=slide,
                            allowed_lateness_ms=_declared_duration(c, w, "state.window", "allowed_lateness"),
                            aggregates=tuple(checked))
    elif kinds == ["function"]:
        function = _function(c, d["function"])
    elif kinds == ["interval_join"]:
        path = "state.interval_join"
        j = c.section(d["interval_join"], path, _keys(path))
        how = _word(c, j, path, "how")
        interval = IntervalJoinSpec(key=_expression(c, j, path, "key"), left=_topic(c, j, path, "left"),
                                    right=_topic(c, j, path, "right"),
                                    after_ms=_declared_duration(c, j, path, "after"),
                                    before_ms=_declared_duration(c, j, path, "before"), how=how or "inner")
        function = interval.function()
    else:
        x = c.section(d["dedup"], "state.dedup", _keys("state.dedup"))
        action = c.text(x, "state.dedup", "duplicates", _default("state.dedup", "duplicates"))
        if action is not None and action not in _enum("state.dedup", "duplicates"):
            c.fail("state.dedup.duplicates", f"must be one of {', '.join(_enum('state.dedup', 'duplicates'))}, "
                                             f"got {action!r}")
        dedup = DedupSpec(key=_expression(c, x, "state.dedup", "key"),
                          ttl_ms=_declared_duration(c, x, "state.dedup", "ttl"), duplicates=action)
    return StateSpec(key_groups=groups, event_time=event_time, window=window, dedup=dedup, function=function,
                     interval_join=interval, compaction=compaction)


def _function(c: _Checker, doc: object) -> FunctionSpec:
    path = "state.function"
    f = c.section(doc, path, _keys(path))
    rule = 'expected "module.path:function"'
    fields = c.mapping(f.get("state", _MISSING), f"{path}.state", optional=False)
    checked: list[tuple[str, str]] = []
    types = _declared(path, "state").items.enum  # type: ignore[union-attr]
    for name, kind in fields.items():
        where = f"{path}.state.{name}"
        if not isinstance(name, str) or not IDENTIFIER_RE.fullmatch(name) or name.startswith("__"):
            c.fail(where, "state field names are letters, digits and _, not starting with __")
        elif not isinstance(kind, str) or kind.replace(" ", "") not in types:
            c.fail(where, f"must be one of {', '.join(types)}, got {_kind(kind)}")
        else:
            checked.append((name, kind.replace(" ", "")))
    if not fields and not any(p.field == f"{path}.state" for p in c.problems):
        c.fail(f"{path}.state", "must declare at least one state field and its type")
    process = c.text(f, path, "process", pattern=FUNCTION_RE, rule=rule)
    migrate = c.text(f, path, "migrate", None, FUNCTION_RE, rule)
    return FunctionSpec(key=_expression(c, f, path, "key"),
                        process=_normalise_transform(process) if process else "",
                        fields=tuple(checked), version=_integer(c, f, path, "version"),
                        migrate=_normalise_transform(migrate) if migrate else None,
                        ttl_ms=_declared_duration(c, f, path, "ttl") if f.get("ttl") is not None else None)


def parse_spec(doc: object, file: str) -> PipelineSpec:
    """Validate one parsed YAML document; raises SpecError listing every problem found."""
    c = _Checker(file)
    d = c.section(doc, "", _keys(""), optional=False)
    name = c.text(d, "", "name", pattern=NAME_RE, rule=f"allowed is {NAME_PATTERN}")
    description = d.get("description") or ""
    if not isinstance(description, str):
        c.fail("description", f"must be a string, got {_kind(description)}")
    folder = Path(file).parent if file and not file.startswith("<") else None
    source = _source(c, d.get("source", _MISSING), name or "", folder)
    transform, sql, sql_from = _transform(c, d.get("transform", _MISSING), d, folder)
    spec = PipelineSpec(
        name=name,
        description=description if isinstance(description, str) else "",
        source=source,
        transform=transform or "",
        sink=_sink(c, d.get("sink", _MISSING), source, folder),
        checkpoints=_checkpoints(c, d.get("checkpoints", _MISSING)),
        transactions=_transactions(c, d.get("transactions"), name or ""),
        spark=_spark(c, d.get("spark")),
        producer=_producer(c, d.get("producer")),
        path=file,
        state=_state(c, d.get("state")),
        owner=c.text(d, "", "owner", _default("", "owner")) or DEFAULT_OWNER,
        tags=_tags(c, d.get("tags")),
        alerts=_alerts(c, d.get("alerts")),
        transform_sql=sql,
        transform_sql_from=sql_from,
        tables=_tables(c, d.get("tables"), source, folder),
    )
    for table in spec.tables:
        if table.topic in (spec.sink.topic, spec.sink.dead_letter_topic, *(t for t, _ in spec.sink.routes)):
            c.fail(f"tables.{table.name}.topic", f"{table.topic!r} is written by this pipeline; a pipeline must "
                                                 "not feed itself")
    j = spec.state.interval_join if spec.state is not None else None
    if j is not None and j.left and j.right:
        if j.left == j.right:
            c.fail("state.interval_join.right", "must be another topic than left")
        for side, topic in (("left", j.left), ("right", j.right)):
            if topic not in spec.source.topics:
                c.fail(f"state.interval_join.{side}", f"{topic!r} is not one of source.topics")
        others = [t for t in spec.source.topics if t not in (j.left, j.right)]
        if others:
            c.fail("source.topics", f"{', '.join(others)}: neither side of state.interval_join; its records would meet "
                                    "nothing")
    if spec.tables and spec.state is not None:
        c.fail("tables", "are not supported with state yet; join in a stateless pipeline whose sink topic the "
                         "stateful one reads")
    if spec.state is not None and spec.sink.routes:
        c.fail("sink.routes", "are not supported with state yet (a window's and a state function's records are "
                              "made after the transform); route in a second, stateless pipeline that reads this one's "
                              "sink topic")
    if c.problems:
        raise SpecError(c.problems)
    return spec


def _transform(c: _Checker, value: object, d: Section,
               folder: Path | None) -> tuple[str | None, str | None, str | None]:
    """``transform``: a Python target (``module.path:function``), or an SQL query given inline (``sql``) or in a
    file beside the spec (``sql_file``, read as the formats' schema files are). Returns what ``transform`` says
    (the target, or ``SQL (<where>)`` for people), the query (None for Python) and where the query came from."""
    if not isinstance(value, dict):
        target = c.text(d, "", "transform", pattern=TRANSFORM_RE,
                        rule='expected "module.path:function" or "module.path.function", or a section with sql or '
                             'sql_file')
        return (_normalise_transform(target) if target else None), None, None
    t = c.section(value, "transform", TRANSFORM_SQL.section.keys if TRANSFORM_SQL.section else set())
    given = [k for k in ("sql", "sql_file") if t.get(k) is not None]
    if len(given) != 1:
        c.fail("transform", "takes one of sql (the query) or sql_file (a file beside the spec), not both" if given
               else "needs sql (the query) or sql_file (a file beside the spec), or is module.path:function")
        return None, None, None
    key = given[0]
    text = c.text(t, "transform", key)
    if text is None:
        return None, None, None
    origin = "inline"
    if key == "sql_file":
        file = (folder / text) if folder is not None else Path(text)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            c.fail("transform.sql_file", f"cannot read SQL file {str(file)!r}: {exc.strerror or exc}")
            return None, None, None
        origin = str(file)
    query = text.strip()
    if not query or all(not line.strip() or line.strip().startswith("--") for line in query.splitlines()):
        c.fail(f"transform.{key}", f"the query ({origin}) is empty: write one SELECT over the view input, for "
                                   "example SELECT * FROM input WHERE value IS NOT NULL")
        return None, None, None
    return f"SQL ({t[key] if key == 'sql_file' else 'inline'})", query, origin


def _tags(c: _Checker, value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) and TAG_RE.fullmatch(t) for t in value):
        c.fail("tags", f"must be a list of tags (text of 1 to 100 characters, no commas), got {_kind(value)}")
        return ()
    return tuple(dict.fromkeys(value))


def _alerts(c: _Checker, doc: object) -> AlertsSpec | None:
    if doc is None:
        return None
    d = c.section(doc, "alerts", _keys("alerts"))
    webhook = c.text(d, "alerts", "webhook_conn_id", None)
    email = d.get("email") or []
    if isinstance(email, str):
        email = [email]
    if not isinstance(email, list) or not all(isinstance(e, str) and EMAIL_RE.fullmatch(e) for e in email):
        c.fail("alerts.email", f"must be an e-mail address or a list of them, got {_kind(d.get('email'))}")
        email = []
    if d and webhook is None and not email and not any(p.field.startswith("alerts") for p in c.problems):
        c.fail("alerts", "names no one: set webhook_conn_id (an http connection) or email (addresses)")
    smtp = _default("alerts", "smtp_conn_id")
    return AlertsSpec(webhook, tuple(email), c.text(d, "alerts", "smtp_conn_id", smtp) or smtp)


def _normalise_transform(value: str) -> str:
    if ":" in value:
        return value
    module, _, function = value.rpartition(".")
    return f"{module}:{function}"


def load_spec(path: str | Path) -> PipelineSpec:
    """Read and validate one spec file."""
    file = str(path)
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError([SpecProblem(file, "<document>", f"cannot be read as YAML: {exc}")]) from exc
    return parse_spec(doc, file)


def spec_files(directory: str | Path) -> list[Path]:
    """The spec files of a directory: its *.yaml and *.yml, by name."""
    return sorted(p for p in Path(directory).iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_specs(directory: str | Path) -> list[PipelineSpec]:
    """Load every *.yaml/*.yml in a directory and check the specs do not collide with each other; any
    problem in any spec raises (a command that acts on them all). `load_each` keeps the good ones."""
    specs, problems = load_each(directory)
    if problems:
        raise SpecError(problems)
    return specs


def load_each(directory: str | Path) -> tuple[list[PipelineSpec], list[SpecProblem]]:
    """The specs of a directory that validate and collide with no other, and the problems of the rest:
    one bad spec leaves every other pipeline its DAG, its page and its savepoints.

    Two specs that collide (`cross_check`) are both left out: either could fence the other's
    transactions, and which of them already runs is not known here."""
    specs: list[PipelineSpec] = []
    problems: list[SpecProblem] = []
    for file in spec_files(directory):
        try:
            specs.append(load_spec(file))
        except SpecError as exc:
            problems.extend(exc.problems)
    clashes = _clashes(specs)
    clashed = {path for a, b, _ in clashes for path in (a.path, b.path)}
    return [s for s in specs if s.path not in clashed], problems + [problem for _, _, problem in clashes]


def cross_check(specs: list[PipelineSpec]) -> list[SpecProblem]:
    """Problems between specs: shared names, DAG ids or transactional id prefixes.

    Transactional ids are `<prefix>-<checkpoint>-<task>` and recovery fences every id under a
    prefix, so `orders` and `orders-enrich` as prefixes would let one pipeline abort the other's
    transactions.
    """
    return [problem for _, _, problem in _clashes(specs)]


def _clashes(specs: list[PipelineSpec]) -> list[tuple[PipelineSpec, PipelineSpec, SpecProblem]]:
    """Each pair of specs that collide, with the problem (named on the later one)."""
    problems: list[tuple[PipelineSpec, PipelineSpec, SpecProblem]] = []
    for i, a in enumerate(specs):
        for b in specs[i + 1:]:
            if a.name == b.name:
                problems.append((a, b, SpecProblem(b.path, "name", f"{b.name!r} is also used by {a.path}")))
            elif a.dag_id == b.dag_id:
                problems.append((a, b, SpecProblem(b.path, "name", f"DAG id {b.dag_id} is also the DAG id of {a.path}")))
            pa, pb = a.transactions.id_prefix, b.transactions.id_prefix
            if pa == pb:
                problems.append((a, b, SpecProblem(b.path, "transactions.id_prefix", f"{pb!r} is also used by {a.path}")))
            elif pb.startswith(pa + "-") or pa.startswith(pb + "-"):
                short, long_ = sorted((pa, pb), key=len)
                problems.append((a, b, SpecProblem(
                    b.path, "transactions.id_prefix",
                    f"{pb!r} and {pa!r} ({a.path}) overlap: ids under {long_!r} also start with {short + '-'!r}, "
                    "so fencing one pipeline would abort the other's transactions",
                )))
    return problems
