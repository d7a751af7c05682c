"""Where a pipeline reads and writes: ``source``, ``sink`` (with its routes) and ``transform``.

These sections decide which topics a checkpoint's transactions touch, so the checks that keep a pipeline from
feeding itself (a sink or route topic that is also a source topic) live with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lockstep.spec.checker import (
    TOPIC_RE,
    TOPIC_RULE,
    TRANSFORM_RE,
    Checker,
    Section,
    allowed_keys,
    declared_default,
    declared_integer,
    declared_words,
    describe,
    normalise_transform,
    read_topic,
    read_word,
)
from lockstep.spec.formats import BYTES, FormatSpec, read_format
from lockstep.spec.shape import DEFAULT_REGISTRY_CONN_ID, ICEBERG_TABLE_PATTERN, PARTITION_FIELD_PATTERN, TRANSFORM_SQL

__all__ = ["IcebergSinkSpec", "TablePartition", "read_sink", "read_source", "read_transform", "SinkSpec", "SourceSpec"]

_ICEBERG_TABLE_RE = re.compile(ICEBERG_TABLE_PATTERN)
_PARTITION_FIELD_RE = re.compile(PARTITION_FIELD_PATTERN)
_PARTITION_RULE = ("expected a column, or year, month, day, hour, bucket or truncate of one: such as region, "
                   "day(ordered_at), bucket(16, customer), truncate(4, sku)")


@dataclass(frozen=True)
class TablePartition:
    """One partition field of ``sink.iceberg.partitioning``: a column of the output and Iceberg's transform of it,
    in Iceberg's own words (``identity``, ``day``, ``bucket[16]``, ``truncate[4]``)."""

    column: str
    transform: str

    def __str__(self) -> str:
        """As the spec writes it: ``region``, ``day(ordered_at)``, ``bucket(16, customer)``."""
        if self.transform == "identity":
            return self.column
        name, _, width = self.transform.partition("[")
        return f"{name}({width[:-1]}, {self.column})" if width else f"{name}({self.column})"


@dataclass(frozen=True)
class IcebergSinkSpec:
    """``sink.iceberg``: the Iceberg table that the records written to ``sink.topic`` also go to, published with
    the checkpoint's transactions (docs/iceberg.md)."""

    table: str
    catalog_conn_id: str
    #: ``partitioning``: the table's partition fields, in order; None: the table's own (unpartitioned when created).
    partitioning: tuple[TablePartition, ...] | None = None


@dataclass(frozen=True)
class SourceSpec:
    """``source``: the topics a checkpoint reads and how their records are decoded."""

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
    """``sink``: the topics a checkpoint's transactions write, and how records are encoded."""

    #: None: the records land in ``iceberg``'s table alone; the transactions carry the dead letters.
    topic: str | None
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
    #: ``sink.iceberg``: an Iceberg table beside the topic, or None.
    iceberg: IcebergSinkSpec | None = None

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics outputs go to: ``topic`` (the records no route takes), then each route's; none when the
        records land in the table alone."""
        return (*((self.topic,) if self.topic is not None else ()), *(t for t, _ in self.routes))

    @property
    def table_only(self) -> bool:
        """Whether the records land in the Iceberg table alone (no ``topic``): the writers write dead letters only."""
        return self.topic is None


def _topics(c: Checker, value: object) -> tuple[str, ...]:
    """``source.topics``: a non-empty list of distinct topic names."""
    if not isinstance(value, list) or not value:
        c.fail("source.topics", f"must be a non-empty list of topic names, got {describe(value)}")
        return ()
    checked = [read_topic(c, {f"topics[{i}]": t}, "source", f"topics[{i}]") for i, t in enumerate(value)]
    if len(set(map(str, value))) != len(value):
        c.fail("source.topics", "lists a topic more than once")
    return tuple(t for t in checked if t)


def read_source(c: Checker, doc: object, name: str, folder: Path | None = None) -> SourceSpec:
    """``source``: its consumer group defaults to one per pipeline, so two pipelines never share offsets."""
    d = c.section(doc, "source", allowed_keys("source"), optional=False)
    checked = _topics(c, d.get("topics"))
    reset = read_word(c, d, "source", "auto_offset_reset")
    return SourceSpec(
        topics=tuple(checked),
        kafka_conn_id=c.text(d, "source", "kafka_conn_id", declared_default("source", "kafka_conn_id")),
        auto_offset_reset=reset,
        consumer_group=c.text(d, "source", "consumer_group", f"lockstep-{name}"),
        on_topic_recreated=read_word(c, d, "source", "on_topic_recreated"),
        key=read_format(c, d.get("key"), "source.key", folder, sink=False),
        value=read_format(c, d.get("value"), "source.value", folder, sink=False),
        registry_conn_id=c.text(d, "source", "registry_conn_id", declared_default("source", "registry_conn_id")),
    )


def read_sink(c: Checker, doc: object, source: SourceSpec, folder: Path | None = None) -> SinkSpec:
    """``sink``: its topics must differ from the source's and from each other, or a pipeline would feed itself."""
    d = c.section(doc, "sink", allowed_keys("sink"), optional=False)
    alone = d.get("topic") is None and d.get("iceberg") is not None  # the table without a topic
    topic = None if alone else read_topic(c, d, "sink", "topic")
    dlq = read_topic(c, d, "sink", "dead_letter_topic")
    if topic and topic in source.topics:
        c.fail("sink.topic", f"{topic!r} is also a source topic; a pipeline must not feed itself")
    if dlq and dlq == topic:
        c.fail("sink.dead_letter_topic", "must differ from sink.topic, or bad records would look like output")
    conn = c.text(d, "sink", "kafka_conn_id", source.kafka_conn_id or declared_default("source", "kafka_conn_id"))
    writer = c.text(d, "sink", "writer", declared_default("sink", "writer"))
    if writer not in declared_words("sink", "writer"):
        c.fail("sink.writer", f"must be one of {', '.join(declared_words('sink', 'writer'))}, got {writer!r}")
    parallelism = None
    if isinstance(d.get("parallelism"), str) and d["parallelism"] != "auto":
        c.fail("sink.parallelism", f"must be auto or a positive integer, got {d['parallelism']!r}")
    elif d.get("parallelism", "auto") != "auto":
        parallelism = declared_integer(c, d, "sink", "parallelism")
    key = read_format(c, d.get("key"), "sink.key", folder, sink=True)
    value = read_format(c, d.get("value"), "sink.value", folder, sink=True)
    if alone:
        for name in ("key", "value", "routes"):
            if d.get(name) is not None:
                verb = "route" if name == "routes" else "encode"
                c.fail(f"sink.{name}", "needs sink.topic: without it the records land in the Iceberg table alone, "
                                       f"as the transform's columns (set sink.topic to {verb} records to Kafka too)")
    return SinkSpec(topic=topic, dead_letter_topic=dlq, kafka_conn_id=conn, writer=writer, parallelism=parallelism,
                    key=key, value=value,
                    registry_conn_id=c.text(d, "sink", "registry_conn_id", source.registry_conn_id
                                            or declared_default("source", "registry_conn_id")),
                    routes=_routes(c, d.get("routes"), source, topic, dlq), on_error=_on_error(c, d),
                    iceberg=_iceberg(c, d))


