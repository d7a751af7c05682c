"""The bounded Spark run of one checkpoint: read the claimed ranges, transform, pre-commit.

Runs in the spark-submit driver (entry point ``jobs/lockstep_checkpoint.py``) or, in connect
mode, in the run step's own process with a session on a Spark Connect server
(`lockstep.steps.run.run_connect_job`): the same code either way. Each
Spark task writes its rows inside one Kafka transaction that is flushed and left
open (``TransactionalWriter.prepare``); the driver gathers the committables and
writes the prepared checkpoint to S3. From that object on, the decision is
"commit" — the commit task, another process, carries it out.

No Airflow import here: the job runs wherever spark-submit or the run step runs it.
"""
from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator

from lockstep.connections import kafka_config
from lockstep.errors import CheckpointError, TerminalError
from lockstep.kafka.client_configs import CONFLUENT, JAVA
from lockstep.model import failpoints
from lockstep.model.checkpoint import CheckpointStatus, PlannedWith, PreparedCheckpoint, PreparedTransaction
from lockstep.model.offsets import OffsetRange, spark_offsets
from lockstep.model.output_contract import (
    ACCEPTED_TYPES,
    CHECKPOINT_HEADER,
    DEFAULT_PRODUCER_LIMIT,
    ERROR_HEADER,
    MID_PRODUCE_AFTER_RECORDS,
    OPTIONAL_COLUMNS,
    ORIGINAL_SIZE_HEADER,
    REQUIRED_COLUMNS,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
    jvm_contract,
    mid_produce_message,
    parse_task_result,
    record_size,
    task_result,
    too_large,
)
from lockstep.model.transactional_ids import transactional_id, transactional_id_pattern
from lockstep.rules.pinned import Resolved, Step, refusal, resolve_pinned
from lockstep.spark.python_writer import THROUGHPUT_PRODUCER_CONFIG
from lockstep.spec import PipelineSpec
from lockstep.transform import load_transform, ship_to_executors

log = logging.getLogger(__name__)

#: What each Python writer task returns: its result document (`output_contract.task_result`).
RESULT_SCHEMA = "result string"


@dataclass(frozen=True)
class WriterSettings:
    """What each Spark task needs to write its transaction; pickled to the executors."""

    bootstrap: str
    producer_config: dict[str, Any] = field(repr=False)  # may hold credentials
    id_prefix: str
    checkpoint_id: int
    timeout_ms: int
    sink_topic: str
    dead_letter_topic: str
    #: The largest record (estimated by `record_size`) each topic takes, and where that limit comes from.
    sink_max_bytes: int = DEFAULT_PRODUCER_LIMIT
    sink_limit: str = "the producer's default"
    dead_letter_max_bytes: int = DEFAULT_PRODUCER_LIMIT
    dead_letter_limit: str = "the producer's default"
    #: The writer failpoints (``job.*``) armed where the job is driven, handed to both writers' tasks:
    #: a Spark Connect server's workers do not share the driving process's environment.
    failpoints: dict[str, str] = field(default_factory=dict)


def producer_limit(producer: dict[str, Any]) -> tuple[int, str]:
    for name in ("max.request.size", "message.max.bytes"):
        if name in producer:
            return int(producer[name]), f"the producer's {name}"
    return DEFAULT_PRODUCER_LIMIT, "the producer's default"


def topic_limits(conn_id: str, topics: tuple[str, ...], admin: Any = None) -> dict[str, int]:
    """Each topic's ``max.message.bytes``, read once on the driver with the admin API.

    A topic whose config cannot be read (no DescribeConfigs permission, say) is left out with a
    warning: its records are then checked against the producer's limit only."""
    from lockstep.kafka.topics import with_retries

    if admin is None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(kafka_config(conn_id, CONFLUENT))
    from confluent_kafka.admin import ConfigResource

    limits = {}
    for topic in dict.fromkeys(topics):
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            entries = with_retries(f"reading the config of topic {topic}",
                                    lambda: admin.describe_configs([resource])[resource].result(timeout=30))
            limits[topic] = int(entries["max.message.bytes"].value)
        except Exception as exc:  # noqa: BLE001 - the run can go on with the producer's limit
            log.warning("could not read max.message.bytes of topic %s (%s); its records are checked against the "
                        "producer's limit only, so one larger than the topic takes would fail the task", topic, exc)
    return limits


