"""What a checkpoint's output looks like, defined once for both writers.

Lockstep has two writers — the Python one (`lockstep.spark.python_writer`, driven by `lockstep.spark.job`)
and the JVM one (`jvm/jvm-writer`) — and they must be indistinguishable downstream: the same
headers in the same order, the same columns accepted from the transform, the same records
dead-lettered for their size, the same committable, the same failpoint behaviour. Everything they
must agree on lives here. The Python writer reads these names; the JVM writer receives them in its
settings (`jvm_contract`, sent by `jvm_writer.write_with_jvm`) and hard-codes none of them, so the two
cannot drift apart without a test noticing (tests/unit/test_output_contract.py,
tests/integration/test_writers.py).

Nothing of the rest of Lockstep is imported here but its errors: everything may import this module.
"""
from __future__ import annotations

__all__ = [
    "ACCEPTED_TYPES", "CHECKPOINT_HEADER", "DEFAULT_PRODUCER_LIMIT", "ERROR_HEADER", "LEADING_HEADERS",
    "MID_PRODUCE_AFTER_RECORDS", "OPTIONAL_COLUMNS", "ORIGINAL_SIZE_HEADER", "PIPELINE_HEADER", "REPLAY_HEADER",
    "REQUIRED_COLUMNS", "ROUTE_COLUMN", "SOURCE_OFFSET", "SOURCE_PARTITION", "SOURCE_TOPIC", "WRITER_FAILPOINTS",
    "jvm_contract", "mid_produce_message", "parse_task_result", "record_size", "sink_record_size", "sink_record_sizes",
    "task_result",
    "too_large",
]

import json
from collections.abc import Mapping
from typing import Any

from lockstep.errors import TerminalError

# ---- headers -------------------------------------------------------------------------------------
#: Provenance headers on every output record: where the input record came from (UTF-8 text).
SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET = "lockstep.source.topic", "lockstep.source.partition", "lockstep.source.offset"
#: The id of the checkpoint that wrote the record.
CHECKPOINT_HEADER = "lockstep.checkpoint"
#: The name of the pipeline that wrote the record, so pipelines that read the same source topics and
#: share a sink topic can each audit their own output (records of earlier versions lack it).
PIPELINE_HEADER = "lockstep.pipeline"
#: On a dead letter: ``str(error)`` of the transform's `error` column, or why the record was too large.
ERROR_HEADER = "lockstep.error"
#: On a dead letter whose key, value and user headers were dropped to fit: the estimated size of the record.
ORIGINAL_SIZE_HEADER = "lockstep.original.size"
#: On an output of a dead-letter replay (`lockstep.spark.dead_letter_replay`): the replay checkpoint that wrote it. Its
#: provenance headers name the ORIGINAL input record, its `lockstep.checkpoint` the replay checkpoint.
#: Written by the replay's transform as a user header, not by the writers.
REPLAY_HEADER = "lockstep.replay"
#: Lockstep's headers at the head of every record either writer produces, in this order. The
#: transform's own headers follow; a dead letter ends with `ERROR_HEADER`; a dead letter too large
#: for its topic keeps only these, then `ERROR_HEADER` and `ORIGINAL_SIZE_HEADER`.
LEADING_HEADERS = (SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET, CHECKPOINT_HEADER, PIPELINE_HEADER)

# ---- the transform's output columns ----------------------------------------------------------------
#: The topic a record goes to when the spec has ``sink.routes``: set by Lockstep after the transform
#: (`lockstep.transform.route`), never by the transform itself; null: ``sink.topic``. A dead letter goes
#: to the dead-letter topic whatever it holds.
ROUTE_COLUMN = "_lockstep_route"
REQUIRED_COLUMNS = ("value", "topic", "partition", "offset")
OPTIONAL_COLUMNS = ("key", "headers", "error", ROUTE_COLUMN)
#: Spark types (``DataType.simpleString()``) each writer can turn into a Kafka record field.
ACCEPTED_TYPES: Mapping[str, tuple[str, ...]] = {
    "value": ("binary", "string"), "key": ("binary", "string"), "topic": ("string",),
    "partition": ("int", "bigint"), "offset": ("bigint", "int"),
    "headers": ("array<struct<key:string,value:binary>>",), "error": ("string",), ROUTE_COLUMN: ("string",),
}

