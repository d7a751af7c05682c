"""The soak's fault schedule and bad-input placement: pure, seeded, replayable."""
from __future__ import annotations

from collections import Counter

from lockstep.model.failpoints import FAILPOINTS
from lockstep_soak.schedule import (
    ANCHORABLE,
    ANCHORS,
    BROKER_COMMIT_ANCHOR,
    CONNECT_FAULTS,
    DESCRIPTIONS,
    GC_ANCHOR,
    LEAVES_GARBAGE,
    PARTIAL_COMMIT_ANCHOR,
    STATE_ANCHORS,
    STATEFUL_CASES,
    STATELESS_CASES,
    UPLOAD_ANCHOR,
    BadCase,
    FaultKind,
    anchor_faults,
    family,
    kinds_for,
    plan_bad_input,
    plan_faults,
)

ALL = tuple(FaultKind)


def test_the_same_seed_plans_the_same_faults_and_another_seed_others():
    assert plan_faults(42, 50, ALL) == plan_faults(42, 50, ALL)
    assert plan_faults(42, 50, ALL) != plan_faults(43, 50, ALL)


def test_every_kind_is_planned_once_before_any_repeats():
    faults = plan_faults(7, 16, ALL)  # 12 cycles with faults (every 4th is clean) for the 11 kinds
    first_of_each_cycle = [next(f for f in faults if f.cycle == c) for c in sorted({f.cycle for f in faults})]
    assert {f.kind for f in first_of_each_cycle[: len(ALL)]} == set(ALL)


def test_every_fourth_cycle_is_clean_so_the_pipeline_makes_progress():
    faults = plan_faults(1, 40, ALL)
    assert not [f for f in faults if f.cycle % 4 == 3]
    assert {f.cycle for f in faults} == {c for c in range(40) if c % 4 != 3}


def test_a_cycle_never_holds_two_faults_of_one_family_nor_a_paired_late_commit():
    by_cycle: dict[int, list] = {}
    for f in plan_faults(3, 400, ALL, per_cycle=3, more=0.8):
        by_cycle.setdefault(f.cycle, []).append(f)
    sizes = Counter(len(fs) for fs in by_cycle.values())
    assert sizes[2] and sizes[3] and not set(sizes) - {1, 2, 3}
    for fs in by_cycle.values():
        assert len({family(f.kind) for f in fs}) == len(fs)
        if len(fs) > 1:
            assert not {FaultKind.COMMIT_LATE, FaultKind.PARTIAL_COMMIT} & {f.kind for f in fs}


def test_one_fault_per_cycle_when_asked():
    faults = plan_faults(3, 100, ALL, per_cycle=1)
    assert len({f.cycle for f in faults}) == len(faults)


def test_moments_and_hold_times_stay_in_their_bounds():
    for f in plan_faults(5, 200, ALL, hold_s=(2.0, 12.0)):
        assert 0.0 <= f.at < 1.0
        if f.kind in (FaultKind.KILL_RUN, FaultKind.COMMIT_LATE, FaultKind.PARTIAL_COMMIT):
            assert f.hold_s == 0.0
        else:
            assert 2.0 <= f.hold_s <= 12.0


def test_a_late_commit_is_rarer_than_the_other_kinds():
    counts = Counter(f.kind for f in plan_faults(9, 2000, ALL))
    assert counts[FaultKind.COMMIT_LATE] < min(n for k, n in counts.items() if k is not FaultKind.COMMIT_LATE)


def test_only_the_kinds_asked_for_are_planned():
    kinds = (FaultKind.S3_SLOW, FaultKind.KILL_RUN)
    assert {f.kind for f in plan_faults(2, 100, kinds)} == set(kinds)
    assert plan_faults(2, 100, ()) == []


