"""The run's stage tracker: each named stage timed, a stage run twice adds up, one line per checkpoint."""
from __future__ import annotations

from collections.abc import Callable

import pytest

from lockstep.spark.stage_tracker import StageTracker


def ticking(*times: float) -> Callable[[], float]:
    """A clock that returns ``times`` one after the other."""
    it = iter(times)
    return lambda: next(it)


def test_each_stage_is_timed_in_the_order_it_first_ran_and_a_second_run_adds_up() -> None:
    tracker = StageTracker(12, clock=ticking(0.0, 0.41, 1.0, 1.05, 2.0, 2.5, 3.0, 3.25))
    assert tracker.run("read", lambda x: x * 2, 21) == 42
    with tracker.stage("decode"):
        pass
    tracker.run("write", lambda: None)
    tracker.run("read", lambda: None)
    assert tracker.seconds == {"read": 0.66, "decode": 0.05, "write": 0.5}
    assert tracker.line() == "checkpoint 12 stages: read 0.66 s, decode 0.05 s, write 0.50 s"


def test_a_stage_that_raises_is_timed_and_the_next_one_may_start() -> None:
    tracker = StageTracker(3, clock=ticking(10.0, 12.0, 20.0, 20.5))

    def fails() -> None:
        raise ValueError("a Spark data error")

    with pytest.raises(ValueError, match="a Spark data error"):
        tracker.run("write", fails)
    tracker.run("isolate", lambda: None)
    assert tracker.seconds == {"write": 2.0, "isolate": 0.5}


def test_stages_do_not_nest() -> None:
    tracker = StageTracker(7, clock=ticking(0.0, 1.0))
    with pytest.raises(RuntimeError, match="stage 'place' started inside stage 'state'"), tracker.stage("state"):
        tracker.run("place", lambda: None)
    assert tracker.seconds == {"state": 1.0}


def test_a_run_without_stages_says_so_and_the_default_clock_is_monotonic() -> None:
    assert StageTracker(1).line() == "checkpoint 1 stages: none"
    tracker = StageTracker(1)
    tracker.run("open", lambda: None)
    assert list(tracker.seconds) == ["open"] and tracker.seconds["open"] >= 0.0
