"""`lockstep.kafka.reader.read_committed`, the one read_committed reader of verify (both kinds) and
deadletters, over a fake consumer: records in the consumer's order to each partition's end of
committed data (librdkafka's partition EOF), missing topics, a read error, and the consumer closed."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lockstep.errors import TransientError
from lockstep.kafka import reader
from lockstep.kafka.reader import PARTITION_EOF, CommittedRecord, read_committed


class Error:
    def __init__(self, code: int, text: str) -> None:
        self._code, self._text = code, text

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._text


class Msg:
    def __init__(self, topic: str, partition: int, offset: int = -1, value: bytes | None = None,
                 headers: list[tuple[str, bytes | None]] | None = None, error: Error | None = None) -> None:
        self._topic, self._partition, self._offset, self._value = topic, partition, offset, value
        self._headers, self._error = headers, error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return b"k"

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_700_000_000_000 + self._offset

    def error(self) -> Error | None:
        return self._error


def eof(topic: str, partition: int) -> Msg:
    return Msg(topic, partition, error=Error(PARTITION_EOF, "Broker: No more messages"))


class FakeConsumer:
    """A consumer of ``topics`` (name -> partition count) that returns ``batches`` in turn."""

    def __init__(self, config: dict[str, Any], topics: dict[str, int], batches: list[list[Msg]]) -> None:
        self.config, self.topics, self.batches = config, topics, iter(batches)
        self.assigned: list[tuple[str, int, int]] = []
        self.closed = False

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        found = {t: SimpleNamespace(partitions=dict.fromkeys(range(n)), error=None) for t, n in self.topics.items()}
        return SimpleNamespace(topics=found)

    def assign(self, partitions: list[Any], /) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Msg]:
        return next(self.batches, [])

    def pause(self, partitions: list[Any], /) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def reading(topic: str) -> str:
    return f"reading {topic} to verify p"


def test_reads_every_partition_to_its_end_of_committed_data_from_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeConsumer({}, {"out": 2, "dlq": 1}, [
        [Msg("out", 0, 0, b"a", [("h", b"1")]), Msg("out", 1, 0, b"b"), eof("out", 1)],
        [],  # a batch that brought nothing: the reader waits on
        [Msg("out", 0, 1, b"c"), eof("out", 0), eof("dlq", 0)],
        [Msg("out", 0, 2, b"never read: every partition had ended")],
    ])
    configs: list[dict[str, Any]] = []
    monkeypatch.setattr(reader, "_consumer", lambda config: configs.append(config) or fake)
    batches = []

    records = list(read_committed({"bootstrap.servers": "b:9092"}, ("out", "dlq"), "lockstep-verify-p", reading,
                                  after_batch=lambda: batches.append(1)))

    assert [r.where for r in records] == ["out:0@0", "out:1@0", "out:0@1"]
    assert records[0] == CommittedRecord("out", 0, 0, b"k", b"a", [("h", b"1")], 1_700_000_000_000)
    assert records[1].headers == [] and records[2].value == b"c"
    assert sorted(fake.assigned) == [("dlq", 0, 0), ("out", 0, 0), ("out", 1, 0)]  # from offset 0, log start or not
    assert len(batches) == 3 and fake.closed
    (config,) = configs
    assert config == {"bootstrap.servers": "b:9092", "group.id": "lockstep-verify-p",
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "enable.partition.eof": True, "auto.offset.reset": "earliest"}


def test_a_missing_topic_is_skipped_or_handed_to_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeConsumer({}, {"out": 1}, [[eof("out", 0)]])
    monkeypatch.setattr(reader, "_consumer", lambda config: fake)
    assert list(read_committed({}, ("out", "gone"), "g", reading)) == []
    assert fake.assigned == [("out", 0, 0)]

    def refuse(topic: str, reason: str) -> None:
        raise LookupError(f"{topic}: {reason}")

    fake = FakeConsumer({}, {"out": 1}, [[eof("out", 0)]])
    with pytest.raises(LookupError, match="^gone: not found$"):
        list(read_committed({}, ("out", "gone"), "g", reading, missing=refuse))
    assert fake.closed


def test_a_record_the_consumer_cannot_read_is_transient_and_says_what_was_read(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeConsumer({}, {"out": 1}, [[Msg("out", 0, 0, b"a"), Msg("out", 0, error=Error(-195, "transport"))]])
    monkeypatch.setattr(reader, "_consumer", lambda config: fake)
    read = read_committed({}, ("out",), "g", reading)
    assert next(read).where == "out:0@0"
    with pytest.raises(TransientError, match=r"^reading out to verify p: transport; try again$"):
        next(read)
    assert fake.closed


class WaitingConsumer(FakeConsumer):
    """librdkafka's ``consume``: a batch short of ``num_messages`` comes back only once the call's whole
    ``timeout`` has passed. ``waited`` adds those waits up."""

    waited = 0.0

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Msg]:
        batch = super().consume(num_messages, timeout)
        if len(batch) < num_messages:
            self.waited += timeout
        return batch


def test_reading_a_small_topic_to_its_end_idles_a_fraction_of_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every verify reads its sink to the end: each call that comes back short of a full batch waits its timeout.
    fake = WaitingConsumer({}, {"out": 2}, [[Msg("out", 0, 0, b"a"), eof("out", 0)], [], [eof("out", 1)]])
    monkeypatch.setattr(reader, "_consumer", lambda config: fake)
    assert [r.where for r in read_committed({}, ("out",), "g", reading)] == ["out:0@0"]
    assert fake.waited <= 0.5, f"the read idled {fake.waited:g} s at the end of a 1-record topic"
