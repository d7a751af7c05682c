"""Whom a failed checkpoint notifies, and when: once per checkpoint (pure).

A DAG run that fails on a checkpoint notifies the spec's ``alerts``. A checkpoint that stays stuck (the
next runs fail on it again, as a terminal cause does until someone acts) says nothing new, so it does not
notify again; the next failure of another checkpoint, or after a run that succeeded, does. A run that
failed before it claimed a checkpoint is told apart by its summary line.
"""
from __future__ import annotations

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
    or there was none)."""
    if previous is None:
        return True
    if failure.checkpoint_id is not None or previous.checkpoint_id is not None:
        return failure.checkpoint_id != previous.checkpoint_id
    return failure.summary != previous.summary


def alert_text(failure: Failure, owner: str, link: str) -> str:
    """The message a person reads: what failed, why (the failing task's line), where to look."""
    what = (f"checkpoint {failure.checkpoint_id}" if failure.checkpoint_id is not None
            else "a run that claimed no checkpoint")
    return "\n".join([
        f"Lockstep pipeline {failure.pipeline} (owner {owner}): {what} failed in DAG run {failure.run_id}.",
        f"lockstep-cause: {failure.summary}",
        f"Checkpoint: {link}",
        "It is not repeated while the next runs fail on the same checkpoint.",
    ])