def test_bad_input_is_placed_per_cycle_by_seed_and_uses_every_case():
    placed = plan_bad_input(11, 3, 200, 4)
    assert len(placed) == 4 and all(0 <= i < 200 for i in placed)
    assert placed == plan_bad_input(11, 3, 200, 4)
    assert placed != plan_bad_input(11, 4, 200, 4)
    assert set(plan_bad_input(11, 0, 200, 4).values()) == set(STATELESS_CASES)
    assert set(plan_bad_input(11, 0, 200, 4, STATEFUL_CASES).values()) == set(STATEFUL_CASES)
    assert BadCase.LATE not in STATELESS_CASES and BadCase.OVERSIZE not in STATEFUL_CASES
    assert plan_bad_input(11, 0, 3, 10).keys() == {0, 1, 2}
    assert plan_bad_input(11, 0, 0, 4) == {}


def test_a_stateful_soak_anchors_some_faults_to_the_state_moments_and_changes_nothing_else():
    planned = plan_faults(11, 200, ALL, per_cycle=3, more=0.8)
    anchored = anchor_faults(planned, 11)
    assert anchored == anchor_faults(planned, 11)  # replayable from the seed
    moved = [f for f in anchored if f.anchor and f.kind not in ANCHORS]
    alone = {f.cycle for f in moved}
    # The other cycles keep their faults; an anchored fault's cycle holds it alone, as planned but for its moment.
    assert [f for f in anchored if f.cycle not in alone] == [f for f in planned if f.cycle not in alone]
    assert all([g for g in anchored if g.cycle == f.cycle] == [f] for f in moved)
    assert all(any((p.cycle, p.kind, p.at, p.hold_s) == (f.cycle, f.kind, f.at, f.hold_s) for p in planned) for f in moved)
    assert {f.anchor for f in moved} == set(STATE_ANCHORS) and set(STATE_ANCHORS) <= set(FAILPOINTS)
    assert {f.kind for f in moved} == set(ANCHORABLE)  # a kill -9 and every S3 fault, nothing else
    assert len({f.cycle for f in moved}) == len(moved)  # at most one anchored fault per cycle
    anchorable_cycles = {f.cycle for f in planned if f.kind in ANCHORABLE}
    assert 0.6 < len(moved) / len(anchorable_cycles) < 0.95
    assert moved[0].to_json()["anchor"] == moved[0].anchor
    assert "anchor" not in next(f for f in anchored if not f.anchor).to_json()
    # A partial commit is planned at its own anchor already, and stays as planned.
    partial = [f for f in anchored if f.kind is FaultKind.PARTIAL_COMMIT]
    assert partial and partial == [f for f in planned if f.kind is FaultKind.PARTIAL_COMMIT]


def test_a_fault_at_the_garbage_collection_follows_a_run_failed_with_a_state_file_uploaded():
    # The soak retains every checkpoint: a commit has state garbage to collect when the cycle before it
    # failed its run after it uploaded a state file, which a kill (or S3 gone) at the upload does.
    planned = plan_faults(683, 200, ALL, per_cycle=3, more=0.9)
    anchored = anchor_faults(planned, 683)
    by_cycle = {f.cycle: f for f in anchored if f.anchor in STATE_ANCHORS}
    at_gc = [f for f in by_cycle.values() if f.anchor == GC_ANCHOR]
    assert len(at_gc) >= 20
    for f in at_gc:
        before = by_cycle.get(f.cycle - 1)
        assert before is not None and before.anchor == UPLOAD_ANCHOR and before.kind in LEAVES_GARBAGE
        # An S3 fault when the cycle has one: that is what the collection's deletes meet.
        s3 = [p for p in planned if p.cycle == f.cycle and p.kind in ANCHORABLE and p.kind is not FaultKind.KILL_RUN]
        assert f.kind is not FaultKind.KILL_RUN or not s3
    # A fault that leaves garbage at the upload is chosen where the next cycle can collect it under a fault.
    leaving = [f for f in by_cycle.values() if f.anchor == UPLOAD_ANCHOR and f.kind in LEAVES_GARBAGE]
    assert sum(1 for f in leaving if f.cycle + 1 in by_cycle and by_cycle[f.cycle + 1].anchor == GC_ANCHOR) == len(at_gc)
    assert {FaultKind.KILL_RUN, FaultKind.S3_RESTART} == set(LEAVES_GARBAGE)


