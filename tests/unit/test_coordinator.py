"""The coordinator's plan, recover and commit against in-memory fakes: the checkpoint store over a
fake S3 client, a fake source cluster (partitions, offsets, consumer groups) and a fake transaction
coordinator (tests/support). Each test asserts on what ends up in the store, in the consumer group
and in the transaction table, never on the order of calls."""
from __future__ import annotations

import pytest

from lockstep.errors import CheckpointError, TerminalError, TopicRecreatedError
from lockstep.model.checkpoint import CheckpointStatus, RunFailure
from lockstep.model.transactional_ids import transactional_id
from lockstep.steps import coordinator
from tests.support.fake_kafka import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, ONGOING
from tests.support.fake_pipeline import PREFIX, SOURCE, FakeWorld, fake_world, spec


def dead(run_id: str) -> bool:
    return False


def alive(run_id: str) -> bool:
    return True


@pytest.fixture
def world(monkeypatch) -> FakeWorld:
    w = fake_world(monkeypatch, partitions=2)
    w.source.produce(SOURCE, 0, 30)
    w.source.produce(SOURCE, 1, 20)
    return w


def starts(plan: coordinator.Plan) -> dict[str, int]:
    return {r.tp.key: r.start for r in plan.claim.ranges}


def ends(plan: coordinator.Plan) -> dict[str, int]:
    return {r.tp.key: r.end for r in plan.claim.ranges}


def status(w: FakeWorld, checkpoint_id: int) -> CheckpointStatus:
    return w.store.view(checkpoint_id).status


def complete(w: FakeWorld, run_id: str) -> coordinator.Plan:
    plan = coordinator.plan(w.pipeline, run_id, run_alive=dead)
    w.prepare(plan)
    coordinator.commit(w.pipeline, plan.claim.checkpoint_id)
    return plan


# ---- plan ------------------------------------------------------------------------------------------
def test_the_first_checkpoint_starts_at_the_log_start_without_group_offsets(world: FakeWorld):
    world.source.delete_records(SOURCE, 0, 5)
    plan = coordinator.plan(world.pipeline, "run-1")
    assert plan.claim.checkpoint_id == 1
    assert plan.claim.start_source == "earliest"
    assert starts(plan) == {f"{SOURCE}:0": 5, f"{SOURCE}:1": 0}
    assert ends(plan) == {f"{SOURCE}:0": 30, f"{SOURCE}:1": 20}
    assert world.store.view(1).claim == plan.claim


def test_the_first_checkpoint_starts_at_the_consumer_groups_offsets(world: FakeWorld):
    world.source.groups["lockstep-orders"] = {(SOURCE, 0): 12, (SOURCE, 1): 20}
    plan = coordinator.plan(world.pipeline, "run-1")
    assert plan.claim.start_source == "group"
    assert starts(plan) == {f"{SOURCE}:0": 12, f"{SOURCE}:1": 20}
    assert plan.range_plan.total_records == 18


