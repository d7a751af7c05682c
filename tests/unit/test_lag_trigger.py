"""When a lag-triggered pipeline starts a checkpoint (`lockstep.rules.lag_trigger.start_reason`)."""
from __future__ import annotations

import dataclasses

import pytest

from lockstep.model.offsets import TopicPartition
from lockstep.rules.lag_trigger import (
    FULL_LOOK_EVERY_S,
    REFIRE_AFTER_S,
    Fired,
    SourceLook,
    interval_left_s,
    quiet,
    start_reason,
    still_quiet,
    waiting_for_claim,
)
from lockstep.spec import TriggerSpec

TRIGGER = TriggerSpec(lag_records=1000, max_wait_s=300)
NOW = 1_000_000.0
LEASE = 900.0


def look(unread: int | None = 0, newest: int | None = 7, in_flight_age: float | None = None,
         since_completed: float | None = 10.0) -> SourceLook:
    return SourceLook(unread=unread, newest_checkpoint=newest, in_flight_age_s=in_flight_age,
                      since_completed_s=since_completed)


def reason(seen: SourceLook, fired: Fired | None = None) -> str | None:
    return start_reason(seen, TRIGGER, fired, NOW, LEASE)


@pytest.mark.parametrize("since", [10.0, 3600.0, None])
def test_an_idle_topic_starts_nothing_however_long_it_has_been(since) -> None:
    assert reason(look(unread=0, since_completed=since)) is None


def test_a_trickle_waits_for_max_wait_then_starts() -> None:
    assert reason(look(unread=5, since_completed=299.0)) is None
    assert reason(look(unread=5, since_completed=300.0)) == (
        "5 records unread and the last checkpoint completed 300 s ago, at least checkpoints.trigger.max_wait (300 s)")


def test_a_burst_starts_at_once() -> None:
    assert reason(look(unread=1000, since_completed=1.0)) == (
        "1,000 records unread, at least checkpoints.trigger.lag_records (1,000)")


def test_having_fired_it_waits_for_the_run_to_claim_a_checkpoint_so_one_burst_is_one_run() -> None:
    burst = look(unread=50_000, newest=7)
    fired = Fired(at_s=NOW - 30, newest_checkpoint=7)
    assert reason(burst, fired) is None  # the run it started has not planned yet
    assert reason(look(unread=50_000, newest=8), fired) is not None  # it completed: the rest is a new burst
    # A run that never claimed anything (failed before planning, DAG paused) does not hold it forever:
    assert reason(burst, Fired(at_s=NOW - REFIRE_AFTER_S, newest_checkpoint=7)) is not None


def test_records_beyond_a_checkpoint_in_flight_queue_one_run_behind_it_and_no_more() -> None:
    """The run the watcher started claimed checkpoint 8 (in flight); what arrived since is unread. At the mark the
    watcher fires at once, so the next run waits in Airflow's queue for this one; having fired with checkpoint 8
    newest, it fires no more until the queued run has claimed checkpoint 9."""
    fired = Fired(at_s=NOW - 3, newest_checkpoint=7)
    assert reason(look(unread=999, newest=8, in_flight_age=2.0), fired) is None  # below the mark
    assert reason(look(unread=1000, newest=8, in_flight_age=2.0), fired) == (
        "1,000 records unread beyond checkpoint 8, which is in flight, at least checkpoints.trigger.lag_records "
        "(1,000): the next run waits for it and starts when it ends")
    queued = Fired(at_s=NOW - 1, newest_checkpoint=8)
    assert reason(look(unread=50_000, newest=8, in_flight_age=4.0), queued) is None  # one run ahead, no more
    assert reason(look(unread=50_000, newest=8), queued) is None  # completed, the queued run not started yet
    assert reason(look(unread=50_000, newest=9, in_flight_age=0.5), queued) is not None  # it claimed: one ahead again
    # A trickle below the mark waits for the commit and max_wait, as before.
    assert reason(look(unread=5, newest=8, in_flight_age=2.0, since_completed=400.0), fired) is None


def test_a_checkpoint_left_in_flight_past_its_transactions_timeout_starts_a_run_to_recover_it() -> None:
    assert reason(look(unread=0, newest=8, in_flight_age=LEASE - 1)) is None
    assert reason(look(unread=0, newest=8, in_flight_age=LEASE)) == (
        "checkpoint 8 has been in flight for 900 s, longer than its transactions' timeout: a run recovers it")


