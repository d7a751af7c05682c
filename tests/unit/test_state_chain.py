"""Incremental keyed state (issue 27), without services: a key group's chain of a base and deltas
(`lockstep.store.state_chain`), what a checkpoint reads (`lockstep.rules.state_reads`), and the
files and manifest a checkpoint writes (`lockstep.spark.state_write._write`, over tests/support/fake_s3)
checked against a plain dict over many random checkpoints, with compaction and garbage collection."""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lockstep.model.state_manifest import GroupState, PartitionTime, StateManifest
from lockstep.model.state_rows import EVENT, GROUP, KEY, TOMBSTONE, WINDOW_START
from lockstep.rules.compaction import Compaction, compaction_due, deltas_to_merge
from lockstep.rules.state_reads import read_plan
from lockstep.rules.watermarks import EventClock
from lockstep.spark.dedup_run import _beside_loaded
from lockstep.spark.state_read import Loaded
from lockstep.spark.state_write import _write
from lockstep.spec import CompactionPolicy, parse_spec
from lockstep.store import state_chain
from lockstep.store.state_cache import StateCache
from lockstep.store.state_files import StateFiles, unreferenced
from tests.support.fake_s3 import FakeS3

BUCKET, ROOT = "lockstep", "tests/orders"


def rows(*items: tuple[str, int, int], tombstones: tuple[str, ...] = (), group: int = 0) -> pa.Table:
    """State rows (key, event ms, n) of one group, and tombstones for ``tombstones``."""
    table = pa.table({KEY: pa.array([k for k, _, _ in items], pa.string()), GROUP: pa.array([group] * len(items), pa.int32()),
                      EVENT: pa.array([e for _, e, _ in items], pa.int64()),
                      "n": pa.array([n for _, _, n in items], pa.int64())})
    if not tombstones:
        return table
    dead = pa.table({KEY: pa.array(list(tombstones), pa.string()), GROUP: pa.array([group] * len(tombstones), pa.int32()),
                     EVENT: pa.nulls(len(tombstones), pa.int64()), "n": pa.nulls(len(tombstones), pa.int64()),
                     TOMBSTONE: [True] * len(tombstones)})
    return pa.concat_tables([table.append_column(TOMBSTONE, pa.nulls(len(items), pa.bool_())), dead])


def as_set(table: pa.Table | None) -> set[tuple[Any, ...]]:
    return set() if table is None else {(r[KEY], r[EVENT], r["n"]) for r in table.to_pylist()}


# ---- the chain --------------------------------------------------------------------------------------------
def test_a_delta_replaces_all_rows_of_its_keys_and_tombstones_remove_keys() -> None:
    base = rows(("a", 1, 1), ("a", 2, 2), ("b", 1, 1), ("c", 1, 1))
    delta = rows(("a", 3, 3), tombstones=("b",))
    later = rows(("c", 9, 9), ("d", 1, 1))
    assert as_set(state_chain.merge([base, delta, later])) == {("a", 3, 3), ("c", 9, 9), ("d", 1, 1)}
    assert TOMBSTONE not in state_chain.merge([base, delta]).column_names
    # A tombstone then a new row: the key is back with only its new row.
    assert as_set(state_chain.merge([base, delta, rows(("b", 5, 5))])) == {("a", 3, 3), ("b", 5, 5), ("c", 1, 1)}
    assert state_chain.merge([]) is None


def test_a_column_added_since_the_base_reads_as_null_in_its_rows() -> None:
    base = rows(("a", 1, 1), ("b", 1, 1))
    delta = rows(("a", 2, 2)).append_column("m", pa.array(["x"]))
    merged = state_chain.merge([base, delta]).to_pylist()
    assert sorted((r[KEY], r["m"]) for r in merged) == [("a", "x"), ("b", None)]


def test_selecting_keys_commutes_with_merging() -> None:
    rng = random.Random(7)
    for _ in range(50):
        chain = []
        for _ in range(rng.randint(1, 5)):
            keys = rng.sample("abcdefghij", rng.randint(1, 6))
            live = keys[: rng.randint(0, len(keys))]
            chain.append(rows(*[(k, rng.randint(0, 9), rng.randint(0, 9)) for k in live],
                              tombstones=tuple(k for k in keys if k not in live)))
        wanted = pa.array(rng.sample("abcdefghijk", 4))
        selected = state_chain.merge([state_chain.select(t, wanted) for t in chain])
        assert as_set(selected) == {r for r in as_set(state_chain.merge(chain)) if r[0] in wanted.to_pylist()}


