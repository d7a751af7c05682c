"""The recovery step, run at the start of every plan: the restore rule (commit what was
pre-committed, abort everything else under the pipeline's prefix), and the refusal to plan while
another live run owns an unsettled checkpoint.

What to do is ``lockstep.rules.recovery.recovery_plan`` (pure); this module gathers the facts and
carries the plan out.
"""
from __future__ import annotations

__all__ = [
    "CheckpointInFlight", "RecoveryFacts", "carry_out", "check_in_flight", "in_flight", "live_in_flight",
    "recovery_facts",
]

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from lockstep.errors import CheckpointError, TerminalError, TransientError
from lockstep.model.checkpoint import (
    CheckpointStatus,
    CheckpointView,
    History,
)
from lockstep.rules.pinned import Step, prefix_changes, resolve_pinned
from lockstep.rules.recovery import RecoveryPlan, checkpoint_scope, listing_scopes, recovery_plan
from lockstep.rules.run_ownership import claim_in_flight
from lockstep.spec import PipelineSpec
from lockstep.steps.commit import commit
from lockstep.steps.pipeline import Pipeline, each_together, mark_aborted, unusable_sink

log = logging.getLogger(__name__)


class CheckpointInFlight(TransientError):
    """Another run still owns an unsettled checkpoint (``checkpoint_id``); planning now would recover it under that
    run."""

    def __init__(self, message: str, checkpoint_id: int | None = None) -> None:
        super().__init__(message)
        self.checkpoint_id = checkpoint_id


def check_in_flight(p: Pipeline, run_id: str, run_alive: Callable[[str], bool | None] | None = None,
                    history: History | None = None) -> None:
    """Refuse to plan while another live run owns a claimed or prepared checkpoint (`live_in_flight`).

    ``history`` is the plan's own read of the store, if it has one.
    """
    live = live_in_flight(p, run_id, run_alive, history)
    if live:
        raise in_flight(live)


def in_flight(live: dict[int, str], why_not_on_top: str | None = None) -> CheckpointInFlight:
    """The refusal to plan while the first of ``live`` (`live_in_flight`) is in flight; ``why_not_on_top``: why
    the next checkpoint cannot be planned on top of it (`lockstep.rules.pipelining.plan_on_top`)."""
    cid, why = next(iter(live.items())) if live else (None, "")
    if why_not_on_top is None:
        return CheckpointInFlight(
            f"checkpoint {cid} is still in flight: {why}. Runs of a pipeline must not overlap: "
            "wait for it (Airflow's plan task waits by itself) or, if that run is gone, try again later", cid)
    return CheckpointInFlight(
        f"{why_not_on_top}{f' ({why})' if why else ''}: the next checkpoint waits for it (Airflow's plan task waits "
        "by itself); if that run is gone, try again later", cid)


def live_in_flight(p: Pipeline, run_id: str, run_alive: Callable[[str], bool | None] | None = None,
                   history: History | None = None) -> dict[int, str]:
    """The claimed or prepared checkpoints another live run still carries, oldest first, each with why it
    counts as live.

    ``run_alive`` lets a scheduler that knows its runs answer (Airflow: the DAG run's
    state); None from it, or no callback, falls back to ``run_ownership.claim_in_flight``.
    """
    live: dict[int, str] = {}
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
            live[view.checkpoint_id] = why
    return live


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
    #: checkpoints in flight that other live runs carry: recovery leaves them (and what waits on them) alone
    leave: tuple[int, ...] = ()

    def plan(self, spec: PipelineSpec) -> RecoveryPlan:
        return recovery_plan(self.views, spec.transactions.id_prefix, self.open_here, self.latest_id,
                             sink_conn_id=spec.sink.kafka_conn_id, open_elsewhere=self.open_elsewhere,
                             leave=self.leave)


def recover(p: Pipeline, history: History | None = None, leave: tuple[int, ...] = ()) -> bool:
    """Commit what was decided, abort everything else under our prefix (the restore rule).

    Each checkpoint is recovered under the prefix and on the sink cluster its claim was planned
    with; lingering transactions are also fenced under the spec's current prefix. Gather the
    facts, decide (``recovery.recovery_plan``, pure), carry it out: ``lockstep transactions
    resolve`` runs the same three steps. True if it changed anything (the history is then stale).
    ``leave``: checkpoints in flight that other live runs carry (`live_in_flight`), left to them.
    """
    plan = recovery_facts(p, history, leave).plan(p.spec)
    if not plan.is_clean:
        carry_out(p, plan)
    return not plan.is_clean


