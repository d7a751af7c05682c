"""Decisions: transactional ids, commit-or-abort (all or nothing, roll forward), recovery plans."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CheckpointView,
    CompletedCheckpoint,
    PlannedWith,
    PreparedCheckpoint,
    PreparedTransaction,
)
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.model.state_manifest import StateManifest
from lockstep.model.transactional_ids import parse_transactional_id, transactional_id
from lockstep.model.transactions import TransactionObservation, TransactionState
from lockstep.rules.commit_decision import DecisionKind, decide_commit, end_offsets_after_repair
from lockstep.rules.recovery import compress_partitions, recovery_plan, replay_hint

K = DecisionKind
S = TransactionState
PREFIX = "orders-enrich"
NOW = 1_000_000
TIMEOUT = 900_000
MARGIN = 60_000
#: The claim of checkpoint 42 of the decide_commit tests: one range per task's source partition.
RANGES = tuple(OffsetRange("in", p, 0, 10) for p in range(4))


# --- ids ---


def test_transactional_id_round_trip() -> None:
    tid = transactional_id(PREFIX, 42, 3)
    assert tid == "orders-enrich-42-3"
    assert parse_transactional_id(PREFIX, tid) == (42, 3)
    assert parse_transactional_id(PREFIX, tid).checkpoint_id == 42  # type: ignore[union-attr]


@pytest.mark.parametrize("tid", ["orders-42-3", "orders-enrich-x-3", "orders-enrich-42", "orders-enrich-42-3-1",
                                 "orders-enrich-042-3", "orders-enrich2-42-3", "orders-enrich-42--3"])
def test_foreign_ids_do_not_parse(tid: str) -> None:
    assert parse_transactional_id(PREFIX, tid) is None


def test_longer_prefix_ids_are_not_ours() -> None:
    # the reason load_specs forbids prefix "orders" next to "orders-enrich"
    assert parse_transactional_id("orders", "orders-enrich-42-3") is None
    assert parse_transactional_id("orders", "orders-42-3") == (42, 3)


# --- decide_commit ---


def txn(task: int, records: int = 5) -> PreparedTransaction:
    parts = (TopicPartition("out", task),) if records else ()
    return PreparedTransaction(f"{PREFIX}-42-{task}", 100 + task, 7, parts, records, 0, task, NOW - 1000)


def prepared(*txns: PreparedTransaction) -> PreparedCheckpoint:
    return PreparedCheckpoint(PREFIX, 42, "t", tuple(txns), 10, 10, 0, 1.0)


def obs(task: int, state: TransactionState = S.ONGOING, *, pid: int | None = None, epoch: int = 7,
        started: int = NOW - 1000, timeout: int = TIMEOUT) -> TransactionObservation:
    return TransactionObservation(f"{PREFIX}-42-{task}", state, 100 + task if pid is None else pid, epoch,
                                  started, timeout)


def observed(*observations: TransactionObservation) -> dict[str, TransactionObservation]:
    return {o.transactional_id: o for o in observations}


def decide(p: PreparedCheckpoint, *observations: TransactionObservation):  # type: ignore[no-untyped-def]
    return decide_commit(p, observed(*observations), NOW, MARGIN, RANGES)


def test_all_ongoing_and_ours_commits_all() -> None:
    d = decide(prepared(txn(0), txn(1)), obs(0), obs(1))
    assert d.kind is K.COMMIT
    assert set(d.commit) == {f"{PREFIX}-42-0", f"{PREFIX}-42-1"}
    assert d.abort == () and dict(d.problems) == {}


def test_no_transactions_is_nothing_to_commit() -> None:
    assert decide(prepared()).kind is K.NOTHING_TO_COMMIT


def test_empty_committables_are_ignored() -> None:
    # a task that produced nothing never started a broker transaction: it reads as Empty
    d = decide(prepared(txn(0), txn(1, records=0)), obs(0), obs(1, S.EMPTY, started=-1))
    assert d.kind is K.COMMIT and d.commit == (f"{PREFIX}-42-0",)
    assert decide(prepared(txn(0, records=0))).kind is K.NOTHING_TO_COMMIT


def test_all_committed_is_already_committed() -> None:
    d = decide(prepared(txn(0), txn(1)), obs(0, S.COMPLETE_COMMIT), obs(1, S.COMPLETE_COMMIT))
    assert d.kind is K.ALREADY_COMMITTED
    assert d.commit == () and set(d.already_committed) == {f"{PREFIX}-42-0", f"{PREFIX}-42-1"}


def test_committed_epoch_plus_one_counts_as_ours() -> None:
    # transaction protocol v2 bumps the epoch when the transaction ends
    d = decide(prepared(txn(0)), obs(0, S.COMPLETE_COMMIT, epoch=8))
    assert d.kind is K.ALREADY_COMMITTED
    d = decide(prepared(txn(0)), obs(0, S.COMPLETE_COMMIT, epoch=9))
    assert d.kind is K.ABORT and "fenced" in d.problems[f"{PREFIX}-42-0"]


def test_partial_commit_rolls_forward() -> None:
    d = decide(prepared(txn(0), txn(1), txn(2)), obs(0, S.COMPLETE_COMMIT), obs(1), obs(2, S.PREPARE_COMMIT))
    assert d.kind is K.COMMIT
    assert set(d.commit) == {f"{PREFIX}-42-1", f"{PREFIX}-42-2"}  # PrepareCommit is re-sent (retriable)
    assert d.already_committed == (f"{PREFIX}-42-0",)
    assert "rolling forward" in d.message


def test_prepare_commit_only_is_committed_again() -> None:
    d = decide(prepared(txn(0)), obs(0, S.PREPARE_COMMIT))
    assert d.kind is K.COMMIT and d.commit == (f"{PREFIX}-42-0",)


def test_timed_out_transaction_aborts_all_with_reason() -> None:
    d = decide(prepared(txn(0), txn(1), txn(2), txn(3)), obs(0), obs(1), obs(2), obs(3, started=NOW - TIMEOUT - 1))
    assert d.kind is K.ABORT
    assert set(d.abort) == {f"{PREFIX}-42-{i}" for i in range(4)}
    assert d.commit == ()
    assert d.problems == {f"{PREFIX}-42-3": f"transaction {PREFIX}-42-3 timed out after 900000 ms"}
    assert "checkpoint 42" in d.message and "orders-enrich-42-3 timed out after 900000 ms" in d.message


def test_too_little_time_left_aborts() -> None:
    d = decide(prepared(txn(0)), obs(0, started=NOW - TIMEOUT + MARGIN - 1))
    assert d.kind is K.ABORT
    assert "commit margin" in d.problems[f"{PREFIX}-42-0"]
    # exactly the margin left is still enough
    assert decide(prepared(txn(0)), obs(0, started=NOW - TIMEOUT + MARGIN)).kind is K.COMMIT


@pytest.mark.parametrize(
    ("observation", "reason"),
    [
        (obs(1, pid=999), "fenced"),
        (obs(1, epoch=8), "fenced"),
        (obs(1, S.COMPLETE_ABORT), "aborted"),
        (obs(1, S.PREPARE_ABORT), "being aborted"),
        (obs(1, S.EMPTY, started=-1), "no open transaction"),
        (obs(1, S.DEAD), "expired"),
        (obs(1, S.UNKNOWN), "unknown to the transaction coordinator"),
        (obs(1, "Weird"), "unexpected state 'Weird'"),
        (obs(1, S.PREPARE_EPOCH_FENCE), "unexpected state 'PrepareEpochFence'"),
    ],
)
def test_uncommittable_states_abort_everything(observation: TransactionObservation, reason: str) -> None:
    d = decide(prepared(txn(0), txn(1)), obs(0), observation)
    assert d.kind is K.ABORT
    assert set(d.abort) == {f"{PREFIX}-42-0", f"{PREFIX}-42-1"}
    assert list(d.problems) == [f"{PREFIX}-42-1"]
    assert reason in d.problems[f"{PREFIX}-42-1"]


def test_fencing_reason_names_both_producers() -> None:
    d = decide(prepared(txn(0)), obs(0, pid=555, epoch=9))
    assert "producer id 555 epoch 9" in d.problems[f"{PREFIX}-42-0"]
    assert "100/7" in d.problems[f"{PREFIX}-42-0"]


@pytest.mark.parametrize("bad", [obs(1, S.COMPLETE_ABORT), obs(1, started=NOW - TIMEOUT), obs(1, S.UNKNOWN)])
@pytest.mark.parametrize("done", [S.COMPLETE_COMMIT, S.PREPARE_COMMIT])
def test_partially_committed_and_uncommittable_is_stuck_never_abort(bad: TransactionObservation, done: str) -> None:
    d = decide(prepared(txn(0), txn(1)), obs(0, done), bad)
    assert d.kind is K.STUCK
    assert d.abort == () and d.commit == ()
    assert "must not be aborted" in d.message and "partially committed" in d.message


def test_unobserved_transaction_is_retry_later_not_abort() -> None:
    d = decide(prepared(txn(0), txn(1)), obs(0, S.COMPLETE_ABORT))
    assert d.kind is K.RETRY_LATER
    assert d.abort == () and f"{PREFIX}-42-1" in d.message


# --- recovery_plan ---


def claim(cid: int, tasks: int) -> CheckpointClaim:
    ranges = tuple(OffsetRange("orders", p, 0, 10 if p < tasks else 0) for p in range(tasks + 1))
    return CheckpointClaim(PREFIX, cid, f"run{cid}", "t", ranges, f"checkpoint:{cid - 1}")


def prepared_view(cid: int, tasks: int) -> CheckpointView:
    txns = tuple(PreparedTransaction(transactional_id(PREFIX, cid, i), 1, 0, (TopicPartition("out", i),), 1, 0, i, 0)
                 for i in range(tasks))
    return CheckpointView(claim(cid, tasks), PreparedCheckpoint(PREFIX, cid, "t", txns, tasks, tasks, 0, 1.0))


def aborted_view(cid: int, tasks: int) -> CheckpointView:
    return CheckpointView(claim(cid, tasks), aborted=AbortedCheckpoint(PREFIX, cid, "t", "r", "h"))


def test_clean_state_needs_nothing() -> None:
    plan = recovery_plan([], PREFIX, latest_completed_id=41)
    assert plan.is_clean and plan.next_checkpoint_id == 42
    assert recovery_plan([], PREFIX).next_checkpoint_id == 1


def test_prepared_is_rolled_forward_and_not_fenced() -> None:
    plan = recovery_plan([prepared_view(42, 2)], PREFIX, open_transactional_ids=[f"{PREFIX}-42-0", f"{PREFIX}-42-1"],
                         latest_completed_id=41)
    assert plan.roll_forward == (42,)
    assert plan.mark_aborted == ()
    assert dict(plan.fence) == {}
    assert plan.next_checkpoint_id == 43


def test_claimed_only_is_marked_aborted_and_fenced() -> None:
    plan = recovery_plan([CheckpointView(claim(42, 3))], PREFIX, latest_completed_id=41)
    assert plan.mark_aborted == (42,)
    assert plan.fence == {42: (f"{PREFIX}-42-0", f"{PREFIX}-42-1", f"{PREFIX}-42-2")}
    assert plan.roll_forward == ()


def test_aborted_is_fenced_again_but_not_re_marked() -> None:
    plan = recovery_plan([aborted_view(42, 2)], PREFIX)
    assert plan.mark_aborted == ()
    assert plan.fence == {42: (f"{PREFIX}-42-0", f"{PREFIX}-42-1")}


def test_open_ids_from_a_higher_past_parallelism_are_fenced() -> None:
    open_ids = [f"{PREFIX}-43-7", f"{PREFIX}-43-10", f"{PREFIX}-42-5", "other-pipeline-43-0", f"{PREFIX}-40-2"]
    plan = recovery_plan([CheckpointView(claim(43, 2))], PREFIX, open_ids, latest_completed_id=42)
    assert plan.fence == {
        40: (f"{PREFIX}-40-2",),
        42: (f"{PREFIX}-42-5",),
        43: (f"{PREFIX}-43-0", f"{PREFIX}-43-1", f"{PREFIX}-43-7", f"{PREFIX}-43-10"),
    }


def test_scaling_down_after_a_crash_fences_every_id_the_crashed_checkpoint_could_have_used() -> None:
    """Seeds' 003: after a scale-down the ids of the higher parallelism must be fenced too. Lockstep's ids
    carry the checkpoint id, and recovery fences a crashed checkpoint's ids by the parallelism pinned in
    its claim, never the spec's current one (which `recovery_plan` is not even given): lowering
    `sink.parallelism` from 8 to 2 while checkpoint 43 is in flight still fences all 8 of its ids, and
    the next checkpoint's 2 ids are new ones no earlier run could have used."""
    pinned = PlannedWith(source_topics=("orders",), source_kafka_conn_id="k", sink_topic="out",
                         dead_letter_topic="dlq", sink_writer="jvm", sink_kafka_conn_id="k", id_prefix=PREFIX,
                         timeout_ms=900_000, sink_parallelism=8)
    ranges = tuple(OffsetRange("orders", p, 0, 10) for p in range(16))
    crashed = CheckpointClaim(PREFIX, 43, "run43", "t", ranges, "checkpoint:42", planned_with=pinned)
    plan = recovery_plan([CheckpointView(crashed)], PREFIX, latest_completed_id=42)
    assert plan.fence == {43: tuple(transactional_id(PREFIX, 43, i) for i in range(8))}
    assert plan.next_checkpoint_id == 44
    scaled_down = replace(crashed, checkpoint_id=44, planned_with=replace(pinned, sink_parallelism=2))
    assert scaled_down.task_count == 2
    assert not {transactional_id(PREFIX, 44, i) for i in range(2)} & set(plan.fence[43])


