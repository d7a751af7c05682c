"""The committer side of Lockstep's two-phase commit: end transactions that other processes prepared.

A Spark task pre-commits (`lockstep.spark.python_writer`) and exits; the transaction stays open on the
broker. Later, the *commit* task — another process — commits it by transactional id with the
recorded producer id and epoch. How that is said to Kafka is `lockstep.kafka.internals`'s business;
this module holds the policy, as Flink's `KafkaCommitter` does:

* **retry later** — the coordinator is moving, loading or busy (`_RETRIABLE`), or the client lost
  its connection: retried with back-off until the deadline, then `CommitterUnavailableError`
  (transient: the task is retried);
* **known failure** — fenced (`TransactionFencedError`, with why: a broker timeout or another
  writer), not open (`TransactionStateError`), unknown id (`UnknownTransactionError`);
* **unknown failure** — any other broker error, a `TransactionCommitError` naming it.

Repeating a commit that succeeded succeeds again (EndTxn is idempotent while the epoch is unchanged).
"""

from __future__ import annotations

__all__ = [
    "Committer", "TransactionCommitter",
]

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Protocol, Self, TypeVar

from lockstep.errors import TerminalError, TransientError
from lockstep.kafka.internals import (
    FIND_COORDINATOR,
    NO_ERROR,
    FenceError,
    KafkaTransactionAdmin,
    RetriableKafkaError,
    TransactionAdmin,
)
from lockstep.model.transactions import OPEN_STATES, TransactionObservation, TransactionState, utc_text

log = logging.getLogger(__name__)

T = TypeVar("T")

# Broker errors that go away by themselves: coordinator moving or loading, or an EndTxn in flight.
_RETRIABLE = frozenset({"ConcurrentTransactionsError", "CoordinatorLoadInProgressError", "NotCoordinatorError",
                        "CoordinatorNotAvailableError", "RequestTimedOutError"})
_FENCED = frozenset({"ProducerFencedError", "InvalidProducerEpochError"})
_UNKNOWN_ID = frozenset({"InvalidProducerIdMappingError", "TransactionalIdNotFoundError"})


# ---- errors ------------------------------------------------------------------------------------
class CommitterUnavailableError(TransientError):
    """The transaction coordinator did not answer usefully before the deadline; retry the task later."""


class TransactionCommitError(TerminalError):
    """EndTxn was refused for a reason a retry cannot fix; names the transaction and the reason."""

    def __init__(self, transactional_id: str, producer_id: int, epoch: int, action: str, reason: str) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.epoch = epoch
        self.action = action
        self.reason = reason
        super().__init__(
            f"cannot {action} transaction {transactional_id} (producer id {producer_id}, epoch {epoch}): {reason}"
        )


class TransactionFencedError(TransactionCommitError):
    """The id has a newer epoch: the broker timed the transaction out, or another writer re-initialised it."""


class TransactionStateError(TransactionCommitError):
    """The transaction is not open (empty, already aborted, or aborted/committed the other way)."""


class UnknownTransactionError(TransactionCommitError):
    """The coordinator has no producer for this id (expired by transactional.id.expiration.ms, or never used)."""


def explain_fenced(producer_id: int, epoch: int, seen: TransactionObservation | None) -> str:
    """Say why (producer_id, epoch) is fenced, from what the coordinator reports now.

    A broker timeout aborts with exactly one epoch bump and keeps the old start time and timeout;
    a re-initialisation (fencing, a retried task) bumps further and resets the transaction.
    """
    if seen is None or seen.state == TransactionState.UNKNOWN:
        return "fenced, and the coordinator no longer knows the id"
    aborted = seen.state in (TransactionState.COMPLETE_ABORT, TransactionState.PREPARE_ABORT)
    if seen.producer_id == producer_id and seen.epoch == epoch + 1 and aborted and seen.deadline_ms is not None:
        return (f"the broker aborted it because it timed out: transaction.timeout.ms={seen.timeout_ms} ms "
                f"elapsed (started {utc_text(seen.start_time_ms)}, deadline {utc_text(seen.deadline_ms)}) before the commit; "
                "its records are discarded. Raise transaction.timeout.ms or commit sooner")
    return (f"fenced: the id now has producer id {seen.producer_id}, epoch {seen.epoch} (state {seen.state}); "
            "another writer re-initialised it, so this transaction was aborted or belongs to the past")


