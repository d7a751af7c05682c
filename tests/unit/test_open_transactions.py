"""The transaction console's pure part: which open transactions are the pipeline's, of which
checkpoint and task, time left, what they pin, and the words of what resolve would do."""
from __future__ import annotations

from lockstep.model.checkpoint import (
    CheckpointClaim,
    CheckpointView,
    CompletedCheckpoint,
    PreparedCheckpoint,
    PreparedTransaction,
)
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.model.transactions import TransactionObservation, TransactionState
from lockstep.ops.open_transactions import (
    COMMIT,
    FENCE,
    FOREIGN,
    IN_FLIGHT,
    LEAVE,
    duration,
    owner,
    resolution,
    rows,
    table,
    while_in_flight,
)
from lockstep.rules.commit_decision import decide_commit
from lockstep.rules.recovery import recovery_plan

PREFIX = "tx-orders"
NOW = 10_000_000
TIMEOUT = 900_000
OUT0, OUT1, IN0 = TopicPartition("out", 0), TopicPartition("out", 1), TopicPartition("in", 0)


def claim(cid: int, tasks: int = 2, run_id: str = "scheduled__x") -> CheckpointClaim:
    ranges = tuple(OffsetRange("in", i, 0, 10) for i in range(tasks))
    return CheckpointClaim("orders", cid, run_id, "2026-11-23T10:00:00+00:00", ranges, "earliest")


def prepared(cid: int, tasks: int = 2) -> CheckpointView:
    txns = tuple(PreparedTransaction(f"{PREFIX}-{cid}-{i}", 100 + i, 0, (TopicPartition("out", i),), 10, 0, i, 0)
                 for i in range(tasks))
    return CheckpointView(claim(cid, tasks, "run-prepared"),
                          PreparedCheckpoint("orders", cid, "2026-11-23T10:01:00+00:00", txns, 20, 20, 0, 1.0))


def obs(tid: str, *parts: TopicPartition, started: int = NOW - 60_000, pid: int = 100, state: TransactionState = TransactionState.ONGOING):
    return TransactionObservation(tid, state, pid, 0, started, TIMEOUT, partitions=parts)


def test_owner_parses_only_ids_made_under_the_listed_prefixes_and_cluster():
    scopes = {None: (PREFIX, "old-prefix"), "other": ("far",)}
    assert owner(f"{PREFIX}-7-1", None, scopes) == (PREFIX, 7, 1)
    assert owner("old-prefix-3-0", None, scopes) == ("old-prefix", 3, 0)
    assert owner("far-3-0", None, scopes) is None  # that prefix is listed on another cluster only
    assert owner("far-3-0", "other", scopes) == ("far", 3, 0)
    assert owner(f"{PREFIX}-2-7-1", None, scopes) is None  # another pipeline's longer prefix
    assert owner("someone-else", None, scopes) is None


def test_rows_map_ours_to_checkpoint_task_status_and_time_left():
    views = {4: CheckpointView(claim(4, run_id="cli-h-1-ab")), 5: prepared(5)}
    plan = recovery_plan(list(views.values()), PREFIX, [f"{PREFIX}-4-0", f"{PREFIX}-5-0", f"{PREFIX}-5-1"])
    observed = {None: [obs(f"{PREFIX}-5-1", OUT1, pid=101), obs(f"{PREFIX}-4-0", OUT0, started=NOW - 890_000),
                       obs(f"{PREFIX}-5-0", OUT0)]}
    offsets = {(None, OUT0): (40, 70), (None, OUT1): (55, 55)}
    found = rows(observed, {None: (PREFIX,)}, views, offsets, [], plan, NOW)
    assert [(r.checkpoint_id, r.task_index, r.checkpoint_status, r.action) for r in found] == [
        (4, 0, "claimed", FENCE), (5, 0, "prepared", COMMIT), (5, 1, "prepared", COMMIT)]
    first = found[0]
    assert first.run_id == "cli-h-1-ab" and not first.foreign
    assert (first.age_ms, first.time_left_ms) == (890_000, 10_000)
    assert [h.partition for h in first.pinned] == ["out:0"] and first.held_back == 30
    assert found[2].pinned == () and found[2].partitions[0].held_back == 0  # LSO = high watermark


def test_an_open_id_of_a_checkpoint_the_store_does_not_know_is_unknown_and_fenced():
    plan = recovery_plan([], PREFIX, [f"{PREFIX}-9-0"])
    found = rows({None: [obs(f"{PREFIX}-9-0", OUT0)]}, {None: (PREFIX,)}, {}, {}, [], plan, NOW)
    assert (found[0].checkpoint_status, found[0].run_id, found[0].action) == ("unknown", None, FENCE)


def test_an_open_id_under_a_left_prefix_of_a_completed_checkpoint_is_left():
    done = CheckpointView(claim(3), completed=CompletedCheckpoint("orders", 3, "t", {}, ()))
    plan = recovery_plan([], PREFIX, ["old-3-0"])
    found = rows({None: [obs("old-3-0", OUT0)]}, {None: (PREFIX, "old")}, {3: done}, {}, [], plan, NOW)
    assert (found[0].checkpoint_status, found[0].action) == ("completed", LEAVE)


