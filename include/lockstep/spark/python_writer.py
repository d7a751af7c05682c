"""The writer side of Lockstep's two-phase commit: produce into a Kafka transaction and pre-commit it.

A Spark task opens one transactional producer, produces its slice, flushes, and hands back a
committable (`PreparedTransaction`) *without committing*: a different process commits it later
(see `lockstep.kafka.committer`), once the checkpoint's metadata is safely in S3. This is Flink's
`preCommit`, and it rests on three facts verified on Kafka 4.2 with confluent-kafka 2.16.1:

* librdkafka has no getter for the producer id and epoch, but its statistics (`eos` section)
  carry them, so we enable statistics and read them after the flush.
* Letting the `Producer` be garbage-collected, or the process exit (even `os._exit`), leaves the
  transaction **open** on the broker: librdkafka sends no EndTxn on destroy. But `Producer.close()`
  and leaving a `with Producer(...)` block **abort** it (EndTxn(abort) is sent). So a prepared
  producer is released, never closed — `_release` is the one place that does it.
* One `init_transactions` → one transaction. A second transaction on the same producer would
  reuse (transactional id, producer id, epoch) under protocol v1, so a committable would be
  ambiguous; the writer refuses to begin twice.

An empty transaction cannot be committed (the broker never heard of it: INVALID_TXN_STATE), so a
writer that produced nothing returns no committable.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_PRODUCER_CONFIG",
]

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, TypedDict, cast

from lockstep.errors import TerminalError, TransientError
from lockstep.kafka.clients import producer as confluent_producer
from lockstep.model import failpoints
from lockstep.model.checkpoint import PreparedTransaction
from lockstep.model.offsets import TopicPartition
from lockstep.model.output_contract import (
    CHECKPOINT_HEADER,
    ERROR_HEADER,
    LEADING_HEADERS,
    MID_PRODUCE_AFTER_RECORDS,
    ORIGINAL_SIZE_HEADER,
    PIPELINE_HEADER,
    ROUTE_COLUMN,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
    mid_produce_message,
    record_size,
    task_result,
    too_large,
)
from lockstep.model.transactional_ids import transactional_id
from lockstep.spark.writer_settings import THROUGHPUT_PRODUCER_CONFIG, WriterSettings

if TYPE_CHECKING:
    from types import TracebackType

    import pyarrow as pa  # no type information: its names are Any to mypy
    from confluent_kafka import KafkaError, Message, Producer
    from pyspark.sql import DataFrame

    from lockstep.kafka.client_configs import ClientConfig
    from lockstep.spark.target import JobSession

log = logging.getLogger(__name__)

# This writer's defaults (a caller may override them through `extra_config`).
DEFAULT_PRODUCER_CONFIG: Mapping[str, object] = {
    **THROUGHPUT_PRODUCER_CONFIG,
    # The Java client's partitioner (murmur2 of the key), so a key lands in the same sink partition
    # whichever writer produced it (the JVM writer uses the Java client) and as Java producers put it.
    "partitioner": "murmur2_random",
    # Stats are how we learn the producer id/epoch; 100 ms keeps prepare() quick.
    "statistics.interval.ms": 100,
}

# Delivery reports and statistics are served after this many produced records (see `produce`).
POLL_EVERY = 1000

# Settings the two-phase commit depends on; overriding them would silently break it.
_RESERVED_KEYS = frozenset(
    {"bootstrap.servers", "transactional.id", "enable.idempotence", "transaction.timeout.ms", "stats_cb",
     "error_cb", "on_delivery", "delivery.report.only.error"}
)

# Delivery errors that a retry of the task cannot fix.
_TERMINAL_DELIVERY_ERRORS = frozenset(
    {"MSG_SIZE_TOO_LARGE", "TOPIC_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
     "INVALID_RECORD", "RECORD_LIST_TOO_LARGE", "_INVALID_ARG"}
)


#: A record's headers, as confluent-kafka's producer takes them.
Headers = list[tuple[str, bytes | str | None]] | dict[str, bytes | str | None]


class _Record(TypedDict, total=False):
    """The keyword arguments of one ``Producer.produce`` call."""

    value: bytes | str | None
    key: bytes | str | None
    headers: Headers | None
    on_delivery: Callable[[KafkaError | None, Message], None]
    partition: int


class _Eos(TypedDict, total=False):
    """The ``eos`` section of librdkafka's statistics: the producer's identity and transaction state."""

    producer_id: int
    producer_epoch: int
    txn_state: str


class WriterState(str, Enum):
    """The writer's life: NEW → OPEN → PREPARED | ABORTED | EMPTY. Nothing moves back."""

    NEW = "new"
    OPEN = "open"
    PREPARED = "prepared"
    ABORTED = "aborted"
    EMPTY = "empty"


