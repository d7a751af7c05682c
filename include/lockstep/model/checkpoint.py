"""Checkpoint metadata: the immutable documents that record each step of a checkpoint.

Each step writes its own object (claim, prepared, completed or aborted), never rewriting an earlier
one, so status can only move forward. Every document carries a schema id; reading a document with
another schema, or one missing a field, fails with `MetadataError` naming the object, because
these documents decide what gets committed and must never be half-understood (`lockstep.model.documents`
reads them). A savepoint, a named copy of a completed checkpoint's restore point, is `lockstep.model.savepoint`.
"""

from __future__ import annotations

__all__ = [
    "ABORTED_SCHEMA", "AbortedCheckpoint", "CheckpointClaim", "CheckpointStage", "CheckpointStatus", "CheckpointView",
    "CompletedCheckpoint", "History", "PlannedWith", "PreparedCheckpoint", "PreparedTransaction", "Repair",
    "Rerun", "RunFailure", "SpecFingerprint",
]

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

from lockstep.errors import CheckpointError, MetadataError
from lockstep.iceberg.staged_table import StagedTable
from lockstep.model.documents import Reader, build
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.model.output_contract import COMMITTABLE_SCHEMA, committable_doc
from lockstep.model.savepoint import RestorePoint
from lockstep.model.state_manifest import StateManifest, optional_manifest
from lockstep.model.transactional_ids import MAX_AUTO_PARALLELISM
from lockstep.tables.pins import (
    TablePin,
    TableVersion,
    pins_from_json,
    pins_to_json,
    tables_from_json,
    tables_to_json,
)

CLAIM_SCHEMA = "lockstep.checkpoint.claim/1"
PREPARED_SCHEMA = "lockstep.checkpoint.prepared/1"
COMPLETED_SCHEMA = "lockstep.checkpoint.completed/1"
ABORTED_SCHEMA = "lockstep.checkpoint.aborted/1"
RUN_FAILURE_SCHEMA = "lockstep.checkpoint.run-failure/1"
TRANSACTION_SCHEMA = COMMITTABLE_SCHEMA  # the writers' output contract defines it


class CheckpointStatus(str, Enum):
    CLAIMED = "claimed"
    PREPARED = "prepared"
    COMPLETED = "completed"
    ABORTED = "aborted"


class CheckpointStage(str, Enum):
    """How far a checkpoint has got, as the names in its folder tell without reading them: claimed, prepared, or
    settled (completed or aborted, which only its outcome's content tells apart)."""

    CLAIMED = "claimed"
    PREPARED = "prepared"
    SETTLED = "settled"


_FORWARD: dict[CheckpointStatus, frozenset[CheckpointStatus]] = {
    CheckpointStatus.CLAIMED: frozenset({CheckpointStatus.PREPARED, CheckpointStatus.ABORTED}),
    CheckpointStatus.PREPARED: frozenset({CheckpointStatus.COMPLETED, CheckpointStatus.ABORTED}),
    CheckpointStatus.COMPLETED: frozenset(),
    CheckpointStatus.ABORTED: frozenset(),
}


def can_transition(old: CheckpointStatus, new: CheckpointStatus) -> bool:
    """Status moves forward only; completed and aborted are final (the atomic-claim invariant)."""
    return new in _FORWARD[old]


