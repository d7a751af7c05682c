"""The pipeline spec's shape, declared once: every section and field, its type, default, bounds or
words, and a line of docs.

`lockstep.spec`'s checker reads its allowed keys, defaults, integer bounds and enums from here, and
`lockstep spec schema` renders it as JSON Schema (docs/lockstep-spec.schema.json) for editors: adding
a field or changing a bound is one edit here. What needs more than one field (a pipeline must not feed
itself, one stateful operator, a schema a format requires, files read beside the spec, cron by
croniter) stays code in the checker, with its messages. Pure data.
"""

from __future__ import annotations

__all__ = [
    "spec_json_schema_text",
]

import json
from typing import Any

from lockstep.formats.names import FORMATS, TABLE_FORMATS
from lockstep.spec.fields import UNSET, Field, Section, json_schema

#: Patterns a whole value must match (Python's and ECMA's regular expressions alike).
NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,62}"
TOPIC_PATTERN = r"[A-Za-z0-9._-]{1,249}"
ID_PREFIX_PATTERN = r"[A-Za-z0-9._-]{1,200}"
TRANSFORM_PATTERN = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*|[A-Za-z_]\w*(\.[A-Za-z_]\w*)+"
BUCKET_PATTERN = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
STORE_PATTERN = rf"s3://{BUCKET_PATTERN}(/.*)?"
IDENTIFIER_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"
#: An Iceberg table's name in its catalog: ``namespace.table`` (namespaces may nest).
ICEBERG_TABLE_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+"
#: A partition field of ``sink.iceberg.partitioning``: a column, or an Iceberg transform of one.
PARTITION_FIELD_PATTERN = (r"\s*([A-Za-z_][A-Za-z0-9_]*|(identity|year|month|day|hour)\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)"
                           r"|(bucket|truncate)\(\s*[1-9][0-9]*\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\))\s*")
DEFAULT_ICEBERG_CONN_ID = "iceberg_default"
STATE_FIELD_PATTERN = r"(?!__)[A-Za-z_][A-Za-z0-9_]*"
EMAIL_PATTERN = r"[^@\s,;]+@[^@\s,;]+\.[^@\s,;]+"
TAG_PATTERN = r"[^\s,][^,]{0,99}"
REMOTE_PATTERN = r"sc://[^;]*"

SCHEDULE_PRESETS = frozenset(
    {"@once", "@continuous", "@hourly", "@daily", "@midnight", "@weekly",
     "@monthly", "@quarterly", "@yearly", "@annually"}
)
#: Producer settings Lockstep sets itself; overriding them would break fencing or the commit margin.
RESERVED_PRODUCER_KEYS = frozenset({"transactional.id", "enable.idempotence", "transaction.timeout.ms"})
COMPATIBILITY_LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
                        "FULL_TRANSITIVE", "NONE")
DEFAULT_REGISTRY_CONN_ID = "schema_registry_default"
WRITERS = ("jvm", "python")
SPARK_MODES = ("submit", "connect")
OFFSET_RESETS = ("earliest", "latest")
TOPIC_RECREATED_POLICIES = ("fail", "earliest", "latest")
#: ``sink.on_error``: what a record whose transform or route condition raises a Spark data error becomes.
ON_ERROR_POLICIES = ("dead_letter", "fail")
#: ``checkpoints.tasks``: a DAG run's tasks, plan -> run -> commit, or one ``checkpoint`` task doing all three.
CHECKPOINT_TASKS = ("three", "one")
DUPLICATE_ACTIONS = ("drop", "dead_letter")
#: How a table is joined into the input (docs/joins.md).
JOIN_KINDS = ("left", "inner")
INTERVAL_JOIN_KINDS = ("inner", "left", "right", "full")
MISSING_ACTIONS = ("drop", "dead_letter")
#: The table names that would shadow the query's own view.
RESERVED_TABLE_NAMES = ("input",)
#: Spark types a state function's declared fields may have (``simpleString`` spelling).
STATE_FIELD_TYPES = ("string", "boolean", "int", "bigint", "double", "float", "binary", "timestamp", "date",
                     "array<string>", "array<bigint>", "array<double>", "map<string,string>", "map<string,bigint>")
#: Key groups when the spec names none (Flink's default maximum parallelism).
DEFAULT_KEY_GROUPS = 128
#: What the stateful operators name their output's key field when ``key`` is an expression, not a column.
DEFAULT_KEY_NAME = "key"
#: A DAG's owner when the spec names none.
DEFAULT_OWNER = "lockstep"