def read_ranges(spark: Any, kafka: dict[str, Any], ranges: tuple[OffsetRange, ...], headers: bool = False) -> Any:
    """Exactly the planned ``[start, end)`` of each partition, committed records only.

    ``kafka`` is the source connection in the Java dialect (``kafka_config(conn_id, JAVA)``):
    Spark's Kafka source is a kafka-clients consumer."""
    starting, ending = spark_offsets(ranges)
    assign: dict[str, list[int]] = {}
    for r in ranges:
        assign.setdefault(r.topic, []).append(r.partition)
    from lockstep.spark.conf import KAFKA_READ_OPTIONS

    reader = spark.read.format("kafka")
    for key, value in {**KAFKA_READ_OPTIONS, **{f"kafka.{k}": str(v) for k, v in kafka.items()}}.items():
        reader = reader.option(key, value)
    return (
        reader.option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", str(headers).lower())
        .load()
    )


def check_output_schema(spec: PipelineSpec, fields: dict[str, str]) -> tuple[str, ...]:
    """The columns the writer reads from the transform's output, checked before any task starts.

    ``fields`` maps column name -> Spark type (``simpleString``). Returns the columns to select.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in fields]
    if missing:
        raise TerminalError(
            f"{spec.path}: transform {spec.transform} returned columns {list(fields)}, missing {missing}. "
            "The output needs `value` and must keep the input's `topic`, `partition`, `offset` columns "
            "(they become provenance headers); withColumn/filter-style transforms keep them."
        )
    columns = REQUIRED_COLUMNS + tuple(c for c in OPTIONAL_COLUMNS if c in fields)
    wrong = [f"`{c}` is {fields[c]} (expected {' or '.join(ACCEPTED_TYPES[c])})"
             for c in columns if fields[c] not in ACCEPTED_TYPES[c]]
    if wrong:
        raise TerminalError(
            f"{spec.path}: transform {spec.transform} returned columns of the wrong type: {'; '.join(wrong)}. "
            "Cast them (for example `F.col('error').cast('string')`)."
        )
    return columns


def write_partition(settings: WriterSettings, batches: Iterator[Any]) -> Iterator[Any]:
    """Runs in a Spark task: produce this partition's rows in one transaction, pre-commit it."""
    import pyarrow as pa
    from pyspark import TaskContext

    from lockstep.spark.python_writer import TransactionalWriter

    task = TaskContext.get().partitionId()
    writer = TransactionalWriter(
        settings.bootstrap, transactional_id(settings.id_prefix, settings.checkpoint_id, task), task_index=task,
        transaction_timeout_ms=settings.timeout_ms, extra_config=settings.producer_config,
    )
    writer.open()  # init_transactions fences any earlier attempt of this task, even an empty one
    failpoints.hit("job.before_produce", armed_here=settings.failpoints)
    rows = 0
    for batch in batches:
        rows += _produce_batch(writer, settings, batch, produced=rows, task=task)
    prepared = writer.prepare()
    failpoints.hit("job.after_flush", armed_here=settings.failpoints)
    result = task_result(task, rows, prepared.to_json() if prepared is not None else None)
    yield pa.RecordBatch.from_pydict({"result": [result]}, schema=pa.schema([("result", pa.string())]))


