"""The state manifest's bookkeeping (pure): each key group's figures after a checkpoint wrote it, and
the manifest's totals, so that a checkpoint that reads only some groups still knows the figures of all.

The run (`lockstep.spark.keyed_state`) counts the rows it wrote and removed (their keys, rows and pending
timers, with `lockstep.store.state_chain`); here they become the group's new figures, whether the group
got a delta on its chain or a new base.
"""
from __future__ import annotations

__all__ = [
    "Figures", "after_delta", "as_base", "manifest", "pack_shares",
]

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockstep.model.state_manifest import GroupState, PartitionTime, StateManifest


@dataclass(frozen=True)
class Figures:
    """Keys, rows and pending timers (and the earliest) of some state rows of one group."""

    keys: int = 0
    rows: int = 0
    timers: int = 0
    next_timer_ms: int | None = None


def after_delta(old: GroupState, replaced: Figures, written: Figures, file_bytes: tuple[int, ...],
                digests: tuple[str, ...], delta_bytes: int, delta_digest: str) -> GroupState:
    """A group whose chain (``file_bytes``/``digests``, after any merge of its newest deltas) gets a delta
    of ``delta_bytes``: the rows of the keys it touched (``replaced``, as they were) give way to their new
    rows (``written``). The earliest timer stays the older one's when that is earlier: early, never late
    (a timer since removed only makes the group read whole once more)."""
    nexts = [t for t in (old.next_timer_ms, written.next_timer_ms) if t is not None]
    return GroupState(keys=old.keys - replaced.keys + written.keys, rows=old.rows - replaced.rows + written.rows,
                      file_bytes=(*file_bytes, delta_bytes), timers=old.timers - replaced.timers + written.timers,
                      next_timer_ms=min(nexts) if nexts else None,
                      # digests stay known only if every file's was (a chain from before digests had none)
                      digests=(*digests, delta_digest) if len(digests) == len(file_bytes) else ())


def pack_shares(pack_bytes: int, rows: Sequence[int]) -> list[int]:
    """Each group's share of a pack of deltas of ``pack_bytes`` (`lockstep.store.state_chain.packed`), by
    its rows in it: what the group's chain records as the delta's size (what compaction weighs against its
    base), the shares summing to the pack's size so that the manifest's bytes are the files' bytes."""
    total = sum(rows)
    if not rows:
        return []
    if total <= 0:
        shares = [0] * len(rows)
    else:
        shares = [pack_bytes * n // total for n in rows]
    shares[-1] += pack_bytes - sum(shares)
    return shares


def as_base(whole: Figures, base_bytes: int, base_digest: str) -> GroupState:
    """A group written whole, as a new base."""
    return GroupState(keys=whole.keys, rows=whole.rows, file_bytes=(base_bytes,), timers=whole.timers,
                      next_timer_ms=whole.next_timer_ms, digests=(base_digest,))


def manifest(operator: str, key_groups: int, written_by: int, files: Mapping[int, tuple[str, ...]],
             groups: Mapping[int, GroupState], columns: Mapping[str, str], watermark_ms: int | None,
             partitions: Mapping[str, PartitionTime], schema_version: int,
             shape: Mapping[str, object] | None = None) -> StateManifest:
    """The manifest naming ``files``, its totals summed from the groups' figures."""
    nexts = [g.next_timer_ms for g in groups.values() if g.next_timer_ms is not None]
    return StateManifest(
        operator=operator, key_groups=key_groups, written_by=written_by, files=dict(files), columns=dict(columns),
        watermark_ms=watermark_ms, partitions=dict(partitions), keys=sum(g.keys for g in groups.values()),
        rows=sum(g.rows for g in groups.values()), bytes=sum(sum(g.file_bytes) for g in groups.values()),
        timers=sum(g.timers for g in groups.values()), next_timer_ms=min(nexts) if nexts else None,
        schema_version=schema_version, groups=dict(groups), shape=dict(shape or {}))