class WriterStateError(TerminalError):
    """The writer was used out of order (a bug in the caller, never worth a retry)."""


class TransactionInitError(TransientError):
    """The transactional id could not be initialised (coordinator unreachable, or busy past the timeout)."""


class DeliveryError(TransientError):
    """Records could not be delivered for a reason a task retry may fix (broker down, timeouts)."""


class RecordRejectedError(TerminalError):
    """The broker or client rejected records for a reason a retry cannot fix (too large, no ACL)."""


class ProducerFencedOutError(TerminalError):
    """This writer's transactional id was taken over (a newer attempt re-initialised it).

    The newer attempt owns the output now; this one must stop without a committable.
    """


class TransactionalWriter:
    """Produces one Kafka transaction and pre-commits it (flush, no commit).

    Use as a context manager: an exception before `prepare()` aborts the transaction so it does not
    stall `read_committed` readers until the timeout; after `prepare()` leaving the block keeps it open.
    `producer_factory` and the clocks are injectable for tests.
    """

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        *,
        task_index: int = 0,
        transaction_timeout_ms: int = 900_000,
        extra_config: Mapping[str, object] | None = None,
        timeout_s: float = 60.0,
        producer_factory: Callable[[ClientConfig], Producer] | None = None,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transactional_id = transactional_id
        self.task_index = task_index
        self.state = WriterState.NEW
        self._timeout_s = timeout_s
        self._wall_ms = wall_ms
        self._monotonic = monotonic
        self._config = self._build_config(bootstrap, transaction_timeout_ms, extra_config or {})
        self._factory = producer_factory or confluent_producer
        #: set by `open`; dropped (None) when the transaction is prepared, aborted or found empty
        self._producer: Producer | None = None
        self._opened_at_ms = -1
        self._produced = 0
        self._produced_dead_letters = 0
        self._delivered = 0
        self._delivered_dead_letters = 0
        self._partitions: set[tuple[str, int]] = set()
        self._sources: set[tuple[str, int]] = set()  # the source partitions of the records produced
        self._delivery_errors: list[tuple[str, int, str]] = []  # (topic, partition, error)
        self._fatal: str | None = None
        self._eos: _Eos = {}
        self._stats_seen = 0
        self._unpolled = 0

    # ---- configuration -----------------------------------------------------------------------
    def _build_config(self, bootstrap: str, timeout_ms: int, extra: Mapping[str, object]) -> ClientConfig:
        clash = sorted(_RESERVED_KEYS.intersection(extra))
        if clash:
            raise WriterStateError(
                f"transaction {self.transactional_id}: extra_config may not set {', '.join(clash)}; "
                "the writer owns these settings because the two-phase commit depends on them"
            )
        config: ClientConfig = {**DEFAULT_PRODUCER_CONFIG, **extra}
        if int(config.get("statistics.interval.ms", 0)) <= 0:
            raise WriterStateError(
                f"transaction {self.transactional_id}: statistics.interval.ms must be > 0: the producer id "
                "and epoch are only reported through librdkafka statistics"
            )
        config.update({
            "bootstrap.servers": bootstrap,
            "transactional.id": self.transactional_id,
            "enable.idempotence": True,
            "transaction.timeout.ms": int(timeout_ms),
            "stats_cb": self._on_stats,
            "error_cb": self._on_error,
        })
        config.setdefault("logger", log)
        return config

    # ---- librdkafka callbacks (run inside poll/flush on the calling thread) ------------------
    def _on_stats(self, stats_json: str) -> None:
        self._eos = json.loads(stats_json).get("eos", {})
        self._stats_seen += 1

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal = f"{error.name()}: {error.str()}"
        log.warning("transaction %s: producer error %s", self.transactional_id, error)

    # A delivery report's message has its topic and partition, though the stub types them Optional.
    def _on_record(self, err: KafkaError | None, msg: Message) -> None:
        # Called once per record: the common case is inlined (no second Python frame).
        if err is not None:
            self._on_delivery(err, msg, dead_letter=False)
            return
        self._partitions.add((msg.topic(), msg.partition()))  # type: ignore[arg-type]
        self._delivered += 1

    def _on_dead_letter(self, err: KafkaError | None, msg: Message) -> None:
        self._on_delivery(err, msg, dead_letter=True)

    def _on_delivery(self, err: KafkaError | None, msg: Message, dead_letter: bool) -> None:
        if err is not None:
            self._delivery_errors.append((msg.topic(), msg.partition(), f"{err.name()}: {err.str()}"))  # type: ignore[arg-type]
            return
        self._partitions.add((msg.topic(), msg.partition()))  # type: ignore[arg-type]
        if dead_letter:
            self._delivered_dead_letters += 1
        else:
            self._delivered += 1

    # ---- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> TransactionalWriter:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.state is WriterState.OPEN:
            self.abort(reason=f"{exc_type.__name__}: {exc}" if exc_type else "left without prepare()")

    def open(self) -> None:
        """Initialise the transactional id (fencing earlier attempts) and begin the one transaction."""
        self._require(WriterState.NEW, "open")
        self._producer = producer = self._factory(self._config)
        try:
            producer.init_transactions(self._timeout_s)
            producer.begin_transaction()
        except Exception as exc:
            self._close()
            self.state = WriterState.ABORTED
            raise TransactionInitError(
                f"transaction {self.transactional_id}: could not initialise the transactional id within "
                f"{self._timeout_s:.0f} s: {exc}. Is the broker up, and is the id allowed by its ACLs?"
            ) from exc
        self._opened_at_ms = self._wall_ms()
        self.state = WriterState.OPEN
        log.info("transaction %s: opened (task %d)", self.transactional_id, self.task_index)

    def produce(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        *,
        dead_letter: bool = False,
    ) -> None:
        """Queue one record in the transaction; `dead_letter` counts it separately in the committable.

        This runs once per output record, so the common path is one librdkafka call: delivery reports
        and statistics are served every `POLL_EVERY` records (and while waiting for queue space, and
        by the flush in `prepare`) rather than after each record.
        """
        if self.state is not WriterState.OPEN:
            if self.state is WriterState.NEW:
                self.open()
            self._require(WriterState.OPEN, "produce")
        if self._fatal is not None:
            self._raise_if_fatal()
        callback = self._on_dead_letter if dead_letter else self._on_record
        # OPEN (checked above), so the producer is there: no per-record check of it for mypy's sake
        try:
            if partition is None:
                self._producer.produce(topic, value=value, key=key, on_delivery=callback,  # type: ignore[union-attr]
                                       headers=headers)
            else:
                self._producer.produce(topic, value=value, key=key, partition=partition,  # type: ignore[union-attr]
                                       on_delivery=callback, headers=headers)
        except BufferError:
            kwargs = _Record(value=value, key=key, headers=headers, on_delivery=callback)
            if partition is not None:
                kwargs["partition"] = partition
            self._produce_with_backpressure(topic, kwargs)
        if dead_letter:
            self._produced_dead_letters += 1
        else:
            self._produced += 1
        self._unpolled += 1
        if self._unpolled >= POLL_EVERY:
            self._unpolled = 0
            self._producer.poll(0)  # type: ignore[union-attr]  # OPEN, as above

    def _produce_with_backpressure(self, topic: str, kwargs: _Record) -> None:
        """Wait for queue space (serving delivery reports) instead of failing on a full local queue."""
        deadline = self._monotonic() + self._timeout_s
        producer = self._live()
        while True:
            try:
                producer.produce(topic, **kwargs)
                return
            except BufferError:
                if self._monotonic() >= deadline:
                    raise DeliveryError(
                        f"transaction {self.transactional_id}: the local producer queue stayed full for "
                        f"{self._timeout_s:.0f} s; the broker is not accepting records fast enough"
                    ) from None
                producer.poll(0.1)

    def carries(self, sources: Iterable[tuple[str, int]]) -> None:
        """Records of these source partitions (topic, partition) are in the transaction: the committable
        says so, and a repair re-reads exactly them if the transaction is lost."""
        self._sources.update(sources)

    def prepare(self) -> PreparedTransaction | None:
        """Flush, check every record landed, and return the committable; the transaction stays open.

        Returns None (after aborting locally) when nothing was produced: the broker never registered
        the transaction, so there would be nothing to commit.
        """
        self._require(WriterState.OPEN, "prepare")
        if self._produced + self._produced_dead_letters == 0:
            self._abort_empty()
            return None
        try:
            self._flush()
            producer_id, epoch = self._await_producer_identity()
        except BaseException as exc:
            self.abort(reason=str(exc))
            raise
        prepared = PreparedTransaction(
            transactional_id=self.transactional_id, producer_id=producer_id, epoch=epoch,
            partitions=tuple(sorted(TopicPartition(t, p) for t, p in self._partitions)),
            records=self._delivered, dead_letters=self._delivered_dead_letters,
            task_index=self.task_index, opened_at_ms=self._opened_at_ms,
            sources=tuple(sorted(TopicPartition(t, p) for t, p in self._sources)),
        )
        self.state = WriterState.PREPARED
        self._release()
        log.info("transaction %s: prepared (producer id %d, epoch %d, %d records, %d dead letters, %d partitions); "
                 "left open for the committer", self.transactional_id, producer_id, epoch, prepared.records,
                 prepared.dead_letters, len(prepared.partitions))
        return prepared

    def abort(self, reason: str = "requested") -> None:
        """Abort the open transaction now so `read_committed` readers are not held back until its timeout."""
        if self.state is not WriterState.OPEN:
            return
        self.state = WriterState.ABORTED
        log.warning("transaction %s: aborting (%s)", self.transactional_id, reason)
        try:
            self._live().abort_transaction(self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - the broker will still abort it at transaction.timeout.ms
            log.warning("transaction %s: abort failed (%s); the broker aborts it when it times out",
                        self.transactional_id, exc)
        finally:
            self._close()

    # ---- prepare steps -----------------------------------------------------------------------
    def _flush(self) -> None:
        remaining = self._live().flush(self._timeout_s)
        self._raise_if_fatal()
        if remaining:
            raise DeliveryError(
                f"transaction {self.transactional_id}: {remaining} records still undelivered after "
                f"{self._timeout_s:.0f} s; is the broker reachable?"
            )
        if self._delivery_errors:
            raise self._delivery_failure()

    def _delivery_failure(self) -> DeliveryError | RecordRejectedError:
        first_topic, first_partition, first_error = self._delivery_errors[0]
        terminal = any(err.split(":", 1)[0] in _TERMINAL_DELIVERY_ERRORS for _, _, err in self._delivery_errors)
        cls = RecordRejectedError if terminal else DeliveryError
        return cls(
            f"transaction {self.transactional_id}: {len(self._delivery_errors)} records failed delivery, "
            f"first to {first_topic}[{first_partition}]: {first_error}; the transaction was aborted"
        )

    def _await_producer_identity(self) -> tuple[int, int]:
        """Poll until a statistics report *newer than the flush* shows the producer id and epoch.

        A report from before the flush could predate the transaction's registration, so it is ignored.
        """
        seen_at_flush = self._stats_seen
        deadline = self._monotonic() + self._timeout_s
        producer = self._live()
        while self._monotonic() < deadline:
            producer.poll(0.05)
            self._raise_if_fatal()
            eos = self._eos
            if self._stats_seen > seen_at_flush and eos.get("producer_id", -1) >= 0 \
                    and eos.get("txn_state") == "InTransaction":
                return int(eos["producer_id"]), int(eos["producer_epoch"])
        raise DeliveryError(
            f"transaction {self.transactional_id}: no librdkafka statistics report with the producer id/epoch "
            f"of the open transaction within {self._timeout_s:.0f} s (last eos section: {self._eos or 'none'})"
        )

    def _abort_empty(self) -> None:
        """Nothing was produced: the transaction exists only locally, so abort it and close quietly."""
        self.state = WriterState.EMPTY
        try:
            self._live().abort_transaction(self._timeout_s)
        finally:
            self._close()
        log.info("transaction %s: nothing produced; no committable", self.transactional_id)

    def _close(self) -> None:
        """Close a producer whose transaction is already ended (or doomed): close() aborts what is open."""
        producer, self._producer = self._live(), None
        try:
            producer.close()
        except Exception as exc:  # noqa: BLE001 - nothing left to protect; do not mask the original failure
            log.warning("transaction %s: closing the producer failed: %s", self.transactional_id, exc)

    def _release(self) -> None:
        """Drop the prepared producer WITHOUT close(): close() would abort the transaction.

        Destroying the librdkafka handle (garbage collection, process exit) sends no EndTxn, which
        was verified on the broker; the transaction stays Ongoing for the committer.
        """
        self._producer = None

    # ---- guards ------------------------------------------------------------------------------
    def _live(self) -> Producer:
        """The producer, between `open` and the end of the transaction (its users run only then)."""
        assert self._producer is not None, f"transaction {self.transactional_id}: no producer ({self.state.value})"
        return self._producer

    def _require(self, state: WriterState, action: str) -> None:
        if self.state is not state:
            raise WriterStateError(
                f"transaction {self.transactional_id}: cannot {action} while the writer is {self.state.value} "
                f"(one writer = one transaction; create a new writer for the next one)"
            )

    def _raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise ProducerFencedOutError(
                f"transaction {self.transactional_id}: producer failed fatally ({self._fatal}); most likely a "
                "newer attempt re-initialised this transactional id, which now owns the output"
            )


# ---- the Spark task ---------------------------------------------------------------------------------
#: What each Python writer task returns: its result document (`output_contract.task_result`).
RESULT_SCHEMA = "result string"


def write_partition(settings: WriterSettings, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark task: produce this partition's rows in one transaction, pre-commit it."""
    import pyarrow as pa
    from pyspark import TaskContext

    from lockstep.spark.python_writer import TransactionalWriter

    context = TaskContext.get()
    assert context is not None  # set in every Spark task, where this runs
    task, attempt = context.partitionId(), context.attemptNumber()
    writer = TransactionalWriter(
        settings.bootstrap, transactional_id(settings.id_prefix, settings.checkpoint_id, task), task_index=task,
        transaction_timeout_ms=settings.timeout_ms, extra_config=settings.producer_config,
    )
    writer.open()  # init_transactions fences any earlier attempt of this task, even an empty one
    failpoints.hit("job.before_produce", armed_here=settings.failpoints, attempt=attempt)
    rows = 0
    for batch in batches:
        rows += produce_batch(writer, settings, batch, produced=rows, task=task, attempt=attempt)
    prepared = writer.prepare()
    failpoints.hit("job.after_flush", armed_here=settings.failpoints, attempt=attempt)
    result = task_result(task, rows, prepared.to_json() if prepared is not None else None)
    yield pa.RecordBatch.from_pydict({"result": [result]}, schema=pa.schema([("result", pa.string())]))


def source_partitions(topic: pa.Array, partition: pa.Array, topics: list[str]) -> set[tuple[str, int]]:
    """The (topic, partition) pairs of a batch's rows. Usually one topic: then Arrow finds the distinct
    partitions in C, several times faster than pairing every row in Python (``topics``: the topic
    column as a list, used when there are several)."""
    import pyarrow.compute as pc

    names = pc.unique(topic).to_pylist()
    if len(names) == 1:
        return {(names[0], p) for p in pc.unique(partition).to_pylist()}
    return set(zip(topics, partition.to_pylist()))


def produce_batch(writer: TransactionalWriter, settings: WriterSettings, batch: pa.RecordBatch, produced: int,
                  task: int, attempt: int) -> int:
    """Produce one Arrow batch. Runs once per record, so the work is done per column where it can be:
    header values are formatted by Arrow (integers cast to their decimal bytes in C), each column is
    converted to Python once, and the per-record loop only builds the header list and calls produce.
    ``produced`` is how many records the task produced before this batch, ``attempt`` the task's
    attempt number (both for `job.mid_produce`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = cast(int, batch.num_rows)
    if n == 0:
        return 0
    names = batch.schema.names

    def column(name: str) -> Any:  # a pyarrow Array (untyped), or None for a column the batch lacks
        return batch.column(names.index(name)) if name in names else None

    def as_bytes(col: pa.Array) -> list[bytes]:
        return cast("list[bytes]", pc.cast(pc.cast(col, pa.string()), pa.binary()).to_pylist())

    values = column("value").to_pylist()
    value_sizes = pc.binary_length(column("value")).fill_null(0).to_pylist()
    key_sizes = pc.binary_length(column("key")).fill_null(0).to_pylist() if "key" in names else None
    topics = column("topic").to_pylist()
    writer.carries(source_partitions(column("topic"), column("partition"), topics))
    partitions, offsets = as_bytes(column("partition")), as_bytes(column("offset"))
    keys = column("key").to_pylist() if "key" in names else None
    user_headers = column("headers").to_pylist() if "headers" in names else None
    errors = column("error").to_pylist() if "error" in names else None
    if errors is not None and column("error").null_count == n:
        errors = None
    routed = column(ROUTE_COLUMN)
    routes = routed.to_pylist() if routed is not None and routed.null_count < n else None
    route_limits = {topic: (most, why) for topic, most, why in settings.routes}
    if user_headers is not None and column("headers").null_count == n:
        user_headers = None
    checkpoint = (CHECKPOINT_HEADER, str(settings.checkpoint_id).encode())
    pipeline = (PIPELINE_HEADER, settings.pipeline.encode())
    leading = len(LEADING_HEADERS)
    topic_headers: dict[str, tuple[str, bytes]] = {}
    produce, sink = writer.produce, settings.sink_topic
    # job.mid_produce: before the record that follows the task's first MID_PRODUCE_AFTER_RECORDS ones.
    mid = MID_PRODUCE_AFTER_RECORDS - produced
    sink_max, dead_letter_max = settings.sink_max_bytes, settings.dead_letter_max_bytes
    base_header_bytes = len(SOURCE_TOPIC) + len(SOURCE_PARTITION) + len(SOURCE_OFFSET) + len(CHECKPOINT_HEADER) \
        + len(checkpoint[1]) + len(PIPELINE_HEADER) + len(pipeline[1])
    error_header_bytes = len(ERROR_HEADER)
    for i in range(n):
        if i == mid:
            failpoints.hit("job.mid_produce", mid_produce_message(task, produced + i), armed_here=settings.failpoints,
                           attempt=attempt)
        topic = topics[i]
        topic_header = topic_headers.get(topic)
        if topic_header is None:
            topic_header = topic_headers[topic] = (SOURCE_TOPIC, topic.encode())
        headers: list[tuple[str, bytes | str | None]] = [topic_header, (SOURCE_PARTITION, partitions[i]),
                                                         (SOURCE_OFFSET, offsets[i]), checkpoint, pipeline]
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
            target, most, why = sink, sink_max, settings.sink_limit
            if routes is not None and routes[i] is not None:
                target = routes[i]
                most, why = route_limits[target]
            if size <= most:
                produce(target, values[i], key=keys[i] if keys is not None else None, headers=headers)
            else:
                reason = too_large(size, most, "sink", why)
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
                    headers=headers[:leading] + [(ERROR_HEADER, reason.encode()), (ORIGINAL_SIZE_HEADER, str(size).encode())])
    return n


def write_with_python(spark: JobSession, out: DataFrame, settings: WriterSettings) -> list[str]:
    """Rows cross to a Python worker through Arrow; confluent-kafka produces them there. Returns each
    task's result document (`output_contract.parse_task_result` reads it)."""
    return [r["result"] for r in out.mapInArrow(lambda it: write_partition(settings, it), RESULT_SCHEMA).collect()]
