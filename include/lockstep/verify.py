"""The auditor behind ``lockstep verify``: was every covered input record's transform
output written exactly once?

Expected: the transform re-applied (in a local Spark session, nothing written) to
the input ranges of the completed checkpoints, one expected output per covering
checkpoint. Actual: the provenance headers of every record in the sink and
dead-letter topics, read with ``read_committed`` - what a downstream consumer sees.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from lockstep.connections import kafka_config
from lockstep.kafka_clients import JAVA
from lockstep.offsets import OffsetRange
from lockstep.sparkjob import CHECKPOINT_HEADER, SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC, read_ranges
from lockstep.transform import load_transform
from lockstep.spec import PipelineSpec
from lockstep.store import CheckpointStore

Offset = tuple[str, int, int]


@dataclass
class VerifyReport:
    checkpoints: list[int]
    covered_offsets: int
    expected_outputs: int
    actual_outputs: int
    lost: list[Offset] = field(default_factory=list)
    duplicated: list[Offset] = field(default_factory=list)
    unexpected: list[Offset] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)

    def to_json(self) -> dict[str, Any]:
        sample = lambda xs: [f"{t}:{p}@{o}" for t, p, o in xs[:20]]  # noqa: E731
        return {"ok": self.ok, "checkpoints": self.checkpoints, "covered_offsets": self.covered_offsets,
                "expected_outputs": self.expected_outputs, "actual_outputs": self.actual_outputs,
                "lost": len(self.lost), "duplicated": len(self.duplicated), "unexpected": len(self.unexpected),
                "lost_sample": sample(self.lost), "duplicated_sample": sample(self.duplicated),
                "unexpected_sample": sample(self.unexpected)}

    def summary(self) -> str:
        return (f"verified {len(self.checkpoints)} completed checkpoints covering {self.covered_offsets} input offsets: "
                f"{self.expected_outputs} outputs expected, {self.actual_outputs} found; {len(self.lost)} lost, "
                f"{len(self.duplicated)} duplicated, {len(self.unexpected)} unexpected")


def completed_ranges(store: CheckpointStore, since: int | None) -> dict[int, tuple[OffsetRange, ...]]:
    result: dict[int, tuple[OffsetRange, ...]] = {}
    for cid in store.checkpoint_ids(after=since - 1 if since else None):
        view = store.view(cid)
        if view is not None and view.completed is not None:
            result[cid] = tuple(r for r in view.claim.ranges if not r.is_empty)
    return result


def expected_outputs(spec: PipelineSpec, spark: Any, ranges: dict[int, tuple[OffsetRange, ...]]) -> Counter:
    transform = load_transform(spec)
    kafka = kafka_config(spec.source.kafka_conn_id, JAVA)  # Spark's Kafka source
    expected: Counter = Counter()
    for cid, rs in ranges.items():
        if not rs:
            continue
        rows = transform(read_ranges(spark, kafka, rs)).select("topic", "partition", "offset").collect()
        expected.update((r["topic"], r["partition"], r["offset"]) for r in rows)
    return expected


def actual_outputs(spec: PipelineSpec, since: int | None, progress: Callable[[int], None] | None = None) -> Counter:
    from confluent_kafka import Consumer, TopicPartition

    config = kafka_config(spec.sink.kafka_conn_id)
    consumer = Consumer({**config, "group.id": f"lockstep-verify-{spec.name}", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    actual: Counter = Counter()
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
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF: reached the last stable offset
                        remaining.discard((msg.topic(), msg.partition()))
                        continue
                    raise RuntimeError(f"reading {msg.topic()}: {msg.error()}")
                headers = dict(msg.headers() or [])
                if SOURCE_OFFSET not in headers:
                    # Not written by Lockstep: no provenance to audit; counted as unexpected.
                    actual[(f"(no provenance) {msg.topic()}", msg.partition(), msg.offset())] += 1
                    continue
                if since and int(headers.get(CHECKPOINT_HEADER, b"0")) < since:
                    continue
                actual[(headers[SOURCE_TOPIC].decode(), int(headers[SOURCE_PARTITION]), int(headers[SOURCE_OFFSET]))] += 1
                seen += 1
            if progress:
                progress(seen)
    finally:
        consumer.close()
    return actual


def verify(spec: PipelineSpec, store: CheckpointStore, spark: Any, since: int | None = None,
           progress: Callable[[int], None] | None = None) -> VerifyReport:
    ranges = completed_ranges(store, since)
    expected = expected_outputs(spec, spark, ranges)
    actual = actual_outputs(spec, since, progress)
    report = VerifyReport(sorted(ranges), sum(r.count for rs in ranges.values() for r in rs),
                          sum(expected.values()), sum(actual.values()))
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key, 0), actual.get(key, 0)
        if want and got < want:
            report.lost.append(key)
        elif want and got > want:
            report.duplicated.append(key)
        elif not want and got:
            report.unexpected.append(key)
    return report
