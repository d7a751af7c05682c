"""The stages of a checkpoint's run that compute and write its output: transform (decode, the tables'
joins, the transform and its routes), state (a stateful operator, and a repair's share computed again),
place (each record in its task's transaction, the columns the writers read checked), count (the input's
dead letters, before the write or by the write's own pass), write, rewrite (the output written again
with dead letters the first write could not carry), and, with ``sink.iceberg``, keep (the output computed once
for both writes) and iceberg (the table's rows staged, `lockstep.iceberg.stage`).

A Spark data error that the transform or a route raises (`lockstep.spark.raised`) sends the run to one more
stage, isolate: the records that raise are found and set aside, and the stages run again with them as dead
letters. Every stage is timed by its name (`lockstep.spark.stage_tracker`); its log lines are the job's
(logger ``lockstep.spark.job``), where the benchmarks and the tests read them.
"""
from __future__ import annotations

__all__ = [
    "Computed", "Written", "check_output_schema", "computed_output", "write_output",
]

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from lockstep.errors import CheckpointError, TerminalError
from lockstep.formats.codecs import Formats, carries_raw, counted_undecodable, rejoined, watch, with_error
from lockstep.iceberg.stage import stage_rows
from lockstep.model.output_contract import (
    ACCEPTED_TYPES,
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    ROUTE_COLUMN,
    parse_task_result,
)
from lockstep.spark.input_stages import Input, Run, Sink, Tables
from lockstep.spark.kafka_reader import read_ranges
from lockstep.spark.placement import place, share
from lockstep.spark.raised import DataError, Raised, data_error, isolate, probe, strict_failure, where_raised

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lockstep.iceberg.staged_table import StagedTable
    from lockstep.model.checkpoint import Rerun
    from lockstep.spark.keyed_state import StatefulRun
    from lockstep.spark.stage_tracker import StageTracker
    from lockstep.spec import PipelineSpec
    from lockstep.transform import Transform

log = logging.getLogger("lockstep.spark.job")
T = TypeVar("T")


class Pass(NamedTuple):
    """What the output is computed from and written with: the input stages' values."""

    input: Input
    formats: Formats
    tables: Tables
    #: None: the output is computed, not written (`computed_output`)
    sink: Sink | None


class Transformed(NamedTuple):
    """The transform's output over the records that decode, and the decoded input (None: nothing decoded),
    whose dead letters are counted before the write (``counting``), or by the write's own pass
    (``observation``, `lockstep.formats.codecs.watch`)."""

    out: DataFrame
    decoded: DataFrame | None
    counting: bool
    observation: Any


class Stateful(NamedTuple):
    """A stateful checkpoint's operator run (its state written once the output is), its output with the
    input's dead letters and a repair's recomputed share, and the recomputations to let go afterwards."""

    run: StatefulRun
    output: DataFrame
    in_place: bool
    reruns: tuple[StatefulRun, ...] = ()


class Placed(NamedTuple):
    """The output as the writers take it: ``out`` in ``columns``. ``transformed`` and ``checked`` are the
    transform's output and its checked columns, which a write again with dead letters starts from;
    ``may_rejoin``: a stateless output whose dead letters lack their input's bytes; ``bad``: the input's
    dead letters counted before the write."""

    out: DataFrame
    columns: tuple[str, ...]
    transformed: DataFrame
    checked: tuple[str, ...]
    may_rejoin: bool
    bad: int = 0
    #: The ``value`` column Lockstep added (null) to a table-only output that has none: not the table's.
    added_value: bool = False


class Computed(NamedTuple):
    """The output a write would write, computed and kept (in the writers' columns), and the stateful run whose
    state a write would save (the caller lets it go)."""

    out: DataFrame
    stateful: Stateful | None


class Written(NamedTuple):
    """Each task's result (`lockstep.model.output_contract.parse_task_result`), the stateful run whose
    state is written next, and the Iceberg sink's staged snapshot (``sink.iceberg``)."""

    results: list[str]
    stateful: Stateful | None
    iceberg: StagedTable | None = None


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


def _checked(spec: PipelineSpec, frame: DataFrame) -> tuple[str, ...]:
    return check_output_schema(spec, {f.name: f.dataType.simpleString() for f in frame.schema.fields})