def test_a_delta_holds_the_new_rows_and_a_tombstone_per_key_that_lost_its_state() -> None:
    new = rows(("a", 5, 5), ("a", 6, 6), ("z", 1, 1), group=3)
    change = state_chain.delta(new, pa.array(["a", "b", "c"]), 3)
    tombs = [r for r in change.to_pylist() if r[TOMBSTONE]]
    assert sorted(r[KEY] for r in tombs) == ["b", "c"] and all(r[GROUP] == 3 for r in tombs)
    assert as_set(state_chain.merge([rows(("b", 1, 1), ("c", 1, 1), ("q", 1, 1), group=3), change])) == \
        {("a", 5, 5), ("a", 6, 6), ("z", 1, 1), ("q", 1, 1)}


@pytest.mark.parametrize(("chain", "new", "due"), [
    ((), 10, Compaction.NONE),                    # no base yet: a base is written, nothing to compact
    ((100,), 10, Compaction.NONE),                # a first small delta
    ((100, 10, 10), 10, Compaction.NONE),         # 3 deltas, 30 bytes against a base of 100
    ((100, 10, 10, 10), 10, Compaction.DELTAS),   # a 4th delta passes max_deltas=3: the deltas become one
    ((100, 60), 50, Compaction.BASE),             # the deltas' 110 bytes pass the base's 100
    ((100, 60, 20, 10), 20, Compaction.BASE),     # too many and too big: the base, which ends both
])
def test_compaction_is_due_on_too_many_or_too_big_deltas(chain: tuple[int, ...], new: int, due: Compaction) -> None:
    # checkpoint 1, group 0: not the group's turn ((1 + 0) % 3 != 0)
    assert compaction_due(chain, new, CompactionPolicy(max_deltas=3, max_delta_ratio=1.0)) is due


def test_at_its_turn_a_group_gets_a_new_base_only_if_its_deltas_reach_a_share_of_the_base() -> None:
    policy = CompactionPolicy(max_deltas=4, max_delta_ratio=1000)
    turn = dict(group=3, checkpoint_id=5)  # (5 + 3) % 4 == 0
    assert compaction_due([100, 20], 5, policy, **turn) is Compaction.BASE  # 25 >= 100 / 4
    assert compaction_due([100, 2], 1, policy, **turn) is Compaction.NONE  # 3 bytes: not worth 100
    assert compaction_due([100, 20], 5, policy, group=3, checkpoint_id=6) is Compaction.NONE  # not its turn
    # Its turn alone does not compact a chain without a delta yet.
    assert compaction_due([100], 1, policy, **turn) is Compaction.NONE


def test_groups_touched_by_every_checkpoint_take_turns_to_compact() -> None:
    policy = CompactionPolicy(max_deltas=4, max_delta_ratio=1000)
    chains = {g: [100] for g in range(8)}
    per_checkpoint = []
    for cid in range(1, 21):
        compacted = 0
        for g, chain in chains.items():
            step = compaction_due(chain, 10, policy, g, cid)
            if step is Compaction.BASE:
                chains[g] = [100]
                compacted += 1
            elif step is Compaction.DELTAS:
                chains[g] = [100, sum(chain[1:]) + 10]
            else:
                chain.append(10)
        per_checkpoint.append(compacted)
    assert max(per_checkpoint[4:]) == 2 == min(per_checkpoint[4:]), per_checkpoint  # 8 groups / 4: two a checkpoint
    assert all(len(chain) <= 5 for chain in chains.values())


def test_tiny_deltas_never_rewrite_the_base_and_the_chain_stays_bounded() -> None:
    """A big state whose checkpoints change a few keys (a dedup's new keys among many duplicates): the
    bytes written follow the changes, not the state, and a read takes at most a base and max_deltas deltas."""
    policy = CompactionPolicy()  # the defaults: 16 deltas at most
    totals = []
    for base in (10_000_000, 1_000_000_000):  # the same changes over a state 100 times bigger
        chain, written = [base], 0
        for cid in range(1, 2001):
            step = compaction_due(chain, 10, policy, 0, cid)
            assert step is not Compaction.BASE
            if step is Compaction.DELTAS:
                n = deltas_to_merge(chain, 10)
                chain = [*chain[:-n], sum(chain[-n:]) + 10]
            else:
                chain.append(10)
            written += chain[-1]
            assert len(chain) <= 17
        totals.append(written)
    # 20,000 bytes of changes, each rewritten a few times (tiers): merging every delta into one instead
    # would write about 1,000 bytes per checkpoint by the end (10 times these changes' 20,000 in all)
    assert totals[0] == totals[1] < 6 * 20_000, totals


def test_the_newest_deltas_merge_while_they_are_no_bigger_than_what_comes_after_them() -> None:
    assert deltas_to_merge([1000, 10, 10, 10, 10], 10) == 4  # all small: all merge
    assert deltas_to_merge([1000, 80, 40, 30, 20], 10) == 4  # 10+20=30, +30=60, +40=100, +80
    assert deltas_to_merge([1000, 80, 40, 30, 10], 10) == 1  # 30 > 10+10: the two newest
    assert deltas_to_merge([1000, 500, 10], 10) == 1  # the big merged delta stays


