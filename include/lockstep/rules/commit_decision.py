"""Commit or abort a prepared checkpoint, from what the transaction coordinator reports (pure).

The committer observes each transaction (DescribeTransactions) and hands the observations here;
:func:`decide_commit` decides all or nothing (the all-or-nothing-commit invariant) with roll-forward once anything was
committed (the idempotent-commit invariant), so every rule is tested without a broker.

When some transactions were committed and others were lost (the broker aborted them: timeout,
fencing), all or nothing is no longer possible. Instead of stopping, the checkpoint is repaired:
the rest is committed, and the input ranges of the lost transactions' source partitions are given
back to the next checkpoint, which reads and writes them again (:func:`repair_ranges`). That is
exact when no source partition's records were split between a lost and a kept transaction.
"""
from __future__ import annotations

__all__ = [
    "CommitDecision", "DecisionKind", "decide_commit", "end_offsets_after_repair", "late_commit_warning",
    "time_left_ms",
]

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from lockstep.model.checkpoint import PreparedCheckpoint, PreparedTransaction
from lockstep.model.offsets import OffsetRange
from lockstep.model.transactions import TransactionObservation, TransactionState

#: What a user may accept to settle a stuck checkpoint (``lockstep transactions resolve --accept``).
ACCEPT = {
    "duplicates": "every input range of the lost transactions' source partitions is read again (of a stateful "
                  "pipeline: all the checkpoint's input, from the state it started with): outputs the committed "
                  "transactions already hold of them appear twice",
    "loss": "the checkpoint is completed without the lost transactions' output: it is missing from the sink",
}