def _join_dead_letters(spec: PipelineSpec) -> bool:
    """Whether a declared join dead-letters the records its table has no row for."""
    return any(t.join is not None and t.join.how == "inner" and t.join.missing == "dead_letter" for t in spec.tables)


def _dead_letters(results: list[str]) -> int:
    """How many dead letters a write's tasks wrote (their committables say)."""
    counts = (parse_task_result(line)[2] for line in results)
    return sum(int(str(c.get("dead_letters", 0))) for c in counts if c is not None)


def write_output(run: Run, tracker: StageTracker, p: Pass) -> Written:
    """The output computed and written in the checkpoint's transactions. A stateless run whose transform or
    routes raise a Spark data error sets the records that raise aside (``sink.on_error: dead_letter``) and
    writes again, through the same transactional ids: each producer fences what the failed write left open."""
    return _isolating(_stages, run, tracker, p)


def computed_output(run: Run, tracker: StageTracker, p: Pass) -> Computed:
    """The output the checkpoint's write would write, computed through the same stages and kept, nothing written
    (``lockstep replay --compare``): the input's dead letters counted before (never in a write's pass), a
    dropped input's bytes rejoined to the transform's dead letters, records that raise a Spark data error set
    aside as a write sets them aside."""
    return _isolating(_computed, run, tracker, p)


def _isolating(stages: Callable[..., T], run: Run, tracker: StageTracker, p: Pass) -> T:
    """``stages`` run, and when a stateless transform or route raised a Spark data error, run again with the
    records that raise set aside (`_isolate`)."""
    try:
        return stages(run, tracker, p)
    except Exception as exc:
        error = data_error(exc) if run.spec.state is None and p.input.replay is None else None
        if error is None:
            raise
        found = tracker.run("isolate", _isolate, run, p, error, exc)
        return stages(run, tracker, p, found)


def _computed(run: Run, tracker: StageTracker, p: Pass, raised: Raised | None = None) -> Computed:
    """transform -> state -> place -> count -> keep (-> keep again, with the input's bytes rejoined)."""
    t = tracker.run("transform", _transform, run, p, raised, False)
    stateful = tracker.run("state", _state, run, p, t) if run.spec.state is not None else None
    placed = tracker.run("place", _place, run, p, t, stateful)
    if t.counting and t.decoded is not None:
        placed = tracker.run("count", _count_before, run, p, t, placed, raised)
    out = tracker.run("keep", _kept, placed.out.select(*placed.columns))
    if placed.may_rejoin and out.where("error IS NOT NULL").limit(1).count():
        out = tracker.run("keep", _kept, _with_dead_letters(run, p, t, placed, raised, placed.bad, rejoin=True))
    return Computed(out, stateful)


def _kept(frame: DataFrame) -> DataFrame:
    """Computed once (a Spark data error raises here, as in a write) and kept for the reads that follow."""
    return frame.localCheckpoint(eager=True)


def _kept_on_disk(frame: DataFrame) -> DataFrame:
    """`_kept` on the executors' disks only: a whole checkpoint's output for both writes (``sink.iceberg``) would
    crowd the heap. 3M records into a table and a topic, alternated (2026-12-05): 28-30 s against 31-39 s kept in
    memory and disk, and 34-35 s computed twice (docs/BENCHMARKS-iceberg.md)."""
    from pyspark import StorageLevel

    return frame.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)


