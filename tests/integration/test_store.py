"""The checkpoint store on a real S3 API server (the session's MinIO server process).

The atomic-claim invariant (atomic claim, immutable metadata, forward-only status) and the idempotent-commit invariant (idempotent
completion) are checked against the server's own conditional writes, including a race between
separate processes. Nothing here mocks S3: the counting wrapper only delegates to the real client.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from lockstep.errors import CheckpointError, MetadataError, TerminalError
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CheckpointStatus,
    CompletedCheckpoint,
    PreparedCheckpoint,
    PreparedTransaction,
)
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.store.checkpoint_store import CheckpointAlreadyClaimed, CheckpointStore

PIPELINE = "orders"
TOPIC = "orders-in"


# ---- values ---------------------------------------------------------------------------------------
def ranges_of(checkpoint_id: int) -> tuple[OffsetRange, ...]:
    """Two partitions tiled by checkpoint id: checkpoint N covers [10(N-1), 10N)."""
    return tuple(OffsetRange(TOPIC, p, 10 * (checkpoint_id - 1), 10 * checkpoint_id) for p in (0, 1))


def claim_of(checkpoint_id: int, run_id: str = "run-a", pipeline: str = PIPELINE) -> CheckpointClaim:
    return CheckpointClaim(pipeline=pipeline, checkpoint_id=checkpoint_id, run_id=run_id,
                           claimed_at="2025-01-01T00:00:00Z", ranges=ranges_of(checkpoint_id),
                           start_source=f"checkpoint:{checkpoint_id - 1}")


def prepared_of(checkpoint_id: int, records_out: int = 20) -> PreparedCheckpoint:
    txn = PreparedTransaction(transactional_id=f"orders-{checkpoint_id}-0", producer_id=1000 + checkpoint_id,
                              epoch=3, partitions=(TopicPartition("orders-out", 0),), records=records_out,
                              dead_letters=0, task_index=0, opened_at_ms=1_700_000_000_000)
    return PreparedCheckpoint(pipeline=PIPELINE, checkpoint_id=checkpoint_id, prepared_at="2025-01-01T00:01:00Z",
                              transactions=(txn,), records_in=20, records_out=records_out,
                              records_dead_lettered=0, spark_seconds=1.5)


def completed_of(checkpoint_id: int, completed_at: str = "2025-01-01T00:02:00Z") -> CompletedCheckpoint:
    return CompletedCheckpoint(pipeline=PIPELINE, checkpoint_id=checkpoint_id, completed_at=completed_at,
                               end_offsets={r.tp.key: r.end for r in ranges_of(checkpoint_id)},
                               committed=(f"orders-{checkpoint_id}-0",))


def aborted_of(checkpoint_id: int, reason: str = "transaction orders-0 timed out") -> AbortedCheckpoint:
    return AbortedCheckpoint(pipeline=PIPELINE, checkpoint_id=checkpoint_id, aborted_at="2025-01-01T00:03:00Z",
                             reason=reason, replay_hint=f"the next run replays from checkpoint {checkpoint_id - 1}")


# ---- helpers ---------------------------------------------------------------------------------------
class CountingS3:
    """Delegates every call to the real boto3 client and counts what was asked of S3."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls: Counter[str] = Counter()
        self.keys_read: list[str] = []
        self.list_pages = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name in ("get_object", "head_object"):
                self.keys_read.append(kwargs["Key"])
            return attr(*args, **kwargs)
        return counted

    def get_paginator(self, operation: str) -> Any:
        self.calls["get_paginator"] += 1
        real_paginator = self._real.get_paginator(operation)
        outer = self

        class Paginator:
            def paginate(self, **kwargs: Any):
                for page in real_paginator.paginate(**kwargs):
                    outer.list_pages += 1
                    yield page
        return Paginator()

    def views_read(self) -> int:
        return sum(1 for k in self.keys_read if k.endswith("/claim.json"))


def key_of(store: CheckpointStore, checkpoint_id: int, part: str) -> str:
    """Completed and aborted share one outcome object (never both)."""
    part = "outcome" if part in ("completed", "aborted") else part
    return f"{store.root}/checkpoints/{checkpoint_id:012d}/{part}.json"


def put_raw(s3: Any, store: CheckpointStore, key: str, body: bytes | dict[str, Any]) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    s3.put_object(Bucket=store.bucket, Key=key, Body=data)


def raw(s3: Any, store: CheckpointStore, key: str) -> bytes:
    return s3.get_object(Bucket=store.bucket, Key=key)["Body"].read()


def exists(s3: Any, store: CheckpointStore, key: str) -> bool:
    return any(o["Key"] == key for o in s3.list_objects_v2(Bucket=store.bucket, Prefix=key).get("Contents", []))