_COMMITTING = (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
_ABORTING = (TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT)


class DecisionKind(str, Enum):
    COMMIT = "commit"
    ALREADY_COMMITTED = "already_committed"
    NOTHING_TO_COMMIT = "nothing_to_commit"
    ABORT = "abort"
    REPAIR = "repair"
    STUCK = "stuck"
    RETRY_LATER = "retry_later"


@dataclass(frozen=True)
class CommitDecision:
    """What the committer must do with one prepared checkpoint, and why, in words for the log."""

    kind: DecisionKind
    checkpoint_id: int
    #: ids to send EndTxn(commit) for; PrepareCommit ones are included (the broker answers retriably).
    commit: tuple[str, ...] = ()
    #: ids to fence/abort (ABORT: every transaction of the checkpoint; REPAIR: the lost ones).
    abort: tuple[str, ...] = ()
    #: REPAIR: the claim's input ranges whose output was lost, given back to the next checkpoint.
    replay: tuple[OffsetRange, ...] = ()
    #: REPAIR of a checkpoint that could not be repaired exactly: what the user accepted
    #: ("duplicates" or "loss", see `ACCEPT`).
    accepted: str | None = None
    #: REPAIR of a stateful checkpoint: the lost transactions' tasks (of ``of_tasks``), whose output the
    #: next checkpoint computes again from this one's claim and writes (`rerun_tasks`).
    rerun: tuple[int, ...] = ()
    of_tasks: int = 0
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
    ranges: Sequence[OffsetRange],
    accept: str | None = None,
    deduplicated: bool = False,
) -> CommitDecision:
    """All or nothing (the all-or-nothing-commit invariant), with roll-forward once anything was committed.

    Precedence: an unobserved transaction = RETRY_LATER (never decide on missing information);
    something committed + something uncommittable = REPAIR (commit the rest, give the lost ranges
    back; ``ranges`` are the claim's), or STUCK when that cannot be exact (never abort a partially
    committed checkpoint); any uncommittable = ABORT all; otherwise COMMIT the rest or
    ALREADY_COMMITTED. Empty committables (nothing produced) are ignored: the broker never saw a
    transaction for them. ``accept`` (a key of `ACCEPT`) turns a STUCK checkpoint into an inexact
    REPAIR the user chose. ``deduplicated``: the pipeline skips on a re-read what its completed
    checkpoints wrote (a dead-letter replay), so a repair may give back every range (`repair_ranges`).
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
    to_commit = tuple(by_kind.get("commit", ())) + tuple(by_kind.get("committing", ()))

    if by_kind.get("missing"):
        return CommitDecision(DecisionKind.RETRY_LATER, cid, problems=problems,
                              message=f"checkpoint {cid}: could not observe {', '.join(by_kind['missing'])}; retry")
    if started and by_kind.get("bad"):
        lost = tuple(by_kind["bad"])
        detail = "; ".join(problems[t] for t in lost)
        rerun: tuple[int, ...] = ()
        replay: tuple[OffsetRange, ...] | None
        if prepared.state is not None:
            found, why_not = rerun_tasks(prepared, lost)
            rerun, replay = (found, ()) if found else ((), None)
        else:
            replay, why_not = repair_ranges(prepared, lost, ranges, deduplicated)
        accepted = None
        if replay is None and accept is not None:
            replay, accepted = accepted_ranges(prepared, lost, ranges, accept), accept
        if replay is None:
            return CommitDecision(
                DecisionKind.STUCK, cid, already_committed=committed, problems=problems,
                message=(f"checkpoint {cid} is partially committed ({', '.join(started)}) but {detail}. It must not "
                         f"be aborted, and it cannot be repaired exactly: {why_not}. Choose what to accept and run "
                         "`lockstep transactions resolve --accept duplicates` (read the lost input again, "
                         "duplicating what was committed of it) or `--accept loss` (complete without it); "
                         "docs/operations.md, 'A stuck checkpoint'"),
            )
        rest = f"commit {', '.join(to_commit)}; " if to_commit else ""
        given = (f"the input of the lost transaction{'s' if len(lost) > 1 else ''} "
                 f"({', '.join(str(r) for r in replay)}) goes back to the next checkpoint, which reads and writes it "
                 "again" if replay else "no input goes back")
        if rerun:
            given = (f"its state stands, and the next checkpoint computes checkpoint {cid} again from its claim (its "
                     f"ranges, base state and clock) and writes the output of task{'s' if len(rerun) > 1 else ''} "
                     f"{', '.join(map(str, rerun))} again")
        choice = f" as accepted ({accepted}: {ACCEPT[accepted]})" if accepted else ""
        return CommitDecision(
            DecisionKind.REPAIR, cid, commit=to_commit, abort=lost, already_committed=committed, problems=problems,
            replay=replay, accepted=accepted, rerun=rerun, of_tasks=(prepared.output_tasks or 0) if rerun else 0,
            message=(f"checkpoint {cid} is partially committed ({', '.join(started)}) but {detail}. Repairing "
                     f"it{choice}: {rest}{given}"),
        )
    if by_kind.get("bad"):
        detail = "; ".join(problems[t] for t in by_kind["bad"])
        return CommitDecision(DecisionKind.ABORT, cid, abort=everything, problems=problems,
                              message=f"checkpoint {cid} must be aborted: {detail}")
    if not to_commit:
        return CommitDecision(DecisionKind.ALREADY_COMMITTED, cid, already_committed=committed,
                              message=f"checkpoint {cid}: all {len(committed)} transactions already committed")
    note = f" (rolling forward; already committed: {', '.join(committed)})" if committed else ""
    return CommitDecision(DecisionKind.COMMIT, cid, commit=to_commit, already_committed=committed,
                          message=f"checkpoint {cid}: commit {', '.join(to_commit)}{note}")


def repair_ranges(prepared: PreparedCheckpoint, lost: Sequence[str], ranges: Sequence[OffsetRange],
                  deduplicated: bool = False) -> tuple[tuple[OffsetRange, ...] | None, str]:
    """The claim's input ranges to give back to the next checkpoint when the transactions ``lost``
    were aborted and the others kept, or (None, why that would not be exact).

    Exact when each lost transaction says which source partitions its records came from, and no
    other transaction of the checkpoint carries records of those partitions: re-reading a whole
    range then re-creates exactly the lost output (a deterministic transform), nothing of the kept.

    A ``deduplicated`` pipeline (a dead-letter replay, `lockstep.spark.dead_letter_replay`) gets every range of
    the claim back: its transactions' records name the original input, not the ranges it read, but
    the next checkpoint skips every original offset the kept transactions wrote to the sink (the
    replay's accounting leaves out the lost transactions' records), so re-reading all of it writes
    exactly what was lost.
    """
    if deduplicated and prepared.state is None:
        return tuple(sorted(r for r in ranges if not r.is_empty)), ""
    if prepared.state is not None:
        return None, ("the checkpoint's keyed state already holds the effect of the lost transactions' records, so "
                      "reading them again would count them twice")
    by_id = {t.transactional_id: t for t in prepared.transactions}
    unknown = [tid for tid in lost if by_id[tid].sources is None]
    if unknown:
        return None, (f"{', '.join(unknown)} {'were' if len(unknown) > 1 else 'was'} written by an earlier version of "
                      "Lockstep, which did not record the source partitions of each transaction")
    lost_sources = {tp for tid in lost for tp in by_id[tid].sources or ()}
    shared = sorted({tp.key for t in prepared.transactions if t.transactional_id not in lost and not t.is_empty
                     for tp in t.sources or () if tp in lost_sources})
    if shared:
        return None, (f"the records of source partition{'s' if len(shared) > 1 else ''} {', '.join(shared)} were "
                      "written by lost and by committed transactions (the transform moved records between Spark "
                      "tasks, a shuffle), so re-reading them would duplicate the committed part")
    claimed = {r.tp: r for r in ranges if not r.is_empty}
    outside = sorted(tp.key for tp in lost_sources if tp not in claimed)
    if outside:
        return None, f"the lost transactions carry records of {', '.join(outside)}, which the claim does not cover"
    return tuple(sorted(claimed[tp] for tp in lost_sources)), ""


def rerun_tasks(prepared: PreparedCheckpoint, lost: Sequence[str]) -> tuple[tuple[int, ...], str]:
    """The tasks of a stateful checkpoint whose output ``lost`` held, to be computed again and written by
    the next checkpoint, or ((), why that would not be exact).

    Exact when the run placed its output by `lockstep.rules.output_tasks` (``output_tasks`` recorded): the
    same claim, base state and clock give the same output, and the rule the same tasks, so the lost
    transactions' records are exactly those of their tasks, given a deterministic transform. The state
    is the prepared one: it already holds the effect of every record, so no input is read again."""
    if prepared.output_tasks is None:
        return (), ("it was written by an earlier version of Lockstep, which did not place a stateful output in "
                    "its transactions by rule, so the lost transactions' share cannot be computed again, and its "
                    "keyed state already holds the effect of their records, so reading them again would count them "
                    "twice")
    by_id = {t.transactional_id: t for t in prepared.transactions}
    tasks = tuple(sorted({by_id[tid].task_index for tid in lost}))
    if any(not 0 <= t < prepared.output_tasks for t in tasks):
        return (), f"the lost transactions' tasks {tasks} are not among its {prepared.output_tasks} output tasks"
    return tasks, ""


def accepted_ranges(prepared: PreparedCheckpoint, lost: Sequence[str], ranges: Sequence[OffsetRange],
                    accept: str) -> tuple[OffsetRange, ...]:
    """The ranges to give back when the user accepted an inexact repair: none for "loss"; for
    "duplicates" the claim's ranges of every lost transaction's source partitions, or all the claim's
    ranges when a lost transaction does not say where its records came from."""
    if accept not in ACCEPT:
        raise ValueError(f"accept must be one of {', '.join(ACCEPT)}, got {accept!r}")
    if accept == "loss":
        return ()
    if prepared.state is not None:  # the state goes back to the checkpoint's base: all of its input is read again
        return tuple(sorted(r for r in ranges if not r.is_empty))
    by_id = {t.transactional_id: t for t in prepared.transactions}
    sources = [by_id[tid].sources for tid in lost]
    claimed = [r for r in ranges if not r.is_empty]
    if any(s is None for s in sources):
        return tuple(sorted(claimed))
    wanted = {tp for s in sources for tp in s or ()}
    return tuple(sorted(r for r in claimed if r.tp in wanted))


def end_offsets_after_repair(ranges: Sequence[OffsetRange], replay: Sequence[OffsetRange]) -> dict[str, int]:
    """Where the next checkpoint starts after a repair: the claim's end offsets, except that each
    given-back partition ends where the checkpoint started it."""
    ends = {r.tp.key: r.end for r in ranges}
    ends.update({r.tp.key: r.start for r in replay})
    return ends


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
