"""A stateful checkpoint's output placed in the Spark partitions, and so the transactions, that
`lockstep.rules.output_tasks` assigns it to; and the share of a recomputed checkpoint's output that
lost transactions held (what a stateful partial commit's repair writes again)."""
from __future__ import annotations

__all__ = [
    "delivered_share", "place", "share", "task_column",
]

from collections.abc import Iterable, Sequence
from itertools import chain
from typing import TYPE_CHECKING

from lockstep.model.offsets import OffsetRange
from lockstep.rules.output_tasks import slots, task_of_partition

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from lockstep.model.checkpoint import CheckpointView

TASK, SLOT = "__ls_task", "__ls_slot"


def task_column(ranges: Iterable[OffsetRange], tasks: int) -> Column:
    """Each output row's task, from its provenance's source partition (``topic``, ``partition``)."""
    from pyspark.sql import functions as F

    assigned = task_of_partition(ranges, tasks)
    name = F.concat_ws(":", F.col("topic"), F.col("partition").cast("string"))
    by_hash = F.pmod(F.xxhash64(F.col("topic"), F.col("partition").cast("int")), F.lit(tasks)).cast("int")
    if not assigned:
        return by_hash
    mapping = F.create_map(*chain.from_iterable((F.lit(k), F.lit(v)) for k, v in sorted(assigned.items())))
    return F.coalesce(F.try_element_at(mapping, name), by_hash).cast("int")


def place(output: DataFrame, ranges: Iterable[OffsetRange], tasks: int, sort: bool = True,
          partitions: int | None = None) -> DataFrame:
    """``output`` in exactly ``tasks`` Spark partitions, partition ``t`` holding the rows of task ``t``,
    each source partition's rows in offset order (dedup's order guarantee; a window's outputs by the
    offsets of their latest records).

    ``sort=False`` when each source partition's rows already come in offset order from one Spark partition
    of ``output`` (a stateless transform over the reader's partitions, beside other rows): a shuffle keeps
    the order of the rows one map task sends to one reducer, so the sort would change nothing.

    ``partitions`` (more than ``tasks``): as many Spark partitions, those past ``tasks`` empty. Their
    writers open and close their transactional ids with nothing in them, so a write again of a checkpoint's
    output fences every transaction an earlier write of it left open."""
    from pyspark.sql import functions as F

    count = max(tasks, partitions or tasks)
    slot_of = F.array(*[F.lit(v) for v in slots(count)])
    placed = output.withColumn(SLOT, F.get(slot_of, task_column(ranges, tasks))).repartition(count, F.col(SLOT))
    return (placed.sortWithinPartitions("topic", "partition", "offset") if sort else placed).drop(SLOT)


def share(output: DataFrame, ranges: Iterable[OffsetRange], of_tasks: int, tasks: Sequence[int]) -> DataFrame:
    """The rows of ``output`` that tasks ``tasks`` (of ``of_tasks``) held: what the lost transactions of a
    checkpoint computed again from its claim wrote."""

    return output.filter(task_column(ranges, of_tasks).isin(list(tasks)))


def delivered_share(output: DataFrame, view: CheckpointView) -> DataFrame:
    """The rows of a completed checkpoint's ``output`` (computed again from its whole claim) that its own
    transactions hold: all of them, unless a repair completed it. Then the next checkpoint wrote the lost share
    again, under its own id: a stateless checkpoint's given-back source partitions (read again by the next one),
    or a stateful checkpoint's lost tasks (computed again by the next one, `lockstep.model.checkpoint.Rerun`)."""
    from pyspark.sql import functions as F

    repair = view.completed.repair if view.completed is not None else None
    if repair is None:
        return output
    if repair.rerun_tasks:
        return output.filter(~task_column(view.claim.ranges, repair.of_tasks).isin(list(repair.rerun_tasks)))
    given_back = sorted({r.tp.key for r in repair.replayed})
    if not given_back:
        return output
    return output.filter(~F.concat_ws(":", F.col("topic"), F.col("partition").cast("string")).isin(given_back))
