"""The run one ahead's wait for the checkpoint in flight (`lockstep_airflow.operators._until_it_moves`): what it
asks the store, and when it goes back to planning. On a fake store and a fake clock."""
from __future__ import annotations

import types
from collections.abc import Iterator

import pytest

from lockstep.model.checkpoint import CheckpointStage
from lockstep.rules.lag_trigger import CLAIMED_LOOK_S, PLAN_AGAIN_EVERY_S, PREPARED_LOOK_S
from lockstep_airflow import operators

CLAIMED, PREPARED, SETTLED = CheckpointStage.CLAIMED, CheckpointStage.PREPARED, CheckpointStage.SETTLED


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.now += seconds


class _Store:
    """Answers `stage` from a script; counts the looks."""

    def __init__(self, stages: Iterator[CheckpointStage | None]) -> None:
        self.stages = stages
        self.looks = 0

    def stage(self, checkpoint_id: int) -> CheckpointStage | None:
        assert checkpoint_id == 41
        self.looks += 1
        return next(self.stages)


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(operators, "time", types.SimpleNamespace(monotonic=c.monotonic, sleep=c.sleep))
    return c


def _wait(stages: list[CheckpointStage | None], clock: _Clock, deadline_s: float = 60.0) -> _Store:
    store = _Store(iter(stages))
    operators._until_it_moves(types.SimpleNamespace(store=store), 41, clock.now + deadline_s)  # type: ignore[arg-type]
    return store


def test_a_running_checkpoint_is_looked_at_seldom_and_the_plan_tried_again_once_it_is_prepared(clock):
    store = _wait([CLAIMED, CLAIMED, CLAIMED, PREPARED], clock)
    assert store.looks == 4 and clock.slept == [CLAIMED_LOOK_S] * 3


def test_a_prepared_checkpoint_is_looked_at_often_until_it_settles(clock):
    store = _wait([PREPARED, PREPARED, SETTLED], clock)
    assert store.looks == 3 and clock.slept == [PREPARED_LOOK_S] * 2


def test_a_settled_or_vanished_checkpoint_means_plan_now(clock):
    for stage in (SETTLED, None):
        assert _wait([stage], clock).looks == 1
    assert clock.slept == []


def test_the_plan_is_tried_again_every_few_seconds_whatever_it_sees_and_never_past_the_deadline(clock):
    # a run that died without settling its checkpoint: only a plan notices (it asks Airflow)
    started = clock.now
    _wait([CLAIMED] * 100, clock)
    assert clock.now - started == pytest.approx(PLAN_AGAIN_EVERY_S)
    started = clock.now
    _wait([CLAIMED] * 100, clock, deadline_s=2.5)
    assert clock.now - started == pytest.approx(2.5)


def test_a_store_that_does_not_answer_ends_the_wait_so_the_plan_reports_it(clock):
    from lockstep.errors import TransientError

    class _Away:
        def stage(self, checkpoint_id: int) -> CheckpointStage | None:
            raise TransientError("S3 is unreachable for checkpoints/41/: timed out")

    operators._until_it_moves(types.SimpleNamespace(store=_Away()), 41, clock.now + 60)  # type: ignore[arg-type]
    assert clock.slept == []