def test_an_auto_claim_fences_what_its_run_recorded_else_everything_it_allows() -> None:
    pinned = PlannedWith(source_topics=("orders",), source_kafka_conn_id="k", sink_topic="out",
                         dead_letter_topic="dlq", sink_writer="jvm", sink_kafka_conn_id="k", id_prefix=PREFIX,
                         timeout_ms=900_000, sink_parallelism="auto")
    ranges = tuple(OffsetRange("orders", p, 0, 10) for p in range(1024))
    crashed = CheckpointView(CheckpointClaim(PREFIX, 43, "run43", "t", ranges, "checkpoint:42", planned_with=pinned))
    assert len(recovery_plan([crashed], PREFIX).fence[43]) == 256  # MAX_AUTO_PARALLELISM
    recorded = replace(crashed, write_tasks=2)
    assert recovery_plan([recorded], PREFIX).fence == {43: (f"{PREFIX}-43-0", f"{PREFIX}-43-1")}


def test_leftover_ids_of_a_prepared_checkpoint_are_fenced_but_its_committables_kept() -> None:
    plan = recovery_plan([prepared_view(42, 2)], PREFIX, [f"{PREFIX}-42-1", f"{PREFIX}-42-4"])
    assert plan.fence == {42: (f"{PREFIX}-42-4",)}