def _iceberg(c: Checker, d: Section) -> IcebergSinkSpec | None:
    """``sink.iceberg``: the table and its catalog's connection."""
    if d.get("iceberg") is None:
        return None
    t = c.section(d["iceberg"], "sink.iceberg", allowed_keys("sink.iceberg"))
    table = c.text(t, "sink.iceberg", "table", pattern=_ICEBERG_TABLE_RE,
                   rule="expected namespace.table, such as lake.orders")
    conn = c.text(t, "sink.iceberg", "catalog_conn_id", declared_default("sink.iceberg", "catalog_conn_id"))
    partitioning = _partitioning(c, t.get("partitioning")) if t.get("partitioning") is not None else None
    return IcebergSinkSpec(table, conn, partitioning) if table and conn else None


def _partitioning(c: Checker, value: object) -> tuple[TablePartition, ...]:
    """``sink.iceberg.partitioning``: partition fields, each a column or an Iceberg transform of one, none twice."""
    if not isinstance(value, list):
        c.fail("sink.iceberg.partitioning", f"must be a list of partition fields ({_PARTITION_RULE}), got "
                                            f"{describe(value)}")
        return ()
    fields: list[TablePartition] = []
    for i, item in enumerate(value):
        path = f"sink.iceberg.partitioning[{i}]"
        if not isinstance(item, str) or not _PARTITION_FIELD_RE.fullmatch(item):
            what = repr(item.strip()) if isinstance(item, str) else describe(item)
            c.fail(path, f"{what} is not a partition field: {_PARTITION_RULE}")
            continue
        field = _partition_field(item)
        if field in fields:
            c.fail(path, f"{item.strip()!r} is there already")
        elif any(f.column == field.column and f.transform in _TIME and field.transform in _TIME for f in fields):
            c.fail(path, f"{item.strip()!r}: {field.column} is partitioned by time already (Iceberg takes one of "
                         "year, month, day and hour per column)")
        fields.append(field)
    return tuple(fields)


_TIME = ("year", "month", "day", "hour")


def _partition_field(text: str) -> TablePartition:
    """A partition field as the spec writes it (``day(ts)``, ``bucket(16, k)``, ``region``), in Iceberg's words."""
    name, _, rest = text.strip().partition("(")
    if not rest:
        return TablePartition(name.strip(), "identity")
    args = [a.strip() for a in rest.rstrip(") ").split(",")]
    if len(args) == 2:
        return TablePartition(args[1], f"{name.strip()}[{int(args[0])}]")
    return TablePartition(args[0], name.strip())


def _on_error(c: Checker, d: Section) -> str:
    """``sink.on_error``: dead_letter (the default) or fail."""
    value: str = c.text(d, "sink", "on_error", declared_default("sink", "on_error"))
    if value not in declared_words("sink", "on_error"):
        c.fail("sink.on_error", f"must be one of {', '.join(declared_words('sink', 'on_error'))}, got {value!r}")
    return value


def _routes(c: Checker, doc: object, source: SourceSpec, topic: str | None,
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
                          f"\"data.country = 'DE'\", got {describe(condition)}")
        else:
            checked.append((name, condition.strip()))
    return tuple(checked)


def read_transform(c: Checker, value: object, d: Section,
               folder: Path | None) -> tuple[str | None, str | None, str | None]:
    """``transform``: a Python target (``module.path:function``), or an SQL query given inline (``sql``) or in a
    file beside the spec (``sql_file``, read as the formats' schema files are). Returns what ``transform`` says
    (the target, or ``SQL (<where>)`` for people), the query (None for Python) and where the query came from."""
    if not isinstance(value, dict):
        target = c.text(d, "", "transform", pattern=TRANSFORM_RE,
                        rule='expected "module.path:function" or "module.path.function", or a section with sql or '
                             'sql_file')
        return (normalise_transform(target) if target else None), None, None
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
