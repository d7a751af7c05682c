"""The bounded Spark run of one checkpoint: read the claimed ranges, transform, pre-commit.

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
    "job_outcome", "run_checkpoint_job", "values_for_run",
]

import logging
import sys
import time
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING

from lockstep.connections import kafka_config
from lockstep.errors import CheckpointError, TerminalError
from lockstep.formats.codecs import Formats, carries_raw, counted_undecodable, rejoined, watch, with_error, with_raw
from lockstep.kafka.client_configs import JAVA
from lockstep.model import failpoints
from lockstep.model.checkpoint import (
    CheckpointStatus,
    CheckpointView,
    PreparedCheckpoint,
    PreparedTransaction,
    Rerun,
)
from lockstep.model.output_contract import (
    ACCEPTED_TYPES,
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    ROUTE_COLUMN,
    parse_task_result,
)
from lockstep.model.transactional_ids import write_tasks
from lockstep.rules.output_tasks import task_groups
from lockstep.rules.pinned import Resolved, Step, refusal, resolve_pinned
from lockstep.spark.jvm_writer import write_with_jvm
from lockstep.spark.kafka_reader import default_parallelism, forget_read_settings, read_ranges
from lockstep.spark.python_writer import write_with_python
from lockstep.spark.raised import Raised, data_error, isolate, probe, strict_failure, where_raised
from lockstep.spark.routes import routed
from lockstep.spark.writer_settings import (
    check_transaction_timeout,
    sink_admin,
    topic_limits,
    transaction_timeout_cap,
    writer_settings,
)
from lockstep.spec import PipelineSpec
from lockstep.transform import load_transform, ship_to_executors

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame

    from lockstep.spark.keyed_state import StatefulRun
    from lockstep.spark.target import JobSession
    from lockstep.store.checkpoint_store import PipelineStore

log = logging.getLogger(__name__)


def check_output_schema(spec: PipelineSpec, fields: dict[str, str]) -> tuple[str, ...]:
    """The columns the writer reads from the transform's output, checked before any task starts.

    ``fields`` maps column name -> Spark type (``simpleString``). Returns the columns to select.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in fields]
    if missing:
        raise TerminalError(
            f"{spec.path}: transform {spec.transform} returned columns {list(fields)}, missing {missing}. "
            "The output needs `value` and must keep the input's `topic`, `partition`, `offset` columns "
            "(they become provenance headers); withColumn/filter-style transforms keep them."
        )
    if ROUTE_COLUMN in fields and not spec.sink.routes:
        raise TerminalError(f"{spec.path}: transform {spec.transform} returned a column `{ROUTE_COLUMN}`, a name "
                            "Lockstep keeps for sink.routes: rename it (to send records to several topics, declare "
                            "sink.routes in the spec)")
    columns = REQUIRED_COLUMNS + tuple(c for c in OPTIONAL_COLUMNS if c in fields)
    wrong = [f"`{c}` is {fields[c]} (expected {' or '.join(ACCEPTED_TYPES[c])})"
             for c in columns if fields[c] not in ACCEPTED_TYPES[c]]
    if wrong:
        raise TerminalError(
            f"{spec.path}: transform {spec.transform} returned columns of the wrong type: {'; '.join(wrong)}. "
            + ("Cast them in the query (for example `CAST(error AS STRING) AS error`)." if spec.is_sql else
               "Cast them (for example `F.col('error').cast('string')`).")
        )
    return columns


def _may_dead_letter(spec: PipelineSpec, formats: Formats) -> bool:
    """Whether some input record may go to the dead-letter topic before the transform: one that does not
    decode, or one an inner join's table has no row for (``missing: dead_letter``)."""
    return bool(formats.readings) or _join_dead_letters(spec)


def _join_dead_letters(spec: PipelineSpec) -> bool:
    """Whether a declared join dead-letters the records its table has no row for."""
    return any(t.join is not None and t.join.how == "inner" and t.join.missing == "dead_letter" for t in spec.tables)


def _dead_letters(results: list[str]) -> int:
    """How many dead letters a write's tasks wrote (their committables say)."""
    counts = (parse_task_result(line)[2] for line in results)
    return sum(int(str(c.get("dead_letters", 0))) for c in counts if c is not None)


