"""The checkpoint store's transitions over an in-memory S3 client (tests/support/fake_s3.py).

The store's rules hang on S3's conditional writes: the first create of a claim owns the id, every
document is created once, the one outcome object makes completed and aborted exclusive, the
pointer only moves forward. These tests assert what ends up stored and what each refusal says; the
same rules are checked against the real S3 server in tests/integration/test_store.py.
"""
from __future__ import annotations

import json

import pytest

from lockstep.errors import CheckpointError, MetadataError, TerminalError
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CheckpointStatus,
    CompletedCheckpoint,
    PreparedCheckpoint,
    PreparedTransaction,
    RunFailure,
)
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.store.checkpoint_store import CheckpointAlreadyClaimed, CheckpointStore
from tests.support.fake_s3 import FakeS3

BUCKET, ROOT, PIPELINE = "lockstep", "tests/orders", "orders"


def ranges_of(checkpoint_id: int) -> tuple[OffsetRange, ...]:
    return tuple(OffsetRange("orders-in", p, 10 * (checkpoint_id - 1), 10 * checkpoint_id) for p in (0, 1))


def claim_of(checkpoint_id: int, run_id: str = "run-a") -> CheckpointClaim:
    return CheckpointClaim(PIPELINE, checkpoint_id, run_id, "2026-01-01T00:00:00+00:00", ranges_of(checkpoint_id),
                           f"checkpoint:{checkpoint_id - 1}")


def prepared_of(checkpoint_id: int, records: int = 20) -> PreparedCheckpoint:
    txn = PreparedTransaction(f"tx-{checkpoint_id}-0", 1000 + checkpoint_id, 0, (TopicPartition("orders-out", 0),),
                              records, 0, 0, 1_700_000_000_000)
    return PreparedCheckpoint(PIPELINE, checkpoint_id, "2026-01-01T00:01:00+00:00", (txn,), 20, records, 0, 1.0)


def completed_of(checkpoint_id: int) -> CompletedCheckpoint:
    return CompletedCheckpoint(PIPELINE, checkpoint_id, "2026-01-01T00:02:00+00:00",
                               {r.tp.key: r.end for r in ranges_of(checkpoint_id)}, (f"tx-{checkpoint_id}-0",))


def aborted_of(checkpoint_id: int, reason: str = "its run died") -> AbortedCheckpoint:
    return AbortedCheckpoint(PIPELINE, checkpoint_id, "2026-01-01T00:03:00+00:00", reason, "replayed next run")


@pytest.fixture
def s3() -> FakeS3:
    return FakeS3()


@pytest.fixture
def store(s3: FakeS3) -> CheckpointStore:
    return CheckpointStore(s3, BUCKET, ROOT, PIPELINE)


def stored(s3: FakeS3, checkpoint_id: int, part: str) -> dict:
    return json.loads(s3.body(BUCKET, f"{ROOT}/checkpoints/{checkpoint_id:012d}/{part}.json"))


def completed(store: CheckpointStore, checkpoint_id: int) -> None:
    store.claim(claim_of(checkpoint_id))
    store.write_prepared(prepared_of(checkpoint_id))
    store.mark_completed(completed_of(checkpoint_id))


