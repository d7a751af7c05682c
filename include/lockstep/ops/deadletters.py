"""The committed dead letters of a pipeline, read from its dead-letter topic (``lockstep deadletters``)."""
from __future__ import annotations

__all__ = [
    "read_dead_letters",
]

from collections.abc import Iterable

from lockstep.errors import TerminalError
from lockstep.spark.dead_letter_replay import DeadLetter, parse_dead_letter
from lockstep.spec import PipelineSpec


def read_dead_letters(spec: PipelineSpec) -> Iterable[tuple[str, DeadLetter]]:
    """Every committed dead letter of ``spec`` (read_committed, to the last stable offset), with
    where it is (``topic:partition@offset``)."""
    from lockstep.connections import kafka_config
    from lockstep.kafka.reader import read_committed

    def missing(topic: str, reason: str) -> None:
        raise TerminalError(f"{spec.path}: dead-letter topic {topic} cannot be read ({reason}); "
                            "check sink.dead_letter_topic")

    for record in read_committed(kafka_config(spec.sink.kafka_conn_id), (spec.sink.dead_letter_topic,),
                                 f"lockstep-deadletters-{spec.name}", lambda topic: f"reading dead-letter topic {topic}",
                                 missing=missing):
        yield record.where, parse_dead_letter(record.headers, record.timestamp_ms, record.where)
