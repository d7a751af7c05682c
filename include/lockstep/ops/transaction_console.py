"""``lockstep transactions``: the open transactions of a pipeline, mapped to its checkpoints, and
``resolve``, which settles them exactly as recovery does.

The I/O edge of ``lockstep.ops.open_transactions``: it lists and describes open transactions on the
clusters recovery lists (``steps.recover.recovery_facts``) plus the source cluster, reads the last
stable offsets and high watermarks of their partitions, and hands plain values to the pure rows.
``resolve`` is ``steps.recover.recover``'s three steps (facts, ``recovery.recovery_plan``,
``steps.recover.carry_out``) behind ``steps.recover.check_in_flight``; foreign transactions are only
reported.
"""
from __future__ import annotations

__all__ = [
    "look", "resolve_transactions",
]

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from lockstep.errors import TerminalError, TransientError
from lockstep.kafka import broker_offsets, topics
from lockstep.kafka.topics import TopicAdmin
from lockstep.model.checkpoint import CheckpointView
from lockstep.model.offsets import TopicPartition
from lockstep.model.transactions import TransactionObservation
from lockstep.ops import open_transactions
from lockstep.ops.open_transactions import OpenTransaction
from lockstep.rules.commit_decision import CommitDecision, decide_commit
from lockstep.rules.recovery import RecoveryPlan, checkpoint_scope
from lockstep.steps.client_factory import kafka_admin
from lockstep.steps.coordinator import CheckpointInFlight, Pipeline, RecoveryFacts, carry_out, check_in_flight, recovery_facts

log = logging.getLogger(__name__)


@dataclass
class Console:
    """What ``lockstep transactions`` shows, and what ``resolve`` would carry out."""

    facts: RecoveryFacts
    plan: RecoveryPlan
    views: dict[int, CheckpointView]
    rows: list[OpenTransaction]
    decisions: dict[int, CommitDecision] = field(default_factory=dict)
    #: clusters that could not be listed, with why (a checkpoint's old sink connection, the source cluster).
    unreachable: dict[str, str] = field(default_factory=dict)
    #: why resolve would be refused now (a run is in flight), or None.
    refused: str | None = None

    @property
    def foreign(self) -> list[OpenTransaction]:
        return [r for r in self.rows if r.foreign]

    def to_json(self) -> dict[str, object]:
        return {"transactions": [r.to_json() for r in self.rows], "unreachable": self.unreachable,
                "resolve": open_transactions.resolution(self.plan, self.views, self.decisions, self.foreign),
                "resolve_refused": self.refused}


#: The run id of someone looking: it owns no checkpoint, so every live run's claim counts as in flight.
VIEWER = "lockstep-transactions-view"


def look(p: Pipeline, run_id: str = VIEWER, accept: str | None = None) -> Console:
    """Read everything; changes nothing. ``accept``: decide as ``resolve --accept`` would."""
    history = p.store.history()
    try:
        check_in_flight(p, run_id, history=history)
        refused = None
    except CheckpointInFlight as exc:
        refused = str(exc)
    facts = recovery_facts(p, history)
    plan = facts.plan(p.spec)
    now_ms = p.wall_ms()
    spec = p.spec
    source_cluster = None if spec.source.kafka_conn_id == spec.sink.kafka_conn_id else spec.source.kafka_conn_id
    clusters = list(dict.fromkeys([*facts.scopes, source_cluster]))
    observed: dict[str | None, list[TransactionObservation]] = {}
    unreachable: dict[str, str] = {}
    for cluster in clusters:
        try:
            with p.committer(cluster) as committer:
                described = committer.describe(committer.list_open(""))
        except (TerminalError, TransientError) as exc:
            if cluster is None:
                raise
            unreachable[cluster] = str(exc)
            continue
        observed[cluster] = [o for o in described.values() if o.is_open]

    views = {v.checkpoint_id: v for v in facts.views}
    for cluster, found in observed.items():
        for o in found:
            mine = open_transactions.owner(o.transactional_id, cluster, facts.scopes)
            if mine is not None and mine[1] not in views:
                view = p.store.view(mine[1])  # completed, or older than the latest completed, or gone
                if view is not None:
                    views[mine[1]] = view

    admins: dict[str | None, TopicAdmin] = {}

    def admin(cluster: str | None) -> TopicAdmin:
        if cluster not in admins:
            conn = spec.sink.kafka_conn_id if cluster is None else cluster
            admins[cluster] = p.source_admin if conn == spec.source.kafka_conn_id else kafka_admin(conn)
        return admins[cluster]

    watched = [(source_cluster, tp) for tp in _partitions(admin(source_cluster), spec.source.topics)]
    watched += [(None, tp) for tp in _partitions(admin(None), [*spec.sink.topics, spec.sink.dead_letter_topic])]
    offsets: dict[tuple[str | None, TopicPartition], tuple[int, int]] = {}
    watch = set(watched)
    for cluster, found in observed.items():
        tps = sorted({tp for o in found for tp in o.partitions
                      if (cluster, tp) in watch or open_transactions.owner(o.transactional_id, cluster, facts.scopes)})
        if tps:
            stable = broker_offsets.last_stable_offsets(admin(cluster), tps)
            high = broker_offsets.high_watermarks(admin(cluster), tps)
            offsets.update({(cluster, tp): (stable[tp], high[tp]) for tp in tps})
    rows = open_transactions.rows(observed, facts.scopes, views, offsets, watched, plan, now_ms)
    rows = open_transactions.while_in_flight(rows, refused)
    return Console(facts, plan, views, rows, _commit_decisions(p, plan, views, now_ms, accept), unreachable,
                   refused)