def test_merged_deltas_do_over_any_base_what_the_deltas_did_in_turn() -> None:
    base = rows(("a", 1, 1), ("b", 1, 1), ("c", 1, 1), ("d", 1, 1), group=2)
    first = state_chain.delta(rows(("a", 2, 2), ("e", 2, 2), group=2), pa.array(["a", "b", "e"]), 2)  # b gone
    second = state_chain.delta(rows(("b", 3, 3), ("c", 3, 3), ("c", 4, 4), group=2), pa.array(["b", "c", "e"]), 2)
    merged = state_chain.merge_deltas([first, second])
    assert as_set(state_chain.merge([base, merged])) == as_set(state_chain.merge([base, first, second])) == \
        {("a", 2, 2), ("b", 3, 3), ("c", 3, 3), ("c", 4, 4), ("d", 1, 1)}
    assert sorted(merged.filter(pc.field(TOMBSTONE))[KEY].to_pylist()) == ["e"]  # e's tombstone kept for the base


def test_a_dedups_passed_records_go_beside_the_loaded_rows_and_rows_let_go_at_the_base_read_as_absent() -> None:
    dedup = spec(dedup={"key": "order_id", "ttl": "10s"}).state
    held = rows(("a", 1_000, 0), ("b", 20_000, 0), group=1).select([KEY, GROUP, EVENT])
    loaded = Loaded(frame=None, selected={1: held, 2: rows(("c", 25_000, 0), group=2).select([EVENT, KEY, GROUP])})
    added = pa.table({KEY: ["a", "d", "b"], GROUP: pa.array([1, 2, 1], pa.int32()),
                      EVENT: pa.array([30_000, 31_000, 35_000], pa.int64())})
    clock = EventClock(before=22_000, after=33_000, partitions={}, idle=())
    table = _beside_loaded(dedup, clock, loaded, added)
    # a was let go at the base's watermark (1 s + twice 10 s <= 22 s): Spark read it as absent and
    # added it again; b passed again more than the TTL after its held record: it holds both
    assert sorted(zip(table[KEY].to_pylist(), table[EVENT].to_pylist())) == \
        [("a", 30_000), ("b", 20_000), ("b", 35_000), ("c", 25_000), ("d", 31_000)]
    assert table.schema == added.schema
    assert _beside_loaded(dedup, clock, Loaded(frame=None), added) is added


# ---- timers, TTL and the read plan ------------------------------------------------------------------------
def spec(**state: Any) -> Any:
    return parse_spec({"name": "orders", "source": {"topics": ["in"]}, "transform": "lockstep_examples.orders:parse",
                       "sink": {"topic": "out", "dead_letter_topic": "dlq"},
                       "checkpoints": {"store": "s3://lockstep/checkpoints"},
                       "state": {"key_groups": 4, "event_time": {"column": "created_at"}, **state}}, "orders.yaml")


WINDOW = {"window": {"key": "customer", "size": "10s", "slide": "5s", "allowed_lateness": "1s",
                     "aggregates": {"orders": "count(*)"}}}
DEDUP = {"dedup": {"key": "order_id", "ttl": "60s"}}


def test_window_timers_count_each_pending_key_and_window_once() -> None:
    state = spec(**WINDOW).state
    table = rows(("a", 12_000, 0), ("a", 13_000, 0), ("b", 4_000, 0))
    # a's rows are in windows [5, 15) and [10, 20); b's in [-5, 5) and [0, 10). Ends plus lateness 1 s.
    assert state_chain.timers(table, state, None) == (4, 6_000)
    assert state_chain.timers(table, state, 6_000) == (3, 11_000)
    assert state_chain.timers(table, state, 21_000) == (0, None)


def test_partial_window_timers_are_a_row_each_ending_at_its_start_plus_size_and_lateness() -> None:
    state = spec(**WINDOW).state
    # The same windows as above, kept as partial aggregates: a row per key and open window.
    table = pa.table({KEY: ["a", "a", "b", "b"], WINDOW_START: [5_000, 10_000, -5_000, 0],
                      EVENT: [13_000, 13_000, 4_000, 4_000], GROUP: [0, 0, 0, 0], "orders": [2, 2, 1, 1]})
    assert state_chain.timers(table, state, None) == (4, 6_000)
    assert state_chain.timers(table, state, 6_000) == (3, 11_000)
    assert state_chain.timers(table, state, 21_000) == (0, None)


