"""Which transaction each output record of a stateful checkpoint goes to (pure).

A stateful operator regroups records by key, so without a rule its output would land in Spark tasks
(and so in transactions) as the shuffle happened to place it. Here a record's task is a function of its
provenance, the claim and the number of tasks alone: the claim's source partitions, sorted, are dealt
to the tasks in turn, and a record goes to the task of the source partition its provenance names (the
record itself, or a fired window's latest record). A partition the claim does not name (a topic left
the spec) goes by the hash of its name. So when the broker aborts some of a checkpoint's transactions
after others were committed, computing the checkpoint again from its claim (its ranges, base state and
pinned clock) tells exactly which records the lost ones held: a stateful partial commit is repaired by
writing those again, in the next checkpoint (`lockstep.model.checkpoint.Rerun`), and nothing else.

The writers take a Spark partition's index as the task's, so the run places each record in the Spark
partition of its task. Spark's ``repartition(n, column)`` puts a row in partition ``pmod(murmur3(value,
seed 42), n)``; `slots` gives, for each task, a value Spark puts in that partition, computed with the
same hash (`murmur3_int`, Spark's ``Murmur3_x86_32.hashInt``), so no two tasks share a partition.
"""
from __future__ import annotations

__all__ = [
    "slots", "task_groups", "task_of_partition",
]

from collections.abc import Iterable
from functools import lru_cache

from lockstep.model.offsets import OffsetRange

#: The seed of Spark's hash partitioning (``HashPartitioning`` hashes with ``Murmur3Hash(seed = 42)``).
SPARK_HASH_SEED = 42
_MASK = 0xFFFFFFFF


def task_of_partition(ranges: Iterable[OffsetRange], tasks: int) -> dict[str, int]:
    """Source partition (``topic:partition``) -> task: the claim's partitions, sorted, dealt in turn."""
    if tasks < 1:
        raise ValueError(f"a checkpoint writes through at least one task, got {tasks}")
    names = sorted({r.tp for r in ranges})
    return {tp.key: i % tasks for i, tp in enumerate(names)}


def task_groups(ranges: Iterable[OffsetRange], tasks: int) -> list[list[str]]:
    """Each task's source partitions (``topic:partition``, sorted), task by task (:func:`task_of_partition`):
    what the reader of a checkpoint whose output may stay where it was read gives each of its tasks, so that
    Spark partition ``t`` holds task ``t``'s records (a task may get only empty ranges, and read nothing)."""
    groups: list[list[str]] = [[] for _ in range(tasks)]
    for name, task in task_of_partition(ranges, tasks).items():
        groups[task].append(name)
    return [sorted(g) for g in groups]


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def murmur3_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` of a 32-bit int: what its hash partitioning computes for an
    INT column (as a signed 32-bit int)."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = (seed & _MASK) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spark_partition_of(value: int, partitions: int) -> int:
    """The partition ``repartition(partitions, column)`` puts a row whose INT column holds ``value`` in."""
    return murmur3_int(value) % partitions  # Python's % is Spark's pmod for a positive divisor


@lru_cache(maxsize=64)
def slots(tasks: int) -> tuple[int, ...]:
    """For each task ``t``, the smallest non-negative value that Spark's hash partitioning over
    ``tasks`` partitions puts in partition ``t``."""
    found: dict[int, int] = {}
    value = 0
    while len(found) < tasks:
        found.setdefault(spark_partition_of(value, tasks), value)
        value += 1
    return tuple(found[t] for t in range(tasks))
