"""Small line charts for the Checkpoints page, as plain geometry for an inline SVG template.

The page must work offline and inside Airflow's sandboxed iframe, with JavaScript off, so the charts
are drawn on the server: this module turns per-checkpoint figures into scaled points, SVG path data
and axis ticks, and ``templates/macros.html`` (``chart``) writes them out as ``<svg>``. Nothing here
reads a store or a clock: a chart is a function of the values it is given, unit-tested without services.

One x slot per checkpoint, oldest on the left, evenly spaced whatever the ids' gaps (retention and
savepoints leave gaps; a slot is a checkpoint, not a unit of time). A checkpoint without a figure
(``None``: not prepared yet, aborted, unknown) is a gap: the line breaks there and no point is drawn.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: The SVG's own coordinate system (``viewBox``); the CSS scales it to the width available.
WIDTH = 320
HEIGHT = 132
#: Room for the y labels on the left and the x labels below.
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 8, 20
#: At most this many checkpoint ids under the x axis, so they never overlap.
MAX_X_LABELS = 6


@dataclass(frozen=True)
class SeriesInput:
    """One line to draw: its CSS key (``s-<key>``), its name in the legend, and one value per checkpoint."""

    key: str
    name: str
    values: Sequence[float | None]


@dataclass(frozen=True)
class Point:
    checkpoint_id: int
    x: float
    y: float
    value: float
    #: The point's tooltip: checkpoint and figure.
    text: str


@dataclass(frozen=True)
class Line:
    key: str
    name: str
    points: tuple[Point, ...]
    #: SVG path data; a gap starts a new subpath (``M``) instead of joining across it.
    path: str
    #: The newest figure of this line, as text ('–' when it has none).
    latest: str


@dataclass(frozen=True)
class Tick:
    position: float
    text: str


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    #: What the chart shows and its latest values, for ``<title>`` and ``aria-label``.
    label: str
    lines: tuple[Line, ...]
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    checkpoint_ids: tuple[int, ...]
    #: One mark under the axis per checkpoint (its id as text), figure or not: where each slot is.
    slots: tuple[Tick, ...] = ()
    #: The points' radius: smaller when slots are close (a page of 200 checkpoints), so points stay apart.
    radius: float = 2.5
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM


def nice_step(span: float, count: int = 4, integer: bool = False) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) that cuts ``span`` into at most ``count`` parts;
    with ``integer`` (counts of records), a whole number: no "2.5 records" on an axis."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(count, 1)
    if integer and raw <= 1:
        return 1.0
    power: float = 10 ** math.floor(math.log10(raw))  # an int ** int: typed Any, as a negative power is a float
    for factor in (1, 2, 2.5, 5, 10):
        step = factor * power
        if step >= raw * (1 - 1e-9) and not (integer and step % 1):
            return step
    return 10 * power  # not reached: factor 10 always covers raw


#: Steps of a duration axis, in seconds: what a clock reads in (30 s, 5 min, 1 h), not 250 s = "4.17 min".
DURATION_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def duration_step(span: float, count: int = 4) -> float:
    """The smallest of ``DURATION_STEPS`` that cuts ``span`` seconds into at most ``count`` parts (below a
    second, and past a day in days, the plain round steps of `nice_step`)."""
    raw = span / max(count, 1)
    if raw <= 1:
        return nice_step(span, count)
    for step in DURATION_STEPS:
        if step >= raw:
            return float(step)
    return 86400 * nice_step(span / 86400, count)


def value_ticks(values: Sequence[float], count: int = 4, integer: bool = False,
                step_for: Callable[[float, int], float] | None = None) -> list[float]:
    """Round tick values from 0 (or below, for negative figures) to at least the largest value.

    Counts start at 0 so that heights compare; all zeros, or none, still give an axis 0..1. ``step_for``
    picks the step (`duration_step` for durations) instead of `nice_step`."""
    lo = min([0.0, *values])
    hi = max([0.0, *values])
    if hi == lo:  # nothing to compare: a bare axis from the value up
        return [_whole(lo), _whole(lo + 1)]
    step = step_for(hi - lo, count) if step_for is not None else nice_step(hi - lo, count, integer)
    start = math.floor(lo / step) * step
    ticks = [start]
    while ticks[-1] < hi - 1e-9 * step:
        ticks.append(round(start + len(ticks) * step, 10))
    return [_whole(t) for t in ticks]


def _whole(value: float) -> float:
    """A whole tick as an int, so that formatters write "1,000", not "1,000.0"."""
    return int(value) if float(value).is_integer() else value


def x_positions(count: int, left: float = LEFT, right: float = WIDTH - RIGHT) -> list[float]:
    """``count`` evenly spaced slots from ``left`` to ``right``; one slot sits in the middle."""
    if count <= 0:
        return []
    if count == 1:
        return [round((left + right) / 2, 2)]
    step = (right - left) / (count - 1)
    return [round(left + i * step, 2) for i in range(count)]


def label_indexes(count: int, most: int = MAX_X_LABELS) -> list[int]:
    """Which slots get their checkpoint id written under the axis: the first, the last, and evenly between."""
    if count <= most:
        return list(range(count))
    step = math.ceil((count - 1) / (most - 1))
    picked = list(range(0, count, step))
    if picked[-1] != count - 1:
        if count - 1 - picked[-1] < step / 2:
            picked.pop()  # too close to the last one, which is always labelled
        picked.append(count - 1)
    return picked


def scale(value: float, lo: float, hi: float, bottom: float = HEIGHT - BOTTOM, top: float = TOP) -> float:
    """A value's y in the SVG (which grows downwards): ``lo`` at ``bottom``, ``hi`` at ``top``."""
    if hi == lo:
        return bottom
    return round(bottom - (value - lo) / (hi - lo) * (bottom - top), 2)


