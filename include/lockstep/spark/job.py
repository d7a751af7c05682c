"""The bounded Spark run of one checkpoint: read the claimed ranges, transform, pre-commit.

The run is a list of named stages (`_with_spark`), as Spark's ``QueryExecution`` is a list of named phases:
open here, then read, load, replay, ship, decode, tables and sink (`lockstep.spark.input_stages`), transform,
state, place, keep, count, write, rewrite and iceberg (`lockstep.spark.output_stages`), results, save and record
here. A feature that adds a stage adds one line. Each is timed (`lockstep.spark.stage_tracker`): one log line per
checkpoint gives the seconds of each, and prepared.json keeps them (``stage_seconds``).

Runs in the spark-submit driver (entry point ``jobs/lockstep_checkpoint.py``) or, in connect
mode, in the run step's own process with a session on a Spark Connect server
(`lockstep.steps.run.run_connect_job`): the same code either way. Each
Spark task writes its rows inside one Kafka transaction that is flushed and left
open (``TransactionalWriter.prepare``); the driver gathers the committables and
writes the prepared checkpoint to S3. From that object on, the decision is
"commit" — the commit task, another process, carries it out.

No Airflow import here: the job runs wherever spark-submit or the run step runs it.
"""
from __future__ import annotations

__all__ = [
    "Replayed", "job_outcome", "replay_output", "run_checkpoint_job", "values_for_run",
]

import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple

from lockstep.connections import kafka_config
from lockstep.errors import CheckpointError
from lockstep.kafka.client_configs import JAVA
from lockstep.model import failpoints
from lockstep.model.checkpoint import CheckpointStatus, CheckpointView, PreparedCheckpoint, PreparedTransaction
from lockstep.model.output_contract import parse_task_result
from lockstep.model.transactional_ids import write_tasks
from lockstep.rules.pinned import Resolved, Step, refusal, resolve_pinned
from lockstep.spark import input_stages as stage
from lockstep.spark.kafka_reader import default_parallelism, forget_read_settings
from lockstep.spark.output_stages import Pass, Written, computed_output, write_output
from lockstep.spark.placement import delivered_share
from lockstep.spark.stage_tracker import StageTracker
from lockstep.spec import PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lockstep.iceberg.staged_table import StagedTable
    from lockstep.model.checkpoint import CheckpointClaim
    from lockstep.model.state_manifest import StateManifest
    from lockstep.spark.keyed_state import StatefulRun
    from lockstep.spark.target import JobSession
    from lockstep.store.checkpoint_store import PipelineStore
    from lockstep.tables.pins import TableVersion

log = logging.getLogger(__name__)


def job_outcome(exc: BaseException) -> tuple[str, bool]:
    """A failed run's one-line cause, and whether a retry fails the same way (terminal).

    Lockstep's own errors say which they are. The transform not fitting its input (a missing
    column, a type error in SQL) fails the same way on every retry, and so does a state function
    that raised or returned what it may not (`lockstep.spark.state_worker` names it, the same calls
    on the same input fail again); anything else (a task that raised, a lost executor, a broker or
    the Connect server away) may pass on a retry."""
    from pyspark.errors import AnalysisException

    from lockstep.errors import LockstepError, TerminalError, root_cause
    from lockstep.spark.raised import data_error
    from lockstep.spark.state_worker import USER_FAILURE

    if isinstance(exc, LockstepError):
        return str(exc).splitlines()[0], isinstance(exc, TerminalError)
    cause = root_cause(exc)
    # A Spark data error (a cast that fails, in ANSI mode) a pipeline did not set aside fails the same way again.
    return cause, isinstance(exc, AnalysisException) or bool(USER_FAILURE.search(cause)) or data_error(exc) is not None


