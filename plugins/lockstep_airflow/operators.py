"""Thin Airflow operators over the Lockstep coordinator: one task per checkpoint step.

They validate in ``__init__``, do I/O only in ``execute`` and call the same
functions as the ``lockstep`` CLI, so a DAG run and ``lockstep run`` behave alike.
Every failure raises with a message naming the checkpoint, the cause and the way
out; it is the last line of the task log.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseOperatorLink

from lockstep.logs import quiet_clients
from lockstep_airflow.links import checkpoint_url
from lockstep_airflow.run_notes import FAILURE_KEY

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import TaskInstanceKey
    from pydantic import JsonValue

    from lockstep.spec import PipelineSpec
    from lockstep.steps.coordinator import Pipeline, Stoppable

log = logging.getLogger(__name__)
quiet_clients()  # task logs start with Lockstep's lines, not the clients' connection chatter
#: The XCom key of a task's return value (Airflow's own).
RETURN_KEY = "return_value"
#: How often a plan that waits for another run's in-flight checkpoint looks again.
IN_FLIGHT_POKE = timedelta(seconds=30)
#: How long a lag-triggered checkpoint task waits in its own process for the checkpoint before it
#: (`LockstepCheckpointOperator`): the run one ahead starts while the one before is committing. How often it looks:
#: `lockstep.rules.lag_trigger.look_again_in`; `IN_FLIGHT_LOOK_S` when it does not know which checkpoint it waits for.
IN_FLIGHT_WAIT = timedelta(seconds=60)
IN_FLIGHT_LOOK_S = 0.2


def _arm_failpoints(context: Context) -> None:
    """Crash tests through Airflow: a run's conf may arm failpoints for that run only
    (``{"lockstep_failpoints": "commit.between_commits=raise"}``), and only for its tasks' first N tries
    (``"lockstep_failpoints_tries": N``: a retry that finds them disarmed shows what it recovers); without it
    nothing changes. ``pause`` needs the folder of its signal file (``"lockstep_failpoint_signals": "/dir"``,
    an existing folder): a test holds the task there until it removes the file."""
    from lockstep.model.failpoints import PAUSE_SIGNALS

    conf = context["dag_run"].conf or {}
    armed = conf.get("lockstep_failpoints")
    tries = conf.get("lockstep_failpoints_tries")
    if armed and tries is not None and int(context["ti"].try_number) > int(tries):
        log.warning("failpoints of this run (%s) not armed on try %s (lockstep_failpoints_tries: %s)", armed,
                    context["ti"].try_number, tries)
        os.environ.pop("LOCKSTEP_FAILPOINTS", None)
        return
    if armed:
        os.environ["LOCKSTEP_FAILPOINTS"] = str(armed)
        log.warning("failpoints armed for this run: %s", armed)
        signals = conf.get("lockstep_failpoint_signals")
        if signals and os.path.isdir(str(signals)):
            os.environ[PAUSE_SIGNALS] = str(signals)


def _loud(step: str, spec_name: str, checkpoint_id: int | None, exc: Exception, context: Context | None = None) -> Exception:
    """The one line a user reads first: which checkpoint, what failed, what happens next.

    The error's class decides retries: a ``TerminalError`` fails the task at once
    (``AirflowFailException``: a retry would fail the same way), anything else is retried.
    The line is also left in XCom (``FAILURE_KEY``) for the run's note.
    """
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from lockstep.errors import TerminalError

    what = f"checkpoint {checkpoint_id}" if checkpoint_id is not None else "no checkpoint claimed"
    message = " ".join(str(exc).split()) if f"checkpoint {checkpoint_id}" in str(exc) else f"{what}: {exc}"
    if not any(hint in message.lower() for hint in ("next run", "retry", "trigger", "fix ")):
        message += ("; nothing was committed for it, the next run recovers and replays its ranges"
                    if step != "commit" else "; the commit task retries, and the next run's plan rolls a "
                    "prepared checkpoint forward")
    from lockstep.connections import redact

    # Causes quote clients and the Spark job (a URL, a JAAS line); the summary goes to the log, XCom,
    # S3 and the run note, so it carries no connection secret.
    line = redact(f"lockstep {spec_name} {step} failed: {message}")
    if context is not None:
        try:
            context["ti"].xcom_push(key=FAILURE_KEY, value={"pipeline": spec_name, "summary": line})
        except Exception as push_error:  # noqa: BLE001 - the summary matters more than the note
            log.warning("could not leave the failure summary for the run note: %s", push_error)
    log.error(line)
    return AirflowFailException(line) if isinstance(exc, TerminalError) else AirflowException(line)


class CheckpointLink(BaseOperatorLink):
    """"Checkpoint" on a Lockstep task: its checkpoint on the Checkpoints page, inside Airflow."""

    name = "Checkpoint"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return getattr(operator, "checkpoint_link", "") or ""


class _LockstepOperator(BaseOperator):
    operator_extra_links = (CheckpointLink(),)

    def __init__(self, *, spec_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.checkpoint_link = ""

    def _link(self, pipeline: str, checkpoint_id: int) -> None:
        self.checkpoint_link = checkpoint_url(pipeline, checkpoint_id)

    def pre_execute(self, context: Any) -> None:
        super().pre_execute(context)
        log.info(preload_note())


def preload_note() -> str:
    """Whether this task's worker had Lockstep's task modules imported before it forked the task
    (`lockstep_airflow.task_preload`, which nothing else imports), which saves each task importing them again."""
    if "lockstep_airflow.task_preload" in sys.modules:
        return "Lockstep's task modules were preloaded by the worker (lockstep_airflow.task_preload)"
    return ("this task imported Lockstep's task modules itself (about 0.6 s of CPU per task); to have the workers "
            "preload them, set [scheduler] mp_start_method = forkserver and add lockstep_airflow.task_preload to "
            "[scheduler] mp_forkserver_preload (docs/operations.md, Task start)")


def _send_lag(p: Pipeline) -> None:
    """The pipeline's lag as StatsD gauges where Airflow sends its metrics (``[metrics] statsd_on``);
    nothing is read when metrics are off. Metrics never fail a task."""
    from lockstep.ops import lag, metrics

    try:
        target = metrics.metrics_target()
        if target is not None:
            metrics.send_gauges(p.spec.name, lag.read_lag(p.spec, p.store, p.source_admin).gauges(), target)
    except Exception as exc:  # noqa: BLE001 - e.g. Kafka slow to answer: the checkpoint is what matters
        log.warning("lag metrics of %s not sent: %s", p.spec.name, exc)


def _dry_run(context: Context) -> bool:
    return bool(context["params"].get("dry_run"))


def _planned_checkpoint(context: Context) -> int:
    planned = context["ti"].xcom_pull(task_ids="plan")
    if not planned or "checkpoint_id" not in planned:
        raise RuntimeError("the plan task left no checkpoint id in XCom; re-run the whole DAG run")
    return int(planned["checkpoint_id"])


def _lag_trigger_reasons(context: Context) -> list[str]:
    """Why the lag watcher started this run (``checkpoints.trigger``): the reasons its asset events carry."""
    reasons: list[str] = []
    try:
        for events in (context.get("triggering_asset_events") or {}).values():
            for event in events:
                payload = (getattr(event, "extra", None) or {}).get("payload") or {}
                if isinstance(payload, dict) and payload.get("reason"):
                    reasons.append(str(payload["reason"]))
    except Exception as exc:  # noqa: BLE001 - a log line only; the plan does not depend on it
        log.info("the triggering asset events could not be read (%s)", exc)
    return reasons


def _plan_step(op: _LockstepOperator, context: Context, spec: PipelineSpec, p: Pipeline,
               wait_in_flight: timedelta | None = None) -> dict[str, Any]:
    """Recover, then fix and claim the next checkpoint's ranges: the plan task's work (its XCom).

    ``wait_in_flight``: while another live run's checkpoint is in flight, wait for it in this process for this
    long (`_until_it_moves`, then plan again) (the run one ahead of a lag-triggered checkpoint task: it starts while the
    one before commits), and only then give the slot back to Airflow until `IN_FLIGHT_POKE` has passed. Two
    such runs may also plan at the same moment, before either has claimed: the one that loses the claim (the
    conditional create in S3) waits the same way and plans again after the winner's checkpoint settled."""
    from airflow.sdk.exceptions import AirflowRescheduleException

    from lockstep.errors import LockstepError
    from lockstep.model.failpoints import FailpointError
    from lockstep.steps.coordinator import CheckpointAlreadyClaimed, CheckpointInFlight, plan

    params = context["params"]
    dry_run = _dry_run(context)
    for reason in _lag_trigger_reasons(context):
        log.info("%s: started by its lag watcher: %s", spec.name, reason)
    first_look = time.monotonic()
    told: set[type[Exception]] = set()
    while True:
        started = time.monotonic()
        try:
            result = plan(p, run_id=context["run_id"], restore=params.get("restore_from") or None,
                          max_records=params.get("max_records"), dry_run=dry_run, run_alive=_run_alive(context))
            break
        except (CheckpointInFlight, CheckpointAlreadyClaimed) as exc:
            if wait_in_flight is not None and time.monotonic() - first_look < wait_in_flight.total_seconds():
                if type(exc) not in told:
                    log.info("%s; waiting for it in this process for up to %s", exc, wait_in_flight)
                    told.add(type(exc))
                _until_it_moves(p, getattr(exc, "checkpoint_id", None),
                                first_look + wait_in_flight.total_seconds())
                continue
            if isinstance(exc, CheckpointAlreadyClaimed):
                raise _loud("plan", spec.name, exc.checkpoint_id, exc, context) from exc
            # Backfills are not bounded by max_active_runs: wait for the other run, do not fail.
            log.info("%s; checking again in %s", exc, IN_FLIGHT_POKE)
            raise AirflowRescheduleException(datetime.now(UTC) + IN_FLIGHT_POKE) from exc
        except (LockstepError, FailpointError) as exc:
            raise _loud("plan", spec.name, getattr(exc, "checkpoint_id", None), exc, context) from exc
    claim = result.claim
    if told and claim.after is not None:  # pipelined: planned on top of the one in flight, once it was prepared
        log.info("%s: checkpoint %d was prepared after %.1f s; planned on top of it", spec.name, claim.after,
                 started - first_look)
    elif told:
        log.info("%s: the checkpoint in flight settled after %.1f s; planned after it", spec.name,
                 started - first_look)
    if not dry_run:
        op._link(spec.name, claim.checkpoint_id)
        _send_lag(p)  # the claimed records are in flight now
    ranges = [r for r in claim.ranges if not r.is_empty]
    for r in ranges:
        log.info("checkpoint %d: range %s (%d records)", claim.checkpoint_id, r, r.count)
    if not ranges:
        log.info("checkpoint %d: no new records in %d partitions", claim.checkpoint_id, len(claim.ranges))
    log.info("checkpoint %d: planned %d records from %s in %.1f s%s", claim.checkpoint_id,
             result.range_plan.total_records, claim.start_source, time.monotonic() - started,
             " (dry run: nothing claimed, run and commit are skipped)" if dry_run else "")
    return {"pipeline": spec.name, "checkpoint_id": claim.checkpoint_id,
            "records": result.range_plan.total_records, "ranges": [str(r) for r in ranges],
            "start_source": claim.start_source, "restored_from": claim.restored_from, "dry_run": dry_run,
            "restore": result.restore_summary}