@dataclass(frozen=True)
class PlannedWith:
    """The spec values a checkpoint depends on, as they were when it was planned.

    Pinned in the claim because every later step of the checkpoint (its Spark run, commit, and the
    next run's recovery) must use them rather than the spec file as it is by then: a prefix edited
    while the checkpoint is in flight must neither give its transactions other ids nor make
    recovery fence them under a prefix they do not have. Stored nested like the spec's YAML, so
    ``claim.json`` reads as the part of the spec it was planned with.
    """

    source_topics: tuple[str, ...]
    source_kafka_conn_id: str
    #: None: the records land in the sink's Iceberg table alone (``sink.topic`` unset).
    sink_topic: str | None
    dead_letter_topic: str
    sink_writer: str
    sink_kafka_conn_id: str
    id_prefix: str
    timeout_ms: int
    #: ``sink.parallelism``: the most tasks (transactions) the run writes with; "auto" (the cluster's
    #: default parallelism, at most ``MAX_AUTO_PARALLELISM``); None in claims of earlier versions,
    #: whose runs wrote one transaction per non-empty range.
    sink_parallelism: int | str | None = "auto"

    #: (spec field, attribute): the names users know these values by, in logs and errors.
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("source.topics", "source_topics"), ("source.kafka_conn_id", "source_kafka_conn_id"),
        ("sink.topic", "sink_topic"), ("sink.dead_letter_topic", "dead_letter_topic"),
        ("sink.writer", "sink_writer"), ("sink.kafka_conn_id", "sink_kafka_conn_id"),
        ("transactions.id_prefix", "id_prefix"), ("transactions.timeout_ms", "timeout_ms"),
        ("sink.parallelism", "sink_parallelism"),
    )

    def __post_init__(self) -> None:
        if not self.source_topics or not all(isinstance(t, str) and t for t in self.source_topics):
            raise ValueError(f"source.topics must be a non-empty list of topic names, got {self.source_topics!r}")
        for spec_field, attr in self.FIELDS:
            value = getattr(self, attr)
            if attr == "sink_topic" and value is None:
                continue
            if attr not in ("source_topics", "timeout_ms", "sink_parallelism") and (not isinstance(value, str) or not value):
                raise ValueError(f"{spec_field} must be a non-empty string, got {value!r}")
        if isinstance(self.timeout_ms, bool) or not isinstance(self.timeout_ms, int) or self.timeout_ms <= 0:
            raise ValueError(f"transactions.timeout_ms must be a positive integer, got {self.timeout_ms!r}")
        p = self.sink_parallelism
        if p is not None and p != "auto" and (isinstance(p, bool) or not isinstance(p, int) or p < 1):
            raise ValueError(f"sink.parallelism must be auto or a positive integer, got {p!r}")

    def value(self, spec_field: str) -> object:
        return getattr(self, dict(self.FIELDS)[spec_field])

    def to_json(self) -> dict[str, object]:
        return {
            "source": {"topics": list(self.source_topics), "kafka_conn_id": self.source_kafka_conn_id},
            "sink": {"topic": self.sink_topic, "dead_letter_topic": self.dead_letter_topic,
                     "writer": self.sink_writer, "kafka_conn_id": self.sink_kafka_conn_id,
                     **({"parallelism": self.sink_parallelism} if self.sink_parallelism is not None else {})},
            "transactions": {"id_prefix": self.id_prefix, "timeout_ms": self.timeout_ms},
        }

    @classmethod
    def from_json(cls, doc: object, key: str = "<planned_with>", path: str = "planned_with") -> PlannedWith:
        r = Reader(doc, key, None, path)
        source, sink, txn = r.nested("source"), r.nested("sink"), r.nested("transactions")
        topics = source.get("topics", list)
        if not all(isinstance(t, str) for t in topics):
            raise MetadataError(key, f"field '{path}.source.topics' must list topic names, got {topics!r}")
        return build(key, lambda: cls(
            source_topics=tuple(topics), source_kafka_conn_id=source.get("kafka_conn_id", str),
            sink_topic=sink.get("topic", str, optional=True), dead_letter_topic=sink.get("dead_letter_topic", str),
            sink_writer=sink.get("writer", str), sink_kafka_conn_id=sink.get("kafka_conn_id", str),
            id_prefix=txn.get("id_prefix", str), timeout_ms=txn.get("timeout_ms", int),
            # Added later: claims of earlier versions lack it (their runs wrote a transaction per range).
            sink_parallelism=sink.get("parallelism", (int, str)) if "parallelism" in sink.doc else None,
        ))


@dataclass(frozen=True)
class SpecFingerprint:
    """What a claim's pins (its schema ids, its tables' versions, its clock) came from: a digest of each spec
    field they depend on, by the spec's name for it (``sink.value.schema``, ``tables.customers.topic``...;
    `lockstep.rules.replay.fingerprint` says which). A replay of an aborted checkpoint reuses that one's
    pins only when its fingerprint is the spec's now (`lockstep.rules.replay`): the fields that differ
    name what changed. Digests, not values: a schema's text does not belong in every claim."""

    fields: Mapping[str, str]

    @staticmethod
    def of(values: Mapping[str, object]) -> SpecFingerprint:
        """The fingerprint of spec values (JSON-able) by field: each one's canonical JSON, digested."""
        return SpecFingerprint({name: _digest(value) for name, value in values.items()})

    @property
    def digest(self) -> str:
        """One digest of every field's (what two fingerprints compare by)."""
        return _digest(dict(self.fields))

    def changed(self, now: SpecFingerprint) -> tuple[str, ...]:
        """The fields whose digest differs from ``now``'s, or that only one of the two has, sorted."""
        return tuple(sorted(name for name in set(self.fields) | set(now.fields)
                            if self.fields.get(name) != now.fields.get(name)))

    def to_json(self) -> dict[str, object]:
        return {"digest": self.digest, "fields": dict(sorted(self.fields.items()))}

    @classmethod
    def from_json(cls, doc: object, key: str, path: str = "fingerprint") -> SpecFingerprint:
        r = Reader(doc, key, None, path)
        fields = r.get("fields", dict)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items()):
            raise MetadataError(key, f"field '{path}.fields' must map spec fields to digests")
        return cls(dict(fields))