def job_outcome(exc: BaseException) -> tuple[str, bool]:
    """A failed run's one-line cause, and whether a retry fails the same way (terminal).

    Lockstep's own errors say which they are. The transform not fitting its input (a missing
    column, a type error in SQL) fails the same way on every retry, and so does a state function
    that raised or returned what it may not (`lockstep.spark.state_worker` names it, the same calls
    on the same input fail again); anything else (a task that raised, a lost executor, a broker or
    the Connect server away) may pass on a retry."""
    from pyspark.errors import AnalysisException

    from lockstep.errors import LockstepError, TerminalError, root_cause
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


def _rerun(spark: JobSession, spec: PipelineSpec, store: PipelineStore, kafka: dict[str, object], rerun: Rerun,
           transform: Callable[[DataFrame], DataFrame], checkpoint_id: int,
           runs: list[StatefulRun], formats: Formats) -> DataFrame:
    """The share of checkpoint ``rerun.checkpoint``'s output its lost transactions held, computed again from
    that checkpoint's own claim: its ranges, its base state and its pinned clock (a stateful partial
    commit's repair). Its state is not written again: the completed checkpoint already holds it.

    That checkpoint's output includes what it wrote again itself of an earlier repaired checkpoint (its
    own claim's ``rerun``), which its lost transactions may have held too: that share is computed again
    the same way, as far back as the chain of repairs goes. ``runs`` collects the recomputations, whose
    kept frames the caller lets go once the output is written."""
    from lockstep.spark import keyed_state
    from lockstep.spark.output_tasks import share

    earlier = store.view(rerun.checkpoint)
    if earlier is None or earlier.completed is None:
        raise CheckpointError(checkpoint_id, f"must write again the output that checkpoint {rerun.checkpoint} lost, but "
                                             f"checkpoint {rerun.checkpoint} is no longer in the store; raise "
                                             "checkpoints.retain, and settle it with `lockstep transactions resolve`")
    claim = earlier.claim
    read = tuple(r for r in claim.ranges if not r.is_empty)
    df = read_ranges(spark, kafka, read or claim.ranges, headers=spec.replay_of is not None, tasks=max(1, len(read)))
    if formats.readings or formats.writings:  # decode and encode as that checkpoint did: its own pinned schemas
        formats = Formats(spec, claim.schema_ids, read={r.topic for r in read})
    out, decoded = formats.transformed(df, transform)
    again = keyed_state.start(spark, spec, claim, out, store.state_files(), formats.window_encoder())
    runs.append(again)
    output = formats.with_dead_letters(again.output, decoded, again.output.columns)
    if claim.rerun is not None:  # what that checkpoint itself wrote again of an earlier one
        output = output.unionByName(_rerun(spark, spec, store, kafka, claim.rerun, transform, checkpoint_id, runs,
                                           formats))
    log.warning("checkpoint %d: writes again the output of task%s %s of checkpoint %d, whose transactions the broker "
                "aborted after others were committed: computed again from checkpoint %d's claim (%d records, its base "
                "state and its clock)", checkpoint_id, "s" if len(rerun.tasks) > 1 else "",
                ", ".join(map(str, rerun.tasks)), rerun.checkpoint, rerun.checkpoint, sum(r.count for r in read))
    return share(output, claim.ranges, rerun.of_tasks, rerun.tasks)