def _until_it_moves(p: Pipeline, checkpoint_id: int | None, deadline: float) -> None:
    """Wait, looking at the store, until the checkpoint in flight ``checkpoint_id`` moves on (prepared, settled,
    gone), `PLAN_AGAIN_EVERY_S` has passed, or ``deadline`` (monotonic) comes: one listing of its folder a look, as
    often as `lockstep.rules.lag_trigger.look_again_in` says (a plan a look cost the store, and Airflow, far more)."""
    from lockstep.errors import LockstepError
    from lockstep.rules.lag_trigger import PLAN_AGAIN_EVERY_S, look_again_in

    if checkpoint_id is None:
        time.sleep(IN_FLIGHT_LOOK_S)
        return
    until = min(deadline, time.monotonic() + PLAN_AGAIN_EVERY_S)
    try:
        first = p.store.stage(checkpoint_id)
        stage = first
        while stage == first and time.monotonic() < until:
            wait = look_again_in(stage)
            if wait is None:
                return
            time.sleep(min(wait, max(0.0, until - time.monotonic())))
            stage = p.store.stage(checkpoint_id)
    except LockstepError:
        return  # the store did not answer: the plan, tried again now, fails or retries as a plan does


def _run_alive(context: Context) -> Callable[[str], bool | None]:
    """Whether another run of this DAG is still going, from Airflow itself; None if not ours."""
    from lockstep.rules.run_ownership import parse_cli_run_id

    def alive(run_id: str) -> bool | None:
        if parse_cli_run_id(run_id) is not None:
            return None  # a CLI run: the coordinator checks its process
        try:
            state = context["ti"].get_dagrun_state(dag_id=context["dag"].dag_id, run_id=run_id)
        except Exception:  # noqa: BLE001 - not a run of this DAG
            return None
        return state in ("queued", "running")

    return alive