def _digest(value: object) -> str:
    """A stable digest of a JSON-able value (16 hex digits of its canonical JSON's SHA-256)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Rerun:
    """The share of an earlier stateful checkpoint's output that a claim writes again: the output of
    tasks ``tasks`` (of ``of_tasks``) of checkpoint ``checkpoint``, whose transactions the broker
    aborted after others were committed. The run computes that checkpoint again from its own claim
    (its ranges, its base state, its pinned clock) and writes only those tasks' records
    (`lockstep.rules.output_tasks`)."""

    checkpoint: int
    tasks: tuple[int, ...]
    of_tasks: int

    def __post_init__(self) -> None:
        if not self.tasks or any(not 0 <= t < self.of_tasks for t in self.tasks):
            raise ValueError(f"a rerun names tasks in [0, {self.of_tasks}), got {self.tasks}")

    def to_json(self) -> dict[str, object]:
        return {"checkpoint": self.checkpoint, "tasks": list(self.tasks), "of_tasks": self.of_tasks}

    @classmethod
    def from_json(cls, doc: object, key: str, path: str = "rerun") -> Rerun:
        r = Reader(doc, key, None, path)
        tasks = r.get("tasks", list)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in tasks):
            raise MetadataError(key, f"field '{path}.tasks' must list task indexes")
        return build(key, lambda: cls(r.get("checkpoint", int), tuple(tasks), r.get("of_tasks", int)))


@dataclass(frozen=True)
class CheckpointClaim:
    """Written first, with a conditional create: whoever writes it owns the checkpoint id.

    ``planned_with`` is None only for claims written before Lockstep recorded it (the same
    ``claim/1`` schema without the field): their steps fall back to the spec's current values.
    """

    pipeline: str
    checkpoint_id: int
    run_id: str
    claimed_at: str
    ranges: tuple[OffsetRange, ...]
    start_source: str
    restored_from: str | None = None
    skipped: Mapping[str, int] = field(default_factory=dict)
    planned_with: PlannedWith | None = None
    #: Each source topic's topic id when the checkpoint was planned (a recreated topic has a new one);
    #: empty in claims of earlier versions, which are then not checked.
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    #: A stateful pipeline's state this checkpoint starts from: the manifest of the checkpoint (or
    #: savepoint) its start offsets come from; None for a stateless pipeline or the first checkpoint.
    state_base: StateManifest | None = None
    #: The wall-clock time (epoch ms) the checkpoint's run may read, pinned when planned: the "now" of
    #: the watermark's idleness. Every attempt over this claim reads this one, so a retry, a repair or
    #: a replay decides as the first attempt did (`lockstep.rules.pinned.pinned_clock`). None in claims
    #: of earlier versions, whose clock is then their ``claimed_at``.
    clock_ms: int | None = None
    #: The claim reads no records and still runs its stateful operator: with ``idle_advance``, the
    #: watermark moves with the pinned clock past a pending timer (a window, a function's timer) while
    #: the source is quiet (`lockstep.rules.watermarks.fires_without_records`). It then writes through
    #: one transaction, which recovery must fence like any other.
    fires_timers: bool = False
    #: The lost share of the previous checkpoint's output that this one writes again (a stateful
    #: partial commit's repair), or None.
    rerun: Rerun | None = None
    #: The registry schemas the checkpoint reads and writes with, pinned when planned: a source part's
    #: reader schema (its subject's latest version, when the spec declares none) and a sink part's schema,
    #: by spec part (``source.value``, ``sink.value``, ...). Every attempt, a repair's recomputation and a
    #: replay decode into and encode with these, whatever versions are registered since. Empty for a
    #: pipeline without registry formats and in claims of earlier versions.
    schema_ids: Mapping[str, int] = field(default_factory=dict)
    #: Each table of the spec (`lockstep.tables.pins`): the version the checkpoint starts from and the
    #: offsets of its topic it reads on top, pinned when planned. Empty without tables.
    tables: Mapping[str, TablePin] = field(default_factory=dict)
    #: What its pins (``clock_ms``, ``schema_ids``, ``tables``) came from (`SpecFingerprint`): a replay of
    #: this checkpoint, should it abort, reuses them only while the spec's fingerprint is the same. None in
    #: claims of earlier versions, whose replays then take fresh pins but the clock.
    fingerprint: SpecFingerprint | None = None
    #: The aborted checkpoint whose ranges this one replays with its pins (None: fresh pins).
    replays: int | None = None
    #: A pipelined checkpoint (`lockstep.rules.pipelining`): the checkpoint still in flight it was planned on
    #: top of. Its ranges start where that one's end and its state is that one's prepared state, so it
    #: commits only after that one completed as prepared, and is aborted when it did not. None: planned on
    #: a settled history, as every claim of earlier versions.
    after: int | None = None
    #: Which code computes its output (`lockstep.steps.code_version.code_fingerprint`: the transform's source or
    #: query, the routes, the state operator, the joins), so tools can say where the code changed and verify
    #: sets aside what other code wrote differently. Read by no step of the checkpoint: its output does not
    #: depend on it. None in claims of earlier versions.
    code: SpecFingerprint | None = None

    @property
    def needs_spark(self) -> bool:
        """Whether the run starts Spark: it has records to read, timers to fire, or a share to write again."""
        return any(not r.is_empty for r in self.ranges) or self.fires_timers or self.rerun is not None

    @property
    def clock(self) -> int:
        """The pinned wall-clock time in epoch ms (``claimed_at`` for claims of earlier versions)."""
        if self.clock_ms is not None:
            return self.clock_ms
        from datetime import datetime

        return int(datetime.fromisoformat(self.claimed_at).timestamp() * 1000)

    @property
    def end_offsets(self) -> dict[str, int]:
        return {r.tp.key: r.end for r in self.ranges}

    @property
    def task_count(self) -> int:
        """The most Spark tasks, and so transactional ids ``0 .. task_count-1``, the run may write with:
        one per non-empty range, at most ``sink.parallelism`` as planned (``auto``: at most
        ``MAX_AUTO_PARALLELISM``; claims of earlier versions: one per non-empty range)."""
        ranges = sum(1 for r in self.ranges if not r.is_empty) or (1 if self.fires_timers or self.rerun else 0)
        bound = self.planned_with.sink_parallelism if self.planned_with is not None else None
        if bound == "auto":
            bound = MAX_AUTO_PARALLELISM
        return min(ranges, bound) if isinstance(bound, int) else ranges

    def to_json(self) -> dict[str, object]:
        doc = {
            "schema": CLAIM_SCHEMA, "pipeline": self.pipeline, "checkpoint_id": self.checkpoint_id,
            "run_id": self.run_id, "claimed_at": self.claimed_at, "ranges": [r.to_json() for r in self.ranges],
            "start_source": self.start_source, "restored_from": self.restored_from, "skipped": dict(self.skipped),
        }
        if self.planned_with is not None:  # absent, as in claims of earlier versions, when unknown
            doc["planned_with"] = self.planned_with.to_json()
        if self.topic_ids:
            doc["topic_ids"] = dict(self.topic_ids)
        if self.state_base is not None:
            doc["state_base"] = self.state_base.to_json()
        if self.clock_ms is not None:
            doc["clock_ms"] = self.clock_ms
        if self.fires_timers:
            doc["fires_timers"] = True
        if self.rerun is not None:
            doc["rerun"] = self.rerun.to_json()
        if self.schema_ids:
            doc["schema_ids"] = dict(self.schema_ids)
        if self.tables:
            doc["tables"] = pins_to_json(self.tables)
        if self.fingerprint is not None:
            doc["fingerprint"] = self.fingerprint.to_json()
        if self.replays is not None:
            doc["replays"] = self.replays
        if self.after is not None:
            doc["after"] = self.after
        if self.code is not None:
            doc["code"] = self.code.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: object, key: str = "<claim>") -> CheckpointClaim:
        r = Reader(doc, key, CLAIM_SCHEMA)
        # An added field, not a new schema: earlier versions ignore it and keep their old behaviour,
        # and their claims (without it) stay readable here.
        raw = r.doc.get("planned_with")
        planned_with = None if raw is None else PlannedWith.from_json(raw, key)
        return build(key, lambda: cls(
            pipeline=r.get("pipeline", str), checkpoint_id=r.get("checkpoint_id", int), run_id=r.get("run_id", str),
            claimed_at=r.get("claimed_at", str), ranges=r.ranges("ranges"), start_source=r.get("start_source", str),
            restored_from=r.get("restored_from", str, optional=True), skipped=r.offsets("skipped"),
            planned_with=planned_with, topic_ids=r.topic_ids("topic_ids"),
            state_base=optional_manifest(r.doc, key, "state_base"),
            clock_ms=r.get("clock_ms", int, optional=True) if "clock_ms" in r.doc else None,
            fires_timers=r.get("fires_timers", bool) if "fires_timers" in r.doc else False,
            rerun=Rerun.from_json(r.doc["rerun"], key) if r.doc.get("rerun") is not None else None,
            schema_ids=r.schema_ids("schema_ids"), tables=pins_from_json(r.doc, key),
            fingerprint=SpecFingerprint.from_json(r.doc["fingerprint"], key) if r.doc.get("fingerprint") is not None
            else None,
            replays=r.get("replays", int, optional=True) if "replays" in r.doc else None,
            after=r.get("after", int, optional=True) if "after" in r.doc else None,
            code=SpecFingerprint.from_json(r.doc["code"], key, "code") if r.doc.get("code") is not None else None,
        ))


@dataclass(frozen=True)
class PreparedTransaction:
    """A committable: enough to resume and commit a flushed transaction from another process."""

    transactional_id: str
    producer_id: int
    epoch: int
    partitions: tuple[TopicPartition, ...]
    records: int
    dead_letters: int
    task_index: int
    opened_at_ms: int
    #: The source partitions the transaction's records came from; None in committables of earlier
    #: versions, which did not record them (a partial loss of those cannot be repaired).
    sources: tuple[TopicPartition, ...] | None = None

    @property
    def is_empty(self) -> bool:
        """Nothing was produced, so the broker never saw a transaction (Flink's empty-transaction pitfall)."""
        return self.records == 0 and self.dead_letters == 0 and not self.partitions

    def to_json(self) -> dict[str, object]:
        return committable_doc(
            transactional_id=self.transactional_id, producer_id=self.producer_id, epoch=self.epoch,
            partitions=[p.key for p in self.partitions], records=self.records, dead_letters=self.dead_letters,
            task_index=self.task_index, opened_at_ms=self.opened_at_ms,
            sources=None if self.sources is None else [p.key for p in self.sources],
        )

    @classmethod
    def from_json(cls, doc: object, key: str = "<committable>") -> PreparedTransaction:
        r = Reader(doc, key, TRANSACTION_SCHEMA)
        partitions = r.get("partitions", list)
        # An added field (writers must send it, output_contract checks): stored committables of
        # earlier versions lack it, and stay readable with their sources unknown.
        sources = r.get("sources", list, optional=True) if "sources" in r.doc else None
        return build(key, lambda: cls(
            transactional_id=r.get("transactional_id", str), producer_id=r.get("producer_id", int),
            epoch=r.get("epoch", int), records=r.get("records", int), dead_letters=r.get("dead_letters", int),
            partitions=r.convert("partitions", lambda: tuple(TopicPartition.from_key(p) for p in partitions)),
            task_index=r.get("task_index", int), opened_at_ms=r.get("opened_at_ms", int),
            sources=None if sources is None else r.convert(
                "sources", lambda: tuple(sorted(TopicPartition.from_key(p) for p in sources))),
        ))


@dataclass(frozen=True)
class PreparedCheckpoint:
    """Written by the Spark driver after every task flushed: from here on the decision is "commit"."""

    pipeline: str
    checkpoint_id: int
    prepared_at: str
    transactions: tuple[PreparedTransaction, ...]
    records_in: int
    records_out: int
    records_dead_lettered: int
    spark_seconds: float
    #: A stateful pipeline's state after this checkpoint (files written before this document)
    state: StateManifest | None = None
    #: A stateful run's output went to its transactions by `lockstep.rules.output_tasks` over this many
    #: tasks, so a lost transaction's share can be computed again; None for stateless runs and runs of
    #: earlier versions (a partial loss of those stateful checkpoints cannot be repaired).
    output_tasks: int | None = None
    #: The tables after this checkpoint (files written before this document); empty without tables
    tables: Mapping[str, TableVersion] = field(default_factory=dict)
    #: The seconds of each stage of the run that prepared it (`lockstep.spark.stage_tracker`), in their order;
    #: empty in documents of earlier versions
    stage_seconds: Mapping[str, float] = field(default_factory=dict)
    #: The Iceberg sink's snapshot, staged on its branch before this document (None without ``sink.iceberg``)
    iceberg: StagedTable | None = None

    def __post_init__(self) -> None:
        ids = [t.transactional_id for t in self.transactions]
        if len(set(ids)) != len(ids):
            raise CheckpointError(self.checkpoint_id, f"duplicate transactional ids in {ids}")

    @property
    def shared_sources(self) -> dict[str, tuple[int, ...]]:
        """Source partitions whose records more than one transaction carries, with those tasks: the
        transform moved records between Spark tasks (a shuffle)."""
        tasks: dict[str, list[int]] = {}
        for t in self.transactions:
            for tp in t.sources or ():
                tasks.setdefault(tp.key, []).append(t.task_index)
        return {key: tuple(sorted(ts)) for key, ts in sorted(tasks.items()) if len(ts) > 1}

    @property
    def opened_at_ms(self) -> tuple[int, ...]:
        """When each transaction that holds records was opened by its writer (wall-clock ms)."""
        return tuple(t.opened_at_ms for t in self.transactions if not t.is_empty and t.opened_at_ms >= 0)

    def to_json(self) -> dict[str, object]:
        return {
            "schema": PREPARED_SCHEMA, "pipeline": self.pipeline, "checkpoint_id": self.checkpoint_id,
            "prepared_at": self.prepared_at, "transactions": [t.to_json() for t in self.transactions],
            "records_in": self.records_in, "records_out": self.records_out,
            "records_dead_lettered": self.records_dead_lettered, "spark_seconds": self.spark_seconds,
            **({"state": self.state.to_json()} if self.state is not None else {}),
            **({"output_tasks": self.output_tasks} if self.output_tasks is not None else {}),
            **({"tables": tables_to_json(self.tables)} if self.tables else {}),
            **({"stage_seconds": dict(self.stage_seconds)} if self.stage_seconds else {}),
            **({"iceberg": self.iceberg.to_json()} if self.iceberg is not None else {}),
        }

    @classmethod
    def from_json(cls, doc: object, key: str = "<prepared>") -> PreparedCheckpoint:
        r = Reader(doc, key, PREPARED_SCHEMA)
        txns = tuple(PreparedTransaction.from_json(t, f"{key} transactions[{i}]")
                     for i, t in enumerate(r.get("transactions", list)))
        return build(key, lambda: cls(
            pipeline=r.get("pipeline", str), checkpoint_id=r.get("checkpoint_id", int),
            prepared_at=r.get("prepared_at", str), transactions=txns, records_in=r.get("records_in", int),
            records_out=r.get("records_out", int), records_dead_lettered=r.get("records_dead_lettered", int),
            spark_seconds=float(r.get("spark_seconds", (int, float))), state=optional_manifest(r.doc, key),
            output_tasks=r.get("output_tasks", int) if "output_tasks" in r.doc else None,
            tables=tables_from_json(r.doc, key), stage_seconds=_stage_seconds(r),
            iceberg=StagedTable.from_json(r.doc["iceberg"], key) if "iceberg" in r.doc else None,
        ))


def _stage_seconds(r: Reader) -> dict[str, float]:
    """A prepared checkpoint's ``stage_seconds`` (none in documents of earlier versions)."""
    raw = r.get("stage_seconds", dict) if "stage_seconds" in r.doc else {}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw.values()):
        raise MetadataError(r.key, f"field 'stage_seconds' must map stage names to seconds: {raw!r}")
    return {str(name): float(seconds) for name, seconds in raw.items()}


