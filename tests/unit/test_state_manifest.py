"""The state manifest's bookkeeping (lockstep.rules.manifest_figures): a group's figures after a delta or
a new base, and the totals a checkpoint that read only some groups still knows."""
from __future__ import annotations

from lockstep.model.state_manifest import GroupState, PartitionTime
from lockstep.rules.manifest_figures import Figures, after_delta, as_base, manifest, pack_shares


def test_a_delta_replaces_the_touched_keys_figures_and_keeps_the_earliest_timer():
    old = GroupState(keys=10, rows=40, file_bytes=(100, 7), timers=5, next_timer_ms=2_000, digests=("a", "b"))
    new = after_delta(old, Figures(2, 8, 1, 3_000), Figures(3, 9, 2, 2_500), (100, 7), ("a", "b"), 11, "c")
    assert (new.keys, new.rows, new.timers) == (11, 41, 6)
    assert new.file_bytes == (100, 7, 11) and new.digests == ("a", "b", "c")
    assert new.next_timer_ms == 2_000, "early, never late: the older earliest stays"
    merged = after_delta(old, Figures(), Figures(1, 1, 1, 1_000), (100,), ("a",), 9, "d")  # deltas merged into one
    assert merged.file_bytes == (100, 9) and merged.digests == ("a", "d") and merged.next_timer_ms == 1_000


def test_a_chain_without_digests_gets_none_and_a_base_starts_afresh():
    old = GroupState(keys=1, rows=1, file_bytes=(100,), digests=())
    assert after_delta(old, Figures(), Figures(1, 1), (100,), (), 5, "x").digests == ()
    base = as_base(Figures(4, 6, 2, 9_000), 50, "z")
    assert base == GroupState(keys=4, rows=6, file_bytes=(50,), timers=2, next_timer_ms=9_000, digests=("z",))


def test_the_manifest_sums_every_groups_figures_read_or_not():
    groups = {0: GroupState(2, 3, (10, 5), 1, 7_000), 3: GroupState(4, 4, (20,), 0, None)}
    m = manifest("window", 8, 12, {0: ("a", "b"), 3: ("c",)}, groups, {"__ls_key": "string"}, 6_000,
                 {"in:0": PartitionTime(9_000, 1)}, 1)
    assert (m.keys, m.rows, m.bytes, m.timers, m.next_timer_ms) == (6, 7, 35, 1, 7_000)
    assert m.written_by == 12 and m.incremental and m.file_count == 3 and m.delta_count == 1


def test_a_packs_shares_follow_its_groups_rows_and_sum_to_its_bytes():
    assert pack_shares(1000, [1, 1, 2]) == [250, 250, 500]
    assert pack_shares(1001, [1, 1, 1]) == [333, 333, 335]  # the rest to the last: the sum is the pack's bytes
    assert sum(pack_shares(4_321, [7, 0, 13, 5])) == 4_321 and pack_shares(4_321, [7, 0, 13, 5])[1] == 0
    assert pack_shares(10, [0, 0]) == [0, 10] and pack_shares(10, []) == []
