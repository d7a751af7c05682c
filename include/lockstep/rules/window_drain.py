"""A tumbling window's size changed while the pipeline runs: the open windows drain at the old size (pure).

A window state holds windows of the size it was written with. When the spec's size changes, those windows still
fire at their own size, with every record they count, and the new size takes over at a switch time: the first
multiple of both sizes (their least common multiple) after the latest event time the state has seen. A record
before the switch belongs to a window of the old size, which ends at the switch at the latest; a record from it on,
to one of the new size, which starts at the switch at the earliest. No window is cut, none spans the switch.

The sizes a pipeline had and until when (``WindowSpec.earlier``: (size, until) pairs, oldest first) are kept in
its state's shape from then on, so each checkpoint, a replay of one and `lockstep verify` assign every record
to the same window. Sliding windows (before or after) do not drain: their windows overlap any switch, so the
change is refused with the way out.
"""
from __future__ import annotations

__all__ = [
    "drained", "size_at", "switch_ms",
]

import math
from dataclasses import replace

from lockstep.model.state_manifest import StateManifest
from lockstep.spec import StateSpec, WindowSpec


def switch_ms(old_size_ms: int, new_size_ms: int, latest_event_ms: int) -> int:
    """The first multiple of both sizes after ``latest_event_ms``: where the new size takes over."""
    step = math.lcm(old_size_ms, new_size_ms)
    return (latest_event_ms // step + 1) * step


def size_at(w: WindowSpec, event_ms: int) -> int:
    """The size of the tumbling window an event time belongs to: an earlier size before its end, else the spec's."""
    for size, until in w.earlier:
        if event_ms < until:
            return size
    return w.size_ms


def drained(state: StateSpec, base: StateManifest | None) -> StateSpec | str:
    """The state spec a checkpoint over ``base`` runs with: the spec's, with the sizes its windows had before
    (``WindowSpec.earlier``) from the base's shape, and a new switch when the spec's size is not the base's; or why
    the size cannot change (sliding windows)."""
    w = state.window
    if w is None or base is None or not base.shape or "size_ms" not in base.shape:
        return state
    shape = base.shape
    try:
        earlier = tuple(_pairs(shape.get("earlier")))
        old_size = _int(shape["size_ms"])
        old_slide = _int(shape.get("slide_ms", old_size))
    except ValueError as exc:
        return (f"the state's manifest of checkpoint {base.written_by} records its windows unreadably ({exc}): restore "
                "from an earlier checkpoint or a savepoint (`restore_from`)")
    if (old_size, old_slide) != (w.size_ms, w.slide_ms):
        if old_slide != old_size or w.slide_ms != w.size_ms:
            return (f"the windows of the pipeline's state (checkpoint {base.written_by}) are {_windows(old_size, old_slide)}"
                    f" and the spec's {_windows(w.size_ms, w.slide_ms)}: only tumbling windows change size while the "
                    "pipeline runs (the open ones fire at the old size, later ones at the new); sliding windows "
                    "overlap any switch. Set the spec back, or run the new version as a new pipeline (another name and "
                    "sink) started with `restore_from: time:<ISO>` where it should take over")
        seen = [t.max_event_ms for t in base.partitions.values() if t.max_event_ms is not None]
        if seen:  # windows of no record need no drain; a switch comes after any earlier one
            earlier += ((old_size, switch_ms(old_size, w.size_ms, max(*seen, *(u - 1 for _, u in earlier)))),)
    return replace(state, window=replace(w, earlier=earlier)) if earlier != w.earlier else state


def _windows(size_ms: int, slide_ms: int) -> str:
    return f"tumbling {size_ms} ms" if size_ms == slide_ms else f"{size_ms} ms sliding every {slide_ms} ms"


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"a window's size in a state's shape must be whole milliseconds, got {value!r}")
    return value


def _pairs(value: object) -> list[tuple[int, int]]:
    if not value:
        return []
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise ValueError(f"a state's earlier window sizes must be [size, until] pairs, got {value!r}")
    return [(_int(size), _int(until)) for size, until in value]
