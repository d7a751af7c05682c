"""Records read back from topics, as a downstream consumer sees them: what ``lockstep verify`` and
``lockstep deadletters`` audit (`read_committed`), and the lag's ages of the oldest unread records
(`record_timestamps`). Consumers here are assigned partitions: they join no group and commit nothing.
"""
from __future__ import annotations

__all__ = [
    "CommittedRecord", "read_committed", "record_timestamps",
]

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from lockstep.errors import TransientError
from lockstep.kafka.topics import record_headers
from lockstep.model.offsets import TopicPartition

if TYPE_CHECKING:
    from confluent_kafka import Message
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from lockstep.kafka.client_configs import ClientConfig

#: librdkafka's _PARTITION_EOF: with ``read_committed`` isolation, the partition's last stable offset.
PARTITION_EOF = -191
#: The longest one ``consume`` call waits (s). librdkafka returns a batch early only when it is full: at the
#: end of a log each call waits its whole timeout, which at 5 s made every ``lockstep verify`` idle 5 s.
CONSUME_WAIT_S = 0.1


@dataclass(frozen=True)
class CommittedRecord:
    """One committed record of a topic."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    #: in the order the producer wrote them; a name may repeat
    headers: list[tuple[str, bytes | None]]
    #: the record's timestamp (ms), as the broker keeps it
    timestamp_ms: int

    @property
    def where(self) -> str:
        """``topic:partition@offset``, as reports name a record."""
        return f"{self.topic}:{self.partition}@{self.offset}"


class RecordConsumer(Protocol):
    """What the readers here use of a consumer: confluent-kafka's ``Consumer``, or a fake in tests."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...  # ClusterMetadata

    def assign(self, partitions: list[KafkaTopicPartition], /) -> None: ...

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]: ...

    def pause(self, partitions: list[KafkaTopicPartition], /) -> None: ...

    def close(self) -> None: ...


def _consumer(config: ClientConfig) -> RecordConsumer:
    from confluent_kafka import Consumer

    return Consumer(config)


def read_committed(config: ClientConfig, topics: Iterable[str], group: str, reading: Callable[[str], str], *,
                   missing: Callable[[str, str], None] | None = None,
                   after_batch: Callable[[], None] | None = None) -> Iterator[CommittedRecord]:
    """Every committed record of ``topics`` from the start of their logs to their last stable offsets
    (``read_committed`` isolation: nothing of an open or aborted transaction), partition by partition in
    offset order. ``config`` is a connection's confluent dialect; ``group`` names the reader to the
    brokers (it is never joined, nothing is committed).

    A topic that does not exist (or whose metadata carries an error) is passed to ``missing`` with the
    reason, which may raise; without ``missing`` it is skipped. ``after_batch`` is called after each
    batch the consumer returns (a caller's progress). A record the consumer cannot read raises
    `TransientError` ``"<reading(topic)>: <error>; try again"``.
    """
    consumer = _consumer({**config, "group.id": group, "isolation.level": "read_committed",
                          "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        assignment = []
        for topic in topics:
            metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
            if metadata is not None and metadata.error is None:
                assignment += [_kafka_partition(topic, p, 0) for p in metadata.partitions]
            elif missing is not None:
                missing(topic, str(metadata.error) if metadata is not None else "not found")
        consumer.assign(assignment)
        remaining = {(tp.topic, tp.partition) for tp in assignment}
        while remaining:
            for msg in consumer.consume(1000, timeout=CONSUME_WAIT_S):
                name, partition, error = msg.topic(), msg.partition(), msg.error()
                if error:
                    if error.code() == PARTITION_EOF:
                        remaining.discard((name, partition))
                        continue
                    raise TransientError(f"{reading(str(name))}: {error}; try again")
                offset = msg.offset()
                assert name is not None and partition is not None and offset is not None  # a consumed record's
                yield CommittedRecord(name, partition, offset, msg.key(), msg.value(), record_headers(msg),
                                      msg.timestamp()[1])
            if after_batch is not None:
                after_batch()
    finally:
        consumer.close()


def record_timestamps(config: ClientConfig, at: Mapping[str, int], timeout_s: float) -> dict[str, int]:
    """Timestamp (ms) of the first readable record at or after each given ``topic:partition`` offset:
    one consumer assigned to those offsets (``read_committed``; it joins no group and commits nothing),
    given ``timeout_s`` in all. Partitions that yield nothing in time are left out."""
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

    if not at:
        return {}
    settings = {k: v for k, v in config.items() if k != "log_level"}
    consumer = _consumer({**settings, "group.id": f"lockstep-lag-{uuid.uuid4().hex[:8]}",
                          "enable.auto.commit": False, "isolation.level": "read_committed",
                          "enable.partition.eof": False, "log_level": 3})
    found: dict[str, int] = {}
    try:
        consumer.assign([_kafka_partition(tp.topic, tp.partition, offset)
                         for tp, offset in ((TopicPartition.from_key(k), o) for k, o in at.items())])
        deadline = time.monotonic() + timeout_s
        while len(found) < len(at):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for msg in consumer.consume(num_messages=len(at), timeout=min(remaining, 1.0)):
                key = f"{msg.topic()}:{msg.partition()}"
                if msg.error() is not None or key in found:
                    continue
                kind, ms = msg.timestamp()
                if kind != TIMESTAMP_NOT_AVAILABLE:
                    found[key] = ms
                topic, partition = msg.topic(), msg.partition()
                assert topic is not None and partition is not None  # a consumed record has both
                consumer.pause([_kafka_partition(topic, partition)])
    finally:
        consumer.close()
    return found


def _kafka_partition(topic: str, partition: int, offset: int | None = None) -> KafkaTopicPartition:
    from confluent_kafka import TopicPartition as KTP

    return KTP(topic, partition) if offset is None else KTP(topic, partition, offset)
