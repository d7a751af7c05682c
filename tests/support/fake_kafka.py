"""In-memory stand-ins for the Kafka clients the coordinator uses, for unit tests of pure logic.

- ``FakeCommitter``: the committer's surface (``lockstep.kafka.committer.Committer``: describe,
  commit, abort, fence, list_open) over a table of transactions that behaves like a transaction
  coordinator: a writer opens an id (``begin``, as ``initTransactions`` + a first send would), commit
  and abort need the producer id and epoch of the open transaction, fencing re-initialises the id
  (the epoch moves on, what was open is aborted), and an id it never saw is ``Unknown``. What it
  committed, aborted and fenced is kept so tests assert on results.
- ``FakeSource``: the source cluster as ``lockstep.kafka.broker_offsets`` reads it: an admin client's
  ``list_topics`` / ``list_offsets`` (``lockstep.kafka.topics.TopicAdmin``: earliest, latest stable,
  by timestamp) and consumer group offsets read and committed through ``broker_offsets._group_consumer``.

States are the coordinator's own strings (DescribeTransactions' names), so whatever type the
committer hands out for them compares equal.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

ONGOING, PREPARE_COMMIT, COMPLETE_COMMIT = "Ongoing", "PrepareCommit", "CompleteCommit"
COMPLETE_ABORT, EMPTY, UNKNOWN = "CompleteAbort", "Empty", "Unknown"
OPEN = (ONGOING, PREPARE_COMMIT, "PrepareAbort", "PrepareEpochFence")


class FakeFencedError(Exception):
    """EndTxn for a producer id / epoch that no longer holds the transaction (the broker refuses it)."""


@dataclass(frozen=True)
class Observation:
    """What DescribeTransactions reports for one id: the fields the commit decision reads."""

    transactional_id: str
    state: str
    producer_id: int = -1
    epoch: int = -1
    start_time_ms: int = -1
    timeout_ms: int = -1


@dataclass
class FakeCommitter:
    """One sink cluster's transaction coordinator; ``clock`` is the broker's wall clock in ms."""

    clock: Callable[[], int]
    timeout_ms: int = 900_000
    transactions: dict[str, Observation] = field(default_factory=dict)
    committed: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)
    _next_producer_id: int = 1000

    # ---- what a writer does ---------------------------------------------------------------------
    def begin(self, transactional_id: str) -> tuple[int, int]:
        """A writer initialises the id and opens a transaction: (producer id, epoch) of its committable."""
        seen = self.transactions.get(transactional_id)
        if seen is None:
            self._next_producer_id += 1
            producer_id, epoch = self._next_producer_id, 0
        else:
            producer_id, epoch = seen.producer_id, seen.epoch + 1
        self.transactions[transactional_id] = Observation(transactional_id, ONGOING, producer_id, epoch,
                                                          self.clock(), self.timeout_ms)
        return producer_id, epoch

    def state(self, transactional_id: str) -> str:
        return self.describe([transactional_id])[transactional_id].state

    # ---- the committer's surface ------------------------------------------------------------------
    def __enter__(self) -> FakeCommitter:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def describe(self, transactional_ids: Iterable[str]) -> dict[str, Observation]:
        result = {}
        for tid in dict.fromkeys(transactional_ids):
            seen = self.transactions.get(tid)
            if seen is not None and seen.state == ONGOING and seen.start_time_ms + seen.timeout_ms <= self.clock():
                # the broker's own timeout: abort with one epoch bump, keeping start time and timeout
                seen = self.transactions[tid] = replace(seen, state=COMPLETE_ABORT, epoch=seen.epoch + 1)
            result[tid] = seen if seen is not None else Observation(tid, UNKNOWN)
        return result

    def commit(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        self._end(transactional_id, producer_id, epoch, COMPLETE_COMMIT)
        if transactional_id not in self.committed:
            self.committed.append(transactional_id)

    def abort(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        self._end(transactional_id, producer_id, epoch, COMPLETE_ABORT)
        self.aborted.append(transactional_id)

    def list_open(self, prefix: str, states: Iterable[str] = OPEN) -> list[str]:
        wanted = set(states)
        return sorted(tid for tid, seen in self.describe(list(self.transactions)).items()
                      if tid.startswith(prefix) and seen.state in wanted)

    def fence(self, transactional_id: str, timeout_s: float | None = None) -> Observation:
        """InitProducerId: whatever is open is aborted and the epoch moves past it (by two, as a
        re-initialisation does), so the earlier writer can never commit."""
        seen = self.transactions.get(transactional_id)
        if seen is None:
            self._next_producer_id += 1
            seen = Observation(transactional_id, EMPTY, self._next_producer_id, 0)
        else:
            seen = Observation(transactional_id, EMPTY, seen.producer_id, seen.epoch + 2)
        self.transactions[transactional_id] = seen
        self.fenced.append(transactional_id)
        return seen

    def _end(self, tid: str, producer_id: int, epoch: int, outcome: str) -> None:
        seen = self.describe([tid])[tid]
        if (seen.producer_id, seen.epoch) != (producer_id, epoch):
            raise FakeFencedError(f"{tid}: producer {producer_id}/{epoch} is fenced "
                                  f"(the coordinator has {seen.producer_id}/{seen.epoch}, {seen.state})")
        if seen.state == outcome:
            return  # ending again the same way succeeds, as the broker answers a retried EndTxn
        if seen.state != ONGOING:
            raise FakeFencedError(f"{tid}: no open transaction to end (state {seen.state})")
        self.transactions[tid] = replace(seen, state=outcome)


@dataclass
class FakePartition:
    log_start: int = 0
    #: per offset from ``log_start``: the record's timestamp in ms
    timestamps: list[int] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.log_start + len(self.timestamps)


class FakeSource:
    """A source cluster: topics of partitions with records (only offsets and timestamps), and consumer
    groups' committed offsets. Use ``admin`` as ``Pipeline.source_admin`` and ``install(monkeypatch)``
    so ``lockstep.kafka.broker_offsets`` reads and commits group offsets here."""

    def __init__(self) -> None:
        self.topics: dict[str, list[FakePartition]] = {}
        self.groups: dict[str, dict[tuple[str, int], int]] = {}
        self.topic_ids: dict[str, str] = {}
        self.admin = _FakeAdmin(self)

    def create_topic(self, name: str, partitions: int) -> None:
        """A new topic, with a new topic id (also when one of that name existed before: recreation)."""
        self.topics[name] = [FakePartition() for _ in range(partitions)]
        self.topic_ids[name] = f"{name}-id-{len(self.topic_ids) + 1}-{uuid.uuid4().hex[:6]}"

    def produce(self, topic: str, partition: int, count: int, timestamp_ms: int = 0) -> None:
        self.topics[topic][partition].timestamps.extend([timestamp_ms] * count)

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Retention: records before ``before`` are gone; the log starts there."""
        part = self.topics[topic][partition]
        drop = max(0, min(before, part.end) - part.log_start)
        part.timestamps, part.log_start = part.timestamps[drop:], part.log_start + drop

    def group_offsets(self, group: str) -> dict[str, int]:
        """Committed offsets keyed like checkpoint end offsets ("topic:partition")."""
        return {f"{t}:{p}": o for (t, p), o in sorted(self.groups.get(group, {}).items())}

    def install(self, monkeypatch: Any) -> FakeSource:
        """Group offsets are read and written through a consumer ``lockstep.kafka.broker_offsets`` builds from a
        config dict, not an injected client: patch its one constructor."""
        from lockstep.kafka import broker_offsets

        monkeypatch.setattr(broker_offsets, "_group_consumer", lambda config, group: _FakeGroupConsumer(self, group))
        return self


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class _FakeAdmin:
    def __init__(self, source: FakeSource) -> None:
        self._source = source

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        found = {name: SimpleNamespace(error=None, partitions={i: SimpleNamespace(id=i) for i in range(len(parts))})
                 for name, parts in self._source.topics.items() if topic is None or name == topic}
        return SimpleNamespace(topics=found)

    def describe_topics(self, topics: Any, **kwargs: Any) -> dict[str, Future]:
        return {name: _done(SimpleNamespace(topic_id=self._source.topic_ids[name])) for name in topics.topic_names}

    def list_offsets(self, request: dict[Any, Any], isolation_level: Any = None, request_timeout: float = -1,
                     **_: Any) -> dict[Any, Future]:
        """Answers with ``OffsetSpec``'s own encoding: -2 earliest, -1 latest, else a timestamp."""
        result = {}
        for ktp, spec in request.items():
            part = self._source.topics[ktp.topic][ktp.partition]
            wanted = spec._value
            if wanted == -2:
                offset = part.log_start
            elif wanted == -1:
                offset = part.end  # no open transactions in the fake source: the LSO is the end
            else:
                offset = next((part.log_start + i for i, ts in enumerate(part.timestamps) if ts >= wanted), -1)
            result[ktp] = _done(SimpleNamespace(offset=offset))
        return result


class _FakeGroupConsumer:
    def __init__(self, source: FakeSource, group: str) -> None:
        self._source, self._group = source, group

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        from confluent_kafka import TopicPartition as KTP

        offsets = self._source.groups.get(self._group, {})
        return [KTP(p.topic, p.partition, offsets.get((p.topic, p.partition), -1001)) for p in partitions]

    def commit(self, offsets: list[Any], asynchronous: bool = True) -> None:
        group = self._source.groups.setdefault(self._group, {})
        for p in offsets:
            group[(p.topic, p.partition)] = p.offset

    def close(self) -> None:
        pass
