"""A ``coordinator.Pipeline`` over in-memory fakes (S3, source cluster, sink committer), and what a
checkpoint's Spark run leaves behind (open transactions and the prepared metadata), for unit tests
of the coordinator's plan, recover and commit."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from lockstep.model.checkpoint import PreparedCheckpoint, PreparedTransaction
from lockstep.model.offsets import TopicPartition
from lockstep.model.state_manifest import StateManifest
from lockstep.model.transactional_ids import transactional_id
from lockstep.spec import PipelineSpec, parse_spec
from lockstep.steps.coordinator import Pipeline, Plan
from lockstep.store.checkpoint_store import CheckpointStore
from lockstep.tables.pins import TableVersion
from tests.support.fake_kafka import FakeCommitter, FakeSource
from tests.support.fake_s3 import FakeS3

SOURCE, SINK, DEAD_LETTERS, PREFIX = "orders-in", "orders-out", "orders-dlq", "tx-orders"


class Clock:
    """Wall-clock milliseconds that move only when a test says so."""

    def __init__(self, now_ms: int | None = None) -> None:
        self.now_ms = int(time.time() * 1000) if now_ms is None else now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def spec(**sections: dict[str, Any]) -> PipelineSpec:
    doc: dict[str, Any] = {
        "name": "orders",
        "source": {"topics": [SOURCE]},
        "transform": "lockstep_examples.orders:enrich",
        "sink": {"topic": SINK, "dead_letter_topic": DEAD_LETTERS},
        "checkpoints": {"store": "s3://lockstep/tests", "max_records": 1000, "retain": 100},
        "transactions": {"id_prefix": PREFIX, "timeout_ms": 900_000, "commit_margin_ms": 60_000},
    }
    for section, values in sections.items():
        doc[section] = {**doc.get(section, {}), **values}  # a section the base lacks (state) is added
    return parse_spec(doc, "orders.yaml")


@dataclass
class FakeWorld:
    """Everything a pipeline talks to, in memory; ``pipeline`` is built over it."""

    pipeline: Pipeline
    s3: FakeS3
    source: FakeSource
    committer: FakeCommitter
    clock: Clock

    @property
    def store(self) -> CheckpointStore:
        return self.pipeline.store

    def prepare(self, plan: Plan, records_per_task: int | None = None,
                sources: dict[int, tuple[TopicPartition, ...] | None] | None = None,
                state: StateManifest | None = None, output_tasks: int | None = None,
                tables: dict[str, TableVersion] | None = None) -> PreparedCheckpoint:
        """What a successful Spark run leaves: one open transaction per non-empty range, flushed,
        and the prepared metadata naming them (the committables). Each carries its range's source
        partition, unless ``sources`` says otherwise for its task (a shuffle; None: not recorded). A
        stateful run's prepared metadata carries ``state``, the manifest of the state files it wrote; a run with
        tables, ``tables``: the versions it wrote."""
        claim = plan.claim
        txns = []
        for index, r in enumerate(x for x in claim.ranges if not x.is_empty):
            tid = transactional_id(self.pipeline.spec.transactions.id_prefix, claim.checkpoint_id, index)
            producer_id, epoch = self.committer.begin(tid)
            carried = (sources or {}).get(index, (r.tp,))
            txns.append(PreparedTransaction(tid, producer_id, epoch, (TopicPartition(SINK, r.partition),),
                                            r.count if records_per_task is None else records_per_task, 0, index,
                                            self.clock(), carried))
        prepared = PreparedCheckpoint(claim.pipeline, claim.checkpoint_id, "2026-01-01T00:00:00+00:00", tuple(txns),
                                      records_in=sum(r.count for r in claim.ranges),
                                      records_out=sum(t.records for t in txns), records_dead_lettered=0,
                                      spark_seconds=1.0, state=state, output_tasks=output_tasks,
                                      tables=tables or {})
        self.store.write_prepared(prepared)
        return prepared

    def start(self, plan: Plan) -> list[str]:
        """A run that died after opening its transactions, before the prepared metadata: their ids."""
        claim = plan.claim
        tids = [transactional_id(self.pipeline.spec.transactions.id_prefix, claim.checkpoint_id, i)
                for i in range(claim.task_count)]
        for tid in tids:
            self.committer.begin(tid)
        return tids


def fake_world(monkeypatch: Any, pipeline_spec: PipelineSpec | None = None, partitions: int = 2,
               page_size: int = 1000) -> FakeWorld:
    the_spec = pipeline_spec or spec()
    clock = Clock()
    s3 = FakeS3(page_size=page_size)
    source = FakeSource().install(monkeypatch)
    for topic in the_spec.source.topics:
        source.create_topic(topic, partitions)
    committer = FakeCommitter(clock, timeout_ms=the_spec.transactions.timeout_ms)
    location = the_spec.checkpoint_location
    store = CheckpointStore(s3, location.bucket, location.prefix, the_spec.name)

    def no_other_cluster(conn_id: str) -> Any:
        raise AssertionError(f"no sink cluster {conn_id!r} in this test")

    pipeline = Pipeline(the_spec, store, source.admin, {"bootstrap.servers": "fake:9092"}, lambda: committer,
                        wall_ms=clock, committer_for=no_other_cluster)
    return FakeWorld(pipeline, s3, source, committer, clock)