def test_window_timers_of_a_drained_size_end_each_window_at_its_own_size() -> None:
    """Tumbling windows whose size went from 10 s to 20 s at 60 s (rules.window_drain): a record before 60 s is in
    a 10 s window, a later one in a 20 s window; kept as rows or as partials alike."""
    state = spec(window={"key": "customer", "size": "20s", "allowed_lateness": "1s",
                         "aggregates": {"orders": "count(*)"}}).state
    assert state is not None and state.window is not None
    state = replace(state, window=replace(state.window, earlier=((10_000, 60_000),)))
    table = rows(("a", 55_000, 0), ("b", 61_000, 0))  # windows [50, 60) and [60, 80)
    assert state_chain.timers(table, state, None) == (2, 61_000)
    assert state_chain.timers(table, state, 61_000) == (1, 81_000)
    partials = pa.table({KEY: ["a", "b"], WINDOW_START: [50_000, 60_000], EVENT: [55_000, 61_000], GROUP: [0, 0],
                         "orders": [1, 1]})
    assert state_chain.timers(partials, state, None) == (2, 61_000)
    assert state_chain.timers(partials, state, 61_000) == (1, 81_000)

    # the vectorised sizes are the rule's (`window_drain.size_at`), two switches included
    import numpy as np

    from lockstep.rules.window_drain import size_at

    twice = replace(state.window, earlier=((10_000, 60_000), (20_000, 120_000)))
    times = np.array(list(range(0, 200_000, 5_000)) + [59_999, 60_000, 119_999, 120_000], dtype=np.int64)
    assert state_chain._sizes(twice, times).tolist() == [size_at(twice, int(t)) for t in times]


def test_dedup_timers_are_releases_at_twice_the_ttl_and_released_rows_are_dropped() -> None:
    state = spec(**DEDUP).state
    table = rows(("a", 1_000, 0), ("b", 50_000, 0), ("b", 115_000, 0))
    assert state_chain.timers(table, state, None) == (3, 121_000)
    assert as_set(state_chain.unexpired(table, state, 120_999)) == as_set(table)
    assert as_set(state_chain.unexpired(table, state, 121_000)) == {("b", 50_000, 0), ("b", 115_000, 0)}
    assert as_set(state_chain.unexpired(table, state, 170_000)) == {("b", 115_000, 0)}
    assert state_chain.unexpired(table, state, None).num_rows == 3


def manifest(groups: dict[int, GroupState], key_groups: int = 4, version: int = 2) -> StateManifest:
    return StateManifest(operator="window", key_groups=key_groups, written_by=1,
                         files={g: (f"f{g}",) for g in groups}, columns={}, watermark_ms=0, partitions={},
                         format_version=version, groups=groups if version >= 2 else {})


def test_the_read_plan_reads_whole_only_groups_with_due_timers_and_everything_when_it_must() -> None:
    window = spec(**WINDOW).state
    groups = {0: GroupState(1, 1, (10,), 1, 5_000), 1: GroupState(1, 1, (10,), 1, 9_000), 2: GroupState(1, 1, (10,))}
    plan = read_plan(manifest(groups), window, 6_000, migrating=False)
    assert not plan.full and plan.whole == {0}
    assert read_plan(manifest(groups), window, None, migrating=False).whole == frozenset()
    assert read_plan(manifest(groups), spec(**DEDUP).state, 10_000, migrating=False).whole == frozenset()
    assert "format 1" in read_plan(manifest(groups, version=1), window, 6_000, False).why
    assert "re-keying from 8 to 4" in read_plan(manifest(groups, key_groups=8), window, 6_000, False).why
    assert read_plan(manifest(groups), window, 6_000, migrating=True).full
    assert not read_plan(None, window, 6_000, False).full


# ---- checkpoints against a model ------------------------------------------------------------------------------
class World:
    """Checkpoints of a dedup-like state (one row per key) written by ``_write`` into a fake S3, and
    the same state kept in a dict."""

    def __init__(self, policy: CompactionPolicy, cache: StateCache | None = None) -> None:
        self.s3 = FakeS3()
        self.files = StateFiles(self.s3, BUCKET, ROOT, cache=cache)
        self.spec = replace(spec(**DEDUP), state=replace(spec(**DEDUP).state, compaction=policy))
        self.model: dict[str, tuple[int, int]] = {}
        self.manifests: list[StateManifest] = []
        self.cid = 0

    def checkpoint(self, changes: dict[str, int | None], event: int) -> StateManifest:
        """Touch keys: a value is the key's new n, None deletes it. Reads as the run does: only the
        touched keys of the touched groups."""
        self.cid += 1
        base = self.manifests[-1] if self.manifests else None
        state = self.spec.state
        group_of = {k: hash_group(k) for k in changes}
        plan = read_plan(base, state, None, migrating=False)
        loaded = Loaded(frame=None)  # type: ignore[arg-type]  # _write never reads the DataFrame
        for g in sorted({*group_of.values()} & set(base.files if base else ())):
            chain = self.files.chain(base, g)  # type: ignore[arg-type]
            loaded.chains[g] = chain
            picked = state_chain.merge([state_chain.select(t, pa.array([k for k in changes if group_of[k] == g],
                                                                                  pa.string()))
                                        for t in chain])
            if picked is not None and picked.num_rows:
                loaded.selected[g] = picked
        for k, n in changes.items():
            if n is None:
                self.model.pop(k, None)
            else:
                self.model[k] = (event, n)
        live = [(k, *self.model[k]) for k in changes if k in self.model]
        table = pa.table({KEY: pa.array([k for k, _, _ in live], pa.string()), GROUP: pa.array([group_of[k] for k, _, _ in live], pa.int32()),
                          EVENT: pa.array([e for _, e, _ in live], pa.int64()),
                          "n": pa.array([n for _, _, n in live], pa.int64())})
        clock = EventClock(before=None, after=None, partitions={"in:0": PartitionTime(event, event)}, idle=())
        metrics: dict[str, float] = {}
        made = _write(self.spec, self.cid, base, plan, loaded, table, self.files, {KEY: "string", "n": "bigint"}, clock,
                      metrics)
        self.manifests.append(made)
        self.metrics = metrics
        return made

    def committed(self) -> set[tuple[Any, ...]]:
        return as_set(self.files.read_state(self.manifests[-1]))

    def expected(self) -> set[tuple[Any, ...]]:
        return {(k, e, n) for k, (e, n) in self.model.items()}