def _run_step(op: _LockstepOperator, context: Context, spec: PipelineSpec, checkpoint_id: int,
              on_start: Callable[[Stoppable], None]) -> None:
    """The bounded Spark run of the planned checkpoint: the run task's work."""
    from lockstep.errors import LockstepError
    from lockstep.steps.client_factory import checkpoint_store
    from lockstep.steps.coordinator import run_checkpoint

    op._link(spec.name, checkpoint_id)
    try:
        seconds = run_checkpoint(spec, checkpoint_id, checkpoint_store(spec), on_start=on_start)
    except LockstepError as exc:
        raise _loud("run", spec.name, checkpoint_id, exc, context) from exc
    log.info("checkpoint %d: run step finished in %.1f s", checkpoint_id, seconds)


def _commit_step(op: _LockstepOperator, context: Context, spec: PipelineSpec, p: Pipeline,
                 checkpoint_id: int) -> dict[str, Any]:
    """Verify and commit every transaction, mark completed, publish offsets, set the outlets' events: the commit
    task's work (its XCom). A checkpoint that completed with no new records raises ``AirflowSkipException``."""
    from airflow.sdk.exceptions import AirflowSkipException

    from lockstep.errors import LockstepError
    from lockstep.model.failpoints import FailpointError
    from lockstep.ops import metrics
    from lockstep.steps.coordinator import commit

    op._link(spec.name, checkpoint_id)
    started = time.monotonic()
    try:
        outcome = commit(p, checkpoint_id)
    except (LockstepError, FailpointError) as exc:
        raise _loud("commit", spec.name, checkpoint_id, exc, context) from exc
    view = p.store.view(checkpoint_id)
    assert view is not None and view.prepared is not None  # committed, so prepared
    prepared = view.prepared
    log.info("checkpoint %d: %s in %.1f s: %d records in, %d out, %d dead-lettered, %d transactions",
             checkpoint_id, outcome.status.value, time.monotonic() - started, prepared.records_in,
             prepared.records_out, prepared.records_dead_lettered, len(outcome.committed))
    if outcome.repair:
        log.warning("checkpoint %d: completed after repair: %s", checkpoint_id, outcome.repair.told)
    _send_lag(p)
    metrics.send_commit_time_left(spec.name, spec.transactions.timeout_ms, outcome.time_left_ms)
    if prepared.records_out + prepared.records_dead_lettered == 0:
        # Completed, but nothing new in either topic: no asset event, so downstream DAGs do not run.
        raise AirflowSkipException(f"checkpoint {checkpoint_id} completed with no new records; "
                                   "the sink and dead-letter assets are not updated")
    extra: dict[str, JsonValue] = {"pipeline": spec.name, "checkpoint_id": checkpoint_id,
             "end_offsets": dict(view.completed.end_offsets) if view.completed else {}}
    for asset in op.outlets:
        role = asset.extra.get("role")
        # With sink.routes, the sink's count is every output's, whatever its route: the transactions
        # count records per task, not per topic; a route's event carries none.
        records = (prepared.records_out if role == "sink" else prepared.records_dead_lettered
                   if role == "dead letters" else None)
        context["outlet_events"][asset].extra = {**extra, "records": records}
    return {"checkpoint_id": checkpoint_id, "status": outcome.status.value, "records_out": prepared.records_out,
            "dead_lettered": prepared.records_dead_lettered,
            **({"repair": outcome.repair.to_json()} if outcome.repair else {})}


