"""A pipeline's checkpoint store in memory, for tests of the steps that make their checkpoints' views by
hand: `lockstep.store.checkpoint_store.PipelineStore` over dicts. It keeps what it is given and checks
nothing; the store's own rules (conditional creates, status moving forward, the latest-completed
pointer) are tested on ``CheckpointStore`` over ``tests/support/fake_s3.FakeS3``."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from lockstep.errors import TerminalError
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CheckpointStage,
    CheckpointStatus,
    CheckpointView,
    CompletedCheckpoint,
    History,
    PreparedCheckpoint,
    RunFailure,
)
from lockstep.model.savepoint import Savepoint
from lockstep.store.checkpoint_store import CheckpointAlreadyClaimed
from lockstep.store.state_files import StateFiles


class FakeStore:
    def __init__(self, *views: CheckpointView, pipeline: str = "orders") -> None:
        self.pipeline = pipeline
        self.views = {v.checkpoint_id: v for v in views}
        self.failures: dict[int, RunFailure] = {}
        self.sidecars: dict[tuple[int, str], dict[str, Any]] = {}
        self.savepoints: dict[str, Savepoint] = {}
        self.dry_run: CheckpointClaim | None = None
        self._state_files: StateFiles | None = None

    # ---- reading ----------------------------------------------------------------------------------
    def latest_completed(self) -> CheckpointView | None:
        done = [v for v in self.views.values() if v.status is CheckpointStatus.COMPLETED]
        return max(done, key=lambda v: v.checkpoint_id, default=None)

    def views_after(self, checkpoint_id: int | None) -> list[CheckpointView]:
        return [v for k, v in sorted(self.views.items()) if checkpoint_id is None or k > checkpoint_id]

    def history(self) -> History:
        latest = self.latest_completed()
        return History(latest, tuple(self.views_after(latest.checkpoint_id if latest else None)))

    def view(self, checkpoint_id: int) -> CheckpointView | None:
        return self.views.get(checkpoint_id)

    def checkpoint_ids(self, after: int | None = None) -> Iterator[int]:
        return iter([k for k in sorted(self.views) if after is None or k > after])

    def stage(self, checkpoint_id: int) -> CheckpointStage | None:
        view = self.views.get(checkpoint_id)
        if view is None:
            return None
        return {CheckpointStatus.CLAIMED: CheckpointStage.CLAIMED, CheckpointStatus.PREPARED: CheckpointStage.PREPARED
                }.get(view.status, CheckpointStage.SETTLED)

    def newest_checkpoint_id(self) -> int | None:
        return max(self.views, default=None)

    def run_failure(self, checkpoint_id: int) -> RunFailure | None:
        return self.failures.get(checkpoint_id)

    def sidecar(self, checkpoint_id: int, part: str) -> dict[str, Any] | None:
        return self.sidecars.get((checkpoint_id, part))

    def get_savepoint(self, name: str) -> Savepoint:
        if name not in self.savepoints:
            raise TerminalError(f"savepoint {name!r} not found for pipeline {self.pipeline}")
        return self.savepoints[name]

    # ---- writing ----------------------------------------------------------------------------------
    def record_dry_run(self, plan: CheckpointClaim) -> None:
        self.dry_run = plan

    def claim(self, claim: CheckpointClaim) -> None:
        if claim.checkpoint_id in self.views:
            raise CheckpointAlreadyClaimed(claim.checkpoint_id, "already claimed")
        self.views[claim.checkpoint_id] = CheckpointView(claim)

    def write_sidecar(self, checkpoint_id: int, part: str, doc: dict[str, Any], once: bool = True) -> None:
        self.sidecars[(checkpoint_id, part)] = doc

    def record_write_tasks(self, checkpoint_id: int, tasks: int) -> int:
        return int(self.sidecars.setdefault((checkpoint_id, "write-tasks"), {"tasks": tasks})["tasks"])

    def write_tasks(self, checkpoint_id: int) -> int | None:
        doc = self.sidecars.get((checkpoint_id, "write-tasks"))
        return int(doc["tasks"]) if doc is not None else None

    def record_run_failure(self, failure: RunFailure) -> None:
        self.failures[failure.checkpoint_id] = failure

    def write_prepared(self, prepared: PreparedCheckpoint) -> None:
        self.views[prepared.checkpoint_id] = replace(self.views[prepared.checkpoint_id], prepared=prepared)

    def mark_completed(self, completed: CompletedCheckpoint) -> None:
        self.views[completed.checkpoint_id] = replace(self.views[completed.checkpoint_id], completed=completed)

    def mark_aborted(self, aborted: AbortedCheckpoint) -> None:
        self.views[aborted.checkpoint_id] = replace(self.views[aborted.checkpoint_id], aborted=aborted)

    def apply_retention(self, retain: int) -> list[int]:
        return []

    def collect_state_garbage(self) -> list[str]:
        return []

    def state_files(self) -> StateFiles:
        from tests.support.fake_s3 import FakeS3

        if self._state_files is None:
            self._state_files = StateFiles(FakeS3(), "lockstep", self.pipeline)
        return self._state_files