def hash_group(key: str) -> int:
    return sum(key.encode()) % 4


def test_random_checkpoints_write_deltas_compact_and_always_read_back_as_the_model() -> None:
    world = World(CompactionPolicy(max_deltas=3, max_delta_ratio=1000))
    rng = random.Random(27)
    keys = [f"k{i}" for i in range(60)]
    world.checkpoint({k: 0 for k in keys}, 1)  # every key: a base per group
    assert world.manifests[-1].delta_count == 0 and world.metrics["compactions"] == 0
    compacted = merged = packed = 0
    for event in range(2, 40):
        touched = rng.sample(keys, rng.randint(1, 8))
        before, previous = dict(world.model), world.manifests[-1]
        made = world.checkpoint({k: None if rng.random() < 0.2 else event for k in touched}, event)
        compacted += int(world.metrics["compactions"])
        merged += int(world.metrics["delta_merges"])
        m = world.metrics
        assert m["delta_bytes"] + m["compaction_bytes"] + m["base_bytes"] == m["bytes_written"]
        assert (m["compaction_bytes"] > 0) == (m["compactions"] > 0)
        assert world.committed() == world.expected(), f"checkpoint {world.cid}"
        assert made.keys == len(world.model) and made.rows == len(world.model)
        # Each file's bytes are its groups' shares (a pack's, split by its rows), all of them for a file this
        # checkpoint wrote; a pack some group's merge has since replaced its rows of counts the others' shares.
        shares: dict[str, int] = {}
        for g, files in made.files.items():
            for k, b in zip(files, made.groups[g].file_bytes, strict=True):
                shares[k] = shares.get(k, 0) + b
        assert made.bytes == sum(shares.values())
        assert all(0 <= n <= len(world.s3.body(BUCKET, k)) for k, n in shares.items()), shares
        assert all(shares[k] == len(world.s3.body(BUCKET, k)) for k in set(made.all_files) - set(previous.all_files))
        assert all(len(files) <= 4 for files in made.files.values()), "a chain is compacted past 3 deltas"
        # Only the groups whose state changed got a file (deleting a key that was not there changes nothing),
        # and their deltas (merged or not) one file between them: the checkpoint's pack.
        changed = {hash_group(k) for k in touched if before.get(k) != world.model.get(k)}
        new = set(made.all_files) - set(previous.all_files)
        assert world.metrics["files_written"] == len(new)
        assert {g for g, files in made.files.items() if files[-1] in new} == changed & set(made.files)
        new_deltas = {files[-1] for files in made.files.values() if len(files) > 1 and files[-1] in new}
        assert len(new_deltas) <= 1 and len(new) == len(new_deltas) + m["compactions"], (new, dict(m))
        packs = {g for g, files in made.files.items() if len(files) > 1 and files[-1] in new}
        packed += len(packs) > 1
    assert compacted > 0 and merged > 0 and packed > 0 and world.manifests[-1].delta_count > 0, (compacted, merged)
    # Round-trip through JSON, as the checkpoint's metadata carries it.
    again = StateManifest.from_json(world.manifests[-1].to_json(), "completed.json")
    assert again == world.manifests[-1] and again.incremental