def _section(doc: str, fields: dict[str, Field], required: bool = False) -> Field:
    """A nested section; an optional one may be null (as good as left out), a required one may not."""
    return Field("section", doc, section=Section(doc, fields), required=required, nullable=not required)


def _text(doc: str, default: object = UNSET, **kw: Any) -> Field:
    """A non-empty string. Without a default (and not required, nor defaulted from other fields) it is
    optional and may be null: the checker reads it as None."""
    nullable = default is UNSET and not kw.get("required") and not kw.get("default_doc")
    return Field("string", doc, default=default, nullable=nullable, **kw)


def _format(part: str, sink: bool) -> Field:
    """A source's or a sink's ``key`` / ``value``: a format's word, or a section (docs/formats.md)."""
    fields = {
        "format": Field("string", "How the bytes are framed and encoded.", default="bytes", enum=FORMATS),
        "schema": Field("string", "Avro or JSON Schema: a file beside the spec, or the schema inline; Protobuf: a "
                               "descriptor set file (protoc --include_imports --descriptor_set_out).", nullable=True,
                        alternatives=(Field("mapping", "the schema inline, as YAML"),)),
        "subject": _text("Registry formats: the subject; default <topic>-key or <topic>-value (topic name strategy)."),
        "message": _text("Protobuf formats: the message type, its full or short name; default the first message of "
                         "the schema's main file."),
    }
    if sink:
        fields["auto_register"] = Field("boolean", "Register the schema under the subject when it is not there "
                                                   "yet (after the registry's compatibility check).", default=False)
        fields["compatibility"] = _text("The compatibility level the plan sets on a subject it registers a "
                                        "schema under.", enum=COMPATIBILITY_LEVELS, any_case=True)
    role = "encoded from the transform's" if sink else "decoded for the transform as"
    column = "key_data" if part == "key" else "data"
    doc = f"How the records' {part}s are framed: {role} the {column} column; raw bytes by default."
    return Field("section", doc, section=Section(doc, fields), nullable=True, default="bytes",
                 alternatives=(Field("string", "the format alone", enum=FORMATS),))


def _duration(doc: str, default: object = UNSET, **kw: Any) -> Field:
    """A duration in the spec's one grammar (`lockstep.spec.fields.duration_pattern`)."""
    return Field("duration", doc, default=default, **kw)


_TOPIC: dict[str, Any] = {"pattern": TOPIC_PATTERN, "refused": (".", "..")}

SOURCE = _section("The Kafka topics read, and how.", {
    "topics": Field("list", "Source topics, read under read_committed.", required=True, min_items=1, unique=True,
                    items=Field("string", "A topic name.", **_TOPIC)),
    "kafka_conn_id": _text("The Airflow connection of the source's Kafka cluster.", "kafka_default"),
    "auto_offset_reset": _text("Where the first checkpoint starts when none is stored.", "earliest",
                               enum=OFFSET_RESETS),
    "consumer_group": _text("The consumer group whose committed offsets mirror the checkpoints (lag tools read it).",
                            default_doc="lockstep-<name>"),
    "on_topic_recreated": _text("What the plan does when a source topic was deleted and created again: fail, or "
                                "read the new topic from its start or its end.", "fail", enum=TOPIC_RECREATED_POLICIES),
    "key": _format("key", sink=False),
    "value": _format("value", sink=False),
    "registry_conn_id": _text("The Schema Registry connection of the registry formats.", DEFAULT_REGISTRY_CONN_ID),
}, required=True)

ICEBERG = _section("An Iceberg table the records written to topic also go to (or, without topic, go to alone), "
                   "exactly once: each checkpoint stages a snapshot on a branch of the table, and its commit "
                   "publishes it on main with the Kafka transactions (docs/iceberg.md).", {
    "table": _text("The table, namespace.name; created (namespace too) with the transform's output columns when "
                   "missing.", required=True, pattern=ICEBERG_TABLE_PATTERN),
    "catalog_conn_id": _text("The Airflow connection of the Iceberg REST catalog: its host the catalog's URI, its "
                             "extra the catalog client's properties (s3.endpoint, credentials).",
                             DEFAULT_ICEBERG_CONN_ID),
    "partitioning": Field("list", "The table's partition fields, in order, as Iceberg's transforms of the output's "
                          "columns: column, year(column), month(column), day(column), hour(column), bucket(N, column) "
                          "or truncate(N, column). A table Lockstep creates is partitioned so; a table that exists must "
                          "be partitioned so already. Unset: the table as it is (unpartitioned when Lockstep creates "
                          "it). Each data file holds one partition's rows of one source partition.", unique=True,
                          items=Field("string", "A partition field, such as day(ordered_at) or bucket(16, customer).",
                                      pattern=PARTITION_FIELD_PATTERN)),
})