def test_foreign_transactions_are_listed_only_where_they_touch_watched_partitions():
    plan = recovery_plan([], PREFIX, [])
    observed = {None: [obs("loader-1", OUT0, TopicPartition("elsewhere", 0), started=NOW - 5_000),
                       obs("unrelated", TopicPartition("elsewhere", 0))],
                "src": [obs("feeder", IN0)]}
    offsets = {(None, OUT0): (10, 12), ("src", IN0): (0, 3)}
    found = rows(observed, {None: (PREFIX,)}, {}, offsets, [(None, OUT0), ("src", IN0)], plan, NOW)
    assert [(r.transactional_id, r.foreign, r.action, r.checkpoint_id) for r in found] == [
        ("feeder", True, FOREIGN, None), ("loader-1", True, FOREIGN, None)]
    loader = found[1]
    assert [h.partition for h in loader.partitions] == ["out:0"] and loader.held_back == 2 and loader.age_ms == 5_000


def test_time_left_is_overdue_when_past_and_unknown_before_start():
    plan = recovery_plan([], PREFIX, [])
    late = obs(f"{PREFIX}-1-0", started=NOW - TIMEOUT - 3_000)
    unstarted = TransactionObservation(f"{PREFIX}-1-1", TransactionState.ONGOING, 1, 0, -1, TIMEOUT)
    found = rows({None: [late, unstarted]}, {None: (PREFIX,)}, {}, {}, [], plan, NOW)
    assert [r.time_left_ms for r in found] == [-3_000, None]
    assert duration(-3_000) == "overdue 3 s" and duration(None) == "–" and duration(754_000) == "12 min 34 s"


def test_dry_run_words_say_per_checkpoint_what_resolve_does_in_recovery_order():
    views = {4: CheckpointView(claim(4, run_id="cli-h-1-ab")), 5: prepared(5)}
    plan = recovery_plan(list(views.values()), PREFIX, [f"{PREFIX}-4-0"])
    observed = {t.transactional_id: obs(t.transactional_id, pid=t.producer_id)
                for t in views[5].prepared.transactions}
    decision = decide_commit(views[5].prepared, observed, NOW, 60_000, views[5].claim.ranges)
    foreign = rows({None: [obs("loader-1", OUT0)]}, {None: (PREFIX,)}, {}, {}, [(None, OUT0)], plan, NOW)
    assert resolution(plan, views, {5: decision}, foreign) == [
        f"checkpoint 5 (prepared, run run-prepared): roll forward: commit {PREFIX}-5-0, {PREFIX}-5-1, then mark it "
        "completed and publish its offsets",
        f"checkpoint 4 (claimed, run cli-h-1-ab): fence {PREFIX}-4-0, {PREFIX}-4-1",
        "checkpoint 4 (claimed, run cli-h-1-ab): mark it aborted; the next run replays its ranges",
        "foreign transaction loader-1: left alone (not this pipeline's)",
    ]


def test_dry_run_words_for_a_prepared_checkpoint_whose_transaction_timed_out_say_it_aborts():
    views = {5: prepared(5)}
    plan = recovery_plan(list(views.values()), PREFIX, [])
    observed = {t.transactional_id: obs(t.transactional_id, pid=t.producer_id, started=NOW - TIMEOUT - 1)
                for t in views[5].prepared.transactions}
    [line] = resolution(plan, views, {5: decide_commit(views[5].prepared, observed, NOW, 60_000, views[5].claim.ranges)})
    assert line.startswith("checkpoint 5 (prepared, run run-prepared): roll forward fails: ")
    assert line.endswith("fence its transactions and mark it aborted")


def test_nothing_to_resolve_is_said_and_the_table_says_nothing_is_open():
    assert resolution(recovery_plan([], PREFIX, []), {}, {}) == [
        "nothing to resolve: no unsettled checkpoint and no open transaction of this pipeline"]
    assert table([]) == ["no open transactions of this pipeline, and none holding back its partitions"]


def test_table_shows_checkpoint_task_time_left_and_held_back_records():
    views = {4: CheckpointView(claim(4, run_id="cli-h-1-ab"))}
    plan = recovery_plan(list(views.values()), PREFIX, [f"{PREFIX}-4-0"])
    found = rows({None: [obs(f"{PREFIX}-4-0", OUT0), obs("loader-1", OUT0)]}, {None: (PREFIX,)}, views,
                 {(None, OUT0): (40, 70)}, [(None, OUT0)], plan, NOW)
    text = "\n".join(table(found))
    assert f"{PREFIX}-4-0" in text and "claimed" in text and "14 min 0 s" in text and "fence" in text
    assert "out:0: pins LSO 40, holds back 30 records (high watermark 70)" in text
    assert text.endswith("1 open transaction of this pipeline, 1 foreign one holding back its partitions "
                         "(reported only: resolve never touches them)")


def test_while_a_run_is_in_flight_resolve_would_do_nothing_to_any_of_ours():
    views = {4: CheckpointView(claim(4, run_id="cli-h-1-ab"))}
    plan = recovery_plan(list(views.values()), PREFIX, [f"{PREFIX}-4-0"])
    found = rows({None: [obs(f"{PREFIX}-4-0", OUT0), obs("loader-1", OUT0)]}, {None: (PREFIX,)}, views, {},
                 [(None, OUT0)], plan, NOW)
    assert [r.action for r in while_in_flight(found, None)] == [FENCE, FOREIGN]
    assert [r.action for r in while_in_flight(found, "checkpoint 4 is still in flight")] == [IN_FLIGHT, FOREIGN]
