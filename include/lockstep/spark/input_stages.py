"""The stages of a checkpoint's run before its output is computed: read the claimed ranges, load the
transform (with its routes), take a replay's selection, ship code to the executors, resolve the formats
(decode), materialize the tables (their joins), and make the sink's settings.

Each stage takes the run (`Run`: the claim and what the job's open stage fixed) and returns a small typed
value; the job (`lockstep.spark.job`) calls them in that order, each timed by its name
(`lockstep.spark.stage_tracker`), and a feature that adds a stage adds one entry there. Their log lines
are the job's (logger ``lockstep.spark.job``): the benchmarks and the tests read the run's milestones there.
"""
from __future__ import annotations

__all__ = [
    "Input", "Run", "Sink", "Tables", "committed_tables", "decode", "load", "read", "replay", "ship", "sink", "tables",
]

import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from lockstep.errors import CheckpointError
from lockstep.formats.codecs import Formats, with_raw
from lockstep.rules.output_tasks import task_groups
from lockstep.spark.jvm_writer import write_with_jvm
from lockstep.spark.kafka_reader import read_ranges
from lockstep.spark.python_writer import write_with_python
from lockstep.spark.routes import routed
from lockstep.spark.writer_settings import (
    WriterSettings,
    check_transaction_timeout,
    sink_admin,
    topic_limits,
    transaction_timeout_cap,
    writer_settings,
)
from lockstep.transform import Transform, load_transform, ship_to_executors

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lockstep.model.checkpoint import CheckpointClaim, PlannedWith
    from lockstep.model.offsets import OffsetRange
    from lockstep.spark.dead_letter_replay import ReplayRun
    from lockstep.spark.target import JobSession
    from lockstep.spec import PipelineSpec
    from lockstep.store.checkpoint_store import PipelineStore
    from lockstep.tables.pins import TableVersion

log = logging.getLogger("lockstep.spark.job")


@dataclass(frozen=True)
class Run:
    """What every stage of one checkpoint's run knows: the spec, the claim, and what the job's open stage
    fixed from them (the values it was planned with, the source's connection, the tasks, the ranges read)."""

    spec: PipelineSpec
    checkpoint_id: int
    spark: JobSession
    store: PipelineStore
    claim: CheckpointClaim
    planned: PlannedWith
    kafka: Mapping[str, object]
    #: the Spark tasks, and so the transactions, that write the output
    tasks: int
    #: the claimed ranges with records; a checkpoint without records reads them all, empty (the transform's columns)
    ranges: tuple[OffsetRange, ...]
    #: each task's source partitions read in a Spark partition of their own (a dedup judged on the driver)
    by_task: bool

    @property
    def records(self) -> int:
        """The offsets the run reads: at most as many records."""
        return sum(r.count for r in self.ranges)


class Input(NamedTuple):
    """What the output is computed from: the records read (a replay's selected dead letters), and the
    transform (with its routes; a replay's marks its records)."""

    df: DataFrame
    transform: Transform
    replay: ReplayRun | None = None


class Tables(NamedTuple):
    """The run's tables: the version of each that the run writes (else the one the claim starts from), the
    table records that do not decode (dead letters), and the declared joins to run before the transform."""

    versions: Mapping[str, TableVersion]
    dead: DataFrame | None = None
    enrich: Callable[[DataFrame], DataFrame] | None = None


class Sink(NamedTuple):
    """What each task writes with, and which writer writes; ``table``: the records written to the topic go to an
    Iceberg table too (``sink.iceberg``); ``table_only``: they go to the table alone (no ``sink.topic``), and the
    writers write the dead letters only."""

    settings: WriterSettings
    write: Callable[[JobSession, DataFrame, WriterSettings], list[str]]
    table: bool = False
    table_only: bool = False


def read(run: Run) -> DataFrame:
    """The claimed ranges as Spark reads them. A stateless run reads the input's headers too, and keeps its
    key, value and headers as they came (`with_raw`): its dead letters carry them. A replay's dead letters
    keep the transform's headers (its mark) instead."""
    spec = run.spec
    df = read_ranges(run.spark, run.kafka, run.ranges, headers=spec.replay_of is not None or spec.state is None,
                     tasks=run.tasks, groups=task_groups(run.claim.ranges, run.tasks) if run.by_task else None)
    return with_raw(df) if spec.state is None and spec.replay_of is None else df


def load(run: Run) -> Transform:
    """The spec's transform (its module imported, or its query), then its routes (`routed`)."""
    return routed(run.spec, load_transform(run.spec))


