"""The checkpoint coordinator: recover, plan, commit (Flink's CheckpointCoordinator
and ``notifyCheckpointComplete``, for scheduled batch runs).

Each public function is one Airflow task and one CLI step. The decisions they act
on are pure functions in ``lockstep.rules.recovery``, ``lockstep.rules.commit_decision``,
``lockstep.rules.run_ownership`` and ``lockstep.model.offsets``; this
module only gathers facts, calls them, and carries out the result, logging every
step with the checkpoint id.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lockstep.connections import kafka_config
from lockstep.errors import CheckpointError, TerminalError, TransientError
from lockstep.kafka import broker_offsets, topics
from lockstep.model import failpoints
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CheckpointStatus,
    CheckpointView,
    CompletedCheckpoint,
    History,
)
from lockstep.model.offsets import TopicPartition, offsets_from_json
from lockstep.model.transactions import TransactionState
from lockstep.rules.commit_decision import DecisionKind, decide_commit
from lockstep.rules.pinned import Step, planned_with, prefix_changes, refusal, resolve_pinned, transactions_deadline_ms
from lockstep.rules.ranges import RangePlan, plan_ranges
from lockstep.rules.recovery import RecoveryPlan, checkpoint_scope, listing_scopes, recovery_plan, replay_hint
from lockstep.rules.run_ownership import claim_in_flight
from lockstep.rules.start_offsets import (
    TIME_PREFIX,
    OffsetSource,
    RestoreRow,
    choose_start_offsets,
    describe_dropped,
    describe_restore,
    offsets_at_time,
    parse_restore_time,
    restore_diff,
    restore_totals,
)
from lockstep.spec import PipelineSpec
from lockstep.steps.client_factory import (
    checkpoint_store,
    committer_for_connection,
    kafka_admin,
    transaction_committer,
)
from lockstep.store.checkpoint_store import CheckpointStore

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class Pipeline:
    """A spec with the clients its steps use; built once per task."""

    spec: PipelineSpec
    store: CheckpointStore
    source_admin: Any
    source_kafka: dict[str, Any]
    committer_factory: Callable[[], Any]
    wall_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    #: committers on other sink clusters, by connection id: for checkpoints planned with another
    #: ``sink.kafka_conn_id`` than the spec's current one.
    committer_for: Callable[[str], Any] = field(default=committer_for_connection)

    def committer(self, conn_id: str | None = None) -> Any:
        """A committer on the cluster of ``conn_id``; None (or the spec's own) is the spec's sink cluster."""
        if conn_id is None or conn_id == self.spec.sink.kafka_conn_id:
            return self.committer_factory()
        return self.committer_for(conn_id)

    @classmethod
    def open(cls, spec: PipelineSpec) -> Pipeline:
        source_admin = kafka_admin(spec.source.kafka_conn_id)
        if spec.sink.kafka_conn_id != spec.source.kafka_conn_id:
            kafka_admin(spec.sink.kafka_conn_id)  # refused credentials fail now, not in the committer 30 s later
        return cls(spec, checkpoint_store(spec), source_admin, kafka_config(spec.source.kafka_conn_id),
                   lambda: transaction_committer(spec))


@dataclass(frozen=True)
class Plan:
    claim: CheckpointClaim
    range_plan: RangePlan
    dry_run: bool = False
    #: with ``restore_from``: per partition, what the restore writes again (as ``lockstep restore-plan``)
    restore_rows: tuple[RestoreRow, ...] = ()

    @property
    def restore_summary(self) -> dict[str, int] | None:
        if not self.restore_rows:
            return None
        return restore_totals(self.restore_rows)

    def describe(self) -> str:
        ranges = ", ".join(str(r) for r in self.claim.ranges if not r.is_empty) or "no new records"
        return (f"checkpoint {self.claim.checkpoint_id}: {self.range_plan.total_records} records from "
                f"{self.claim.start_source}: {ranges}")


# ---- recovery ------------------------------------------------------------------------------------
class CheckpointInFlight(TransientError):
    """Another run still owns an unsettled checkpoint; planning now would recover it under that run."""


def check_in_flight(p: Pipeline, run_id: str, run_alive: Callable[[str], bool | None] | None = None,
                    history: History | None = None) -> None:
    """Refuse to plan while another live run owns a claimed or prepared checkpoint.

    ``run_alive`` lets a scheduler that knows its runs answer (Airflow: the DAG run's
    state); None from it, or no callback, falls back to ``run_ownership.claim_in_flight``.
    ``history`` is the plan's own read of the store, if it has one.
    """
    for view in (history or p.store.history()).after:
        if view.status not in (CheckpointStatus.CLAIMED, CheckpointStatus.PREPARED) or view.claim.run_id == run_id:
            continue
        owner = view.claim.run_id
        known = run_alive(owner) if run_alive else None
        if known is not None:
            why = f"its run {owner} is still running" if known else None
        else:
            claimed_ms = int(datetime.fromisoformat(view.claim.claimed_at).timestamp() * 1000)
            lease_ms = resolve_pinned(view.claim, p.spec).values.timeout_ms  # its transactions' timeout, as planned
            why = claim_in_flight(owner, claimed_ms, p.wall_ms(), lease_ms, socket.gethostname(), _pid_alive)
        if why:
            raise CheckpointInFlight(
                f"checkpoint {view.checkpoint_id} is still in flight: {why}. Runs of a pipeline must not overlap: "
                "wait for it (Airflow's plan task waits by itself) or, if that run is gone, try again later")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class RecoveryFacts:
    """What recovery decides on: the checkpoints after the latest completed one, and the open
    transactions listed under the prefixes of ``listing_scopes`` on each reachable sink cluster."""

    latest_id: int | None
    views: list[CheckpointView]
    open_here: list[str]
    open_elsewhere: dict[str, list[str]]
    scopes: dict[str | None, tuple[str, ...]]

    def plan(self, spec: PipelineSpec) -> RecoveryPlan:
        return recovery_plan(self.views, spec.transactions.id_prefix, self.open_here, self.latest_id,
                             sink_conn_id=spec.sink.kafka_conn_id, open_elsewhere=self.open_elsewhere)


def recover(p: Pipeline, history: History | None = None) -> bool:
    """Commit what was decided, abort everything else under our prefix (the restore rule).

    Each checkpoint is recovered under the prefix and on the sink cluster its claim was planned
    with; lingering transactions are also fenced under the spec's current prefix. Gather the
    facts, decide (``recovery.recovery_plan``, pure), carry it out: ``lockstep transactions
    resolve`` runs the same three steps. True if it changed anything (the history is then stale).
    """
    plan = recovery_facts(p, history).plan(p.spec)
    if not plan.is_clean:
        carry_out(p, plan)
    return not plan.is_clean


def recovery_facts(p: Pipeline, history: History | None = None) -> RecoveryFacts:
    """Read the store (unless ``history`` is a fresh read of it) and list open transactions; changes nothing."""
    history = history or p.store.history()
    latest_id, views = history.latest_id, list(history.after)
    prefix, sink_conn = p.spec.transactions.id_prefix, p.spec.sink.kafka_conn_id
    for line in prefix_changes(views, prefix).values():
        log.warning(line)
    for view in views:
        notice = resolve_pinned(view.claim, p.spec).notice(Step.RECOVERY) if view.status is CheckpointStatus.CLAIMED else None
        if notice:
            log.warning(notice)
    open_here: list[str] = []
    open_elsewhere: dict[str, list[str]] = {}
    scopes = listing_scopes(views, prefix, sink_conn)
    for cluster, prefixes in scopes.items():
        try:
            with p.committer(cluster) as committer:
                found = [tid for pre in prefixes for tid in committer.list_open(f"{pre}-")]
        except (TerminalError, TransientError) as exc:
            if cluster is None:
                raise
            views = _without_unreachable(p, views, cluster, exc)
            continue
        if cluster is None:
            open_here = found
        else:
            open_elsewhere[cluster] = found
    return RecoveryFacts(latest_id, views, open_here, open_elsewhere, scopes)


def carry_out(p: Pipeline, plan: RecoveryPlan) -> None:
    """Roll prepared checkpoints forward, fence what nothing owns, mark claimed checkpoints aborted."""
    for cid in plan.roll_forward:
        log.warning("checkpoint %d: found prepared but not completed; rolling it forward", cid)
        try:
            commit(p, cid)
        except CheckpointError as exc:
            if p.store.view(cid).status is not CheckpointStatus.ABORTED:
                raise  # e.g. stuck half-committed: planning on top of it would be wrong
            # commit() already aborted it and logged why; this run replays its ranges.
            log.error("checkpoint %d could not be rolled forward and was aborted (%s); this run replays it", cid, exc)
    for cluster, fence in [(None, plan.fence), *plan.fence_elsewhere.items()]:
        if not fence:
            continue
        where = "" if cluster is None else f" on the cluster of connection {cluster!r}, where it was planned"
        with p.committer(cluster) as committer:
            for cid, tids in fence.items():
                for tid in tids:
                    committer.fence(tid)
                log.warning("checkpoint %d: fenced %d transactional ids of failed attempts%s (%s)", cid, len(tids),
                            where, ", ".join(tids))
    for cid in plan.mark_aborted:
        view = p.store.view(cid)  # re-read: a late driver may have prepared it after all
        if view.status is CheckpointStatus.PREPARED:
            log.warning("checkpoint %d was prepared while we recovered; rolling it forward instead", cid)
            commit(p, cid)
            continue
        failure = p.store.run_failure(cid)
        _mark_aborted(p, view, f"its Spark run failed: {failure.cause}; its transactions were fenced" if failure else
                      "its run ended before the prepared metadata was written (the Spark job was killed, or its "
                      "driver or the run task died); its transactions were fenced")


def _without_unreachable(p: Pipeline, views: list[CheckpointView], cluster: str,
                         exc: Exception) -> list[CheckpointView]:
    """Leave out checkpoints planned on a sink cluster that cannot be reached through its connection.

    A claimed or prepared one cannot be settled without it: refuse (a transient failure stays
    transient). Aborted ones were fenced when they were aborted; fencing them again is only a
    precaution, so they are left out with a warning.
    """
    prefix, sink_conn = p.spec.transactions.id_prefix, p.spec.sink.kafka_conn_id
    there = [v for v in views if v.status is not CheckpointStatus.COMPLETED
             and checkpoint_scope(v, prefix, sink_conn)[0] == cluster]
    for view in there:
        if view.status in (CheckpointStatus.CLAIMED, CheckpointStatus.PREPARED):
            message = _unusable_sink(view.checkpoint_id, cluster, sink_conn, exc)
            if isinstance(exc, TransientError):
                raise TransientError(f"checkpoint {view.checkpoint_id}: {message}") from exc
            raise CheckpointError(view.checkpoint_id, message) from exc
    log.warning("checkpoint%s %s %s planned with sink.kafka_conn_id %r, which cannot be used now (%s); %s aborted "
                "already, so %s transactions are not fenced again", "s" if len(there) > 1 else "",
                ", ".join(str(v.checkpoint_id) for v in there), "were" if len(there) > 1 else "was", cluster, exc,
                "they are" if len(there) > 1 else "it is", "their" if len(there) > 1 else "its")
    return [v for v in views if v not in there]


def _unusable_sink(checkpoint_id: int, planned_conn: str, spec_conn: str, exc: Exception) -> str:
    return (f"it was planned with sink.kafka_conn_id {planned_conn!r} (the spec now says {spec_conn!r}) and its "
            f"transactions live on that cluster, but the connection cannot be used: {exc}. Define connection "
            f"{planned_conn!r} again (or restore sink.kafka_conn_id: {planned_conn}) until checkpoint {checkpoint_id} "
            "is settled")


def _claim_committer(p: Pipeline, resolved: Any) -> Any:
    """A committer on the cluster the checkpoint was planned for."""
    conn = resolved.values.sink_kafka_conn_id
    try:
        return p.committer(conn)
    except TerminalError as exc:
        if conn == p.spec.sink.kafka_conn_id:
            raise
        raise CheckpointError(resolved.checkpoint_id, _unusable_sink(resolved.checkpoint_id, conn,
                                                                     p.spec.sink.kafka_conn_id, exc)) from exc


def _mark_aborted(p: Pipeline, view: CheckpointView, reason: str) -> AbortedCheckpoint:
    latest = p.store.latest_completed()
    replay_from = f"checkpoint {latest.checkpoint_id}" if latest else "the pipeline's start offsets"
    hint = replay_hint(view.claim.ranges, replay_from)
    aborted = AbortedCheckpoint(p.spec.name, view.checkpoint_id, _now(), reason, hint)
    p.store.mark_aborted(aborted)
    log.error("checkpoint %d aborted: %s; %s", view.checkpoint_id, reason, hint)
    return aborted


# ---- plan ----------------------------------------------------------------------------------------
def plan(p: Pipeline, run_id: str, restore: str | None = None, max_records: int | None = None,
         dry_run: bool = False, run_alive: Callable[[str], bool | None] | None = None) -> Plan:
    """Recover, then fix the ranges of the next checkpoint and claim it (unless ``dry_run``)."""
    if max_records is not None and max_records < 1:
        raise TerminalError(f"a record budget of {max_records} takes nothing: give 1 or more, or none for the "
                            f"spec's {p.spec.checkpoints.max_records}")
    started = time.monotonic()
    history = p.store.history()  # the one read of the store, unless recovery changes it
    if not dry_run:
        check_in_flight(p, run_id, run_alive, history)
        if recover(p, history):
            history = p.store.history()
        failpoints.hit("plan.after_recovery")
    latest, next_id = history.latest, history.next_id
    tps = topics.partitions(p.source_admin, p.spec.source.topics)
    log_start = broker_offsets.log_start_offsets(p.source_admin, tps)
    stable_end = broker_offsets.last_stable_offsets(p.source_admin, tps)
    starts = choose_start_offsets(
        tps, log_start, stable_end, p.spec.source.auto_offset_reset,
        restore=_restore_source(p, restore, tps, stable_end, next_id),
        last_completed=OffsetSource.checkpoint(latest.checkpoint_id, offsets_from_json(latest.completed.end_offsets))
        if latest else None,
        group=OffsetSource.group(broker_offsets.group_offsets(p.source_kafka, p.spec.source.consumer_group, tps))
        if latest is None and restore is None else None,
    )
    if (dropped := describe_dropped(starts)) is not None:
        log.warning("checkpoint %d: %s", next_id, dropped)
    restore_rows: tuple[RestoreRow, ...] = ()
    if restore is not None:
        restore_rows = tuple(restore_diff(starts, _current_position(p, latest, tps), stable_end))
        log.info("checkpoint %d: restore from %s, against %s:\n%s", next_id, restore,
                 f"checkpoint {latest.checkpoint_id}" if latest else "the consumer group",
                 "\n".join(describe_restore(restore_rows)))
    budget = p.spec.checkpoints.max_records if max_records is None else max_records
    ranges = plan_ranges(starts.offsets, log_start, stable_end, budget, p.spec.checkpoints.skip_deleted_ranges)
    for tp, skipped in ranges.skipped.items():
        log.warning("checkpoint %d: skipping %d records of %s deleted by retention (skip_deleted_ranges)",
                    next_id, skipped, tp.key)
    claim = CheckpointClaim(
        pipeline=p.spec.name, checkpoint_id=next_id, run_id=run_id, claimed_at=_now(), ranges=ranges.ranges,
        start_source=starts.source, restored_from=restore,
        skipped={tp.key: n for tp, n in ranges.skipped.items()}, planned_with=planned_with(p.spec),
    )
    result = Plan(claim, ranges, dry_run, restore_rows)
    if dry_run:
        log.info("dry run, nothing claimed: %s", result.describe())
        p.store.record_dry_run(claim)
        return result
    p.store.claim(claim)
    log.info("%s (claimed in %.1f s; %d records left for later checkpoints)", result.describe(),
             time.monotonic() - started, ranges.backlog_remaining)
    failpoints.hit("plan.after_claim")
    return result


@dataclass(frozen=True)
class RestorePlan:
    """What ``restore_from`` would do now, without claiming anything (``lockstep restore-plan``)."""

    restore: str
    source: str
    latest_completed: int | None
    rows: list[RestoreRow]
    dropped: str | None

    def to_json(self) -> dict[str, Any]:
        return {"restore": self.restore, "source": self.source, "latest_completed": self.latest_completed,
                "partitions": [r.to_json() for r in self.rows], "dropped": self.dropped,
                **restore_totals(self.rows)}


def restore_plan(p: Pipeline, restore: str) -> RestorePlan:
    """Per partition: the current position (the latest completed checkpoint's ends, or the group's
    offsets before the first one), where the restore would start, and the records it would write
    again and read new. Reads only; the same source resolution as ``plan``."""
    latest = p.store.latest_completed()
    tps = topics.partitions(p.source_admin, p.spec.source.topics)
    log_start = broker_offsets.log_start_offsets(p.source_admin, tps)
    stable_end = broker_offsets.last_stable_offsets(p.source_admin, tps)
    source = _restore_source(p, restore, tps, stable_end)
    starts = choose_start_offsets(tps, log_start, stable_end, p.spec.source.auto_offset_reset, restore=source)
    return RestorePlan(restore, starts.source, latest.checkpoint_id if latest else None,
                       restore_diff(starts, _current_position(p, latest, tps), stable_end), describe_dropped(starts))


def _current_position(p: Pipeline, latest: CheckpointView | None,
                      tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """What a restore is measured against: the latest completed checkpoint's ends, or before the
    first one, the consumer group's offsets."""
    if latest is not None:
        return dict(offsets_from_json(latest.completed.end_offsets))
    return broker_offsets.group_offsets(p.source_kafka, p.spec.source.consumer_group, tps)


def _restore_source(p: Pipeline, restore: str | None, tps: list[TopicPartition] | None = None,
                    stable_end: dict[TopicPartition, int] | None = None, checkpoint_id: int | None = None
                    ) -> OffsetSource | None:
    """``checkpoint:ID`` restores from a completed checkpoint, ``time:<ISO>`` from the first record at
    or after that time in each partition, anything else names a savepoint."""
    if restore is None:
        return None
    if restore.startswith(TIME_PREFIX):
        try:
            moment = parse_restore_time(restore)
        except ValueError as exc:
            raise TerminalError(f"{exc}; trigger a new run with a valid restore_from") from exc
        found = broker_offsets.offsets_for_time(p.source_admin, list(tps or []), int(moment.timestamp() * 1000))
        source, at_end = offsets_at_time(restore, found, dict(stable_end or {}))
        if at_end:
            log.warning("checkpoint %s: restore from %s: %s have no record at or after that time; they start at "
                        "their end", checkpoint_id, restore, ", ".join(tp.key for tp in at_end))
        return source
    if restore.startswith("checkpoint:"):
        raw = restore.split(":", 1)[1]
        if not raw.isdigit():
            raise TerminalError(f"restore from {restore!r}: expected checkpoint:<id> with a numeric id; trigger a "
                                "new run with a valid restore_from")
        view = p.store.view(int(raw))
        if view is None or view.completed is None:
            status = view.status.value if view else "not found (deleted by retention?)"
            raise TerminalError(f"cannot restore from checkpoint {raw}: it is {status}; only completed checkpoints "
                                "and savepoints can be restored from: trigger a new run with restore_from naming "
                                "one (`lockstep checkpoints` lists them)")
        return OffsetSource.checkpoint(int(raw), offsets_from_json(view.completed.end_offsets))
    try:
        savepoint = p.store.get_savepoint(restore)
    except TerminalError as exc:
        raise TerminalError(f"cannot restore: {exc}; nothing was claimed. Trigger a new run with restore_from "
                            "naming an existing savepoint or checkpoint:<id> (`lockstep savepoint list` lists "
                            "them); a scheduled run restores nothing") from exc
    return OffsetSource.savepoint(savepoint.name, offsets_from_json(savepoint.end_offsets))


# ---- commit --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommitOutcome:
    checkpoint_id: int
    status: CheckpointStatus
    committed: tuple[str, ...] = ()
    message: str = ""


def commit(p: Pipeline, checkpoint_id: int) -> CommitOutcome:
    """Verify every transaction, commit all, mark completed, publish offsets. Idempotent."""
    view = p.store.view(checkpoint_id)
    if view is None:
        raise CheckpointError(checkpoint_id, "does not exist; nothing to commit")
    if view.status is CheckpointStatus.ABORTED:
        raise CheckpointError(checkpoint_id, f"was aborted earlier ({view.aborted.reason}); {view.aborted.replay_hint}")
    if view.status is CheckpointStatus.CLAIMED:
        raise CheckpointError(checkpoint_id, "is not prepared: the Spark run did not finish. The next run's plan "
                                             "fences its transactions and replays its ranges")
    if view.status is CheckpointStatus.COMPLETED:
        log.info("checkpoint %d: already completed; nothing to commit", checkpoint_id)
        _publish(p, view)
        return CommitOutcome(checkpoint_id, CheckpointStatus.COMPLETED, view.completed.committed, "already completed")
    prepared = view.prepared
    resolved = resolve_pinned(view.claim, p.spec)  # the ids are the committables'; the cluster is the claim's
    notice = resolved.notice(Step.COMMIT)
    if notice:
        log.warning(notice)
    with _claim_committer(p, resolved) as committer:
        observed = committer.describe(t.transactional_id for t in prepared.transactions)
        decision = decide_commit(prepared, observed, p.wall_ms(), p.spec.transactions.commit_margin_ms)
        log.info("checkpoint %d: decision %s: %s", checkpoint_id, decision.kind.value, decision.message)
        refused = refusal(resolved, Step.COMMIT, decision.kind,
                          transactions_deadline_ms(prepared, resolved.values.timeout_ms))
        if refused:
            raise CheckpointError(checkpoint_id, refused)
        if decision.kind is DecisionKind.RETRY_LATER:
            raise TransientError(f"checkpoint {checkpoint_id}: {decision.message}; the commit task will retry")
        if decision.kind is DecisionKind.STUCK:
            raise CheckpointError(checkpoint_id, decision.message)
        if decision.kind is DecisionKind.ABORT:
            _abort_transactions(committer, prepared, decision.abort)
            aborted = _mark_aborted(p, view, decision.message)
            raise CheckpointError(checkpoint_id, f"aborted: {decision.message}; {aborted.replay_hint}; "
                                  "raise transactions.timeout_ms or shorten the schedule interval if transactions "
                                  "time out")
        failpoints.hit("commit.after_verify")
        by_id = {t.transactional_id: t for t in prepared.transactions}
        for n, tid in enumerate(decision.commit):
            t = by_id[tid]
            committer.commit(tid, t.producer_id, t.epoch)
            log.info("checkpoint %d: committed transaction %s (%d records, %d dead letters)", checkpoint_id, tid,
                     t.records, t.dead_letters)
            if n == 0:
                failpoints.hit("commit.between_commits")
        _await_markers(committer, checkpoint_id, decision.commit)
    failpoints.hit("commit.after_kafka_commit")
    committed = tuple(t.transactional_id for t in prepared.transactions)
    completed = CompletedCheckpoint(p.spec.name, checkpoint_id, _now(), view.claim.end_offsets, committed)
    p.store.mark_completed(completed)
    log.info("checkpoint %d: completed (%d records out, %d dead-lettered, %d transactions)", checkpoint_id,
             prepared.records_out, prepared.records_dead_lettered, len(committed))
    failpoints.hit("commit.after_completed")
    _publish(p, CheckpointView(view.claim, prepared, completed))
    failpoints.hit("commit.after_offsets")
    deleted = p.store.apply_retention(p.spec.checkpoints.retain)
    if deleted:
        log.info("checkpoint %d: retention removed checkpoints %d-%d", checkpoint_id, deleted[0], deleted[-1])
    return CommitOutcome(checkpoint_id, CheckpointStatus.COMPLETED, committed, decision.message)


def _await_markers(committer: Any, checkpoint_id: int, tids: tuple[str, ...], timeout_s: float = 60.0) -> None:
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


def _abort_transactions(committer: Any, prepared: Any, tids: tuple[str, ...]) -> None:
    """Fence rather than EndTxn(abort): it works whatever state and epoch each id is in."""
    for tid in tids:
        committer.fence(tid)
        log.warning("checkpoint %d: transaction %s aborted", prepared.checkpoint_id, tid)


def _publish(p: Pipeline, view: CheckpointView) -> None:
    """Publish end offsets for lag tools; never backwards unless this checkpoint was a restore."""
    group = p.spec.source.consumer_group
    moved = resolve_pinned(view.claim, p.spec).changed("source.kafka_conn_id")
    if moved is not None:
        log.warning("checkpoint %d: not publishing its end offsets to consumer group %s: they are offsets on the "
                    "cluster of %r, and source.kafka_conn_id is now %r", view.checkpoint_id, group, moved.old,
                    moved.new)
        return
    ends = offsets_from_json(view.completed.end_offsets)
    current = broker_offsets.group_offsets(p.source_kafka, group, list(ends))
    allow_backwards = view.claim.restored_from is not None
    target: dict[TopicPartition, int] = {}
    for tp, end in ends.items():
        if tp in current and current[tp] > end and not allow_backwards:
            log.warning("checkpoint %d: group %s is at %d on %s, ahead of %d; not moving it backwards",
                        view.checkpoint_id, group, current[tp], tp.key, end)
        elif current.get(tp) != end:
            target[tp] = end
    broker_offsets.publish_offsets(p.source_kafka, group, target)
    if target:
        log.info("checkpoint %d: published offsets of %d partitions to consumer group %s", view.checkpoint_id,
                 len(target), group)
