"""Which records of a table's topic a checkpoint reads, and when a table's chain of files is compacted
(pure): the plan pins them (`lockstep.steps.plan`), the run carries them out (`lockstep.spark.tables`).

A table's version moves only with the checkpoints that read source records: a checkpoint without
records joins nothing, so it reads none of the table's topic and carries its base forward. A
checkpoint that reads records reads the table's topic from where its base ends up to the last stable
offsets when planned, so every record it joins meets the table as the topic stood then.
"""
from __future__ import annotations

__all__ = [
    "TABLE_COMPACTION", "compact_table", "table_pin",
]

from collections.abc import Mapping

from lockstep.errors import TerminalError
from lockstep.model.offsets import OffsetRange
from lockstep.model.tables import TablePin, TableVersion
from lockstep.rules.compaction import Compaction, compaction_due
from lockstep.spec import CompactionPolicy

#: When a table's deltas are merged into a new base: the keyed state's defaults.
TABLE_COMPACTION = CompactionPolicy()


def table_pin(name: str, topic: str, base: TableVersion | None, log_start: Mapping[int, int],
              stable_end: Mapping[int, int], reads: bool, checkpoint_id: int) -> TablePin:
    """What checkpoint ``checkpoint_id`` pins of table ``name``: ``base``, and per partition of the
    topic the offsets from where ``base`` ends (the log start without a base, or for a partition it
    does not know) up to ``stable_end``, or nothing when the checkpoint reads no source records
    (``reads``). A base of another topic starts over from the log start.

    A base that ends after the topic's last stable offset means the topic was deleted and created
    again (or truncated): the table's rows are not the topic's any more, and the plan refuses."""
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
        start = max(start, log_start.get(partition, 0))  # retention deleted records never read: they are gone
        ranges.append(OffsetRange(topic, partition, start, end if reads else start))
    return TablePin(name, base, tuple(ranges))


def compact_table(chain_bytes: list[int], delta_bytes: int, checkpoint_id: int) -> bool:
    """Whether a table whose files have ``chain_bytes`` (base first) and that gets a delta of ``delta_bytes``
    is written as one new base instead (the keyed state's policy, `lockstep.rules.compaction`; a table has one
    chain, so merging the deltas alone is a new base too)."""
    if not chain_bytes:
        return True
    return compaction_due(chain_bytes, delta_bytes, TABLE_COMPACTION, 0, checkpoint_id) is not Compaction.NONE
