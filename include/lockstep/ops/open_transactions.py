"""Open transactions of a pipeline, mapped to its checkpoints (``lockstep transactions``).

Pure: the console gathers observations (ListTransactions + DescribeTransactions), the checkpoint
views of the store and the partitions' offsets, and these functions turn them into rows, and a
recovery plan into the words of what ``resolve`` would do. Which transactions are the pipeline's
is decided as recovery decides it: an id made by ``transactional_ids.transactional_id`` under one of the
prefixes ``recovery.listing_scopes`` lists. Every other open transaction is *foreign*; it is shown
only when it holds back readers of the pipeline's partitions, and never touched.
"""
from __future__ import annotations

__all__ = [
    "duration", "table",
]

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TypedDict

from lockstep.model.checkpoint import CheckpointView
from lockstep.model.offsets import TopicPartition
from lockstep.model.transactional_ids import parse_transactional_id
from lockstep.model.transactions import TransactionObservation, TransactionState
from lockstep.rules.commit_decision import CommitDecision, DecisionKind
from lockstep.rules.recovery import RecoveryPlan

COMMIT, FENCE, LEAVE, FOREIGN = "commit", "fence", "leave", "none (foreign)"
IN_FLIGHT = "none now (a run is in flight)"


@dataclass(frozen=True)
class PartitionHold:
    """One partition an open transaction wrote to; ``held_back`` = high watermark - last stable offset."""

    partition: str
    last_stable: int | None
    high_watermark: int | None

    @property
    def held_back(self) -> int | None:
        if self.last_stable is None or self.high_watermark is None:
            return None
        return self.high_watermark - self.last_stable

    @property
    def pinned(self) -> bool:
        """read_committed readers stop at the LSO: records above it wait for this (or an older) transaction."""
        return bool(self.held_back and self.held_back > 0)

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "held_back": self.held_back, "pinned": self.pinned}


@dataclass(frozen=True)
class OpenTransaction:
    """A row of the console: an open transaction, whose checkpoint it is, and what resolve would do."""

    transactional_id: str
    cluster: str | None
    foreign: bool
    checkpoint_id: int | None
    task_index: int | None
    #: claimed / prepared / aborted / completed, "unknown" when the store has no such checkpoint; None if foreign.
    checkpoint_status: str | None
    run_id: str | None
    state: TransactionState
    producer_id: int
    epoch: int
    age_ms: int | None
    time_left_ms: int | None
    partitions: tuple[PartitionHold, ...]
    action: str

    @property
    def pinned(self) -> tuple[PartitionHold, ...]:
        return tuple(h for h in self.partitions if h.pinned)

    @property
    def held_back(self) -> int:
        return sum(h.held_back or 0 for h in self.pinned)

    def to_json(self) -> dict[str, object]:
        doc = {k: v for k, v in asdict(self).items() if k != "partitions"}
        return {**doc, "partitions": [h.to_json() for h in self.partitions], "held_back": self.held_back}


class _Observed(TypedDict):
    """The fields of an `OpenTransaction` that come from its observation, ours or foreign."""

    transactional_id: str
    cluster: str | None
    state: TransactionState
    producer_id: int
    epoch: int
    age_ms: int | None
    time_left_ms: int | None
    partitions: tuple[PartitionHold, ...]


def age_ms(o: TransactionObservation, now_ms: int) -> int | None:
    return now_ms - o.start_time_ms if o.start_time_ms >= 0 else None


def observed_time_left_ms(o: TransactionObservation, now_ms: int) -> int | None:
    """Start + timeout - now: how long until the broker aborts it (negative: overdue, it will shortly)."""
    if o.start_time_ms < 0 or o.timeout_ms < 0:
        return None
    return o.start_time_ms + o.timeout_ms - now_ms


def owner(tid: str, cluster: str | None, scopes: Mapping[str | None, Sequence[str]]) -> tuple[str, int, int] | None:
    """(prefix, checkpoint, task) if ``tid`` is one of the pipeline's ids on ``cluster``, else None (foreign)."""
    for prefix in scopes.get(cluster, ()):
        parsed = parse_transactional_id(prefix, tid)
        if parsed is not None:
            return prefix, parsed.checkpoint_id, parsed.task_index
    return None


