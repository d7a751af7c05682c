"""What a stateful checkpoint reads of its base state, and what it writes back (pure).

Incremental (the normal case): the checkpoint reads, of each key group its records touch, only the
rows of the keys they touch, and writes a delta per such group. A group whose earliest timer is due
at the new watermark (a window that fires, a function's timer) is read whole, since keys without
records fire too, and is written back as a new base. A TTL never makes a group due: expired keys are
dropped when read and when a chain is compacted.

In full (every group read whole, every group written as a base): the first state of format 1 (one
full file per group, no per-group figures), a re-keying (every key moves), a migration of a state
function's schema (every row changes).
"""
from __future__ import annotations

__all__ = [
    "ReadPlan", "read_plan",
]

from dataclasses import dataclass

from lockstep.model.state_manifest import StateManifest
from lockstep.spec import StateSpec


@dataclass(frozen=True)
class ReadPlan:
    full: bool
    #: groups read whole and written back as bases because a timer of theirs is due
    whole: frozenset[int]
    #: why in full, for the run's log ("" when incremental)
    why: str = ""

    def reads_whole(self, group: int) -> bool:
        return self.full or group in self.whole


def read_plan(base: StateManifest | None, state: StateSpec, watermark_ms: int | None, migrating: bool) -> ReadPlan:
    """How a checkpoint whose new watermark is ``watermark_ms`` reads ``base``."""
    if base is None or not base.files:
        return ReadPlan(False, frozenset())
    if not base.incremental:
        return ReadPlan(True, frozenset(), f"the state of checkpoint {base.written_by} is in format "
                                           f"{base.format_version} (one full file per key group)")
    if base.key_groups != state.key_groups:
        return ReadPlan(True, frozenset(), f"re-keying from {base.key_groups} to {state.key_groups} key groups")
    if migrating:
        return ReadPlan(True, frozenset(), "migrating the state to the function's new schema")
    if state.dedup is not None or watermark_ms is None:
        return ReadPlan(False, frozenset())
    due = frozenset(g for g, s in base.groups.items() if s.next_timer_ms is not None and s.next_timer_ms <= watermark_ms)
    return ReadPlan(False, due)
