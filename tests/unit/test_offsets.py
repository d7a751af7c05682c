"""Offsets: start-offset precedence, range planning, the fair record budget, retention handling."""

from __future__ import annotations

import itertools
import json
import random
from datetime import UTC

import pytest

from lockstep.errors import DeletedRangesError, OffsetAheadError, TerminalError
from lockstep.model.offsets import OffsetRange, TopicPartition, offsets_from_json, offsets_to_json
from lockstep.rules.ranges import plan_ranges, water_fill
from lockstep.rules.start_offsets import OffsetSource, choose_start_offsets


def tp(p: int, topic: str = "orders") -> TopicPartition:
    return TopicPartition(topic, p)


P0, P1, P2 = tp(0), tp(1), tp(2)
LOG_START = {P0: 10, P1: 0, P2: 5}
LSO = {P0: 100, P1: 50, P2: 5}


# --- value types ---


def test_topic_partition_key_round_trip_and_order() -> None:
    assert tp(3, "a.b-c_d").key == "a.b-c_d:3"
    assert TopicPartition.from_key("a.b-c_d:3") == tp(3, "a.b-c_d")
    assert sorted([tp(10), tp(2, "a"), tp(9)]) == [tp(2, "a"), tp(9), tp(10)]
    for bad in ("orders", "orders:", ":1", "orders:x", "orders:-1"):
        with pytest.raises(ValueError):
            TopicPartition.from_key(bad)


def test_offset_range_is_half_open() -> None:
    r = OffsetRange("orders", 1, 5, 8)
    assert r.count == 3 and not r.is_empty
    assert OffsetRange("orders", 1, 8, 8).is_empty
    assert r.tp == tp(1)
    with pytest.raises(ValueError):
        OffsetRange("orders", 1, 9, 8)
    with pytest.raises(ValueError):
        OffsetRange("orders", 1, -1, 8)


def test_offset_range_json_round_trip_through_text() -> None:
    r = OffsetRange("orders", 1, 5, 8)
    assert OffsetRange.from_json(json.loads(json.dumps(r.to_json()))) == r
    with pytest.raises(ValueError):
        OffsetRange.from_json({"topic": "orders", "partition": "1", "start": 5, "end": 8})


def test_offset_maps_round_trip() -> None:
    offsets = {tp(1): 7, tp(0, "b"): 3}
    doc = offsets_to_json(offsets)
    assert list(doc) == ["b:0", "orders:1"]
    assert offsets_from_json(json.loads(json.dumps(doc))) == offsets
    with pytest.raises(ValueError):
        offsets_from_json({"orders:0": -1})


# --- choose_start_offsets ---


def choose(**kwargs):  # type: ignore[no-untyped-def]
    args = {"partitions": [P0, P1, P2], "log_start_offsets": LOG_START, "stable_end_offsets": LSO,
            "auto_offset_reset": "earliest"}
    args.update(kwargs)
    return choose_start_offsets(**args)


def test_restore_wins_over_everything() -> None:
    chosen = choose(
        restore=OffsetSource.savepoint("nightly", {P0: 20, P1: 21, P2: 5}),
        last_completed=OffsetSource.checkpoint(41, {P0: 90, P1: 40, P2: 5}),
        group=OffsetSource.group({P0: 1, P1: 1, P2: 1}),
    )
    assert chosen.source == "savepoint:nightly"
    assert dict(chosen.offsets) == {P0: 20, P1: 21, P2: 5}
    assert set(chosen.origins.values()) == {"savepoint:nightly"}


def test_latest_checkpoint_wins_over_group() -> None:
    chosen = choose(last_completed=OffsetSource.checkpoint(41, {P0: 90, P1: 40, P2: 5}),
                    group=OffsetSource.group({P0: 11, P1: 11, P2: 5}))
    assert chosen.source == "checkpoint:41"
    assert dict(chosen.offsets) == {P0: 90, P1: 40, P2: 5}


def test_group_offsets_when_no_checkpoint() -> None:
    chosen = choose(group=OffsetSource.group({P0: 11, P1: 12, P2: 5}))
    assert chosen.source == "group"
    assert dict(chosen.offsets) == {P0: 11, P1: 12, P2: 5}


def test_empty_group_falls_back_to_auto_offset_reset() -> None:
    assert choose(group=OffsetSource.group({})).source == "earliest"