def _stages(run: Run, tracker: StageTracker, p: Pass, raised: Raised | None = None) -> Written:
    """transform -> state -> place (-> keep) -> count -> write -> count -> rewrite (-> iceberg); ``raised``: records
    set aside with their reason (`lockstep.spark.raised`), dead letters as they came."""
    assert p.sink is not None  # a pass that writes
    sink = p.sink
    t = tracker.run("transform", _transform, run, p, raised)
    stateful = tracker.run("state", _state, run, p, t) if run.spec.state is not None else None
    placed = tracker.run("place", _place, run, p, t, stateful)
    if sink.table and not sink.table_only:
        # Computed once and kept: the Kafka write and the table's rows (the iceberg stage) read the same records.
        kept = tracker.run("keep", _kept_on_disk, placed.out)
        placed = placed._replace(out=kept, transformed=kept)
    if t.counting and t.observation is None and t.decoded is not None:
        # Only then: a look at the input first (a read and a decode, no shuffle) costs less than
        # placing every output record when, as in most checkpoints, every record decodes.
        placed = tracker.run("count", _count_before, run, p, t, placed, raised)
    if p.input.replay is not None:
        # Kept as computed, so that the replay's record of which task writes which original offset
        # is the writer's partitioning (a repair leaves out the lost transactions' records).
        placed = placed._replace(out=placed.out.localCheckpoint(eager=True))
        tracker.run("replay", p.input.replay.record, placed.out.select(*placed.columns))  # read once it is completed
    staged = None
    if sink.table_only:
        # The table alone: one pass writes its rows and counts the transform's dead letters (and, in connect mode,
        # the input's that do not decode: `_count_in_write`, after). The Kafka write computes the output again only
        # when it has dead letters to carry (the transform's, or the input's counted before), else writes nothing.
        staged = tracker.run("iceberg", stage_rows, run.spec, run.checkpoint_id, placed.transformed, None,
                             _not_the_tables(placed))
        if not staged.dead_letters and not placed.bad:
            placed = placed._replace(out=placed.out.where("false"))
    results = tracker.run("write", sink.write, run.spark, _for_kafka(sink, placed.out.select(*placed.columns)),
                          sink.settings)
    may_rejoin = placed.may_rejoin
    if t.observation is not None and t.decoded is not None:
        counted = tracker.run("count", _count_in_write, run, t)
        if counted:
            # Written again with them, through the same transactional ids: each of this write's producers
            # fences the transaction the first write left open under its id, and the partitions past the
            # tasks (a transform that spread its output wider) close theirs with nothing in them.
            rejoin = may_rejoin and _dead_letters(results) > 0
            # (A table alone's first write may have written nothing: then the run's tasks.)
            results = tracker.run("rewrite", _write_again, run, p, t, placed, raised, counted,
                                  len(results) or run.tasks, rejoin)
            may_rejoin = False
    if may_rejoin and (dead := _dead_letters(results)):
        log.info("checkpoint %d: the transform's output has dead letters (%d written) but not the input's bytes "
                 "(it dropped them): written again with their input's key, value and headers", run.checkpoint_id, dead)
        results = tracker.run("rewrite", _write_again, run, p, t, placed, raised, placed.bad, len(results), True)
    if sink.table and not sink.table_only:
        staged = tracker.run("iceberg", stage_rows, run.spec, run.checkpoint_id, placed.transformed,
                             sink.settings.sink_max_bytes, _not_the_tables(placed), p.formats.table_record())
    return Written(results, stateful, staged.table if staged is not None else None)


def _not_the_tables(placed: Placed) -> tuple[str, ...]:
    """The output's columns the table does not take: the ``value`` Lockstep added to a table alone's output."""
    return ("value",) if placed.added_value else ()


def _for_kafka(sink: Sink, out: DataFrame) -> DataFrame:
    """What the writers write of ``out``: all of it, or, when the records land in the table alone (no
    ``sink.topic``), its dead letters only (the same tasks: each source partition's still in its task's
    transaction, which carries nothing when it has none)."""
    if not sink.table_only:
        return out
    from pyspark.sql import functions as F

    return out.where(F.col("error").isNotNull()) if "error" in out.columns else out.where(F.lit(False))


def _transform(run: Run, p: Pass, raised: Raised | None, in_write: bool = True) -> Transformed:
    """Decode, join the tables, transform and route (lazily: Spark analyzes, and a route's condition is checked).
    A stateless checkpoint whose input may hold dead letters counts them in the write's own pass, when the
    session can (connect mode): most checkpoints then read and decode their input once (``in_write``)."""
    spec, formats, replaying = run.spec, p.formats, p.input.replay
    may_dead_letter = bool(formats.readings) or _join_dead_letters(spec)  # before the transform
    counting = spec.state is None and replaying is None and (may_dead_letter or bool(raised))
    observation = watch(run.spark) if counting and not raised and in_write else None
    out, decoded = formats.transformed(p.input.df, p.input.transform, p.tables.enrich,
                                       enrich_errors=_join_dead_letters(spec), observation=observation, raised=raised)
    if p.tables.dead is not None and replaying is None:
        # The table records that do not decode go to the dead-letter topic as they came, beside the input's own
        # dead letters (none of their keys' rows changed): counted before the write, with them.
        dead = p.tables.dead
        decoded = dead if decoded is None else decoded.unionByName(dead, allowMissingColumns=True)
        counting, observation = True, None
    return Transformed(out, decoded, counting, observation)