class LockstepPlanOperator(_LockstepOperator):
    """Recover, then fix and claim the next checkpoint's offset ranges (XCom: checkpoint id, ranges).

    :param spec_path: the pipeline spec YAML.
    Params read at run time: ``restore_from`` (savepoint name or ``checkpoint:ID``),
    ``max_records`` (budget override) and ``dry_run`` (show the ranges, claim nothing).
    """

    ui_color = "#e8f1fb"

    def execute(self, context: Context) -> dict[str, Any]:
        from lockstep.spec import load_spec
        from lockstep.steps.coordinator import Pipeline

        _arm_failpoints(context)
        spec = load_spec(self.spec_path)
        return _plan_step(self, context, spec, Pipeline.open(spec))


class LockstepRunOperator(_LockstepOperator):
    """The bounded Spark run of the planned checkpoint: the same run step as ``lockstep run``.

    ``lockstep.steps.run.run_checkpoint`` decides where the run goes (``spark.mode``: a spark-submit
    whose driver output streams into this task's log, or a session on a Spark Connect server
    driven from this task) and prepares an empty checkpoint without starting Spark. Connections
    reach a spark-submit job through its environment, never its command line. Killing the task
    stops spark-submit with its driver JVM and Python workers, or interrupts the Connect session.
    """

    ui_color = "#fdf3e1"

    def __init__(self, *, spec_path: str, **kwargs: Any) -> None:
        super().__init__(spec_path=spec_path, **kwargs)
        self._run: Stoppable | None = None

    def execute(self, context: Context) -> None:
        from airflow.sdk.exceptions import AirflowSkipException

        from lockstep.spec import load_spec

        if _dry_run(context):
            raise AirflowSkipException("dry run: the plan only showed the ranges")
        _arm_failpoints(context)
        spec = load_spec(self.spec_path)
        _run_step(self, context, spec, _planned_checkpoint(context), self._started)

    def _started(self, run: Stoppable) -> None:
        self._run = run

    def on_kill(self) -> None:
        if self._run is not None:
            self._run.stop()


