"""Event time for stateful pipelines (pure): the watermark, idleness and lateness (what state a
checkpoint may start from is `lockstep.rules.state_base`).

A checkpoint is a batch: it judges every record against the watermark its base checkpoint left
(``before``), and leaves the watermark its own records move to (``after``). So a record is late when
every window it belongs to had fired before this checkpoint started, and a window fires in the
checkpoint whose records move the watermark past its end plus the allowed lateness. Both are
decided from the checkpoint's input and its base state alone, so a retried or replayed checkpoint
decides the same way.
"""
from __future__ import annotations

__all__ = [
    "EventClock", "advance", "fires_without_records", "idle_due_at",
]

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lockstep.model.state_manifest import PartitionTime, StateManifest


@dataclass(frozen=True)
class EventClock:
    """The watermark before and after one checkpoint, and the partitions' event time after it."""

    before: int | None
    after: int | None
    partitions: Mapping[str, PartitionTime]
    #: partitions that did not hold the watermark back (idle), for the log
    idle: tuple[str, ...] = ()


def advance(base: Mapping[str, PartitionTime], watermark: int | None, batch_max: Mapping[str, int],
            claimed: Iterable[str], now_ms: int, out_of_orderness_ms: int, idle_timeout_ms: int,
            idle_advance: bool = False) -> EventClock:
    """The watermark after a checkpoint that read ``batch_max`` (partition -> largest event time among
    its records in this checkpoint) from the ``claimed`` partitions, at ``now_ms``: the clock its claim
    pinned, never the wall clock of the run, so every attempt over the claim decides alike.

    The watermark is the minimum over the partitions that are not idle of (largest event time seen -
    ``out_of_orderness_ms``). A partition is idle when no checkpoint read records of it for
    ``idle_timeout_ms``; a partition first seen now counts from now, and until its first record it
    holds the watermark back (it may hold older records). When every partition is idle, none holds
    it back: the watermark moves to the furthest partition's. With ``idle_advance`` it goes on from
    there with the clock: event time is taken to pass as the clock has since the source last had
    records (the furthest event time + (now - the latest activity) - ``out_of_orderness_ms``), so
    windows close while the source is quiet. It never moves backwards.
    """
    partitions = dict(base)
    for tp in claimed:
        if tp not in partitions:
            partitions[tp] = PartitionTime(None, now_ms)
    for tp, seen in batch_max.items():
        old = partitions.get(tp)
        top = seen if old is None or old.max_event_ms is None else max(old.max_event_ms, seen)
        partitions[tp] = PartitionTime(top, now_ms)
    idle = tuple(sorted(tp for tp, t in partitions.items() if now_ms - t.active_at_ms > idle_timeout_ms))
    holding = [t for tp, t in partitions.items() if tp not in idle]
    candidate: int | None
    if holding:
        candidate = None if any(t.max_event_ms is None for t in holding) else \
            min(t.max_event_ms for t in holding if t.max_event_ms is not None) - out_of_orderness_ms
    else:
        known = [t.max_event_ms for t in partitions.values() if t.max_event_ms is not None]
        quiet = now_ms - max(t.active_at_ms for t in partitions.values()) if idle_advance and partitions else 0
        candidate = max(known) + quiet - out_of_orderness_ms if known else None
    after = watermark if candidate is None else candidate if watermark is None else max(watermark, candidate)
    return EventClock(watermark, after, partitions, idle)


def idle_due_at(state: StateManifest | None, claimed: Iterable[str], out_of_orderness_ms: int,
                idle_timeout_ms: int) -> int | None:
    """The earliest clock at which a checkpoint without records, over the ``claimed`` partitions, moves
    the watermark (with ``idle_advance``) to the state's earliest pending timer; None when none would.

    Every partition must be idle (``now - active_at > idle_timeout_ms``; a partition the state has not
    seen holds it back until its first record), and then the advance must reach the timer:
    ``furthest event + (now - latest activity) - out_of_orderness >= next timer``."""
    if state is None or state.next_timer_ms is None or set(claimed) - set(state.partitions) or not state.partitions:
        return None
    known = [t.max_event_ms for t in state.partitions.values() if t.max_event_ms is not None]
    if not known:
        return None
    active = max(t.active_at_ms for t in state.partitions.values())
    return max(active + idle_timeout_ms + 1, state.next_timer_ms + out_of_orderness_ms - max(known) + active)


def fires_without_records(state: StateManifest | None, claimed: Iterable[str], clock_ms: int,
                          out_of_orderness_ms: int, idle_timeout_ms: int) -> bool:
    """Whether a checkpoint that reads no records, with this pinned clock, moves the watermark past a
    pending timer (``idle_advance``): it must then run the operator, which fires what is due."""
    due = idle_due_at(state, claimed, out_of_orderness_ms, idle_timeout_ms)
    return due is not None and clock_ms >= due


def fired(window_end_ms: int, allowed_lateness_ms: int, watermark: int | None) -> bool:
    """A window has fired once the watermark is at or past its end plus the allowed lateness."""
    return watermark is not None and window_end_ms + allowed_lateness_ms <= watermark


def window_starts(event_ms: int, size_ms: int, slide_ms: int) -> list[int]:
    """The starts of the windows an event belongs to (``start <= event < start + size``), oldest first."""
    last = event_ms - event_ms % slide_ms
    return list(range(last - size_ms + slide_ms, last + 1, slide_ms))
