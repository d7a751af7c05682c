"""Topics as the Kafka cluster reports them: their partitions, a listing of them all, topic and broker
configs; the admin clients Lockstep reads them (and their offsets, `lockstep.kafka.broker_offsets`)
through; and the retry rule every admin call uses."""
from __future__ import annotations

__all__ = [
    "ConfigAdmin", "ListedTopic", "TopicAdmin", "broker_config", "record_headers", "topic_config", "topic_listing",
    "with_retries",
]

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from lockstep.errors import TerminalError, TransientError
from lockstep.model.offsets import TopicPartition

if TYPE_CHECKING:
    from concurrent.futures import Future

    from confluent_kafka import IsolationLevel, Message, TopicCollection
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import (
        ClusterMetadata,
        ConfigEntry,
        ConfigResource,
        ListOffsetsResultInfo,
        OffsetSpec,
        TopicDescription,
    )

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


class ConfigAdmin(Protocol):
    """What Lockstep reads of a cluster's configuration through an admin client: its brokers (a
    metadata listing) and topic or broker configs. confluent-kafka's ``AdminClient``
    (`lockstep.kafka.clients.admin_client`); in tests, fakes of the two calls."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata: ...

    def describe_configs(self, resources: list[ConfigResource], /) -> Mapping[ConfigResource, Future[
            dict[str, ConfigEntry]]]: ...


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


def partitions(admin: TopicAdmin, topics: Iterable[str], field: str = "source.topics") -> list[TopicPartition]:
    """The topics' partitions; a missing topic is refused naming the spec's ``field`` that names it."""
    result: list[TopicPartition] = []
    for topic in topics:
        try:
            metadata = admin.list_topics(topic, timeout=TIMEOUT_S)
        except Exception as exc:
            raise TransientError(f"cannot read metadata of topic {topic}: {exc}") from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            what = "source topic" if field == "source.topics" else f"topic ({field})"
            raise TerminalError(f"{what} {topic!r} does not exist (or has no partitions): "
                                f"{found.error if found is not None else 'unknown topic'}; create it or fix {field}")
        result.extend(TopicPartition(topic, p) for p in sorted(found.partitions))
    return result


@dataclass(frozen=True)
class ListedTopic:
    """A topic as a cluster's metadata listing shows it: its partition count, or the error it reports."""

    partitions: int
    error: str | None = None


def topic_listing(admin: TopicAdmin, timeout_s: float) -> dict[str, ListedTopic]:
    """Every topic of the cluster, from one listing: a metadata request naming a topic could create it on
    a broker with auto.create.topics.enable. Raises what the admin client raised (no broker answered)."""
    metadata = admin.list_topics(timeout=timeout_s)
    return {name: ListedTopic(len(t.partitions), str(t.error) if t.error is not None else None)
            for name, t in metadata.topics.items()}


def topic_config(admin: ConfigAdmin, topic: str) -> dict[str, str | None]:
    """A topic's config, by name (``max.message.bytes``, ...); a value Kafka does not show is None."""
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return with_retries(f"reading the config of topic {topic}", lambda: _config_values(admin, resource))


def broker_config(admin: ConfigAdmin, cluster: str) -> dict[str, str | None]:
    """One broker's config, by name (the broker of lowest id: cluster-wide settings such as
    ``transaction.max.timeout.ms`` are alike on every broker in practice). ``cluster`` names the
    cluster in errors (``"the sink's"``)."""
    from confluent_kafka.admin import ConfigResource

    brokers = with_retries(f"listing {cluster} brokers", lambda: admin.list_topics(timeout=TIMEOUT_S)).brokers
    resource = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
    return with_retries("reading the broker config", lambda: _config_values(admin, resource))


def _config_values(admin: ConfigAdmin, resource: ConfigResource) -> dict[str, str | None]:
    entries = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    return {name: entry.value for name, entry in entries.items()}


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
