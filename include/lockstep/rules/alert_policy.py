"""Whom a failed checkpoint notifies, and when: once per failure streak (pure).

A DAG run that fails notifies the spec's ``alerts``. A pipeline that stays stuck says nothing new when
its next runs fail too (a terminal cause fails each of them until someone acts, each on a new
checkpoint over the same records, since a failed checkpoint is aborted and its ranges replayed): those
do not notify again. The first failure after a run that succeeded does.
"""
from __future__ import annotations

__all__ = [
    "Failure", "alert_text", "should_notify",
]

from dataclasses import dataclass


@dataclass(frozen=True)
class Failure:
    """A failed DAG run of a pipeline: the checkpoint it failed on (None: none was claimed) and the one
    line its failing task left (``lockstep <pipeline> <step> failed: ...``)."""

    pipeline: str
    run_id: str
    checkpoint_id: int | None
    summary: str


def should_notify(failure: Failure, previous: Failure | None) -> bool:
    """``previous``: the pipeline's run that finished before this one, if it failed (None: it succeeded,
    or there was none). Only the first failure of a streak notifies."""
    return previous is None


def alert_text(failure: Failure, owner: str, link: str) -> str:
    """The message a person reads: what failed, why (the failing task's line), where to look."""
    what = (f"checkpoint {failure.checkpoint_id}" if failure.checkpoint_id is not None
            else "a run that claimed no checkpoint")
    return "\n".join([
        f"Lockstep pipeline {failure.pipeline} (owner {owner}): {what} failed in DAG run {failure.run_id}.",
        f"lockstep-cause: {failure.summary}",
        f"Checkpoint: {link}",
        "No further alert until a run of the pipeline succeeds.",
    ])