SINK = _section("The Kafka topic written, in transactions committed with the checkpoint.", {
    "topic": _text("The output topic; not a source topic. Required unless sink.iceberg is set: without it the "
                   "records land in the table only, and the transactions carry the dead letters.", **_TOPIC),
    "dead_letter_topic": _text("Where records the transform rejects go, with the error and their origin; not the "
                               "output topic.", required=True, **_TOPIC),
    "kafka_conn_id": _text("The Airflow connection of the sink's Kafka cluster.", default_doc="source.kafka_conn_id"),
    "writer": _text("Which writer produces: jvm (in Spark's executors) or python (confluent-kafka, fed through "
                    "Arrow); same transactions either way.", "jvm", enum=WRITERS),
    "parallelism": Field("integer", "At most this many Spark tasks (so Kafka transactions) write a checkpoint's "
                                    "output; auto: the Spark cluster's default parallelism.", default="auto", low=1,
                         high=100_000, alternatives=(Field("string", "auto", enum=("auto",)),)),
    "key": _format("key", sink=True),
    "value": _format("value", sink=True),
    "registry_conn_id": _text("The Schema Registry connection of the registry formats.",
                              default_doc="source.registry_conn_id"),
    "routes": Field("mapping", "Topic -> a Spark SQL condition over the transform's output, in order: a record goes "
                               "to the first route whose condition holds, else to topic; all in the checkpoint's "
                               "transactions.", nullable=True, key_pattern=TOPIC_PATTERN,
                    items=Field("expression", "A Spark SQL condition (data.country = 'DE').")),
    "on_error": _text("A record for which the transform's expressions or a route's condition raise a Spark data "
                      "error (ANSI mode: a cast that fails, a division by zero, an overflow): dead_letter sends it to "
                      "dead_letter_topic with Spark's reason and writes the others; fail fails the checkpoint for "
                      "good, naming the expression.", "dead_letter", enum=ON_ERROR_POLICIES),
    "iceberg": ICEBERG,
}, required=True)

TRIGGER = _section("Lag-driven checkpoints instead of a schedule: start one when lag_records are unread, or "
                   "when some have waited max_wait (schedule must then be null).", {
    "lag_records": Field("integer", "Unread source records that start a checkpoint.", required=True, low=1),
    "max_wait": _duration("Start a checkpoint when unread records have waited this long since the last one "
                          "completed (whole seconds).", 3600, positive=True, unit_ms=1000),
    "poll_interval": _duration("How often the source's lag is looked at (whole seconds).", 5, positive=True,
                               unit_ms=1000),
    "min_interval": _duration("Start checkpoints at least this far apart, start to start (whole seconds; 0: as "
                              "soon as lag_records are unread). Like Flink's checkpoint interval: fewer checkpoints "
                              "cost less CPU, and records wait up to this long longer to be visible.", 0,
                              unit_ms=1000),
})

CHECKPOINTS = _section("Where checkpoints are stored, when they run, and how big they are.", {
    "store": _text("The checkpoint store: s3://bucket[/prefix]; the pipeline's files are under <prefix>/<name>.",
                   required=True, pattern=STORE_PATTERN),
    "aws_conn_id": _text("The Airflow connection of the S3 store.", "aws_default"),
    "schedule": Field("schedule", "A cron expression (5 fields, or 6 with seconds) or an Airflow preset such as "
                                  "@hourly; null: no schedule (manual runs, or checkpoints.trigger).",
                      nullable=True, default=None, enum=tuple(sorted(SCHEDULE_PRESETS))),
    "max_records": Field("integer", "The most source records (offsets) one checkpoint reads, shared out across "
                                    "partitions.", default=100_000, low=1),
    "retain": Field("integer", "Completed checkpoints kept; older ones are deleted (savepoints are kept).",
                    default=20, low=1),
    "skip_deleted_ranges": Field("boolean", "Accept the loss when retention deleted records not yet read: start at "
                                            "the log start, record the skipped offsets, warn.", default=False),
    "trigger": TRIGGER,
    "tasks": Field("string", "A DAG run's tasks: three (plan, run, commit: each step's log and retries apart) or one "
                             "(a single checkpoint task plans, runs and commits in one process: two task starts fewer "
                             "between a record and its commit, for checkpoints.trigger pipelines that want freshness).",
                   default="three", enum=CHECKPOINT_TASKS),
    "pipelined": Field("boolean", "A run that starts while another run's checkpoint is in flight plans the next "
                                  "checkpoint on top of it once it is prepared (from its ends, and its prepared state) "
                                  "instead of waiting for its commit; that checkpoint commits after it, or is aborted "
                                  "with it. False: wait for the checkpoint in flight to settle.", default=False),
}, required=True)