def _produce_batch(writer: Any, settings: WriterSettings, batch: Any, produced: int, task: int) -> int:
    """Produce one Arrow batch. Runs once per record, so the work is done per column where it can be:
    header values are formatted by Arrow (integers cast to their decimal bytes in C), each column is
    converted to Python once, and the per-record loop only builds the header list and calls produce.
    ``produced`` is how many records the task produced before this batch (for `job.mid_produce`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    if n == 0:
        return 0
    names = batch.schema.names

    def column(name: str) -> Any:
        return batch.column(names.index(name)) if name in names else None

    def as_bytes(col: Any) -> list:
        return pc.cast(pc.cast(col, pa.string()), pa.binary()).to_pylist()

    values = column("value").to_pylist()
    value_sizes = pc.binary_length(column("value")).fill_null(0).to_pylist()
    key_sizes = pc.binary_length(column("key")).fill_null(0).to_pylist() if "key" in names else None
    topics = column("topic").to_pylist()
    partitions, offsets = as_bytes(column("partition")), as_bytes(column("offset"))
    keys = column("key").to_pylist() if "key" in names else None
    user_headers = column("headers").to_pylist() if "headers" in names else None
    errors = column("error").to_pylist() if "error" in names else None
    if errors is not None and column("error").null_count == n:
        errors = None
    if user_headers is not None and column("headers").null_count == n:
        user_headers = None
    checkpoint = (CHECKPOINT_HEADER, str(settings.checkpoint_id).encode())
    topic_headers: dict[str, tuple[str, bytes]] = {}
    produce, sink = writer.produce, settings.sink_topic
    # job.mid_produce: before the record that follows the task's first MID_PRODUCE_AFTER_RECORDS ones.
    mid = MID_PRODUCE_AFTER_RECORDS - produced
    sink_max, dead_letter_max = settings.sink_max_bytes, settings.dead_letter_max_bytes
    base_header_bytes = len(SOURCE_TOPIC) + len(SOURCE_PARTITION) + len(SOURCE_OFFSET) + len(CHECKPOINT_HEADER) \
        + len(checkpoint[1])
    error_header_bytes = len(ERROR_HEADER)
    for i in range(n):
        if i == mid:
            failpoints.hit("job.mid_produce", mid_produce_message(task, produced + i), armed_here=settings.failpoints)
        topic = topics[i]
        topic_header = topic_headers.get(topic)
        if topic_header is None:
            topic_header = topic_headers[topic] = (SOURCE_TOPIC, topic.encode())
        headers = [topic_header, (SOURCE_PARTITION, partitions[i]), (SOURCE_OFFSET, offsets[i]), checkpoint]
        header_bytes = base_header_bytes + len(topic_header[1]) + len(partitions[i]) + len(offsets[i])
        if user_headers is not None and user_headers[i]:
            for h in user_headers[i]:
                headers.append((h["key"], h["value"]))
                header_bytes += len(h["key"].encode()) + len(h["value"] or b"")
        error = errors[i] if errors is not None else None
        key_size = key_sizes[i] if key_sizes is not None else 0
        reason = None
        if error is None:
            size = record_size(key_size, value_sizes[i], header_bytes, len(headers))
            if size <= sink_max:
                produce(sink, values[i], key=keys[i] if keys is not None else None, headers=headers)
            else:
                reason = too_large(size, sink_max, "sink", settings.sink_limit)
        else:
            error = str(error).encode()
            size = record_size(key_size, value_sizes[i], header_bytes + error_header_bytes + len(error),
                               len(headers) + 1)
            if size <= dead_letter_max:
                headers.append((ERROR_HEADER, error))
                produce(settings.dead_letter_topic, values[i], key=keys[i] if keys is not None else None,
                        headers=headers, dead_letter=True)
            else:
                reason = error.decode() + "; " + too_large(size, dead_letter_max, "dead-letter topic",
                                                           settings.dead_letter_limit)
        if reason is not None:
            # Too large for its topic: a dead letter of Lockstep's headers only, with the reason and the size.
            produce(settings.dead_letter_topic, b"", key=None, dead_letter=True,
                    headers=headers[:4] + [(ERROR_HEADER, reason.encode()), (ORIGINAL_SIZE_HEADER, str(size).encode())])
    return n


def write_with_python(spark: Any, out: Any, settings: WriterSettings) -> list[str]:
    """Rows cross to a Python worker through Arrow; confluent-kafka produces them there. Returns each
    task's result document (`output_contract.parse_task_result` reads it)."""
    return [r["result"] for r in out.mapInArrow(lambda it: write_partition(settings, it), RESULT_SCHEMA).collect()]