def _state(run: Run, p: Pass, t: Transformed) -> Stateful:
    """The stateful operator over the transformed records, the input's dead letters beside its output, and what a
    repaired checkpoint lost, computed again (`_rerun`)."""
    from lockstep.spark import keyed_state

    claim = run.claim
    stateful = keyed_state.start(run.spark, run.spec, claim, t.out, run.store.state_files(),
                                 p.formats.window_encoder(), read_by_task=run.tasks if run.by_task else None)
    output = p.formats.with_dead_letters(stateful.output, t.decoded, stateful.output.columns)
    reruns: list[StatefulRun] = []
    if claim.rerun is not None:
        output = output.unionByName(_rerun(run, claim.rerun, p.input.transform, reruns, p.formats))
    # Output that is there already, as read (checked on its records), is written as it is.
    in_place = stateful.in_place and t.decoded is None and claim.rerun is None
    stateful.metrics["output_in_place"] = float(in_place)  # in the manifest's metrics
    return Stateful(stateful, output, in_place, tuple(reruns))


def _place(run: Run, p: Pass, t: Transformed, stateful: Stateful | None) -> Placed:
    """A stateful output in the transaction of its source partition's task (`lockstep.rules.output_tasks`), in
    offset order: a lost transaction's share can then be computed again exactly. The writers' columns checked."""
    out = t.out
    if stateful is not None:
        out = stateful.output if stateful.in_place else place(stateful.output, run.claim.ranges, run.tasks)
    added = run.planned.sink_topic is None and "value" not in out.columns
    if added:  # the table's columns are the transform's own; the writers read a value (a dead letter's, rejoined)
        from pyspark.sql import functions as F

        out = out.withColumn("value", F.lit(None).cast("binary"))
    columns = _checked(run.spec, out)
    # A stateless transform that dropped the input's bytes (`carries_raw`: an SQL query that lists its columns)
    # returns dead letters without them: when the write says it wrote some, it is written again with their
    # input's key, value and headers, found by provenance (`rejoined`).
    may_rejoin = run.spec.state is None and p.input.replay is None and "error" in out.columns and not carries_raw(out)
    return Placed(out, columns, out, columns, may_rejoin, added_value=added)


def _count_before(run: Run, p: Pass, t: Transformed, placed: Placed, raised: Raised | None) -> Placed:
    """The input's dead letters counted before the write; when there are some, the output with them."""
    assert t.decoded is not None  # the caller's condition
    bad = Formats.undecodable_count(t.decoded)
    if not bad:
        return placed
    out = _with_dead_letters(run, p, t, placed, raised, bad)
    return placed._replace(out=out, columns=with_error(placed.columns), bad=bad)


def _count_in_write(run: Run, t: Transformed) -> int:
    """The input's dead letters, as the write's own pass counted them; counted apart when that pass did not see
    each record once."""
    assert t.decoded is not None  # the caller's condition
    records = run.records
    counted = counted_undecodable(t.observation.get, records)
    if counted is None:
        log.info("checkpoint %d: the write's pass did not count each of the %d records it read once (%s): "
                 "counting those that do not decode apart", run.checkpoint_id, records, t.observation.get)
        counted = Formats.undecodable_count(t.decoded)
    return counted


def _write_again(run: Run, p: Pass, t: Transformed, placed: Placed, raised: Raised | None, bad: int,
                 partitions: int, rejoin: bool) -> list[str]:
    """The output written again with its dead letters, in as many partitions as the first write had tasks."""
    again = _with_dead_letters(run, p, t, placed, raised, bad, partitions, rejoin)
    assert p.sink is not None  # a pass that writes
    return p.sink.write(run.spark, _for_kafka(p.sink, again), p.sink.settings)