def test_auto_offset_reset_earliest_and_latest() -> None:
    earliest = choose()
    assert (earliest.source, dict(earliest.offsets)) == ("earliest", LOG_START)
    latest = choose(auto_offset_reset="latest")
    assert (latest.source, dict(latest.offsets)) == ("latest", LSO)
    assert set(latest.origins.values()) == {"latest"}
    with pytest.raises(ValueError):
        choose(auto_offset_reset="smallest")


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_new_partitions_start_at_earliest_even_if_reset_is_latest(reset: str) -> None:
    # the checkpoint knows partitions 0 and 1; partition 2 was added since
    chosen = choose(auto_offset_reset=reset, last_completed=OffsetSource.checkpoint(7, {P0: 90, P1: 40}))
    assert chosen.offsets[P2] == LOG_START[P2]
    assert chosen.origins[P2] == "new-partition:earliest"
    assert chosen.origins[P0] == "checkpoint:7"


def test_partitions_of_a_group_without_commits_start_at_earliest() -> None:
    chosen = choose(auto_offset_reset="latest", group=OffsetSource.group({P0: 11}))
    assert dict(chosen.offsets) == {P0: 11, P1: LOG_START[P1], P2: LOG_START[P2]}


def test_partitions_no_longer_read_are_reported_as_dropped() -> None:
    gone = tp(0, "old-topic")
    chosen = choose(last_completed=OffsetSource.checkpoint(3, {P0: 90, P1: 40, P2: 5, gone: 4}))
    assert chosen.dropped == (gone,)
    assert gone not in chosen.offsets


def test_a_restore_that_names_topics_no_longer_read_says_so() -> None:
    from lockstep.rules.start_offsets import describe_dropped

    gone = (tp(0, "old-topic"), tp(2, "old-topic"), tp(1, "older"))
    chosen = choose(restore=OffsetSource.savepoint("before", {P0: 90, P1: 40, P2: 5, **{g: 4 for g in gone}}))
    assert describe_dropped(chosen) == (
        "savepoint:before holds offsets of old-topic (partitions 0, 2); older (partitions 1), no longer in "
        "source.topics: not read from here on; add the topic back to the spec to read it")
    assert describe_dropped(choose()) is None


def test_missing_watermark_for_a_partition_is_terminal() -> None:
    with pytest.raises(TerminalError, match="orders:2"):
        choose(log_start_offsets={P0: 0, P1: 0})


# --- plan_ranges ---


def test_ranges_end_at_the_last_stable_offset_within_budget() -> None:
    plan = plan_ranges({P0: 90, P1: 40, P2: 5}, LOG_START, LSO, max_records=1000)
    assert plan.ranges == (OffsetRange("orders", 0, 90, 100), OffsetRange("orders", 1, 40, 50),
                           OffsetRange("orders", 2, 5, 5))
    assert plan.total_records == 20
    assert plan.backlog_remaining == 0
    assert plan.non_empty == plan.ranges[:2]
    assert plan.end_offsets == {P0: 100, P1: 50, P2: 5}
    assert dict(plan.skipped) == {}


def test_budget_is_water_filled() -> None:
    # backlogs 90, 10, 0 with a budget of 50: the small one takes its 10, the big one the other 40
    plan = plan_ranges({P0: 10, P1: 40, P2: 5}, LOG_START, LSO, max_records=50)
    assert [r.count for r in plan.ranges] == [40, 10, 0]
    assert plan.total_records == 50
    assert plan.backlog_remaining == 50


def test_remainder_goes_to_lowest_partitions_deterministically() -> None:
    starts = {tp(i): 0 for i in range(4)}
    big = {tp(i): 1000 for i in range(4)}
    plan = plan_ranges(starts, {t: 0 for t in starts}, big, max_records=10)
    assert [r.count for r in plan.ranges] == [3, 3, 2, 2]


def test_the_remainder_starts_where_the_previous_checkpoint_stopped() -> None:
    starts = {tp(i): 0 for i in range(4)}
    big = {tp(i): 1000 for i in range(4)}
    counts = [[r.count for r in plan_ranges(starts, {t: 0 for t in starts}, big, max_records=10,
                                            checkpoint_id=cid).ranges] for cid in (1, 2, 3)]
    assert counts == [[2, 2, 3, 3], [3, 3, 2, 2], [2, 2, 3, 3]]


@pytest.mark.parametrize("partitions,budget", [(7, 3), (10, 1), (5, 4), (4, 10), (9, 6)])
def test_a_small_budget_moves_every_backlogged_partition_and_shares_it_evenly_over_checkpoints(
        partitions: int, budget: int) -> None:
    starts = {tp(i): 0 for i in range(partitions)}
    lso = {tp(i): 10_000 for i in range(partitions)}
    first = 41
    for cid in range(first, first + 3 * partitions):
        plan = plan_ranges(starts, {t: 0 for t in starts}, lso, max_records=budget, checkpoint_id=cid)
        assert plan.total_records == budget
        for r in plan.ranges:
            assert r.start == starts[r.tp]  # tiling holds
        starts = plan.end_offsets
    assert all(starts[t] > 0 for t in starts), starts  # no partition starved
    assert max(starts.values()) - min(starts.values()) <= 1, starts  # the budget's rounding, no more