#: The data source of Lockstep's JVM writer (``dev.lockstep.spark.LockstepKafkaSource``) and its options.
JVM_SINK_FORMAT = "lockstep-kafka"
#: The settings carry the producer config, SASL credentials included, so they are not an option of the
#: write: under Spark Connect the request's text, options included, becomes the jobs' description and
#: the operation's statement text, unredacted, in the event log. They go in the session's conf for the
#: write instead, under a key that is redacted where Spark lists session confs (it says ``secret``) and
#: is not ``spark.*`` (those are copied into every job's properties, which the event log does not redact).
JVM_SETTINGS_CONF_PREFIX = "dev.lockstep.spark.secret_settings."
JVM_WRITE_ID_OPTION = "write_id"


def jvm_settings(settings: WriterSettings) -> dict[str, Any]:
    """The JVM writer's settings document (``TransactionalKafkaWriter.WriterSettings`` parses it)."""
    return {
        "bootstrap": settings.bootstrap,
        "producer_config": {k: str(v).lower() if isinstance(v, bool) else str(v)
                            for k, v in {**THROUGHPUT_PRODUCER_CONFIG, **settings.producer_config}.items()},
        "transactional_id_pattern": transactional_id_pattern(settings.id_prefix, settings.checkpoint_id),
        "checkpoint_id": settings.checkpoint_id, "timeout_ms": settings.timeout_ms,
        "sink_topic": settings.sink_topic, "dead_letter_topic": settings.dead_letter_topic,
        "sink_max_bytes": settings.sink_max_bytes, "sink_limit": settings.sink_limit,
        "dead_letter_max_bytes": settings.dead_letter_max_bytes, "dead_letter_limit": settings.dead_letter_limit,
        "failpoints": settings.failpoints,
        "contract": jvm_contract(),
    }


def write_with_jvm(spark: Any, out: Any, settings: WriterSettings) -> list[str]:
    """Rows stay in the executor JVM: the ``lockstep-kafka`` data source (``buildsrc/jvm-writer``,
    built by ``make setup``) writes each Spark task's rows in one Kafka transaction, with the same
    transaction contract and the output contract it receives in its settings. Only the DataFrame API
    is used, so a classic session and a Spark Connect session take this same path.

    The settings go in the session's conf for the write (see `JVM_SETTINGS_CONF_PREFIX`). The driver
    keeps the tasks' result documents under a fresh write id; reading the source with that
    id returns them (one row per task) and releases them. Returns each task's result document."""
    write_id = str(uuid.uuid4())
    settings_key = JVM_SETTINGS_CONF_PREFIX + write_id
    spark.conf.set(settings_key, json.dumps(jvm_settings(settings)))
    try:
        out.write.format(JVM_SINK_FORMAT).mode("append").option(JVM_WRITE_ID_OPTION, write_id).save()
    except Exception as exc:
        if _data_source_missing(exc):
            raise TerminalError(
                f"Lockstep's JVM writer (data source {JVM_SINK_FORMAT}) is not on Spark's classpath (spark.jars "
                "must include lockstep-jvm-writer.jar; run `make setup` to build it)") from exc
        raise
    finally:
        spark.conf.unset(settings_key)  # the session may live on (Spark Connect): keep no credentials in it
    rows = spark.read.format(JVM_SINK_FORMAT).option(JVM_WRITE_ID_OPTION, write_id).load().collect()
    return [r["result"] for r in rows]


