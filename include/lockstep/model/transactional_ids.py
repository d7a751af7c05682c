"""Transactional ids: made in one place, parsed back for recovery (pure).

A retried Spark task reuses its id, so its producer's InitProducerId fences the earlier attempt
(the fencing invariant); recovery reads checkpoint and task back out of ids it finds open.
"""
from __future__ import annotations

__all__ = [
    "parse_transactional_id", "transactional_id", "transactional_id_pattern", "write_tasks",
]

import re
from collections.abc import Callable
from typing import NamedTuple

#: The most tasks, and so transactional ids per checkpoint, ``sink.parallelism: auto`` gives a run on
#: a large cluster (a spec may set more).
MAX_AUTO_PARALLELISM = 256

#: What stands for the task index in `transactional_id_pattern`; the JVM writer substitutes it.
TASK_PLACEHOLDER = "{task}"


def transactional_id_pattern(prefix: str, checkpoint_id: int) -> str:
    """The one place ids are made: ``<prefix>-<checkpoint>-{task}``. The JVM writer gets the pattern
    and puts the Spark partition in (a retried task reuses its id, which fences the earlier attempt),
    so no task count is needed up front."""
    return f"{prefix}-{checkpoint_id}-{TASK_PLACEHOLDER}"


def transactional_id(prefix: str, checkpoint_id: int, task_index: int) -> str:
    """The id of one task: `transactional_id_pattern` with the task index put in."""
    return transactional_id_pattern(prefix, checkpoint_id).replace(TASK_PLACEHOLDER, str(task_index))


class ParsedTransactionalId(NamedTuple):
    checkpoint_id: int
    task_index: int


_ID_TAIL = re.compile(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)")


def parse_transactional_id(prefix: str, tid: str) -> ParsedTransactionalId | None:
    """(checkpoint, task) of an id made by `transactional_id` with this prefix; None if not ours."""
    if not tid.startswith(prefix + "-"):
        return None
    match = _ID_TAIL.fullmatch(tid[len(prefix) + 1:])
    if match is None:
        return None
    return ParsedTransactionalId(int(match.group(1)), int(match.group(2)))


def write_tasks(parallelism: int | str | None, ranges: int, cluster_default: Callable[[], int]) -> int:
    """How many Spark tasks, and so transactions, write a checkpoint of ``ranges`` non-empty ranges.

    ``parallelism`` is the claim's ``sink.parallelism``: a number caps the tasks; "auto" caps them at the
    cluster's default parallelism (``cluster_default``, asked only then) and `MAX_AUTO_PARALLELISM`;
    None (a claim of an earlier version) keeps one task per range. Never more tasks than ranges: a
    source partition is never split, so its records stay in one transaction, in order."""
    if ranges <= 1 or parallelism is None:
        return max(ranges, 1)
    if parallelism == "auto":
        return max(1, min(ranges, cluster_default(), MAX_AUTO_PARALLELISM))
    assert isinstance(parallelism, int)  # PlannedWith checked it
    return max(1, min(ranges, parallelism))
