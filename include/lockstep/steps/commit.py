"""The commit step: carry out the commit decision for a prepared checkpoint (Flink's
``notifyCheckpointComplete``), complete it, publish its offsets, apply retention.

The decision is ``lockstep.rules.commit_decision.decide_commit`` (pure); this module gathers the
observations, calls it, and carries out the result, logging every step with the checkpoint id.
"""
from __future__ import annotations

__all__ = [
    "commit", "tidy",
]

import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lockstep.errors import CheckpointError, TerminalError, TransientError
from lockstep.iceberg.table_commit import TableStep, TableStepKind, decide_table, lost_sources
from lockstep.model import failpoints
from lockstep.model.checkpoint import (
    CheckpointStatus,
    CheckpointView,
    CompletedCheckpoint,
    PreparedCheckpoint,
    Repair,
)
from lockstep.model.transactions import TransactionState
from lockstep.rules.commit_decision import (
    CommitDecision,
    DecisionKind,
    decide_commit,
    end_offsets_after_repair,
    late_commit_warning,
    time_left_ms,
)
from lockstep.rules.pinned import Resolved, Step, refusal, resolve_pinned, transactions_deadline_ms
from lockstep.rules.pipelining import ABORT, WAIT, Verdict, verdict
from lockstep.steps.pipeline import (
    Pipeline,
    drop_staged,
    each_together,
    mark_aborted,
    now_iso,
    publish_end_offsets,
    unusable_sink,
)

if TYPE_CHECKING:
    from lockstep.kafka.committer import Committer
    from lockstep.store.checkpoint_store import PipelineStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitOutcome:
    checkpoint_id: int
    status: CheckpointStatus
    committed: tuple[str, ...] = ()
    message: str = ""
    #: When the commit began: how long until its first transaction would have timed out (None when
    #: it had none, or was completed before).
    time_left_ms: int | None = None
    #: Set when the checkpoint was completed after a repair: what was lost and given back.
    repair: Repair | None = None


