"""The committer's policy against an in-memory protocol: what it retries, what it refuses and why.

`FakeAdmin` stands in for `lockstep.kafka.internals.KafkaTransactionAdmin`: it answers with the Kafka
error names the broker would send and records what was asked. The clock is fake too, so the retry
deadline is reached without waiting.
"""
from __future__ import annotations

from collections.abc import Sequence

import pytest

from lockstep.errors import TerminalError, TransientError
from lockstep.kafka.committer import (
    CommitterUnavailableError,
    TransactionCommitError,
    TransactionCommitter,
    TransactionFencedError,
    TransactionStateError,
    UnknownTransactionError,
)
from lockstep.kafka.internals import (
    DESCRIBE_TRANSACTIONS,
    FIND_COORDINATOR,
    NO_ERROR,
    EndTxnResult,
    FenceError,
    RetriableKafkaError,
    TransactionDescription,
    TransactionListing,
)
from lockstep.model.offsets import TopicPartition
from lockstep.model.transactions import OPEN_STATES, TransactionObservation, TransactionState
from lockstep.rules import commit_decision

S = TransactionState
TID = "orders-enrich-42-0"
PID, EPOCH = 100, 7
STARTED_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z
TIMEOUT_MS = 60_000
RETRIABLE = ["ConcurrentTransactionsError", "CoordinatorLoadInProgressError", "NotCoordinatorError",
             "CoordinatorNotAvailableError", "RequestTimedOutError"]


class FakeAdmin:
    """A `TransactionAdmin` whose answers are scripted per operation; the last answer repeats."""

    def __init__(self, end: Sequence[EndTxnResult | Exception] = (EndTxnResult(),),
                 describe: dict[str, Sequence[TransactionDescription | Exception]] | None = None,
                 listings: Sequence[list[TransactionListing] | Exception] = ([],),
                 fence_error: Exception | None = None) -> None:
        self.end = list(end)
        self.descriptions = {tid: list(answers) for tid, answers in (describe or {}).items()}
        self.listings = list(listings)
        self.fence_error = fence_error
        self.calls: list[tuple] = []
        self.closed = False

    @staticmethod
    def _next(answers: list):
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> EndTxnResult:
        self.calls.append(("end_txn", transactional_id, producer_id, epoch, commit))
        return self._next(self.end)

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        self.calls.append(("describe", transactional_id))
        answers = self.descriptions.get(transactional_id, [TransactionDescription(transactional_id,
                                                                                  "TransactionalIdNotFoundError")])
        return self._next(answers)

    def list_transactions(self, states: Sequence[TransactionState]) -> list[TransactionListing]:
        self.calls.append(("list", tuple(states)))
        return self._next(self.listings)

    def fence(self, transactional_id: str, timeout_s: float) -> None:
        self.calls.append(("fence", transactional_id, timeout_s))
        if self.fence_error is not None:
            raise self.fence_error

    def close(self) -> None:
        self.closed = True

    def ops(self) -> list[str]:
        return [c[0] for c in self.calls]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def committer(admin: FakeAdmin, clock: Clock, deadline_s: float = 60.0) -> TransactionCommitter:
    return TransactionCommitter(admin, retry_deadline_s=deadline_s, monotonic=clock.monotonic, sleep=clock.sleep)


def described(state: TransactionState, epoch: int = EPOCH, pid: int = PID, started: int = STARTED_MS,
              timeout: int = TIMEOUT_MS, *partitions: TopicPartition) -> TransactionDescription:
    return TransactionDescription(TID, NO_ERROR, DESCRIBE_TRANSACTIONS, state, pid, epoch, started, timeout,
                                  tuple(partitions))


# ---- EndTxn: success ---------------------------------------------------------------------------------
def test_commit_sends_end_txn_commit_with_the_recorded_producer_id_and_epoch(clock):
    admin = FakeAdmin()
    committer(admin, clock).commit(TID, PID, EPOCH)
    assert admin.calls == [("end_txn", TID, PID, EPOCH, True)]
    assert clock.sleeps == []


def test_abort_sends_end_txn_abort(clock):
    admin = FakeAdmin()
    committer(admin, clock).abort(TID, PID, EPOCH)
    assert admin.calls == [("end_txn", TID, PID, EPOCH, False)]


def test_committing_an_already_committed_transaction_succeeds_again(clock):
    # The broker answers a repeated EndTxn(commit) with no error while the epoch is unchanged.
    admin = FakeAdmin()
    c = committer(admin, clock)
    c.commit(TID, PID, EPOCH)
    c.commit(TID, PID, EPOCH)
    assert admin.ops() == ["end_txn", "end_txn"]