def test_mixed_views() -> None:
    views = [CheckpointView(claim(45, 1)), prepared_view(43, 2), aborted_view(44, 1)]
    plan = recovery_plan(views, PREFIX, latest_completed_id=42)
    assert plan.roll_forward == (43,)
    assert plan.mark_aborted == (45,)
    assert set(plan.fence) == {44, 45}
    assert plan.next_checkpoint_id == 46


def test_completed_views_need_nothing_but_count_for_the_next_id() -> None:
    done = CheckpointView(claim(50, 1), completed=CompletedCheckpoint(PREFIX, 50, "t", {}, ()))
    plan = recovery_plan([done], PREFIX, latest_completed_id=49)
    assert plan.is_clean and plan.next_checkpoint_id == 51


# --- messages ---


@pytest.mark.parametrize(
    ("parts", "text"),
    [([], ""), ([3], "3"), ([0, 1, 2, 3, 4, 5], "0-5"), ([7, 0, 1, 2, 3, 4, 5], "0-5,7"),
     ([1, 3, 5], "1,3,5"), ([8, 9, 1, 1], "1,8-9")],
)
def test_compress_partitions(parts: list[int], text: str) -> None:
    assert compress_partitions(parts) == text


def test_replay_hint() -> None:
    ranges = [OffsetRange("orders", p, 0, 5) for p in range(6)] + [OffsetRange("orders", 6, 3, 3),
                                                                   OffsetRange("orders", 7, 0, 1),
                                                                   OffsetRange("payments", 2, 0, 1)]
    assert replay_hint(ranges, "checkpoint 41") == (
        "the next run replays orders partitions 0-5,7; payments partition 2 from checkpoint 41")
    assert "nothing to replay" in replay_hint([OffsetRange("orders", 0, 3, 3)], "checkpoint 41")