TRANSACTIONS = _section("The Kafka transactions of the writers.", {
    "id_prefix": _text("Transactional ids are <id_prefix>-<checkpoint>-<task>; recovery fences every id under it, so "
                       "no two pipelines' prefixes may overlap.", default_doc="the pipeline's name",
                       pattern=ID_PREFIX_PATTERN),
    "timeout_ms": Field("integer", "The transactions' timeout (transaction.timeout.ms): a checkpoint must commit "
                                   "within it.", default=900_000, low=1000, high=3_600_000),
    "commit_margin_ms": Field("integer", "The commit refuses, and the checkpoint is aborted and replayed, when less "
                                         "than this is left before the first transaction times out.", default=60_000,
                              low=0),
    "warn_time_left_percent": Field("integer", "A commit that begins with less than this share of timeout_ms left "
                                               "logs a warning.", default=25, low=0, high=99),
})

SPARK = _section("Where the Spark work runs.", {
    "master": _text("The Spark master for submit mode; null: the spark_default connection's."),
    "conf": Field("mapping", "Spark settings for the run (spark.speculation must stay off).", nullable=True,
                  items=Field("string", "A setting's value.", empty_ok=True, alternatives=(
                      Field("integer", "a number"), Field("boolean", "a switch")))),
    "mode": _text("submit (a spark-submit per checkpoint) or connect (a session on a Spark Connect server); null: "
                  "the spark_default connection decides.", enum=SPARK_MODES),
    "remote": _text("The Spark Connect endpoint (sc://HOST:PORT, no ;parameters) for connect mode.",
                    pattern=REMOTE_PATTERN),
})

EVENT_TIME = _section("Event time and its watermark, shared by the stateful operators.", {
    "column": Field("expression", "A Spark SQL expression over the transform's output: a TIMESTAMP or epoch "
                                  "seconds.", required=True),
    "out_of_orderness": _duration("How far behind the largest event time seen the watermark stays.", "0s"),
    "idle_timeout": _duration("A partition without records this long no longer holds the watermark back.", "5m",
                              positive=True),
    "idle_advance": Field("boolean", "Once every partition is idle, event time goes on with the claim's pinned "
                                     "clock, so due windows fire while the source is quiet.", default=False),
}, required=True)

WINDOW = _section("Event-time windows per key: tumbling, or sliding when slide is less than size.", {
    "key": Field("expression", "The key: a column or a Spark SQL expression over the transform's output.",
                 required=True),
    "key_name": _text("The output's key field.", default_doc="key when it is a column's name, else key",
                      pattern=IDENTIFIER_PATTERN),
    "size": _duration("The window's length.", positive=True, required=True),
    "slide": _duration("How far apart windows start; divides size.", positive=True, default_doc="size"),
    "allowed_lateness": _duration("How long after its end a window still takes late records.", "0s"),
    "aggregates": Field("mapping", "Output field -> Spark SQL aggregate (count(*), sum(amount)), in order.",
                        required=True, min_items=1, key_pattern=IDENTIFIER_PATTERN,
                        refused_keys=("window_start", "window_end"),
                        items=Field("expression", "A Spark SQL aggregate.")),
    "keep_rows": Field("boolean", "Keep the open windows' rows even when every aggregate is a count, sum, min or "
                                  "max (which the state otherwise keeps as one partial per key and window), so the "
                                  "aggregates may change while windows are open.", default=False),
})

DEDUP = _section("Drop (or dead-letter) a record within ttl of event time of a passed record of its key.", {
    "key": Field("expression", "The key: a column or a Spark SQL expression.", required=True),
    "ttl": _duration("How long, in event time, a key's first record is remembered.", positive=True, required=True),
    "duplicates": _text("What happens to a duplicate: drop, or dead_letter (error duplicate).", "drop",
                        enum=DUPLICATE_ACTIONS),
})

