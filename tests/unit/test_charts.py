"""The Checkpoints page's chart geometry (plugins/lockstep_airflow/charts.py): pure, no services."""
from __future__ import annotations

import pytest

from lockstep_airflow.charts import (
    BOTTOM,
    HEIGHT,
    LEFT,
    RIGHT,
    TOP,
    WIDTH,
    SeriesInput,
    compact_count,
    compact_duration,
    duration_step,
    label_indexes,
    line_chart,
    nice_step,
    path_data,
    point_radius,
    scale,
    value_ticks,
    x_positions,
)

PLOT_BOTTOM, PLOT_TOP = HEIGHT - BOTTOM, TOP


def _chart(values, ids=None, **kw):
    ids = list(range(1, len(values) + 1)) if ids is None else ids
    return line_chart("records", "Records per checkpoint", ids, [SeriesInput("in", "in", values)], str, **kw)


def test_ticks_are_round_start_at_zero_and_reach_the_largest_value():
    assert value_ticks([0, 37]) == [0, 10, 20, 30, 40]
    assert value_ticks([120.0]) == [0, 50, 100, 150]
    assert value_ticks([3], integer=True) == [0, 1, 2, 3]
    assert value_ticks([10], integer=True) == [0, 5, 10]  # not 2.5, 5, 7.5: no quarter records
    assert value_ticks([10]) == [0, 2.5, 5, 7.5, 10]  # durations may have them
    assert value_ticks([-30, 50]) == [-40, -20, 0, 20, 40, 60]  # a watermark ahead of the clock
    assert value_ticks([]) == [0, 1] and value_ticks([0, 0]) == [0, 1]  # nothing, or all zeros: still an axis
    assert nice_step(0) == 1.0 and nice_step(float("nan")) == 1.0
    assert nice_step(7_000_000, 4) == 2_000_000


def test_values_scale_into_the_plot_with_larger_values_higher():
    assert scale(0, 0, 100) == PLOT_BOTTOM and scale(100, 0, 100) == PLOT_TOP
    assert scale(50, 0, 100) == (PLOT_BOTTOM + PLOT_TOP) / 2
    assert scale(5, 5, 5) == PLOT_BOTTOM  # a flat range does not divide by zero


def test_slots_are_evenly_spaced_oldest_left_and_one_point_sits_in_the_middle():
    assert x_positions(0) == []
    assert x_positions(1) == [(LEFT + WIDTH - RIGHT) / 2]
    xs = x_positions(5)
    assert xs[0] == LEFT and xs[-1] == WIDTH - RIGHT
    assert len({round(b - a, 1) for a, b in zip(xs, xs[1:])}) == 1


def test_x_labels_keep_first_and_last_and_never_crowd():
    assert label_indexes(4) == [0, 1, 2, 3]
    assert label_indexes(20) == [0, 4, 8, 12, 16, 19]
    assert label_indexes(200) == [0, 40, 80, 120, 160, 199]
    assert label_indexes(8) == [0, 2, 4, 6, 7]
    for n in range(7, 300):
        picked = label_indexes(n)
        assert picked[0] == 0 and picked[-1] == n - 1 and len(picked) <= 6, n


def test_a_gap_breaks_the_line_instead_of_joining_across_it():
    assert path_data([(0, 1), (2, 3), None, (4, 5), (6, 7)]) == "M0 1 L2 3 M4 5 L6 7"
    assert path_data([None, (1.5, 2.25), None]) == "M1.5 2.25"
    assert path_data([]) == "" and path_data([None]) == ""


def test_a_chart_has_one_slot_per_checkpoint_and_a_point_per_figure():
    c = _chart([10, None, 30, 20], ids=[7, 8, 10, 11])
    assert c.checkpoint_ids == (7, 8, 10, 11) and [t.text for t in c.slots] == ["7", "8", "10", "11"]
    (line,) = c.lines
    assert [p.checkpoint_id for p in line.points] == [7, 10, 11]  # checkpoint 8 has no figure
    assert line.path.count("M") == 2 and line.path.count("L") == 1
    top = min(p.y for p in line.points)
    assert next(p for p in line.points if p.value == 30).y == top  # the largest value is drawn highest
    assert all(PLOT_TOP <= p.y <= PLOT_BOTTOM and LEFT <= p.x <= WIDTH - RIGHT for p in line.points)
    assert [p.x for p in line.points] == [c.slots[0].position, c.slots[2].position, c.slots[3].position]
    assert line.latest == "20" and line.points[-1].text == "checkpoint 11: 20 in"


def test_empty_and_single_point_charts_still_draw_an_axis():
    empty = _chart([])
    assert empty.lines[0].points == () and empty.lines[0].path == "" and empty.slots == ()
    assert empty.label == "Records per checkpoint: no checkpoints"
    assert [t.text for t in empty.y_ticks] == ["0", "1"]
    one = _chart([5])
    assert one.lines[0].points[0].x == (LEFT + WIDTH - RIGHT) / 2 and one.lines[0].path.startswith("M")
    none_yet = _chart([None, None])
    assert none_yet.lines[0].points == () and none_yet.lines[0].latest == "–"
    assert none_yet.label == "Records per checkpoint, checkpoints 1–2; no figures yet"


def test_the_label_says_what_the_chart_shows_and_each_lines_latest_figure():
    c = line_chart("records", "Records per checkpoint", [4, 5, 6],
                   [SeriesInput("in", "in", [1200, 1500, None]), SeriesInput("dead", "dead-lettered", [0, 3, None])],
                   lambda v: f"{v:,}", noun="records", tick_fmt=compact_count, integer=True)
    assert c.label == ("Records per checkpoint, checkpoints 4–6; latest: 1,500 records in (checkpoint 5), "
                       "3 records dead-lettered (checkpoint 5)")
    assert [t.text for t in c.y_ticks] == ["0", "500", "1k", "1.5k"]
    assert c.lines[1].points[1].text == "checkpoint 5: 3 records dead-lettered"


def test_series_of_the_wrong_length_are_refused():
    with pytest.raises(ValueError, match="series 'in' has 1 values for 2 checkpoints"):
        _chart([1], ids=[1, 2])


def test_compact_tick_text():
    assert [compact_count(v) for v in (0, 950, 1000, 1500, 20_000, 3_000_000)] == ["0", "950", "1k", "1.5k", "20k", "3M"]
    assert [compact_duration(v) for v in (0, 45, 90, 3600, 2 * 86400)] == ["0 s", "45 s", "1.5 min", "1 h", "2 d"]


def test_points_shrink_when_many_checkpoints_share_the_width():
    assert point_radius(0) == point_radius(1) == point_radius(20) == 2.5
    assert point_radius(200) == 1.0 and 1.0 < point_radius(60) < 2.5
    assert _chart([1] * 200).radius == 1.0


def test_duration_axes_step_as_a_clock_does():
    assert duration_step(900) == 300 and duration_step(125) == 60 and duration_step(40) == 10
    assert duration_step(3 * 3600) == 3600 and duration_step(2) == 0.5 and duration_step(30 * 86400) == 10 * 86400
    assert value_ticks([125, 900], step_for=duration_step) == [0, 300, 600, 900]
    c = line_chart("duration", "Duration", [1, 2], [SeriesInput("duration", "d", [125.0, 1000.0])], str,
                   tick_fmt=compact_duration, duration=True)
    assert [t.text for t in c.y_ticks] == ["0 s", "5 min", "10 min", "15 min", "20 min"]