def test_a_checkpoint_that_compacts_uploads_the_compaction_first(monkeypatch: pytest.MonkeyPatch) -> None:
    # state.mid_upload pauses (or crashes) the run after its first file: when the checkpoint compacts a
    # chain, that is the compaction's file, so a fault aimed there meets a chain being rewritten.
    from lockstep.model import failpoints

    first: list[str] = []
    monkeypatch.setattr(failpoints, "hit", lambda name, detail="": first.append(detail) if name == "state.mid_upload" else None)
    world = World(CompactionPolicy(max_deltas=3, max_delta_ratio=1000))
    rng = random.Random(5)
    keys = [f"k{i}" for i in range(200)]
    world.checkpoint({k: 0 for k in keys}, 1)
    assert first == [f" (checkpoint 1, base {world.manifests[-1].files[0][0]})"]
    seen = set()
    for event in range(2, 40):
        first.clear()
        world.checkpoint({k: event for k in rng.sample(keys, 8)}, event)
        kind = first[0].split(", ")[1].split()[0]
        m = world.metrics
        if m["compactions"]:
            assert kind == "compaction", (world.cid, first, dict(m))
        elif m["delta_merges"]:
            assert kind == "delta-merge", (world.cid, first, dict(m))
        else:
            assert kind == "delta", (world.cid, first, dict(m))
        seen.add((kind, m["files_written"] > 1))
        assert len(first) == 1 and world.committed() == world.expected()
    # A compaction came first in checkpoints that wrote other files after it (the deltas' pack); one that did not
    # compact wrote one file, its deltas' pack.
    assert {("compaction", True), ("delta", False)} <= seen and ("delta", True) not in seen, seen


def test_a_checkpoints_deltas_go_in_one_pack_each_group_names_and_another_attempts_pack_is_never_replaced() -> None:
    world = World(CompactionPolicy(max_deltas=30, max_delta_ratio=1000))
    keys = [f"k{i}" for i in range(40)]
    world.checkpoint({k: 0 for k in keys}, 1)
    taken = world.files.pack_key(2)  # a slower attempt of checkpoint 2 wrote other bytes there
    world.files.put_table(taken, b"another attempt's pack")
    made = world.checkpoint({k: 2 for k in keys[:12]}, 2)  # keys of all 4 groups: one file for their deltas
    assert world.metrics["files_written"] == 1 and world.committed() == world.expected()
    last = {files[-1] for files in made.files.values()}
    assert len(last) == 1 and len(made.files) == 4
    pack = last.pop()
    assert pack != taken and pack.startswith(taken.rsplit(".parquet", 1)[0])  # under its content's name
    assert world.s3.body(BUCKET, taken) == b"another attempt's pack"
    # The pack holds each group's delta; each group reads its own rows of it, and its share of the bytes.
    rows = state_chain.read(world.s3.body(BUCKET, pack))
    assert sorted(rows[KEY].to_pylist()) == sorted(keys[:12])
    for g in made.files:
        assert set(state_chain.of_group(rows, g)[KEY].to_pylist()) == {k for k in keys[:12] if hash_group(k) == g}
    assert sum(made.groups[g].file_bytes[-1] for g in made.files) == len(world.s3.body(BUCKET, pack))
    assert made.file_count == 5 and made.delta_count == 1
    # `lockstep state show` reads each group's rows of the pack, once.
    from lockstep.ops.state_report import read_rows

    shown = read_rows(world.files, made, limit=100)
    assert sorted(r["key"] for r in shown.rows) == sorted(keys) and not shown.more
    # A checkpoint that changes one group writes that group's own delta file.
    made = world.checkpoint({"k1": 3}, 3)
    assert made.files[hash_group("k1")][-1] == world.files.key(3, hash_group("k1"), delta=True)
    assert world.committed() == world.expected()


def test_a_delta_is_the_size_of_the_keys_changed_not_of_the_state() -> None:
    written = {}
    for size in (2_000, 20_000):
        world = World(CompactionPolicy())
        world.checkpoint({f"k{i}": i for i in range(size)}, 1)
        full = world.metrics["bytes_written"]
        world.checkpoint({"k1": 7, "k2": None, "k3": 9}, 2)
        assert world.committed() == world.expected()
        assert world.metrics["files_written"] <= 3
        written[size] = (full, world.metrics["bytes_written"])
    (small_full, small_delta), (big_full, big_delta) = written[2_000], written[20_000]
    assert big_full > 5 * small_full, written  # the state is 10 times bigger ...
    assert big_delta < 1.2 * small_delta, written  # ... and the same change costs the same bytes


def test_keys_left_as_they_were_are_not_changed_keys() -> None:
    before = rows(("a", 1, 1), ("b", 2, 2), ("c", 3, 3), ("c", 4, 4))
    after = rows(("a", 1, 1), ("b", 2, 9), ("c", 3, 3), ("c", 4, 4), ("d", 5, 5))
    assert sorted(state_chain.unchanged_keys(after, before).to_pylist()) == ["a", "c"]
    # a row more or less for a key (a window's rows), or a null in a row: changed
    assert state_chain.unchanged_keys(rows(("c", 3, 3)), before).to_pylist() == []
    with_null = pa.table({KEY: ["a"], GROUP: pa.array([0], pa.int32()), EVENT: pa.array([1], pa.int64()),
                          "n": pa.array([None], pa.int64())})
    assert state_chain.unchanged_keys(with_null, with_null).to_pylist() == []
    assert state_chain.unchanged_keys(after, None).to_pylist() == []
    assert state_chain.unchanged_keys(after, before.drop_columns(["n"])).to_pylist() == []  # other columns