def test_a_partial_commit_lands_alone_at_the_commit_between_its_transactions_in_either_soak():
    planned = plan_faults(21, 400, ALL, per_cycle=3, more=0.9)
    partial = [f for f in planned if f.kind is FaultKind.PARTIAL_COMMIT]
    assert len(partial) > 20
    assert {f.anchor for f in partial} == {PARTIAL_COMMIT_ANCHOR} and PARTIAL_COMMIT_ANCHOR in FAILPOINTS
    assert PARTIAL_COMMIT_ANCHOR == "commit.between_commits"
    assert all(f.hold_s == 0.0 for f in partial)
    for f in partial:  # never paired: another fault could kill or fail the cycle before its commit
        assert [g.kind for g in planned if g.cycle == f.cycle] == [FaultKind.PARTIAL_COMMIT]
    assert {f.anchor for f in planned if f.kind not in ANCHORS} == {None}  # the stateless soak's
    assert [f for f in anchor_faults(planned, 21) if f.kind is FaultKind.PARTIAL_COMMIT] == partial  # the stateful's
    assert partial[0].to_json()["anchor"] == PARTIAL_COMMIT_ANCHOR


def test_a_duplicate_run_is_paired_like_any_fault_and_holds_the_first_attempt_within_the_bounds():
    planned = plan_faults(23, 400, ALL, per_cycle=3, more=0.9, hold_s=(2.0, 12.0))
    duplicates = [f for f in planned if f.kind is FaultKind.DUPLICATE_RUN]
    assert len(duplicates) > 20
    assert all(2.0 <= f.hold_s <= 12.0 and 0.0 <= f.at < 1.0 and f.anchor is None for f in duplicates)
    assert any(len([g for g in planned if g.cycle == f.cycle]) > 1 for f in duplicates)
    assert FaultKind.DUPLICATE_RUN not in ANCHORABLE  # it is timed from its run step's start, not at a failpoint


def test_every_kind_is_described_and_a_partial_commit_is_weighed_like_the_common_kinds():
    assert set(DESCRIPTIONS) == set(FaultKind)
    counts = Counter(f.kind for f in plan_faults(9, 2000, ALL))
    # A partial commit is never a cycle's second or third fault, so it is rarer than a kill, but it
    # costs a transaction timeout without the late commit's lower weight.
    assert 1.5 * counts[FaultKind.COMMIT_LATE] < counts[FaultKind.PARTIAL_COMMIT] < counts[FaultKind.KILL_RUN]
    assert 0.7 * counts[FaultKind.KILL_RUN] < counts[FaultKind.DUPLICATE_RUN], counts


def test_a_broker_lost_during_the_commit_lands_alone_as_the_endtxns_go_out_to_the_coordinators_broker():
    planned = plan_faults(29, 400, ALL, per_cycle=3, more=0.9)
    lost = [f for f in planned if f.kind is FaultKind.BROKER_COMMIT]
    assert len(lost) > 20
    assert {f.anchor for f in lost} == {BROKER_COMMIT_ANCHOR} and BROKER_COMMIT_ANCHOR in FAILPOINTS
    assert all(2.0 <= f.hold_s <= 12.0 for f in lost)  # the broker stays down for a hold time, then restarts
    for f in lost:  # never paired: another fault could end the cycle before its commit
        assert [g.kind for g in planned if g.cycle == f.cycle] == [FaultKind.BROKER_COMMIT]
    assert family(FaultKind.BROKER_COMMIT) == family(FaultKind.BROKER_COORDINATOR) == "kafka"
    assert [f for f in anchor_faults(planned, 29) if f.kind is FaultKind.BROKER_COMMIT] == lost  # the stateful's


def test_a_soak_in_submit_mode_never_plans_a_kill_of_a_connect_server_it_does_not_use():
    assert CONNECT_FAULTS == (FaultKind.KILL_CONNECT,)
    assert kinds_for("connect") == ALL
    assert FaultKind.KILL_CONNECT not in kinds_for("submit") and len(kinds_for("submit")) == len(ALL) - 1
    chosen = (FaultKind.KILL_CONNECT, FaultKind.S3_SLOW)
    assert kinds_for("connect", chosen) == chosen and kinds_for("submit", chosen) == (FaultKind.S3_SLOW,)
    assert all(k in DESCRIPTIONS for k in ALL)
