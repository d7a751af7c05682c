"""Event time of stateful pipelines (lockstep.rules.watermarks): the watermark a checkpoint leaves,
idleness, when a window fires, which windows an event belongs to, and what base state a checkpoint
may start from."""
from __future__ import annotations

import pytest

from lockstep.model.state_manifest import PartitionTime, StateManifest
from lockstep.rules.state_base import format_refusal, key_group_refusal, operator_refusal, schema_change
from lockstep.rules.watermarks import (
    advance,
    fired,
    fires_without_records,
    idle_due_at,
    window_starts,
)

NOW = 1_700_000_000_000
IDLE = 60_000
BOUND = 100


def at(max_event_ms: int | None, ago_ms: int = 0) -> PartitionTime:
    return PartitionTime(max_event_ms, NOW - ago_ms)


def manifest(operator: str = "window", key_groups: int = 8, written_by: int = 7) -> StateManifest:
    return StateManifest(operator=operator, key_groups=key_groups, written_by=written_by, files={}, columns={},
                         watermark_ms=None, partitions={})


# ---- advance ----------------------------------------------------------------------------------------------
def test_the_watermark_is_the_slowest_partitions_event_time_minus_the_bound() -> None:
    base = {"in:0": at(1_000, 5_000), "in:1": at(2_000, 5_000)}
    clock = advance(base, 900, {"in:0": 5_000, "in:1": 3_000}, ["in:0", "in:1"], NOW, BOUND, IDLE)
    assert clock.before == 900
    assert clock.after == 3_000 - BOUND
    assert clock.partitions == {"in:0": PartitionTime(5_000, NOW), "in:1": PartitionTime(3_000, NOW)}
    assert clock.idle == ()


def test_a_partition_keeps_its_largest_event_time_when_its_new_records_are_older() -> None:
    clock = advance({"in:0": at(8_000, 1_000)}, None, {"in:0": 6_000}, ["in:0"], NOW, BOUND, IDLE)
    assert clock.partitions["in:0"] == PartitionTime(8_000, NOW)
    assert clock.after == 8_000 - BOUND


def test_a_partition_first_seen_holds_the_watermark_back_until_its_first_record() -> None:
    base = {"in:0": at(1_000, 5_000)}
    held = advance(base, 500, {"in:0": 9_000}, ["in:0", "in:1"], NOW, BOUND, IDLE)
    assert held.partitions["in:1"] == PartitionTime(None, NOW), "first seen now: it counts from now"
    assert held.after == 500, "in:1 may still hold older records"
    assert advance(base, None, {"in:0": 9_000}, ["in:0", "in:1"], NOW, BOUND, IDLE).after is None
    # its first record arrives: it holds the watermark back at its own event time
    later = advance(held.partitions, held.after, {"in:1": 4_000}, ["in:0", "in:1"], NOW + 1_000, BOUND, IDLE)
    assert later.after == 4_000 - BOUND


def test_a_partition_first_seen_stops_holding_the_watermark_back_once_idle() -> None:
    held = advance({"in:0": at(1_000, 5_000)}, 500, {"in:0": 9_000}, ["in:0", "in:1"], NOW, BOUND, IDLE)
    later = advance(held.partitions, held.after, {"in:0": 10_000}, ["in:0", "in:1"], NOW + IDLE + 1, BOUND, IDLE)
    assert later.idle == ("in:1",)
    assert later.after == 10_000 - BOUND


def test_an_idle_partition_stops_holding_the_watermark_back() -> None:
    base = {"in:0": at(1_000, 1_000), "in:1": at(2_000, IDLE + 1)}
    clock = advance(base, None, {"in:0": 9_000}, ["in:0", "in:1"], NOW, BOUND, IDLE)
    assert clock.idle == ("in:1",)
    assert clock.after == 9_000 - BOUND
    # exactly idle_timeout without records is not idle yet
    edge = advance({"in:0": at(1_000, 1_000), "in:1": at(2_000, IDLE)}, None, {"in:0": 9_000}, ["in:0", "in:1"],
                   NOW, BOUND, IDLE)
    assert edge.idle == () and edge.after == 2_000 - BOUND