def test_a_checkpoint_that_touches_keys_without_changing_them_uploads_nothing_for_them() -> None:
    world = World(CompactionPolicy())
    world.checkpoint({f"k{i}": i for i in range(2_000)}, 1)
    same = {f"k{i}": i for i in range(0, 2_000, 10)}  # 200 keys touched, e.g. a dedup's duplicates
    world.model.update({k: (1, n) for k, n in same.items()})
    world.checkpoint({k: v for k, v in same.items()}, 1)
    assert world.metrics["files_written"] == 0 and world.metrics["groups_unchanged"] == 4
    assert world.manifests[-1].files == world.manifests[-2].files and world.committed() == world.expected()
    world.checkpoint({**same, "k5": 55}, 1)  # the same 200 keys and one changed: a delta of that one key
    assert world.metrics["files_written"] == 1 and world.committed() == world.expected()
    delta = state_chain.read(world.s3.body(BUCKET, world.manifests[-1].files[hash_group("k5")][-1]))
    assert delta[KEY].to_pylist() == ["k5"]


def test_garbage_collection_after_a_compaction_keeps_every_file_a_retained_manifest_names() -> None:
    world = World(CompactionPolicy(max_deltas=1, max_delta_ratio=1000))
    world.checkpoint({"a": 1, "b": 1, "c": 1, "d": 1}, 1)
    for event in range(2, 6):
        world.checkpoint({"a": event}, event)  # a's group: base, delta, then compaction, ...
    listing = world.files.listing()
    # A crash between the compaction (checkpoint 5's run) and its garbage collection: checkpoints 4 and
    # 5 are retained, so every file either names stays, whatever folder it is in.
    retained = {*world.manifests[3].all_files, *world.manifests[4].all_files}
    doomed = unreferenced(listing, retained, {k: world.files.checkpoint_of(k) for k in listing}, 5, set())
    assert not set(doomed) & retained
    world.files.delete(doomed)
    assert as_set(world.files.read_state(world.manifests[3])) and world.committed() == world.expected()
    assert set(doomed) == set(listing) - retained and doomed, "the files only older checkpoints named go"


# ---- the local cache of decoded files -----------------------------------------------------------------
def test_a_checkpoint_reads_the_files_it_or_another_checkpoint_wrote_here_from_the_cache(tmp_path) -> None:
    world = World(CompactionPolicy(), cache=StateCache(tmp_path / "cache"))
    world.checkpoint({f"k{i}": i for i in range(200)}, 1)
    world.checkpoint({"k1": 7, "k2": None}, 2)
    made = world.manifests[-1]
    assert all(len(g.digests) == len(made.files[n]) for n, g in made.groups.items())
    assert len(list((tmp_path / "cache").glob("*.arrow"))) == made.file_count  # each written file, once
    for key in made.all_files:  # S3 loses nothing here; the cache alone must answer
        world.s3.delete_object(Bucket=BUCKET, Key=key)
    assert world.committed() == world.expected()


def test_a_file_changed_in_s3_is_refused_by_its_digest_and_never_served_stale(tmp_path) -> None:
    world = World(CompactionPolicy(), cache=None)
    made = world.checkpoint({"a": 1, "b": 2}, 1)
    key = made.all_files[0]
    world.s3.put_object(Bucket=BUCKET, Key=key, Body=state_chain.parquet(rows(("a", 9, 9))))
    with pytest.raises(Exception, match="does not match the digest .* checkpoint 1 records.*restore the pipeline "
                                        "from a savepoint"):
        world.files.read_state(made)


def test_the_cache_keeps_under_its_size_dropping_the_least_recently_used(tmp_path) -> None:
    import os
    import time

    cache = StateCache(tmp_path, max_bytes=1)
    cache.put("a", rows(("a", 1, 1)))
    assert cache.get("a") is not None  # the newest entry stays even over the limit
    old = time.time() - 100
    os.utime(tmp_path / "a.arrow", (old, old))
    cache.put("b", rows(("b", 1, 1)))
    assert cache.get("a") is None and cache.get("b") is not None
    assert StateCache(tmp_path / "missing").get("x") is None


