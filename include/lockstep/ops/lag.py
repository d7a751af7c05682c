"""Transaction-aware lag: where each source record stands between the broker and the sink.

A consumer-group lag tool sees one number per partition, the last stable offset minus the group's
committed offset. Lockstep knows more: of the records past the last completed checkpoint, some are
already claimed by a checkpoint whose transactions are open (read and written, but invisible to a
``read_committed`` reader until the commit), and the rest are not read yet. Per partition:

* ``committed``: the latest completed checkpoint's end offset; output of every record before it is
  committed and visible. Before the first checkpoint, the consumer group's offset (or unknown).
* ``in_flight``: records claimed by checkpoints that are claimed or prepared, not yet completed.
* ``unread``: records up to the last stable offset that no checkpoint has claimed yet.

The decisions here are pure; ``read_lag`` gathers the facts (store, broker) at the edge.
"""
from __future__ import annotations

__all__ = [
    "PartitionLag", "trigger_look",
]

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lockstep.model.checkpoint import CheckpointStatus, CheckpointView
from lockstep.model.offsets import TopicPartition, offsets_from_json

if TYPE_CHECKING:
    from lockstep.kafka.topics import TopicAdmin
    from lockstep.rules.lag_trigger import SourceLook
    from lockstep.spec import PipelineSpec
    from lockstep.store.checkpoint_store import CheckpointStore, PipelineStore

log = logging.getLogger(__name__)

#: How long the read of the oldest unread records' timestamps may take in all.
TIMESTAMP_TIMEOUT_S = 5.0
_UNSETTLED = (CheckpointStatus.CLAIMED, CheckpointStatus.PREPARED)


@dataclass(frozen=True)
class PartitionLag:
    partition: str
    committed: int | None
    #: next offset no checkpoint has claimed: ``committed`` plus the records in flight
    read_to: int | None
    in_flight: int
    unread: int | None
    last_stable: int | None
    #: the unsettled checkpoints holding records of this partition, oldest first
    in_flight_checkpoints: tuple[int, ...] = ()
    oldest_unread_at: str | None = None
    oldest_unread_age_s: float | None = None

    @property
    def not_committed(self) -> int | None:
        """Records past the committed offset: the group-lag figure (in flight + unread)."""
        return None if self.unread is None else self.in_flight + self.unread


@dataclass(frozen=True)
class InFlight:
    checkpoint_id: int
    status: str
    records: int


@dataclass(frozen=True)
class PipelineLag:
    pipeline: str
    partitions: list[PartitionLag]
    #: where ``committed`` comes from: "checkpoint N" or "consumer group G"
    committed_from: str
    last_completed: int | None = None
    last_completed_at: str | None = None
    last_completed_age_s: float | None = None
    in_flight: list[InFlight] = field(default_factory=list)

    @property
    def totals(self) -> dict[str, int | None]:
        known = all(p.unread is not None for p in self.partitions)
        return {"in_flight": sum(p.in_flight for p in self.partitions),
                "unread": sum(p.unread or 0 for p in self.partitions) if known else None}

    @property
    def oldest_unread_age_s(self) -> float | None:
        ages = [p.oldest_unread_age_s for p in self.partitions if p.oldest_unread_age_s is not None]
        return max(ages) if ages else None

    def to_json(self) -> dict[str, object]:
        doc = asdict(self)
        doc["totals"] = self.totals
        doc["oldest_unread_age_s"] = self.oldest_unread_age_s
        for row, obj in zip(doc["partitions"], self.partitions):
            row["not_committed"] = obj.not_committed
        return doc

    def gauges(self) -> dict[str, float]:
        """The figures as metric name → value, for StatsD (``lockstep.ops.metrics``); unknown ones are left out."""
        out: dict[str, float] = {"records_in_flight": self.totals["in_flight"] or 0,
                                 "checkpoints_in_flight": len(self.in_flight)}
        if self.totals["unread"] is not None:
            out["records_unread"] = self.totals["unread"]
        if self.oldest_unread_age_s is not None:
            out["oldest_unread_age_s"] = self.oldest_unread_age_s
        if self.last_completed_age_s is not None:
            out["last_completed_age_s"] = self.last_completed_age_s
        for p in self.partitions:
            tp = TopicPartition.from_key(p.partition)
            out[f"partition.{tp.topic}.{tp.partition}.records_in_flight"] = p.in_flight
            if p.unread is not None:
                out[f"partition.{tp.topic}.{tp.partition}.records_unread"] = p.unread
        return out