def _data_source_missing(exc: Exception) -> bool:
    """Spark's "data source not found" (classic: AnalysisException; Connect: its server-side twin)."""
    text = str(exc)
    return "DATA_SOURCE_NOT_FOUND" in text or f"Failed to find data source: {JVM_SINK_FORMAT}" in text


def writer_settings(planned: PlannedWith, checkpoint_id: int, producer: dict[str, Any],
                    topic_max_bytes: dict[str, int] | None = None) -> WriterSettings:
    """Everything a task writes with comes from what the checkpoint was planned with (its claim),
    never from the spec as it is now: ids, topics, timeout, and the sink connection in the dialect
    of the planned writer.

    ``topic_max_bytes`` (each topic's ``max.message.bytes``, from `topic_limits`) bounds the record
    size per topic together with the producer's own limit; ``batch.size`` is capped at the smaller
    topic limit so a batch of small records is never refused by the broker as too large either."""
    sink = kafka_config(planned.sink_kafka_conn_id, JAVA if planned.sink_writer == "jvm" else CONFLUENT)
    produced_limit, produced_source = producer_limit(producer)

    def limit(topic: str) -> tuple[int, str]:
        topic_limit = (topic_max_bytes or {}).get(topic)
        if topic_limit is not None and topic_limit < produced_limit:
            return topic_limit, f"max.message.bytes of topic {topic}"
        return produced_limit, produced_source

    sink_max, sink_source = limit(planned.sink_topic)
    dead_max, dead_source = limit(planned.dead_letter_topic)
    config = {**sink, **producer}
    batch = int(config.get("batch.size", THROUGHPUT_PRODUCER_CONFIG["batch.size"]))
    if min(sink_max, dead_max) < batch:
        config["batch.size"] = min(sink_max, dead_max)
    return WriterSettings(
        bootstrap=config.pop("bootstrap.servers"), producer_config=config,
        id_prefix=planned.id_prefix, checkpoint_id=checkpoint_id, timeout_ms=planned.timeout_ms,
        sink_topic=planned.sink_topic, dead_letter_topic=planned.dead_letter_topic,
        sink_max_bytes=sink_max, sink_limit=sink_source, dead_letter_max_bytes=dead_max, dead_letter_limit=dead_source,
        failpoints=failpoints.armed(prefix="job."),
    )


def job_outcome(exc: BaseException) -> tuple[str, bool]:
    """A failed run's one-line cause, and whether a retry fails the same way (terminal).

    Lockstep's own errors say which they are. The transform not fitting its input (a missing
    column, a type error in SQL) fails the same way on every retry; anything else (a task that
    raised, a lost executor, a broker or the Connect server away) may pass on a retry."""
    from pyspark.errors import AnalysisException

    from lockstep.errors import LockstepError, TerminalError, root_cause

    if isinstance(exc, LockstepError):
        return str(exc).splitlines()[0], isinstance(exc, TerminalError)
    return root_cause(exc), isinstance(exc, AnalysisException)


def values_for_run(spec: PipelineSpec, view: Any) -> Resolved:
    """The claim's values for the Spark run of a claimed checkpoint with records to write, or a
    CheckpointError when a spec edit since its plan cannot be honoured (another cluster)."""
    resolved = resolve_pinned(view.claim, spec)
    refused = refusal(resolved, Step.RUN)
    if refused:
        raise CheckpointError(view.checkpoint_id, refused)
    return resolved


