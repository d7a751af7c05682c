"""Offsets as the Kafka cluster reports them, and the offsets Lockstep tells it: log start offsets,
last stable offsets, high watermarks, offsets for a time, and consumer group offsets.
"""
from __future__ import annotations

__all__ = [
    "log_start_offsets",
]

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from lockstep.kafka.topics import TIMEOUT_S, TopicAdmin, with_retries
from lockstep.model.offsets import TopicPartition

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import OffsetSpec

    from lockstep.kafka.client_configs import ClientConfig

log = logging.getLogger(__name__)


def _list_offsets(admin: TopicAdmin, tps: list[TopicPartition], spec: OffsetSpec,
                  committed: bool = True) -> dict[TopicPartition, int]:
    from confluent_kafka import IsolationLevel
    from confluent_kafka import TopicPartition as KTP

    if not tps:
        return {}
    request = {KTP(tp.topic, tp.partition): spec for tp in tps}
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED

    def call() -> dict[TopicPartition, int]:
        futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=TIMEOUT_S)
        return {TopicPartition(k.topic, k.partition): f.result().offset for k, f in futures.items()}

    return with_retries(f"cannot list offsets of {', '.join(tp.key for tp in tps)}", call)


def log_start_offsets(admin: TopicAdmin, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    from confluent_kafka.admin import OffsetSpec

    return _list_offsets(admin, tps, OffsetSpec.earliest())


def last_stable_offsets(admin: TopicAdmin, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """With read_committed isolation, "latest" is the LSO: nothing past an open transaction."""
    from confluent_kafka.admin import OffsetSpec

    return _list_offsets(admin, tps, OffsetSpec.latest())


def high_watermarks(admin: TopicAdmin, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """With read_uncommitted isolation, "latest" is the high watermark: open transactions included.
    High watermark - last stable offset is how many records read_committed readers are held back."""
    from confluent_kafka.admin import OffsetSpec

    return _list_offsets(admin, tps, OffsetSpec.latest(), committed=False)


def offsets_for_time(admin: TopicAdmin, tps: list[TopicPartition], timestamp_ms: int) -> dict[TopicPartition, int | None]:
    """Per partition the offset of the first record with a timestamp at or after ``timestamp_ms``;
    None where there is none (Kafka answers -1)."""
    from confluent_kafka.admin import OffsetSpec

    found = _list_offsets(admin, tps, OffsetSpec.for_timestamp(timestamp_ms))
    return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}


def _group_consumer(admin_config: ClientConfig, group: str) -> Consumer:
    """A consumer that only reads and commits the group's offsets; it never joins the group.

    The consumer API is used rather than the admin group-offsets calls: librdkafka's
    admin path crashed the process on COORDINATOR_LOAD_IN_PROGRESS here, while the
    consumer's committed()/commit() retry it internally.
    """
    from confluent_kafka import Consumer

    config = {k: v for k, v in admin_config.items() if k not in ("log_level",)}
    return Consumer({**config, "group.id": group, "enable.auto.commit": False, "log_level": 3})


def group_offsets(kafka: ClientConfig, group: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Committed offsets of the consumer group; partitions without one are left out."""
    from confluent_kafka import TopicPartition as KTP

    consumer = _group_consumer(kafka, group)
    try:
        found = with_retries(f"cannot read offsets of consumer group {group}",
                              lambda: consumer.committed([KTP(tp.topic, tp.partition) for tp in tps], timeout=TIMEOUT_S))
    finally:
        consumer.close()
    return {TopicPartition(k.topic, k.partition): k.offset for k in found if k.offset >= 0}


def publish_offsets(kafka: ClientConfig, group: str, offsets: Mapping[TopicPartition, int]) -> None:
    from confluent_kafka import TopicPartition as KTP

    if not offsets:
        return
    consumer = _group_consumer(kafka, group)
    try:
        with_retries(f"cannot publish offsets to consumer group {group}",
                      lambda: consumer.commit(offsets=[KTP(tp.topic, tp.partition, o) for tp, o in sorted(offsets.items())],
                                              asynchronous=False))
    finally:
        consumer.close()
