"""The CLI's whole checkpoint in this process: plan (recovering first), run and commit, one after the other,
as ``lockstep run`` and ``lockstep deadletters replay`` do per checkpoint (Airflow does the same as three
tasks). Above the steps, which it calls through their own modules."""
from __future__ import annotations

__all__ = [
    "Cycle", "checkpoint_cycle",
]

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from lockstep.model.checkpoint import CheckpointView
from lockstep.rules.run_ownership import cli_run_id
from lockstep.spec import PipelineSpec
from lockstep.steps.commit import CommitOutcome, commit
from lockstep.steps.pipeline import Pipeline
from lockstep.steps.plan import Plan, plan
from lockstep.steps.run import run_checkpoint
from lockstep.store.checkpoint_store import PipelineStore


@dataclass(frozen=True)
class Cycle:
    """One checkpoint planned, run and committed in this process: what ``lockstep run`` and
    ``lockstep deadletters replay`` do per checkpoint (Airflow does the same as three tasks)."""

    planned: Plan
    store: PipelineStore
    seconds: float
    outcome: CommitOutcome | None = None  # None after a dry run
    view: CheckpointView | None = None  # the checkpoint as committed


def checkpoint_cycle(spec: PipelineSpec, restore: str | Callable[[PipelineStore], str | None] | None = None,
                     max_records: int | None = None, dry_run: bool = False,
                     before_run: Callable[[PipelineStore, int], None] | None = None) -> Cycle:
    """Plan (recovering first), run and commit one checkpoint under a run id of this process.

    ``restore`` may be decided from the store once it is open; ``before_run`` records what the
    run depends on next to the claim.
    """
    started = time.monotonic()
    p = Pipeline.open(spec)
    if callable(restore):
        restore = restore(p.store)
    run_id = cli_run_id(socket.gethostname(), os.getpid(), uuid.uuid4().hex[:8])
    planned = plan(p, run_id=run_id, restore=restore, max_records=max_records, dry_run=dry_run)
    if dry_run:
        return Cycle(planned, p.store, time.monotonic() - started)
    cid = planned.claim.checkpoint_id
    if before_run is not None:
        before_run(p.store, cid)
    run_checkpoint(spec, cid, p.store)
    outcome = commit(p, cid)
    return Cycle(planned, p.store, time.monotonic() - started, outcome, p.store.view(cid))