# ---- pure ------------------------------------------------------------------------------------------
def partition_lag(tps: Iterable[TopicPartition], committed: Mapping[TopicPartition, int],
                  unsettled: Iterable[CheckpointView], last_stable: Mapping[TopicPartition, int]) -> list[PartitionLag]:
    """One row per partition. ``unsettled`` are the claimed or prepared checkpoints after the latest
    completed one: their records are in flight, and the newest claim's end is where the next
    checkpoint reads from (a restore in flight may start behind ``committed``). A partition with
    neither a committed offset nor a claim has no figures: shown, not guessed."""
    claimed_to: dict[TopicPartition, int] = {}
    in_flight: dict[TopicPartition, int] = {}
    holders: dict[TopicPartition, list[int]] = {}
    for view in sorted(unsettled, key=lambda v: v.checkpoint_id):
        if view.status not in _UNSETTLED:
            continue
        for r in view.claim.ranges:
            claimed_to[r.tp] = r.end  # the newest claim decides where reading goes on
            if not r.is_empty:
                in_flight[r.tp] = in_flight.get(r.tp, 0) + r.count
                holders.setdefault(r.tp, []).append(view.checkpoint_id)
    rows = []
    for tp in sorted(set(tps)):
        base, stable = committed.get(tp), last_stable.get(tp)
        read_to = claimed_to.get(tp, base)
        unread = max(stable - read_to, 0) if stable is not None and read_to is not None else None
        rows.append(PartitionLag(tp.key, base, read_to, in_flight.get(tp, 0), unread, stable,
                                 tuple(holders.get(tp, ()))))
    return rows


def with_ages(rows: list[PartitionLag], timestamps_ms: Mapping[str, int], now: datetime) -> list[PartitionLag]:
    """Rows with the age of their oldest unread record, where its timestamp is known."""
    out = []
    for row in rows:
        ms = timestamps_ms.get(row.partition) if row.unread else None
        if ms is None:
            out.append(row)
            continue
        at = datetime.fromtimestamp(ms / 1000, UTC)
        out.append(replace(row, oldest_unread_at=at.isoformat(timespec="milliseconds"),
                           oldest_unread_age_s=round(max((now - at).total_seconds(), 0.0), 3)))
    return out