def test_when_every_partition_is_idle_the_watermark_moves_to_the_furthest_one() -> None:
    base = {"in:0": at(3_000, IDLE + 1), "in:1": at(7_000, IDLE + 5), "in:2": at(None, IDLE + 1)}
    clock = advance(base, 1_000, {}, ["in:0", "in:1", "in:2"], NOW, BOUND, IDLE)
    assert clock.idle == ("in:0", "in:1", "in:2")
    assert clock.after == 7_000 - BOUND


def test_every_partition_idle_and_none_with_an_event_time_leaves_the_watermark() -> None:
    clock = advance({"in:0": at(None, IDLE + 1)}, 42, {}, ["in:0"], NOW, BOUND, IDLE)
    assert clock.after == 42


def test_the_watermark_never_moves_backwards() -> None:
    base = {"in:0": at(1_000, 1_000), "in:1": at(20_000, 1_000)}
    clock = advance(base, 15_000, {"in:0": 2_000}, ["in:0", "in:1"], NOW, BOUND, IDLE)
    assert clock.before == 15_000 and clock.after == 15_000
    # a new partition's first records are older than the watermark: it stays too
    newer = advance({"in:0": at(30_000)}, 15_000, {"in:1": 5_000}, ["in:0", "in:1"], NOW, BOUND, IDLE)
    assert newer.after == 15_000


# ---- idle_advance: event time goes on with the pinned clock while every partition is quiet --------------
def test_with_idle_advance_the_watermark_goes_on_with_the_clock_once_every_partition_is_idle() -> None:
    base = {"in:0": at(3_000, IDLE + 7_000), "in:1": at(7_000, IDLE + 5_000)}
    clock = advance(base, 1_000, {}, ["in:0", "in:1"], NOW, BOUND, IDLE, idle_advance=True)
    assert clock.idle == ("in:0", "in:1")
    # the furthest event time, plus the time since the latest activity (in:1's), less the bound
    assert clock.after == 7_000 + IDLE + 5_000 - BOUND
    without = advance(base, 1_000, {}, ["in:0", "in:1"], NOW, BOUND, IDLE)
    assert without.after == 7_000 - BOUND, "off by default: the furthest partition's, as before"


def test_idle_advance_waits_for_every_partition_and_is_a_function_of_the_clock() -> None:
    base = {"in:0": at(3_000, IDLE + 7_000), "in:1": at(7_000, 1_000)}
    busy = advance(base, 1_000, {}, ["in:0", "in:1"], NOW, BOUND, IDLE, idle_advance=True)
    assert busy.idle == ("in:0",) and busy.after == 7_000 - BOUND, "in:1 is not idle: it holds the watermark"
    quiet = {"in:0": at(3_000, IDLE + 7_000), "in:1": at(7_000, IDLE + 1)}
    twice = [advance(quiet, 1_000, {}, ["in:0", "in:1"], NOW, BOUND, IDLE, idle_advance=True) for _ in range(2)]
    assert twice[0] == twice[1] and twice[0].after == 7_000 + IDLE + 1 - BOUND


def test_a_record_after_an_idle_advance_does_not_move_the_watermark_back() -> None:
    advanced = advance({"in:0": at(7_000, IDLE + 50_000)}, None, {}, ["in:0"], NOW, BOUND, IDLE, idle_advance=True)
    later = advance(advanced.partitions, advanced.after, {"in:0": 8_000}, ["in:0"], NOW + 1_000, BOUND, IDLE,
                    idle_advance=True)
    assert later.after == advanced.after == 7_000 + IDLE + 50_000 - BOUND