def values_for_run(spec: PipelineSpec, view: CheckpointView) -> Resolved:
    """The claim's values for the Spark run of a claimed checkpoint with records to write, or a
    CheckpointError when a spec edit since its plan cannot be honoured (another cluster)."""
    resolved = resolve_pinned(view.claim, spec)
    refused = refusal(resolved, Step.RUN)
    if refused:
        raise CheckpointError(view.checkpoint_id, refused)
    return resolved


def run_checkpoint_job(spec: PipelineSpec, checkpoint_id: int, spark: JobSession | None, store: PipelineStore,
                       view: CheckpointView | None = None) -> PreparedCheckpoint:
    """``view``: the checkpoint as the caller just read it (the run step, in its own process), else
    read here (the spark-submit driver). ``spark`` may be None for a checkpoint without records."""
    try:
        return _run_checkpoint_job(spec, checkpoint_id, spark, store, view)
    except BaseException as exc:
        from lockstep.spark.connect import fail_fast_after

        fail_fast_after(spark, exc)  # a server that stopped answering: the cleanup below, and the release, once
        raise
    finally:
        if spark is not None:
            forget_read_settings(spark)  # the source connection's settings leave the session with the run


class Gathered(NamedTuple):
    """What the run's Spark side leaves for the prepared checkpoint: the tasks' committables, the state after
    it (written before prepared.json, which names it), the tasks a stateful output was placed in, the tables."""

    committables: tuple[PreparedTransaction, ...]
    state: StateManifest | None
    output_tasks: int | None
    tables: Mapping[str, TableVersion]
    iceberg: StagedTable | None = None


def _run_checkpoint_job(spec: PipelineSpec, checkpoint_id: int, spark: JobSession | None, store: PipelineStore,
                        view: CheckpointView | None) -> PreparedCheckpoint:
    """The run as its list of stages, each timed: open, then the input's stages (`lockstep.spark.input_stages`),
    the output's (`lockstep.spark.output_stages`), the results gathered, and prepared.json recorded."""
    view = _claimed(checkpoint_id, store, view)
    if view.prepared is not None:
        return view.prepared
    tracker = StageTracker(checkpoint_id)
    started = time.monotonic()
    if view.claim.needs_spark:  # records, or no records but windows or timers are due, or a lost share to write again
        assert spark is not None  # only a checkpoint without records runs without Spark (steps.run)
        run = tracker.run("open", _open, spec, checkpoint_id, spark, store, view)
        gathered = _with_spark(run, tracker, started)
    else:
        gathered = _without_spark(spec, view)
    failpoints.hit("job.before_prepared")
    planned = view.claim.planned_with
    table_only = planned is not None and planned.sink_topic is None
    # Without a sink topic the records out are the table's rows; the transactions hold the dead letters alone.
    records_out = (gathered.iceberg.records if gathered.iceberg is not None else 0) if table_only else \
        sum(t.records for t in gathered.committables)
    prepared = PreparedCheckpoint(
        pipeline=spec.name, checkpoint_id=checkpoint_id, prepared_at=datetime.now(UTC).isoformat(),
        transactions=tuple(sorted(gathered.committables, key=lambda t: t.task_index)),
        records_in=sum(r.count for r in view.claim.ranges if not r.is_empty),
        records_out=records_out,
        records_dead_lettered=sum(t.dead_letters for t in gathered.committables),
        spark_seconds=round(time.monotonic() - started, 3), state=gathered.state,
        output_tasks=gathered.output_tasks, tables=gathered.tables, stage_seconds=tracker.seconds,
        iceberg=gathered.iceberg,
    )
    tracker.run("record", _record, spec, store, prepared)
    log.info(tracker.line())
    failpoints.hit("job.after_prepared")
    return prepared