def planned_action(tid: str, cluster: str | None, checkpoint_id: int, plan: RecoveryPlan,
                   views: Mapping[int, CheckpointView]) -> str:
    """What ``resolve`` (recovery) does with one of the pipeline's open transactions."""
    fence = plan.fence if cluster is None else plan.fence_elsewhere.get(cluster, {})
    if tid in fence.get(checkpoint_id, ()):
        return FENCE
    view = views.get(checkpoint_id)
    if checkpoint_id in plan.roll_forward and view is not None and view.prepared is not None \
            and tid in {t.transactional_id for t in view.prepared.transactions}:
        return COMMIT
    return LEAVE


def rows(observed: Mapping[str | None, Sequence[TransactionObservation]], scopes: Mapping[str | None, Sequence[str]],
         views: Mapping[int, CheckpointView], offsets: Mapping[tuple[str | None, TopicPartition], tuple[int, int]],
         watched: Iterable[tuple[str | None, TopicPartition]], plan: RecoveryPlan, now_ms: int) -> list[OpenTransaction]:
    """The pipeline's open transactions (oldest checkpoint first), then foreign ones that hold back its partitions.

    ``observed``: open transactions per cluster (None: the spec's sink cluster, else a connection id), as
    DescribeTransactions reports them with their partitions; ``offsets``: (last stable offset, high watermark) per
    (cluster, partition); ``watched``: the pipeline's source, sink and dead-letter partitions per cluster.
    A foreign transaction is listed when it wrote to a watched partition, showing only those.
    """
    watch = set(watched)
    ours: list[OpenTransaction] = []
    foreign: list[OpenTransaction] = []
    for cluster, found in observed.items():
        for o in found:
            mine = owner(o.transactional_id, cluster, scopes)
            tps = o.partitions if mine else tuple(tp for tp in o.partitions if (cluster, tp) in watch)
            if not mine and not tps:
                continue
            holds = tuple(PartitionHold(tp.key, *offsets.get((cluster, tp), (None, None))) for tp in tps)
            common = _Observed(transactional_id=o.transactional_id, cluster=cluster, state=o.state,
                               producer_id=o.producer_id, epoch=o.epoch, age_ms=age_ms(o, now_ms),
                               time_left_ms=observed_time_left_ms(o, now_ms), partitions=holds)
            if mine is None:
                foreign.append(OpenTransaction(**common, foreign=True, checkpoint_id=None, task_index=None,
                                               checkpoint_status=None, run_id=None, action=FOREIGN))
                continue
            _, cid, task = mine
            view = views.get(cid)
            ours.append(OpenTransaction(
                **common, foreign=False, checkpoint_id=cid, task_index=task,
                checkpoint_status=view.status.value if view else "unknown", run_id=view.claim.run_id if view else None,
                action=planned_action(o.transactional_id, cluster, cid, plan, views)))
    ours.sort(key=lambda r: (r.checkpoint_id, r.task_index, r.transactional_id))
    foreign.sort(key=lambda r: r.transactional_id)
    return ours + foreign


def while_in_flight(found: Sequence[OpenTransaction], refused: str | None) -> list[OpenTransaction]:
    """Resolve is refused while a run is in flight (``steps.recover.check_in_flight``): it would do nothing."""
    if refused is None:
        return list(found)
    return [r if r.foreign else replace(r, action=IN_FLIGHT) for r in found]


# ---- words -------------------------------------------------------------------------------------
def duration(ms: int | None) -> str:
    """12345 -> '12 s', 754000 -> '12 min 34 s'; negative: 'overdue 3 s'; None: '–'."""
    if ms is None:
        return "–"
    if ms < 0:
        return f"overdue {duration(-ms)}"
    s = ms // 1000
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _where(cluster: str | None) -> str:
    return "" if cluster is None else f" on the cluster of connection {cluster!r}"