def test_the_record_budget_caps_a_checkpoint_and_leaves_the_rest_for_the_next(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1", max_records=10)
    assert plan.range_plan.total_records == 10
    assert world.store.view(1).claim.ranges == plan.claim.ranges


def test_the_next_checkpoint_starts_where_the_previous_completed_one_ended(world: FakeWorld):
    first = complete(world, "run-1")
    world.source.produce(SOURCE, 0, 7)
    second = coordinator.plan(world.pipeline, "run-2")
    assert second.claim.checkpoint_id == 2
    assert second.claim.start_source == "checkpoint:1"
    assert starts(second) == ends(first)
    assert ends(second) == {f"{SOURCE}:0": 37, f"{SOURCE}:1": 20}


def test_a_claimed_checkpoint_whose_run_died_is_fenced_aborted_and_replayed(world: FakeWorld):
    first = coordinator.plan(world.pipeline, "run-1")
    tids = world.start(first)  # the Spark run opened its transactions, then died
    second = coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    assert status(world, 1) is CheckpointStatus.ABORTED
    assert "its transactions were fenced" in world.store.view(1).aborted.reason
    assert {tid: world.committer.state(tid) for tid in tids} == {tid: EMPTY for tid in tids}
    assert world.committer.committed == []
    assert second.claim.checkpoint_id == 2
    assert second.claim.ranges == first.claim.ranges  # nothing was committed: read again


def test_recovery_of_an_auto_parallelism_checkpoint_fences_only_the_tasks_its_run_recorded(monkeypatch):
    """`sink.parallelism: auto` lets a claim use up to 256 ids; the run records how many it writes with
    before writing, and recovery fences those, not 8 ids nobody opened (each fence would create one)."""
    w = fake_world(monkeypatch, partitions=8)
    for p in range(8):
        w.source.produce(SOURCE, p, 5)
    first = coordinator.plan(w.pipeline, "run-1")
    assert first.claim.task_count == 8
    assert w.store.record_write_tasks(1, 2) == 2  # a 2-core cluster
    assert w.store.record_write_tasks(1, 4) == 2  # a retry on a bigger cluster keeps the first number
    opened = [transactional_id(PREFIX, 1, i) for i in range(2)]
    for tid in opened:
        w.committer.begin(tid)
    coordinator.plan(w.pipeline, "run-2", run_alive=dead)
    assert sorted(w.committer.fenced) == sorted(opened)
    assert status(w, 1) is CheckpointStatus.ABORTED


def test_without_a_recorded_task_count_recovery_fences_every_id_the_claim_allows(monkeypatch):
    w = fake_world(monkeypatch, partitions=8)
    for p in range(8):
        w.source.produce(SOURCE, p, 5)
    first = coordinator.plan(w.pipeline, "run-1")
    w.start(first)  # a run of a version that recorded nothing, or one that died before recording
    coordinator.plan(w.pipeline, "run-2", run_alive=dead)
    assert sorted(w.committer.fenced) == sorted(transactional_id(PREFIX, 1, i) for i in range(8))


def test_planning_is_refused_while_the_run_owning_a_checkpoint_is_alive(world: FakeWorld):
    """``checkpoints.pipelined`` off, the default; on, see tests/unit/test_pipelining.py."""
    first = coordinator.plan(world.pipeline, "run-1")
    tids = world.start(first)
    with pytest.raises(coordinator.CheckpointInFlight, match="its run run-1 is still running"):
        coordinator.plan(world.pipeline, "run-2", run_alive=alive)
    assert status(world, 1) is CheckpointStatus.CLAIMED
    assert [world.committer.state(t) for t in tids] == [ONGOING] * len(tids)
    assert list(world.store.checkpoint_ids()) == [1]


def test_a_prepared_checkpoint_is_rolled_forward_before_the_next_is_planned(world: FakeWorld):
    first = coordinator.plan(world.pipeline, "run-1")
    prepared = world.prepare(first)  # the commit task never ran
    second = coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    assert status(world, 1) is CheckpointStatus.COMPLETED
    assert sorted(world.committer.committed) == sorted(t.transactional_id for t in prepared.transactions)
    assert second.claim.start_source == "checkpoint:1"
    assert starts(second) == ends(first)


def test_restore_from_a_savepoint_starts_at_its_offsets_and_says_what_is_written_again(world: FakeWorld):
    first = complete(world, "run-1")
    world.store.create_savepoint("nightly", 1, "2026-01-01T00:00:00+00:00")
    world.source.produce(SOURCE, 0, 10)
    complete(world, "run-2")
    world.source.produce(SOURCE, 1, 5)
    restored = coordinator.plan(world.pipeline, "run-3", restore="nightly")
    assert restored.claim.restored_from == "nightly"
    assert restored.claim.start_source == "savepoint:nightly"
    assert starts(restored) == ends(first)
    assert restored.restore_summary == {"re_emitted": 10, "new": 5}  # checkpoint 2's records again, then new ones


def test_a_restore_from_a_missing_savepoint_claims_nothing(world: FakeWorld):
    complete(world, "run-1")
    with pytest.raises(TerminalError, match="savepoint 'nope' not found"):
        coordinator.plan(world.pipeline, "run-2", restore="nope")
    assert list(world.store.checkpoint_ids()) == [1]


def test_an_empty_checkpoint_claims_empty_ranges_and_completes_without_transactions(world: FakeWorld):
    first = complete(world, "run-1")
    empty = coordinator.plan(world.pipeline, "run-2")
    assert empty.range_plan.total_records == 0
    assert empty.claim.task_count == 0
    assert starts(empty) == ends(empty) == ends(first)
    world.prepare(empty)
    outcome = coordinator.commit(world.pipeline, 2)
    assert outcome.committed == ()
    assert status(world, 2) is CheckpointStatus.COMPLETED
    assert world.store.latest_completed().checkpoint_id == 2


def test_a_dry_run_claims_nothing_and_keeps_its_plan(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1", dry_run=True)
    assert list(world.store.checkpoint_ids()) == []
    assert world.store.last_dry_run() == plan.claim


def _count_store_reads(w: FakeWorld, monkeypatch) -> dict[str, int]:
    """Counts, from now on, the store's listings and its reads of the latest-completed pointer."""
    counts = {"list": 0, "pointer": 0}
    listing, getting = w.s3.list_objects_v2, w.s3.get_object

    def list_objects_v2(**kwargs):
        counts["list"] += 1
        return listing(**kwargs)

    def get_object(**kwargs):
        counts["pointer"] += kwargs["Key"].endswith("/latest-completed.json")
        return getting(**kwargs)

    monkeypatch.setattr(w.s3, "list_objects_v2", list_objects_v2)
    monkeypatch.setattr(w.s3, "get_object", get_object)
    return counts


def test_a_plan_reads_the_history_once_when_recovery_has_nothing_to_do(world: FakeWorld, monkeypatch):
    for n in range(3):
        complete(world, f"run-{n}")
        world.source.produce(SOURCE, 0, 5)
    counts = _count_store_reads(world, monkeypatch)
    plan = coordinator.plan(world.pipeline, "run-4", run_alive=dead)
    assert plan.claim.checkpoint_id == 4
    # in-flight check, recovery and the plan share one pointer read and one listing
    assert counts == {"list": 1, "pointer": 1}


def test_a_plan_reads_the_history_again_after_recovery_changed_it(world: FakeWorld):
    complete(world, "run-1")
    world.source.produce(SOURCE, 0, 5)
    world.prepare(coordinator.plan(world.pipeline, "run-2", run_alive=dead))  # died before its commit
    plan = coordinator.plan(world.pipeline, "run-3", run_alive=dead)
    assert status(world, 2) is CheckpointStatus.COMPLETED  # rolled forward by recovery
    # planned on the history as recovery left it, not as the plan first read it
    assert plan.claim.checkpoint_id == 3 and plan.claim.start_source == "checkpoint:2"


def test_the_claim_and_the_completed_checkpoint_record_the_source_topics_ids(world: FakeWorld):
    plan = complete(world, "run-1")
    expected = {SOURCE: world.source.topic_ids[SOURCE]}
    assert plan.claim.topic_ids == expected
    assert world.store.view(1).claim.topic_ids == expected and world.store.view(1).completed.topic_ids == expected


def recreate(w: FakeWorld, records: int) -> None:
    """Delete the source topic and create it again, with more records than the old end offsets."""
    w.source.create_topic(SOURCE, 2)
    w.source.produce(SOURCE, 0, records)
    w.source.produce(SOURCE, 1, records)


def test_a_recreated_source_topic_is_refused_naming_the_topic_both_ids_and_the_ways_out(world: FakeWorld):
    complete(world, "run-1")  # ends at 30 and 20
    old = world.source.topic_ids[SOURCE]
    recreate(world, 80)  # past the old end offsets: starting from them would skip 50 + 60 records silently
    with pytest.raises(TopicRecreatedError) as refused:
        coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    message = str(refused.value)
    assert f"{SOURCE}: topic id {old} at checkpoint 1, {world.source.topic_ids[SOURCE]} now" in message
    assert "source.on_topic_recreated: earliest" in message and "--restore-from time:" in message
    assert list(world.store.checkpoint_ids()) == [1]  # nothing claimed


@pytest.mark.parametrize(("policy", "start"), [("earliest", 0), ("latest", 80)])
def test_on_topic_recreated_reads_the_new_topic_from_its_start_or_its_end(monkeypatch, policy: str, start: int):
    w = fake_world(monkeypatch, spec(source={"on_topic_recreated": policy}), partitions=2)
    w.source.produce(SOURCE, 0, 30)
    complete(w, "run-1")
    recreate(w, 80)
    plan = complete(w, "run-2")
    assert starts(plan) == {f"{SOURCE}:0": start, f"{SOURCE}:1": start}
    assert ends(plan) == {f"{SOURCE}:0": 80, f"{SOURCE}:1": 80}
    assert plan.claim.topic_ids == {SOURCE: w.source.topic_ids[SOURCE]}
    assert complete(w, "run-3").range_plan.total_records == 0  # the new id is the one recorded now


def test_an_explicit_restore_is_not_judged_by_the_last_checkpoints_topic_ids(world: FakeWorld):
    complete(world, "run-1")
    recreate(world, 80)
    plan = coordinator.plan(world.pipeline, "run-2", restore="time:1970-01-01T00:00:00+00:00", run_alive=dead)
    assert starts(plan) == {f"{SOURCE}:0": 0, f"{SOURCE}:1": 0}


@pytest.mark.parametrize("restore", ["nightly", "checkpoint:1"])
def test_a_restore_from_offsets_of_the_old_topic_is_refused_naming_it(world: FakeWorld, restore: str):
    complete(world, "run-1")
    world.store.create_savepoint("nightly", 1, "2026-01-01T00:00:00+00:00")
    recreate(world, 80)
    label = "savepoint:nightly" if restore == "nightly" else restore
    with pytest.raises(TopicRecreatedError, match=f"cannot restore from {label}: source topic deleted and created "
                                                  "again") as refused:
        coordinator.plan(world.pipeline, "run-2", restore=restore, run_alive=dead)
    assert "--restore-from time:" in str(refused.value) and SOURCE in str(refused.value)
    assert world.store.view(2) is None  # nothing claimed


def test_a_plan_publishes_the_last_checkpoints_end_offsets_a_crashed_commit_left_unpublished(world: FakeWorld):
    complete(world, "run-1")
    group = world.pipeline.spec.source.consumer_group
    world.source.groups[group] = {(SOURCE, 0): 10}  # as a commit that crashed after completing, before publishing
    coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    assert world.source.group_offsets(group) == {f"{SOURCE}:0": 30, f"{SOURCE}:1": 20}


def test_a_dry_run_publishes_nothing(world: FakeWorld):
    complete(world, "run-1")
    group = world.pipeline.spec.source.consumer_group
    world.source.groups[group] = {(SOURCE, 0): 10}
    coordinator.plan(world.pipeline, "run-2", dry_run=True)
    assert world.source.group_offsets(group) == {f"{SOURCE}:0": 10}


# ---- recover ---------------------------------------------------------------------------------------
def test_recovery_of_a_clean_history_changes_nothing(world: FakeWorld):
    complete(world, "run-1")
    before = dict(world.s3.objects)
    coordinator.recover(world.pipeline)
    assert world.s3.objects == before
    assert world.committer.fenced == []


def test_recovery_fences_open_ids_under_our_prefix_that_no_prepared_checkpoint_owns(world: FakeWorld):
    first = coordinator.plan(world.pipeline, "run-1")
    world.start(first)
    stray = f"{PREFIX}-1-7"  # an id of a task index above this claim's (an earlier, wider attempt)
    foreign = "tx-payments-1-0"  # another pipeline's, not under our prefix
    world.committer.begin(stray)
    world.committer.begin(foreign)
    facts = coordinator.recovery_facts(world.pipeline)
    assert stray in facts.open_here and foreign not in facts.open_here
    coordinator.carry_out(world.pipeline, facts.plan(world.pipeline.spec))
    assert world.committer.state(stray) == EMPTY
    assert world.committer.state(foreign) == ONGOING
    assert status(world, 1) is CheckpointStatus.ABORTED


def test_recovery_keeps_the_transactions_of_a_prepared_checkpoint_and_commits_them(world: FakeWorld):
    first = coordinator.plan(world.pipeline, "run-1")
    prepared = world.prepare(first)
    coordinator.recover(world.pipeline)
    assert world.committer.fenced == []
    assert {world.committer.state(t.transactional_id) for t in prepared.transactions} == {COMPLETE_COMMIT}
    assert status(world, 1) is CheckpointStatus.COMPLETED


def test_an_aborted_checkpoint_records_its_runs_failure_as_the_reason(world: FakeWorld):
    first = coordinator.plan(world.pipeline, "run-1")
    world.start(first)
    world.store.record_run_failure(RunFailure("orders", 1, "2026-01-01T00:00:00+00:00", "ZeroDivisionError in enrich"))
    coordinator.recover(world.pipeline)
    assert world.store.view(1).aborted.reason.startswith("its Spark run failed: ZeroDivisionError in enrich")


def test_a_prepared_checkpoint_that_cannot_be_rolled_forward_is_aborted_and_replayed(world: FakeWorld):
    first = coordinator.plan(world.pipeline, "run-1")
    world.prepare(first)
    world.clock.advance(world.pipeline.spec.transactions.timeout_ms + 1)  # the broker times them out
    second = coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    assert status(world, 1) is CheckpointStatus.ABORTED
    assert "timed out" in world.store.view(1).aborted.reason
    assert world.committer.committed == []
    assert second.claim.ranges == first.claim.ranges


# ---- commit ----------------------------------------------------------------------------------------
def test_commit_commits_every_transaction_marks_completed_and_publishes_offsets(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1")
    prepared = world.prepare(plan)
    outcome = coordinator.commit(world.pipeline, 1)
    tids = [t.transactional_id for t in prepared.transactions]
    assert len(tids) == 2
    assert sorted(world.committer.committed) == sorted(tids)
    assert {world.committer.state(t) for t in tids} == {COMPLETE_COMMIT}
    assert outcome.status is CheckpointStatus.COMPLETED and sorted(outcome.committed) == sorted(tids)
    view = world.store.view(1)
    assert view.status is CheckpointStatus.COMPLETED
    assert dict(view.completed.end_offsets) == ends(plan)
    assert world.source.group_offsets("lockstep-orders") == ends(plan)


def test_commit_is_idempotent(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1")
    world.prepare(plan)
    first = coordinator.commit(world.pipeline, 1)
    stored = dict(world.s3.objects)
    again = coordinator.commit(world.pipeline, 1)
    assert again.status is CheckpointStatus.COMPLETED and again.committed == first.committed
    assert len(world.committer.committed) == 2
    assert world.s3.objects == stored
    assert world.source.group_offsets("lockstep-orders") == ends(plan)


def test_commit_after_a_lost_group_commit_publishes_the_offsets_again(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1")
    world.prepare(plan)
    coordinator.commit(world.pipeline, 1)
    world.source.groups.clear()
    coordinator.commit(world.pipeline, 1)
    assert world.source.group_offsets("lockstep-orders") == ends(plan)


def test_a_fenced_transaction_aborts_the_whole_checkpoint(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1")
    prepared = world.prepare(plan)
    fenced, other = (t.transactional_id for t in prepared.transactions)
    world.committer.begin(fenced)  # a later attempt of the task re-initialised the id
    with pytest.raises(CheckpointError, match=f"aborted: .*transaction {fenced} was fenced"):
        coordinator.commit(world.pipeline, 1)
    assert world.committer.committed == []
    assert world.committer.state(other) == EMPTY  # fenced too: all or nothing
    assert status(world, 1) is CheckpointStatus.ABORTED
    assert world.source.group_offsets("lockstep-orders") == {}


def test_a_transaction_the_broker_timed_out_aborts_the_checkpoint(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1")
    prepared = world.prepare(plan)
    world.clock.advance(world.pipeline.spec.transactions.timeout_ms + 1)
    with pytest.raises(CheckpointError, match="the broker aborted it"):
        coordinator.commit(world.pipeline, 1)
    assert world.committer.committed == []
    assert {world.committer.state(t.transactional_id) for t in prepared.transactions} <= {EMPTY, COMPLETE_ABORT}
    assert status(world, 1) is CheckpointStatus.ABORTED


def test_commit_refuses_a_checkpoint_that_was_not_prepared(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1")
    tids = world.start(plan)
    with pytest.raises(CheckpointError, match="is not prepared"):
        coordinator.commit(world.pipeline, 1)
    assert world.committer.committed == []
    assert [world.committer.state(t) for t in tids] == [ONGOING] * len(tids)
    assert status(world, 1) is CheckpointStatus.CLAIMED


def test_commit_of_an_aborted_checkpoint_says_how_it_is_replayed(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1")
    world.start(plan)
    coordinator.recover(world.pipeline)
    with pytest.raises(CheckpointError, match="was aborted earlier"):
        coordinator.commit(world.pipeline, 1)
    assert status(world, 1) is CheckpointStatus.ABORTED


def test_commit_applies_retention(monkeypatch):
    w = fake_world(monkeypatch, spec(checkpoints={"retain": 1}), partitions=1)
    for n in range(3):
        w.source.produce(SOURCE, 0, 5)
        complete(w, f"run-{n}")
    assert list(w.store.checkpoint_ids()) == [3]
    assert w.store.latest_completed().checkpoint_id == 3


def test_a_commit_that_begins_with_little_of_the_timeout_left_warns_and_says_how_much(world: FakeWorld, caplog):
    plan = coordinator.plan(world.pipeline, "run-1", run_alive=dead)
    world.prepare(plan)
    timeout = world.pipeline.spec.transactions.timeout_ms  # 900 s; the warning starts below 25 % of it
    world.clock.advance(timeout - 200_000)  # 200 s left: still committable, but late
    with caplog.at_level("WARNING", "lockstep.steps.commit"):
        outcome = coordinator.commit(world.pipeline, 1)
    assert outcome.status is CheckpointStatus.COMPLETED and outcome.time_left_ms == 200_000
    assert "checkpoint 1: the commit begins with 200 s of the transactions' 900 s timeout left (less than 25%)" \
        in caplog.text


def test_a_timely_commit_does_not_warn(world: FakeWorld, caplog):
    plan = coordinator.plan(world.pipeline, "run-1", run_alive=dead)
    world.prepare(plan)
    world.clock.advance(60_000)
    with caplog.at_level("WARNING", "lockstep.steps.commit"):
        outcome = coordinator.commit(world.pipeline, 1)
    assert outcome.time_left_ms == world.pipeline.spec.transactions.timeout_ms - 60_000
    assert "timeout left" not in caplog.text



def test_the_time_left_at_commit_goes_out_as_a_percent_gauge():
    import socket

    from lockstep.ops.metrics import StatsdTarget, send_commit_time_left

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as statsd:
        statsd.bind(("127.0.0.1", 0))
        statsd.settimeout(5)
        target = StatsdTarget("127.0.0.1", statsd.getsockname()[1])
        assert send_commit_time_left("orders", 900_000, 200_000, target) == 1
        assert statsd.recv(1400).decode() == "airflow.lockstep.orders.commit_time_left_percent:22.2|g"
    assert send_commit_time_left("orders", 900_000, None, target) == 0  # nothing was committed


# ---- repair of a partial commit ----------------------------------------------------------------------
def commit_first_then_time_out(w: FakeWorld, plan: coordinator.Plan, **prepare_args):
    """A commit that died after its first transaction; the broker then timed the others out."""
    prepared = w.prepare(plan, **prepare_args)
    first = prepared.transactions[0]
    w.committer.commit(first.transactional_id, first.producer_id, first.epoch)
    w.clock.advance(w.pipeline.spec.transactions.timeout_ms + 1)
    return prepared


def test_a_partial_commit_whose_rest_timed_out_completes_after_repair_and_the_next_plan_reads_it_again(
        world: FakeWorld):
    first = coordinator.plan(world.pipeline, "run-1")
    prepared = commit_first_then_time_out(world, first)
    kept, lost = prepared.transactions
    second = coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    view = world.store.view(1)
    assert view.status is CheckpointStatus.COMPLETED and view.status_text == "completed after repair"
    assert list(view.completed.repair.lost) == [lost.transactional_id]
    lost_range = next(r for r in first.claim.ranges if r.tp in lost.sources)
    assert view.completed.repair.replayed == (lost_range,)
    assert view.completed.committed == (kept.transactional_id,)
    assert lost.transactional_id in world.committer.fenced
    assert starts(second)[lost_range.tp.key] == lost_range.start, "the lost range is read again"
    kept_range = next(r for r in first.claim.ranges if r.tp in kept.sources)
    assert starts(second)[kept_range.tp.key] == kept_range.end, "the committed range is not"
    assert world.source.group_offsets("lockstep-orders") == dict(view.completed.end_offsets)


def test_a_shuffled_partial_commit_is_stuck_until_the_user_accepts_duplicates(world: FakeWorld):
    plan = coordinator.plan(world.pipeline, "run-1")
    both = tuple(r.tp for r in plan.claim.ranges)
    commit_first_then_time_out(world, plan, sources={0: both, 1: both[1:]})
    with pytest.raises(CheckpointError, match="cannot be repaired exactly.*--accept duplicates"):
        coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    assert status(world, 1) is CheckpointStatus.PREPARED  # nothing guessed
    outcome = coordinator.commit(world.pipeline, 1, accept="duplicates")
    assert outcome.repair is not None and outcome.repair.accepted == "duplicates"
    assert world.store.view(1).completed.repair.replayed == tuple(r for r in plan.claim.ranges if r.tp == both[1])


def test_committing_an_older_restore_again_does_not_move_the_group_back(world: FakeWorld):
    complete(world, "run-1")
    world.store.create_savepoint("nightly", 1, "2026-01-01T00:00:00+00:00")
    world.source.produce(SOURCE, 0, 10)
    complete(world, "run-2")
    restored = coordinator.plan(world.pipeline, "run-3", restore="nightly")
    world.prepare(restored)
    coordinator.commit(world.pipeline, restored.claim.checkpoint_id)
    assert world.source.group_offsets("lockstep-orders") == ends(restored)  # a restore may move it back
    world.source.produce(SOURCE, 1, 5)
    after = complete(world, "run-4")
    coordinator.commit(world.pipeline, restored.claim.checkpoint_id)  # again, once it is no longer the latest
    assert world.source.group_offsets("lockstep-orders") == ends(after)


def test_a_topic_removed_from_the_spec_and_added_back_goes_on_where_it_stopped(monkeypatch):
    from dataclasses import replace

    from tests.support.fake_pipeline import fake_world, spec

    both, only_first = spec(source={"topics": [SOURCE, "returns"]}), spec()
    w = fake_world(monkeypatch, both, partitions=1)
    w.source.produce(SOURCE, 0, 10)
    w.source.produce("returns", 0, 7)
    first = complete(w, "run-1")
    assert ends(first)["returns:0"] == 7
    w.pipeline = replace(w.pipeline, spec=only_first)
    w.source.produce(SOURCE, 0, 5)
    complete(w, "run-2")
    w.source.produce("returns", 0, 3)
    w.pipeline = replace(w.pipeline, spec=both)
    again = coordinator.plan(w.pipeline, "run-3", run_alive=dead)
    assert starts(again)["returns:0"] == 7, "not from offset 0 again"
    assert ends(again)["returns:0"] == 10


def test_a_run_presumed_dead_that_goes_on_committing_writes_nothing_twice(world: FakeWorld):
    """A run on another host outlived what the next run could know of it: the next run recovers its
    checkpoint while it is still committing. Fencing, the one outcome S3 keeps and the commit
    decision settle it: each transaction is committed once, the checkpoint completes once."""
    plan = coordinator.plan(world.pipeline, "run-1")
    prepared = world.prepare(plan)
    first = prepared.transactions[0]
    world.committer.commit(first.transactional_id, first.producer_id, first.epoch)  # run-1, mid-commit
    coordinator.plan(world.pipeline, "run-2", run_alive=dead)  # presumed dead: rolls checkpoint 1 forward
    late = coordinator.commit(world.pipeline, 1)  # run-1 goes on
    assert late.message == "already completed"
    assert sorted(world.committer.committed) == sorted(t.transactional_id for t in prepared.transactions)
    assert world.store.view(1).completed.repair is None
    assert world.source.group_offsets("lockstep-orders") == ends(plan)
