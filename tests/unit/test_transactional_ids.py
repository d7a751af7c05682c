"""How many tasks, and so transactions, write a checkpoint (`transactional_ids.write_tasks`)."""
from __future__ import annotations

import pytest

from lockstep.model.transactional_ids import MAX_AUTO_PARALLELISM, write_tasks


def _cores(n: int):
    def ask() -> int:
        ask.asked += 1  # type: ignore[attr-defined]
        return n
    ask.asked = 0  # type: ignore[attr-defined]
    return ask


@pytest.mark.parametrize(("parallelism", "ranges", "cores", "tasks"), [
    (3, 1024, 2, 3),  # the spec's number caps the tasks, whatever the cluster
    (3, 2, 2, 2),  # never more tasks than ranges: a source partition is never split
    ("auto", 1024, 2, 2),  # auto: the cluster's cores
    ("auto", 3, 16, 3),
    ("auto", 5000, 4096, MAX_AUTO_PARALLELISM),  # auto stays bounded on a large cluster
    (None, 1024, 2, 1024),  # a claim of an earlier version: one task per range, as its run planned
    ("auto", 0, 2, 1),
])
def test_a_checkpoint_writes_through_at_most_sink_parallelism_tasks(parallelism, ranges: int, cores: int,
                                                                     tasks: int) -> None:
    assert write_tasks(parallelism, ranges, _cores(cores)) == tasks


def test_the_cluster_is_asked_only_when_auto_has_a_choice_to_make() -> None:
    ask = _cores(2)
    write_tasks(4, 100, ask)
    write_tasks("auto", 1, ask)
    assert ask.asked == 0  # type: ignore[attr-defined]
    write_tasks("auto", 100, ask)
    assert ask.asked == 1  # type: ignore[attr-defined]