@dataclass(frozen=True)
class Repair:
    """How a partially committed checkpoint was completed: the transactions the broker aborted after
    others were committed (``lost``: id -> why), and the input ranges whose output they held,
    given back to the next checkpoint, which reads and writes them again (``replayed``)."""

    lost: Mapping[str, str]
    replayed: tuple[OffsetRange, ...]
    #: None for an exact repair; "duplicates" or "loss" when a user settled a checkpoint that could not
    #: be repaired exactly (``lockstep transactions resolve --accept``).
    accepted: str | None = None
    #: A stateful checkpoint's exact repair: the lost transactions' tasks (of ``of_tasks``), whose
    #: output the next checkpoint writes again by computing this one again (`Rerun`); its input is not
    #: given back, since its state already holds the effect of every record.
    rerun_tasks: tuple[int, ...] = ()
    of_tasks: int = 0

    def __post_init__(self) -> None:
        if not self.lost:
            raise ValueError("a repair names the transactions it replaces")

    @property
    def summary(self) -> str:
        """'transaction p-5-1 lost; orders:1[40,80) given back to the next checkpoint'."""
        lost = f"transaction{'s' if len(self.lost) > 1 else ''} {', '.join(sorted(self.lost))} lost; "
        if self.rerun_tasks:
            return (lost + f"the next checkpoint computes this one again from its base state and clock, and writes "
                           f"the output of task{'s' if len(self.rerun_tasks) > 1 else ''} "
                           f"{', '.join(map(str, self.rerun_tasks))} again")
        ranges = ", ".join(str(r) for r in self.replayed) or "no input ranges"
        accepted = f" ({self.accepted} accepted)" if self.accepted else ""
        return lost + f"{ranges} given back to the next checkpoint{accepted}"

    @property
    def told(self) -> str:
        """The summary as a commit's log line ends: what happens next, said once for both kinds of repair."""
        return self.summary if self.rerun_tasks else f"{self.summary}, which reads and writes them again"

    def rerun(self, checkpoint_id: int) -> Rerun | None:
        """What the next checkpoint writes again of checkpoint ``checkpoint_id``, or None."""
        return Rerun(checkpoint_id, self.rerun_tasks, self.of_tasks) if self.rerun_tasks else None

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"lost": dict(self.lost), "replayed": [r.to_json() for r in self.replayed]}
        if self.accepted is not None:
            doc["accepted"] = self.accepted
        if self.rerun_tasks:
            doc["rerun_tasks"], doc["of_tasks"] = list(self.rerun_tasks), self.of_tasks
        return doc

    @classmethod
    def from_json(cls, doc: object, key: str, path: str = "repair") -> Repair:
        r = Reader(doc, key, None, path)
        lost = r.get("lost", dict)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in lost.items()):
            raise MetadataError(key, f"field '{path}.lost' must map transactional ids to reasons")
        accepted = r.doc.get("accepted")
        if accepted is not None and not isinstance(accepted, str):
            raise MetadataError(key, f"field '{path}.accepted' must be a string, got {accepted!r}")
        tasks = r.get("rerun_tasks", list) if "rerun_tasks" in r.doc else []
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in tasks):
            raise MetadataError(key, f"field '{path}.rerun_tasks' must list task indexes")
        return build(key, lambda: cls(lost=dict(lost), replayed=r.ranges("replayed"), accepted=accepted,
                                       rerun_tasks=tuple(tasks),
                                       of_tasks=r.get("of_tasks", int) if "of_tasks" in r.doc else 0))