# ---- retry later ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("error", RETRIABLE)
def test_a_transient_broker_answer_is_retried_with_back_off_then_succeeds(clock, error):
    admin = FakeAdmin(end=[EndTxnResult(error), EndTxnResult(error), EndTxnResult()])
    committer(admin, clock).commit(TID, PID, EPOCH)
    assert admin.ops() == ["end_txn"] * 3
    assert clock.sleeps == [0.05, 0.1]


@pytest.mark.parametrize("error", ["CoordinatorNotAvailableError", "NotCoordinatorError"])
def test_a_transient_answer_while_finding_the_coordinator_is_retried(clock, error):
    admin = FakeAdmin(end=[EndTxnResult(error, FIND_COORDINATOR), EndTxnResult()])
    committer(admin, clock).commit(TID, PID, EPOCH)
    assert admin.ops() == ["end_txn", "end_txn"]


def test_a_retriable_client_failure_is_retried(clock):
    admin = FakeAdmin(end=[RetriableKafkaError("KafkaConnectionError: socket disconnected"), EndTxnResult()])
    committer(admin, clock).commit(TID, PID, EPOCH)
    assert admin.ops() == ["end_txn", "end_txn"]


def test_retries_end_at_the_deadline_with_a_transient_error_naming_the_last_answer(clock):
    admin = FakeAdmin(end=[EndTxnResult("CoordinatorNotAvailableError")])
    with pytest.raises(CommitterUnavailableError) as failure:
        committer(admin, clock).commit(TID, PID, EPOCH)
    assert isinstance(failure.value, TransientError) and not isinstance(failure.value, TerminalError)
    message = str(failure.value)
    assert f"gave up trying to commit transaction {TID} after 60 s" in message
    assert "last error CoordinatorNotAvailableError" in message and "retry the task" in message
    assert clock.now < 60.0  # never sleeps past the deadline
    assert clock.sleeps[:5] == [0.05, 0.1, 0.2, 0.4, 0.8] and max(clock.sleeps) == 1.0


def test_the_deadline_message_names_a_client_failure(clock):
    admin = FakeAdmin(end=[RetriableKafkaError("KafkaTimeoutError: Timeout waiting for future")])
    with pytest.raises(CommitterUnavailableError, match="last error KafkaTimeoutError: Timeout waiting for future"):
        committer(admin, clock, deadline_s=5).abort(TID, PID, EPOCH)


def test_an_unexpected_client_failure_is_not_retried(clock):
    admin = FakeAdmin(end=[ValueError("bad request"), EndTxnResult()])
    with pytest.raises(ValueError, match="bad request"):
        committer(admin, clock).commit(TID, PID, EPOCH)
    assert admin.ops() == ["end_txn"]


# ---- known failures ------------------------------------------------------------------------------------
def test_fenced_by_a_broker_timeout_says_so_with_the_deadline(clock):
    # A broker timeout aborts with exactly one epoch bump and keeps the start time and timeout.
    admin = FakeAdmin(end=[EndTxnResult("ProducerFencedError")],
                      describe={TID: [described(S.COMPLETE_ABORT, epoch=EPOCH + 1)]})
    with pytest.raises(TransactionFencedError) as failure:
        committer(admin, clock).commit(TID, PID, EPOCH)
    err = failure.value
    assert isinstance(err, TerminalError)
    assert (err.transactional_id, err.producer_id, err.epoch, err.action) == (TID, PID, EPOCH, "commit")
    message = str(err)
    assert message.startswith(f"cannot commit transaction {TID} (producer id {PID}, epoch {EPOCH}): ProducerFencedError: ")
    assert "the broker aborted it because it timed out: transaction.timeout.ms=60000 ms elapsed" in message
    assert "started 2023-11-14 22:13:20 UTC, deadline 2023-11-14 22:14:20 UTC" in message
    assert "Raise transaction.timeout.ms or commit sooner" in message
    assert admin.ops() == ["end_txn", "describe"]


@pytest.mark.parametrize("error", ["ProducerFencedError", "InvalidProducerEpochError"])
def test_fenced_by_another_writer_names_the_new_producer_and_epoch(clock, error):
    admin = FakeAdmin(end=[EndTxnResult(error)], describe={TID: [described(S.EMPTY, epoch=EPOCH + 2, started=-1)]})
    with pytest.raises(TransactionFencedError) as failure:
        committer(admin, clock).commit(TID, PID, EPOCH)
    message = str(failure.value)
    assert f"{error}: fenced: the id now has producer id {PID}, epoch {EPOCH + 2} (state Empty)" in message
    assert "another writer re-initialised it" in message