def test_a_transaction_the_broker_timed_out_is_reported_as_a_timeout_not_a_fence():
    from lockstep.model.checkpoint import PreparedCheckpoint, PreparedTransaction
    from lockstep.model.offsets import TopicPartition
    from lockstep.model.transactions import TransactionObservation
    from lockstep.rules.commit_decision import DecisionKind, decide_commit

    t = PreparedTransaction("p-1-0", 7, 0, (TopicPartition("out", 0),), 5, 0, 0, 1_000)
    prepared = PreparedCheckpoint("p", 1, "now", (t,), 5, 5, 0, 1.0)
    timed_out = TransactionObservation("p-1-0", S.COMPLETE_ABORT, 7, 1, 1_000, 4_000)
    decision = decide_commit(prepared, {"p-1-0": timed_out}, now_ms=10_000, margin_ms=1_000, ranges=())
    assert decision.kind is DecisionKind.ABORT
    assert "p-1-0 timed out after 4000 ms" in decision.message
    fenced = TransactionObservation("p-1-0", S.EMPTY, 7, 2, -1, 4_000)
    decision = decide_commit(prepared, {"p-1-0": fenced}, now_ms=10_000, margin_ms=1_000, ranges=())
    assert "timed out" not in decision.message


# --- runs in flight ---------------------------------------------------------------------------


