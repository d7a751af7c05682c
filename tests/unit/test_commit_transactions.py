"""The commit's EndTxns (`steps.commit._commit_transactions`): the first alone, the failpoint between
commits after it, then the rest in flight together; every one awaited before an error is raised."""
from __future__ import annotations

import threading

import pytest

from lockstep.model import failpoints
from lockstep.model.checkpoint import PreparedCheckpoint, PreparedTransaction
from lockstep.model.offsets import TopicPartition
from lockstep.steps import pipeline as step_helpers
from lockstep.steps.commit import _commit_transactions
from tests.support.fake_kafka import FakeCommitter

CHECKPOINT = 7


def prepared(committer: FakeCommitter, n: int) -> PreparedCheckpoint:
    txns = []
    for i in range(n):
        tid = f"tx-{CHECKPOINT}-{i}"
        pid, epoch = committer.begin(tid)
        txns.append(PreparedTransaction(tid, pid, epoch, (TopicPartition("out", i),), 10, 0, i, 0))
    return PreparedCheckpoint("orders", CHECKPOINT, "t", tuple(txns), 10 * n, 10 * n, 0, 1.0)


class Overlapping(FakeCommitter):
    """Commits wait at a barrier of ``together`` parties: they pass only if that many are in flight at once
    (a commit loop that sends one EndTxn after another times out at the barrier and fails)."""

    def __init__(self, together: int) -> None:
        super().__init__(clock=lambda: 0)
        self.barrier = threading.Barrier(together, timeout=10)
        self.first_done = threading.Event()
        self.lock = threading.Lock()

    def commit(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        if self.first_done.is_set():
            self.barrier.wait()
        with self.lock:
            super().commit(transactional_id, producer_id, epoch)
        self.first_done.set()


def test_after_the_first_the_commits_are_in_flight_together() -> None:
    committer = Overlapping(together=5)
    p = prepared(committer, 6)
    _commit_transactions(committer, p, tuple(t.transactional_id for t in p.transactions))
    assert committer.committed[0] == f"tx-{CHECKPOINT}-0"
    assert sorted(committer.committed) == sorted(t.transactional_id for t in p.transactions)


def test_the_failpoint_between_commits_sees_exactly_the_first_committed(monkeypatch) -> None:
    committer = FakeCommitter(clock=lambda: 0)
    p = prepared(committer, 4)
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "commit.between_commits=raise")
    with pytest.raises(failpoints.FailpointError):
        _commit_transactions(committer, p, tuple(t.transactional_id for t in p.transactions))
    assert committer.committed == [f"tx-{CHECKPOINT}-0"]


class FailingOne(FakeCommitter):
    def commit(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        if transactional_id.endswith("-2"):
            raise RuntimeError(f"coordinator gone while committing {transactional_id}")
        super().commit(transactional_id, producer_id, epoch)


def test_an_error_is_raised_after_every_other_commit_was_tried() -> None:
    committer = FailingOne(clock=lambda: 0)
    p = prepared(committer, 5)
    with pytest.raises(RuntimeError, match="tx-7-2"):
        _commit_transactions(committer, p, tuple(t.transactional_id for t in p.transactions))
    assert sorted(committer.committed) == [f"tx-{CHECKPOINT}-{i}" for i in (0, 1, 3, 4)]


def test_the_threads_are_bounded(monkeypatch) -> None:
    monkeypatch.setattr(step_helpers, "COMMIT_THREADS", 3)
    seen: set[str] = set()
    committer = FakeCommitter(clock=lambda: 0)
    p = prepared(committer, 10)
    original = committer.commit

    def record(tid: str, pid: int, epoch: int) -> None:
        seen.add(threading.current_thread().name)
        original(tid, pid, epoch)

    committer.commit = record  # type: ignore[method-assign]
    _commit_transactions(committer, p, tuple(t.transactional_id for t in p.transactions))
    assert len(committer.committed) == 10
    assert len({name for name in seen if name.startswith("lockstep-commit")}) <= 3