def _with_dead_letters(run: Run, p: Pass, t: Transformed, placed: Placed, raised: Raised | None, bad: int,
                       partitions: int | None = None, rejoin: bool = False) -> DataFrame:
    """The records that did not decode never met the transform: beside its output, each in the transaction of
    its source partition's task, as a stateful checkpoint places its output. A source partition's sink
    records all come from one reader task, in offset order (no sort); the transform's dead letters rejoined
    to their input come from the join's tasks (sorted)."""
    frame, written = placed.transformed, placed.checked
    if rejoin:
        frame = rejoined(placed.transformed, p.input.df)
        written = _checked(run.spec, frame)
    if bad:
        log.info("checkpoint %d: %d records do not decode%s%s; they go to the dead-letter topic with the reason",
                 run.checkpoint_id, bad, " or have no row in an inner join's table" if run.spec.tables else "",
                 " or raise a Spark data error" if raised else "")
        assert t.decoded is not None  # what may dead-letter decodes (or joins) its input
        frame = p.formats.with_dead_letters(frame, t.decoded, written)
    return place(frame, run.claim.ranges, run.tasks, sort=rejoin, partitions=partitions).select(*with_error(written))


def _isolate(run: Run, p: Pass, error: DataError, exc: Exception) -> dict[tuple[str, int, int], str]:
    """The records that raise the data error, found by bisection of the claimed ranges (``sink.on_error:
    dead_letter``); ``fail`` stops the checkpoint for good at the first."""
    spec, cid = run.spec, run.checkpoint_id
    if spec.sink.on_error == "fail":
        raise strict_failure(spec, error) from exc
    log.warning("checkpoint %d: %s raised a Spark data error (%s): looking for the records that raise it, to "
                "send them to the dead-letter topic (sink.on_error: dead_letter)", cid, where_raised(spec, error),
                error.text)
    found = isolate(partial(probe, run.spark, run.kafka, p.formats, p.input.transform, p.tables.enrich,
                            _join_dead_letters(spec)), run.ranges, error, cid, spec)
    some = "; ".join(f"{topic}:{part}@{offset}" for topic, part, offset in list(found)[:10])
    log.warning("checkpoint %d: %d records raise a Spark data error; they go to the dead-letter topic with the "
                "reason, the others are written: %s", cid, len(found), some + ("; ..." if len(found) > 10 else ""))
    return found


def _rerun(run: Run, rerun: Rerun, transform: Transform, runs: list[StatefulRun], formats: Formats) -> DataFrame:
    """The share of checkpoint ``rerun.checkpoint``'s output its lost transactions held, computed again from
    that checkpoint's own claim: its ranges, its base state and its pinned clock (a stateful partial
    commit's repair). Its state is not written again: the completed checkpoint already holds it.

    That checkpoint's output includes what it wrote again itself of an earlier repaired checkpoint (its
    own claim's ``rerun``), which its lost transactions may have held too: that share is computed again
    the same way, as far back as the chain of repairs goes. ``runs`` collects the recomputations, whose
    kept frames the caller lets go once the output is written."""
    from lockstep.spark import keyed_state

    spec, store, checkpoint_id = run.spec, run.store, run.checkpoint_id
    earlier = store.view(rerun.checkpoint)
    if earlier is None or earlier.completed is None:
        raise CheckpointError(checkpoint_id, f"must write again the output that checkpoint {rerun.checkpoint} lost, but "
                                             f"checkpoint {rerun.checkpoint} is no longer in the store; raise "
                                             "checkpoints.retain, and settle it with `lockstep transactions resolve`")
    claim = earlier.claim
    read = tuple(r for r in claim.ranges if not r.is_empty)
    df = read_ranges(run.spark, run.kafka, read or claim.ranges, headers=spec.replay_of is not None,
                     tasks=max(1, len(read)))
    if formats.readings or formats.writings:  # decode and encode as that checkpoint did: its own pinned schemas
        formats = Formats(spec, claim.schema_ids, read={r.topic for r in read})
    out, decoded = formats.transformed(df, transform)
    again = keyed_state.start(run.spark, spec, claim, out, store.state_files(), formats.window_encoder())
    runs.append(again)
    output = formats.with_dead_letters(again.output, decoded, again.output.columns)
    if claim.rerun is not None:  # what that checkpoint itself wrote again of an earlier one
        output = output.unionByName(_rerun(run, claim.rerun, transform, runs, formats))
    log.warning("checkpoint %d: writes again the output of task%s %s of checkpoint %d, whose transactions the broker "
                "aborted after others were committed: computed again from checkpoint %d's claim (%d records, its base "
                "state and its clock)", checkpoint_id, "s" if len(rerun.tasks) > 1 else "",
                ", ".join(map(str, rerun.tasks)), rerun.checkpoint, rerun.checkpoint, sum(r.count for r in read))
    return share(output, claim.ranges, rerun.of_tasks, rerun.tasks)