def _claimed(checkpoint_id: int, store: PipelineStore, view: CheckpointView | None) -> CheckpointView:
    """The checkpoint, claimed (or prepared already by an earlier attempt: nothing to write), else why not."""
    view = view if view is not None else store.view(checkpoint_id)
    if view is None:
        raise CheckpointError(checkpoint_id, "has no claim; the plan task must run first")
    if view.status is CheckpointStatus.PREPARED:
        log.info("checkpoint %d: already prepared by an earlier attempt; nothing to write", checkpoint_id)
        assert view.prepared is not None  # what PREPARED means
        return view
    if view.status is not CheckpointStatus.CLAIMED:
        raise CheckpointError(checkpoint_id, f"is {view.status.value}; the Spark run only writes claimed checkpoints")
    return view


class Replayed(NamedTuple):
    """A checkpoint's output computed again (`replay_output`), in the writers' columns: the share its own
    transactions hold (`lockstep.spark.placement.delivered_share`); and the state that run would have saved
    (None: stateless)."""

    out: DataFrame
    stateful: StatefulRun | None


def replay_output(spec: PipelineSpec, view: CheckpointView, spark: JobSession, store: PipelineStore,
                  schema_ids: Mapping[str, int] | None = None) -> Replayed:
    """A completed checkpoint's output computed again through ``spec`` (another version of its code) from the
    checkpoint's own claim: its ranges, its base state and pinned clock, the table versions it committed, and
    ``schema_ids`` (the claim's pinned schemas when None). The same stages as its run, nothing written: no
    transaction, no state or table files, nothing in the store. The caller lets ``stateful`` go."""
    cid = view.checkpoint_id
    if view.completed is None:
        raise CheckpointError(cid, f"is {view.status.value}; only a completed checkpoint's output can be compared")
    tracker = StageTracker(cid)
    claim = view.claim if schema_ids is None else replace(view.claim, schema_ids=dict(schema_ids))
    run = tracker.run("open", _open, spec, cid, spark, store, replace(view, claim=claim), False)
    read = stage.Input(tracker.run("read", stage.read, run), tracker.run("load", stage.load, run))
    tracker.run("ship", stage.ship, run)
    formats = tracker.run("decode", stage.decode, run)
    tables = tracker.run("tables", stage.committed_tables, run, view.completed.tables) if spec.tables else \
        stage.Tables(view.completed.tables)
    computed = computed_output(run, tracker, Pass(read, formats, tables, None))
    return Replayed(delivered_share(computed.out, view), computed.stateful.run if computed.stateful is not None else None)


def _open(spec: PipelineSpec, checkpoint_id: int, spark: JobSession, store: PipelineStore,
          view: CheckpointView, writes: bool = True) -> stage.Run:
    """The stage that fixes what every other stage uses: the values the claim was planned with (a spec edit it
    cannot honour refused), the source's connection, the tasks (recorded for recovery under ``auto``), the
    ranges read, and whether each task's source partitions are read in a Spark partition of their own."""
    from lockstep.spark.keyed_state import judged_on_driver

    claim = view.claim
    resolved = values_for_run(spec, view)
    notice = resolved.notice(Step.RUN)
    if notice:
        log.warning(notice)
    planned = resolved.values
    ranges = tuple(r for r in claim.ranges if not r.is_empty)
    without_records = not ranges
    kafka = kafka_config(planned.source_kafka_conn_id, JAVA)
    # At most sink.parallelism tasks (transactions), each reading whole source partitions.
    tasks = write_tasks(planned.sink_parallelism, len(ranges), lambda: default_parallelism(spark))
    if without_records:
        ranges = claim.ranges  # read as they are, empty: the transform's columns, no rows
    if planned.sink_parallelism == "auto" and writes:  # the claim allows up to 256 ids: tell recovery how many
        tasks = store.record_write_tasks(checkpoint_id, tasks)
    # A dedup judged on the driver marks the records where they are: read each task's source partitions
    # in its own Spark partition, and its output needs no shuffle to reach its task (`place`).
    by_task = (not without_records and spec.replay_of is None and claim.rerun is None
               and judged_on_driver(spec, claim.state_base))
    return stage.Run(spec, checkpoint_id, spark, store, claim, planned, kafka, tasks, ranges, by_task)


