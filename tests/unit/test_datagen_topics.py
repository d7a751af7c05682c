"""``lockstep_dev.datagen.wait_for_partitions``: the demo never reads a topic it just created before the
metadata lists its partitions (its first run once read 0 partitions of ``customers`` and divided by them)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from lockstep_dev import datagen


class Metadata:
    """``list_topics`` answers from a script: per topic, the partition count (with leaders) of each call in
    turn; None for a topic the broker does not know yet (an error in its metadata), -1 for partitions without
    a leader yet. The last answer repeats."""

    def __init__(self, **script: list[int | None]) -> None:
        self.script = script
        self.calls: list[str | None] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> SimpleNamespace:
        self.calls.append(topic)
        assert topic is not None
        answers = self.script[topic]
        n = answers[min(len([c for c in self.calls if c == topic]) - 1, len(answers) - 1)]
        if n is None:
            return SimpleNamespace(topics={topic: SimpleNamespace(error="UNKNOWN_TOPIC_OR_PART", partitions={})})
        leader = -1 if n < 0 else 1
        parts = {i: SimpleNamespace(id=i, leader=leader, error=None) for i in range(abs(n))}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=parts)})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_a_topic_just_created_is_awaited_until_its_partitions_and_leaders_are_listed():
    admin, clock = Metadata(customers=[None, 0, -2, 2], orders=[4]), Clock()
    assert datagen.wait_for_partitions(admin, {"customers": 2, "orders": None}, 30, clock=clock,
                                       sleep=clock.sleep) == {"customers": 2, "orders": 4}
    assert admin.calls.count("customers") == 4 and admin.calls.count("orders") == 1  # a listed topic: once
    assert clock.now < 1


def test_fewer_partitions_than_created_are_awaited_too():
    admin, clock = Metadata(t=[1, 1, 3]), Clock()
    assert datagen.wait_for_partitions(admin, {"t": 3}, 30, clock=clock, sleep=clock.sleep) == {"t": 3}


def test_metadata_that_never_comes_fails_at_the_deadline_saying_what_was_awaited():
    admin, clock = Metadata(customers=[0], orders=[4]), Clock()
    with pytest.raises(RuntimeError) as failed:
        datagen.wait_for_partitions(admin, {"customers": 2, "orders": 4}, 5, where="Kafka at k:9092", clock=clock,
                                    sleep=clock.sleep)
    message = str(failed.value)
    assert message.startswith("Kafka at k:9092 did not list the partitions of topic customers (0 with a leader, "
                              "2 expected) within 5 s"), message
    assert "orders" not in message and "lockstep dev status" in message
    assert 5 <= clock.now < 6


def test_partition_count_never_answers_0(monkeypatch):
    """What ``produce_customers`` and the other generators divide by: the count once listed."""
    admin = Metadata(customers=[None, 0, 2])
    monkeypatch.setattr(datagen, "_admin", lambda bootstrap: admin)
    assert datagen.partition_count("k:9092", "customers") == 2