def commit(p: Pipeline, checkpoint_id: int, accept: str | None = None) -> CommitOutcome:
    """Verify every transaction, commit all, mark completed, publish offsets. Idempotent.

    ``accept`` settles a checkpoint that cannot be repaired exactly (``commit_decision.ACCEPT``)."""
    view = p.store.view(checkpoint_id)
    if view is None:
        raise CheckpointError(checkpoint_id, "does not exist; nothing to commit")
    if view.status is CheckpointStatus.ABORTED:
        assert view.aborted is not None  # what ABORTED means
        raise CheckpointError(checkpoint_id, f"was aborted earlier ({view.aborted.reason}); {view.aborted.replay_hint}")
    if view.status is CheckpointStatus.CLAIMED:
        raise CheckpointError(checkpoint_id, "is not prepared: the Spark run did not finish. The next run's plan "
                                             "fences its transactions and replays its ranges")
    if view.status is CheckpointStatus.COMPLETED:
        assert view.completed is not None  # what COMPLETED means
        log.info("checkpoint %d: already completed; nothing to commit", checkpoint_id)
        publish_end_offsets(p, view)
        return CommitOutcome(checkpoint_id, CheckpointStatus.COMPLETED, view.completed.committed, "already completed",
                             repair=view.completed.repair)
    prepared = view.prepared
    assert prepared is not None  # neither claimed, completed nor aborted: prepared
    resolved = resolve_pinned(view.claim, p.spec)  # the ids are the committables'; the cluster is the claim's
    notice = resolved.notice(Step.COMMIT)
    if notice:
        log.warning(notice)
    left_ms = time_left_ms(prepared, resolved.values.timeout_ms, p.wall_ms())
    late = late_commit_warning(checkpoint_id, left_ms, resolved.values.timeout_ms,
                               p.spec.transactions.warn_time_left_percent)
    if late:
        log.warning(late)
    budget_ms = left_ms if left_ms is not None else resolved.values.timeout_ms
    after = _await_predecessor(p, view, max(0, budget_ms - p.spec.transactions.commit_margin_ms) / 1000)
    with _claim_committer(p, resolved) as committer:
        if after.kind == ABORT:
            _abort_transactions(committer, prepared, tuple(t.transactional_id for t in prepared.transactions))
            aborted = mark_aborted(p, view, after.reason)
            raise CheckpointError(checkpoint_id, f"aborted: {after.reason}; {aborted.replay_hint}, as it does for "
                                                 f"checkpoint {view.claim.after}")
        observed = committer.describe(t.transactional_id for t in prepared.transactions)
        decision = decide_commit(prepared, observed, p.wall_ms(), p.spec.transactions.commit_margin_ms,
                                 view.claim.ranges, accept, deduplicated=p.spec.replay_of is not None)
        table = _table_step(p, view, decision)
        if table.kind is TableStepKind.ABORT_ALL:
            log.warning("checkpoint %d: %s", checkpoint_id, table.message)
            decision = replace(decision, kind=DecisionKind.ABORT, abort=tuple(t.transactional_id
                                                                             for t in prepared.transactions),
                               message=table.message)
        elif table.kind is TableStepKind.LOST:
            raise CheckpointError(checkpoint_id, table.message)
        (log.warning if decision.kind is DecisionKind.REPAIR else log.info)(
            "checkpoint %d: decision %s: %s", checkpoint_id, decision.kind.value, decision.message)
        committing = DecisionKind.COMMIT if decision.kind is DecisionKind.REPAIR and decision.commit else decision.kind
        refused = refusal(resolved, Step.COMMIT, committing,
                          transactions_deadline_ms(prepared, resolved.values.timeout_ms))
        if refused:
            raise CheckpointError(checkpoint_id, refused)
        if decision.kind is DecisionKind.RETRY_LATER:
            raise TransientError(f"checkpoint {checkpoint_id}: {decision.message}; the commit task will retry")
        if decision.kind is DecisionKind.STUCK:
            raise CheckpointError(checkpoint_id, decision.message)
        if decision.kind is DecisionKind.ABORT:
            _abort_transactions(committer, prepared, decision.abort)
            aborted = mark_aborted(p, view, decision.message)
            raise CheckpointError(checkpoint_id, f"aborted: {decision.message}; {aborted.replay_hint}; "
                                  "raise transactions.timeout_ms or shorten the schedule interval if transactions "
                                  "time out")
        repair = None
        if decision.kind is DecisionKind.REPAIR:
            # Fence first: once the checkpoint says its input goes back, nothing of these may commit.
            _abort_transactions(committer, prepared, decision.abort)
            repair = Repair({tid: decision.problems[tid] for tid in decision.abort}, decision.replay, decision.accepted,
                            decision.rerun, decision.of_tasks)
        failpoints.hit("commit.after_verify")
        _commit_transactions(committer, prepared, decision.commit)
        _await_markers(committer, checkpoint_id, decision.commit)
    failpoints.hit("commit.after_kafka_commit")
    published = _apply_table(p, view, table)
    lost = repair.lost if repair else {}
    committed = tuple(t.transactional_id for t in prepared.transactions if t.transactional_id not in lost)
    end_offsets = end_offsets_after_repair(view.claim.ranges, repair.replayed) if repair else view.claim.end_offsets
    # A user who accepted duplicates for a stuck stateful checkpoint gets all its input read again,
    # so its state must be the one it started from; otherwise the prepared state is the committed one.
    reverted = repair is not None and repair.accepted == "duplicates" and prepared.state is not None
    completed = CompletedCheckpoint(p.spec.name, checkpoint_id, now_iso(), end_offsets, committed,
                                    view.claim.topic_ids, repair,
                                    state=view.claim.state_base if reverted else prepared.state,
                                    tables=prepared.tables, iceberg_snapshot=published)
    p.store.mark_completed(completed)
    if repair:
        log.warning("checkpoint %d: completed after repair: %s", checkpoint_id, repair.told)
    else:
        log.info("checkpoint %d: completed (%d records out, %d dead-lettered, %d transactions)", checkpoint_id,
                 prepared.records_out, prepared.records_dead_lettered, len(committed))
    failpoints.hit("commit.after_completed")
    publish_end_offsets(p, CheckpointView(view.claim, prepared, completed))
    failpoints.hit("commit.after_offsets")
    tidy(p.store, checkpoint_id, p.spec.checkpoints.retain,
         completed.state is not None or p.spec.state is not None or bool(completed.tables) or bool(p.spec.tables))
    drop_staged(p, checkpoint_id + 1, before=True)  # its own branch and any an aborted checkpoint left
    return CommitOutcome(checkpoint_id, CheckpointStatus.COMPLETED, committed, decision.message, left_ms, repair)