def keys_under(s3: Any, store: CheckpointStore, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=f"{store.root}/{prefix}")
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def pointer_id(s3: Any, store: CheckpointStore) -> int:
    return json.loads(raw(s3, store, f"{store.root}/latest-completed.json"))["checkpoint_id"]


def complete(store: CheckpointStore, checkpoint_id: int) -> None:
    store.claim(claim_of(checkpoint_id))
    store.write_prepared(prepared_of(checkpoint_id))
    store.mark_completed(completed_of(checkpoint_id))


def abort(store: CheckpointStore, checkpoint_id: int, prepared: bool = True) -> None:
    store.claim(claim_of(checkpoint_id))
    if prepared:
        store.write_prepared(prepared_of(checkpoint_id))
    store.mark_aborted(aborted_of(checkpoint_id))


@pytest.fixture
def root(unique: str) -> str:
    return f"test-store/{unique}/{PIPELINE}"


@pytest.fixture
def store(platform, s3_client, root: str) -> CheckpointStore:
    return CheckpointStore(s3_client, platform.s3.bucket, root, PIPELINE)


# ---- atomic claim ------------------------------------------------------------------------------------
def test_second_claim_of_an_id_loses_and_names_the_owner(store: CheckpointStore, s3_client) -> None:
    store.claim(claim_of(1, run_id="run-a"))
    with pytest.raises(CheckpointAlreadyClaimed) as lost:
        store.claim(claim_of(1, run_id="run-b"))
    assert lost.value.checkpoint_id == 1
    assert store.url(key_of(store, 1, "claim")) in str(lost.value)
    assert "run-a" in str(lost.value)
    # The winner's claim is what is stored.
    assert json.loads(raw(s3_client, store, key_of(store, 1, "claim")))["run_id"] == "run-a"
    assert store.view(1).claim.run_id == "run-a"


def test_an_identical_second_claim_still_loses(store: CheckpointStore) -> None:
    """Only the conditional create decides ownership, not the content of the document."""
    store.claim(claim_of(1))
    with pytest.raises(CheckpointAlreadyClaimed):
        store.claim(claim_of(1))


CLAIM_RACER = """
import json, sys
import boto3
from lockstep.model.checkpoint import CheckpointClaim
from lockstep.model.offsets import OffsetRange
from lockstep.store.checkpoint_store import CheckpointAlreadyClaimed, CheckpointStore
endpoint, bucket, root, run_id, count = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="lockstep",
                  aws_secret_access_key="lockstep-secret", region_name="us-east-1")
s3.list_objects_v2(Bucket=bucket, Prefix=root, MaxKeys=1)  # connection warm before the start signal
store = CheckpointStore(s3, bucket, root, "orders")
print("ready", flush=True)
sys.stdin.readline()
won, lost = [], []
for i in range(1, count + 1):
    claim = CheckpointClaim(pipeline="orders", checkpoint_id=i, run_id=run_id, claimed_at="2025-01-01T00:00:00Z",
                            ranges=(OffsetRange("orders-in", 0, i, i + 1),), start_source="latest")
    try:
        store.claim(claim)
        won.append(i)
    except CheckpointAlreadyClaimed:
        lost.append(i)
print(json.dumps({"won": won, "lost": lost}), flush=True)
"""


