"""What both writers write with: the settings each Spark task receives, made on the driver from what
the checkpoint was planned with, and the producer settings both writers share."""
from __future__ import annotations

__all__ = [
    "THROUGHPUT_PRODUCER_CONFIG", "WriterSettings",
]

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from lockstep.connections import kafka_config
from lockstep.errors import CheckpointError
from lockstep.kafka.client_configs import CONFLUENT, JAVA, ClientConfig
from lockstep.kafka.clients import admin_client
from lockstep.kafka.topics import ConfigAdmin, broker_config, topic_config
from lockstep.model import failpoints
from lockstep.model.checkpoint import PlannedWith
from lockstep.model.output_contract import DEFAULT_PRODUCER_LIMIT, WRITER_FAILPOINTS

log = logging.getLogger(__name__)

# Throughput-oriented producer defaults, named alike in librdkafka and the Java client: both writers
# (the Python one, and the JVM writer through `jvm_writer.jvm_settings`) start from these.
THROUGHPUT_PRODUCER_CONFIG: Mapping[str, object] = {
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "acks": "all",
}


@dataclass(frozen=True)
class WriterSettings:
    """What each Spark task needs to write its transaction; pickled to the executors."""

    bootstrap: str
    producer_config: ClientConfig = field(repr=False)  # may hold credentials
    id_prefix: str
    #: The pipeline whose checkpoint this is: every record's `PIPELINE_HEADER`.
    pipeline: str
    checkpoint_id: int
    timeout_ms: int
    sink_topic: str
    dead_letter_topic: str
    #: The largest record (estimated by `record_size`) each topic takes, and where that limit comes from.
    sink_max_bytes: int = DEFAULT_PRODUCER_LIMIT
    sink_limit: str = "the producer's default"
    dead_letter_max_bytes: int = DEFAULT_PRODUCER_LIMIT
    dead_letter_limit: str = "the producer's default"
    #: ``sink.routes``' topics: (topic, its largest record, where that limit comes from), in the spec's
    #: order; a record whose `ROUTE_COLUMN` names one goes there instead of ``sink_topic``.
    routes: tuple[tuple[str, int, str], ...] = ()
    #: The writer failpoints (`WRITER_FAILPOINTS`) armed where the job is driven, handed to both writers' tasks:
    #: a Spark Connect server's workers do not share the driving process's environment. Only those: the other
    #: ``job.*`` ones (``job.before_prepared``, ``job.after_prepared``) are the driver's, which may ``pause``
    #: there, and a writer knows no pause (the JVM writer refuses a settings document that holds one).
    failpoints: dict[str, str] = field(default_factory=dict)


def producer_limit(producer: ClientConfig) -> tuple[int, str]:
    for name in ("max.request.size", "message.max.bytes"):
        if name in producer:
            return int(producer[name]), f"the producer's {name}"
    return DEFAULT_PRODUCER_LIMIT, "the producer's default"


def topic_limits(conn_id: str, topics: tuple[str, ...], admin: ConfigAdmin | None = None) -> dict[str, int]:
    """Each topic's ``max.message.bytes``, read once on the driver with the admin API.

    A topic whose config cannot be read (no DescribeConfigs permission, say) is left out with a
    warning: its records are then checked against the producer's limit only."""
    if admin is None:
        admin = sink_admin(conn_id)
    limits = {}
    for topic in dict.fromkeys(topics):
        try:
            value = topic_config(admin, topic)["max.message.bytes"]
            if value is None:
                raise ValueError("the broker shows no value for it")
            limits[topic] = int(value)
        except Exception as exc:  # noqa: BLE001 - the run can go on with the producer's limit
            log.warning("could not read max.message.bytes of topic %s (%s); its records are checked against the "
                        "producer's limit only, so one larger than the topic takes would fail the task", topic, exc)
    return limits


def sink_admin(conn_id: str) -> ConfigAdmin:
    """The admin client the driver reads the sink's limits through (`topic_limits`, `transaction_timeout_cap`)."""
    return admin_client(kafka_config(conn_id, CONFLUENT))


def transaction_timeout_cap(conn_id: str, admin: ConfigAdmin | None = None) -> int | None:
    """The sink cluster's ``transaction.max.timeout.ms`` (a broker's config, read on the driver), or
    None when it cannot be read (no DescribeConfigs permission, say): the writers then find out at
    ``initTransactions``."""
    if admin is None:
        admin = sink_admin(conn_id)
    try:
        value = broker_config(admin, "the sink's")["transaction.max.timeout.ms"]
        return int(value) if value is not None else None
    except Exception as exc:  # noqa: BLE001 - the run goes on; initTransactions refuses a timeout above the cap
        log.warning("could not read transaction.max.timeout.ms of the sink cluster (%s); a transactions.timeout_ms "
                    "above it fails when the writers initialise their transactions", exc)
        return None


def check_transaction_timeout(checkpoint_id: int, timeout_ms: int, cap_ms: int | None) -> None:
    """Refuse, before any task starts, a transaction timeout the sink's brokers would refuse: every
    retry would fail the same way, so it is terminal and says what to change."""
    if cap_ms is not None and timeout_ms > cap_ms:
        raise CheckpointError(
            checkpoint_id, f"transactions.timeout_ms is {timeout_ms} ms, above the sink cluster's "
            f"transaction.max.timeout.ms of {cap_ms} ms: its brokers refuse to open such transactions. Lower "
            f"transactions.timeout_ms to at most {cap_ms}, or raise the brokers' transaction.max.timeout.ms")


def writer_settings(planned: PlannedWith, checkpoint_id: int, producer: ClientConfig,
                    topic_max_bytes: dict[str, int] | None = None, *, pipeline: str,
                    routes: tuple[str, ...] = ()) -> WriterSettings:
    """Everything a task writes with comes from what the checkpoint was planned with (its claim),
    never from the spec as it is now: ids, topics, timeout, and the sink connection in the dialect
    of the planned writer. ``routes``, ``sink.routes``' topics, are the transform's part (as the
    transform, they are the spec's as it is now).

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

    # Without a sink topic (the records land in the table alone) the writers take dead letters only: nothing is
    # bound for the sink topic, which the settings name as "" (a record sent there would be refused by Kafka).
    sink_max, sink_source = limit(planned.sink_topic or planned.dead_letter_topic)
    dead_max, dead_source = limit(planned.dead_letter_topic)
    routed = tuple((topic, *limit(topic)) for topic in routes)
    config = {**sink, **producer}
    batch = int(config.get("batch.size", THROUGHPUT_PRODUCER_CONFIG["batch.size"]))
    smallest = min(sink_max, dead_max, *(m for _, m, _ in routed))
    if smallest < batch:
        config["batch.size"] = smallest
    return WriterSettings(
        bootstrap=config.pop("bootstrap.servers"), producer_config=config,
        id_prefix=planned.id_prefix, pipeline=pipeline, checkpoint_id=checkpoint_id, timeout_ms=planned.timeout_ms,
        sink_topic=planned.sink_topic or "", dead_letter_topic=planned.dead_letter_topic,
        sink_max_bytes=sink_max, sink_limit=sink_source, dead_letter_max_bytes=dead_max, dead_letter_limit=dead_source,
        routes=routed, failpoints={name: action for name, action in failpoints.armed(prefix="job.").items()
                                   if name in WRITER_FAILPOINTS},
    )