def test_cli_run_ids_round_trip_even_with_dashes_in_the_host():
    from lockstep.rules.run_ownership import cli_run_id, parse_cli_run_id

    assert parse_cli_run_id(cli_run_id("build-host-7", 4242, "ab12cd34")) == ("build-host-7", 4242)
    assert parse_cli_run_id("manual__2026-11-21T22:00:07+00:00") is None
    assert parse_cli_run_id("cli-nopid") is None


def test_a_cli_run_on_this_host_is_in_flight_exactly_while_its_process_lives():
    from lockstep.rules.run_ownership import claim_in_flight, cli_run_id

    run = cli_run_id("here", 99, "n")
    alive = claim_in_flight(run, claimed_at_ms=0, now_ms=10**12, lease_ms=1, my_host="here", pid_alive=lambda p: True)
    assert alive is not None and "pid 99" in alive  # alive however old the claim is
    assert claim_in_flight(run, 0, 1, 10**9, "here", pid_alive=lambda p: False) is None  # dead however young


def test_other_owners_are_presumed_alive_for_the_transaction_timeout():
    from lockstep.rules.run_ownership import claim_in_flight, cli_run_id

    never = lambda pid: (_ for _ in ()).throw(AssertionError("a remote pid must not be probed"))
    for owner in ("manual__2026-11-21T22:00:07+00:00", cli_run_id("elsewhere", 5, "n")):
        young = claim_in_flight(owner, claimed_at_ms=1_000, now_ms=61_000, lease_ms=900_000, my_host="here",
                                pid_alive=never)
        assert young is not None and "840 s more" in young
        assert claim_in_flight(owner, 1_000, 901_001, 900_000, "here", never) is None


# --- repair of a partially committed checkpoint ---

CLAIMED = (OffsetRange("in", 0, 0, 10), OffsetRange("in", 1, 5, 9), OffsetRange("in", 2, 3, 3))


def sourced(task: int, *sources: int) -> PreparedTransaction:
    return replace(txn(task), sources=tuple(TopicPartition("in", p) for p in sources))


def decide_with_claim(p: PreparedCheckpoint, *observations: TransactionObservation):  # type: ignore[no-untyped-def]
    return decide_commit(p, observed(*observations), NOW, MARGIN, CLAIMED)


@pytest.mark.parametrize("lost", [obs(1, S.COMPLETE_ABORT), obs(1, S.COMPLETE_ABORT, epoch=8, started=NOW - TIMEOUT),
                                  obs(1, S.EMPTY, pid=555, epoch=0)])
@pytest.mark.parametrize("done", [S.COMPLETE_COMMIT, S.PREPARE_COMMIT])
def test_a_lost_transaction_after_a_commit_is_repaired_with_its_input_ranges(lost: TransactionObservation,
                                                                             done: TransactionState) -> None:
    d = decide_with_claim(prepared(sourced(0, 0), sourced(1, 1)), obs(0, done), lost)
    assert d.kind is K.REPAIR
    assert d.abort == (f"{PREFIX}-42-1",), "the lost transaction is fenced, so nothing of it commits later"
    assert d.replay == (OffsetRange("in", 1, 5, 9),), "exactly the lost transaction's source range goes back"
    assert d.commit == ((f"{PREFIX}-42-0",) if done == S.PREPARE_COMMIT else ())
    assert list(d.problems) == [f"{PREFIX}-42-1"]
    assert "Repairing it" in d.message and "in:1[5,9)" in d.message


