"""The plan and the commit of a stateful pipeline over in-memory fakes (tests/support/fake_pipeline.py):
the state a claim starts from, the state a completed checkpoint records, and what the plan refuses."""
from __future__ import annotations

from dataclasses import replace

import pytest

from lockstep.errors import CheckpointError, TerminalError
from lockstep.model.checkpoint import CheckpointStatus
from lockstep.model.state_manifest import PartitionTime, StateManifest
from lockstep.steps import coordinator
from lockstep.store.state_files import StateFiles
from tests.support.fake_pipeline import SOURCE, FakeWorld, fake_world, spec

STATE = {"event_time": {"column": "created_at"}, "window": {"key": "customer", "size": "1m",
                                                            "aggregates": {"orders": "count(*)"}}}


def dead(run_id: str) -> bool:
    return False


@pytest.fixture
def world(monkeypatch) -> FakeWorld:
    w = fake_world(monkeypatch, spec(state=STATE), partitions=2)
    w.source.produce(SOURCE, 0, 30)
    w.source.produce(SOURCE, 1, 20)
    return w


def written(files: StateFiles, cid: int, key_groups: int = 128) -> StateManifest:
    """What a checkpoint's Spark run leaves of its state: a file per group, and the manifest naming them."""
    named = {}
    for g in (0, 5):
        files.put(files.key(cid, g), f"state of {cid}".encode())
        named[g] = (files.key(cid, g),)
    return StateManifest(operator="window", key_groups=key_groups, written_by=cid, files=named,
                         columns={"__ls_key": "string"}, watermark_ms=cid * 1000,
                         partitions={f"{SOURCE}:0": PartitionTime(cid * 1000, cid)}, keys=2)


def complete(w: FakeWorld, run_id: str, key_groups: int = 128) -> tuple[coordinator.Plan, StateManifest]:
    plan = coordinator.plan(w.pipeline, run_id, run_alive=dead)
    state = written(w.store.state_files(), plan.claim.checkpoint_id, key_groups)
    w.prepare(plan, state=state)
    coordinator.commit(w.pipeline, plan.claim.checkpoint_id)
    return plan, state


# ---- commit -----------------------------------------------------------------------------------------------
def test_a_completed_stateful_checkpoint_records_its_prepared_state(world: FakeWorld):
    plan, state = complete(world, "run-1")
    assert plan.claim.state_base is None, "the first checkpoint starts without state"
    view = world.store.view(1)
    assert view.status is CheckpointStatus.COMPLETED
    assert view.completed.state == state == view.prepared.state


def test_accepting_duplicates_for_a_stuck_stateful_checkpoint_completes_it_with_the_state_it_started_from(
        world: FakeWorld):
    _, first = complete(world, "run-1")
    world.source.produce(SOURCE, 0, 5)
    world.source.produce(SOURCE, 1, 5)
    plan = coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    second = written(world.store.state_files(), 2)
    prepared = world.prepare(plan, state=second)  # each transaction carries its own source partition
    kept = prepared.transactions[0]
    world.committer.commit(kept.transactional_id, kept.producer_id, kept.epoch)
    world.clock.advance(world.pipeline.spec.transactions.timeout_ms + 1)  # the broker times the other out
    with pytest.raises(CheckpointError, match="keyed state already holds the effect"):
        coordinator.commit(world.pipeline, 2)
    assert world.store.view(2).status is CheckpointStatus.PREPARED

    outcome = coordinator.commit(world.pipeline, 2, accept="duplicates")
    done = world.store.view(2).completed
    assert outcome.repair is not None and outcome.repair.accepted == "duplicates"
    assert done.state == plan.claim.state_base == first, "the state goes back to the claim's base"
    assert done.repair.replayed == tuple(r for r in plan.claim.ranges if not r.is_empty)
    third, state = complete(world, "run-3")
    assert third.claim.state_base == first
    assert third.claim.ranges == plan.claim.ranges, "all of checkpoint 2's input is read again"
    assert set(world.store.state_files().listing()) == {*first.all_files, *state.all_files}, \
        "once settled, the reverted checkpoint's own state files are garbage"


# ---- plan --------------------------------------------------------------------------------------------------
def test_a_stateful_claim_starts_from_the_latest_completed_checkpoints_state(world: FakeWorld):
    complete(world, "run-1")
    world.source.produce(SOURCE, 0, 5)
    _, latest = complete(world, "run-2")
    world.source.produce(SOURCE, 1, 5)
    plan = coordinator.plan(world.pipeline, "run-3", run_alive=dead)
    assert plan.claim.state_base == latest
    assert world.store.view(3).claim.state_base == latest, "the stored claim carries it"


def test_a_stateful_restore_from_a_checkpoint_or_savepoint_starts_from_its_state(world: FakeWorld):
    _, first = complete(world, "run-1")
    world.store.create_savepoint("nightly", 1, "2026-01-01T00:00:00+00:00")
    world.source.produce(SOURCE, 0, 5)
    complete(world, "run-2")
    assert coordinator.plan(world.pipeline, "run-3", restore="checkpoint:1", run_alive=dead).claim.state_base == first
    assert coordinator.plan(world.pipeline, "run-4", restore="nightly", dry_run=True).claim.state_base == first