def test_concurrent_processes_claiming_the_same_ids_have_exactly_one_winner_each(
        platform, s3_client, store: CheckpointStore) -> None:
    count, runs = 20, ["run-a", "run-b", "run-c"]
    procs = [subprocess.Popen([sys.executable, "-c", CLAIM_RACER, platform.s3.endpoint, store.bucket, store.root,
                               run, str(count)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for run in runs]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        for proc in procs:  # release them together
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = {}
        for run, proc in zip(runs, procs):
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            results[run] = json.loads(out.strip().splitlines()[-1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    ids = set(range(1, count + 1))
    for run in runs:  # every attempt ended in a win or a clean loss, never another error
        assert sorted(results[run]["won"] + results[run]["lost"]) == sorted(ids)
    winners = Counter(i for run in runs for i in results[run]["won"])
    assert set(winners) == ids
    assert all(n == 1 for n in winners.values()), winners
    # The stored claim belongs to the process that was told it won.
    for run in runs:
        for i in results[run]["won"]:
            assert store.view(i).claim.run_id == run


# ---- immutability, forward-only status -------------------------------------------------------------
def test_status_moves_claimed_prepared_completed(store: CheckpointStore) -> None:
    assert store.view(1) is None
    store.claim(claim_of(1))
    assert store.view(1).status is CheckpointStatus.CLAIMED
    store.write_prepared(prepared_of(1))
    assert store.view(1).status is CheckpointStatus.PREPARED
    store.mark_completed(completed_of(1))
    view = store.view(1)
    assert view.status is CheckpointStatus.COMPLETED
    assert view.claim == claim_of(1)
    assert view.prepared == prepared_of(1)
    assert view.completed == completed_of(1)
    assert view.aborted is None


def test_write_prepared_is_idempotent_for_identical_content(store: CheckpointStore, s3_client) -> None:
    store.claim(claim_of(1))
    store.write_prepared(prepared_of(1))
    before = raw(s3_client, store, key_of(store, 1, "prepared"))
    store.write_prepared(prepared_of(1))
    assert raw(s3_client, store, key_of(store, 1, "prepared")) == before
    assert store.view(1).prepared == prepared_of(1)


def test_write_prepared_with_different_content_is_refused_and_nothing_is_overwritten(
        store: CheckpointStore, s3_client) -> None:
    store.claim(claim_of(1))
    store.write_prepared(prepared_of(1, records_out=20))
    before = raw(s3_client, store, key_of(store, 1, "prepared"))
    with pytest.raises(CheckpointError) as refused:
        store.write_prepared(prepared_of(1, records_out=19))
    message = str(refused.value)
    assert refused.value.checkpoint_id == 1
    assert store.url(key_of(store, 1, "prepared")) in message
    assert "never overwritten" in message
    assert raw(s3_client, store, key_of(store, 1, "prepared")) == before
    assert store.view(1).prepared.records_out == 20


def test_write_prepared_without_a_claim_is_refused(store: CheckpointStore, s3_client) -> None:
    with pytest.raises(CheckpointError, match="has no claim"):
        store.write_prepared(prepared_of(1))
    assert not exists(s3_client, store, key_of(store, 1, "prepared"))


def test_mark_completed_on_an_unprepared_checkpoint_fails(store: CheckpointStore, s3_client) -> None:
    store.claim(claim_of(1))
    with pytest.raises(CheckpointError, match="not prepared"):
        store.mark_completed(completed_of(1))
    assert not exists(s3_client, store, key_of(store, 1, "completed"))
    assert not exists(s3_client, store, f"{store.root}/latest-completed.json")
    assert store.view(1).status is CheckpointStatus.CLAIMED


def test_mark_completed_again_with_the_same_document_changes_nothing(store: CheckpointStore, s3_client) -> None:
    complete(store, 1)
    before = raw(s3_client, store, key_of(store, 1, "completed"))
    store.mark_completed(completed_of(1))
    assert raw(s3_client, store, key_of(store, 1, "completed")) == before
    assert pointer_id(s3_client, store) == 1
    assert store.view(1).status is CheckpointStatus.COMPLETED


def test_mark_completed_again_with_another_document_is_refused(store: CheckpointStore, s3_client) -> None:
    complete(store, 1)
    before = raw(s3_client, store, key_of(store, 1, "completed"))
    with pytest.raises(CheckpointError, match="never overwritten"):
        store.mark_completed(completed_of(1, completed_at="2025-02-02T00:00:00Z"))
    assert raw(s3_client, store, key_of(store, 1, "completed")) == before


def test_mark_aborted_after_completed_fails(store: CheckpointStore, s3_client) -> None:
    complete(store, 1)
    before = raw(s3_client, store, key_of(store, 1, "completed"))
    with pytest.raises(CheckpointError, match="never moves backward"):
        store.mark_aborted(aborted_of(1))
    assert raw(s3_client, store, key_of(store, 1, "aborted")) == before
    assert store.view(1).status is CheckpointStatus.COMPLETED


def test_mark_completed_after_aborted_fails(store: CheckpointStore, s3_client) -> None:
    abort(store, 1)
    before = raw(s3_client, store, key_of(store, 1, "aborted"))
    with pytest.raises(CheckpointError, match="was aborted"):
        store.mark_completed(completed_of(1))
    assert raw(s3_client, store, key_of(store, 1, "completed")) == before
    assert not exists(s3_client, store, f"{store.root}/latest-completed.json")
    assert store.view(1).status is CheckpointStatus.ABORTED


def test_write_prepared_after_aborted_fails(store: CheckpointStore, s3_client) -> None:
    abort(store, 1, prepared=False)
    with pytest.raises(CheckpointError, match="was aborted"):
        store.write_prepared(prepared_of(1))
    assert not exists(s3_client, store, key_of(store, 1, "prepared"))


def test_aborting_twice_keeps_the_first_reason(store: CheckpointStore, s3_client) -> None:
    store.claim(claim_of(1))
    store.mark_aborted(aborted_of(1, reason="first: transaction timed out"))
    before = raw(s3_client, store, key_of(store, 1, "aborted"))
    store.mark_aborted(aborted_of(1, reason="second: operator gave up"))
    assert raw(s3_client, store, key_of(store, 1, "aborted")) == before
    assert store.view(1).aborted.reason == "first: transaction timed out"
    assert store.view(1).status is CheckpointStatus.ABORTED


def test_concurrent_aborts_all_succeed_and_one_reason_is_kept(store: CheckpointStore) -> None:
    """Recovery and a failing commit may abort the same checkpoint at once: neither may crash on the other."""
    ids, racers = range(1, 13), 3
    for i in ids:
        store.claim(claim_of(i))
    barriers = {i: threading.Barrier(racers) for i in ids}

    def abort_as(i: int, racer: int) -> None:
        barriers[i].wait(timeout=30)
        store.mark_aborted(aborted_of(i, reason=f"racer {racer}"))

    with ThreadPoolExecutor(racers) as pool:
        futures = [pool.submit(abort_as, i, r) for i in ids for r in range(racers)]
        errors = [f.exception() for f in futures]
    assert errors == [None] * len(futures)
    for i in ids:
        assert store.view(i).aborted.reason in {f"racer {r}" for r in range(racers)}


def test_pointer_never_moves_backward(store: CheckpointStore, s3_client) -> None:
    store.claim(claim_of(1))
    store.write_prepared(prepared_of(1))
    complete(store, 2)
    assert pointer_id(s3_client, store) == 2
    store.mark_completed(completed_of(1))  # a late commit of an older checkpoint
    assert pointer_id(s3_client, store) == 2
    complete(store, 3)
    assert pointer_id(s3_client, store) == 3


# ---- latest completed --------------------------------------------------------------------------------
def test_latest_completed_is_none_when_nothing_completed(store: CheckpointStore) -> None:
    assert store.latest_completed() is None
    store.claim(claim_of(1))
    store.write_prepared(prepared_of(1))
    abort(store, 2)
    store.claim(claim_of(3))
    assert store.latest_completed() is None


def test_latest_completed_follows_the_pointer(store: CheckpointStore, s3_client) -> None:
    for i in (1, 2, 3):
        complete(store, i)
    assert pointer_id(s3_client, store) == 3
    latest = store.latest_completed()
    assert latest.checkpoint_id == 3
    assert latest.completed == completed_of(3)


def test_latest_completed_skips_aborted_and_claimed_checkpoints_after_it(store: CheckpointStore) -> None:
    complete(store, 1)
    complete(store, 2)
    abort(store, 3)
    abort(store, 4, prepared=False)
    store.claim(claim_of(5))
    store.claim(claim_of(6))
    store.write_prepared(prepared_of(6))
    assert store.latest_completed().checkpoint_id == 2


def test_latest_completed_finds_a_checkpoint_completed_after_a_lagging_pointer(
        store: CheckpointStore, s3_client) -> None:
    complete(store, 1)
    complete(store, 2)
    # Checkpoint 3's commit died between writing completed.json and moving the pointer.
    store.claim(claim_of(3))
    store.write_prepared(prepared_of(3))
    put_raw(s3_client, store, key_of(store, 3, "completed"), completed_of(3).to_json())
    abort(store, 4)
    store.claim(claim_of(5))
    assert pointer_id(s3_client, store) == 2
    latest = store.latest_completed()
    assert latest.checkpoint_id == 3
    assert latest.completed.end_offsets == {f"{TOPIC}:0": 30, f"{TOPIC}:1": 30}
    # The next completion moves the pointer past the gap.
    store.claim(claim_of(6))
    store.write_prepared(prepared_of(6))
    store.mark_completed(completed_of(6))
    assert pointer_id(s3_client, store) == 6
    assert store.latest_completed().checkpoint_id == 6


def test_latest_completed_without_a_pointer_scans_what_there_is(store: CheckpointStore, s3_client) -> None:
    """A commit that died before the pointer ever existed still leaves a findable completed checkpoint."""
    store.claim(claim_of(1))
    store.write_prepared(prepared_of(1))
    put_raw(s3_client, store, key_of(store, 1, "completed"), completed_of(1).to_json())
    abort(store, 2)
    assert not exists(s3_client, store, f"{store.root}/latest-completed.json")
    assert store.latest_completed().checkpoint_id == 1


def test_latest_completed_refuses_a_pointer_to_a_missing_checkpoint(store: CheckpointStore, s3_client) -> None:
    """Starting over silently from auto.offset.reset would replay or skip data: fail loudly instead."""
    complete(store, 1)
    complete(store, 2)
    for key in keys_under(s3_client, store, "checkpoints/000000000002/"):
        s3_client.delete_object(Bucket=store.bucket, Key=key)
    with pytest.raises(MetadataError) as bad:
        store.latest_completed()
    assert store.url(f"{store.root}/latest-completed.json") in str(bad.value)
    assert "checkpoint 2" in str(bad.value)


def test_latest_completed_refuses_a_pointer_of_another_pipeline(store: CheckpointStore, s3_client) -> None:
    complete(store, 1)
    pointer_key = f"{store.root}/latest-completed.json"
    doc = json.loads(raw(s3_client, store, pointer_key))
    put_raw(s3_client, store, pointer_key, {**doc, "pipeline": "payments"})
    with pytest.raises(MetadataError, match="payments") as bad:
        store.latest_completed()
    assert store.url(pointer_key) in str(bad.value)


def _write_history(s3: Any, store: CheckpointStore, count: int) -> None:
    """`count` completed checkpoints: claim + completed objects written directly, the last one by the store."""
    def write(i: int) -> None:
        put_raw(s3, store, key_of(store, i, "claim"), claim_of(i).to_json())
        put_raw(s3, store, key_of(store, i, "completed"), completed_of(i).to_json())
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(1, count)))
    complete(store, count)


@pytest.mark.parametrize("history", [20, 200])
def test_latest_completed_reads_a_bounded_number_of_checkpoints(
        platform, s3_client, root: str, history: int) -> None:
    _write_history(s3_client, CheckpointStore(s3_client, platform.s3.bucket, root, PIPELINE), history)
    counting = CountingS3(s3_client)
    latest = CheckpointStore(counting, platform.s3.bucket, root, PIPELINE).latest_completed()
    assert latest.checkpoint_id == history
    assert counting.views_read() <= 2, counting.keys_read
    assert counting.list_pages <= 1
    assert counting.calls["list_objects_v2"] == 0  # only paginated listing, counted in list_pages
    assert len(counting.keys_read) <= 10, counting.keys_read  # pointer + one view (4 parts) + slack


def test_latest_completed_reads_only_the_newest_completed_of_a_long_tail(
        platform, s3_client, store: CheckpointStore) -> None:
    """After the pointer, checkpoints are read newest first and reading stops at the first completed."""
    complete(store, 1)
    for i in range(2, 12):
        abort(store, i, prepared=False)
    store.claim(claim_of(12))
    store.write_prepared(prepared_of(12))
    put_raw(s3_client, store, key_of(store, 12, "completed"), completed_of(12).to_json())  # pointer lags at 1
    for i in range(13, 16):
        abort(store, i, prepared=False)
    counting = CountingS3(s3_client)
    latest = CheckpointStore(counting, store.bucket, store.root, PIPELINE).latest_completed()
    assert latest.checkpoint_id == 12
    assert counting.views_read() <= 5, counting.keys_read  # 1 (pointer) + 15, 14, 13, 12


# ---- retention -----------------------------------------------------------------------------------------
def test_retention_keeps_the_newest_completed_and_everything_after_and_all_savepoints(
        store: CheckpointStore, s3_client) -> None:
    for i in range(1, 7):
        complete(store, i)
    store.create_savepoint("before-migration", 2, created_at="2025-01-01T01:00:00Z")
    abort(store, 7)
    complete(store, 8)
    complete(store, 9)
    store.claim(claim_of(10))  # in flight
    store.create_savepoint("nightly", None, created_at="2025-01-01T02:00:00Z")

    deleted = store.apply_retention(retain=3)

    assert deleted == [1, 2, 3, 4, 5]
    assert list(store.checkpoint_ids()) == [6, 7, 8, 9, 10]
    for i in deleted:
        assert keys_under(s3_client, store, f"checkpoints/{i:012d}/") == []
        assert store.view(i) is None
    assert store.view(6).status is CheckpointStatus.COMPLETED
    assert store.view(7).status is CheckpointStatus.ABORTED
    assert store.view(10).status is CheckpointStatus.CLAIMED
    assert store.latest_completed().checkpoint_id == 9
    old = store.get_savepoint("before-migration")
    assert (old.checkpoint_id, dict(old.end_offsets)) == (2, {f"{TOPIC}:0": 20, f"{TOPIC}:1": 20})
    assert store.get_savepoint("nightly").checkpoint_id == 9
    assert [s.name for s in store.list_savepoints()] == ["before-migration", "nightly"]
    # Applying it again finds nothing more to delete.
    assert store.apply_retention(retain=3) == []
    assert list(store.checkpoint_ids()) == [6, 7, 8, 9, 10]


def test_retention_deletes_nothing_while_history_is_short(store: CheckpointStore) -> None:
    for i in (1, 2, 3):
        complete(store, i)
    abort(store, 4)
    assert store.apply_retention(retain=3) == []
    assert list(store.checkpoint_ids()) == [1, 2, 3, 4]


def test_retention_refuses_to_keep_nothing(store: CheckpointStore) -> None:
    for i in (1, 2):
        complete(store, i)
    with pytest.raises(TerminalError, match="retain"):
        store.apply_retention(retain=0)
    assert list(store.checkpoint_ids()) == [1, 2]


# ---- savepoints -------------------------------------------------------------------------------------------
def test_savepoint_from_latest_and_from_a_given_checkpoint(store: CheckpointStore, s3_client) -> None:
    for i in (1, 2, 3):
        complete(store, i)
    abort(store, 4)
    latest = store.create_savepoint("latest", None, created_at="2025-01-01T01:00:00Z")
    assert latest.checkpoint_id == 3
    assert dict(latest.end_offsets) == {f"{TOPIC}:0": 30, f"{TOPIC}:1": 30}
    assert latest.ranges == ranges_of(3)
    first = store.create_savepoint("first", 1, created_at="2025-01-01T02:00:00Z")
    assert first.checkpoint_id == 1
    assert dict(first.end_offsets) == {f"{TOPIC}:0": 10, f"{TOPIC}:1": 10}
    assert store.get_savepoint("latest") == latest
    assert store.get_savepoint("first") == first
    assert store.list_savepoints() == [latest, first]  # ordered by creation time
    assert keys_under(s3_client, store, "savepoints/") == [f"{store.root}/savepoints/first.json",
                                                           f"{store.root}/savepoints/latest.json"]


def test_duplicate_savepoint_name_is_refused_and_the_first_is_kept(store: CheckpointStore, s3_client) -> None:
    complete(store, 1)
    complete(store, 2)
    store.create_savepoint("keep", 1, created_at="2025-01-01T01:00:00Z")
    before = raw(s3_client, store, f"{store.root}/savepoints/keep.json")
    with pytest.raises(TerminalError) as refused:
        store.create_savepoint("keep", 2, created_at="2025-01-01T02:00:00Z")
    message = str(refused.value)
    assert "'keep' already exists" in message
    assert store.url(f"{store.root}/savepoints/keep.json") in message
    assert "delete it first or pick another name" in message
    assert raw(s3_client, store, f"{store.root}/savepoints/keep.json") == before
    assert store.get_savepoint("keep").checkpoint_id == 1


def test_savepoint_of_a_checkpoint_that_is_not_completed_is_refused(store: CheckpointStore, s3_client) -> None:
    with pytest.raises(TerminalError, match="no checkpoint has completed yet"):
        store.create_savepoint("early", None, created_at="2025-01-01T01:00:00Z")
    complete(store, 1)
    abort(store, 2)
    store.claim(claim_of(3))
    store.write_prepared(prepared_of(3))
    with pytest.raises(TerminalError, match="checkpoint 2 is aborted, not completed"):
        store.create_savepoint("sp", 2, created_at="2025-01-01T01:00:00Z")
    with pytest.raises(TerminalError, match="checkpoint 3 is prepared, not completed"):
        store.create_savepoint("sp", 3, created_at="2025-01-01T01:00:00Z")
    with pytest.raises(TerminalError, match="checkpoint 99 is unknown, not completed"):
        store.create_savepoint("sp", 99, created_at="2025-01-01T01:00:00Z")
    assert keys_under(s3_client, store, "savepoints/") == []


def test_savepoints_are_listed_described_and_deleted(store: CheckpointStore, s3_client) -> None:
    complete(store, 1)
    assert store.list_savepoints() == []
    store.create_savepoint("b", 1, created_at="2025-01-01T02:00:00Z")
    store.create_savepoint("a", 1, created_at="2025-01-01T01:00:00Z")
    assert [s.name for s in store.list_savepoints()] == ["a", "b"]
    described = store.get_savepoint("b")
    assert (described.name, described.pipeline, described.checkpoint_id) == ("b", PIPELINE, 1)
    store.delete_savepoint("a")
    assert [s.name for s in store.list_savepoints()] == ["b"]
    assert keys_under(s3_client, store, "savepoints/") == [f"{store.root}/savepoints/b.json"]
    with pytest.raises(TerminalError, match=r"savepoint 'a' not found for pipeline orders \(existing: b\)"):
        store.get_savepoint("a")
    with pytest.raises(TerminalError, match="savepoint 'a' not found"):
        store.delete_savepoint("a")
    # The name is free again once deleted.
    store.create_savepoint("a", 1, created_at="2025-01-01T03:00:00Z")
    assert store.get_savepoint("a").created_at == "2025-01-01T03:00:00Z"


@pytest.mark.parametrize("name", ["../x", "a/b", "", "..", "x/../../y", ".hidden"])
def test_invalid_savepoint_names_are_refused_before_touching_s3(
        platform, s3_client, root: str, name: str) -> None:
    counting = CountingS3(s3_client)
    store = CheckpointStore(counting, platform.s3.bucket, root, PIPELINE)
    for attempt in (lambda: store.create_savepoint(name, None, created_at="2025-01-01T01:00:00Z"),
                    lambda: store.create_savepoint(name, 1, created_at="2025-01-01T01:00:00Z"),
                    lambda: store.get_savepoint(name),
                    lambda: store.delete_savepoint(name)):
        with pytest.raises(TerminalError, match="invalid savepoint name"):
            attempt()
    assert counting.calls == Counter() and counting.list_pages == 0


# ---- corrupt metadata ---------------------------------------------------------------------------------------
CORRUPT_CLAIMS = {
    "not-json": (b"{this is not json", "not JSON"),
    "foreign-schema": (json.dumps({"schema": "someone-else/7", "checkpoint_id": 1}).encode(), "schema is"),
    "other-pipeline": (json.dumps(claim_of(1, pipeline="payments").to_json()).encode(), "pipeline 'payments'"),
    "wrong-id": (json.dumps(claim_of(5).to_json()).encode(), "checkpoint 5"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT_CLAIMS))
def test_corrupt_claim_raises_metadata_error_and_is_never_overwritten(
        store: CheckpointStore, s3_client, case: str) -> None:
    body, reason = CORRUPT_CLAIMS[case]
    claim_key = key_of(store, 1, "claim")
    put_raw(s3_client, store, claim_key, body)
    url = store.url(claim_key)
    operations = {
        "view": lambda: store.view(1),
        "claim": lambda: store.claim(claim_of(1)),
        "write_prepared": lambda: store.write_prepared(prepared_of(1)),
        "mark_completed": lambda: store.mark_completed(completed_of(1)),
        "mark_aborted": lambda: store.mark_aborted(aborted_of(1)),
        "latest_completed": store.latest_completed,
        "savepoint": lambda: store.create_savepoint("sp", 1, created_at="2025-01-01T01:00:00Z"),
    }
    for name, operation in operations.items():
        with pytest.raises(MetadataError) as bad:
            operation()
        assert url in str(bad.value), name
        assert reason in str(bad.value), name
        assert raw(s3_client, store, claim_key) == body, name
    assert keys_under(s3_client, store, "") == [claim_key]  # nothing else was written


def test_corrupt_completed_after_the_pointer_raises_metadata_error(store: CheckpointStore, s3_client) -> None:
    complete(store, 1)
    store.claim(claim_of(2))
    store.write_prepared(prepared_of(2))
    completed_key = key_of(store, 2, "completed")
    put_raw(s3_client, store, completed_key, {"schema": "lockstep.checkpoint.completed/1", "pipeline": PIPELINE})
    with pytest.raises(MetadataError) as bad:
        store.latest_completed()
    assert store.url(completed_key) in str(bad.value)
    assert "missing field" in str(bad.value)
    with pytest.raises(MetadataError):
        store.mark_completed(completed_of(2))
    assert json.loads(raw(s3_client, store, completed_key)) == {"schema": "lockstep.checkpoint.completed/1",
                                                                 "pipeline": PIPELINE}
    assert pointer_id(s3_client, store) == 1


def test_corrupt_savepoint_raises_metadata_error(store: CheckpointStore, s3_client) -> None:
    key = f"{store.root}/savepoints/broken.json"
    put_raw(s3_client, store, key, b"\xff\xfe not utf-8")
    with pytest.raises(MetadataError) as bad:
        store.get_savepoint("broken")
    assert store.url(key) in str(bad.value)
    with pytest.raises(MetadataError):
        store.list_savepoints()
    assert raw(s3_client, store, key) == b"\xff\xfe not utf-8"


def test_racing_commit_and_abort_settle_on_exactly_one_outcome(store: CheckpointStore) -> None:
    """The atomic-claim invariant: completed and aborted are never both, even when written at once."""
    import threading

    ids = list(range(1, 11))
    for i in ids:
        store.claim(claim_of(i))
        store.write_prepared(prepared_of(i))
    results: dict[tuple[int, str], str] = {}

    def attempt(i: int, kind: str, barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            if kind == "complete":
                store.mark_completed(completed_of(i))
            else:
                store.mark_aborted(aborted_of(i))
            results[(i, kind)] = "ok"
        except CheckpointError:
            results[(i, kind)] = "refused"

    for i in ids:
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=attempt, args=(i, k, barrier)) for k in ("complete", "abort")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        status = store.view(i).status  # never raises "both completed and aborted"
        winner = "complete" if status is CheckpointStatus.COMPLETED else "abort"
        assert status in (CheckpointStatus.COMPLETED, CheckpointStatus.ABORTED)
        assert results[(i, winner)] == "ok"
        assert results[(i, "abort" if winner == "complete" else "complete")] == "refused"


# ---- state files: no attempt overwrites another's -----------------------------------------------------
def state_table(customer: str, orders: int) -> bytes:
    """One key group's base: a Parquet file as the run writes it."""
    import pyarrow as pa

    from lockstep.store import state_chain

    return state_chain.parquet(pa.table({"__ls_key": [customer], "__ls_key_group": [1], "orders": [orders]}))


def test_a_taken_state_file_name_keeps_its_bytes_and_a_manifest_of_the_retry_still_reads(
        store: CheckpointStore, s3_client) -> None:
    from lockstep.model.state_manifest import GroupState, PartitionTime, StateManifest
    from lockstep.store.state_cache import digest
    from lockstep.store.state_files import StateFiles, content_key

    files = StateFiles(s3_client, store.bucket, store.root, cache=None)  # every read checks the digest on S3
    key = files.key(7, 1)
    retry, late = state_table("c1", 2), state_table("c1", 3)  # two attempts that computed different state
    # The run task's retry writes the file and its prepared manifest names it.
    assert files.put_table(key, retry) == (key, digest(retry))
    manifest = StateManifest(operator="window", key_groups=4, written_by=7, files={1: (key,)},
                             columns={"__ls_key": "string", "orders": "bigint"}, watermark_ms=1000,
                             partitions={"in:0": PartitionTime(1000, 7)}, keys=1, rows=1, bytes=len(retry),
                             groups={1: GroupState(keys=1, rows=1, file_bytes=(len(retry),), digests=(digest(retry),))})
    # The slow first attempt uploads afterwards: its bytes go under their own name, the retry's stay.
    assert files.put_table(key, late) == (content_key(key, digest(late)), digest(late))
    assert raw(s3_client, store, key) == retry
    assert files.read_state(manifest).to_pylist() == [{"__ls_key": "c1", "__ls_key_group": 1, "orders": 2}]
    # A deterministic attempt's same bytes reuse the file: nothing new is written.
    assert files.put_table(key, retry) == (key, digest(retry))
    assert sorted(files.listing()) == sorted([key, content_key(key, digest(late))])

    # Two attempts racing for one name on the server's conditional create: each ends with its own bytes.
    racing = files.key(8, 1)
    bodies = [state_table("c2", n) for n in (1, 2)]
    barrier = threading.Barrier(2)

    def attempt(body: bytes) -> tuple[str, str]:
        barrier.wait()
        return files.put_table(racing, body)

    with ThreadPoolExecutor(2) as pool:
        placed = list(pool.map(attempt, bodies))
    assert sorted(k == racing for k, _ in placed) == [False, True]
    assert [raw(s3_client, store, k) for k, _ in placed] == bodies


class RacingS3(CountingS3):
    """The real client, with ``before_put[key]`` called once just before ``key`` is put."""

    def __init__(self, real: Any) -> None:
        super().__init__(real)
        self.before_put: dict[str, Any] = {}

    def put_object(self, **kwargs: Any) -> Any:
        hook = self.before_put.pop(kwargs["Key"], None)
        if hook:
            hook()
        return self._real.put_object(**kwargs)


def test_a_savepoint_whose_checkpoint_a_commit_collects_meanwhile_is_refused_on_the_real_server(
        platform, s3_client, root: str) -> None:
    from lockstep.model.state_manifest import StateManifest

    racing = RacingS3(s3_client)
    store = CheckpointStore(racing, platform.s3.bucket, root, PIPELINE)
    files = store.state_files()
    manifests: list[StateManifest] = []
    for cid in (1, 2, 3):  # each checkpoint writes a new state file; its claim names the one before
        files.put(files.key(cid, 0), f"state {cid}".encode())
        manifests.append(StateManifest(operator="dedup", key_groups=1, written_by=cid, files={0: (files.key(cid, 0),)},
                                       columns={"__ls_key": "string"}, watermark_ms=cid, partitions={}, keys=1))
        store.claim(replace(claim_of(cid), state_base=manifests[-2] if cid > 1 else None))
        store.write_prepared(replace(prepared_of(cid), state=manifests[-1]))
        store.mark_completed(replace(completed_of(cid), state=manifests[-1]))

    def commit_meanwhile() -> None:  # the savepoint has read checkpoint 1's manifest, not written itself
        assert store.apply_retention(1) == [1, 2]
        assert files.key(1, 0) in store.collect_state_garbage()

    racing.before_put[f"{root}/savepoints/old.json"] = commit_meanwhile
    with pytest.raises(TerminalError, match="retention deleted checkpoint 1 while the savepoint was being written"):
        store.create_savepoint("old", 1, created_at="2025-01-01T01:00:00Z")
    assert keys_under(s3_client, store, "savepoints/") == [], "no savepoint names the deleted file"
    assert store.create_savepoint("new", None, created_at="2025-01-01T01:00:00Z").state == manifests[2]
