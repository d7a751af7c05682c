"""The auditor behind ``lockstep verify``: was every covered input record's transform
output written exactly once?

Expected: the transform re-applied (in a local Spark session, nothing written) to
the input ranges of the completed checkpoints, one expected output per covering
checkpoint. Actual: the provenance headers of every record in the sink and
dead-letter topics, read with ``read_committed`` - what a downstream consumer sees.

Replayed dead letters (records with ``REPLAY_HEADER``) are accounted apart: one output per original
offset each completed replay checkpoint fed to the transform (its ``replayed.json``), and no
original offset may be in the sink more than once across the pipeline and its replays.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from lockstep.connections import kafka_config
from lockstep.kafka.client_configs import JAVA
from lockstep.kafka.topics import record_headers
from lockstep.model.offsets import OffsetRange
from lockstep.model.output_contract import (
    CHECKPOINT_HEADER,
    REPLAY_HEADER,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)
from lockstep.spark.job import read_ranges
from lockstep.spark.replay import Original, completed_replays, fed_counter
from lockstep.spec import PipelineSpec
from lockstep.store.checkpoint_store import CheckpointStore
from lockstep.transform import load_transform

if TYPE_CHECKING:
    from lockstep.spark.target import JobSession

Offset = tuple[str, int, int]
Key = TypeVar("Key", bound=tuple[object, ...])


def compare_counts(expected: Counter[Key], actual: Counter[Key]) -> tuple[list[Key], list[Key], list[Key]]:
    """Keys found fewer times than expected (lost), more (duplicated), and never expected (unexpected)."""
    lost: list[Key] = []
    duplicated: list[Key] = []
    unexpected: list[Key] = []
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key, 0), actual.get(key, 0)
        if want and got < want:
            lost.append(key)
        elif want and got > want:
            duplicated.append(key)
        elif not want and got:
            unexpected.append(key)
    return lost, duplicated, unexpected


@dataclass
class ReplayAccount:
    checked: int = 0  #: replayed outputs found (records with `REPLAY_HEADER`)
    expected: int = 0
    lost: list[Original] = field(default_factory=list)
    duplicated: list[Original] = field(default_factory=list)
    unexpected: list[Original] = field(default_factory=list)
    sink_twice: list[Original] = field(default_factory=list)  #: original offsets in the sink more than once


def account(expected: Counter[Original], actual: Counter[Original], sink_by_original: Counter[Original]) -> ReplayAccount:
    """Replayed outputs: ``expected`` counts, per original offset, the completed replay checkpoints
    that fed it to the transform (one output each, sink or dead letter); ``actual`` counts the
    records with the replay header per original offset; ``sink_by_original`` counts every sink
    record (pipeline and replays) per original offset: more than one is a duplicate downstream."""
    result = ReplayAccount(checked=sum(actual.values()), expected=sum(expected.values()))
    result.lost, result.duplicated, result.unexpected = compare_counts(expected, actual)
    result.sink_twice = sorted(k for k, n in sink_by_original.items() if n > 1)
    return result


@dataclass
class VerifyReport:
    checkpoints: list[int]
    covered_offsets: int
    expected_outputs: int
    actual_outputs: int
    lost: list[Offset] = field(default_factory=list)
    duplicated: list[Offset] = field(default_factory=list)
    unexpected: list[Offset] = field(default_factory=list)
    #: Outputs of dead-letter replays (`lockstep deadletters replay`), checked apart.
    replay: ReplayAccount = field(default_factory=ReplayAccount)
    replay_checkpoints: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        r = self.replay
        return not (self.lost or self.duplicated or self.unexpected or r.lost or r.duplicated or r.unexpected
                    or r.sink_twice)

    def to_json(self) -> dict[str, object]:
        sample = lambda xs: [f"{t}:{p}@{o}" for t, p, o in xs[:20]]
        return {"ok": self.ok, "checkpoints": self.checkpoints, "covered_offsets": self.covered_offsets,
                "expected_outputs": self.expected_outputs, "actual_outputs": self.actual_outputs,
                "lost": len(self.lost), "duplicated": len(self.duplicated), "unexpected": len(self.unexpected),
                "lost_sample": sample(self.lost), "duplicated_sample": sample(self.duplicated),
                "unexpected_sample": sample(self.unexpected),
                "replayed": {"checkpoints": self.replay_checkpoints, "expected_outputs": self.replay.expected,
                             "checked": self.replay.checked, "lost": len(self.replay.lost),
                             "duplicated": len(self.replay.duplicated), "unexpected": len(self.replay.unexpected),
                             "in_sink_twice": len(self.replay.sink_twice),
                             "lost_sample": sample(self.replay.lost),
                             "duplicated_sample": sample(self.replay.duplicated),
                             "unexpected_sample": sample(self.replay.unexpected),
                             "in_sink_twice_sample": sample(self.replay.sink_twice)}}

    def summary(self) -> str:
        return (f"verified {len(self.checkpoints)} completed checkpoints covering {self.covered_offsets} input offsets: "
                f"{self.expected_outputs} outputs expected, {self.actual_outputs} found; {len(self.lost)} lost, "
                f"{len(self.duplicated)} duplicated, {len(self.unexpected)} unexpected" + self._replay_summary())

    def _replay_summary(self) -> str:
        r = self.replay
        if not (self.replay_checkpoints or r.checked or r.sink_twice):
            return ""
        return (f"\nreplayed dead letters: {len(self.replay_checkpoints)} completed replay checkpoints, "
                f"{r.expected} outputs expected, {r.checked} replayed records checked; {len(r.lost)} lost, "
                f"{len(r.duplicated)} duplicated, {len(r.unexpected)} unexpected, {len(r.sink_twice)} original "
                "offsets in the sink more than once")


def completed_ranges(store: CheckpointStore, since: int | None) -> dict[int, tuple[OffsetRange, ...]]:
    result: dict[int, tuple[OffsetRange, ...]] = {}
    for cid in store.checkpoint_ids(after=since - 1 if since else None):
        view = store.view(cid)
        if view is not None and view.completed is not None:
            result[cid] = tuple(r for r in view.claim.ranges if not r.is_empty)
    return result


def expected_outputs(spec: PipelineSpec, spark: JobSession, ranges: dict[int, tuple[OffsetRange, ...]]
                     ) -> Counter[Offset]:
    transform = load_transform(spec)
    kafka = kafka_config(spec.source.kafka_conn_id, JAVA)  # Spark's Kafka source
    expected: Counter[Offset] = Counter()
    for rs in ranges.values():
        if not rs:
            continue
        rows = transform(read_ranges(spark, kafka, rs)).select("topic", "partition", "offset").collect()
        expected.update((r["topic"], r["partition"], r["offset"]) for r in rows)
    return expected


def actual_outputs(spec: PipelineSpec, since: int | None, progress: Callable[[int], None] | None = None
                   ) -> Counter[Offset]:
    return read_outputs(spec, since, progress)[0]


def read_outputs(spec: PipelineSpec, since: int | None, progress: Callable[[int], None] | None = None
                 ) -> tuple[Counter[Offset], Counter[Original], Counter[Original]]:
    """Per original input offset: the pipeline's own outputs (from checkpoint ``since`` on), the
    replayed ones (every replay), and the sink records of both (those of the pipeline from ``since`` on)."""
    from confluent_kafka import Consumer, TopicPartition

    config = kafka_config(spec.sink.kafka_conn_id)
    consumer = Consumer({**config, "group.id": f"lockstep-verify-{spec.name}", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    actual: Counter[Offset] = Counter()
    replayed: Counter[Original] = Counter()
    in_sink: Counter[Original] = Counter()
    try:
        assignment = []
        for topic in (spec.sink.topic, spec.sink.dead_letter_topic):
            metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
            if metadata is not None and metadata.error is None:
                assignment += [TopicPartition(topic, p, 0) for p in metadata.partitions]
        consumer.assign(assignment)
        remaining = {(tp.topic, tp.partition) for tp in assignment}
        seen = 0
        while remaining:
            for msg in consumer.consume(1000, timeout=5):
                error = msg.error()
                if error:
                    if error.code() == -191:  # _PARTITION_EOF: reached the last stable offset
                        remaining.discard((msg.topic(), msg.partition()))
                        continue
                    raise RuntimeError(f"reading {msg.topic()}: {error}")
                headers = dict(record_headers(msg))
                if SOURCE_OFFSET not in headers:
                    # Not written by Lockstep: no provenance to audit; counted as unexpected.
                    partition, offset = msg.partition(), msg.offset()
                    assert partition is not None and offset is not None  # a consumed record has both
                    actual[(f"(no provenance) {msg.topic()}", partition, offset)] += 1
                    continue
                # Lockstep's headers always carry a value; a record with a valueless one fails here.
                original = (headers[SOURCE_TOPIC].decode(), int(headers[SOURCE_PARTITION]),  # type: ignore[union-attr, arg-type]
                            int(headers[SOURCE_OFFSET]))  # type: ignore[arg-type]
                if REPLAY_HEADER in headers:
                    replayed[original] += 1
                elif since and int(headers.get(CHECKPOINT_HEADER, b"0")) < since:  # type: ignore[arg-type]  # as above
                    continue
                else:
                    actual[original] += 1
                if msg.topic() == spec.sink.topic:
                    in_sink[original] += 1
                seen += 1
            if progress:
                progress(seen)
    finally:
        consumer.close()
    return actual, replayed, in_sink


def verify(spec: PipelineSpec, store: CheckpointStore, spark: JobSession, since: int | None = None,
           progress: Callable[[int], None] | None = None, replay_store: CheckpointStore | None = None) -> VerifyReport:
    """``replay_store``: the store of the spec's replay pipeline (opened from the spec when None)."""
    if replay_store is None:
        from lockstep.spark.replay import replay_spec
        from lockstep.steps.client_factory import checkpoint_store

        replay_store = checkpoint_store(replay_spec(spec))
    ranges = completed_ranges(store, since)
    expected = expected_outputs(spec, spark, ranges)
    replays = completed_replays(replay_store)
    actual, replayed, in_sink = read_outputs(spec, since, progress)
    report = VerifyReport(sorted(ranges), sum(r.count for rs in ranges.values() for r in rs),
                          sum(expected.values()), sum(actual.values()),
                          replay=account(fed_counter(replays), replayed, in_sink), replay_checkpoints=sorted(replays))
    report.lost, report.duplicated, report.unexpected = compare_counts(expected, actual)
    return report


def verify_pipeline(spec: PipelineSpec, since: int | None = None,
                    progress: Callable[[int], None] | None = None) -> VerifyReport:
    """The audit as ``lockstep verify`` and the demo run it: the spec's own checkpoint store, and
    for the expected outputs the Spark its checkpoints run on: a session of the pipeline's Spark
    Connect server in connect mode (no JVM to start here), else a local Spark session of its own.
    Either is stopped afterwards."""
    from lockstep.spark.target import CONNECT
    from lockstep.steps.client_factory import checkpoint_store
    from lockstep.steps.run import spark_target

    store = checkpoint_store(spec)
    target = spark_target(spec)
    if target.mode == CONNECT:
        from lockstep.spark.connect import connect_mode, new_session

        with connect_mode():
            spark = new_session(target.address)
            try:
                return verify(spec, store, spark, since, progress)
            finally:
                spark.stop()
    from lockstep.spark.conf import local_session

    session = local_session(f"lockstep-verify-{spec.name}")
    session.sparkContext.setLogLevel("ERROR")
    try:
        return verify(spec, store, session, since, progress)
    finally:
        session.stop()