def pipeline_lag(pipeline: str, tps: Iterable[TopicPartition], latest: CheckpointView | None,
                 unsettled: Iterable[CheckpointView], last_stable: Mapping[TopicPartition, int],
                 group: Mapping[TopicPartition, int], group_name: str, now: datetime) -> PipelineLag:
    """The lag of a pipeline from the latest completed checkpoint (or, before one, the group's offsets).

    ``latest`` and ``unsettled`` are read one after the other: a checkpoint after ``latest`` that completed
    in between is the base instead, its records read (unread from it, not from ``latest``)."""
    views = list(unsettled)
    newer = [v for v in views if v.status is CheckpointStatus.COMPLETED and v.completed is not None
             and (latest is None or v.checkpoint_id > latest.checkpoint_id)]
    if newer:
        latest = max(newer, key=lambda v: v.checkpoint_id)
    unsettled = [v for v in views if v.status in _UNSETTLED
                 and (latest is None or v.checkpoint_id > latest.checkpoint_id)]
    if latest is not None and latest.completed is not None:
        committed = dict(offsets_from_json(latest.completed.end_offsets))
        committed_from = f"checkpoint {latest.checkpoint_id}"
        at = latest.completed.completed_at
        try:
            age = round(max((now - datetime.fromisoformat(at)).total_seconds(), 0.0), 3)
        except (TypeError, ValueError):
            age = None
    else:
        committed, committed_from, at, age = dict(group), f"consumer group {group_name}", None, None
    rows = partition_lag(tps, committed, unsettled, last_stable)
    in_flight = [InFlight(v.checkpoint_id, v.status.value, sum(r.count for r in v.claim.ranges)) for v in
                 sorted(unsettled, key=lambda v: v.checkpoint_id)]
    return PipelineLag(pipeline, rows, committed_from, latest.checkpoint_id if latest else None, at, age, in_flight)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def _n(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def describe(lag: PipelineLag) -> str:
    """The text of ``lockstep status``."""
    if lag.last_completed is not None:
        head = (f"{lag.pipeline}: committed through checkpoint {lag.last_completed} (completed "
                f"{lag.last_completed_at}, {_age(lag.last_completed_age_s)} ago)")
    else:
        head = f"{lag.pipeline}: no completed checkpoint yet; committed offsets are those of {lag.committed_from}"
    lines = [head]
    for f in lag.in_flight:
        lines.append(f"in flight: checkpoint {f.checkpoint_id} {f.status} ({f.records:,} records; their output "
                     "is invisible to read_committed readers until it commits)")
    lines.append(f"{'partition':32} {'committed':>10} {'in flight':>10} {'read to':>10} {'unread':>10} "
                 f"{'stable end':>10}  oldest unread")
    for p in lag.partitions:
        lines.append(f"{p.partition:32} {_n(p.committed):>10} {_n(p.in_flight):>10} {_n(p.read_to):>10} "
                     f"{_n(p.unread):>10} {_n(p.last_stable):>10}  {_age(p.oldest_unread_age_s)}")
    totals = lag.totals
    oldest = lag.oldest_unread_age_s
    lines.append(f"total: {_n(totals['in_flight'])} in flight, {_n(totals['unread'])} unread"
                 + (f"; oldest unread record {_age(oldest)} old" if oldest is not None else ""))
    return "\n".join(lines)


# ---- I/O at the edge -------------------------------------------------------------------------------
def read_lag(spec: PipelineSpec, store: PipelineStore | None, admin: TopicAdmin | None = None,
             now: datetime | None = None, timestamp_timeout_s: float = TIMESTAMP_TIMEOUT_S,
             list_partitions: Callable[[TopicAdmin, Iterable[str]], list[TopicPartition]] | None = None,
             ages: bool = True) -> PipelineLag:
    """Read the facts and compute the lag. ``store`` is the pipeline's ``CheckpointStore``; without
    one (None), the committed offsets are the consumer group's. ``ages=False`` leaves out the oldest
    unread records' ages (a consumer's read: the lag watcher, which looks every few seconds, needs no ages)."""
    from lockstep.connections import kafka_config
    from lockstep.kafka.reader import record_timestamps
    from lockstep.steps.client_factory import kafka_admin

    now = now or datetime.now(UTC)
    config = kafka_config(spec.source.kafka_conn_id)
    admin = admin or kafka_admin(spec.source.kafka_conn_id)
    result, _, _ = _read(spec, store, admin, now, list_partitions)
    if not ages:
        return result
    try:
        stamps = record_timestamps(config, {p.partition: p.read_to for p in result.partitions
                                            if p.unread and p.read_to is not None}, timestamp_timeout_s)
    except Exception as exc:  # noqa: BLE001 - the ages are extra: without them the lag still stands
        log.info("ages of the oldest unread records not read: %s", exc)
        stamps = {}
    return replace(result, partitions=with_ages(result.partitions, stamps, now))


def _read(spec: PipelineSpec, store: PipelineStore | None, admin: TopicAdmin, now: datetime,
          list_partitions: Callable[[TopicAdmin, Iterable[str]], list[TopicPartition]] | None = None,
          read_first: tuple[list[TopicPartition], Mapping[TopicPartition, int]] | None = None,
          ) -> tuple[PipelineLag, list[CheckpointView], CheckpointView | None]:
    """The lag without ages, the checkpoints after the latest completed one it was computed from, and that one.
    ``read_first``: the partitions and their last stable offsets, read before the store (a record counted
    unread then existed before any checkpoint the store shows could have claimed it)."""
    from lockstep.connections import kafka_config
    from lockstep.kafka import broker_offsets, topics

    tps = read_first[0] if read_first is not None else (list_partitions or topics.partitions)(admin, spec.source.topics)
    latest = store.latest_completed() if store is not None else None
    unsettled = store.views_after(latest.checkpoint_id if latest else None) if store is not None else []
    stable = read_first[1] if read_first is not None else broker_offsets.last_stable_offsets(admin, tps)
    group = broker_offsets.group_offsets(kafka_config(spec.source.kafka_conn_id), spec.source.consumer_group,
                                         tps) if latest is None else {}
    lag = pipeline_lag(spec.name, tps, latest, unsettled, stable, group, spec.source.consumer_group, now)
    return lag, unsettled, latest


def trigger_look(spec: PipelineSpec, store: CheckpointStore, admin: TopicAdmin | None = None,
                 now: datetime | None = None,
                 read_first: tuple[list[TopicPartition], Mapping[TopicPartition, int]] | None = None) -> SourceLook:
    """What the lag watcher decides on (``lockstep.rules.lag_trigger``): the unread records, the newest
    checkpoint, how long the one in flight (if any) has been, and how long since one completed.

    All from one read of the store: the unread records and the newest checkpoint must describe the same
    moment. Read again, a checkpoint claimed and completed while the broker was asked for its offsets was
    the newest while the records it read still counted as unread, and the watcher fired a second run for
    records already committed (seen in a fresh clone's `make test` on a loaded machine).

    ``read_first``: the source's partitions and last stable offsets the watcher read before the store
    (`lockstep.rules.lag_trigger.still_quiet` decides on them); otherwise they are read here."""
    from lockstep.rules.lag_trigger import SourceLook
    from lockstep.steps.client_factory import kafka_admin

    now = now or datetime.now(UTC)
    lag, views, latest = _read(spec, store, admin or kafka_admin(spec.source.kafka_conn_id), now, read_first=read_first)
    newest = max([v.checkpoint_id for v in views] + ([lag.last_completed] if lag.last_completed else []),
                 default=None)
    flying = [v for v in views if v.status in _UNSETTLED
              and (lag.last_completed is None or v.checkpoint_id > lag.last_completed)]
    in_flight_age = (now - datetime.fromisoformat(flying[-1].claim.claimed_at)).total_seconds() if flying else None
    return SourceLook(unread=lag.totals["unread"], newest_checkpoint=newest, in_flight_age_s=in_flight_age,
                      since_completed_s=lag.last_completed_age_s,
                      timers_due_in_s=_timers_due_in_s(spec, store, lag, now),
                      since_started_s=_since_started_s(latest, views, now))


def _since_started_s(latest: CheckpointView | None, views: list[CheckpointView], now: datetime) -> float | None:
    """Seconds since the newest checkpoint was claimed: the newest of those after the latest completed one (in
    flight, aborted or empty), else the latest completed one; None before the first."""
    newest = max(views, key=lambda v: v.checkpoint_id, default=None) or latest
    if newest is None:
        return None
    return (now - datetime.fromisoformat(newest.claim.claimed_at)).total_seconds()


def _timers_due_in_s(spec: PipelineSpec, store: CheckpointStore, lag: PipelineLag, now: datetime) -> float | None:
    """Seconds until a checkpoint without records would fire the committed state's earliest timer
    (``state.event_time.idle_advance``; negative once due), or None when none would."""
    from lockstep.rules.watermarks import idle_due_at

    state = spec.state
    if state is None or not state.event_time.idle_advance or state.dedup is not None or lag.last_completed is None:
        return None
    latest = store.latest_completed()
    manifest = latest.completed.state if latest is not None and latest.completed is not None else None
    due = idle_due_at(manifest, [p.partition for p in lag.partitions], state.event_time.out_of_orderness_ms,
                      state.event_time.idle_timeout_ms)
    return None if due is None else due / 1000 - now.timestamp()