class LockstepCommitOperator(_LockstepOperator):
    """Verify every transaction, commit all, mark the checkpoint completed, publish offsets.

    Idempotent, so it is the task that gets retries.
    """

    ui_color = "#e6f4ea"

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        from lockstep.spec import load_spec
        from lockstep.steps.coordinator import Pipeline

        if _dry_run(context):
            raise AirflowSkipException("dry run: nothing to commit")
        _arm_failpoints(context)
        spec = load_spec(self.spec_path)
        return _commit_step(self, context, spec, Pipeline.open(spec), _planned_checkpoint(context))


class LockstepCheckpointOperator(LockstepRunOperator):
    """Plan, run and commit one checkpoint in this task's process (``checkpoints.tasks: one``): the three tasks'
    work, one after the other, as ``lockstep run`` does, without two task starts between them.

    A retry plans again: the plan recovers this run's checkpoint first (a prepared one is committed, one that
    was not is aborted and its ranges replayed), as the next run's plan does after a failed three-task run. The
    plan's XCom is left as the task's return value as soon as the checkpoint is claimed; the commit's fields are
    added when it completes.

    ``wait_in_flight``: a lag-triggered pipeline's next run starts while the one before is still committing
    (its watcher fires one run ahead, and the DAG lets two runs be active): the task starts its process, then
    its plan waits here for that checkpoint to settle and claims the next one at once.
    """

    def __init__(self, *, spec_path: str, wait_in_flight: timedelta | None = None, **kwargs: Any) -> None:
        super().__init__(spec_path=spec_path, **kwargs)
        self.wait_in_flight = wait_in_flight

    ui_color = "#eef0fb"

    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        from lockstep.spec import load_spec
        from lockstep.steps.coordinator import Pipeline

        _arm_failpoints(context)
        spec = load_spec(self.spec_path)
        p = Pipeline.open(spec)
        planned = _plan_step(self, context, spec, p, self.wait_in_flight)
        context["ti"].xcom_push(key=RETURN_KEY, value=planned)
        if planned["dry_run"]:
            return planned
        checkpoint_id = int(planned["checkpoint_id"])
        _run_step(self, context, spec, checkpoint_id, self._started)
        return {**planned, **_commit_step(self, context, spec, p, checkpoint_id)}