def _table_step(p: Pipeline, view: CheckpointView, decision: CommitDecision) -> TableStep:
    """What the Iceberg sink's table does after the Kafka ``decision`` (`lockstep.iceberg.table_commit`), from what
    the table says of the checkpoint."""
    prepared = view.prepared
    assert prepared is not None  # the caller's
    staged = prepared.iceberg
    if staged is None or staged.snapshot_id is None:
        return decide_table(decision, None, None, False)
    from lockstep.iceberg.table_sink import IcebergTable

    observed = IcebergTable(staged.catalog_conn_id, staged.table).observe(p.spec.name, view.checkpoint_id, staged)
    given_back = lost_sources(decision, view.claim.ranges) if decision.kind is DecisionKind.REPAIR else frozenset()
    return decide_table(decision, staged, observed.published, observed.staged, given_back)


def _apply_table(p: Pipeline, view: CheckpointView, step: TableStep) -> int | None:
    """The table's step carried out after the Kafka transactions: the snapshot on main that holds the checkpoint's
    rows (None: it had none)."""
    prepared = view.prepared
    assert prepared is not None  # the caller's
    staged = prepared.iceberg
    if step.kind is TableStepKind.PUBLISHED:
        log.info("checkpoint %d: %s", view.checkpoint_id, step.message)
        return step.snapshot_id
    if step.kind is not TableStepKind.PUBLISH or staged is None:
        return None
    from lockstep.iceberg.table_sink import IcebergTable

    started = time.monotonic()
    snapshot = IcebergTable(staged.catalog_conn_id, staged.table).publish(p.spec.name, view.checkpoint_id, staged,
                                                                          step.files)
    log.info("checkpoint %d: %s: snapshot %d (%d rows) in %.2f s", view.checkpoint_id, step.message, snapshot,
             sum(f.records for f in step.files), time.monotonic() - started)
    failpoints.hit("commit.after_iceberg_publish")
    return snapshot


#: How often a pipelined checkpoint's commit looks at the checkpoint it was planned on top of.
PREDECESSOR_LOOK_S = 0.1


def _await_predecessor(p: Pipeline, view: CheckpointView, wait_s: float) -> Verdict:
    """A pipelined checkpoint (``claim.after``) commits after the checkpoint it was planned on top of: wait
    (at most ``wait_s``, the time its transactions have left) until that one settled, then commit or abort as
    `lockstep.rules.pipelining.verdict` says. Not pipelined: commit."""
    started = time.monotonic()
    told = False
    while True:
        found = verdict(view.claim, p.store.view(view.claim.after) if view.claim.after is not None else None)
        if found.kind != WAIT:
            if told:
                log.info("checkpoint %d: checkpoint %s settled after %.1f s", view.checkpoint_id, view.claim.after,
                         time.monotonic() - started)
            return found
        if time.monotonic() - started > wait_s:
            raise TransientError(f"checkpoint {view.checkpoint_id}: {found.reason}; a pipelined checkpoint commits "
                                 f"after the one it was planned on top of, which has not settled in {wait_s:.0f} s; "
                                 "the commit retries (its next plan recovers both, in order)")
        if not told:
            log.info("checkpoint %d: commits after checkpoint %s, which it was planned on top of: waiting (%s)",
                     view.checkpoint_id, view.claim.after, found.reason)
            told = True
        time.sleep(PREDECESSOR_LOOK_S)


