"""Pure decisions of the coordinator: transactional ids, commit-or-abort, and recovery.

The committer and the planner observe the world (S3 metadata, DescribeTransactions) and hand plain
values to these functions, which decide. Keeping the decisions free of I/O is what lets every rule
of invariants 4, 5 and 7 be tested without a broker.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from lockstep.checkpoint import CheckpointStatus, CheckpointView, PreparedCheckpoint, PreparedTransaction
from lockstep.kafka_protocol import TransactionState
from lockstep.offsets import OffsetRange

# --- transactional ids --------------------------------------------------------------------------


def transactional_id(prefix: str, checkpoint_id: int, task_index: int) -> str:
    """The one place ids are made: a retried task reuses its id, which fences the earlier attempt."""
    return f"{prefix}-{checkpoint_id}-{task_index}"


class ParsedTransactionalId(NamedTuple):
    checkpoint_id: int
    task_index: int


_ID_TAIL = re.compile(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)")


def parse_transactional_id(prefix: str, tid: str) -> ParsedTransactionalId | None:
    """(checkpoint, task) of an id made by `transactional_id` with this prefix; None if not ours."""
    if not tid.startswith(prefix + "-"):
        return None
    match = _ID_TAIL.fullmatch(tid[len(prefix) + 1:])
    if match is None:
        return None
    return ParsedTransactionalId(int(match.group(1)), int(match.group(2)))


# --- commit or abort ----------------------------------------------------------------------------

_COMMITTING = (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
_ABORTING = (TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT)


@dataclass(frozen=True)
class TransactionObservation:
    """What the transaction coordinator reports for one id (DescribeTransactions), or state Unknown."""

    transactional_id: str
    state: TransactionState
    producer_id: int
    epoch: int
    start_time_ms: int
    timeout_ms: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", TransactionState(self.state))  # a wire string becomes the enum


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
    """All or nothing (invariant 4), with roll-forward once anything was committed.

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


# --- recovery -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecoveryPlan:
    """What plan must do before claiming a new checkpoint (Flink's initializeState, seed 003)."""

    next_checkpoint_id: int
    #: prepared checkpoints to run the commit step for, oldest first (its decision may still be abort).
    roll_forward: tuple[int, ...] = ()
    #: claimed-only checkpoints to mark aborted (their run died before preparing).
    mark_aborted: tuple[int, ...] = ()
    #: per checkpoint id, transactional ids to fence (InitProducerId aborts whatever is open), on the
    #: spec's sink cluster.
    fence: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    #: the same for checkpoints planned with another sink.kafka_conn_id, per that connection id:
    #: their transactions live on that cluster.
    fence_elsewhere: Mapping[str, Mapping[int, tuple[str, ...]]] = field(default_factory=dict)

    @property
    def is_clean(self) -> bool:
        return not (self.roll_forward or self.mark_aborted or self.fence or self.fence_elsewhere)


#: Where a checkpoint's transactions live: (sink connection id, or None for the spec's; id prefix).
Scope = tuple["str | None", str]

_UNSETTLED = (CheckpointStatus.CLAIMED, CheckpointStatus.PREPARED, CheckpointStatus.ABORTED)


def checkpoint_scope(view: CheckpointView, id_prefix: str, sink_conn_id: str | None = None) -> Scope:
    """Where recovery looks for a checkpoint's transactions: where its claim says it was planned.

    A claim that does not record it (an earlier version's) is taken to be under the spec's
    current prefix and cluster. The cluster is None when it is the spec's (``sink_conn_id``),
    or when the caller does not tell clusters apart.
    """
    planned = view.claim.planned_with
    if planned is None:
        return (None, id_prefix)
    here = sink_conn_id is None or planned.sink_kafka_conn_id == sink_conn_id
    return (None if here else planned.sink_kafka_conn_id, planned.id_prefix)


def listing_scopes(views: Sequence[CheckpointView], id_prefix: str,
                   sink_conn_id: str | None = None) -> dict[str | None, tuple[str, ...]]:
    """Which prefixes recovery lists open transactions under, per sink cluster (None: the spec's).

    The spec's current prefix always, on the spec's cluster, for anything lingering; and the
    prefix (and cluster) each unsettled checkpoint was planned with, so that a checkpoint in
    flight when ``transactions.id_prefix`` or ``sink.kafka_conn_id`` was edited is still fenced
    where its transactions are.
    """
    scopes: dict[str | None, list[str]] = {None: [id_prefix]}
    for view in sorted(views, key=lambda v: v.checkpoint_id):
        if view.status in _UNSETTLED:
            cluster, prefix = checkpoint_scope(view, id_prefix, sink_conn_id)
            if prefix not in scopes.setdefault(cluster, []):
                scopes[cluster].append(prefix)
    return {cluster: tuple(prefixes) for cluster, prefixes in scopes.items()}