def replay(run: Run, read: Input) -> Input:
    """A dead-letter replay's checkpoint: the dead letters its pinned selection takes, and the transform that
    marks them (`lockstep.spark.dead_letter_replay`)."""
    from lockstep.spark.dead_letter_replay import start_replay

    df, transform, replaying = start_replay(run.spec, run.checkpoint_id, read.df, read.transform, run.store)
    return Input(df, transform, replaying)


def ship(run: Run) -> None:
    """The code the executors' Python workers run, shipped to them: the transform's package; Lockstep's own for
    the Python writer, a transform that uses `lockstep.rows` (its UDFs run `lockstep.rows.guarded` there) or a
    state function (it runs with Lockstep's wrapper); the state function's modules."""
    from lockstep.spark.keyed_state import function_modules

    spec = run.spec
    functions = function_modules(spec)
    uses_lockstep = run.planned.sink_writer == "python" or "lockstep.rows" in sys.modules or bool(functions)
    shipped = ship_to_executors(run.spark, spec, (("lockstep",) if uses_lockstep else ()) + functions)
    if shipped:
        log.info("checkpoint %d: shipped %s to the executors", run.checkpoint_id, ", ".join(shipped))


def decode(run: Run) -> Formats:
    """The record formats the run decodes and encodes with, by the claim's pinned schema ids; only the topics
    read need a subject."""
    formats = Formats(run.spec, run.claim.schema_ids, read={r.topic for r in run.ranges if not r.is_empty})
    if formats.readings or formats.writings:
        log.info("checkpoint %d: formats: %s", run.checkpoint_id, formats.describe())
    return formats


def tables(run: Run) -> Tables:
    """Every table materialized at this checkpoint (its files written), its view registered (SQL transforms
    read each table by its name), its records that do not decode as dead letters, and the declared joins."""
    from lockstep.tables.materialize import join_tables, materialize

    spec = run.spec
    materialized = materialize(run.spark, spec, run.checkpoint_id, run.claim.tables, run.store.state_files(),
                               run.kafka)
    dead = materialized.dead_letters(run.spark)
    materialized.register_views()
    enrich = partial(join_tables, spec, materialized) if any(t.join is not None for t in spec.tables) else None
    return Tables(materialized.versions, dead, enrich)


def committed_tables(run: Run, versions: Mapping[str, TableVersion]) -> Tables:
    """The tables at the versions a completed checkpoint committed, read from their files (nothing materialized
    or written), their views registered, and the declared joins: what its records met. The table records it
    dead-lettered are not computed again."""
    from lockstep.tables.materialize import committed, join_tables

    spec = run.spec
    made = committed(run.spark, spec, run.store.state_files(), versions, f"checkpoint {run.checkpoint_id}")
    made.register_views()
    enrich = partial(join_tables, spec, made) if any(t.join is not None for t in spec.tables) else None
    return Tables(made.versions, None, enrich)


def sink(run: Run) -> Sink:
    """The writers' settings (the sink's topics' record limits, the transaction timeout checked against the
    broker's cap), and the writer the claim names; says what the run is about to write."""
    planned, cid = run.planned, run.checkpoint_id
    admin = sink_admin(planned.sink_kafka_conn_id)  # one client for the driver's reads of the sink
    check_transaction_timeout(cid, planned.timeout_ms, transaction_timeout_cap(planned.sink_kafka_conn_id, admin))
    routes = tuple(topic for topic, _ in run.spec.sink.routes)
    topics = (*((planned.sink_topic,) if planned.sink_topic is not None else ()), planned.dead_letter_topic, *routes)
    settings = writer_settings(planned, cid, dict(run.spec.producer), topic_limits(
        planned.sink_kafka_conn_id, topics, admin), pipeline=run.spec.name, routes=routes)
    iceberg = run.spec.sink.iceberg
    if planned.sink_topic is None and iceberg is None:
        raise CheckpointError(cid, "was planned to land its records in an Iceberg table alone (no sink.topic), but "
                                   "the spec has no sink.iceberg now: put it back until this checkpoint is settled; "
                                   "the checkpoints planned after it follow the spec as it is then")
    to = (planned.sink_topic + (f" (routes: {', '.join(routes)})" if routes else "") if planned.sink_topic is not None
          else f"Iceberg table {iceberg.table if iceberg is not None else '?'} (dead letters to Kafka)")
    log.info("checkpoint %d: reading %d ranges (%s records at most) in %d tasks (sink.parallelism %s), writing "
             "to %s / %s with the %s writer under transactional ids %s-%d-<task>", cid, len(run.ranges),
             run.records, run.tasks, planned.sink_parallelism, to,
             planned.dead_letter_topic, planned.sink_writer, planned.id_prefix, cid)
    return Sink(settings, write_with_jvm if planned.sink_writer == "jvm" else write_with_python,
                iceberg is not None, planned.sink_topic is None)