def test_a_repair_commits_the_transactions_still_open_and_replays_every_lost_ones_sources() -> None:
    d = decide_with_claim(prepared(sourced(0, 0), sourced(1, 1), sourced(2, 1), sourced(3)),
                          obs(0, S.COMPLETE_COMMIT), obs(1, S.COMPLETE_ABORT), obs(2, S.COMPLETE_ABORT), obs(3))
    assert d.kind is K.REPAIR
    assert d.commit == (f"{PREFIX}-42-3",)
    assert set(d.abort) == {f"{PREFIX}-42-1", f"{PREFIX}-42-2"}
    # two lost transactions shared in:1 (a shuffle among the lost only): its range goes back once
    assert d.replay == (OffsetRange("in", 1, 5, 9),)


def test_a_source_partition_split_between_a_lost_and_a_committed_transaction_cannot_be_repaired() -> None:
    d = decide_with_claim(prepared(sourced(0, 0, 1), sourced(1, 1)), obs(0, S.COMPLETE_COMMIT),
                          obs(1, S.COMPLETE_ABORT))
    assert d.kind is K.STUCK
    assert d.abort == () and d.commit == () and d.replay == ()
    assert "cannot be repaired" in d.message and "in:1" in d.message and "shuffle" in d.message


def test_committables_without_sources_cannot_be_repaired_and_say_why() -> None:
    d = decide_with_claim(prepared(sourced(0, 0), txn(1)), obs(0, S.COMPLETE_COMMIT), obs(1, S.COMPLETE_ABORT))
    assert d.kind is K.STUCK
    assert "earlier version" in d.message and f"{PREFIX}-42-1" in d.message


def test_a_lost_transactions_source_outside_the_claim_is_refused() -> None:
    d = decide_with_claim(prepared(sourced(0, 0), sourced(1, 7)), obs(0, S.COMPLETE_COMMIT), obs(1, S.COMPLETE_ABORT))
    assert d.kind is K.STUCK and "in:7" in d.message


def test_an_unobserved_transaction_waits_even_when_another_was_lost() -> None:
    d = decide_with_claim(prepared(sourced(0, 0), sourced(1, 1), sourced(2, 2)), obs(0, S.COMPLETE_COMMIT),
                          obs(1, S.COMPLETE_ABORT))
    assert d.kind is K.RETRY_LATER


def test_the_next_checkpoint_starts_given_back_partitions_where_this_one_started_them() -> None:
    ends = end_offsets_after_repair(CLAIMED, (OffsetRange("in", 1, 5, 9),))
    assert ends == {"in:0": 10, "in:1": 5, "in:2": 3}


@pytest.mark.parametrize(("accept", "replayed"), [("duplicates", (OffsetRange("in", 1, 5, 9),)),
                                                  ("loss", ())])
def test_a_stuck_checkpoint_is_settled_only_as_the_user_accepts(accept: str, replayed: tuple) -> None:
    shuffled = prepared(sourced(0, 0, 1), sourced(1, 1))
    observations = (obs(0, S.COMPLETE_COMMIT), obs(1, S.COMPLETE_ABORT))
    stuck = decide_with_claim(shuffled, *observations)
    assert stuck.kind is K.STUCK and "--accept duplicates" in stuck.message and "--accept loss" in stuck.message
    d = decide_commit(shuffled, observed(*observations), NOW, MARGIN, CLAIMED, accept)
    assert d.kind is K.REPAIR and d.accepted == accept and d.replay == replayed
    assert d.abort == (f"{PREFIX}-42-1",) and f"accepted ({accept}" in d.message


def test_accepting_duplicates_without_sources_gives_back_the_whole_claim() -> None:
    d = decide_commit(prepared(sourced(0, 0), txn(1)), observed(obs(0, S.COMPLETE_COMMIT), obs(1, S.COMPLETE_ABORT)),
                      NOW, MARGIN, CLAIMED, "duplicates")
    assert d.kind is K.REPAIR and d.replay == CLAIMED[:2]