def recovery_plan(
    views: Sequence[CheckpointView],
    id_prefix: str,
    open_transactional_ids: Iterable[str] = (),
    latest_completed_id: int | None = None,
    *,
    sink_conn_id: str | None = None,
    open_elsewhere: Mapping[str, Iterable[str]] | None = None,
) -> RecoveryPlan:
    """Commit what was decided, abort everything else under our prefix.

    `views` are the checkpoints newer than the latest completed one. Ids of a checkpoint are derived
    from its claim (one per non-empty range), under the prefix its claim was planned with
    (`checkpoint_scope`); `open_transactional_ids` (seen on the spec's sink cluster under the prefixes of
    `listing_scopes`) adds ids a higher past parallelism used, and `open_elsewhere` the same seen on
    other clusters, per sink connection id. Under the spec's current prefix every open id that no
    prepared checkpoint owns is fenced; under a prefix or cluster the spec has since left, only ids of
    the unsettled checkpoints planned there, so a prefix given up and reused by another pipeline is not
    swept. Fencing is idempotent, so aborted checkpoints are fenced again rather than trusting that the
    earlier fencing happened.
    """
    current: Scope = (None, id_prefix)
    fence: dict[str | None, dict[int, set[str]]] = {}
    planned_in: dict[Scope, set[int]] = {current: set()}
    roll_forward: list[int] = []
    mark_aborted: list[int] = []
    keep: set[tuple[str | None, str]] = set()
    for view in sorted(views, key=lambda v: v.checkpoint_id):
        cid = view.checkpoint_id
        if view.status not in _UNSETTLED:
            continue
        cluster, prefix = scope = checkpoint_scope(view, id_prefix, sink_conn_id)
        planned_in.setdefault(scope, set()).add(cid)
        if view.status is CheckpointStatus.PREPARED:
            roll_forward.append(cid)
            keep.update((cluster, t.transactional_id) for t in view.prepared.transactions)  # type: ignore[union-attr]
        else:
            if view.status is CheckpointStatus.CLAIMED:
                mark_aborted.append(cid)
            fence.setdefault(cluster, {}).setdefault(cid, set()).update(
                transactional_id(prefix, cid, i) for i in range(view.claim.task_count))
    seen_open = [(None, tid) for tid in open_transactional_ids]
    seen_open += [(conn, tid) for conn, tids in (open_elsewhere or {}).items() for tid in tids if conn != sink_conn_id]
    for cluster, tid in seen_open:
        if (cluster, tid) in keep:
            continue
        for (where, prefix), cids in planned_in.items():
            parsed = parse_transactional_id(prefix, tid) if where == cluster else None
            if parsed is not None and ((where, prefix) == current or parsed.checkpoint_id in cids):
                fence.setdefault(cluster, {}).setdefault(parsed.checkpoint_id, set()).add(tid)
                break
    seen = [v.checkpoint_id for v in views] + ([latest_completed_id] if latest_completed_id is not None else [])
    by_cluster = {cluster: {cid: tuple(sorted(ids, key=_task_order)) for cid, ids in sorted(per_cid.items()) if ids}
                  for cluster, per_cid in fence.items()}
    return RecoveryPlan(
        next_checkpoint_id=max(seen, default=0) + 1,
        roll_forward=tuple(roll_forward),
        mark_aborted=tuple(mark_aborted),
        fence=by_cluster.pop(None, {}),
        fence_elsewhere={conn: ids for conn, ids in sorted(by_cluster.items()) if ids},
    )


def _task_order(tid: str) -> tuple[int, str]:
    tail = tid.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else -1, tid)


# --- messages -----------------------------------------------------------------------------------


def compress_partitions(partitions: Iterable[int]) -> str:
    """[0, 1, 2, 3, 5, 7, 8] -> '0-3,5,7-8', so long partition lists stay readable in logs."""
    parts: list[str] = []
    ordered = sorted(set(partitions))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def replay_hint(ranges: Iterable[OffsetRange], replay_from: str) -> str:
    """'the next run replays orders partitions 0-5,7 from checkpoint 41' for an aborted checkpoint."""
    by_topic: dict[str, list[int]] = {}
    for r in ranges:
        if not r.is_empty:
            by_topic.setdefault(r.topic, []).append(r.partition)
    if not by_topic:
        return "nothing to replay: the checkpoint covered no records"
    topics = "; ".join(
        f"{topic} partition{'s' if len(parts) > 1 else ''} {compress_partitions(parts)}"
        for topic, parts in sorted(by_topic.items())
    )
    return f"the next run replays {topics} from {replay_from}"


# --- runs in flight -------------------------------------------------------------------------------


def cli_run_id(host: str, pid: int, nonce: str) -> str:
    """Run ids of CLI runs say where the run lives, so another run can tell if it is still alive."""
    return f"cli-{host}-{pid}-{nonce}"


def parse_cli_run_id(run_id: str) -> tuple[str, int] | None:
    """(host, pid) of a CLI run id, or None for other runs (Airflow's, tests')."""
    if not run_id.startswith("cli-"):
        return None
    head, _, _nonce = run_id[4:].rpartition("-")
    host, _, pid = head.rpartition("-")
    return (host, int(pid)) if host and pid.isdigit() else None


def claim_in_flight(run_id: str, claimed_at_ms: int, now_ms: int, lease_ms: int, my_host: str,
                    pid_alive: Callable[[int], bool]) -> str | None:
    """Why an unsettled checkpoint claimed by another run must be left alone, or None.

    Recovering a checkpoint whose run is still going would fence its transactions under
    it (and, mid-commit, leave it half committed). A CLI run on this host is alive
    exactly while its process is; any other owner is presumed alive for ``lease_ms``
    after its claim (the transaction timeout: by then its transactions are void anyway).
    """
    cli = parse_cli_run_id(run_id)
    if cli is not None and cli[0] == my_host:
        return f"its run {run_id} (pid {cli[1]}) is still running" if pid_alive(cli[1]) else None
    left = claimed_at_ms + lease_ms - now_ms
    if left > 0:
        return (f"its run {run_id} claimed it {max(0, now_ms - claimed_at_ms) // 1000} s ago and may still be "
                f"running; it is presumed alive for {left // 1000} s more (transactions.timeout_ms)")
    return None
