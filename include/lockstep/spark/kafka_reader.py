"""A checkpoint's read: exactly its planned ``[start, end)`` of each source partition, committed records
only, through Lockstep's reader (``lockstep-kafka-ranges``, ``jvm/jvm-writer``, built with the writer).

Spark's own Kafka source makes a task and a consumer per source partition; at 1,024 partitions a
checkpoint spent most of its time creating consumers and fetching one partition at a time (docs/
benchmarks-making-faster.md). Lockstep's reader puts whole source partitions into at most ``tasks``
tasks, each reading its partitions with one consumer, and keeps each partition's records in offset
order in one task: that task's transaction then carries the partition whole.

The settings hold the source connection's consumer config (SASL credentials included), so they go in
the session's conf under a redacted key, as the writer's do (`lockstep.spark.jvm_writer`), not in the
read's options: under Spark Connect the options become the job's description in the event log.
"""
from __future__ import annotations

__all__ = [
    "default_parallelism", "forget_read_settings", "read_ranges",
]

import json
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from lockstep.model.offsets import OffsetRange
from lockstep.spark.jvm_writer import JVM_SETTINGS_CONF_PREFIX

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lockstep.spark.target import JobSession

#: The data source of Lockstep's reader (``dev.lockstep.spark.KafkaRangesSource``) and its options.
RANGES_FORMAT = "lockstep-kafka-ranges"
READ_ID_OPTION = "read_id"

#: A task gives up when its consumer got nothing for this long while ranges remain (a leader down, an
#: open transaction below the planned end): the task fails with the partitions it waited for, and Spark
#: retries it.
STALL_TIMEOUT_MS = 120_000

#: Consumer settings of the read (a connection's extra may override them): a short fetch wait, so the
#: last fetches of a small range do not sit out the broker's 500 ms default, and larger fetches per
#: request, since one consumer reads many partitions.
READ_CONSUMER_CONFIG: Mapping[str, object] = {"fetch.max.wait.ms": 20, "max.poll.records": 5000}

#: The session conf keys of reads made in this process, per session, until `forget_read_settings`.
_SET_KEYS: dict[int, list[str]] = {}


def reader_settings(kafka: Mapping[str, object], ranges: tuple[OffsetRange, ...], tasks: int,
                    groups: list[list[str]] | None = None) -> dict[str, object]:
    """The reader's settings document (``KafkaRangesSource.ReadSettings`` parses it). ``groups``: each task's
    source partitions (``topic:partition``), task by task, one Spark partition each; None: the reader
    spreads the ranges over at most ``tasks`` tasks by their record counts."""
    if tasks < 1:
        raise ValueError(f"a read needs at least one task, got {tasks}")
    if groups is not None and len(groups) != tasks:
        raise ValueError(f"a read in {tasks} tasks needs {tasks} groups, got {len(groups)}")
    config = {**READ_CONSUMER_CONFIG, **kafka}
    return {
        "consumer_config": {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in config.items()},
        "ranges": [[r.topic, r.partition, r.start, r.end] for r in ranges if not r.is_empty],
        "tasks": tasks, "stall_timeout_ms": STALL_TIMEOUT_MS,
        **({"groups": groups} if groups is not None else {}),
    }


def read_ranges(spark: JobSession, kafka: Mapping[str, object], ranges: tuple[OffsetRange, ...],
                headers: bool = False, tasks: int | None = None, groups: list[list[str]] | None = None) -> DataFrame:
    """Exactly the planned ``[start, end)`` of each partition, committed records only, in at most
    ``tasks`` Spark tasks (default: one per non-empty range), with the columns of Spark's Kafka source;
    with ``groups`` (`lockstep.rules.output_tasks.task_groups`), in exactly those tasks, task by task.

    ``kafka`` is the source connection in the Java dialect (``kafka_config(conn_id, JAVA)``). The settings
    stay in the session's conf until `forget_read_settings`: Spark plans the scan when an action runs."""
    settings = reader_settings(kafka, ranges, len(groups) if groups is not None else
                               tasks or max(1, sum(1 for r in ranges if not r.is_empty)), groups)
    read_id = str(uuid.uuid4())
    key = JVM_SETTINGS_CONF_PREFIX + read_id
    spark.conf.set(key, json.dumps(settings))
    _SET_KEYS.setdefault(id(spark), []).append(key)
    return (spark.read.format(RANGES_FORMAT).option(READ_ID_OPTION, read_id)
            .option("headers", str(headers).lower()).load())


def forget_read_settings(spark: JobSession) -> None:
    """Take the reads' settings (credentials) out of the session's conf once its actions are done."""
    for key in _SET_KEYS.pop(id(spark), []):
        spark.conf.unset(key)


#: The ``range`` whose partitions say the default parallelism, and its splits in its physical plan
#: (``Range (0, 65536, step=1, splits=2)``), Spark 3 and 4 alike.
_PROBE_ROWS = 1 << 16
_RANGE_SPLITS = re.compile(rf"\bRange \(0, {_PROBE_ROWS}, step=1, splits=(\d+)\)")


def default_parallelism(spark: JobSession) -> int:
    """How many tasks the session's cluster runs at once by default (its cores: Spark's default
    parallelism), asked the way a Spark Connect session can: the partitions of a ``range`` without a
    partition count, which Spark splits by that default.

    Read from the range's plan, which the server plans without running anything; counted by a job over
    the range when the plan does not say (a job took 0.1 s of every checkpoint)."""
    frame = spark.range(0, _PROBE_ROWS)
    # A Connect DataFrame's, behind its explain() (a classic one's explain() prints only): pyspark's own, so
    # looked up, and any failure of it falls back to the job.
    explained = getattr(frame, "_explain_string", None)
    if explained is not None:
        try:
            found = _RANGE_SPLITS.search(str(explained(mode="simple")))
        except Exception:  # noqa: BLE001 - an analysis the server refused: the job below asks again
            found = None
        splits = int(found.group(1)) if found is not None else 0
        if splits > 0:
            return splits
    row = frame.selectExpr("spark_partition_id() AS p").selectExpr("max(p) AS last").first()
    return int(row["last"]) + 1 if row is not None and row["last"] is not None else 1
