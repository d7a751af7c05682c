"""What recovery does before a plan, from the store's history and the open transactions (pure).

The restore rule, as Flink's ``initializeState`` applies it: roll decided checkpoints forward, fence every
transactional id no prepared checkpoint owns, under the prefix and on the sink cluster each
checkpoint was planned with (the fencing invariant), mark dead claims aborted with a replay hint.
"""
from __future__ import annotations

__all__ = [
    "RecoveryPlan", "checkpoint_scope", "listing_scopes", "recovery_plan", "replay_hint",
]

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lockstep.model.checkpoint import CheckpointStatus, CheckpointView
from lockstep.model.offsets import OffsetRange
from lockstep.model.transactional_ids import parse_transactional_id, transactional_id


@dataclass(frozen=True)
class RecoveryPlan:
    """What plan must do before claiming a new checkpoint (the restore rule)."""

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
    #: prepared pipelined checkpoints to abort with the aborted checkpoint they were planned on top of (by id:
    #: that one's id, `lockstep.rules.pipelining`); each is also in ``mark_aborted``, and its prepared
    #: transactions in ``fence``.
    cascade: Mapping[int, int] = field(default_factory=dict)

    @property
    def is_clean(self) -> bool:
        return not (self.roll_forward or self.mark_aborted or self.fence or self.fence_elsewhere)


#: Where a checkpoint's transactions live: (sink connection id, or None for the spec's; id prefix).
Scope = tuple["str | None", str]

#: The statuses whose transactions recovery settles: in flight (claimed: fenced; prepared: rolled forward) or
#: aborted (its transactions may still linger on the broker, and are fenced).
_TO_RECOVER = (CheckpointStatus.CLAIMED, CheckpointStatus.PREPARED, CheckpointStatus.ABORTED)


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
        if view.status in _TO_RECOVER:
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
    leave: Iterable[int] = (),
) -> RecoveryPlan:
    """Commit what was decided, abort everything else under our prefix.

    `views` are the checkpoints newer than the latest completed one. Ids of a checkpoint are derived
    from its claim and run (`CheckpointView.fence_task_count`: the tasks its run recorded, else one per
    non-empty range up to the claim's `sink.parallelism`), under the prefix its claim was planned with
    (`checkpoint_scope`); `open_transactional_ids` (seen on the spec's sink cluster under the prefixes of
    `listing_scopes`) adds ids a higher past parallelism used, and `open_elsewhere` the same seen on
    other clusters, per sink connection id. Under the spec's current prefix every open id that no
    prepared checkpoint owns is fenced; under a prefix or cluster the spec has since left, only ids of
    the unsettled checkpoints planned there, so a prefix given up and reused by another pipeline is not
    swept. Fencing is idempotent, so aborted checkpoints are fenced again rather than trusting that the
    earlier fencing happened.

    ``leave``: checkpoints in flight that other live runs still carry. They are not recovered, nor is a
    pipelined checkpoint planned on top of one of them (its commit waits for it), and their ids are not
    fenced. A prepared pipelined checkpoint whose predecessor is aborted is aborted with it (``cascade``): its
    output depends on that predecessor's ranges being committed first. (It was planned on top of a prepared
    one, which never goes back to claimed; a prepared predecessor rolled forward here and aborted by its
    commit aborts it at its own commit, `lockstep.rules.pipelining.verdict`.)
    """
    current: Scope = (None, id_prefix)
    fence: dict[str | None, dict[int, set[str]]] = {}
    planned_in: dict[Scope, set[int]] = {current: set()}
    roll_forward: list[int] = []
    mark_aborted: list[int] = []
    keep: set[tuple[str | None, str]] = set()
    held = set(leave)
    cascade: dict[int, int] = {}
    aborted = {v.checkpoint_id for v in views if v.status is CheckpointStatus.ABORTED}
    for view in sorted(views, key=lambda v: v.checkpoint_id):
        cid = view.checkpoint_id
        if view.status not in _TO_RECOVER:
            continue
        after = view.claim.after
        if cid in held or (after in held and view.status is not CheckpointStatus.ABORTED):
            held.add(cid)
            continue
        cluster, prefix = scope = checkpoint_scope(view, id_prefix, sink_conn_id)
        planned_in.setdefault(scope, set()).add(cid)
        if view.status is CheckpointStatus.PREPARED and after is not None and after in aborted:
            assert view.prepared is not None  # status PREPARED: its prepared document was read
            cascade[cid] = after
            mark_aborted.append(cid)
            fence.setdefault(cluster, {}).setdefault(cid, set()).update(t.transactional_id for t in view.prepared.transactions)
        elif view.status is CheckpointStatus.PREPARED:
            roll_forward.append(cid)
            assert view.prepared is not None  # status PREPARED: its prepared document was read
            keep.update((cluster, t.transactional_id) for t in view.prepared.transactions)
        else:
            if view.status is CheckpointStatus.CLAIMED:
                mark_aborted.append(cid)
            fence.setdefault(cluster, {}).setdefault(cid, set()).update(
                transactional_id(prefix, cid, i) for i in range(view.fence_task_count))
    seen_open: list[tuple[str | None, str]] = [(None, tid) for tid in open_transactional_ids]
    seen_open += [(conn, tid) for conn, tids in (open_elsewhere or {}).items() for tid in tids if conn != sink_conn_id]
    for cluster, tid in seen_open:
        if (cluster, tid) in keep:
            continue
        for (where, prefix), cids in planned_in.items():
            parsed = parse_transactional_id(prefix, tid) if where == cluster else None
            if parsed is not None and parsed.checkpoint_id in held:
                break  # a live run's: it is still writing or committing it
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
        fence_elsewhere={conn: ids for conn, ids in sorted(by_cluster.items()) if conn is not None and ids},
        cascade=cascade,
    )


def _task_order(tid: str) -> tuple[int, str]:
    tail = tid.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else -1, tid)


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