def test_a_partly_drained_backlog_still_advances_every_partition_in_turn() -> None:
    # Partition 0 has 2 records; the six others a long backlog; the budget is 4 a checkpoint.
    starts = {tp(i): 0 for i in range(7)}
    lso = {tp(0): 2, **{tp(i): 10_000 for i in range(1, 7)}}
    moved = {t: 0 for t in starts}
    for cid in range(1, 31):
        plan = plan_ranges(starts, {t: 0 for t in starts}, lso, max_records=4, checkpoint_id=cid)
        assert plan.total_records == 4
        for r in plan.ranges:
            moved[r.tp] += r.count
        starts = plan.end_offsets
    assert moved[tp(0)] == 2
    rest = [moved[tp(i)] for i in range(1, 7)]
    # At most one record of rounding while partition 0 was drained, and one since (the round-robin
    # starts afresh over the partitions still backlogged).
    assert min(rest) > 0 and max(rest) - min(rest) <= 2, moved


def test_water_fill_properties_on_random_inputs() -> None:
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 8)
        backlog = {tp(i): rng.choice([0, 1, 2, 5, 50, 1000, rng.randint(0, 300)]) for i in range(n)}
        budget = rng.randint(1, 1500)
        shares = water_fill(backlog, budget, rotation=rng.randint(0, 10**6))
        assert sum(shares.values()) == min(budget, sum(backlog.values()))
        assert all(0 <= shares[t] <= backlog[t] for t in backlog)
        # fairness: a partition only gets less than its backlog if nobody got more than it + 1
        for a, b in itertools.permutations(backlog, 2):
            if shares[a] < backlog[a]:
                assert shares[b] <= shares[a] + 1, (backlog, budget, shares)


def test_budget_must_be_positive() -> None:
    with pytest.raises(ValueError):
        plan_ranges({P0: 10}, LOG_START, LSO, max_records=0)


def test_deleted_ranges_fail_naming_every_partition() -> None:
    with pytest.raises(DeletedRangesError) as info:
        plan_ranges({P0: 3, P1: 40, P2: 1}, LOG_START, LSO, max_records=1000, checkpoint_id=8,
                    start_source="checkpoint 7")
    message = str(info.value)
    assert message.startswith("checkpoint 8 cannot be planned: Kafka retention deleted records it must read (its "
                              "start offsets come from checkpoint 7), on 2 partition(s)")
    assert "orders:0: offsets 3 to 9 (7 records) were deleted; the next offset to read is 3, the log now starts at 10" \
        in message
    assert "orders:2: offsets 1 to 4 (4 records) were deleted" in message
    assert "orders:1" not in message
    assert "set checkpoints.skip_deleted_ranges: true" in message and "--restore-from" in message
    assert info.value.deleted == (("orders:0", 3, 10), ("orders:2", 1, 5))


def test_deleted_ranges_skipped_when_allowed() -> None:
    plan = plan_ranges({P0: 3, P1: 40, P2: 1}, LOG_START, LSO, max_records=1000, skip_deleted=True)
    assert dict(plan.skipped) == {P0: 7, P2: 4}
    assert plan.ranges[0] == OffsetRange("orders", 0, 10, 100)
    assert plan.ranges[2] == OffsetRange("orders", 2, 5, 5)


def test_start_beyond_the_log_fails_naming_the_partition() -> None:
    with pytest.raises(OffsetAheadError) as info:
        plan_ranges({P0: 90, P1: 51, P2: 5}, LOG_START, LSO, max_records=1000, skip_deleted=True)
    assert "orders:1: next offset to read is 51 but the log ends at 50" in str(info.value)
    assert str(info.value).startswith("the next checkpoint cannot be planned")
    assert "orders:0" not in str(info.value)


def test_consecutive_plans_tile() -> None:
    starts = {P0: 10, P1: 0, P2: 5}
    covered = {t: [] for t in starts}
    for _ in range(10):
        plan = plan_ranges(starts, LOG_START, LSO, max_records=17)
        for r in plan.ranges:
            assert r.start == starts[r.tp]
            covered[r.tp].append((r.start, r.end))
        starts = plan.end_offsets
    assert starts == LSO
    assert covered[P1][0][0] == 0 and covered[P1][-1][1] == 50