def pending(partitions: dict[str, PartitionTime], next_timer_ms: int | None, watermark: int | None = None
            ) -> StateManifest:
    return StateManifest(operator="window", key_groups=8, written_by=7, files={}, columns={}, watermark_ms=watermark,
                         partitions=partitions, timers=1, next_timer_ms=next_timer_ms)


def test_idle_due_at_is_the_first_clock_at_which_a_checkpoint_without_records_reaches_the_timer() -> None:
    parts = {"in:0": at(3_000, 2_000), "in:1": at(7_000, 1_000)}
    latest = NOW - 1_000
    # a timer just past the furthest event: due once every partition is idle
    assert idle_due_at(pending(parts, 7_500), ["in:0", "in:1"], BOUND, IDLE) == latest + IDLE + 1
    # a timer far ahead: once the clock has carried event time to it (plus the bound)
    far = 7_000 + 5 * IDLE
    due = idle_due_at(pending(parts, far), ["in:0", "in:1"], BOUND, IDLE)
    assert due == latest + 5 * IDLE + BOUND
    for clock_ms, fires in ((due - 1, False), (due, True)):
        assert fires_without_records(pending(parts, far), ["in:0", "in:1"], clock_ms, BOUND, IDLE) is fires
        by_advance = advance(parts, None, {}, ["in:0", "in:1"], clock_ms, BOUND, IDLE, idle_advance=True)
        assert (by_advance.after is not None and by_advance.after >= far) is fires, "the same rule as the run's"


@pytest.mark.parametrize("state, claimed, why", [
    (None, ["in:0"], "no state"),
    (pending({"in:0": at(3_000)}, None), ["in:0"], "no timer pending"),
    (pending({"in:0": at(3_000)}, 5_000), ["in:0", "in:1"], "a partition the state has not seen holds it back"),
    (pending({"in:0": at(None)}, 5_000), ["in:0"], "no event time seen"),
])
def test_idle_due_at_is_none_when_no_quiet_would_fire_anything(state, claimed, why) -> None:
    assert idle_due_at(state, claimed, BOUND, IDLE) is None, why


# ---- firing and windows -----------------------------------------------------------------------------------
def test_a_window_fires_once_the_watermark_reaches_its_end_plus_the_lateness() -> None:
    assert fired(10_000, 2_000, 12_000)
    assert fired(10_000, 0, 10_000)
    assert not fired(10_000, 2_000, 11_999)
    assert not fired(10_000, 0, None), "no watermark yet: nothing fires"


@pytest.mark.parametrize(("event", "size", "slide", "starts"), [
    (12_345, 10_000, 10_000, [10_000]),
    (10_000, 10_000, 10_000, [10_000]),
    (9_999, 10_000, 10_000, [0]),
    (12_345, 10_000, 5_000, [5_000, 10_000]),
    (10_000, 10_000, 5_000, [5_000, 10_000]),
    (12_345, 9_000, 3_000, [6_000, 9_000, 12_000]),
])
def test_window_starts_of_tumbling_and_sliding_windows(event: int, size: int, slide: int, starts: list[int]) -> None:
    assert window_starts(event, size, slide) == starts
    assert all(s <= event < s + size for s in starts), "the event lies in each window"
    assert len(starts) == size // slide


# ---- what a checkpoint may start from -----------------------------------------------------------------
def test_a_new_column_is_a_compatible_schema_change() -> None:
    assert schema_change({"n": "bigint"}, {"n": "bigint", "tags": "array<string>"}) == []
    assert schema_change({"n": "bigint"}, {"n": "bigint"}) == []


def test_a_removed_or_retyped_column_is_named() -> None:
    problems = schema_change({"n": "bigint", "name": "string", "at": "bigint"}, {"n": "int", "at": "bigint"})
    assert problems == ["field 'name' (string) is gone from the state's new schema",
                        "field 'n' changed type from bigint to int"]


