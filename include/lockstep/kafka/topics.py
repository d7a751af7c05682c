"""Topics as the Kafka cluster reports them: their partitions; the admin client Lockstep reads them
(and their offsets, `lockstep.kafka.broker_offsets`) through; and the retry rule every admin call uses."""
from __future__ import annotations

__all__ = [
    "TopicAdmin", "record_headers", "with_retries",
]

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from lockstep.errors import TerminalError, TransientError
from lockstep.model.offsets import TopicPartition

if TYPE_CHECKING:
    from concurrent.futures import Future

    from confluent_kafka import IsolationLevel, Message, TopicCollection
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import ClusterMetadata, ListOffsetsResultInfo, OffsetSpec, TopicDescription

log = logging.getLogger(__name__)
TIMEOUT_S = 30
T = TypeVar("T")


class TopicAdmin(Protocol):
    """What Lockstep reads of a cluster through an admin client: topic metadata and partition offsets.
    confluent-kafka's ``AdminClient`` on a cluster (`steps.client_factory.kafka_admin`); in tests, the
    admin of an in-memory source (``tests/support/fake_kafka.FakeSource.admin``)."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata: ...

    def describe_topics(self, topics: TopicCollection, /, *,
                        request_timeout: float) -> Mapping[str, Future[TopicDescription]]: ...

    def list_offsets(self, topic_partition_offsets: dict[KafkaTopicPartition, OffsetSpec], /, *,
                     isolation_level: IsolationLevel, request_timeout: float
                     ) -> Mapping[KafkaTopicPartition, Future[ListOffsetsResultInfo]]: ...


def with_retries(what: str, call: Callable[[], T], deadline_s: float = TIMEOUT_S) -> T:
    """Retry Kafka's retriable errors (coordinator loading or moving) until a deadline."""
    deadline = time.monotonic() + deadline_s
    delay = 0.2
    while True:
        try:
            return call()
        except Exception as exc:
            error: object = exc.args[0] if exc.args else None  # confluent-kafka's KafkaError, or anything
            retriable = getattr(error, "retriable", lambda: False)()
            if not retriable or time.monotonic() + delay > deadline:
                raise TransientError(f"{what}: {exc}") from exc
            log.info("%s: %s; retrying", what, error.name() if hasattr(error, "name") else exc)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def partitions(admin: TopicAdmin, topics: Iterable[str]) -> list[TopicPartition]:
    result: list[TopicPartition] = []
    for topic in topics:
        try:
            metadata = admin.list_topics(topic, timeout=TIMEOUT_S)
        except Exception as exc:
            raise TransientError(f"cannot read metadata of topic {topic}: {exc}") from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise TerminalError(f"source topic {topic!r} does not exist (or has no partitions): "
                                f"{found.error if found is not None else 'unknown topic'}; create it or fix source.topics")
        result.extend(TopicPartition(topic, p) for p in sorted(found.partitions))
    return result


def topic_ids(admin: TopicAdmin, topics: Iterable[str]) -> dict[str, str]:
    """Each topic's id (Kafka's topic UUID, printed as Kafka's own tools print it). Deleting a topic
    and creating it again under the same name gives it a new id, and a new log from offset 0."""
    from confluent_kafka import TopicCollection

    names = list(dict.fromkeys(topics))
    if not names:
        return {}

    def call() -> dict[str, str]:
        futures = admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
        return {name: str(future.result(timeout=TIMEOUT_S).topic_id) for name, future in futures.items()}

    return with_retries(f"reading the topic ids of {', '.join(names)}", call)


def record_headers(msg: Message) -> list[tuple[str, bytes | None]]:
    """A consumed record's headers. confluent-kafka types ``headers()`` as what a producer accepts
    (str or bytes values, or a dict); what a consumer gets is a list of (name, bytes or None)."""
    return cast("list[tuple[str, bytes | None]]", msg.headers() or [])