# ---- record size ---------------------------------------------------------------------------------
#: The producer-side limit when the spec's `producer:` sets neither `max.request.size` (Java client) nor
#: `message.max.bytes` (librdkafka): the smaller of the two clients' defaults, so both writers agree.
DEFAULT_PRODUCER_LIMIT = 1_000_000
# A conservative estimate of what a record weighs on the wire, in a batch of its own (record batch v2):
# the batch header, the record's framing with every varint at its widest, each header's two length
# varints, and LZ4's worst-case growth of incompressible bytes. Both writers compute exactly this
# (`record_size`, `PartitionTransaction.recordSize` with these numbers), so they dead-letter the same records.
BATCH_OVERHEAD, RECORD_OVERHEAD, HEADER_OVERHEAD, COMPRESSION_SLACK = 61, 36, 10, 64
#: The `ERROR_HEADER` reason of a record dropped for its size (``str.format`` fields; the JVM writer
#: substitutes the same ``{name}`` fields).
TOO_LARGE_REASON = ("record of {size} bytes exceeds the {where}'s limit of {limit} bytes ({source}); "
                    "key, value and headers dropped")


def record_size(key_bytes: int, value_bytes: int, header_bytes: int, headers: int) -> int:
    """Estimated bytes of one record: ``header_bytes`` is the sum of the header names' UTF-8 lengths
    and the header values' lengths, ``headers`` how many there are."""
    body = key_bytes + value_bytes + header_bytes
    return BATCH_OVERHEAD + RECORD_OVERHEAD + HEADER_OVERHEAD * headers + body + body // 255 + COMPRESSION_SLACK


def sink_record_size(key_bytes: int, value_bytes: int, topic: str, partition: int, offset: int, checkpoint_id: int,
                     pipeline: str, user_headers: list[tuple[str, bytes | None]] | None = None) -> int:
    """`record_size` of an output record as the writers write it to its sink topic: Lockstep's `LEADING_HEADERS`
    (the source's topic, partition and offset as text, the checkpoint, the pipeline), then the transform's own.
    What a reader of the output computes to find the records the writers dead-lettered for their size (the
    Iceberg sink's rows are the records the sink topic got)."""
    users = user_headers or []
    return int(sink_record_sizes(key_bytes, value_bytes, len(topic.encode()), len(str(partition)),
                                 len(str(offset)), checkpoint_id, pipeline,
                                 sum(len(k.encode()) + len(v or b"") for k, v in users), len(users)))


def sink_record_sizes(key_bytes: Any, value_bytes: Any, topic_bytes: Any, partition_digits: Any, offset_digits: Any,
                      checkpoint_id: int, pipeline: str, user_header_bytes: Any, user_headers: Any) -> Any:
    """`sink_record_size` from lengths: every argument but the checkpoint and the pipeline an int or, for a batch
    of records at once, a numpy array of them (the Iceberg sink's tasks leave out what the writers dead-lettered
    for its size). ``user_header_bytes``: the transform's headers' names' UTF-8 lengths and values' lengths."""
    header_bytes = (len(SOURCE_TOPIC) + len(SOURCE_PARTITION) + len(SOURCE_OFFSET) + len(CHECKPOINT_HEADER)
                    + len(str(checkpoint_id)) + len(PIPELINE_HEADER) + len(pipeline.encode())
                    + topic_bytes + partition_digits + offset_digits + user_header_bytes)
    return record_size(key_bytes, value_bytes, header_bytes, len(LEADING_HEADERS) + user_headers)


def too_large(size: int, limit: int, where: str, source: str) -> str:
    """The `ERROR_HEADER` reason of a record dropped for its size (same text in both writers)."""
    return TOO_LARGE_REASON.format(size=size, where=where, limit=limit, source=source)


# ---- the committable -------------------------------------------------------------------------------
#: What a Spark task hands back for its open transaction: enough for another process to commit it.
COMMITTABLE_SCHEMA = "lockstep.committable/1"
#: Its fields after ``schema``, in the order both writers emit them.
#: ``partitions`` are the sink partitions the transaction wrote to, ``sources`` the source partitions
#: its records came from (what a repair re-reads when the transaction is lost), both as
#: ``topic:partition`` keys.
COMMITTABLE_FIELDS = ("transactional_id", "producer_id", "epoch", "partitions", "records", "dead_letters",
                      "task_index", "opened_at_ms", "sources")


_STALE_WRITER = "; was the JVM writer jar built from these sources (`make setup` rebuilds it)?"


class CommittableError(TerminalError):
    """A writer emitted a committable that is not the contract's: a bug in that writer (or a JVM writer
    jar built from other sources than the driver's: `make setup` rebuilds it), never worth a retry."""


