"""Commit or abort a prepared checkpoint, from what the transaction coordinator reports (pure).

The committer observes each transaction (DescribeTransactions) and hands the observations here;
:func:`decide_commit` decides all or nothing (the all-or-nothing-commit invariant) with roll-forward once anything was
committed (the idempotent-commit invariant), so every rule is tested without a broker.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from lockstep.model.checkpoint import PreparedCheckpoint, PreparedTransaction
from lockstep.model.transactions import TransactionObservation, TransactionState

_COMMITTING = (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
_ABORTING = (TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT)


class DecisionKind(str, Enum):
    COMMIT = "commit"
    ALREADY_COMMITTED = "already_committed"
    NOTHING_TO_COMMIT = "nothing_to_commit"
    ABORT = "abort"
    STUCK = "stuck"
    RETRY_LATER = "retry_later"


@dataclass(frozen=True)
class CommitDecision:
    """What the committer must do with one prepared checkpoint, and why, in words for the log."""

    kind: DecisionKind
    checkpoint_id: int
    #: ids to send EndTxn(commit) for; PrepareCommit ones are included (the broker answers retriably).
    commit: tuple[str, ...] = ()
    #: ids to fence/abort (ABORT: every transaction of the checkpoint).
    abort: tuple[str, ...] = ()
    already_committed: tuple[str, ...] = ()
    #: per transactional id, why it cannot be committed.
    problems: Mapping[str, str] = field(default_factory=dict)
    message: str = ""


def _committed_epoch_matches(t: PreparedTransaction, o: TransactionObservation) -> bool:
    """With transaction protocol v2 (KIP-890) the coordinator bumps the epoch when it ends a
    transaction, so a committed transaction may report the recorded epoch + 1."""
    return o.producer_id == t.producer_id and o.epoch in (t.epoch, t.epoch + 1)


def _timed_out_by_broker(t: PreparedTransaction, o: TransactionObservation, now_ms: int) -> bool:
    """A broker timeout aborts with the epoch bumped by exactly one and keeps the start time
    and timeout, whose sum has passed; fencing by a new writer re-inits instead (Empty, +2)."""
    return (o.state in _ABORTING and o.producer_id == t.producer_id
            and o.epoch == t.epoch + 1 and o.start_time_ms >= 0 and o.start_time_ms + o.timeout_ms <= now_ms)


def _classify(t: PreparedTransaction, o: TransactionObservation | None, now_ms: int, margin_ms: int) -> tuple[str, str]:
    """('commit'|'committing'|'committed'|'missing'|'bad', reason) for one transaction."""
    tid = t.transactional_id
    if o is None:
        return "missing", f"transaction {tid} could not be observed"
    if o.state in _COMMITTING and _committed_epoch_matches(t, o):
        return ("committing" if o.state == TransactionState.PREPARE_COMMIT else "committed"), ""
    ours = o.producer_id == t.producer_id and o.epoch == t.epoch
    if o.state == TransactionState.ONGOING and ours:
        left = o.start_time_ms + o.timeout_ms - now_ms
        if left <= 0:
            return "bad", f"transaction {tid} timed out after {o.timeout_ms} ms"
        if left < margin_ms:
            return "bad", (f"transaction {tid} has {left} ms left before its {o.timeout_ms} ms timeout, "
                           f"less than the {margin_ms} ms commit margin")
        return "commit", ""
    if _timed_out_by_broker(t, o, now_ms):
        return "bad", f"transaction {tid} timed out after {o.timeout_ms} ms (the broker aborted it)"
    if o.state in (TransactionState.ONGOING, *_COMMITTING) or (not ours and o.state in _ABORTING):
        return "bad", (f"transaction {tid} was fenced: the broker has producer id {o.producer_id} epoch {o.epoch} "
                       f"in state {o.state}, the checkpoint recorded {t.producer_id}/{t.epoch}")
    reasons = {
        TransactionState.PREPARE_ABORT: "is being aborted",
        TransactionState.COMPLETE_ABORT: "was aborted (timeout or fencing)",
        TransactionState.EMPTY: "has no open transaction (aborted or expired)",
        TransactionState.DEAD: "has expired on the broker",
        TransactionState.UNKNOWN: "is unknown to the transaction coordinator",
    }
    return "bad", f"transaction {tid} {reasons.get(o.state, f'is in unexpected state {str(o.state)!r}')}"


def decide_commit(
    prepared: PreparedCheckpoint,
    observed: Mapping[str, TransactionObservation],
    now_ms: int,
    margin_ms: int,
) -> CommitDecision:
    """All or nothing (the all-or-nothing-commit invariant), with roll-forward once anything was committed.

    Precedence: something committed + something uncommittable = STUCK (never abort a partially
    committed checkpoint); an unobserved transaction = RETRY_LATER (never abort on missing
    information); any uncommittable = ABORT all; otherwise COMMIT the rest or ALREADY_COMMITTED.
    Empty committables (nothing produced) are ignored: the broker never saw a transaction for them.
    """
    cid = prepared.checkpoint_id
    live = [t for t in prepared.transactions if not t.is_empty]
    if not live:
        return CommitDecision(DecisionKind.NOTHING_TO_COMMIT, cid, message=f"checkpoint {cid} has no transactions to commit")
    verdicts = {t.transactional_id: _classify(t, observed.get(t.transactional_id), now_ms, margin_ms) for t in live}
    by_kind: dict[str, list[str]] = {}
    for tid, (verdict, _) in verdicts.items():
        by_kind.setdefault(verdict, []).append(tid)
    problems = {tid: reason for tid, (verdict, reason) in verdicts.items() if reason}
    committed = tuple(by_kind.get("committed", ()))
    started = committed + tuple(by_kind.get("committing", ()))
    everything = tuple(t.transactional_id for t in prepared.transactions)

    if started and by_kind.get("bad"):
        detail = "; ".join(problems[t] for t in by_kind["bad"])
        return CommitDecision(
            DecisionKind.STUCK, cid, already_committed=committed, problems=problems,
            message=(f"checkpoint {cid} is partially committed ({', '.join(started)}) but {detail}. "
                     "It must not be aborted; the output of the other transactions is lost. "
                     "Manual intervention is needed: replay the missing partitions from a savepoint."),
        )
    if by_kind.get("missing"):
        return CommitDecision(DecisionKind.RETRY_LATER, cid, problems=problems,
                              message=f"checkpoint {cid}: could not observe {', '.join(by_kind['missing'])}; retry")
    if by_kind.get("bad"):
        detail = "; ".join(problems[t] for t in by_kind["bad"])
        return CommitDecision(DecisionKind.ABORT, cid, abort=everything, problems=problems,
                              message=f"checkpoint {cid} must be aborted: {detail}")
    to_commit = tuple(by_kind.get("commit", ())) + tuple(by_kind.get("committing", ()))
    if not to_commit:
        return CommitDecision(DecisionKind.ALREADY_COMMITTED, cid, already_committed=committed,
                              message=f"checkpoint {cid}: all {len(committed)} transactions already committed")
    note = f" (rolling forward; already committed: {', '.join(committed)})" if committed else ""
    return CommitDecision(DecisionKind.COMMIT, cid, commit=to_commit, already_committed=committed,
                          message=f"checkpoint {cid}: commit {', '.join(to_commit)}{note}")


def time_left_ms(prepared: PreparedCheckpoint, timeout_ms: int, now_ms: int) -> int | None:
    """How long until the first of the checkpoint's transactions times out by itself (its writer
    opened it at ``opened_at_ms``), or None when none was opened."""
    opened = prepared.opened_at_ms
    return min(opened) + timeout_ms - now_ms if opened else None


def late_commit_warning(checkpoint_id: int, left_ms: int | None, timeout_ms: int, percent: int) -> str | None:
    """The warning for a commit that begins with less than ``percent`` of the timeout left: one more
    delay of that size and the broker aborts a transaction of the checkpoint."""
    if left_ms is None or left_ms >= timeout_ms * percent / 100:
        return None
    return (f"checkpoint {checkpoint_id}: the commit begins with {max(left_ms, 0) / 1000:.0f} s of the transactions' "
            f"{timeout_ms / 1000:.0f} s timeout left (less than {percent}%): a little more delay and the broker "
            "aborts them. Raise transactions.timeout_ms, or shorten the time between the Spark run and the commit")