# ---- committer -----------------------------------------------------------------------------------
class Committer(Protocol):
    """What the steps and the transaction console do with a cluster's transactions, in a ``with`` block:
    `TransactionCommitter` on a Kafka cluster, an in-memory coordinator in tests
    (``tests/support/fake_kafka.FakeCommitter``)."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def describe(self, transactional_ids: Iterable[str]) -> Mapping[str, TransactionObservation]: ...

    def commit(self, transactional_id: str, producer_id: int, epoch: int) -> None: ...

    def abort(self, transactional_id: str, producer_id: int, epoch: int) -> None: ...

    def fence(self, transactional_id: str) -> object:
        """Returns what the coordinator reports after fencing; the steps do not use it."""
        ...

    def list_open(self, prefix: str) -> list[str]: ...


class TransactionCommitter:
    """Describes, commits, aborts and fences transactions by transactional id, from any process.

    ``admin`` speaks the protocol (`lockstep.kafka.internals.KafkaTransactionAdmin`, or a fake in
    tests); a bootstrap string is a PLAINTEXT cluster without further settings (tests, tools).
    """

    def __init__(
        self,
        admin: TransactionAdmin | str,
        *,
        retry_deadline_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._admin: TransactionAdmin = KafkaTransactionAdmin(admin) if isinstance(admin, str) else admin
        self._deadline_s = retry_deadline_s
        self._monotonic = monotonic
        self._sleep = sleep

    def close(self) -> None:
        self._admin.close()

    def __enter__(self) -> TransactionCommitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- public API ----------------------------------------------------------------------------
    def describe(self, transactional_ids: Iterable[str]) -> dict[str, TransactionObservation]:
        """Observe each id; an id the coordinator does not know is reported with state Unknown."""
        result: dict[str, TransactionObservation] = {}
        for tid in dict.fromkeys(transactional_ids):  # dedupe, keep order
            result[tid] = self._retrying(f"describe transaction {tid}", partial(self._describe_once, tid))
        return result

    def commit(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        """Commit a transaction prepared elsewhere; succeeds again if it is already committed."""
        self._end(transactional_id, producer_id, epoch, commit=True)

    def abort(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        """Abort a transaction prepared elsewhere; succeeds again if it is already aborted."""
        self._end(transactional_id, producer_id, epoch, commit=False)

    def list_open(self, prefix: str, states: Sequence[TransactionState] = OPEN_STATES) -> list[str]:
        """Transactional ids starting with `prefix` that have a transaction in one of `states`."""
        listings = self._retrying(f"list transactions with prefix {prefix!r}",
                                  lambda: self._admin.list_transactions(states))
        return sorted({row.transactional_id for row in listings if row.transactional_id.startswith(prefix)})

    def fence(self, transactional_id: str, timeout_s: float | None = None) -> TransactionObservation:
        """Abort whatever `transactional_id` has open by re-initialising it (the broker bumps the epoch).

        This is how a dead writer's transaction is ended without knowing its producer id or epoch,
        and how earlier attempts are kept from ever committing.
        """
        timeout = self._deadline_s if timeout_s is None else timeout_s
        try:
            self._admin.fence(transactional_id, timeout)
        except FenceError as exc:
            raise CommitterUnavailableError(
                f"could not fence transaction {transactional_id} within {timeout:.0f} s: {exc}"
            ) from exc
        seen = self.describe([transactional_id])[transactional_id]
        log.info("transaction %s: fenced; now producer id %d, epoch %d, state %s",
                 transactional_id, seen.producer_id, seen.epoch, seen.state)
        return seen

    # ---- EndTxn --------------------------------------------------------------------------------
    def _end(self, tid: str, producer_id: int, epoch: int, commit: bool) -> None:
        action = "commit" if commit else "abort"
        error = self._retrying(f"{action} transaction {tid}",
                               lambda: self._end_once(tid, producer_id, epoch, commit))
        if error == NO_ERROR:
            log.info("transaction %s: %s done (producer id %d, epoch %d)", tid, action, producer_id, epoch)
            return
        raise self._classify(tid, producer_id, epoch, action, error)

    def _end_once(self, tid: str, producer_id: int, epoch: int, commit: bool) -> str:
        answer = self._admin.end_txn(tid, producer_id, epoch, commit)
        _raise_if_retriable(answer.error)
        if answer.request == FIND_COORDINATOR:
            raise _no_coordinator(tid, answer.error)
        return answer.error

    def _classify(self, tid: str, producer_id: int, epoch: int, action: str, error: str) -> TransactionCommitError:
        """Turn a refusal into an error that says what happened, using the coordinator's current view."""
        try:
            seen: TransactionObservation | None = self.describe([tid])[tid]
        except TransientError:
            seen = None
        now = f"; coordinator reports state {seen.state}" if seen is not None else ""
        if error in _FENCED:
            return TransactionFencedError(tid, producer_id, epoch, action,
                                          f"{error}: {explain_fenced(producer_id, epoch, seen)}")
        if error == "InvalidTxnStateError":
            return TransactionStateError(tid, producer_id, epoch, action,
                                         f"{error}: the transaction is not open (nothing produced, or already "
                                         f"ended the other way){now}")
        if error in _UNKNOWN_ID:
            return UnknownTransactionError(tid, producer_id, epoch, action,
                                           f"{error}: the coordinator has no producer for this id{now}")
        return TransactionCommitError(tid, producer_id, epoch, action, f"unexpected broker error {error}{now}")

    # ---- DescribeTransactions ------------------------------------------------------------------
    def _describe_once(self, tid: str) -> TransactionObservation:
        row = self._admin.describe_transaction(tid)
        _raise_if_retriable(row.error)
        if row.request == FIND_COORDINATOR:
            raise _no_coordinator(tid, row.error)
        if row.error == "TransactionalIdNotFoundError":
            return TransactionObservation(tid, TransactionState.UNKNOWN, producer_id=-1, epoch=-1, start_time_ms=-1,
                                          timeout_ms=-1)
        if row.error != NO_ERROR:
            raise TransactionCommitError(tid, -1, -1, "describe", f"broker error {row.error}")
        return TransactionObservation(
            transactional_id=tid, state=row.state, producer_id=row.producer_id, epoch=row.epoch,
            start_time_ms=row.start_time_ms, timeout_ms=row.timeout_ms, partitions=row.partitions,
        )

    # ---- retries -------------------------------------------------------------------------------
    def _retrying(self, what: str, attempt: Callable[[], T]) -> T:
        """Run `attempt` until it stops raising retriable errors, backing off, up to the deadline."""
        deadline = self._monotonic() + self._deadline_s
        delay = 0.05
        while True:
            try:
                return attempt()
            except _Retry as exc:
                last = exc.error
            except RetriableKafkaError as exc:
                last = str(exc)
            if self._monotonic() + delay >= deadline:
                raise CommitterUnavailableError(
                    f"gave up trying to {what} after {self._deadline_s:.0f} s; last error {last}. "
                    "The transaction coordinator is busy or unreachable; retry the task"
                )
            log.info("%s: %s, retrying in %.2f s", what, last, delay)
            self._sleep(delay)  # back-off between attempts, not a wait for a state
            delay = min(delay * 2, 1.0)


class _Retry(Exception):
    """A retriable broker answer, carried to the retry loop."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def _raise_if_retriable(error: str) -> None:
    if error in _RETRIABLE:
        raise _Retry(error)


def _no_coordinator(tid: str, error: str) -> TransactionCommitError:
    return TransactionCommitError(tid, -1, -1, "find the coordinator of", f"broker error {error}")