def _with_spark(run: stage.Run, tracker: StageTracker, started: float) -> Gathered:
    """The run's stages in Spark, in order; a feature that adds a stage adds one line."""
    spec = run.spec
    read = stage.Input(tracker.run("read", stage.read, run), tracker.run("load", stage.load, run))
    if spec.replay_of is not None:
        read = tracker.run("replay", stage.replay, run, read)
    tracker.run("ship", stage.ship, run)
    formats = tracker.run("decode", stage.decode, run)
    # Each table's version: the one the run writes, else (no tables now) the one the claim starts from.
    tables = tracker.run("tables", stage.tables, run) if spec.tables else stage.Tables(_claimed_tables(run.claim))
    sink = tracker.run("sink", stage.sink, run)
    written = write_output(run, tracker, Pass(read, formats, tables, sink))
    committables = tracker.run("results", _results, run, written, started)
    state = tracker.run("save", _save, written) if written.stateful is not None else None
    return Gathered(committables, state, run.tasks if written.stateful is not None else None, tables.versions,
                    written.iceberg)


def _without_spark(spec: PipelineSpec, view: CheckpointView) -> Gathered:
    """A checkpoint without records, timers or a share to write again: nothing written, the tables and the
    state as the claim starts from them."""
    claim = view.claim
    state = claim.state_base.carried_forward() if spec.state is not None and claim.state_base is not None else None
    return Gathered((), state, None, _claimed_tables(claim))


def _claimed_tables(claim: CheckpointClaim) -> dict[str, TableVersion]:
    return {name: pin.base for name, pin in claim.tables.items() if pin.base is not None}


def _results(run: stage.Run, written: Written, started: float) -> tuple[PreparedTransaction, ...]:
    """Each task's committable, from its result."""
    cid = run.checkpoint_id
    log.info("checkpoint %d: %d Spark tasks wrote their transactions in %.1f s", cid, len(written.results),
             time.monotonic() - started)
    committables = []
    for line in written.results:
        log.info("checkpoint %d: task result %s", cid, line)
        task, _, committable = parse_task_result(line)
        if committable is not None:
            committables.append(PreparedTransaction.from_json(committable, f"task {task}"))
    return tuple(committables)


def _save(written: Written) -> StateManifest:
    """The state files, before prepared.json, which names them: the decision covers both. A repair's
    recomputations are let go."""
    assert written.stateful is not None  # the caller's condition
    state = written.stateful.run.finish()
    for recomputed in written.stateful.reruns:
        recomputed.discard()
    return state


def _record(spec: PipelineSpec, store: PipelineStore, prepared: PreparedCheckpoint) -> None:
    """prepared.json written: from here on the decision is "commit"."""
    checkpoint_id = prepared.checkpoint_id
    # A stateful operator regroups records by key on purpose, and its checkpoints are never repaired
    # (docs/state.md, "Failures"): the warning is for stateless transforms that shuffle.
    shared = prepared.shared_sources if spec.state is None else {}
    if shared:
        some = "; ".join(f"{key} by tasks {', '.join(map(str, tasks))}" for key, tasks in list(shared.items())[:5])
        log.warning("checkpoint %d: the records of %d source partitions were written by several Spark tasks (%s%s): "
                    "the transform moves records between tasks (a shuffle). The order of a source partition's "
                    "records in the sink is then not kept, and if the broker aborts some of these transactions after "
                    "others were committed, the checkpoint cannot be repaired. Keep transforms per partition "
                    "(docs/semantics.md, 'Order')", checkpoint_id, len(shared), some, "; ..." if len(shared) > 5 else "")
    store.write_prepared(prepared)
    log.info("checkpoint %d: prepared with %d transactions (%d records out, %d dead-lettered) in %.1f s",
             checkpoint_id, len(prepared.transactions), prepared.records_out, prepared.records_dead_lettered,
             prepared.spark_seconds)
