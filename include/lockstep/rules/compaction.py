"""When a key group's chain of state files is compacted (pure): the policy, apart from the merging
itself (`lockstep.store.state_chain`) and the Spark run that carries it out (`lockstep.spark.keyed_state`).

The base is rewritten only when the deltas are worth it, so that what a checkpoint uploads follows the
keys it changed, not the keys the state holds (docs/state.md, *Incremental checkpoints*).
"""
from __future__ import annotations

__all__ = [
    "Compaction", "compaction_due", "deltas_to_merge",
]

from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lockstep.spec import CompactionPolicy


class Compaction(str, Enum):
    """What a checkpoint does with a group's chain beside its new delta (:func:`compaction_due`)."""

    NONE = "none"      # the delta joins the chain
    DELTAS = "deltas"  # the chain's deltas and the new one merged into one delta; the base stays
    BASE = "base"      # the whole chain merged into a new base (expired keys dropped)


def compaction_due(chain_bytes: Sequence[int], new_delta_bytes: int, policy: CompactionPolicy,
                   group: int = 0, checkpoint_id: int = 1) -> Compaction:
    """What becomes of a group whose files have ``chain_bytes`` (base first) and that gets a delta of
    ``new_delta_bytes``. The base is rewritten only when the deltas are worth it, so that what a
    checkpoint uploads follows the keys it changed, not the keys the state holds:
    - ``BASE`` when the deltas would pass ``max_delta_ratio`` times the base;
    - ``BASE`` at the group's own turn, every ``max_deltas`` checkpoints (``(checkpoint_id + group) %
      max_deltas == 0``), once its deltas reach 1/``max_deltas`` of the base. Records spread over
      every group grow every chain in step: by turns, a checkpoint rewrites at most about
      1/max_deltas of the state, never all of it at once;
    - ``DELTAS`` when the chain would pass ``max_deltas`` deltas and its base is not due: the newest
      deltas become one (:func:`deltas_to_merge`), so the files a read takes stay bounded without
      rewriting a base for a handful of changed keys;
    - else ``NONE``. A group without files starts with a base and never needs this."""
    if not chain_bytes:
        return Compaction.NONE
    deltas = [*chain_bytes[1:], new_delta_bytes]
    base, limit = max(chain_bytes[0], 1), max(policy.max_deltas, 1)
    if sum(deltas) > policy.max_delta_ratio * base:
        return Compaction.BASE
    if len(deltas) > 1 and (checkpoint_id + group) % limit == 0 and sum(deltas) * limit >= base:
        return Compaction.BASE
    return Compaction.DELTAS if len(deltas) > limit else Compaction.NONE


def deltas_to_merge(chain_bytes: Sequence[int], new_delta_bytes: int) -> int:
    """How many of the chain's newest deltas merge with the new one (``Compaction.DELTAS``): at least
    one, then each older delta no bigger than all the newer bytes merged so far (size-tiered, as an
    LSM tree merges runs). A merged delta is merged again only once the deltas after it have grown
    to its size, so each changed row is rewritten a few times (the log of the chain's growth), not
    at every merge: what merges write follows the keys changed, not the state."""
    deltas = list(chain_bytes[1:])
    merged, total = 0, new_delta_bytes
    for size in reversed(deltas):
        if merged and size > total:
            break
        merged, total = merged + 1, total + size
    return merged