def test_a_time_restore_of_a_stateful_pipeline_is_refused_naming_the_restore(world: FakeWorld):
    complete(world, "run-1")
    restore = "time:2026-01-01T00:00:00+00:00"
    with pytest.raises(TerminalError, match="cannot restore from time:2026-01-01T00:00:00") as refused:
        coordinator.plan(world.pipeline, "run-2", restore=restore, run_alive=dead)
    assert "savepoint or checkpoint:<id>" in str(refused.value)
    assert list(world.store.checkpoint_ids()) == [1], "nothing was claimed"


def test_changed_key_groups_are_refused_naming_both_numbers(world: FakeWorld):
    complete(world, "run-1")
    changed = spec(state={**STATE, "key_groups": 64})
    world.pipeline = replace(world.pipeline, spec=changed)
    with pytest.raises(TerminalError) as refused:
        coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    message = str(refused.value)
    assert "checkpoint 2" in message and "state.key_groups is 64" in message and "has 128 key groups" in message
    assert list(world.store.checkpoint_ids()) == [1], "nothing was claimed"
    world.store.state_files().record_rekey(64, 128, "2026-01-01T00:00:00+00:00")
    assert coordinator.plan(world.pipeline, "run-3", run_alive=dead).claim.state_base is not None, \
        "after `lockstep state rekey` the plan takes the new key groups"