def path_data(points: Sequence[tuple[float, float] | None]) -> str:
    """An SVG path through the points in order; ``None`` is a gap, so the next point starts a new subpath."""
    parts: list[str] = []
    pen_down = False
    for p in points:
        if p is None:
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{_num(p[0])} {_num(p[1])}")
        pen_down = True
    return " ".join(parts)


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def line_chart(key: str, title: str, checkpoint_ids: Sequence[int], series: Sequence[SeriesInput],
               fmt: Callable[[float], str], noun: str = "", tick_fmt: Callable[[float], str] | None = None,
               integer: bool = False, duration: bool = False) -> Chart:
    """A chart of ``series`` over ``checkpoint_ids`` (oldest first, one value per id in each series).

    ``fmt`` writes a value as the page does (thousands, a duration), ``tick_fmt`` (default ``fmt``) an axis
    tick in the little room left of the axis (whole numbers only with ``integer``, clock steps with
    ``duration``: values in seconds); ``noun`` follows a
    series' value in the label ("20 records in"). The label names the chart, the checkpoints and each
    line's newest figure, so a screen reader (and the tooltip) says what a sighted reader sees at the
    right-hand end."""
    ids = tuple(checkpoint_ids)
    for s in series:
        if len(s.values) != len(ids):
            raise ValueError(f"series {s.key!r} has {len(s.values)} values for {len(ids)} checkpoints")
    known = [float(v) for s in series for v in s.values if v is not None]
    ticks = value_ticks(known, integer=integer, step_for=duration_step if duration else None)
    lo, hi = ticks[0], ticks[-1]
    xs = x_positions(len(ids))
    lines = []
    for s in series:
        coords: list[tuple[float, float] | None] = []
        points = []
        for cid, x, v in zip(ids, xs, s.values):
            if v is None:
                coords.append(None)
                continue
            y = scale(float(v), lo, hi)
            coords.append((x, y))
            points.append(Point(cid, x, y, v, f"checkpoint {cid}: {fmt(v)}{noun and ' ' + noun} {s.name}"))
        latest = points[-1] if points else None
        lines.append(Line(s.key, s.name, tuple(points), path_data(coords), fmt(latest.value) if latest else "–"))
    y_ticks = tuple(Tick(scale(t, lo, hi), (tick_fmt or fmt)(t)) for t in ticks)
    x_ticks = tuple(Tick(xs[i], str(ids[i])) for i in label_indexes(len(ids)))
    slots = tuple(Tick(x, str(cid)) for cid, x in zip(ids, xs))
    return Chart(key, title, chart_label(title, ids, lines, noun), tuple(lines), y_ticks, x_ticks, ids, slots,
                 point_radius(len(ids)))


def point_radius(count: int, largest: float = 2.5, smallest: float = 1.0) -> float:
    """A point's radius for ``count`` slots: ``largest`` while points have room, down to ``smallest``."""
    xs = x_positions(count)
    if len(xs) < 2:
        return largest
    return round(max(smallest, min(largest, (xs[1] - xs[0]) / 3)), 2)


def chart_label(title: str, ids: Sequence[int], lines: Sequence[Line], noun: str = "") -> str:
    """'Records per checkpoint, checkpoints 1–7; latest: 20 records in (checkpoint 7), ...'."""
    if not ids:
        return f"{title}: no checkpoints"
    span = f"checkpoint {ids[0]}" if len(ids) == 1 else f"checkpoints {ids[0]}–{ids[-1]}"
    latest = [f"{line.latest}{noun and ' ' + noun} {line.name} (checkpoint {line.points[-1].checkpoint_id})"
              for line in lines if line.points]
    return f"{title}, {span}; " + (f"latest: {', '.join(latest)}" if latest else "no figures yet")


def compact_count(value: float) -> str:
    """An axis tick's count in a few characters: 950, 1.5k, 20k, 3M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def compact_duration(seconds: float) -> str:
    """An axis tick's duration in a few characters: 0 s, 45 s, 2.5 min, 3 h, 2 d."""
    magnitude = abs(seconds)
    for limit, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if magnitude >= limit:
            return f"{seconds / limit:.3g} {unit}"
    return f"{seconds:.3g} s"