def _partitions(admin: TopicAdmin, names: Iterable[str]) -> list[TopicPartition]:
    """The partitions of the topics that exist: a missing topic has no reader to hold back."""
    found: list[TopicPartition] = []
    for name in names:
        try:
            found += topics.partitions(admin, [name])
        except TerminalError as exc:
            log.warning("not watching topic %s for foreign transactions: %s", name, exc)
    return found


def _commit_decisions(p: Pipeline, plan: RecoveryPlan, views: dict[int, CheckpointView],
                      now_ms: int, accept: str | None = None) -> dict[int, CommitDecision]:
    """The decision the commit step would take now for each prepared checkpoint (it takes it again when it runs)."""
    decisions: dict[int, CommitDecision] = {}
    for cid in plan.roll_forward:
        view = views[cid]
        assert view.prepared is not None  # rolled forward: it is prepared
        cluster, _ = checkpoint_scope(view, p.spec.transactions.id_prefix, p.spec.sink.kafka_conn_id)
        with p.committer(cluster) as committer:
            observed = committer.describe(t.transactional_id for t in view.prepared.transactions)
        decisions[cid] = decide_commit(view.prepared, observed, now_ms, p.spec.transactions.commit_margin_ms,
                                       view.claim.ranges, accept, deduplicated=p.spec.replay_of is not None)
    return decisions


def resolve_transactions(p: Pipeline, run_id: str, dry_run: bool = False,
                         accept: str | None = None) -> tuple[Console, list[str]]:
    """Settle the pipeline's unsettled checkpoints and open transactions as recovery would.

    Refuses (``CheckpointInFlight``) while another run owns an unsettled checkpoint. With
    ``dry_run`` it only says what it would do. ``accept`` (``commit_decision.ACCEPT``) settles a
    checkpoint that cannot be repaired exactly. Returns the console it decided on, and per
    checkpoint what it did (or would do).
    """
    console = look(p, run_id, accept)
    if console.refused:
        raise CheckpointInFlight(console.refused)
    planned = open_transactions.resolution(console.plan, console.views, console.decisions, console.foreign)
    if dry_run or console.plan.is_clean:
        return console, planned
    carry_out(p, console.plan, accept)
    done: list[str] = []
    settled = [*console.plan.roll_forward, *console.plan.fence,
               *(cid for fence in console.plan.fence_elsewhere.values() for cid in fence), *console.plan.mark_aborted]
    for cid in dict.fromkeys(settled):
        view = p.store.view(cid)
        fenced = [t for fence in [console.plan.fence, *console.plan.fence_elsewhere.values()] for t in fence.get(cid, ())]
        what = f"fenced {len(fenced)} transactional ids; " if fenced else ""
        done.append(f"checkpoint {cid}: {what}now {view.status.value if view else 'unknown to the store'}")
    done += [f"foreign transaction {r.transactional_id}: left alone" for r in console.foreign]
    return console, done