def test_changed_key_groups_are_refused_naming_both_numbers_and_the_way_out() -> None:
    refused = key_group_refusal(manifest(key_groups=8, written_by=7), 16, None)
    assert refused is not None
    assert "state.key_groups is 16" in refused and "has 8 key groups" in refused and "checkpoint 7" in refused
    assert "lockstep state rekey" in refused and "--key-groups 16" in refused


def test_key_groups_may_change_only_to_what_a_recorded_rekey_says() -> None:
    assert key_group_refusal(manifest(key_groups=8), 16, 16) is None
    assert key_group_refusal(manifest(key_groups=8), 16, 32) is not None, "a rekey to other groups allows nothing"
    assert key_group_refusal(manifest(key_groups=8), 8, None) is None
    assert key_group_refusal(None, 16, None) is None, "the first state may have any key groups"


def test_state_in_a_newer_format_is_refused_and_older_formats_are_read() -> None:
    from dataclasses import replace

    from lockstep.model.state_manifest import STATE_FORMAT_VERSION

    newer = replace(manifest(written_by=4), format_version=STATE_FORMAT_VERSION + 1)
    refused = format_refusal(newer)
    assert refused is not None and "checkpoint 4" in refused and f"format {STATE_FORMAT_VERSION + 1}" in refused
    assert "Upgrade Lockstep to the release that wrote it" in refused
    assert all(format_refusal(replace(manifest(), format_version=v)) is None for v in range(1, STATE_FORMAT_VERSION + 1))
    assert format_refusal(None) is None


def test_state_of_another_operator_is_refused() -> None:
    refused = operator_refusal(manifest(operator="window", written_by=3), "dedup")
    assert refused is not None and "window operator" in refused and "declares dedup" in refused
    assert "checkpoint 3" in refused
    assert operator_refusal(manifest(operator="dedup"), "dedup") is None
    assert operator_refusal(None, "function") is None


def test_state_kept_under_another_window_shape_is_refused_naming_what_changed() -> None:
    """A window's stored rows mean windows of one key, size, slide and aggregates: read under another they would
    fire wrong counts without an error, so the plan refuses, naming each field; the manifest keeps the shape."""
    from dataclasses import replace

    from lockstep.rules.state_base import base_refusal, shape_refusal, state_shape
    from lockstep.spec import parse_spec

    def spec(**window: object):
        w = {"key": "customer", "size": "1m", "aggregates": {"orders": "count(*)"}, **window}
        return parse_spec({"name": "p", "source": {"topics": ["t"]}, "transform": "m:f",
                           "sink": {"topic": "o", "dead_letter_topic": "d"}, "checkpoints": {"store": "s3://bucket/p"},
                           "state": {"key_groups": 8, "event_time": {"column": "ts"}, "window": w}}, "p.yaml")

    running = spec()
    assert running.state is not None
    base = replace(manifest(written_by=5), shape=state_shape(running.state))
    assert StateManifest.from_json(base.to_json(), "k").shape == base.shape  # kept through JSON
    assert base_refusal(running, base, None) is None
    assert shape_refusal(base, spec(allowed_lateness="5s").state) is None  # not what the rows mean
    # A tumbling window's new size drains the open windows (rules.window_drain); a sliding one is refused.
    assert base_refusal(spec(size="5m"), base, None) is None
    refused = base_refusal(spec(size="5m", slide="1m", aggregates={"orders": "count(*)", "total": "sum(amount)"}),
                           base, None)
    assert refused is not None and "checkpoint 5" in refused
    assert "are tumbling 60000 ms and the spec's 300000 ms sliding every 60000 ms" in refused
    # other aggregates alone are the state's own business: rows fire with them, partials refuse them (windows.py)
    assert "aggregates" not in refused and base.shape["aggregates"] == [["orders", "count(*)"]]
    assert shape_refusal(base, spec(aggregates={"orders": "count(*)", "total": "sum(amount)"}).state) is None
    assert "restore_from: time:" in refused
    key = shape_refusal(base, spec(key="currency").state)
    assert key is not None and "state.window.key was customer, is now currency" in key
    assert shape_refusal(replace(base, shape={}), spec(size="5m", slide="1m").state) is None  # an earlier version's