def test_fenced_and_forgotten_by_the_coordinator(clock):
    admin = FakeAdmin(end=[EndTxnResult("ProducerFencedError")])  # describe: TransactionalIdNotFoundError
    with pytest.raises(TransactionFencedError, match="fenced, and the coordinator no longer knows the id"):
        committer(admin, clock).commit(TID, PID, EPOCH)


def test_fenced_is_still_reported_when_the_coordinator_cannot_be_asked_why(clock):
    admin = FakeAdmin(end=[EndTxnResult("ProducerFencedError")],
                      describe={TID: [TransactionDescription(TID, "CoordinatorLoadInProgressError")]})
    with pytest.raises(TransactionFencedError, match="ProducerFencedError: fenced, and the coordinator no longer"):
        committer(admin, clock).commit(TID, PID, EPOCH)


def test_invalid_txn_state_is_a_state_error_with_the_current_state(clock):
    admin = FakeAdmin(end=[EndTxnResult("InvalidTxnStateError")],
                      describe={TID: [described(S.COMPLETE_ABORT)]})
    with pytest.raises(TransactionStateError) as failure:
        committer(admin, clock).abort(TID, PID, EPOCH)
    err = failure.value
    assert not isinstance(err, TransactionFencedError) and isinstance(err, TerminalError) and err.action == "abort"
    assert str(err) == (f"cannot abort transaction {TID} (producer id {PID}, epoch {EPOCH}): InvalidTxnStateError: "
                        "the transaction is not open (nothing produced, or already ended the other way); "
                        "coordinator reports state CompleteAbort")


@pytest.mark.parametrize("error", ["InvalidProducerIdMappingError", "TransactionalIdNotFoundError"])
def test_an_id_the_coordinator_does_not_know_is_an_unknown_transaction(clock, error):
    admin = FakeAdmin(end=[EndTxnResult(error)])
    with pytest.raises(UnknownTransactionError) as failure:
        committer(admin, clock).commit(TID, PID, EPOCH)
    assert isinstance(failure.value, TerminalError)
    assert f"{error}: the coordinator has no producer for this id; coordinator reports state Unknown" in str(failure.value)


# ---- unknown failures ----------------------------------------------------------------------------------
def test_any_other_refusal_is_a_terminal_commit_error_naming_the_broker_error(clock):
    admin = FakeAdmin(end=[EndTxnResult("TransactionalIdAuthorizationFailedError")],
                      describe={TID: [described(S.ONGOING)]})
    with pytest.raises(TransactionCommitError) as failure:
        committer(admin, clock).commit(TID, PID, EPOCH)
    assert type(failure.value) is TransactionCommitError and isinstance(failure.value, TerminalError)
    assert str(failure.value).endswith(": unexpected broker error TransactionalIdAuthorizationFailedError; "
                                       "coordinator reports state Ongoing")


def test_a_coordinator_that_cannot_be_found_is_a_terminal_error_without_retries(clock):
    admin = FakeAdmin(end=[EndTxnResult("TransactionalIdAuthorizationFailedError", FIND_COORDINATOR)])
    with pytest.raises(TransactionCommitError) as failure:
        committer(admin, clock).commit(TID, PID, EPOCH)
    assert str(failure.value) == (f"cannot find the coordinator of transaction {TID} (producer id -1, epoch -1): "
                                  "broker error TransactionalIdAuthorizationFailedError")
    assert admin.ops() == ["end_txn"] and clock.sleeps == []


# ---- DescribeTransactions ------------------------------------------------------------------------------
def test_describe_returns_the_observation_with_its_partitions():
    out0, out1 = TopicPartition("out", 0), TopicPartition("out", 1)
    admin = FakeAdmin(describe={TID: [described(S.ONGOING, EPOCH, PID, STARTED_MS, TIMEOUT_MS, out0, out1)]})
    seen = TransactionCommitter(admin).describe([TID])[TID]
    assert seen == TransactionObservation(TID, S.ONGOING, PID, EPOCH, STARTED_MS, TIMEOUT_MS, (out0, out1))
    assert isinstance(seen, commit_decision.TransactionObservation) and seen.state is S.ONGOING


def test_describe_reports_an_unknown_id_as_state_unknown():
    seen = TransactionCommitter(FakeAdmin()).describe([TID])[TID]
    assert (seen.state, seen.producer_id, seen.epoch, seen.start_time_ms, seen.timeout_ms) == (S.UNKNOWN, -1, -1, -1, -1)
    assert not seen.is_open and seen.deadline_ms is None