def committable_doc(**fields: object) -> dict[str, object]:
    """The committable as JSON, built from exactly `COMMITTABLE_FIELDS` (`PreparedTransaction.to_json`)."""
    _check_fields(fields, "committable_doc")
    return {"schema": COMMITTABLE_SCHEMA, **{name: fields[name] for name in COMMITTABLE_FIELDS}}


def parse_task_result(line: str) -> tuple[int, int, dict[str, object] | None]:
    """One writer task's result, ``{"task", "rows", "committable"}`` as JSON (both writers emit this),
    parsed once: (task, rows, the committable document or None when the task wrote nothing).

    The committable must be exactly the contract's — its schema id and its fields, no more, no fewer —
    so a writer that drifts fails the run here instead of writing a committable others misread."""
    result = json.loads(line)
    committable = result["committable"]
    if committable is not None:
        if committable.get("schema") != COMMITTABLE_SCHEMA:
            raise CommittableError(f"task {result['task']}: committable schema is {committable.get('schema')!r}, "
                                   f"expected {COMMITTABLE_SCHEMA!r}{_STALE_WRITER}")
        _check_fields({k: v for k, v in committable.items() if k != "schema"}, f"task {result['task']}",
                      _STALE_WRITER)
    return int(result["task"]), int(result["rows"]), committable


def task_result(task: int, rows: int, committable: Mapping[str, object] | None) -> str:
    """The Python writer's side of `parse_task_result` (the JVM writer builds the same document)."""
    return json.dumps({"task": task, "rows": rows, "committable": committable})


def _check_fields(fields: Mapping[str, object], where: str, hint: str = "") -> None:
    missing = [f for f in COMMITTABLE_FIELDS if f not in fields]
    extra = sorted(set(fields) - set(COMMITTABLE_FIELDS))
    if missing or extra:
        raise CommittableError(f"{where}: committable fields differ from the contract's {list(COMMITTABLE_FIELDS)}: "
                               f"missing {missing}, unexpected {extra}{hint}")


# ---- failpoints ------------------------------------------------------------------------------------
#: `job.mid_produce` fires in a Spark task once the task has handed exactly this many records to its
#: producer and before it hands over the next one (each input row is one record: to the sink or the
#: dead-letter topic). A task with no more rows than this never reaches it. Both writers count the
#: same way, whatever Arrow batches or JVM iterators carry the rows.
MID_PRODUCE_AFTER_RECORDS = 1

#: The failpoints the writers hit in each Spark task (`lockstep.model.failpoints` lists them with the others).
WRITER_FAILPOINTS: Mapping[str, str] = {
    "job.before_produce": "Spark task: transaction opened, nothing produced yet",
    "job.mid_produce": f"Spark task: exactly {MID_PRODUCE_AFTER_RECORDS} of the task's records produced, the "
                       "next one not yet (a task with no more records never reaches it)",
    "job.after_flush": "Spark task: transaction flushed (pre-committed), committable not yet returned",
}


def mid_produce_message(task: int, produced: int) -> str:
    """Where `job.mid_produce` fired, appended to its message; the JVM writer writes the same words."""
    return f" (task {task}, after {produced} records)"


# ---- for the JVM writer ----------------------------------------------------------------------------
def jvm_contract() -> dict[str, object]:
    """The contract as the JVM writer receives it, inside its settings (``"contract"``)."""
    return {
        "headers": {"source_topic": SOURCE_TOPIC, "source_partition": SOURCE_PARTITION,
                    "source_offset": SOURCE_OFFSET, "checkpoint": CHECKPOINT_HEADER, "pipeline": PIPELINE_HEADER,
                    "error": ERROR_HEADER, "original_size": ORIGINAL_SIZE_HEADER},
        "leading_headers": list(LEADING_HEADERS),
        "required_columns": list(REQUIRED_COLUMNS),
        "optional_columns": list(OPTIONAL_COLUMNS),
        "route_column": ROUTE_COLUMN,
        "accepted_types": {name: list(types) for name, types in ACCEPTED_TYPES.items()},
        "record_size": {"batch_overhead": BATCH_OVERHEAD, "record_overhead": RECORD_OVERHEAD,
                        "header_overhead": HEADER_OVERHEAD, "compression_slack": COMPRESSION_SLACK},
        "too_large_reason": TOO_LARGE_REASON,
        "committable_schema": COMMITTABLE_SCHEMA,
        "mid_produce_after_records": MID_PRODUCE_AFTER_RECORDS,
    }