def test_a_new_pipeline_runs_a_first_checkpoint_to_find_where_to_start() -> None:
    assert reason(look(unread=None, newest=None, since_completed=None)) == (
        "no checkpoint has completed yet: a first checkpoint finds where to start")


# ---- checkpoints.trigger.min_interval ------------------------------------------------------------------------
SPACED = dataclasses.replace(TRIGGER, min_interval_s=5)


def test_min_interval_holds_a_burst_until_the_last_checkpoint_started_that_long_ago() -> None:
    burst = dataclasses.replace(look(unread=50_000, newest=8), since_started_s=3.0)
    assert start_reason(burst, SPACED, None, NOW, LEASE) is None
    assert interval_left_s(burst, SPACED) == 2.0
    later = dataclasses.replace(burst, since_started_s=5.0)
    assert interval_left_s(later, SPACED) == 0.0
    assert start_reason(later, SPACED, None, NOW, LEASE) == (
        "50,000 records unread, at least checkpoints.trigger.lag_records (1,000)")
    assert start_reason(burst, TRIGGER, None, NOW, LEASE) is not None  # no interval: at once, as before


def test_min_interval_holds_the_run_one_ahead_too_and_spaces_starts_not_ends() -> None:
    """A checkpoint in flight for 2 s: the next starts once 5 s have passed since this one's start, while it may
    still be running (the next run then waits for it, as without an interval)."""
    flying = dataclasses.replace(look(unread=50_000, newest=8, in_flight_age=2.0), since_started_s=2.0)
    assert start_reason(flying, SPACED, None, NOW, LEASE) is None
    flying = dataclasses.replace(flying, in_flight_age_s=5.0, since_started_s=5.0)
    assert start_reason(flying, SPACED, None, NOW, LEASE) is not None


def test_min_interval_counts_from_the_fire_that_started_the_newest_checkpoint_not_from_its_claim() -> None:
    """The watcher fired for checkpoint 9 (8 the newest then) 4.5 s ago; the run claimed 9 1.5 s later. The next
    start is due 5 s after the fire, not after the claim. A fire older than the newest checkpoint's start (a run
    started by hand claimed 10) counts for nothing."""
    seen = dataclasses.replace(look(unread=50_000, newest=9), since_started_s=3.0)
    fired = Fired(at_s=NOW - 4.5, newest_checkpoint=8)
    assert interval_left_s(seen, SPACED, fired, NOW) == 0.5
    assert start_reason(seen, SPACED, fired, NOW, LEASE) is None
    assert start_reason(seen, SPACED, fired, NOW + 0.5, LEASE) is not None
    by_hand = dataclasses.replace(seen, newest_checkpoint=10)
    assert interval_left_s(by_hand, SPACED, fired, NOW) == 2.0
    first = Fired(at_s=NOW - 4.5, newest_checkpoint=None)  # the fire that started checkpoint 1
    assert interval_left_s(dataclasses.replace(seen, newest_checkpoint=1), SPACED, first, NOW) == 0.5


def test_min_interval_never_holds_back_a_recovery_or_a_first_checkpoint() -> None:
    stuck = dataclasses.replace(look(unread=0, newest=8, in_flight_age=LEASE), since_started_s=1.0)
    assert start_reason(stuck, dataclasses.replace(TRIGGER, min_interval_s=3600), None, NOW, LEASE) is not None
    first = look(unread=None, newest=None, since_completed=None)
    assert interval_left_s(first, SPACED) == 0.0 and start_reason(first, SPACED, None, NOW, LEASE) is not None


@pytest.mark.parametrize("doc", [None, {}, {"at_s": "yesterday"}, ["at_s", 1], {"at_s": True}])
def test_a_missing_or_damaged_marker_is_no_marker(doc) -> None:
    assert Fired.from_json(doc) is None
    assert Fired.from_json(Fired(12.5, 3).to_json()) == Fired(12.5, 3)


