"""Which records of a table's topic a checkpoint reads, and when a table's chain of files is compacted
(pure): the plan pins them (`lockstep.steps.plan`), the run carries them out (`lockstep.tables.materialize`).

A table's version moves only with the checkpoints that read source records: a checkpoint without
records joins nothing, so it reads none of the table's topic and carries its base forward. A
checkpoint that reads records reads the table's topic from where its base ends up to the last stable
offsets when planned, so every record it joins meets the table as the topic stood then.

Records of the topic that retention deleted before any checkpoint read them are refused like a source
range's (`lockstep.rules.ranges`): the table would silently miss their keys' updates. With
``checkpoints.skip_deleted_ranges`` the pin starts at the log start instead and records what it skipped.
"""
from __future__ import annotations

__all__ = [
    "TABLE_COMPACTION", "compact_table", "reused_table_pin", "table_pin",
]

from collections.abc import Mapping
from dataclasses import replace

from lockstep.errors import TerminalError
from lockstep.model.offsets import OffsetRange
from lockstep.rules.compaction import Compaction, compaction_due
from lockstep.spec import CompactionPolicy
from lockstep.tables.pins import TablePin, TableVersion

#: When a table's deltas are merged into a new base: the keyed state's defaults.
TABLE_COMPACTION = CompactionPolicy()


def table_pin(name: str, topic: str, base: TableVersion | None, log_start: Mapping[int, int],
              stable_end: Mapping[int, int], reads: bool, checkpoint_id: int,
              skip_deleted: bool = False) -> TablePin:
    """What checkpoint ``checkpoint_id`` pins of table ``name``: ``base``, and per partition of the
    topic the offsets from where ``base`` ends (the log start without a base, or for a partition it
    does not know) up to ``stable_end``, or nothing when the checkpoint reads no source records
    (``reads``). A base of another topic starts over from the log start.

    A base that ends after the topic's last stable offset means the topic was deleted and created
    again (or truncated): the table's rows are not the topic's any more, and the plan refuses. A base
    that ends before the log start lost records to retention: refused (`_gaps`), unless ``skip_deleted``."""
    if base is not None and base.topic != topic:
        base = None  # the spec reads another topic under this name now: a new table
    ranges = []
    for partition in sorted(stable_end):
        end = stable_end[partition]
        start = base.ends.get(partition) if base is not None else None
        if start is None:
            start = log_start.get(partition, 0)
        if start > end:
            raise TerminalError(
                f"checkpoint {checkpoint_id}: table {name}: its version of checkpoint {base.written_by if base else '-'} "
                f"holds {topic}:{partition} up to offset {start}, but the topic now ends at {end}: it was deleted "
                f"and created again. Rebuild the table from the new topic by renaming it in the spec (tables.<name>)")
        ranges.append(OffsetRange(topic, partition, start, end if reads else start))
    return _gaps(TablePin(name, base, tuple(ranges)), log_start, skip_deleted, checkpoint_id)


def reused_table_pin(pin: TablePin, log_start: Mapping[int, int], stable_end: Mapping[int, int], skip_deleted: bool,
                     checkpoint_id: int, replays: int) -> TablePin:
    """An aborted checkpoint's pin, which checkpoint ``checkpoint_id`` replays (`lockstep.rules.replay`):
    the same version, its records checked against the topic's log start now (`_gaps`): retention may have
    deleted some since the aborted checkpoint was planned. A topic that now ends before the pinned offsets
    was deleted and created again: refused, as `table_pin` refuses it."""
    for r in pin.ranges:
        if r.end > stable_end.get(r.partition, 0):
            raise TerminalError(
                f"checkpoint {checkpoint_id}: table {pin.name}: aborted checkpoint {replays} pinned {r.topic}:"
                f"{r.partition} up to offset {r.end}, but the topic now ends at {stable_end.get(r.partition, 0)}: "
                "it was deleted and created again. Rebuild the table from the new topic by renaming it in the spec "
                "(tables.<name>)")
    earlier = pin.earlier if replays in pin.earlier else (*pin.earlier, replays)
    return _gaps(replace(pin, earlier=earlier), log_start, skip_deleted, checkpoint_id)


def _gaps(pin: TablePin, log_start: Mapping[int, int], skip_deleted: bool, checkpoint_id: int) -> TablePin:
    """``pin``, unless retention deleted offsets it reads (below the partition's log start) that no version
    holds: a table without them would keep its keys' older rows (or none) and join them as if current. Refused
    (terminal, naming checkpoint, table, partition and the offsets lost); with ``skip_deleted`` the range starts
    at the log start and the pin records the offsets skipped."""
    kept, skipped, lost = [], dict(pin.skipped), []
    for r in pin.ranges:
        first = log_start.get(r.partition, 0)
        if r.is_empty or r.start >= first:  # reading nothing, a checkpoint loses nothing (a later one will see)
            kept.append(r)
            continue
        lost.append(OffsetRange(r.topic, r.partition, r.start, first))
        skipped[r.partition] = skipped.get(r.partition, 0) + first - r.start
        kept.append(OffsetRange(r.topic, r.partition, first, max(first, r.end)))
    if not lost:
        return pin
    gaps = ", ".join(f"{g.topic}:{g.partition} offsets [{g.start}, {g.end}) ({g.count} records, the log now starts at "
                     f"{g.end})" for g in lost)
    if not skip_deleted:
        held = f"its version of checkpoint {pin.base.written_by}" if pin.base is not None else "its first version"
        raise TerminalError(
            f"checkpoint {checkpoint_id}: table {pin.name}: retention deleted records of its topic before any "
            f"checkpoint read them: {gaps}; {held} ends before them, so the table would miss their keys' updates and "
            "join older rows as if current. Nothing was claimed. Raise the topic's retention (a table's topic is usually "
            "compacted: cleanup.policy=compact), then either set checkpoints.skip_deleted_ranges: true to go on "
            f"without those records (the claim records the skip), or rebuild the table from the topic's start by "
            f"renaming it in the spec (tables.<name>)")
    return replace(pin, ranges=tuple(kept), skipped=skipped)


def compact_table(chain_bytes: list[int], delta_bytes: int, checkpoint_id: int) -> bool:
    """Whether a table whose files have ``chain_bytes`` (base first) and that gets a delta of ``delta_bytes``
    is written as one new base instead (the keyed state's policy, `lockstep.rules.compaction`; a table has one
    chain, so merging the deltas alone is a new base too)."""
    if not chain_bytes:
        return True
    return compaction_due(chain_bytes, delta_bytes, TABLE_COMPACTION, 0, checkpoint_id) is not Compaction.NONE