def run_checkpoint_job(spec: PipelineSpec, checkpoint_id: int, spark: Any, store: Any,
                       view: Any = None) -> PreparedCheckpoint:
    """``view``: the checkpoint as the caller just read it (the run step, in its own process), else
    read here (the spark-submit driver)."""
    view = view if view is not None else store.view(checkpoint_id)
    if view is None:
        raise CheckpointError(checkpoint_id, "has no claim; the plan task must run first")
    if view.status is CheckpointStatus.PREPARED:
        log.info("checkpoint %d: already prepared by an earlier attempt; nothing to write", checkpoint_id)
        return view.prepared
    if view.status is not CheckpointStatus.CLAIMED:
        raise CheckpointError(checkpoint_id, f"is {view.status.value}; the Spark run only writes claimed checkpoints")
    ranges = tuple(r for r in view.claim.ranges if not r.is_empty)
    started = time.monotonic()
    committables: list[PreparedTransaction] = []
    rows_out = 0
    if ranges:
        resolved = values_for_run(spec, view)
        notice = resolved.notice(Step.RUN)
        if notice:
            log.warning(notice)
        planned = resolved.values
        kafka = kafka_config(planned.source_kafka_conn_id, JAVA)
        df = read_ranges(spark, kafka, ranges, headers=spec.replay_of is not None)
        transform = load_transform(spec)
        replay = None
        if spec.replay_of is not None:
            from lockstep.spark.replay import start_replay

            df, transform, replay = start_replay(spec, checkpoint_id, df, transform, store)
        # The Python writer runs Lockstep's own code in the executors' Python workers: ship it too.
        # So does a transform that uses `lockstep.rows` (its UDFs run `lockstep.rows.guarded` there).
        uses_lockstep = planned.sink_writer == "python" or "lockstep.rows" in sys.modules
        shipped = ship_to_executors(spark, spec, ("lockstep",) if uses_lockstep else ())
        if shipped:
            log.info("checkpoint %d: shipped %s to the executors", checkpoint_id, ", ".join(shipped))
        out = transform(df)
        columns = check_output_schema(spec, {f.name: f.dataType.simpleString() for f in out.schema.fields})
        settings = writer_settings(planned, checkpoint_id, dict(spec.producer), topic_limits(
            planned.sink_kafka_conn_id, (planned.sink_topic, planned.dead_letter_topic)))
        log.info("checkpoint %d: reading %d ranges (%s records at most), writing to %s / %s with the %s writer under "
                 "transactional ids %s-%d-<task>", checkpoint_id, len(ranges), sum(r.count for r in ranges),
                 planned.sink_topic, planned.dead_letter_topic, planned.sink_writer, planned.id_prefix, checkpoint_id)
        write = write_with_jvm if planned.sink_writer == "jvm" else write_with_python
        if replay is not None:
            replay.record(out.select(*columns))  # before the decision: only read once it is completed
        results = write(spark, out.select(*columns), settings)
        log.info("checkpoint %d: %d Spark tasks wrote their transactions in %.1f s", checkpoint_id, len(results),
                 time.monotonic() - started)
        for line in results:
            log.info("checkpoint %d: task result %s", checkpoint_id, line)
            task, rows, committable = parse_task_result(line)
            rows_out += rows
            if committable is not None:
                committables.append(PreparedTransaction.from_json(committable, f"task {task}"))
    failpoints.hit("job.before_prepared")
    prepared = PreparedCheckpoint(
        pipeline=spec.name, checkpoint_id=checkpoint_id, prepared_at=datetime.now(timezone.utc).isoformat(),
        transactions=tuple(sorted(committables, key=lambda t: t.task_index)),
        records_in=sum(r.count for r in ranges),
        records_out=sum(t.records for t in committables),
        records_dead_lettered=sum(t.dead_letters for t in committables),
        spark_seconds=round(time.monotonic() - started, 3),
    )
    store.write_prepared(prepared)
    log.info("checkpoint %d: prepared with %d transactions (%d records out, %d dead-lettered) in %.1f s",
             checkpoint_id, len(prepared.transactions), prepared.records_out, prepared.records_dead_lettered,
             prepared.spark_seconds)
    failpoints.hit("job.after_prepared")
    return prepared