class _PipelinesOperator(BaseOperator):
    """An operator of the DAGs that act on a pipeline chosen in their params (savepoints, compare, Iceberg upkeep):
    the pipelines' specs read from ``pipelines_dir`` when the task runs."""

    def __init__(self, *, pipelines_dir: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipelines_dir = pipelines_dir

    def _specs(self) -> dict[str, PipelineSpec]:
        """The pipelines whose specs validate, by name (one that does not is left out, as its DAG is)."""
        from lockstep.spec import load_each

        return {s.name: s for s in load_each(self.pipelines_dir)[0]}


class LockstepSavepointOperator(_PipelinesOperator):
    """Create or delete a savepoint of a pipeline, from the DAG run's params."""

    def execute(self, context: Context) -> dict[str, Any]:
        from lockstep.model.savepoint import validate_savepoint_name
        from lockstep.steps.client_factory import checkpoint_store

        params = context["params"]
        specs = self._specs()
        if params["pipeline"] not in specs:
            raise ValueError(f"pipeline {params['pipeline']!r} not found; known: {', '.join(sorted(specs))}")
        store = checkpoint_store(specs[params["pipeline"]])
        name = validate_savepoint_name(params["name"])
        if params["action"] == "delete":
            store.delete_savepoint(name)
            log.info("savepoint %s of %s deleted", name, params["pipeline"])
            return {"deleted": name}
        sp = store.create_savepoint(name, params.get("checkpoint_id"), datetime.now(UTC).isoformat())
        log.info("savepoint %s of %s created from checkpoint %d: offsets %s", sp.name, sp.pipeline, sp.checkpoint_id,
                 ", ".join(f"{k}={v}" for k, v in sorted(sp.end_offsets.items())))
        return sp.to_json()


class LockstepCompareOperator(_PipelinesOperator):
    """``lockstep replay --compare`` from the DAG run's params: the pipeline's retained completed checkpoints
    computed again through another version of its spec, compared with what they committed, the report in the
    task log (and on the Checkpoints page). Nothing is written to the sinks.

    ``spec``: the new version's file on the workers, absolute or relative to the pipelines folder (keep
    candidates outside that folder, or the DAG processor loads them as pipelines). ``last``: how many of the
    newest completed checkpoints; ``fail_on_change``: fail the task when the output or the state changes (a gate)."""

    def execute(self, context: Context) -> dict[str, Any]:
        from pathlib import Path

        from airflow.sdk.exceptions import AirflowFailException

        from lockstep.errors import LockstepError
        from lockstep.ops.compare import compare_pipeline, exit_code
        from lockstep.spec import load_spec

        quiet_clients()
        params = context["params"]
        specs = self._specs()
        running = specs.get(params["pipeline"])
        if running is None:
            raise AirflowFailException(f"pipeline {params['pipeline']!r} not found in {self.pipelines_dir}; known: "
                                       f"{', '.join(sorted(specs))}")
        path = Path(str(params["spec"]))
        path = path if path.is_absolute() else Path(self.pipelines_dir) / path
        try:
            new = load_spec(path)
            report = compare_pipeline(running, new, newest=params.get("last"), examples=int(params.get("examples", 5)))
        except LockstepError as exc:
            from airflow.sdk.exceptions import AirflowException

            from lockstep.connections import redact
            from lockstep.errors import TerminalError

            # Not a checkpoint's failure: nothing was claimed or written, so no word of a next run's recovery.
            line = redact(f"lockstep {running.name} compare failed: {' '.join(str(exc).split())}; nothing was "
                          f"written: fix {path} or the pipeline named, then trigger lockstep_compare again")
            log.error(line)
            raise (AirflowFailException(line) if isinstance(exc, TerminalError) else AirflowException(line)) from exc
        for line in report.lines():
            log.info("%s", line)
        code = exit_code(report)
        if code == 1 and params.get("fail_on_change"):
            raise AirflowFailException(f"lockstep {running.name} compare: {report.verdict()} through {path}: "
                                       f"{report.total.line()}")
        if code == 2:
            log.warning("lockstep %s compare: not every checkpoint could be compared (%d not compared)", running.name,
                        len(report.not_compared))
        return report.summary()


#: The ``pipeline`` param of ``lockstep_iceberg_upkeep`` that looks after every pipeline with ``sink.iceberg``.
EVERY_TABLE = "(every pipeline with sink.iceberg)"


class LockstepIcebergUpkeepOperator(_PipelinesOperator):
    """``lockstep iceberg upkeep`` from the DAG run's params, for one pipeline's table or every one: compaction of
    the small files of older checkpoints (``keep`` newest left alone), expiry of old snapshots (never a checkpoint's
    not completed yet), then the orphan files removed (``dry_run``: only counted). Each action's line is in the task
    log, its figures on the pipeline's Checkpoints page; the return value (XCom) holds them all.

    A pipeline whose upkeep fails does not stop the others'; the task then fails naming each one and its cause. It is
    retried unless every cause is one a retry would meet again (a spec without ``sink.iceberg``, a bad age)."""

    ui_color = "#e8f4f0"

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from lockstep.connections import redact
        from lockstep.errors import TerminalError
        from lockstep.ops import table_upkeep

        quiet_clients()
        params = context["params"]
        specs = {name: s for name, s in self._specs().items() if s.sink.iceberg is not None}
        chosen = sorted(specs) if params["pipeline"] == EVERY_TABLE else [str(params["pipeline"])]
        unknown = [name for name in chosen if name not in specs]
        if unknown:
            raise AirflowFailException(f"lockstep iceberg upkeep: no pipeline {unknown[0]!r} with sink.iceberg in "
                                       f"{self.pipelines_dir}; known: {', '.join(sorted(specs)) or 'none'}")
        try:
            expire_s = table_upkeep.parse_age(params["expire_older_than"], "expire_older_than")
            orphans_s = table_upkeep.parse_age(params["orphans_older_than"], "orphans_older_than")
        except TerminalError as exc:
            raise AirflowFailException(f"lockstep iceberg upkeep: {exc}; nothing was done: trigger the DAG again with "
                                       "that param fixed") from exc
        by = f"Airflow lockstep_iceberg_upkeep run {context['run_id']}"
        done: dict[str, Any] = {}
        failed: dict[str, Exception] = {}
        for name in chosen:
            try:
                done[name] = [u.to_json() for u in table_upkeep.upkeep(
                    specs[name], int(params["keep"]), expire_s, orphans_s, bool(params["dry_run"]), by=by,
                    report=lambda line: log.info("%s", line))]
            except Exception as exc:  # noqa: BLE001 - one table's failure must not keep the others from their upkeep
                failed[name] = exc
                log.error("%s", redact(f"lockstep {name} iceberg upkeep failed: {' '.join(str(exc).split())}"))
        if not failed:
            return done
        causes = "; ".join(f"{name}: {' '.join(str(exc).split())}" for name, exc in failed.items())
        line = redact(f"lockstep iceberg upkeep failed for {len(failed)} of {len(chosen)} table(s): {causes}. Nothing "
                      "a reader or a checkpoint in flight needs was removed (each action commits whole or not at "
                      "all); the others' upkeep is done. Fix the cause, then clear this task or wait for the next run")
        raise (AirflowFailException(line) if all(isinstance(e, TerminalError) for e in failed.values())
               else AirflowException(line))