@dataclass(frozen=True)
class CompletedCheckpoint(RestorePoint):
    """Every transaction is committed; `end_offsets` are where the next checkpoint starts.

    After a repair (``repair``) the partitions of the lost transactions end where the checkpoint
    started them, so the next checkpoint reads their ranges again."""

    pipeline: str
    checkpoint_id: int
    completed_at: str
    end_offsets: Mapping[str, int]
    committed: tuple[str, ...]
    #: The source topics' ids the end offsets belong to (from the claim; empty before Lockstep recorded them).
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    repair: Repair | None = None
    #: The committed keyed state of a stateful pipeline: its prepared manifest (or, when a user
    #: accepted duplicates for a stuck checkpoint, the state it started from)
    state: StateManifest | None = None
    #: The committed tables: the prepared ones (`lockstep.tables.pins`)
    tables: Mapping[str, TableVersion] = field(default_factory=dict)
    #: The Iceberg sink's snapshot on the table's main branch that published this checkpoint's rows (None:
    #: no ``sink.iceberg``, or no rows for the table)
    iceberg_snapshot: int | None = None

    def to_json(self) -> dict[str, object]:
        between: dict[str, object] = {"repair": self.repair.to_json()} if self.repair is not None else {}
        if self.iceberg_snapshot is not None:
            between["iceberg_snapshot"] = self.iceberg_snapshot
        return self.restore_point_json({
            "schema": COMPLETED_SCHEMA, "pipeline": self.pipeline, "checkpoint_id": self.checkpoint_id,
            "completed_at": self.completed_at, "end_offsets": dict(self.end_offsets), "committed": list(self.committed),
        }, between)

    @classmethod
    def from_json(cls, doc: object, key: str = "<completed>") -> CompletedCheckpoint:
        r = Reader(doc, key, COMPLETED_SCHEMA)
        committed = r.get("committed", list)
        if not all(isinstance(t, str) for t in committed):
            raise MetadataError(key, "field 'committed' must list transactional ids")
        return cls(
            pipeline=r.get("pipeline", str), checkpoint_id=r.get("checkpoint_id", int),
            completed_at=r.get("completed_at", str), committed=tuple(committed), **cls.restore_point_fields(r),
            repair=Repair.from_json(r.doc["repair"], key) if r.doc.get("repair") is not None else None,
            iceberg_snapshot=r.get("iceberg_snapshot", int) if "iceberg_snapshot" in r.doc else None,
        )


