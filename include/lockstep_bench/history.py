"""Plan time and metadata size as the number of past checkpoints grows.

Past checkpoints are written straight into the store (claim + prepared + outcome objects, the
same documents a real run writes, no Spark), in bulk with a thread pool; the newest one of each
tier goes through the public ``CheckpointStore`` API so the latest-completed pointer moves exactly
as a commit moves it. Then ``coordinator.plan(dry_run=True)`` and ``store.latest_completed()``
are timed: both must stay flat, because they read the pointer and list only what follows it.
A full listing of every checkpoint id is timed too, as the thing that does grow.
"""
from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lockstep.model.checkpoint import CheckpointClaim, CompletedCheckpoint, PreparedCheckpoint, PreparedTransaction
from lockstep.model.offsets import OffsetRange, TopicPartition

if TYPE_CHECKING:
    from lockstep.spec import PipelineSpec
    from lockstep.steps.coordinator import Pipeline
    from lockstep.store.checkpoint_store import CheckpointStore


@dataclass
class HistoryPoint:
    checkpoints: int
    plan_ms: float
    latest_completed_ms: float
    list_all_ms: float
    checkpoint_bytes: int  # claim + prepared + outcome of one checkpoint
    total_bytes: int
    plan_requests: int = 0  # S3 API calls one dry-run plan makes
    plan_keys_listed: int = 0  # keys/prefixes those calls returned

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _documents(pipeline: str, cid: int, topic: str, ends: dict[int, int]) -> tuple[Any, Any, Any]:
    now = datetime.now(UTC).isoformat()
    ranges = tuple(OffsetRange(topic, p, e, e) for p, e in sorted(ends.items()))
    claim = CheckpointClaim(pipeline=pipeline, checkpoint_id=cid, run_id=f"bench-history-{cid}", claimed_at=now,
                            ranges=ranges, start_source=f"checkpoint:{cid - 1}" if cid > 1 else "earliest")
    txns = tuple(PreparedTransaction(f"{pipeline}-{cid}-{p}", 1000 + p, 0, (TopicPartition(f"{topic}-out", p),),
                                     12_500, 0, p, int(time.time() * 1000)) for p in sorted(ends))
    prepared = PreparedCheckpoint(pipeline, cid, now, txns, 12_500 * len(txns), 12_500 * len(txns), 0, 12.5)
    completed = CompletedCheckpoint(pipeline, cid, now, claim.end_offsets, tuple(t.transactional_id for t in txns))
    return claim, prepared, completed


def _body(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, indent=1).encode()  # as CheckpointStore writes them


def fill(store: CheckpointStore, s3: Any, first: int, last: int, topic: str, ends: dict[int, int], threads: int = 16) -> None:
    """Write completed checkpoints ``first..last``; ``last`` through the public API."""
    def put(cid: int) -> None:
        claim, prepared, completed = _documents(store.pipeline, cid, topic, ends)
        for part, doc in (("claim", claim), ("prepared", prepared), ("outcome", completed)):
            s3.put_object(Bucket=store.bucket, Key=store._key(cid, part), Body=_body(doc.to_json()),
                          ContentType="application/json")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, range(first, last)))
    claim, prepared, completed = _documents(store.pipeline, last, topic, ends)
    store.claim(claim)
    store.write_prepared(prepared)
    store.mark_completed(completed)


def _timed_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1)


class RequestCounter:
    """Counts the S3 API calls a client makes and the keys its listings return (boto3 event hooks).

    Elapsed time against the local S3 server is not the whole story: how long a listing takes as
    the bucket fills depends on how the server finds the keys after ``StartAfter``, and a list call
    may slow down with the bucket's size even when it asks for (and returns) a handful of keys. The
    number of calls and of keys returned is what Lockstep controls, and it must not grow with history.
    """

    def __init__(self, s3: Any) -> None:
        self.calls = 0
        self.keys = 0
        s3.meta.events.register("before-call.s3.*", self._before)
        s3.meta.events.register("after-call.s3.ListObjectsV2", self._listed)

    def _before(self, **_: Any) -> None:
        self.calls += 1

    def _listed(self, parsed: Any = None, **_: Any) -> None:
        if isinstance(parsed, dict):
            self.keys += len(parsed.get("Contents", [])) + len(parsed.get("CommonPrefixes", []))

    def count(self, fn: Callable[[], object]) -> tuple[int, int]:
        calls, keys = self.calls, self.keys
        fn()
        return self.calls - calls, self.keys - keys


def s3_store(p: Pipeline) -> tuple[CheckpointStore, Any]:
    """The pipeline's checkpoint store on S3 and the boto3 client under it (the store keeps it private):
    the bench counts that client's calls, writes past checkpoints through it and reads object sizes,
    which the store's ``S3Client`` protocol leaves out."""
    from lockstep.store.checkpoint_store import CheckpointStore

    store = p.store
    assert isinstance(store, CheckpointStore)  # Pipeline.open's store: the one on S3
    return store, store._s3


def measure(spec: PipelineSpec, tiers: list[int], topic: str, ends: dict[int, int], repeats: int = 5,
            log: Callable[[str], None] = print) -> list[HistoryPoint]:
    from lockstep.steps.coordinator import Pipeline, plan

    p = Pipeline.open(spec)
    store, s3 = s3_store(p)
    counter = RequestCounter(s3)
    points: list[HistoryPoint] = []
    written = 0
    for tier in sorted(tiers):
        started = time.monotonic()
        fill(store, s3, written + 1, tier, topic, ends)
        written = tier
        log(f"history: {tier} past checkpoints written in {time.monotonic() - started:.0f} s")
        planned = plan(p, run_id="bench-history", dry_run=True)
        assert planned.claim.checkpoint_id == tier + 1, planned.describe()
        requests, listed = counter.count(lambda: plan(p, run_id="bench-history", dry_run=True))
        plan_ms = _timed_ms(lambda: plan(p, run_id="bench-history", dry_run=True), repeats)
        latest_ms = _timed_ms(store.latest_completed, repeats)
        list_ms = _timed_ms(lambda: sum(1 for _ in store.checkpoint_ids()), max(1, repeats // 2))
        one = sum(len(_body(d.to_json())) for d in _documents(store.pipeline, tier, topic, ends))
        total = 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=store.root + "/"):
            total += sum(o["Size"] for o in page.get("Contents", []))
        points.append(HistoryPoint(tier, plan_ms, latest_ms, list_ms, one, total, requests, listed))
        log(f"history: {tier} checkpoints: plan {plan_ms} ms ({requests} S3 calls, {listed} keys listed), "
            f"latest_completed {latest_ms} ms, listing all {list_ms} ms, {one} bytes per checkpoint")
    return points
