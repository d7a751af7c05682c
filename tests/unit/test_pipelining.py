"""Pipelined checkpoints over in-memory fakes (tests/support/fake_pipeline.py): the next checkpoint planned on
top of one another live run still carries, its commit after that one, and its abort with it; recovery leaving
a live run's checkpoint alone and aborting what was planned on top of an aborted one (lockstep.rules.pipelining,
lockstep.rules.recovery, lockstep.steps.plan and commit)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from lockstep.errors import CheckpointError, TransientError
from lockstep.model.checkpoint import CheckpointStatus
from lockstep.rules import pipelining
from lockstep.steps import commit as commit_step
from lockstep.steps import coordinator
from tests.support.fake_kafka import COMPLETE_COMMIT, ONGOING
from tests.support.fake_pipeline import SOURCE, FakeWorld, fake_world, spec
from tests.unit.test_coordinator import dead, ends, starts, status
from tests.unit.test_stateful_coordinator import STATE, written


def only_run_1_alive(run_id: str) -> bool:
    return run_id == "run-1"


ON = {"pipelined": True}  # off by default


@pytest.fixture
def world(monkeypatch) -> FakeWorld:
    w = fake_world(monkeypatch, spec(checkpoints=ON), partitions=2)
    w.source.produce(SOURCE, 0, 30)
    w.source.produce(SOURCE, 1, 20)
    return w


def two_in_flight(w: FakeWorld) -> tuple[coordinator.Plan, coordinator.Plan]:
    """Checkpoint 1 of live run-1, prepared, then checkpoint 2 planned on top of it by run-2."""
    first = coordinator.plan(w.pipeline, "run-1")
    w.prepare(first)
    w.source.produce(SOURCE, 0, 7)
    w.source.produce(SOURCE, 1, 3)
    second = coordinator.plan(w.pipeline, "run-2", run_alive=only_run_1_alive)
    return first, second


# ---- plan -----------------------------------------------------------------------------------------------
def test_the_next_checkpoint_is_planned_on_top_of_a_live_runs_prepared_checkpoint_and_leaves_it_alone(
        world: FakeWorld):
    first, second = two_in_flight(world)
    assert second.claim.after == 1
    assert starts(second) == ends(first)
    assert second.range_plan.total_records == 10
    assert status(world, 1) is CheckpointStatus.PREPARED
    assert world.committer.fenced == [] and world.committer.committed == []  # nothing of run-1's was touched
    assert [world.committer.state(f"{world.pipeline.spec.transactions.id_prefix}-1-{i}")
            for i in range(first.claim.task_count)] == [ONGOING] * first.claim.task_count


@pytest.mark.parametrize("state", [None, STATE], ids=["stateless", "stateful"])
def test_a_checkpoint_is_planned_on_top_only_once_the_one_below_is_prepared(monkeypatch, state):
    """Not while it runs: the runs of a pipeline never overlap (lockstep.rules.pipelining says what that did to
    latency), only a run and the commit before it."""
    w = fake_world(monkeypatch, spec(checkpoints=ON, **({"state": state} if state else {})), partitions=2)
    w.source.produce(SOURCE, 0, 30)
    first = coordinator.plan(w.pipeline, "run-1")
    w.start(first)
    with pytest.raises(coordinator.CheckpointInFlight, match="checkpoint 1 is still running: the next checkpoint"):
        coordinator.plan(w.pipeline, "run-2", run_alive=only_run_1_alive)
    assert list(w.store.checkpoint_ids()) == [1] and w.committer.fenced == []
    prepared = written(w.store.state_files(), 1) if state else None
    w.prepare(first, state=prepared)
    second = coordinator.plan(w.pipeline, "run-2", run_alive=only_run_1_alive)
    assert second.claim.after == 1
    assert second.claim.state_base == prepared
    assert starts(second) == ends(first)


def test_a_stateful_pipelined_checkpoint_commits_the_state_it_prepared_on_top_of_the_one_below(monkeypatch):
    w = fake_world(monkeypatch, spec(checkpoints=ON, state=STATE), partitions=2)
    w.source.produce(SOURCE, 0, 30)
    first = coordinator.plan(w.pipeline, "run-1")
    w.prepare(first, state=written(w.store.state_files(), 1))
    w.source.produce(SOURCE, 1, 5)
    second = coordinator.plan(w.pipeline, "run-2", run_alive=only_run_1_alive)
    state = written(w.store.state_files(), 2)
    w.prepare(second, state=state)
    coordinator.commit(w.pipeline, 1)
    assert coordinator.commit(w.pipeline, 2).status is CheckpointStatus.COMPLETED
    assert w.store.view(2).completed.state == state
    third = coordinator.plan(w.pipeline, "run-3", run_alive=dead)
    assert third.claim.state_base == state and third.claim.after is None


def test_at_most_one_checkpoint_is_in_flight_below_the_next(world: FakeWorld):
    two_in_flight(world)
    with pytest.raises(coordinator.CheckpointInFlight, match="checkpoints 1, 2 are in flight"):
        coordinator.plan(world.pipeline, "run-3", run_alive=lambda r: r in ("run-1", "run-2"))
    assert list(world.store.checkpoint_ids()) == [1, 2]


def test_a_restore_waits_for_the_checkpoint_in_flight(world: FakeWorld):
    coordinator.plan(world.pipeline, "run-1")
    with pytest.raises(coordinator.CheckpointInFlight, match="checkpoint 1 is still in flight"):
        coordinator.plan(world.pipeline, "run-2", restore="checkpoint:1", run_alive=only_run_1_alive)
    assert status(world, 1) is CheckpointStatus.CLAIMED


# ---- commit ---------------------------------------------------------------------------------------------
def test_a_pipelined_checkpoint_commits_after_the_one_below_it(world: FakeWorld):
    _, second = two_in_flight(world)
    world.prepare(second)
    coordinator.commit(world.pipeline, 1)
    outcome = coordinator.commit(world.pipeline, 2)
    assert outcome.status is CheckpointStatus.COMPLETED
    assert world.store.view(2).completed.end_offsets == ends(second)


def test_a_pipelined_checkpoint_waits_for_the_one_below_and_then_retries(monkeypatch):
    """Its commit waits while the checkpoint below is in flight, at most the time its transactions have left
    (less the commit margin): here 1 s, then a transient error, and nothing is committed or aborted."""
    w = fake_world(monkeypatch, spec(checkpoints=ON, transactions={"timeout_ms": 61_000, "commit_margin_ms": 60_000}),
                   partitions=2)
    w.source.produce(SOURCE, 0, 30)
    monkeypatch.setattr(commit_step, "PREDECESSOR_LOOK_S", 0.05)
    _, second = two_in_flight(w)
    prepared = w.prepare(second)
    with pytest.raises(TransientError, match="checkpoint 2: checkpoint 1, which it was planned on top of while in "
                                             "flight, is prepared; .* the commit retries"):
        coordinator.commit(w.pipeline, 2)
    assert status(w, 2) is CheckpointStatus.PREPARED
    assert [w.committer.state(t.transactional_id) for t in prepared.transactions] == [ONGOING] * 2


def test_a_pipelined_checkpoint_is_aborted_when_the_one_below_is_and_its_ranges_are_replayed(world: FakeWorld):
    first, second = two_in_flight(world)
    prepared = world.prepare(second)
    world.clock.advance(world.pipeline.spec.transactions.timeout_ms + 1)  # checkpoint 1's transactions time out
    with pytest.raises(CheckpointError, match="checkpoint 1: aborted"):
        coordinator.commit(world.pipeline, 1)
    with pytest.raises(CheckpointError, match="checkpoint 2: aborted: checkpoint 1, which it was planned on top of "
                                              "while in flight, was aborted"):
        coordinator.commit(world.pipeline, 2)
    assert status(world, 2) is CheckpointStatus.ABORTED
    fenced = [t.transactional_id for t in prepared.transactions]
    assert set(fenced) <= set(world.committer.fenced) and not set(fenced) & set(world.committer.committed)
    replay = coordinator.plan(world.pipeline, "run-3", run_alive=dead)
    assert starts(replay) == starts(first)  # both ranges again, from the latest completed point
    assert ends(replay) == ends(second)
    assert replay.claim.after is None
    assert replay.claim.replays == 1 and replay.claim.clock_ms == first.claim.clock_ms  # checkpoint 1's pins


@pytest.mark.parametrize("change", ["ends", "state"])
def test_the_verdict_aborts_when_the_one_below_completed_otherwise_than_prepared(world: FakeWorld, change: str):
    first, second = two_in_flight(world)
    coordinator.commit(world.pipeline, 1)
    below = world.store.view(1)
    assert pipelining.verdict(second.claim, below) == pipelining.Verdict(pipelining.COMMIT)
    if change == "ends":  # a repair gave a partition back
        other = replace(below.completed, end_offsets={**below.completed.end_offsets, f"{SOURCE}:1": 0})
    else:
        other = replace(below.completed, state=written(world.store.state_files(), 1))
    found = pipelining.verdict(second.claim, replace(below, completed=other))
    assert found.kind == pipelining.ABORT
    assert ("other end offsets" if change == "ends" else "another state") in found.reason
    assert pipelining.verdict(second.claim, None).kind == pipelining.ABORT
    assert pipelining.verdict(first.claim, None).kind == pipelining.COMMIT  # not pipelined


# ---- recovery -------------------------------------------------------------------------------------------
def test_recovery_aborts_a_prepared_checkpoint_planned_on_top_of_one_that_aborted(world: FakeWorld):
    first, second = two_in_flight(world)
    prepared = world.prepare(second)
    world.clock.advance(world.pipeline.spec.transactions.timeout_ms + 1)  # checkpoint 1's transactions time out
    with pytest.raises(CheckpointError, match="checkpoint 1: aborted"):
        coordinator.commit(world.pipeline, 1)
    replay = coordinator.plan(world.pipeline, "run-3", run_alive=dead)  # run-2 died before its commit
    assert status(world, 1) is CheckpointStatus.ABORTED
    assert status(world, 2) is CheckpointStatus.ABORTED
    assert "planned on top of checkpoint 1" in world.store.view(2).aborted.reason
    fenced = [t.transactional_id for t in prepared.transactions]
    assert set(fenced) <= set(world.committer.fenced) and not set(fenced) & set(world.committer.committed)
    assert starts(replay) == starts(first) and ends(replay) == ends(second)


def test_recovery_rolls_two_prepared_pipelined_checkpoints_forward_in_order(world: FakeWorld):
    _, second = two_in_flight(world)
    prepared = world.prepare(second)
    third = coordinator.plan(world.pipeline, "run-3", run_alive=dead)
    assert status(world, 1) is CheckpointStatus.COMPLETED and status(world, 2) is CheckpointStatus.COMPLETED
    assert [world.committer.state(t.transactional_id) for t in prepared.transactions] == [COMPLETE_COMMIT] * 2
    assert starts(third) == ends(second) and third.claim.after is None


def test_a_retry_under_the_first_run_settles_its_own_checkpoint_and_plans_on_top_of_the_live_one(world: FakeWorld):
    """Run-1's task failed before its commit and retries while run-2's checkpoint, planned on top of run-1's, is
    live: the retry rolls its own checkpoint forward (so run-2's commit is not left waiting for it), leaves
    run-2's alone, and plans the next on top of it."""
    _, second = two_in_flight(world)
    prepared = world.prepare(second)
    world.source.produce(SOURCE, 1, 4)
    third = coordinator.plan(world.pipeline, "run-1", run_alive=lambda r: r == "run-2")
    assert status(world, 1) is CheckpointStatus.COMPLETED
    assert status(world, 2) is CheckpointStatus.PREPARED  # left to run-2, its transactions open
    assert [world.committer.state(t.transactional_id) for t in prepared.transactions] == [ONGOING] * 2
    assert third.claim.checkpoint_id == 3 and third.claim.after == 2 and starts(third) == ends(second)
    assert coordinator.commit(world.pipeline, 2).status is CheckpointStatus.COMPLETED


def test_pipelining_off_the_default_waits_as_before(monkeypatch):
    w = fake_world(monkeypatch, partitions=2)
    w.source.produce(SOURCE, 0, 30)
    w.prepare(coordinator.plan(w.pipeline, "run-1"))
    with pytest.raises(coordinator.CheckpointInFlight, match="checkpoint 1 is still in flight: its run run-1"):
        coordinator.plan(w.pipeline, "run-2", run_alive=only_run_1_alive)
    assert status(w, 1) is CheckpointStatus.PREPARED and w.committer.committed == []


def test_lockstep_checkpoints_says_which_checkpoint_a_pipelined_one_was_planned_on_top_of(monkeypatch, capsys):
    import argparse
    import dataclasses
    import json

    from lockstep.cli import commands
    from lockstep.steps import client_factory
    from lockstep.store.checkpoint_store import CheckpointStore
    from tests.support.fake_s3 import FakeS3
    from tests.unit.test_store import BUCKET, PIPELINE, ROOT, claim_of, prepared_of

    store = CheckpointStore(FakeS3(), BUCKET, ROOT, PIPELINE)
    store.claim(claim_of(1))
    store.write_prepared(prepared_of(1))
    store.claim(dataclasses.replace(claim_of(2, run_id="run-b"), after=1))
    monkeypatch.setattr(client_factory, "checkpoint_store", lambda spec: store)
    for as_json in (False, True):
        commands._checkpoints(None, argparse.Namespace(limit=20, json=as_json))  # type: ignore[arg-type]
    text, doc = capsys.readouterr().out.split("\n[", 1)
    assert "planned on top of checkpoint 1" in text.split("\n     1 ")[0]  # under checkpoint 2's line, not 1's
    rows = {r["checkpoint"]: r for r in json.loads("[" + doc)}
    assert (rows[2]["after"], rows[1]["after"]) == (1, None)