# ---- the fake's own conditional semantics, which every test below relies on ----------------------
def test_fake_s3_create_if_absent_and_replace_only_the_version_read(s3: FakeS3):
    first = s3.put_object(Bucket=BUCKET, Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(Exception, match="PreconditionFailed"):
        s3.put_object(Bucket=BUCKET, Key="k", Body=b"2", IfNoneMatch="*")
    s3.put_object(Bucket=BUCKET, Key="k", Body=b"3", IfMatch=first["ETag"])
    with pytest.raises(Exception, match="PreconditionFailed"):
        s3.put_object(Bucket=BUCKET, Key="k", Body=b"4", IfMatch=first["ETag"])  # stale version
    assert s3.body(BUCKET, "k") == b"3"


# ---- claim -----------------------------------------------------------------------------------------
def test_two_claims_for_one_id_one_wins_and_the_loser_is_told_who_owns_it(s3: FakeS3):
    run_a, run_b = CheckpointStore(s3, BUCKET, ROOT, PIPELINE), CheckpointStore(s3, BUCKET, ROOT, PIPELINE)
    run_a.claim(claim_of(1, "run-a"))
    with pytest.raises(CheckpointAlreadyClaimed, match="already claimed by run 'run-a'"):
        run_b.claim(claim_of(1, "run-b"))
    assert stored(s3, 1, "claim")["run_id"] == "run-a"
    assert run_b.view(1).claim.run_id == "run-a"


def test_the_create_decides_a_claim_not_its_content_an_identical_second_claim_loses(store: CheckpointStore):
    store.claim(claim_of(1))
    with pytest.raises(CheckpointAlreadyClaimed):
        store.claim(claim_of(1))


def test_a_claimed_checkpoint_reads_as_claimed_with_its_ranges(store: CheckpointStore):
    store.claim(claim_of(3))
    view = store.view(3)
    assert view.status is CheckpointStatus.CLAIMED
    assert view.claim.ranges == ranges_of(3)
    assert store.view(4) is None


# ---- forward-only transitions ------------------------------------------------------------------------
def test_prepared_then_completed_reads_back_and_moves_the_pointer(store: CheckpointStore, s3: FakeS3):
    store.claim(claim_of(1))
    store.write_prepared(prepared_of(1))
    assert store.view(1).status is CheckpointStatus.PREPARED
    assert store.view(1).prepared == prepared_of(1)
    store.mark_completed(completed_of(1))
    assert store.view(1).status is CheckpointStatus.COMPLETED
    assert store.latest_completed().completed == completed_of(1)
    assert json.loads(s3.body(BUCKET, f"{ROOT}/latest-completed.json"))["checkpoint_id"] == 1


def test_prepared_metadata_is_written_once_an_identical_rewrite_is_harmless_a_different_one_refused(
        store: CheckpointStore):
    store.claim(claim_of(1))
    store.write_prepared(prepared_of(1))
    store.write_prepared(prepared_of(1))
    with pytest.raises(CheckpointError, match="already exists with different content"):
        store.write_prepared(prepared_of(1, records=19))
    assert store.view(1).prepared.records_out == 20


STEPS = {
    "claim": lambda store: store.claim(claim_of(1)),
    "prepare": lambda store: store.write_prepared(prepared_of(1)),
    "complete": lambda store: store.mark_completed(completed_of(1)),
    "abort": lambda store: store.mark_aborted(aborted_of(1, "its run died")),
}
#: (steps taken, the step refused, what the refusal says, the status that stays)
REFUSED = {
    "prepare without a claim": ((), "prepare", "has no claim", None),
    "complete a claimed one": (("claim",), "complete", "is not prepared", CheckpointStatus.CLAIMED),
    "prepare an aborted one": (("claim", "abort"), "prepare", "was aborted", CheckpointStatus.ABORTED),
    "complete an aborted one": (("claim", "abort"), "complete", "was aborted", CheckpointStatus.ABORTED),
    "complete one aborted after it was prepared": (("claim", "prepare", "abort"), "complete",
                                                   r"was aborted \(its run died\)", CheckpointStatus.ABORTED),
    "abort a completed one": (("claim", "prepare", "complete"), "abort", "never moves backward",
                              CheckpointStatus.COMPLETED),
}


@pytest.mark.parametrize("steps, refused, message, stays", REFUSED.values(), ids=REFUSED.keys())
def test_status_only_moves_forward(store: CheckpointStore, steps, refused, message, stays):
    for step in steps:
        STEPS[step](store)
    before = store.view(1)
    with pytest.raises(CheckpointError, match=message):
        STEPS[refused](store)
    after = store.view(1)
    assert after == before
    assert (after.status if after else None) is stays
    latest = store.latest_completed()
    assert (latest.checkpoint_id if latest else None) == (1 if stays is CheckpointStatus.COMPLETED else None)


def test_aborting_twice_keeps_the_first_reason(store: CheckpointStore):
    store.claim(claim_of(1))
    store.mark_aborted(aborted_of(1, "first"))
    store.mark_aborted(aborted_of(1, "second"))
    assert store.view(1).aborted.reason == "first"


def test_completing_twice_is_idempotent_and_the_first_record_stays(store: CheckpointStore, s3: FakeS3):
    completed(store, 1)
    store.mark_completed(completed_of(1))
    assert stored(s3, 1, "outcome") == completed_of(1).to_json()


def test_a_run_failure_is_overwritten_by_the_next_attempts(store: CheckpointStore):
    store.claim(claim_of(1))
    store.record_run_failure(RunFailure(PIPELINE, 1, "t1", "first attempt"))
    store.record_run_failure(RunFailure(PIPELINE, 1, "t2", "second attempt"))
    assert store.run_failure(1).cause == "second attempt"
    assert store.view(1).status is CheckpointStatus.CLAIMED  # it decides nothing


def test_a_document_of_another_pipeline_is_refused_not_read(s3: FakeS3, store: CheckpointStore):
    CheckpointStore(s3, BUCKET, ROOT, "payments").claim(
        CheckpointClaim("payments", 1, "run-x", "2026-01-01T00:00:00+00:00", ranges_of(1), "earliest"))
    with pytest.raises(MetadataError, match="belongs to pipeline 'payments'"):
        store.view(1)


# ---- listing and the latest completed checkpoint --------------------------------------------------
def test_ids_are_listed_in_numeric_order_across_listing_pages():
    paged = CheckpointStore(FakeS3(page_size=2), BUCKET, ROOT, PIPELINE)
    for cid in (1, 2, 3, 9, 10, 11):
        paged.claim(claim_of(cid))
    assert list(paged.checkpoint_ids()) == [1, 2, 3, 9, 10, 11]
    assert list(paged.checkpoint_ids(after=3)) == [9, 10, 11]
    assert [v.checkpoint_id for v in paged.views_after(9)] == [10, 11]


def test_latest_completed_is_the_newest_completed_one_even_if_the_pointer_lags(store: CheckpointStore, s3: FakeS3):
    completed(store, 1)
    store.claim(claim_of(2))
    store.write_prepared(prepared_of(2))
    # a commit that died between the outcome and the pointer: completed, pointer still at 1
    s3.put_object(Bucket=BUCKET, Key=f"{ROOT}/checkpoints/{2:012d}/outcome.json",
                  Body=json.dumps(completed_of(2).to_json()).encode(), IfNoneMatch="*")
    store.claim(claim_of(3))
    assert json.loads(s3.body(BUCKET, f"{ROOT}/latest-completed.json"))["checkpoint_id"] == 1
    assert store.latest_completed().checkpoint_id == 2


def test_the_pointer_only_moves_forward(store: CheckpointStore, s3: FakeS3):
    store.claim(claim_of(1))
    store.write_prepared(prepared_of(1))
    completed(store, 2)
    store.mark_completed(completed_of(1))  # settles late
    assert json.loads(s3.body(BUCKET, f"{ROOT}/latest-completed.json"))["checkpoint_id"] == 2
    assert store.latest_completed().checkpoint_id == 2


def test_a_pointer_at_a_missing_checkpoint_is_an_error_never_a_fall_back(store: CheckpointStore, s3: FakeS3):
    s3.put_object(Bucket=BUCKET, Key=f"{ROOT}/latest-completed.json", Body=json.dumps(
        {"schema": "lockstep.latest-completed/1", "pipeline": PIPELINE, "checkpoint_id": 7}).encode())
    with pytest.raises(MetadataError, match="points at checkpoint 7, which does not exist"):
        store.latest_completed()


# ---- retention and savepoints ---------------------------------------------------------------------
def test_retention_deletes_only_checkpoints_before_the_retained_completed_ones(store: CheckpointStore, s3: FakeS3):
    for cid in (1, 2, 3):
        completed(store, cid)
    store.create_savepoint("before", 1, "2026-01-02T00:00:00+00:00")
    assert store.apply_retention(2) == [1]
    assert list(store.checkpoint_ids()) == [2, 3]
    assert s3.keys(BUCKET, f"{ROOT}/checkpoints/{1:012d}/") == []
    assert store.get_savepoint("before").end_offsets == completed_of(1).end_offsets


def test_views_read_in_parallel_come_back_in_the_order_asked_each_as_view_reads_it(store: CheckpointStore,
                                                                                  s3: FakeS3):
    for cid in range(1, 13):  # completed, two of every three; the others claimed, one of them aborted
        if cid % 3:
            completed(store, cid)
        else:
            store.claim(claim_of(cid))
    store.mark_aborted(aborted_of(12))
    asked = [12, 3, 99, 1, 7, 2, 11, 5, 4, 10, 8, 6, 9]
    views = store.views(asked)
    assert [v.checkpoint_id if v else None for v in views] == [i if i != 99 else None for i in asked]
    assert views == [store.view(i) for i in asked]
    s3.put_object(Bucket=BUCKET, Key=f"{ROOT}/checkpoints/{5:012d}/claim.json", Body=b"not json")
    with pytest.raises(MetadataError, match="not JSON"):
        store.views(asked)


def test_savepoints_are_never_overwritten(store: CheckpointStore):
    completed(store, 1)
    completed(store, 2)
    store.create_savepoint("nightly", 1, "2026-01-02T00:00:00+00:00")
    with pytest.raises(TerminalError, match="already exists"):
        store.create_savepoint("nightly", 2, "2026-01-03T00:00:00+00:00")
    assert store.get_savepoint("nightly").checkpoint_id == 1


def test_a_runs_task_count_is_recorded_once_and_a_retry_gets_the_first_back(store: CheckpointStore, s3: FakeS3) -> None:
    store.claim(claim_of(1))
    assert store.write_tasks(1) is None
    assert store.record_write_tasks(1, 2) == 2
    assert store.record_write_tasks(1, 2) == 2
    assert store.record_write_tasks(1, 6) == 2  # a retry on a cluster with more cores writes with the same ids
    assert store.write_tasks(1) == 2
    assert stored(s3, 1, "write-tasks") == {"tasks": 2}


def test_a_damaged_task_count_is_an_error_naming_the_file_and_the_way_out(store: CheckpointStore, s3: FakeS3) -> None:
    store.claim(claim_of(1))
    s3.put_object(Bucket=BUCKET, Key=f"{ROOT}/checkpoints/{1:012d}/write-tasks.json", Body=b'{"tasks": 0}')
    with pytest.raises(MetadataError, match=r"write-tasks.json.*positive integer, got 0; delete the file"):
        store.write_tasks(1)


def test_of_two_watchers_that_read_the_same_trigger_marker_only_the_first_to_write_fires(store: CheckpointStore):
    # Two instances of one lag watcher (the triggerer handing the trigger over) both decide to fire on
    # what they read; the marker's conditional write lets exactly one of them fire.
    assert store.trigger_fired() is None
    assert store.record_trigger_fired({"at_s": 1.0, "newest_checkpoint": None}, replacing=None)
    assert not store.record_trigger_fired({"at_s": 1.1, "newest_checkpoint": None}, replacing=None)
    doc, version = store.trigger_fired()
    assert doc == {"at_s": 1.0, "newest_checkpoint": None}
    assert store.record_trigger_fired({"at_s": 9.0, "newest_checkpoint": 1}, replacing=version)
    assert not store.record_trigger_fired({"at_s": 9.1, "newest_checkpoint": 1}, replacing=version)
    assert store.trigger_fired()[0] == {"at_s": 9.0, "newest_checkpoint": 1}


def test_a_checkpoint_s_stage_comes_from_one_listing_of_its_folder(store: CheckpointStore, s3: FakeS3, monkeypatch):
    from lockstep.model.checkpoint import CheckpointStage

    calls: list[str] = []
    listing, getting = s3.list_objects_v2, s3.get_object
    monkeypatch.setattr(s3, "list_objects_v2", lambda **kw: calls.append("list") or listing(**kw))
    monkeypatch.setattr(s3, "get_object", lambda **kw: calls.append("get") or getting(**kw))

    def stage(checkpoint_id: int) -> CheckpointStage | None:
        calls.clear()
        found = store.stage(checkpoint_id)
        assert calls == ["list"]  # one request, nothing read
        return found

    assert stage(1) is None
    store.claim(claim_of(1))
    assert stage(1) is CheckpointStage.CLAIMED
    store.write_prepared(prepared_of(1))
    assert stage(1) is CheckpointStage.PREPARED
    store.mark_completed(completed_of(1))
    assert stage(1) is CheckpointStage.SETTLED
    store.claim(claim_of(2))
    store.mark_aborted(aborted_of(2))
    assert stage(2) is CheckpointStage.SETTLED and stage(12) is None