FUNCTION = _section("A Python function per key, with its declared state and timers (docs/state.md).", {
    "key": Field("expression", "The key: a column or a Spark SQL expression.", required=True),
    "process": _text("module:function called with (key, records, state, ctx).", required=True,
                     pattern=TRANSFORM_PATTERN),
    "state": Field("mapping", "The state's fields and their Spark types, in order.", required=True, min_items=1,
                   key_pattern=STATE_FIELD_PATTERN,
                   items=Field("string", "A Spark type.", enum=STATE_FIELD_TYPES, spaces_ok=True)),
    "version": Field("integer", "The state's schema version; raise it when the fields change.", default=1, low=1),
    "migrate": _text("module:function turning a state of an earlier version into this one.",
                     pattern=TRANSFORM_PATTERN),
    "ttl": _duration("A key whose last record is older than the watermark by this much loses its state.",
                     positive=True, nullable=True, default_doc="none"),
})

INTERVAL_JOIN = _section("Two source topics joined on a key within an event-time interval (docs/joins.md).", {
    "key": Field("expression", "The join key: a column or a Spark SQL expression over the transform's output.",
                 required=True),
    "left": _text("The left side's source topic.", required=True, **_TOPIC),
    "right": _text("The right side's source topic.", required=True, **_TOPIC),
    "after": _duration("A right record meets a left one at most this long after it.", "0s"),
    "before": _duration("A right record meets a left one at most this long before it.", "0s"),
    "how": _text("inner: pairs only; left, right, full: also each record of that side (both) that met no "
                 "partner, once the watermark passes its interval.", "inner", enum=INTERVAL_JOIN_KINDS),
})

COMPACTION = _section("When a key group's chain of delta files is merged into a new base.", {
    "max_deltas": Field("integer", "Compact when the chain would hold more deltas than this.", default=16, low=0,
                        high=1000),
    "max_delta_ratio": Field("number", "Compact when the deltas' bytes would pass this multiple of the base's.",
                             default=1.0, low=0, low_exclusive=True, high=1000),
})

STATE = _section("The keyed state of a stateful pipeline: one operator (window, dedup, function or interval_join), "
                 "its event time and its key groups.", {
    "key_groups": Field("integer", "Keys are hashed into this many groups, fixed once state exists (lockstep state "
                                   "rekey changes it).", default=DEFAULT_KEY_GROUPS, low=1, high=32_768),
    "event_time": EVENT_TIME,
    "window": WINDOW,
    "dedup": DEDUP,
    "function": FUNCTION,
    "interval_join": INTERVAL_JOIN,
    "compaction": COMPACTION,
})

ALERTS = _section("Whom a failed checkpoint notifies, once per failure streak.", {
    "webhook_conn_id": _text("An http connection: a JSON POST whose text a chat's incoming webhook shows."),
    "email": Field("list", "E-mail addresses (one, or a list), sent through smtp_conn_id.", nullable=True,
                   items=Field("string", "An address.", pattern=EMAIL_PATTERN),
                   alternatives=(Field("string", "one address", pattern=EMAIL_PATTERN),)),
    "smtp_conn_id": _text("The SMTP connection e-mails go through.", "smtp_default"),
})

def _table_format(part: str) -> Field:
    """A table's ``key`` / ``value``: a format's word, or a section, as a source's (without the registry)."""
    declared = _format(part, sink=False)
    assert declared.section is not None
    fields = dict(declared.section.fields)
    fields["format"] = Field("string", "How the bytes are encoded.", default="string" if part == "key" else "bytes",
                             enum=TABLE_FORMATS)
    fields.pop("subject")
    fields.pop("message")
    doc = (f"How the table topic's {part}s are encoded: the view's {'key' if part == 'key' else 'data'} column; "
           f"{'a string' if part == 'key' else 'raw bytes (value)'} by default.")
    return Field("section", doc, section=Section(doc, fields), nullable=True,
                 default="string" if part == "key" else "bytes",
                 alternatives=(Field("string", "the format alone", enum=TABLE_FORMATS),))