@dataclass(frozen=True)
class AbortedCheckpoint:
    """Nothing of this checkpoint was committed; the next run replays its ranges."""

    pipeline: str
    checkpoint_id: int
    aborted_at: str
    reason: str
    replay_hint: str

    def to_json(self) -> dict[str, object]:
        return {
            "schema": ABORTED_SCHEMA, "pipeline": self.pipeline, "checkpoint_id": self.checkpoint_id,
            "aborted_at": self.aborted_at, "reason": self.reason, "replay_hint": self.replay_hint,
        }

    @classmethod
    def from_json(cls, doc: object, key: str = "<aborted>") -> AbortedCheckpoint:
        r = Reader(doc, key, ABORTED_SCHEMA)
        return cls(
            pipeline=r.get("pipeline", str), checkpoint_id=r.get("checkpoint_id", int),
            aborted_at=r.get("aborted_at", str), reason=r.get("reason", str), replay_hint=r.get("replay_hint", str),
        )


@dataclass(frozen=True)
class RunFailure:
    """Why the last attempt of a checkpoint's Spark run failed, in the job's own words; the abort
    that follows records this cause as its reason."""

    pipeline: str
    checkpoint_id: int
    failed_at: str
    cause: str

    def to_json(self) -> dict[str, object]:
        return {"schema": RUN_FAILURE_SCHEMA, "pipeline": self.pipeline, "checkpoint_id": self.checkpoint_id,
                "failed_at": self.failed_at, "cause": self.cause}

    @classmethod
    def from_json(cls, doc: object, key: str = "<run-failure>") -> RunFailure:
        r = Reader(doc, key, RUN_FAILURE_SCHEMA)
        return cls(pipeline=r.get("pipeline", str), checkpoint_id=r.get("checkpoint_id", int),
                   failed_at=r.get("failed_at", str), cause=r.get("cause", str))