def table(found: Sequence[OpenTransaction]) -> list[str]:
    """The console's text: one line per transaction and one per partition it holds back."""
    if not found:
        return ["no open transactions of this pipeline, and none holding back its partitions"]
    lines = [f"{'transaction':32} {'checkpoint':>10} {'status':9} {'task':>4} {'state':13} {'pid/epoch':>10} "
             f"{'age':>12} {'time left':>12}  resolve"]
    for r in found:
        cid = "foreign" if r.foreign else str(r.checkpoint_id)
        task = "–" if r.task_index is None else str(r.task_index)
        lines.append(f"{r.transactional_id + _where(r.cluster):32} {cid:>10} {r.checkpoint_status or '–':9} {task:>4} "
                     f"{r.state:13} {f'{r.producer_id}/{r.epoch}':>10} {duration(r.age_ms):>12} "
                     f"{duration(r.time_left_ms):>12}  {r.action}")
        if r.run_id:
            lines.append(f"    run {r.run_id}")
        for h in r.partitions:
            held = ("–" if h.held_back is None else
                    f"pins LSO {h.last_stable}, holds back {h.held_back} records (high watermark {h.high_watermark})"
                    if h.pinned else f"not pinning (LSO {h.last_stable} = high watermark)")
            lines.append(f"    {h.partition}: {held}")
    ours = [r for r in found if not r.foreign]
    others = [r for r in found if r.foreign]
    lines.append(f"{len(ours)} open transaction{'s' if len(ours) != 1 else ''} of this pipeline, "
                 f"{len(others)} foreign one{'s' if len(others) != 1 else ''} holding back its partitions"
                 + (" (reported only: resolve never touches them)" if others else ""))
    return lines


def resolution(plan: RecoveryPlan, views: Mapping[int, CheckpointView], decisions: Mapping[int, CommitDecision],
               foreign: Sequence[OpenTransaction] = ()) -> list[str]:
    """What ``resolve`` would do, per checkpoint, in the order recovery does it (``--dry-run``).

    ``decisions``: the commit decision each prepared checkpoint gets now (``commit_decision.decide_commit``);
    commit takes it again when it runs, so a transaction that times out meanwhile still aborts it.
    """
    lines: list[str] = []
    for cid in plan.roll_forward:
        d = decisions.get(cid)
        head = f"checkpoint {cid} (prepared{_run(views, cid)}): roll forward"
        if d is None:
            lines.append(f"{head}: commit step decides when it runs")
        elif d.kind is DecisionKind.COMMIT:
            lines.append(f"{head}: commit {', '.join(d.commit)}, then mark it completed and publish its offsets")
        elif d.kind in (DecisionKind.ALREADY_COMMITTED, DecisionKind.NOTHING_TO_COMMIT):
            lines.append(f"{head}: {d.message}; mark it completed and publish its offsets")
        elif d.kind is DecisionKind.ABORT:
            lines.append(f"{head} fails: {d.message}; fence its transactions and mark it aborted")
        elif d.kind is DecisionKind.REPAIR:
            lines.append(f"{head}: {d.message}; mark it completed after repair and publish its offsets")
        else:
            lines.append(f"{head} is refused now ({d.kind.value}): {d.message}")
    for cluster, fence in [(None, plan.fence), *plan.fence_elsewhere.items()]:
        for cid, tids in fence.items():
            view = views.get(cid)
            status = view.status.value if view else "unknown to the store"
            lines.append(f"checkpoint {cid} ({status}{_run(views, cid)}): fence {', '.join(tids)}{_where(cluster)}")
    for cid in plan.mark_aborted:
        lines.append(f"checkpoint {cid} (claimed{_run(views, cid)}): mark it aborted; the next run replays its ranges")
    for r in foreign:
        lines.append(f"foreign transaction {r.transactional_id}{_where(r.cluster)}: left alone (not this pipeline's)")
    if plan.is_clean:
        lines.insert(0, "nothing to resolve: no unsettled checkpoint and no open transaction of this pipeline")
    return lines


def _run(views: Mapping[int, CheckpointView], cid: int) -> str:
    view = views.get(cid)
    return f", run {view.claim.run_id}" if view else ""
