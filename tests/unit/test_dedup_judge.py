"""The dedup's judgement on the driver (`lockstep.spark.dedup_judge`, pure Arrow) against the rule's Python
reference (`lockstep.rules.dedup.judge`, which the rule's own tests hold against a model that never forgets)."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from lockstep.model.state_rows import EVENT, GROUP, KEY
from lockstep.rules.dedup import PASS, Record, path
from lockstep.rules.dedup import judge as rule
from lockstep.spark.dedup_judge import RECORD_COLUMNS, judge

Row = tuple[str, int, int, str, int, int]  # key, key group, event ms, topic, partition, offset


def records(rows: list[Row]) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in RECORD_COLUMNS]
    types = (pa.string(), pa.int32(), pa.int64(), pa.string(), pa.int32(), pa.int64())
    return pa.table({c: pa.array(v, t) for c, v, t in zip(RECORD_COLUMNS, columns, types, strict=True)})


def held(rows: list[tuple[str, int]]) -> pa.Table:
    return pa.table({KEY: pa.array([k for k, _ in rows], pa.string()), EVENT: pa.array([t for _, t in rows], pa.int64()),
                     GROUP: pa.array([0] * len(rows), pa.int32())})


def passed(table: pa.Table) -> set[tuple[str, str, int, int]]:
    return set(zip(table[KEY].to_pylist(), table["topic"].to_pylist(), table["partition"].to_pylist(),
                   table["offset"].to_pylist(), strict=True))


@pytest.mark.parametrize("seed", range(12))
def test_the_driver_passes_exactly_the_records_the_rule_passes_on_random_keys(seed: int) -> None:
    rng = random.Random(seed)
    ttl = rng.choice([1_000, 10_000, 60_000])
    before = rng.choice([None, 2 * ttl, 4 * ttl])
    rows: list[Row] = []
    times: list[tuple[str, int]] = []
    offsets = [0, 0, 0]
    for k in range(250):
        key, base = f"k{k}", rng.randint(0, 5 * ttl)
        if rng.random() < 0.5:
            times += [(key, base + rng.randint(-2 * ttl, 3 * ttl)) for _ in range(rng.randint(1, 3))]
        for _ in range(rng.randint(1, 5)):
            p = rng.randrange(3)
            event = base + rng.choice([0, rng.randint(-ttl, ttl), rng.randint(-3 * ttl, 3 * ttl)])
            rows.append((key, k % 4, event, "in", p, offsets[p]))
            offsets[p] += 1
    judgement = judge(records(rows), held(times), ttl, before)
    got = judgement.passed

    want: set[tuple[str, str, int, int]] = set()
    paths: dict[str, int] = {}
    by_key: dict[str, list[Record]] = {}
    for key, _, event, topic, partition, offset in rows:
        by_key.setdefault(key, []).append(Record(event, topic, partition, offset))
    for key, rs in by_key.items():
        mine = [t for k, t in times if k == key]
        verdicts = rule(rs, mine, ttl, before)
        want |= {(key, r.topic, r.partition, r.offset) for r, v in verdicts.items() if v == PASS}
        fresh = [r for r, v in verdicts.items() if v != "late"]
        if fresh:
            paths[path(fresh, mine, ttl)] = paths.get(path(fresh, mine, ttl), 0) + 1
    assert passed(got) == want and got.num_rows == len(want)
    assert got.column_names == judgement.copies.column_names == list(RECORD_COLUMNS)
    # The copies are every other record that is not late.
    fresh = {(k, t, p, o) for k, _, e, t, p, o in rows if before is None or e + ttl > before}
    assert passed(judgement.copies) == fresh - want and judgement.copies.num_rows == len(fresh - want)
    assert all(paths.get(p, 0) >= 5 for p in ("new", "covered", "folded")), paths  # every path ran


def test_a_hot_key_passes_one_record_a_ttl_without_a_square_cost() -> None:
    # 200,000 records 100 ms apart, TTL 1 s: every tenth passes (20,000 passes in one checkpoint).
    n = 200_000
    rows = [("hot", 0, i * 100, "in", i % 4, i) for i in range(n)]
    got = judge(records(rows), held([]), 1_000, None).passed
    assert got[EVENT].to_pylist() == list(range(0, n * 100, 1_000))


def test_late_records_never_pass_and_held_times_cover_both_sides() -> None:
    rows = [("a", 0, 10_000, "in", 0, 0),   # late at watermark 20,000 with TTL 5 s
            ("b", 0, 30_000, "in", 0, 1),   # a copy of b's held 33,000 (before it in event time)
            ("c", 0, 30_000, "in", 0, 2),   # new
            ("c", 0, 31_000, "in", 1, 0),   # a copy of c's first, in the same checkpoint
            ("d", 0, 40_000, "in", 0, 3),   # held 30,000 and 50,000 are 10 s away: passes
            ]
    got = judge(records(rows), held([("b", 33_000), ("d", 30_000), ("d", 50_000)]), 5_000, 20_000)
    assert passed(got.passed) == {("c", "in", 0, 2), ("d", "in", 0, 3)}
    assert passed(got.copies) == {("b", "in", 0, 1), ("c", "in", 1, 0)}  # a: late, in neither


def test_no_records_pass_nothing() -> None:
    assert judge(records([]), held([("a", 1)]), 1_000, None).passed.num_rows == 0
    late = judge(records([("a", 0, 1, "in", 0, 0)]), held([]), 1_000, 10_000)
    assert late.passed.num_rows == late.copies.num_rows == 0


def test_a_large_checkpoint_is_collected_in_slices_that_cover_each_offset_once() -> None:
    from lockstep.model.offsets import OffsetRange
    from lockstep.spark.dedup_run import collect_slices

    ranges = [OffsetRange("in", 0, 5, 25), OffsetRange("in", 1, 0, 7), OffsetRange("other", 0, 3, 3)]
    assert collect_slices(ranges, most=32) == []  # 27 offsets: one collect
    slices = collect_slices(ranges, most=10)
    assert all(0 < r.end - r.start <= 10 for r in slices)
    covered = [(r.topic, r.partition, o) for r in slices for o in range(r.start, r.end)]
    assert sorted(covered) == sorted((r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert len(covered) == len(set(covered)) and len(slices) == 3