def test_an_exact_repair_ignores_what_the_user_would_accept() -> None:
    d = decide_commit(prepared(sourced(0, 0), sourced(1, 1)),
                      observed(obs(0, S.COMPLETE_COMMIT), obs(1, S.COMPLETE_ABORT)), NOW, MARGIN, CLAIMED, "loss")
    assert d.kind is K.REPAIR and d.accepted is None and d.replay == (OffsetRange("in", 1, 5, 9),)


# --- a stateful checkpoint: its state already counted the lost records ---

STATE = StateManifest(operator="window", key_groups=4, written_by=42, files={0: ("s/state/000000000042/kg-00000.parquet",)},
                      columns={"__ls_key": "string"}, watermark_ms=1_000, partitions={})


def stateful(*txns: PreparedTransaction) -> PreparedCheckpoint:
    return replace(prepared(*txns), state=STATE)


LOST_AFTER_COMMIT = (obs(0, S.COMPLETE_COMMIT), obs(1, S.COMPLETE_ABORT))


def test_a_stateful_checkpoint_of_an_earlier_version_with_a_lost_transaction_is_stuck() -> None:
    exact = decide_with_claim(prepared(sourced(0, 0), sourced(1, 1)), *LOST_AFTER_COMMIT)
    assert exact.kind is K.REPAIR, "the same checkpoint without state is repaired exactly"
    d = decide_with_claim(stateful(sourced(0, 0), sourced(1, 1)), *LOST_AFTER_COMMIT)
    assert d.kind is K.STUCK, "no output_tasks: its output was not placed by rule"
    assert d.commit == () and d.abort == () and d.replay == ()
    assert "earlier version of Lockstep" in d.message and "keyed state already holds the effect" in d.message
    assert "--accept duplicates" in d.message and "--accept loss" in d.message


@pytest.mark.parametrize("observations, rerun, commit", [
    (LOST_AFTER_COMMIT, (1,), ()),
    ((obs(0, S.COMPLETE_ABORT), obs(1, S.COMPLETE_COMMIT), obs(2)), (0,), (f"{PREFIX}-42-2",)),
    ((obs(0, S.COMPLETE_COMMIT), obs(1, S.COMPLETE_ABORT), obs(2, S.EMPTY, pid=555, epoch=0)), (1, 2), ()),
])
def test_a_stateful_partial_commit_is_repaired_by_computing_the_lost_tasks_share_again(observations, rerun,
                                                                                      commit) -> None:
    txns = [sourced(i, i) for i in range(len(observations))]
    d = decide_with_claim(replace(stateful(*txns), output_tasks=len(txns)), *observations)
    assert d.kind is K.REPAIR and d.accepted is None
    assert d.rerun == rerun and d.of_tasks == len(txns)
    assert d.replay == (), "no input goes back: the state already holds every record's effect"
    assert d.commit == commit and d.abort == tuple(f"{PREFIX}-42-{t}" for t in rerun)
    assert "computes checkpoint 42 again from its claim" in d.message
    # The next checkpoint starts where this one ends: nothing is read again as new input.
    assert end_offsets_after_repair(CLAIMED, d.replay) == {r.tp.key: r.end for r in CLAIMED}


def test_a_stuck_stateful_checkpoint_accepted_as_loss_gives_nothing_back() -> None:
    d = decide_commit(stateful(sourced(0, 0), sourced(1, 1)), observed(*LOST_AFTER_COMMIT), NOW, MARGIN, CLAIMED,
                      "loss")
    assert d.kind is K.REPAIR and d.accepted == "loss"
    assert d.replay == ()
    assert d.abort == (f"{PREFIX}-42-1",)


def test_a_stuck_stateful_checkpoint_accepted_as_duplicates_gives_back_all_its_claimed_input() -> None:
    # the state goes back to the checkpoint's base, so even the kept transaction's in:0 is read again
    d = decide_commit(stateful(sourced(0, 0), sourced(1, 1)), observed(*LOST_AFTER_COMMIT), NOW, MARGIN, CLAIMED,
                      "duplicates")
    assert d.kind is K.REPAIR and d.accepted == "duplicates"
    assert d.replay == (OffsetRange("in", 0, 0, 10), OffsetRange("in", 1, 5, 9)), "every non-empty claimed range"
    assert d.abort == (f"{PREFIX}-42-1",)
    ends = end_offsets_after_repair(CLAIMED, d.replay)
    assert ends == {"in:0": 0, "in:1": 5, "in:2": 3}, "the next checkpoint starts where this one did"
