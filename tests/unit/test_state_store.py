"""Keyed state in the checkpoint store: which state files garbage collection deletes
(`lockstep.store.state_files.unreferenced`, and `CheckpointStore.collect_state_garbage` over
tests/support/fake_s3.FakeS3 with real checkpoint documents), and the state savepoints carry and
adopted savepoints copy."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from lockstep.errors import MetadataError, TerminalError
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CompletedCheckpoint,
    PreparedCheckpoint,
)
from lockstep.model.offsets import OffsetRange
from lockstep.model.savepoint import Savepoint
from lockstep.model.state_manifest import PartitionTime, StateManifest
from lockstep.store.checkpoint_store import CheckpointStore, savepoint_pinned
from lockstep.store.state_cache import digest
from lockstep.store.state_files import StateFiles, content_key, placement, unreferenced
from tests.support.fake_s3 import FakeS3

BUCKET, ROOT, PIPELINE = "lockstep", "tests/orders", "orders"
AT = "2026-01-01T00:00:00+00:00"


# ---- unreferenced (pure) ----------------------------------------------------------------------------
def test_unreferenced_keeps_named_and_in_flight_files_and_deletes_aborted_and_older_ones() -> None:
    of = {"s/1/a": 1, "s/1/b": 1, "s/3/a": 3, "s/4/a": 4, "s/5/a": 5, "s/2/a": 2, "s/x/odd": None}
    doomed = unreferenced(of, referenced={"s/1/a", "s/3/a"}, checkpoint_of=of, settled_below=3, aborted={4})
    assert doomed == ["s/1/b", "s/2/a", "s/4/a"]
    # kept: s/1/a and s/3/a (named), s/5/a (newer than the latest completed and not aborted: in flight),
    # s/x/odd (not of the layout: never guessed at)


def test_unreferenced_keeps_the_latest_completed_checkpoints_own_unnamed_files() -> None:
    of = {"s/3/extra": 3}
    assert unreferenced(of, referenced=set(), checkpoint_of=of, settled_below=3, aborted=set()) == []
    assert unreferenced(of, referenced=set(), checkpoint_of=of, settled_below=3, aborted={3}) == ["s/3/extra"]


# ---- where a state file goes when its name is taken (pure) ---------------------------------------------------
KEY = "tests/orders/state/000000000003/kg-00001.delta.parquet"


def test_a_content_key_sits_beside_the_layouts_name_and_names_the_bytes() -> None:
    assert content_key(KEY, "ab" * 16) == f"tests/orders/state/000000000003/kg-00001.delta.{'ab' * 16}.parquet"
    assert content_key(KEY, "ab" * 16) != content_key(KEY, "cd" * 16)


def test_a_taken_name_is_reused_only_for_the_same_bytes_and_never_replaced() -> None:
    assert placement(KEY, ours="a", taken=KEY, theirs="a") == KEY  # a deterministic retry: the same file
    assert placement(KEY, ours="a", taken=KEY, theirs="b") == content_key(KEY, "a")  # another attempt's file
    assert placement(KEY, ours="a", taken=content_key(KEY, "a"), theirs="a") == content_key(KEY, "a")
    # the content's name holding other bytes: changed outside Lockstep, nowhere left to go
    assert placement(KEY, ours="a", taken=content_key(KEY, "a"), theirs="b") is None


# ---- create over an S3 that honours If-None-Match ------------------------------------------------------------
def test_no_attempt_replaces_a_state_file_another_attempt_wrote(s3: FakeS3) -> None:
    files = StateFiles(s3, BUCKET, ROOT, cache=None)
    key = files.key(3, 1, delta=True)
    assert files.put_table(key, b"attempt 2's delta") == (key, digest(b"attempt 2's delta"))
    assert files.put_table(key, b"attempt 2's delta") == (key, digest(b"attempt 2's delta")), "a retry reuses it"
    late = files.put_table(key, b"attempt 1's other delta")  # the slow first attempt uploads after the retry
    assert late == (content_key(key, digest(b"attempt 1's other delta")), digest(b"attempt 1's other delta"))
    assert s3.body(BUCKET, key) == b"attempt 2's delta"
    assert files.put_table(key, b"attempt 1's other delta") == late
    assert s3.keys(BUCKET, files.prefix) == sorted([key, late[0]])


def test_files_put_side_by_side_come_back_in_order_and_a_taken_name_goes_under_its_content(s3: FakeS3) -> None:
    files = StateFiles(s3, BUCKET, ROOT, cache=None)
    keys = [files.key(4, g, delta=True) for g in range(12)]
    files.put_table(keys[5], b"another attempt's delta")
    got = files.put_tables([(k, f"delta {g}".encode()) for g, k in enumerate(keys)])
    assert [name for _, name in got] == [digest(f"delta {g}".encode()) for g in range(12)]
    assert [k for k, _ in got] == [content_key(k, digest(b"delta 5")) if g == 5 else k for g, k in enumerate(keys)]
    assert s3.body(BUCKET, keys[5]) == b"another attempt's delta"
    assert all(s3.body(BUCKET, k) == f"delta {g}".encode() for g, (k, _) in enumerate(got))


def test_a_content_named_file_changed_outside_lockstep_is_refused_not_replaced(s3: FakeS3) -> None:
    files = StateFiles(s3, BUCKET, ROOT, cache=None)
    key = files.key(3, 1)
    files.put_table(key, b"one")
    files.put(content_key(key, digest(b"two")), b"tampered")
    with pytest.raises(MetadataError, match="changed outside Lockstep"):
        files.create(key, b"two")
    assert s3.body(BUCKET, key) == b"one" and s3.body(BUCKET, content_key(key, digest(b"two"))) == b"tampered"


# ---- collect_state_garbage over real documents ------------------------------------------------------------
@pytest.fixture
def s3() -> FakeS3:
    return FakeS3()


@pytest.fixture
def store(s3: FakeS3) -> CheckpointStore:
    return CheckpointStore(s3, BUCKET, ROOT, PIPELINE)


def write_state(files: StateFiles, cid: int, groups: tuple[int, ...] = (0, 1)) -> StateManifest:
    """The state files of checkpoint ``cid`` (one per group), and the manifest naming them."""
    named = {}
    for g in groups:
        files.put(files.key(cid, g), f"state {cid}/{g}".encode())
        named[g] = (files.key(cid, g),)
    return StateManifest(operator="window", key_groups=4, written_by=cid, files=named,
                         columns={"__ls_key": "string", "n": "bigint"}, watermark_ms=cid * 1000,
                         partitions={"in:0": PartitionTime(cid * 1000, cid)}, keys=len(groups))


def claim(cid: int, base: StateManifest | None, pipeline: str = PIPELINE) -> CheckpointClaim:
    return CheckpointClaim(pipeline, cid, "run", AT, (OffsetRange("in", 0, 10 * (cid - 1), 10 * cid),),
                           f"checkpoint:{cid - 1}", state_base=base)


def prepared(cid: int, state: StateManifest, pipeline: str = PIPELINE) -> PreparedCheckpoint:
    return PreparedCheckpoint(pipeline, cid, AT, (), 10, 0, 0, 1.0, state=state)


def completed(cid: int, state: StateManifest | None, pipeline: str = PIPELINE) -> CompletedCheckpoint:
    return CompletedCheckpoint(pipeline, cid, AT, {"in:0": 10 * cid}, (), state=state)


def complete(store: CheckpointStore, cid: int, base: StateManifest | None, state: StateManifest) -> StateManifest:
    store.claim(claim(cid, base, store.pipeline))
    store.write_prepared(prepared(cid, state, store.pipeline))
    store.mark_completed(completed(cid, state, store.pipeline))
    return state


def test_garbage_collection_deletes_aborted_and_stray_files_and_keeps_state_and_in_flight_files(
        store: CheckpointStore, s3: FakeS3) -> None:
    files = store.state_files()
    m1 = complete(store, 1, None, write_state(files, 1))
    files.put(files.key(1, 3), b"left by a failed attempt of checkpoint 1")  # named by no manifest
    m2 = complete(store, 2, m1, write_state(files, 2))
    store.claim(claim(3, m2))  # its run wrote state, then died before prepared.json
    write_state(files, 3)
    store.mark_aborted(AbortedCheckpoint(PIPELINE, 3, AT, "its run died", "replayed next run"))
    store.claim(claim(4, m2))  # in flight: files written, no manifest names them yet
    write_state(files, 4, (2,))
    deleted = store.collect_state_garbage()
    assert deleted == sorted([files.key(1, 3), files.key(3, 0), files.key(3, 1)])
    assert s3.keys(BUCKET, files.prefix) == sorted([*m1.all_files, *m2.all_files, files.key(4, 2)])
    assert store.collect_state_garbage() == [], "nothing more to delete"


def test_garbage_collection_deletes_the_losing_attempts_file_under_its_content_name(store: CheckpointStore,
                                                                                   s3: FakeS3) -> None:
    files = store.state_files()
    files.cache = None
    m1 = complete(store, 1, None, write_state(files, 1))
    store.claim(claim(2, m1))
    mine, _ = files.put_table(files.key(2, 0), b"the retry's base")  # the retry's file, which its manifest names
    theirs, _ = files.put_table(files.key(2, 0), b"the slow first attempt's base")
    assert theirs == content_key(files.key(2, 0), digest(b"the slow first attempt's base"))
    m2 = replace(m1, written_by=2, files={0: (mine,)})
    store.write_prepared(prepared(2, m2))
    store.mark_completed(completed(2, m2))
    complete(store, 3, m2, m2.carried_forward())
    assert store.collect_state_garbage() == [theirs], "named by no manifest, of a settled checkpoint"
    assert s3.keys(BUCKET, files.prefix) == sorted([*m1.all_files, mine])


def test_the_state_of_a_prepared_checkpoint_that_was_aborted_is_garbage(store: CheckpointStore, s3: FakeS3) -> None:
    files = store.state_files()
    m1 = complete(store, 1, None, write_state(files, 1))
    store.claim(claim(2, m1))
    store.write_prepared(prepared(2, write_state(files, 2)))
    store.mark_aborted(AbortedCheckpoint(PIPELINE, 2, AT, "a transaction timed out", "replayed next run"))
    complete(store, 3, m1, m1.carried_forward())  # nothing read: the state is carried forward
    assert store.collect_state_garbage() == [files.key(2, 0), files.key(2, 1)], \
        "an aborted checkpoint's state never becomes the pipeline's"
    assert s3.keys(BUCKET, files.prefix) == sorted(m1.all_files)


def test_after_retention_superseded_state_goes_and_a_savepoints_state_stays(store: CheckpointStore,
                                                                             s3: FakeS3) -> None:
    files = store.state_files()
    m1 = complete(store, 1, None, write_state(files, 1))
    store.create_savepoint("before", 1, AT)
    m2 = complete(store, 2, m1, write_state(files, 2))
    m3 = complete(store, 3, m2, write_state(files, 3))
    m4 = complete(store, 4, m3, write_state(files, 4))
    assert store.apply_retention(1) == [1, 2, 3]
    deleted = store.collect_state_garbage()
    assert deleted == sorted([*m2.all_files]), "m3 is checkpoint 4's base, m1 the savepoint's state"
    assert s3.keys(BUCKET, files.prefix) == sorted([*m1.all_files, *m3.all_files, *m4.all_files])


def test_s3_gone_during_retention_or_collection_is_transient_and_the_commit_completes_anyway(
        store: CheckpointStore, s3: FakeS3, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # The soak's S3 faults at commit.mid_state_gc: the checkpoint is completed by then, so its commit
    # step must not fail for the housekeeping (the next commit finds the same garbage again).
    from botocore.exceptions import EndpointConnectionError

    from lockstep.errors import TransientError
    from lockstep.steps.commit import tidy

    files = store.state_files()
    m1 = complete(store, 1, None, write_state(files, 1))
    m2 = complete(store, 2, m1, write_state(files, 2))
    complete(store, 3, m2, write_state(files, 3))

    def gone(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="http://s3.invalid")

    with monkeypatch.context() as m:
        m.setattr(s3, "delete_object", gone)
        with pytest.raises(TransientError, match="unreachable"):
            store.apply_retention(1)
    assert store.apply_retention(1) == [1, 2]
    with monkeypatch.context() as m:
        m.setattr(s3, "delete_object", gone)
        with pytest.raises(TransientError, match="could not delete state file"):
            store.collect_state_garbage()
        with caplog.at_level("WARNING", logger="lockstep.steps.commit"):
            assert tidy(store, 3, 1, has_files=True) is False
    assert "checkpoint 3: completed, but its retention and garbage collection stopped half-way" in caplog.text
    assert "the next checkpoint's commit deletes what is left" in caplog.text
    assert set(m1.all_files) <= set(s3.keys(BUCKET, files.prefix))
    assert tidy(store, 3, 1, has_files=True) is True  # S3 back: the same garbage goes
    assert not set(m1.all_files) & set(s3.keys(BUCKET, files.prefix)) and store.collect_state_garbage() == []


def test_a_refused_delete_is_not_hidden_by_the_commit(store: CheckpointStore, s3: FakeS3,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from botocore.exceptions import ClientError

    from lockstep.steps.commit import tidy

    files = store.state_files()
    m1 = complete(store, 1, None, write_state(files, 1))
    complete(store, 2, m1, write_state(files, 2))

    def refused(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"},
                           "ResponseMetadata": {"HTTPStatusCode": 403}}, "DeleteObject")

    monkeypatch.setattr(s3, "delete_object", refused)
    with pytest.raises(TerminalError, match="AccessDenied"):
        tidy(store, 2, 1, has_files=False)


def test_without_a_completed_checkpoint_nothing_is_collected(store: CheckpointStore, s3: FakeS3) -> None:
    files = store.state_files()
    store.claim(claim(1, None))
    write_state(files, 1)
    store.mark_aborted(AbortedCheckpoint(PIPELINE, 1, AT, "its run died", "replayed next run"))
    assert store.collect_state_garbage() == []
    assert len(s3.keys(BUCKET, files.prefix)) == 2


# ---- savepoints ---------------------------------------------------------------------------------------------
def test_a_savepoint_carries_its_checkpoints_state_manifest(store: CheckpointStore) -> None:
    files = store.state_files()
    m1 = complete(store, 1, None, write_state(files, 1))
    complete(store, 2, m1, write_state(files, 2))
    taken = store.create_savepoint("nightly", 1, AT)
    assert taken.state == m1
    assert store.get_savepoint("nightly").state == m1
    assert store.create_savepoint("latest", None, AT).state == store.view(2).completed.state


class PausingS3(FakeS3):
    """A FakeS3 that calls ``before_put[key]`` before putting ``key`` and ``after_list[prefix]``
    after listing ``prefix``, once each: where a test interleaves a savepoint with a collection."""

    def __init__(self) -> None:
        super().__init__()
        self.before_put: dict[str, Callable[[], None]] = {}
        self.after_list: dict[str, Callable[[], None]] = {}

    def put_object(self, **kwargs: Any) -> dict[str, Any]:
        hook = self.before_put.pop(kwargs["Key"], None)
        if hook:
            hook()
        return super().put_object(**kwargs)

    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]:
        page = super().list_objects_v2(**kwargs)
        hook = self.after_list.pop(kwargs.get("Prefix", ""), None)
        if hook:
            hook()
        return page


def three_checkpoints(store: CheckpointStore) -> StateManifest:
    """Checkpoints 1-3, each with new state files: once retention keeps only 3, checkpoint 1's files
    are named by nothing but a savepoint (2's claim named them as its base, 3's names 2's)."""
    files = store.state_files()
    m1 = complete(store, 1, None, write_state(files, 1))
    m2 = complete(store, 2, m1, write_state(files, 2))
    complete(store, 3, m2, write_state(files, 3))
    return m1


def test_a_savepoint_whose_checkpoint_retention_deletes_before_it_is_written_is_refused_and_removed() -> None:
    s3 = PausingS3()
    store = CheckpointStore(s3, BUCKET, ROOT, PIPELINE)
    m1 = three_checkpoints(store)
    key = f"{ROOT}/savepoints/old.json"

    def commit_meanwhile() -> None:  # after the savepoint read checkpoint 1's manifest, before it is written
        assert store.apply_retention(1) == [1, 2]
        assert set(m1.all_files) <= set(store.collect_state_garbage())

    s3.before_put[key] = commit_meanwhile
    with pytest.raises(TerminalError, match=r"cannot take savepoint 'old' of checkpoint 1: retention deleted "
                                            r"checkpoint 1 .* Take it of a retained checkpoint"):
        store.create_savepoint("old", 1, AT)
    assert key not in s3.keys(BUCKET), "a savepoint naming deleted files is never left behind"


def test_a_collection_that_listed_the_savepoints_before_one_was_written_cannot_delete_its_files_unnoticed() -> None:
    """The interleaving a check of the files' existence misses: the collection lists the savepoints
    before the savepoint is written and deletes after the savepoint checked, on threads paused at
    those points. The savepoint must not survive naming the deleted files."""
    s3 = PausingS3()
    store = CheckpointStore(s3, BUCKET, ROOT, PIPELINE)
    m1 = three_checkpoints(store)
    read, listed, settled = threading.Event(), threading.Event(), threading.Event()
    outcome: list[object] = []

    def savepoint_paused_before_its_write() -> None:
        read.set()
        assert listed.wait(10)

    def collection_paused_after_listing_savepoints() -> None:
        listed.set()
        assert settled.wait(10)

    def take() -> None:
        try:
            outcome.append(store.create_savepoint("old", 1, AT))
        except TerminalError as exc:
            outcome.append(exc)
        finally:
            settled.set()

    s3.before_put[f"{ROOT}/savepoints/old.json"] = savepoint_paused_before_its_write
    s3.after_list[f"{ROOT}/savepoints/"] = collection_paused_after_listing_savepoints
    taker = threading.Thread(target=take)
    taker.start()
    assert read.wait(10)
    assert store.apply_retention(1) == [1, 2]
    deleted = store.collect_state_garbage()  # pauses after its listing until the savepoint is settled
    taker.join(10)
    assert set(m1.all_files) <= set(deleted), "the collection did delete checkpoint 1's files"
    [result] = outcome
    assert isinstance(result, TerminalError) and "retention deleted checkpoint 1" in str(result), result
    assert store.list_savepoints() == []


def test_a_savepoint_of_a_checkpoint_retention_keeps_survives_a_collection_meanwhile() -> None:
    s3 = PausingS3()
    store = CheckpointStore(s3, BUCKET, ROOT, PIPELINE)
    three_checkpoints(store)

    def commit_meanwhile() -> None:
        assert store.apply_retention(2) == [1]
        store.collect_state_garbage()

    s3.before_put[f"{ROOT}/savepoints/kept.json"] = commit_meanwhile
    taken = store.create_savepoint("kept", 2, AT)
    assert taken.state is not None and set(taken.state.all_files) <= set(s3.keys(BUCKET))
    assert store.get_savepoint("kept") == taken


def test_savepoint_pinned_refuses_only_a_stateful_savepoint_whose_checkpoint_is_no_longer_completed() -> None:
    state = write_state(StateFiles(FakeS3(), BUCKET, ROOT, cache=None), 4)
    sp = Savepoint(name="sp", pipeline=PIPELINE, checkpoint_id=4, created_at=AT, end_offsets={"in:0": 40},
                   ranges=(), state=state)
    assert savepoint_pinned(sp, completed(4, state)) is None
    assert "retention deleted checkpoint 4" in (savepoint_pinned(sp, None) or "")
    assert savepoint_pinned(replace(sp, state=None), None) is None, "no state: no files to lose"


def test_an_adopted_savepoint_copies_its_state_files_under_the_adopting_pipeline(store: CheckpointStore,
                                                                                  s3: FakeS3,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    other = CheckpointStore(s3, BUCKET, "tests/other", "other")
    theirs = other.state_files()
    state = write_state(theirs, 5, (0, 2))
    extra = f"{theirs.prefix}{5:012d}/kg-00002-part1.parquet"  # a group of two files
    theirs.put(extra, b"second file of group 2")
    pack = theirs.pack_key(5)  # a pack of deltas both groups name
    theirs.put(pack, b"deltas of groups 0 and 2")
    state = replace(state, files={0: (*state.files[0], pack), 2: (theirs.key(5, 2), extra, pack)})
    complete(other, 5, None, state)
    savepoint = other.create_savepoint("handover", 5, AT)

    copied: list[str] = []
    copy_object = s3.copy_object
    monkeypatch.setattr(s3, "copy_object", lambda **kw: (copied.append(kw["Key"]), copy_object(**kw))[1])
    adopted = store.adopt_savepoint(savepoint, "2026-02-01T00:00:00+00:00")
    mine = store.state_files()
    assert adopted.pipeline == PIPELINE
    assert adopted.state is not None
    # Apart from this pipeline's own checkpoint 5 (another checkpoint than theirs), which it never overwrites.
    folder = f"{mine.prefix}adopted/handover/{5:012d}"
    assert adopted.state.files == {0: (f"{folder}/kg-00000.parquet", f"{folder}/deltas.parquet"),
                                   2: (f"{folder}/kg-00002.parquet", f"{folder}/kg-00002-part1.parquet",
                                       f"{folder}/deltas.parquet")}
    assert sorted(copied) == sorted(adopted.state.all_files) and len(copied) == 4, "each file copied once"
    assert not set(adopted.state.all_files) & {mine.key(5, 0), mine.key(5, 2)}
    assert all(k.startswith(f"{ROOT}/state/") for k in adopted.state.all_files)
    for source, copy in zip(state.all_files, adopted.state.all_files, strict=True):
        assert s3.body(BUCKET, copy) == s3.body(BUCKET, source)
    assert replace(adopted.state, files=state.files) == state, "only the files' keys change"
    assert store.get_savepoint("handover") == adopted
    # the other pipeline deleting its own files leaves ours intact
    theirs.delete(state.all_files)
    assert all(s3.body(BUCKET, k) for k in adopted.state.all_files)


# ---- a restore's reads: every touched group's files at once, each still checked --------------------------
def _chained_state(files: StateFiles, cid: int, groups: int, chain: int) -> StateManifest:
    """Checkpoint ``cid``'s state: per group a chain of ``chain`` Parquet files (a base, then deltas), each
    holding one row that names its group and place, with the digests the manifest records."""
    import pyarrow as pa

    from lockstep.model.state_manifest import GroupState
    from lockstep.store import state_chain

    named, figures = {}, {}
    for g in range(groups):
        keys, digests = [], []
        for i in range(chain):
            body = state_chain.parquet(pa.table({"__ls_key": [f"g{g}-f{i}"], "__ls_group": [g]}))
            key, name = files.put_table(files.key(cid, g, delta=i > 0).replace(".parquet", f"-{i}.parquet"), body)
            keys.append(key)
            digests.append(name)
        named[g] = tuple(keys)
        figures[g] = GroupState(keys=chain, rows=chain, file_bytes=(1,) * chain, digests=tuple(digests))
    return StateManifest(operator="dedup", key_groups=groups, written_by=cid, files=named, groups=figures,
                         columns={"__ls_key": "string", "__ls_group": "int"}, watermark_ms=0, partitions={},
                         keys=groups * chain)


def test_a_restores_groups_are_read_at_once_each_chain_in_its_manifests_order(s3: FakeS3, tmp_path) -> None:
    from lockstep.store.state_cache import StateCache

    files = StateFiles(s3, BUCKET, ROOT, cache=StateCache(tmp_path / "cache"))
    manifest = _chained_state(files, 7, groups=6, chain=3)
    read = files.chains(manifest, [5, 1, 3, 1])
    assert list(read) == [1, 3, 5]
    assert {g: [t["__ls_key"][0].as_py() for t in chain] for g, chain in read.items()} == \
        {g: [f"g{g}-f{i}" for i in range(3)] for g in (1, 3, 5)}
    # The same as the one-group read, and the whole state's read goes the same way.
    assert [t.equals(u) for t, u in zip(read[3], files.chain(manifest, 3), strict=True)] == [True] * 3
    whole = files.read_state(manifest)
    assert whole is not None and sorted(whole["__ls_key"].to_pylist()) == \
        sorted(f"g{g}-f{i}" for g in range(6) for i in range(3))


def test_a_file_changed_outside_lockstep_fails_the_concurrent_read_too(s3: FakeS3) -> None:
    files = StateFiles(s3, BUCKET, ROOT, cache=None)
    manifest = _chained_state(files, 7, groups=4, chain=2)
    files.put(manifest.files[2][1], b"tampered")
    with pytest.raises(MetadataError, match="changed outside Lockstep"):
        files.chains(manifest, range(4))