# ---- the clock a claim pins -----------------------------------------------------------------------------
def test_a_claim_pins_the_wall_clock_its_run_reads(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1", run_alive=dead)
    assert plan.claim.clock_ms == world.clock()
    assert world.store.view(1).claim.clock == world.clock(), "the stored claim carries it"


def test_a_checkpoint_replanned_minutes_after_its_abort_takes_the_aborted_ones_clock(world: FakeWorld):
    _, base = complete(world, "run-1")
    world.source.produce(SOURCE, 0, 5)
    first = coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    world.prepare(first, state=written(world.store.state_files(), 2))
    world.clock.advance(world.pipeline.spec.transactions.timeout_ms + 1)  # the broker times it out
    again = coordinator.plan(world.pipeline, "run-3", run_alive=dead)
    assert world.store.view(2).status is CheckpointStatus.ABORTED
    assert again.claim.checkpoint_id == 3 and again.claim.ranges == first.claim.ranges
    assert again.claim.state_base == first.claim.state_base == base
    assert again.claim.clock_ms == first.claim.clock_ms != world.clock(), "the replay reads the first attempt's clock"

    world.prepare(again, state=written(world.store.state_files(), 3))
    coordinator.commit(world.pipeline, 3)
    world.source.produce(SOURCE, 1, 5)
    after = coordinator.plan(world.pipeline, "run-4", run_alive=dead)
    assert after.claim.clock_ms == world.clock(), "a checkpoint that replays nothing reads the clock anew"


# ---- idle_advance: a checkpoint without records that fires what the quiet made due ------------------------
QUIET = {**STATE, "event_time": {"column": "created_at", "out_of_orderness": "1s", "idle_timeout": "1m",
                                 "idle_advance": True}}


def test_a_quiet_source_gets_a_checkpoint_that_fires_its_due_windows_once_every_partition_is_idle(monkeypatch):
    w = fake_world(monkeypatch, spec(state=QUIET), partitions=2)
    w.source.produce(SOURCE, 0, 3)
    w.source.produce(SOURCE, 1, 3)
    plan = coordinator.plan(w.pipeline, "run-1", run_alive=dead)
    t = plan.claim.clock
    parts = {f"{SOURCE}:0": PartitionTime(50_000, t), f"{SOURCE}:1": PartitionTime(55_000, t)}
    w.prepare(plan, state=StateManifest(operator="window", key_groups=128, written_by=1, files={}, columns={},
                                        watermark_ms=49_000, partitions=parts, timers=1, next_timer_ms=60_000))
    coordinator.commit(w.pipeline, 1)

    w.clock.advance(30_000)  # quiet, but not idle yet
    soon = coordinator.plan(w.pipeline, "run-2", run_alive=dead)
    assert not soon.claim.fires_timers and soon.claim.task_count == 0
    w.prepare(soon, state=soon.claim.state_base.carried_forward())
    coordinator.commit(w.pipeline, 2)

    w.clock.advance(31_000)  # every partition idle for more than a minute: 55 s + 61 s - 1 s passes 60 s
    due = coordinator.plan(w.pipeline, "run-3", run_alive=dead)
    assert due.claim.fires_timers and all(r.is_empty for r in due.claim.ranges)
    assert due.claim.task_count == 1, "its one transaction is fenced by recovery like any other"
    assert w.store.view(3).claim.fires_timers, "the stored claim says so"


def test_without_idle_advance_or_for_dedup_a_quiet_source_fires_nothing(monkeypatch):
    dedup = {"event_time": QUIET["event_time"], "dedup": {"key": "order_id", "ttl": "1m"}}
    for state in (STATE, dedup):
        w = fake_world(monkeypatch, spec(state=state), partitions=1)
        w.source.produce(SOURCE, 0, 3)
        plan = coordinator.plan(w.pipeline, "run-1", run_alive=dead)
        w.prepare(plan, state=StateManifest(
            operator="window" if state is STATE else "dedup", key_groups=128, written_by=1, files={}, columns={},
            watermark_ms=1_000, partitions={f"{SOURCE}:0": PartitionTime(2_000, plan.claim.clock)}, timers=1,
            next_timer_ms=3_000))
        coordinator.commit(w.pipeline, 1)
        w.clock.advance(3_600_000)
        assert not coordinator.plan(w.pipeline, "run-2", run_alive=dead).claim.fires_timers


# ---- repair of a stateful partial commit -----------------------------------------------------------------
def test_a_stateful_partial_commit_completes_with_its_state_and_the_next_checkpoint_writes_its_lost_share(
        world: FakeWorld):
    from lockstep.model.checkpoint import Rerun

    complete(world, "run-1")
    world.source.produce(SOURCE, 0, 5)
    world.source.produce(SOURCE, 1, 5)
    plan = coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    second = written(world.store.state_files(), 2)
    prepared = world.prepare(plan, state=second, output_tasks=2)  # its output placed by rules.output_tasks
    kept, lost = prepared.transactions
    world.committer.commit(kept.transactional_id, kept.producer_id, kept.epoch)
    world.clock.advance(world.pipeline.spec.transactions.timeout_ms + 1)  # the broker times the other out

    outcome = coordinator.commit(world.pipeline, 2)  # no manual step
    done = world.store.view(2).completed
    assert outcome.repair is not None and outcome.repair.accepted is None
    assert outcome.repair.rerun_tasks == (lost.task_index,) and outcome.repair.of_tasks == 2
    assert outcome.repair.replayed == () and done.end_offsets == plan.claim.end_offsets, "no input goes back"
    assert done.state == second, "the state is the prepared one: it holds every record's effect"
    assert world.store.view(2).status_text == "completed after repair"

    # The next checkpoint (no new records) writes the lost share again; a replay of it after a crash too.
    third = coordinator.plan(world.pipeline, "run-3", run_alive=dead)
    assert third.claim.rerun == Rerun(2, (lost.task_index,), 2) and third.claim.needs_spark
    assert third.claim.task_count == 1 and all(r.is_empty for r in third.claim.ranges)
    world.start(third)  # its run dies
    fourth = coordinator.plan(world.pipeline, "run-4", run_alive=dead)
    assert world.store.view(3).status is CheckpointStatus.ABORTED
    assert fourth.claim.rerun == third.claim.rerun
    world.prepare(fourth, state=second, output_tasks=1)
    coordinator.commit(world.pipeline, 4)
    world.source.produce(SOURCE, 0, 1)
    assert coordinator.plan(world.pipeline, "run-5", run_alive=dead).claim.rerun is None, "written once"


def test_the_lost_share_of_a_repaired_checkpoint_is_written_again_only_by_the_code_that_wrote_it(
        world: FakeWorld):
    """A new transform deployed between a stateful partial commit and the next plan: the lost share is that
    checkpoint's output, computed again from its claim, so the plan refuses (nothing claimed), naming the
    checkpoint, what changed and the way out; with the old code back it writes the share."""
    from lockstep.model.checkpoint import Rerun

    complete(world, "run-1")
    world.source.produce(SOURCE, 0, 5)
    world.source.produce(SOURCE, 1, 5)
    plan = coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    prepared = world.prepare(plan, state=written(world.store.state_files(), 2), output_tasks=2)
    kept, lost = prepared.transactions
    world.committer.commit(kept.transactional_id, kept.producer_id, kept.epoch)
    world.clock.advance(world.pipeline.spec.transactions.timeout_ms + 1)
    coordinator.commit(world.pipeline, 2)

    running = world.pipeline.spec
    world.pipeline.spec = replace(running, transform="lockstep_examples.orders:passthrough")
    with pytest.raises(TerminalError) as refused:
        coordinator.plan(world.pipeline, "run-3", run_alive=dead)
    assert str(refused.value).startswith(f"checkpoint 2 was completed after a repair: the output of its lost task "
                                         f"{lost.task_index} must be computed again, with the code that wrote it, "
                                         "and its transform is not the spec's now")
    assert str(refused.value).endswith("Deploy that code again for one run, which writes the lost share; then deploy "
                                       "the new code")
    assert list(world.store.checkpoint_ids()) == [1, 2], "nothing claimed"
    world.pipeline.spec = running
    assert coordinator.plan(world.pipeline, "run-3", run_alive=dead).claim.rerun == Rerun(2, (lost.task_index,), 2)
