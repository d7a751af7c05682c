"""Partitions, offsets and offset ranges: the values every step passes around.

Offsets are always "next offset to read" (committed offset = last processed + 1), and a range is
half-open `[start, end)`, so consecutive checkpoints tile a partition when `start(N+1) == end(N)`.
"""

from __future__ import annotations

__all__ = [
    "OffsetRange", "Offsets", "TopicPartition", "offset_of", "offsets_from_json",
]

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeGuard

from lockstep.errors import TerminalError


@dataclass(frozen=True, order=True)
class TopicPartition:
    """One Kafka partition; ordered by topic then partition so plans are deterministic."""

    topic: str
    partition: int

    @property
    def key(self) -> str:
        """`topic:partition`, the JSON object key (topic names cannot contain ':')."""
        return f"{self.topic}:{self.partition}"

    @classmethod
    def from_key(cls, key: str) -> TopicPartition:
        topic, sep, partition = key.rpartition(":")
        if not sep or not topic or not partition.isdigit():
            raise ValueError(f"{key!r} is not a 'topic:partition' key")
        return cls(topic, int(partition))

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records `[start, end)` of one partition: the slice a checkpoint owns."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range {self.topic}:{self.partition} [{self.start}, {self.end})")

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def count(self) -> int:
        """Offsets covered; an upper bound on records, since transaction markers take offsets too."""
        return self.end - self.start

    @property
    def is_empty(self) -> bool:
        return self.end == self.start

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end}

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> OffsetRange:
        topic, partition, start, end = (doc[k] for k in ("topic", "partition", "start", "end"))
        if not (isinstance(topic, str) and _is_int(partition) and _is_int(start) and _is_int(end)):
            raise ValueError(f"offset range needs a string topic and integer partition/start/end, got {dict(doc)!r}")
        return cls(topic, partition, start, end)

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}[{self.start},{self.end})"


Offsets = Mapping[TopicPartition, int]


def _is_int(value: object) -> TypeGuard[int]:
    """An integer of JSON: Python's bool is an int, JSON's true is not."""
    return isinstance(value, int) and not isinstance(value, bool)


def offsets_to_json(offsets: Offsets) -> dict[str, int]:
    return {tp.key: offsets[tp] for tp in sorted(offsets)}


def offsets_from_json(doc: Mapping[str, object]) -> dict[TopicPartition, int]:
    result: dict[TopicPartition, int] = {}
    for key, value in doc.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"offset of {key} must be a non-negative integer, got {value!r}")
        result[TopicPartition.from_key(key)] = value
    return result


def offset_of(table: Offsets, tp: TopicPartition) -> int:
    """The offset of ``tp`` in ``table``, refused with the partition named when it has none."""
    try:
        return table[tp]
    except KeyError:
        raise TerminalError(f"no offsets known for partition {tp.key}; is the partition list current?") from None