def test_describe_asks_once_per_id_in_order(clock):
    admin = FakeAdmin(describe={"b": [TransactionDescription("b", state=S.EMPTY)],
                                "a": [TransactionDescription("a", "NotCoordinatorError"),
                                      TransactionDescription("a", state=S.ONGOING)]})
    seen = committer(admin, clock).describe(["b", "a", "b"])
    assert list(seen) == ["b", "a"] and (seen["b"].state, seen["a"].state) == (S.EMPTY, S.ONGOING)
    assert admin.calls == [("describe", "b"), ("describe", "a"), ("describe", "a")]


def test_describe_refused_is_a_terminal_error():
    admin = FakeAdmin(describe={TID: [TransactionDescription(TID, "TransactionalIdAuthorizationFailedError")]})
    with pytest.raises(TransactionCommitError, match=f"cannot describe transaction {TID} .*: broker error "
                                                     "TransactionalIdAuthorizationFailedError"):
        TransactionCommitter(admin).describe([TID])


def test_describe_gives_up_at_the_deadline(clock):
    admin = FakeAdmin(describe={TID: [RetriableKafkaError("NodeNotReadyError: 1")]})
    with pytest.raises(CommitterUnavailableError, match=f"gave up trying to describe transaction {TID} after 3 s"):
        committer(admin, clock, deadline_s=3).describe([TID])


# ---- ListTransactions and fencing ----------------------------------------------------------------------
def test_list_open_asks_for_the_open_states_and_keeps_the_prefix_sorted_once(clock):
    rows = [TransactionListing(t, 1, S.ONGOING) for t in ("p-2-0", "other-1-0", "p-1-1", "p-1-1", "p-1-0")]
    admin = FakeAdmin(listings=[RetriableKafkaError("CoordinatorLoadInProgressError: loading"), rows])
    assert committer(admin, clock).list_open("p-") == ["p-1-0", "p-1-1", "p-2-0"]
    assert admin.calls == [("list", OPEN_STATES), ("list", OPEN_STATES)]
    assert set(OPEN_STATES) == {S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE}


def test_list_open_passes_the_states_asked_for():
    admin = FakeAdmin()
    TransactionCommitter(admin).list_open("p-", states=(S.ONGOING,))
    assert admin.calls == [("list", (S.ONGOING,))]


def test_fence_reinitialises_the_id_and_reports_what_the_coordinator_sees_now():
    admin = FakeAdmin(describe={TID: [described(S.EMPTY, epoch=EPOCH + 1, started=-1)]})
    seen = TransactionCommitter(admin, retry_deadline_s=30).fence(TID)
    assert admin.calls == [("fence", TID, 30), ("describe", TID)]
    assert (seen.state, seen.epoch) == (S.EMPTY, EPOCH + 1)


def test_fence_that_does_not_happen_in_time_is_transient():
    admin = FakeAdmin(fence_error=FenceError("KafkaError{code=_TIMED_OUT}"))
    with pytest.raises(CommitterUnavailableError) as failure:
        TransactionCommitter(admin).fence(TID, timeout_s=5)
    assert str(failure.value) == f"could not fence transaction {TID} within 5 s: KafkaError{{code=_TIMED_OUT}}"
    assert admin.ops() == ["fence"]


def test_the_committer_closes_its_admin():
    admin = FakeAdmin()
    with TransactionCommitter(admin):
        pass
    assert admin.closed


# ---- interpreting an observation -----------------------------------------------------------------------
@pytest.mark.parametrize("state", list(TransactionState))
def test_open_means_holding_back_read_committed_readers(state):
    seen = TransactionObservation(TID, state, PID, EPOCH, STARTED_MS, TIMEOUT_MS)
    assert seen.is_open is (state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE))


def test_holds_only_the_ongoing_transaction_of_the_same_producer_and_epoch():
    seen = TransactionObservation(TID, S.ONGOING, PID, EPOCH, STARTED_MS, TIMEOUT_MS)
    assert seen.holds(PID, EPOCH)
    assert not seen.holds(PID, EPOCH - 1) and not seen.holds(PID + 1, EPOCH)
    assert not TransactionObservation(TID, S.PREPARE_COMMIT, PID, EPOCH, STARTED_MS, TIMEOUT_MS).holds(PID, EPOCH)
    assert seen.deadline_ms == STARTED_MS + TIMEOUT_MS