@dataclass(frozen=True)
class CheckpointView:
    """Everything stored about one checkpoint; its status is derived, never stored."""

    claim: CheckpointClaim
    prepared: PreparedCheckpoint | None = None
    completed: CompletedCheckpoint | None = None
    aborted: AbortedCheckpoint | None = None
    #: How many tasks a run of it recorded writing with (``write-tasks.json``), when recovery read it:
    #: None when it did not, or no run recorded one.
    write_tasks: int | None = None

    def __post_init__(self) -> None:
        cid = self.claim.checkpoint_id
        for part in (self.prepared, self.completed, self.aborted):
            if part is not None and (part.checkpoint_id, part.pipeline) != (cid, self.claim.pipeline):
                raise CheckpointError(cid, f"metadata of {part.pipeline} checkpoint {part.checkpoint_id} "
                                           f"is stored under {self.claim.pipeline} checkpoint {cid}")
        if self.completed is not None and self.aborted is not None:
            raise CheckpointError(cid, "is marked both completed and aborted; the store is inconsistent")

    @property
    def checkpoint_id(self) -> int:
        return self.claim.checkpoint_id

    @property
    def fence_task_count(self) -> int:
        """The transactional ids ``0 .. n-1`` a run of this checkpoint may have opened: what its run recorded
        before writing, else the most its claim allows (`CheckpointClaim.task_count`)."""
        bound = self.claim.task_count
        return min(bound, self.write_tasks) if self.write_tasks is not None else bound

    @property
    def delivered_ranges(self) -> tuple[OffsetRange, ...]:
        """The non-empty input ranges whose output this checkpoint holds: the claim's, less the ranges
        a repair gave back to the next checkpoint."""
        given_back = {r.tp for r in self.completed.repair.replayed} if self.completed and self.completed.repair else set()
        return tuple(r for r in self.claim.ranges if not r.is_empty and r.tp not in given_back)

    @property
    def status_text(self) -> str:
        """The status as users read it: "completed after repair" for a repaired checkpoint."""
        repaired = self.completed is not None and self.completed.repair is not None
        return "completed after repair" if repaired else self.status.value

    @property
    def status(self) -> CheckpointStatus:
        if self.completed is not None:
            return CheckpointStatus.COMPLETED
        if self.aborted is not None:
            return CheckpointStatus.ABORTED
        if self.prepared is not None:
            return CheckpointStatus.PREPARED
        return CheckpointStatus.CLAIMED


@dataclass(frozen=True)
class History:
    """The newest completed checkpoint and every checkpoint after it, oldest first: what a plan,
    its in-flight check and its recovery decide on. Read once (``CheckpointStore.history``)."""

    latest: CheckpointView | None
    after: tuple[CheckpointView, ...]

    @property
    def latest_id(self) -> int | None:
        return self.latest.checkpoint_id if self.latest else None

    @property
    def next_id(self) -> int:
        """The id the next claim takes: one past every id in use."""
        return max([v.checkpoint_id for v in self.after] + [self.latest_id or 0]) + 1