JOIN = _section("Join the table into every input record before the transform: the record gets a column named "
                "after the table (a struct of the table's row, null without one).", {
    "by": Field("expression", "A Spark SQL expression over the input (decoded: data.customer_id) equal to the "
                              "table's key (not on: YAML reads that key as true).", required=True),
    "how": _text("left: every record, with null when its key has no row; inner: only records with a row.", "left",
                 enum=JOIN_KINDS),
    "missing": _text("An inner join's records without a row: drop them, or dead_letter them (error: no row).",
                     "drop", enum=MISSING_ACTIONS),
    "as_of": Field("expression", "An event-time (temporal) join: the record's event time, a Spark SQL expression "
                                 "over the input (a TIMESTAMP or epoch seconds); each record meets the value its key "
                                 "had then (by the table records' timestamps). Needs versions.", nullable=True),
})

TABLE = Field("section", "A table: the latest value per key of a (compacted) topic, as of each checkpoint's pinned "
                         "offsets; a view of its name in SQL transforms.", section=Section(
    "A table: the latest value per key of a (compacted) topic.", {
        "topic": _text("The table's topic (compacted, usually): a record sets its key's row, a null value deletes "
                       "it.", required=True, **_TOPIC),
        "key": _table_format("key"),
        "value": _table_format("value"),
        "versions": _duration("Keep each key's earlier values this long behind the table's newest record (by the "
                              "records' timestamps), for joins as_of an event time.", positive=True, nullable=True,
                              default_doc="none: the latest value only"),
        "join": JOIN,
        "on_error": _text("A record of the table's topic whose key or value does not decode: dead_letter sends it "
                          "to the pipeline's dead-letter topic as it came, with the reason, and its key keeps the row "
                          "it had; fail fails the checkpoint for good, naming the record.", "dead_letter",
                          enum=ON_ERROR_POLICIES),
    }))

#: ``transform``'s SQL form: one query over the view ``input`` (docs/formats.md, "SQL transforms"); the checker
#: takes exactly one of its two keys.
TRANSFORM_SQL = _section("An SQL query over the view input (the records read, decoded), run by Spark in the "
                         "checkpoint's session; it keeps the columns topic, partition and offset (SELECT *, ...).", {
    "sql": _text("The query itself (Spark SQL, one SELECT; not with sql_file)."),
    "sql_file": _text("A file beside the spec holding the query (not with sql)."),
})

#: The whole spec: one YAML file per pipeline (include/pipelines/*.yaml).
SPEC = Section("A Lockstep pipeline: Kafka -> transform (Spark) -> Kafka, exactly once, in checkpoints stored on S3.", {
    "name": _text("The pipeline's name; its DAG is lockstep_<name>.", required=True, pattern=NAME_PATTERN),
    "description": Field("string", "What the pipeline does (the DAG's description).", nullable=True, default="",
                         empty_ok=True),
    "source": SOURCE,
    "transform": Field("string", "The transform: module.path:function (or module.path.function), given the source's "
                                 "DataFrame; or an SQL query over the view input (sql, or sql_file).", required=True,
                       pattern=TRANSFORM_PATTERN, alternatives=(TRANSFORM_SQL,)),
    "sink": SINK,
    "checkpoints": CHECKPOINTS,
    "transactions": TRANSACTIONS,
    "spark": SPARK,
    "producer": Field("mapping", "Settings of the writers' Kafka producers (not the transactional ones Lockstep "
                                 "sets: use transactions.*).", nullable=True,
                      refused_keys=tuple(sorted(RESERVED_PRODUCER_KEYS))),
    "state": STATE,
    "owner": _text("Who runs the pipeline: its DAG's owner in Airflow.", DEFAULT_OWNER),
    "tags": Field("list", "Tags added to the DAG's own (lockstep, source, sink).", nullable=True,
                  items=Field("string", "A tag: 1 to 100 characters, no commas.", pattern=TAG_PATTERN)),
    "alerts": ALERTS,
    "tables": Field("mapping", "Tables by name (docs/joins.md): each the latest value per key of a topic, pinned "
                               "per checkpoint.", nullable=True, key_pattern=IDENTIFIER_PATTERN,
                    refused_keys=RESERVED_TABLE_NAMES, items=TABLE),
})


def spec_json_schema() -> dict[str, Any]:
    """The spec's JSON Schema (draft 2020-12), rendered from `SPEC`: what `lockstep spec schema` prints."""
    return json_schema(SPEC, "Lockstep pipeline spec")


def spec_json_schema_text() -> str:
    """The schema as the file docs/lockstep-spec.schema.json holds it (a test keeps the two equal)."""
    return json.dumps(spec_json_schema(), indent=2, ensure_ascii=False) + "\n"
