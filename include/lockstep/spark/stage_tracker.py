"""The seconds each named stage of a checkpoint's run took, as Spark's ``QueryPlanningTracker`` times the
phases of a ``QueryExecution``.

The job (`lockstep.spark.job`) is a list of named stages (open, read, decode, tables, transform, state,
place, write, ...); each runs inside `StageTracker.stage`, which adds its seconds to its name. A stage that
runs twice (the output written again with its dead letters, the pass after a data error's records were set
aside) adds up under its one name. Why: most of a checkpoint's fixed cost is driver work between Spark's
jobs (resolving formats, materializing tables, analyzing the transform, counting dead letters), which no
Spark UI shows; one log line per checkpoint, and the prepared checkpoint's ``stage_seconds``, say where it
went. No Spark here: the clock is injected, so the tracker is tested on plain values.
"""
from __future__ import annotations

__all__ = [
    "StageTracker",
]

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class StageTracker:
    """One checkpoint's stages, in the order each first ran, and their seconds (``time.monotonic``)."""

    def __init__(self, checkpoint_id: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.checkpoint_id = checkpoint_id
        self._clock = clock
        self._seconds: dict[str, float] = {}
        self._running: str | None = None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as stage ``name`` (also when it raises: a failed stage's cost is still its cost).
        Stages do not nest: a stage inside another would count its seconds twice."""
        if self._running is not None:
            raise RuntimeError(f"stage {name!r} started inside stage {self._running!r}: stages do not nest")
        self._running = name
        started = self._clock()
        try:
            yield
        finally:
            self._seconds[name] = self._seconds.get(name, 0.0) + (self._clock() - started)
            self._running = None

    def run(self, name: str, stage: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``stage(*args, **kwargs)``, timed as stage ``name``: the job's list of stages reads one call a line."""
        with self.stage(name):
            return stage(*args, **kwargs)

    @property
    def seconds(self) -> dict[str, float]:
        """Each stage's seconds so far, rounded to the millisecond, in the order the stages first ran."""
        return {name: round(seconds, 3) for name, seconds in self._seconds.items()}

    def line(self) -> str:
        """The run's one log line: ``checkpoint 12 stages: read 0.41 s, decode 0.05 s, ...``."""
        stages = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self._seconds.items()) or "none"
        return f"checkpoint {self.checkpoint_id} stages: {stages}"
