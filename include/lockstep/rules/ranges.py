"""Where a checkpoint stops reading: the ranges of one checkpoint under its record budget (pure).
"""
from __future__ import annotations

__all__ = [
    "RangePlan", "plan_ranges", "within",
]

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lockstep.errors import DeletedRangesError, OffsetAheadError
from lockstep.model.offsets import OffsetRange, Offsets, TopicPartition, offset_of


@dataclass(frozen=True)
class RangePlan:
    """The ranges of one checkpoint (every partition, empty ones included, so end offsets carry forward)."""

    ranges: tuple[OffsetRange, ...]
    skipped: Mapping[TopicPartition, int] = field(default_factory=dict)
    total_records: int = 0
    #: offsets left below the LSO because of the record budget; the next checkpoint picks them up.
    backlog_remaining: int = 0

    @property
    def non_empty(self) -> tuple[OffsetRange, ...]:
        """The ranges that need a Spark task (and so a transaction)."""
        return tuple(r for r in self.ranges if not r.is_empty)

    @property
    def end_offsets(self) -> dict[TopicPartition, int]:
        return {r.tp: r.end for r in self.ranges}


def plan_ranges(
    starts: Offsets,
    log_start_offsets: Offsets,
    stable_end_offsets: Offsets,
    max_records: int,
    skip_deleted: bool = False,
    checkpoint_id: int | None = None,
    start_source: str | None = None,
    restoring: bool = False,
) -> RangePlan:
    """Fix `[start, end)` per partition: end is the last stable offset, capped by the record budget.

    The budget is water-filled so a hot partition cannot starve the others, and the sum of all
    ranges never exceeds `max_records`. What an even split leaves over goes round-robin, starting
    where the previous checkpoint's stopped (rotated by `checkpoint_id`), so a budget smaller than the
    number of backlogged partitions still moves each of them in turn. Records lost to retention fail the plan unless the spec
    accepts the loss (`skip_deleted`), in which case the skipped counts are returned for logging.
    """
    if max_records <= 0:
        raise ValueError(f"max_records must be > 0, got {max_records}")
    tps = sorted(starts)
    ahead = [(tp.key, starts[tp], offset_of(stable_end_offsets, tp)) for tp in tps
             if starts[tp] > offset_of(stable_end_offsets, tp)]
    if ahead:
        raise OffsetAheadError(ahead, checkpoint_id)
    deleted = [(tp.key, starts[tp], offset_of(log_start_offsets, tp)) for tp in tps
               if starts[tp] < offset_of(log_start_offsets, tp)]
    if deleted and not skip_deleted:
        raise DeletedRangesError(deleted, checkpoint_id, start_source, restoring)
    skipped = {TopicPartition.from_key(key): log_start - start for key, start, log_start in deleted}
    effective = {tp: starts[tp] + skipped.get(tp, 0) for tp in tps}
    backlog = {tp: stable_end_offsets[tp] - effective[tp] for tp in tps}
    shares = water_fill(backlog, max_records, rotation=checkpoint_id or 0)
    ranges = tuple(OffsetRange(tp.topic, tp.partition, effective[tp], effective[tp] + shares[tp]) for tp in tps)
    total = sum(shares.values())
    return RangePlan(ranges, skipped, total, sum(backlog.values()) - total)


def water_fill(backlog: Mapping[TopicPartition, int], budget: int, rotation: int = 0) -> dict[TopicPartition, int]:
    """Share `budget` across partitions: small backlogs are taken whole, the rest split evenly.

    The remainder of the even split goes one each to consecutive partitions in sorted order, from
    position ``rotation * remainder`` (wrapping around): the checkpoint's id as ``rotation`` starts each
    checkpoint where the previous one stopped. Always giving it to the first partitions would starve
    the last ones whenever the budget is smaller than the number of backlogged partitions (their
    records would come late to keyed state). Deterministic (the id is in the claim), and no two
    unsatisfied partitions differ by more than one, within a checkpoint and, while the same
    partitions stay backlogged, summed over consecutive checkpoints.
    """
    shares = {tp: 0 for tp in backlog}
    remaining = budget
    pending = sorted(backlog, key=lambda tp: (backlog[tp], tp))
    while pending:
        even = remaining // len(pending)
        if backlog[pending[0]] > even:
            break
        tp = pending.pop(0)
        shares[tp] = backlog[tp]
        remaining -= backlog[tp]
    if pending:
        even, extra = divmod(remaining, len(pending))
        ordered = sorted(pending)
        first = (rotation * extra) % len(ordered)
        for i, tp in enumerate(ordered[first:] + ordered[:first]):
            shares[tp] = even + (1 if i < extra else 0)
    return shares


def within(key: tuple[str, int, int], ranges: Sequence[OffsetRange]) -> bool:
    """Whether input record ``(topic, partition, offset)`` is in one of ``ranges``."""
    topic, partition, offset = key
    return any(r.topic == topic and r.partition == partition and r.start <= offset < r.end for r in ranges)