def _run_checkpoint_job(spec: PipelineSpec, checkpoint_id: int, spark: JobSession | None, store: PipelineStore,
                        view: CheckpointView | None) -> PreparedCheckpoint:
    view = view if view is not None else store.view(checkpoint_id)
    if view is None:
        raise CheckpointError(checkpoint_id, "has no claim; the plan task must run first")
    if view.status is CheckpointStatus.PREPARED:
        log.info("checkpoint %d: already prepared by an earlier attempt; nothing to write", checkpoint_id)
        assert view.prepared is not None  # what PREPARED means
        return view.prepared
    if view.status is not CheckpointStatus.CLAIMED:
        raise CheckpointError(checkpoint_id, f"is {view.status.value}; the Spark run only writes claimed checkpoints")
    ranges = tuple(r for r in view.claim.ranges if not r.is_empty)
    # No records, but windows or timers are due, or a lost share of the previous checkpoint to write again.
    without_records = not ranges and view.claim.needs_spark
    started = time.monotonic()
    committables: list[PreparedTransaction] = []
    rows_out = 0
    stateful = None
    # Each table's version: the one the run writes, else (no records) the one the claim starts from.
    table_versions = {name: pin.base for name, pin in view.claim.tables.items() if pin.base is not None}
    reruns: list[StatefulRun] = []
    state = None
    if ranges or without_records:
        assert spark is not None  # only a checkpoint without records runs without Spark (steps.run)
        resolved = values_for_run(spec, view)
        notice = resolved.notice(Step.RUN)
        if notice:
            log.warning(notice)
        planned = resolved.values
        kafka = kafka_config(planned.source_kafka_conn_id, JAVA)
        # At most sink.parallelism tasks (transactions), each reading whole source partitions.
        tasks = write_tasks(planned.sink_parallelism, len(ranges), lambda: default_parallelism(spark))
        if without_records:
            ranges = view.claim.ranges  # read as they are, empty: the transform's columns, no rows
        if planned.sink_parallelism == "auto":  # the claim allows up to 256 ids: tell recovery how many
            tasks = store.record_write_tasks(checkpoint_id, tasks)
        # A dedup judged on the driver marks the records where they are: read each task's source partitions
        # in its own Spark partition, and its output needs no shuffle to reach its task (`place`).
        from lockstep.spark.keyed_state import judged_on_driver

        by_task = (not without_records and spec.replay_of is None and view.claim.rerun is None
                   and judged_on_driver(spec, view.claim.state_base))
        # A stateless run reads the input's headers too: its dead letters carry them as they came (`with_raw`).
        df = read_ranges(spark, kafka, ranges, headers=spec.replay_of is not None or spec.state is None, tasks=tasks,
                         groups=task_groups(view.claim.ranges, tasks) if by_task else None)
        transform = routed(spec, load_transform(spec))
        replay = None
        if spec.replay_of is not None:
            from lockstep.spark.replay import start_replay

            df, transform, replay = start_replay(spec, checkpoint_id, df, transform, store)
        if spec.state is None and replay is None:  # a replay's dead letters keep the transform's headers (its mark)
            df = with_raw(df)
        # The Python writer runs Lockstep's own code in the executors' Python workers: ship it too.
        # So does a transform that uses `lockstep.rows` (its UDFs run `lockstep.rows.guarded` there).
        from lockstep.spark.keyed_state import function_modules

        functions = function_modules(spec)  # a state function runs in the Python workers, with Lockstep's wrapper
        uses_lockstep = planned.sink_writer == "python" or "lockstep.rows" in sys.modules or bool(functions)
        shipped = ship_to_executors(spark, spec, (("lockstep",) if uses_lockstep else ()) + functions)
        if shipped:
            log.info("checkpoint %d: shipped %s to the executors", checkpoint_id, ", ".join(shipped))
        formats = Formats(spec, view.claim.schema_ids, read={r.topic for r in ranges if not r.is_empty})
        if formats.readings or formats.writings:
            log.info("checkpoint %d: formats: %s", checkpoint_id, formats.describe())
        enrich = None
        table_dead = None  # table records that do not decode (`MaterializedTables.dead_letters`)
        if spec.tables:
            from lockstep.tables.materialize import join_tables, materialize

            tables = materialize(spark, spec, checkpoint_id, view.claim.tables, store.state_files(), kafka)
            table_versions = tables.versions
            table_dead = tables.dead_letters(spark)
            tables.register_views()  # SQL transforms read each table by its name
            if any(t.join is not None for t in spec.tables):
                enrich = partial(join_tables, spec, tables)
        admin = sink_admin(planned.sink_kafka_conn_id)  # one client for the driver's reads of the sink
        check_transaction_timeout(checkpoint_id, planned.timeout_ms,
                                  transaction_timeout_cap(planned.sink_kafka_conn_id, admin))
        routes = tuple(topic for topic, _ in spec.sink.routes)
        settings = writer_settings(planned, checkpoint_id, dict(spec.producer), topic_limits(
            planned.sink_kafka_conn_id, (planned.sink_topic, planned.dead_letter_topic, *routes), admin),
            pipeline=spec.name, routes=routes)
        log.info("checkpoint %d: reading %d ranges (%s records at most) in %d tasks (sink.parallelism %s), writing "
                 "to %s / %s with the %s writer under transactional ids %s-%d-<task>", checkpoint_id, len(ranges),
                 sum(r.count for r in ranges), tasks, planned.sink_parallelism,
                 planned.sink_topic + (f" (routes: {', '.join(routes)})" if routes else ""),
                 planned.dead_letter_topic, planned.sink_writer, planned.id_prefix, checkpoint_id)
        write = write_with_jvm if planned.sink_writer == "jvm" else write_with_python

        def transform_and_write(raised: Raised | None = None) -> list[str]:
            """The transform's output written in the checkpoint's transactions (each task's result); ``raised``:
            records set aside with their reason (`lockstep.spark.raised`), dead letters as they came."""
            nonlocal stateful
            # A stateless checkpoint whose input may hold dead letters counts them in the write's own pass, when the
            # session can (connect mode): most checkpoints then read and decode their input once.
            counting = spec.state is None and replay is None and (_may_dead_letter(spec, formats) or bool(raised))
            observation = watch(spark) if counting and not raised else None
            out, decoded = formats.transformed(df, transform, enrich, enrich_errors=_join_dead_letters(spec),
                                               observation=observation, raised=raised)
            from lockstep.spark.output_tasks import place

            if table_dead is not None and replay is None:
                # The table records that do not decode go to the dead-letter topic as they came, beside the input's own
                # dead letters (none of their keys' rows changed): counted before the write, with them.
                decoded = table_dead if decoded is None else decoded.unionByName(table_dead, allowMissingColumns=True)
                counting, observation = True, None

            if spec.state is not None:
                from lockstep.spark import keyed_state

                stateful = keyed_state.start(spark, spec, view.claim, out, store.state_files(), formats.window_encoder(),
                                             read_by_task=tasks if by_task else None)
                output = formats.with_dead_letters(stateful.output, decoded, stateful.output.columns)
                if view.claim.rerun is not None:
                    output = output.unionByName(_rerun(spark, spec, store, kafka, view.claim.rerun, transform,
                                                       checkpoint_id, reruns, formats))
                # Each record in the transaction of its source partition's task (rules.output_tasks), in
                # offset order: a lost transaction's share can then be computed again exactly. Output that is
                # there already, as read (checked on its records), is written as it is.
                in_place = stateful.in_place and decoded is None and view.claim.rerun is None
                stateful.metrics["output_in_place"] = float(in_place)  # in the manifest's metrics
                out = output if in_place else place(output, view.claim.ranges, tasks)
            columns = check_output_schema(spec, {f.name: f.dataType.simpleString() for f in out.schema.fields})
            # A stateless transform that dropped the input's bytes (`carries_raw`: an SQL query that lists its columns)
            # returns dead letters without them: when the write says it wrote some, it is written again with their
            # input's key, value and headers, found by provenance (`rejoined`).
            may_rejoin = spec.state is None and replay is None and "error" in out.columns and not carries_raw(out)
            transformed, source = out, df

            def with_dead_letters(bad: int, partitions: int | None = None, rejoin: bool = False) -> DataFrame:
                # The records that did not decode never met the transform: beside its output, each in the
                # transaction of its source partition's task, as a stateful checkpoint places its output.
                # A source partition's sink records all come from one reader task, in offset order (no sort);
                # the transform's dead letters rejoined to their input come from the join's tasks (sorted).
                frame, written = transformed, columns
                if rejoin:
                    frame = rejoined(transformed, source)
                    written = check_output_schema(spec, {f.name: f.dataType.simpleString() for f in frame.schema.fields})
                if bad:
                    log.info("checkpoint %d: %d records do not decode%s%s; they go to the dead-letter topic with the "
                             "reason", checkpoint_id, bad, " or have no row in an inner join's table" if spec.tables else "",
                             " or raise a Spark data error" if raised else "")
                    assert decoded is not None  # what may dead-letter decodes (or joins) its input
                    frame = formats.with_dead_letters(frame, decoded, written)
                return place(frame, view.claim.ranges, tasks, sort=rejoin, partitions=partitions).select(*with_error(written))

            if counting and observation is None and decoded is not None and (bad := Formats.undecodable_count(decoded)):
                # Only then: a look at the input first (a read and a decode, no shuffle) costs less than
                # placing every output record when, as in most checkpoints, every record decodes.
                out = with_dead_letters(bad)
                columns = with_error(columns)
            else:
                bad = 0
            if replay is not None:
                # Kept as computed, so that the replay's record of which task writes which original offset
                # is the writer's partitioning (a repair leaves out the lost transactions' records).
                out = out.localCheckpoint(eager=True)
                replay.record(out.select(*columns))  # before the decision: only read once it is completed
            results = write(spark, out.select(*columns), settings)
            if observation is not None and decoded is not None:
                records = sum(r.count for r in ranges)
                counted = counted_undecodable(observation.get, records)
                if counted is None:
                    log.info("checkpoint %d: the write's pass did not count each of the %d records it read once (%s): "
                             "counting those that do not decode apart", checkpoint_id, records, observation.get)
                    counted = Formats.undecodable_count(decoded)
                if counted:
                    # Written again with them, through the same transactional ids: each of this write's producers
                    # fences the transaction the first write left open under its id, and the partitions past the
                    # tasks (a transform that spread its output wider) close theirs with nothing in them.
                    again = with_dead_letters(counted, len(results), rejoin=may_rejoin and _dead_letters(results) > 0)
                    columns = tuple(again.columns)
                    results = write(spark, again, settings)
                    may_rejoin = False
            if may_rejoin and (dead := _dead_letters(results)):
                log.info("checkpoint %d: the transform's output has dead letters (%d written) but not the input's bytes "
                         "(it dropped them): written again with their input's key, value and headers", checkpoint_id, dead)
                again = with_dead_letters(bad, len(results), rejoin=True)
                columns = tuple(again.columns)
                results = write(spark, again, settings)
            return results

        try:
            results = transform_and_write()
        except Exception as exc:
            error = data_error(exc) if spec.state is None and replay is None else None
            if error is None:
                raise
            if spec.sink.on_error == "fail":
                raise strict_failure(spec, error) from exc
            log.warning("checkpoint %d: %s raised a Spark data error (%s): looking for the records that raise it, to "
                        "send them to the dead-letter topic (sink.on_error: dead_letter)", checkpoint_id,
                        where_raised(spec, error), error.text)
            found = isolate(partial(probe, spark, kafka, formats, transform, enrich, _join_dead_letters(spec)), ranges,
                            error, checkpoint_id, spec)
            log.warning("checkpoint %d: %d records raise a Spark data error; they go to the dead-letter topic with the "
                        "reason, the others are written: %s", checkpoint_id, len(found),
                        "; ".join(f"{t}:{p}@{o}" for t, p, o in list(found)[:10]) + ("; ..." if len(found) > 10 else ""))
            # Written again through the same transactional ids: each producer fences what the failed write left open.
            results = transform_and_write(found)
        log.info("checkpoint %d: %d Spark tasks wrote their transactions in %.1f s", checkpoint_id, len(results),
                 time.monotonic() - started)
        for line in results:
            log.info("checkpoint %d: task result %s", checkpoint_id, line)
            task, rows, committable = parse_task_result(line)
            rows_out += rows
            if committable is not None:
                committables.append(PreparedTransaction.from_json(committable, f"task {task}"))
        if stateful is not None:
            # The state files before prepared.json, which names them: the decision covers both.
            state = stateful.finish()
            for recomputed in reruns:
                recomputed.discard()
    elif spec.state is not None and view.claim.state_base is not None:
        state = view.claim.state_base.carried_forward()  # no records: the state stays as it was
    failpoints.hit("job.before_prepared")
    prepared = PreparedCheckpoint(
        pipeline=spec.name, checkpoint_id=checkpoint_id, prepared_at=datetime.now(UTC).isoformat(),
        transactions=tuple(sorted(committables, key=lambda t: t.task_index)),
        records_in=sum(r.count for r in ranges),
        records_out=sum(t.records for t in committables),
        records_dead_lettered=sum(t.dead_letters for t in committables),
        spark_seconds=round(time.monotonic() - started, 3), state=state,
        output_tasks=tasks if stateful is not None else None, tables=table_versions,
    )
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
    failpoints.hit("job.after_prepared")
    return prepared