def recovery_facts(p: Pipeline, history: History | None = None, leave: tuple[int, ...] = ()) -> RecoveryFacts:
    """Read the store (unless ``history`` is a fresh read of it) and list open transactions; changes nothing."""
    history = history or p.store.history()
    latest_id, views = history.latest_id, [_with_write_tasks(p, v) for v in history.after]
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
    return RecoveryFacts(latest_id, views, open_here, open_elsewhere, scopes, leave)


def _with_write_tasks(p: Pipeline, view: CheckpointView) -> CheckpointView:
    """A claimed or aborted checkpoint planned with ``sink.parallelism: auto`` may have written with fewer
    tasks than the 256 its claim allows: read what its run recorded, so recovery fences only those ids."""
    planned = view.claim.planned_with
    if view.status not in (CheckpointStatus.CLAIMED, CheckpointStatus.ABORTED) or planned is None \
            or planned.sink_parallelism != "auto":
        return view
    tasks = p.store.write_tasks(view.checkpoint_id)
    return replace(view, write_tasks=tasks) if tasks is not None else view


def carry_out(p: Pipeline, plan: RecoveryPlan, accept: str | None = None) -> None:
    """Roll prepared checkpoints forward, fence what nothing owns, mark claimed checkpoints aborted.
    ``accept``: what a user accepts to settle a checkpoint that cannot be repaired exactly."""
    for cid in plan.roll_forward:
        log.warning("checkpoint %d: found prepared but not completed; rolling it forward", cid)
        try:
            commit(p, cid, accept)
        except CheckpointError as exc:
            after = p.store.view(cid)
            if after is None or after.status is not CheckpointStatus.ABORTED:
                raise  # e.g. stuck half-committed: planning on top of it would be wrong
            # commit() already aborted it and logged why; this run replays its ranges.
            log.error("checkpoint %d could not be rolled forward and was aborted (%s); this run replays it", cid, exc)
    for cluster, fence in [(None, plan.fence), *plan.fence_elsewhere.items()]:
        if not fence:
            continue
        where = "" if cluster is None else f" on the cluster of connection {cluster!r}, where it was planned"
        with p.committer(cluster) as committer:
            for cid, tids in fence.items():
                errors = each_together(committer.fence, tids)  # one producer each: they fence in parallel
                if errors:
                    raise errors[0]
                log.warning("checkpoint %d: fenced %d transactional ids of failed attempts%s (%s)", cid, len(tids),
                            where, ", ".join(tids))
    for cid in plan.mark_aborted:
        view = p.store.view(cid)  # re-read: a late driver may have prepared it after all
        assert view is not None  # recovery planned from its claim, and claims are never deleted before it settles
        if cid in plan.cascade:
            mark_aborted(p, view, f"it was planned on top of checkpoint {plan.cascade[cid]} while that one was in "
                                  "flight, and that one was aborted; its transactions were fenced")
            continue
        if view.status is CheckpointStatus.PREPARED:
            log.warning("checkpoint %d was prepared while we recovered; rolling it forward instead", cid)
            commit(p, cid)
            continue
        failure = p.store.run_failure(cid)
        mark_aborted(p, view, f"its Spark run failed: {failure.cause}; its transactions were fenced" if failure else
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
            message = unusable_sink(view.checkpoint_id, cluster, sink_conn, exc)
            if isinstance(exc, TransientError):
                raise TransientError(f"checkpoint {view.checkpoint_id}: {message}") from exc
            raise CheckpointError(view.checkpoint_id, message) from exc
    log.warning("checkpoint%s %s %s planned with sink.kafka_conn_id %r, which cannot be used now (%s); %s aborted "
                "already, so %s transactions are not fenced again", "s" if len(there) > 1 else "",
                ", ".join(str(v.checkpoint_id) for v in there), "were" if len(there) > 1 else "was", cluster, exc,
                "they are" if len(there) > 1 else "it is", "their" if len(there) > 1 else "its")
    return [v for v in views if v not in there]