# ---- restore by time ---------------------------------------------------------------------------------
def test_a_restore_time_needs_a_zone_and_iso_8601():

    from lockstep.rules.start_offsets import parse_restore_time

    assert parse_restore_time("time:2026-11-20T10:00:00Z").astimezone(UTC).hour == 10
    assert parse_restore_time("time:2026-11-20T11:00:00+01:00").astimezone(UTC).hour == 10
    with pytest.raises(ValueError, match="has no zone; add Z for UTC"):
        parse_restore_time("time:2026-11-20T10:00:00")
    with pytest.raises(ValueError, match="is not an ISO 8601 time"):
        parse_restore_time("time:yesterday")


def test_a_time_restore_starts_each_partition_at_its_first_record_at_or_after_the_time_or_its_end():
    from lockstep.rules.start_offsets import offsets_at_time

    a, b, c = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("orders", 2)
    source, at_end = offsets_at_time("time:2026-11-20T10:00:00Z", {a: 40, b: None, c: 90}, {a: 100, b: 70, c: 80})
    assert source.label == "time:2026-11-20T10:00:00Z"
    # c's first such record is past the last stable offset (an open transaction): start at the LSO.
    assert dict(source.offsets) == {a: 40, b: 70, c: 80}
    assert at_end == [b]


def test_a_restore_plan_counts_records_written_again_and_records_new_per_partition() -> None:
    from lockstep.rules.start_offsets import StartOffsets, restore_diff

    a, b, c = tp(0), tp(1), tp(2)
    starts = StartOffsets("savepoint:before", {a: 40, b: 70, c: 0}, {a: "savepoint", b: "savepoint", c: "earliest"})
    rows = restore_diff(starts, current={a: 100, b: 60}, end={a: 120, b: 80, c: 15})
    assert [r.to_json() for r in rows] == [
        {"partition": a.key, "current": 100, "restore": 40, "end": 120, "re_emitted": 60, "new": 20, "added": False},
        # a restore ahead of the current position writes nothing again and skips [60, 70)
        {"partition": b.key, "current": 60, "restore": 70, "end": 80, "re_emitted": 0, "new": 10, "added": False},
        # a partition the pipeline never read
        {"partition": c.key, "current": None, "restore": 0, "end": 15, "re_emitted": 0, "new": 15, "added": False},
    ]


def test_a_restore_plan_names_topics_added_to_the_spec_since_the_restore_point() -> None:
    from lockstep.rules.start_offsets import OffsetSource, choose_start_offsets, describe_restore, restore_diff

    a, added = tp(0), TopicPartition("payments", 0)
    starts = choose_start_offsets([a, added], {a: 0, added: 5}, {a: 50, added: 30}, "earliest",
                                  restore=OffsetSource.savepoint("before", {a: 20}))
    rows = restore_diff(starts, current={a: 50, added: 30}, end={a: 50, added: 30})
    assert [(r.partition, r.restore, r.re_emitted, r.added) for r in rows] == [
        (a.key, 20, 30, False), ("payments:0", 5, 25, True)]  # read again from its log start
    text = describe_restore(rows)
    assert text[2].endswith("added since the restore point: read from its start")
    assert text[-1] == ("55 records would be written again, 0 read for the first time; 1 partition added to "
                        "source.topics since the restore point")


def test_only_topics_with_a_recorded_and_a_different_id_count_as_recreated():
    from lockstep.rules.start_offsets import recreated_topics

    assert recreated_topics({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == [("b", "2", "3")]
    assert recreated_topics({}, {"a": "1"}) == []  # a claim of an earlier version records none: not judged
    assert recreated_topics({"gone": "1"}, {}) == []  # a topic no longer read is not judged either


def test_a_restore_refused_for_deleted_records_says_to_restore_from_a_later_point() -> None:
    with pytest.raises(DeletedRangesError) as info:
        plan_ranges({P0: 3}, LOG_START, LSO, max_records=1000, checkpoint_id=8, start_source="savepoint:nightly",
                    restoring=True)
    assert "(its start offsets come from savepoint:nightly)" in str(info.value)
    assert str(info.value).endswith("or restore from a later point instead.")


def test_a_topic_added_back_goes_on_from_the_groups_offsets_not_from_its_start() -> None:
    # the checkpoint knows P0 and P1; P2's topic was read before, removed and added back: the group has it
    chosen = choose(last_completed=OffsetSource.checkpoint(7, {P0: 90, P1: 40}),
                    group=OffsetSource.group({P0: 80, P2: 33}))
    assert chosen.offsets[P2] == 33 and chosen.origins[P2] == "group:read-before"
    assert chosen.offsets[P0] == 90, "the checkpoint wins where it knows the partition"
    restored = choose(restore=OffsetSource.savepoint("s", {P0: 90, P1: 40}), group=OffsetSource.group({P2: 33}))
    assert restored.offsets[P2] == LOG_START[P2], "a restore reads what its savepoint does not know from the start"
