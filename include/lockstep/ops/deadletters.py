"""The committed dead letters of a pipeline, read from its dead-letter topic (``lockstep deadletters``)."""
from __future__ import annotations

__all__ = [
    "read_dead_letters",
]

from collections.abc import Iterable

from lockstep.errors import TerminalError, TransientError
from lockstep.kafka.topics import record_headers
from lockstep.spark.replay import DeadLetter, parse_dead_letter
from lockstep.spec import PipelineSpec


def read_dead_letters(spec: PipelineSpec) -> Iterable[tuple[str, DeadLetter]]:
    """Every committed dead letter of ``spec`` (read_committed, to the last stable offset), with
    where it is (``topic:partition@offset``)."""
    from confluent_kafka import Consumer, TopicPartition

    from lockstep.connections import kafka_config

    topic = spec.sink.dead_letter_topic
    consumer = Consumer({**kafka_config(spec.sink.kafka_conn_id), "group.id": f"lockstep-deadletters-{spec.name}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise TerminalError(f"{spec.path}: dead-letter topic {topic} cannot be read "
                                f"({metadata.error if metadata else 'not found'}); check sink.dead_letter_topic")
        consumer.assign([TopicPartition(topic, p, 0) for p in metadata.partitions])
        remaining = set(metadata.partitions)
        while remaining:
            for msg in consumer.consume(1000, timeout=5):
                error = msg.error()
                if error:
                    if error.code() == -191:  # _PARTITION_EOF
                        remaining.discard(msg.partition())
                        continue
                    raise TransientError(f"reading dead-letter topic {topic}: {error}; try again")
                where = f"{msg.topic()}:{msg.partition()}@{msg.offset()}"
                yield where, parse_dead_letter(record_headers(msg), msg.timestamp()[1], where)
    finally:
        consumer.close()