def test_an_idle_source_starts_a_run_once_a_window_is_due_by_idle_advance():
    from lockstep.rules.lag_trigger import SourceLook, start_reason
    from lockstep.spec import TriggerSpec

    trigger = TriggerSpec(lag_records=100, max_wait_s=3600, poll_s=1.0)
    waiting = SourceLook(unread=0, newest_checkpoint=4, in_flight_age_s=None, since_completed_s=5.0, timers_due_in_s=2.5)
    assert start_reason(waiting, trigger, None, 1_000.0, 900.0) is None
    due = SourceLook(unread=0, newest_checkpoint=4, in_flight_age_s=None, since_completed_s=8.0, timers_due_in_s=0.0)
    assert "idle_advance" in start_reason(due, trigger, None, 1_000.0, 900.0)
    from lockstep.rules.lag_trigger import Fired

    assert start_reason(due, trigger, Fired(999.0, 4), 1_000.0, 900.0) is None, "edge-triggered, as for the lag"


# ---- a quiet source: looks that stop at the broker's offsets --------------------------------------------
def _offsets(*ends: int) -> dict[TopicPartition, int]:
    return {TopicPartition("orders-in", p): end for p, end in enumerate(ends)}


def test_a_quiet_look_lets_the_next_ones_stop_at_the_offsets_while_they_do_not_move() -> None:
    last = quiet(look(unread=0), _offsets(5, 7), NOW)
    assert last is not None
    assert still_quiet(last, _offsets(5, 7), NOW + 5)
    assert not still_quiet(last, _offsets(5, 8), NOW + 5)  # a record arrived
    assert not still_quiet(last, _offsets(5, 7, 0), NOW + 5)  # a partition was added
    assert not still_quiet(last, _offsets(5, 7), NOW + FULL_LOOK_EVERY_S)  # the store is read again now and then
    assert not still_quiet(None, _offsets(5, 7), NOW)


@pytest.mark.parametrize("seen", [look(unread=3), look(unread=None), look(unread=0, in_flight_age=4.0)],
                         ids=["records unread", "no checkpoint completed", "a checkpoint in flight"])
def test_a_look_that_could_start_a_run_without_the_offsets_moving_leaves_nothing_quiet(seen) -> None:
    assert quiet(seen, _offsets(5), NOW) is None


def test_a_pending_timer_ends_the_quiet_when_it_falls_due() -> None:
    last = quiet(dataclasses.replace(look(unread=0), timers_due_in_s=20.0), _offsets(5), NOW)
    assert last is not None and still_quiet(last, _offsets(5), NOW + 19)
    assert not still_quiet(last, _offsets(5), NOW + 20)


@pytest.mark.parametrize("since", [10.0, 3600.0])
def test_while_quiet_holds_the_full_look_would_start_nothing_either(since) -> None:
    # The looks skipped are ones start_reason answers None for: the same look, later, with no fire in between.
    seen = look(unread=0, since_completed=since)
    last = quiet(seen, _offsets(5), NOW)
    assert last is not None and still_quiet(last, _offsets(5), NOW + FULL_LOOK_EVERY_S - 1)
    assert start_reason(dataclasses.replace(seen, since_completed_s=since + FULL_LOOK_EVERY_S), TRIGGER, None,
                        NOW + FULL_LOOK_EVERY_S - 1, LEASE) is None


# ---- after a fire: waiting for its run to claim -----------------------------------------------------------
def test_a_fire_is_waited_on_until_a_newer_checkpoint_is_claimed_or_the_fire_is_stale() -> None:
    fired = Fired(NOW - 5, newest_checkpoint=7)
    assert waiting_for_claim(fired, 7, NOW)
    assert not waiting_for_claim(fired, 8, NOW)  # its run claimed
    assert not waiting_for_claim(Fired(NOW - REFIRE_AFTER_S, 7), 7, NOW)  # its run never claimed: fire again
    assert not waiting_for_claim(None, 7, NOW)
    # start_reason's first rule is the same: nothing starts while the fire is waited on, whatever the lag
    assert reason(look(unread=10_000, newest=7), fired) is None


def test_the_run_one_ahead_looks_often_at_a_prepared_checkpoint_seldom_at_a_running_one_and_plans_once_settled():
    from lockstep.model.checkpoint import CheckpointStage
    from lockstep.rules.lag_trigger import CLAIMED_LOOK_S, PREPARED_LOOK_S, look_again_in

    assert look_again_in(CheckpointStage.PREPARED) == PREPARED_LOOK_S < look_again_in(CheckpointStage.CLAIMED) \
        == CLAIMED_LOOK_S
    assert look_again_in(CheckpointStage.SETTLED) is None and look_again_in(None) is None