def test_a_batch_of_entries_is_trimmed_once_keeping_every_entry_of_the_batch(tmp_path) -> None:
    import os
    import time

    cache = StateCache(tmp_path, max_bytes=1)
    cache.put("old", rows(("o", 1, 1)))
    old = time.time() - 100
    os.utime(tmp_path / "old.arrow", (old, old))
    cache.put_all([("a", rows(("a", 1, 1))), ("b", rows(("b", 1, 1)))])
    # Over the limit, the batch stays whole (trimmed after it, not after each entry) and the older entry goes.
    assert cache.get("old") is None
    assert as_set(cache.get("a")) == {("a", 1, 1)} and as_set(cache.get("b")) == {("b", 1, 1)}


def test_files_read_while_caching_later_reach_the_cache_only_after_it_and_settle(tmp_path) -> None:
    writer = World(CompactionPolicy(), cache=None)
    made = writer.checkpoint({f"k{i}": i for i in range(50)}, 1)
    files = StateFiles(writer.s3, BUCKET, ROOT, cache=StateCache(tmp_path / "cache"))
    with files.caching_later():
        with files.caching_later():  # nested: the outer one's end writes them
            read = files.read_state(made)
        assert not list((tmp_path / "cache").glob("*.arrow"))  # held back: the reads did not wait on the disk
    files.settle_cache()
    assert len(list((tmp_path / "cache").glob("*.arrow"))) == made.file_count
    for key in made.all_files:  # the cache alone answers now
        writer.s3.delete_object(Bucket=BUCKET, Key=key)
    again = files.read_state(made)
    assert read is not None and again is not None and as_set(again) == as_set(read)


def test_a_state_file_writes_keys_as_shared_prefixes_and_event_times_without_a_dictionary() -> None:
    """Keys are unique, sorted and alike (``o1234567``): prefix-encoded they take far less than the default's
    overflowing dictionary; event times are as many as rows. Columns with repeats keep their dictionary."""
    import io

    import pyarrow.parquet as pq

    n = 20_000
    table = pa.table({KEY: [f"o{i}" for i in range(n)], EVENT: [1_700_000_000_000 + 7919 * i for i in range(n)],
                      GROUP: [3] * n, "currency": [("EUR", "USD", "GBP")[i % 3] for i in range(n)]})
    body = state_chain.parquet(table)
    meta = pq.ParquetFile(io.BytesIO(body)).metadata
    encodings = {meta.row_group(0).column(i).path_in_schema: set(meta.row_group(0).column(i).encodings)
                 for i in range(meta.num_columns)}
    assert "DELTA_BYTE_ARRAY" in encodings[KEY] and "RLE_DICTIONARY" not in encodings[KEY], encodings
    assert "RLE_DICTIONARY" not in encodings[EVENT], encodings
    assert "RLE_DICTIONARY" in encodings[GROUP] and "RLE_DICTIONARY" in encodings["currency"], encodings
    # What it reads back is the table, sorted by key; and it is smaller than Parquet's defaults make it.
    assert state_chain.read(body).equals(table.sort_by([(KEY, "ascending")]))
    default = io.BytesIO()
    pq.write_table(table.sort_by([(KEY, "ascending")]), default, compression="zstd")
    assert len(body) < 0.8 * len(default.getvalue()), (len(body), len(default.getvalue()))


def test_a_state_file_whose_key_is_not_text_keeps_the_defaults() -> None:
    import io

    import pyarrow.parquet as pq

    table = pa.table({KEY: [5, 3, 9], GROUP: [0, 0, 0]})
    meta = pq.ParquetFile(io.BytesIO(state_chain.parquet(table))).metadata
    assert "DELTA_BYTE_ARRAY" not in meta.row_group(0).column(0).encodings
    assert state_chain.read(state_chain.parquet(table))[KEY].to_pylist() == [3, 5, 9]


def test_nested_columns_keep_the_dictionary_on_their_leaves() -> None:
    """A state function's columns may be structs, lists or maps: the dictionary applies to Parquet's leaf
    columns, which a top-level name does not name."""
    import io

    import pyarrow.parquet as pq

    n = 3_000
    table = pa.table({KEY: [f"k{i}" for i in range(n)], EVENT: list(range(n)),
                      "s": pa.array([{"currency": ("EUR", "USD")[i % 2], "n": i % 3} for i in range(n)]),
                      "l": pa.array([["a", "b"][: 1 + i % 2] for i in range(n)]),
                      "m": pa.array([[("x", i % 2)] for i in range(n)], pa.map_(pa.string(), pa.int64()))})
    body = state_chain.parquet(table)
    meta = pq.ParquetFile(io.BytesIO(body)).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: set(meta.column(i).encodings) for i in range(meta.num_columns)}
    leaves = ["s.currency", "s.n", "l.list.element", "m.key_value.key", "m.key_value.value"]
    assert sorted(encodings) == sorted([KEY, EVENT, *leaves]), encodings
    assert all("RLE_DICTIONARY" in encodings[leaf] for leaf in leaves), encodings
    assert state_chain.read(body).equals(table.sort_by([(KEY, "ascending")]))