def tidy(store: PipelineStore, checkpoint_id: int, retain: int, has_files: bool) -> bool:
    """After a completed checkpoint: retention, then the state and table files nothing names any more.

    Housekeeping, as Flink's subsumed-checkpoint cleanup: the checkpoint is completed and its offsets
    published, so S3 unreachable here (a transient error) fails nothing. What was not deleted stays
    garbage, which the next commit's collection finds again; the warning says so. Returns whether it
    all ran. A terminal error (a bucket policy that refuses deletes, say) is raised: every commit
    would meet it, and someone must fix it."""
    try:
        deleted = store.apply_retention(retain)
        if deleted:
            log.info("checkpoint %d: retention removed checkpoints %d-%d", checkpoint_id, deleted[0], deleted[-1])
        if has_files:
            garbage = store.collect_state_garbage()
            if garbage:
                log.info("checkpoint %d: deleted %d state files no checkpoint or savepoint names", checkpoint_id,
                         len(garbage))
    except TransientError as exc:
        log.warning("checkpoint %d: completed, but its retention and garbage collection stopped half-way: %s; "
                    "nothing is lost, the next checkpoint's commit deletes what is left", checkpoint_id, exc)
        return False
    return True


def _claim_committer(p: Pipeline, resolved: Resolved) -> Committer:
    """A committer on the cluster the checkpoint was planned for."""
    conn = resolved.values.sink_kafka_conn_id
    try:
        return p.committer(conn)
    except TerminalError as exc:
        if conn == p.spec.sink.kafka_conn_id:
            raise
        raise CheckpointError(resolved.checkpoint_id, unusable_sink(resolved.checkpoint_id, conn,
                                                                     p.spec.sink.kafka_conn_id, exc)) from exc


def _await_markers(committer: Committer, checkpoint_id: int, tids: tuple[str, ...], timeout_s: float = 60.0) -> None:
    """EndTxn answers at PrepareCommit; the markers that make records visible follow.
    Wait for CompleteCommit so "completed" means a read_committed reader sees the output."""
    deadline = time.monotonic() + timeout_s
    pending = list(tids)
    while pending:
        observed = committer.describe(pending)
        pending = [tid for tid in pending if observed[tid].state != TransactionState.COMPLETE_COMMIT]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TransientError(f"checkpoint {checkpoint_id}: transactions {', '.join(pending)} were committed but "
                                 f"their markers were not written within {timeout_s:.0f} s; the commit task will retry")
        time.sleep(0.1)




def _commit_transactions(committer: Committer, prepared: PreparedCheckpoint, tids: tuple[str, ...]) -> None:
    """EndTxn(commit) for each of ``tids``: the first alone, then the rest together, each on a thread of
    its own (at most `COMMIT_THREADS`), so a checkpoint of N transactions waits about two round trips to
    their coordinators, not N. The first goes alone so that ``commit.between_commits`` stands where a crash
    leaves a checkpoint partially committed, as the recovery tests need it. Every EndTxn is awaited
    before an error is raised: the first error, with how many others failed."""
    by_id = {t.transactional_id: t for t in prepared.transactions}

    def one(tid: str) -> None:
        t = by_id[tid]
        committer.commit(tid, t.producer_id, t.epoch)
        log.info("checkpoint %d: committed transaction %s (%d records, %d dead letters)", prepared.checkpoint_id,
                 tid, t.records, t.dead_letters)

    if not tids:
        return
    one(tids[0])
    failpoints.hit("commit.between_commits")
    errors = each_together(one, tids[1:])
    if errors:
        if len(errors) > 1:
            log.error("checkpoint %d: %d of %d commits failed; the first error follows", prepared.checkpoint_id,
                      len(errors), len(tids))
        raise errors[0]


def _abort_transactions(committer: Committer, prepared: PreparedCheckpoint, tids: tuple[str, ...]) -> None:
    """Fence rather than EndTxn(abort): it works whatever state and epoch each id is in."""
    for tid in tids:
        committer.fence(tid)
        log.warning("checkpoint %d: transaction %s aborted", prepared.checkpoint_id, tid)