def test_a_tumbling_windows_new_size_takes_over_at_the_first_multiple_of_both_after_the_latest_event() -> None:
    """The open windows drain at their size: records before the switch go to windows of the old size (which end by
    it), later ones to the new; the switch is kept in the state's shape, carried on, and a later change switches
    after it."""
    from dataclasses import replace

    from lockstep.model.state_manifest import PartitionTime
    from lockstep.rules.state_base import state_shape
    from lockstep.rules.window_drain import drained, size_at, switch_ms
    from lockstep.spec import parse_spec

    def state(size: str, slide: str | None = None):
        w = {"key": "customer", "size": size, "aggregates": {"orders": "count(*)"}, **({"slide": slide} if slide else {})}
        return parse_spec({"name": "p", "source": {"topics": ["t"]}, "transform": "m:f",
                           "sink": {"topic": "o", "dead_letter_topic": "d"}, "checkpoints": {"store": "s3://bucket/p"},
                           "state": {"key_groups": 8, "event_time": {"column": "ts"}, "window": w}}, "p.yaml").state

    assert switch_ms(10_000, 15_000, 61_000) == 90_000 and switch_ms(10_000, 20_000, 59_999) == 60_000
    assert switch_ms(10_000, 20_000, 60_000) == 80_000  # strictly after the latest event
    seen = {"t:0": PartitionTime(61_000, 1), "t:1": PartitionTime(45_000, 1), "t:2": PartitionTime(None, 1)}
    base = replace(manifest(written_by=3), shape=state_shape(state("10s")), partitions=seen)
    assert drained(state("10s"), base) == state("10s")  # the same size: nothing to drain
    grown = drained(state("15s"), base)
    assert not isinstance(grown, str) and grown.window is not None and grown.window.earlier == ((10_000, 90_000),)
    w = grown.window
    assert [size_at(w, t) for t in (0, 89_999, 90_000, 10**9)] == [10_000, 10_000, 15_000, 15_000]
    assert state_shape(grown)["earlier"] == [[10_000, 90_000]] and state_shape(state("15s")).get("earlier") is None

    # carried while the spec keeps the new size; a second change switches after the first
    later = replace(base, shape=state_shape(grown), partitions={"t:0": PartitionTime(100_000, 2)})
    carried = drained(state("15s"), later)
    assert not isinstance(carried, str) and carried.window.earlier == ((10_000, 90_000),)
    early = drained(state("5s"), replace(later, partitions={"t:0": PartitionTime(70_000, 2)}))
    assert not isinstance(early, str) and early.window.earlier == ((10_000, 90_000), (15_000, 90_000))  # none of 15 s
    again = drained(state("5s"), later)
    assert not isinstance(again, str) and again.window.earlier == ((10_000, 90_000), (15_000, 105_000))
    assert [size_at(again.window, t) for t in (89_999, 90_000, 104_999, 105_000)] == [10_000, 15_000, 15_000, 5_000]

    # no record yet: the new size from the start; sliding before or after: refused, naming the way out
    empty = replace(base, partitions={"t:0": PartitionTime(None, 1)})
    assert drained(state("15s"), empty) == state("15s")
    for refused in (drained(state("20s", "10s"), base),
                    drained(state("20s"), replace(base, shape=state_shape(state("10s", "5s"))))):
        assert isinstance(refused, str) and "only tumbling windows change size" in refused
        assert "checkpoint 3" in refused and "restore_from: time:<ISO>" in refused
    damaged = drained(state("15s"), replace(base, shape={**base.shape, "earlier": [[10_000]]}))
    assert isinstance(damaged, str) and damaged.startswith("the state's manifest of checkpoint 3 records its windows "
                                                           "unreadably") and "restore from an earlier" in damaged
