"""Writes each Lockstep DAG run's note when the run ends, and sends a failed run's alert (an Airflow
listener, in the scheduler).

A task cannot set its own run's note in Airflow 3.3 (the Task SDK has no call for it), so the
scheduler does it: when a run succeeds or fails, this reads what the run's tasks left in XCom
and sets the note ``run_notes.run_note`` composes, on the run object the scheduler is about to
commit. Runs of other DAGs, and notes a user wrote, are left alone. A failure here is logged and
never affects the run (Airflow catches listener errors too).

A failed run notifies its spec's ``alerts`` once per failure streak (`lockstep.rules.alert_policy`): the run
that finished before it tells whether the pipeline was already failing. The alert is sent from a thread, so
a slow webhook never holds the scheduler.
"""
from __future__ import annotations

import logging
import re
import threading
from typing import TYPE_CHECKING, Any

from airflow.listeners import hookimpl

from lockstep.rules.alert_policy import Failure, should_notify
from lockstep_airflow.run_notes import FAILURE_KEY, may_replace, run_note

if TYPE_CHECKING:
    from airflow.models.dagrun import DagRun
    from sqlalchemy.orm import Session

    from lockstep.spec import PipelineSpec

log = logging.getLogger(__name__)
#: The pipeline DAGs' task ids (dag_factory): three steps, or the one ``checkpoint`` task (``checkpoints.tasks: one``).
TASKS = ("plan", "run", "commit", "checkpoint")
#: A summary line's checkpoint (`lockstep_airflow.operators._loud`: "lockstep <name> <step> failed: checkpoint N: ...").
_FAILED_ON = re.compile(r" failed: checkpoint (\d+):")


def _xcoms(dag_run: DagRun, session: Session) -> dict[tuple[str, str], Any]:
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    rows = session.scalars(
        select(XComModel).where(XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id,
                                XComModel.task_id.in_(TASKS), XComModel.key.in_(("return_value", FAILURE_KEY))))
    return {(row.task_id, row.key): XComModel.deserialize_value(row) for row in rows}


def _plan_and_commit(values: dict[tuple[str, str], Any]) -> tuple[Any, Any]:
    """The plan's and the commit's XCom: the plan and commit tasks', or the one checkpoint task's (the plan's
    fields once it claimed, the commit's added once it completed)."""
    one = values.get(("checkpoint", "return_value"))
    plan = values.get(("plan", "return_value")) or one
    commit = values.get(("commit", "return_value"))
    if commit is None and isinstance(one, dict) and "status" in one:
        commit = one
    return plan, commit


def note_for(dag_run: DagRun, session: Session) -> str | None:
    values = _xcoms(dag_run, session)
    plan, commit = _plan_and_commit(values)
    failures = [values[(t, FAILURE_KEY)] for t in TASKS if (t, FAILURE_KEY) in values]
    failure = failures[-1] if failures else None
    pipeline = (plan or {}).get("pipeline") or (failure or {}).get("pipeline")
    if not pipeline:
        return None  # not a Lockstep run
    state = getattr(dag_run.state, "value", dag_run.state)
    return run_note(pipeline, str(state), plan if isinstance(plan, dict) else None,
                    commit if isinstance(commit, dict) else None, (failure or {}).get("summary"))


def _write_note(dag_run: DagRun) -> None:
    from sqlalchemy.orm import object_session

    session = object_session(dag_run)
    if session is None:
        return
    try:
        note = note_for(dag_run, session)
        if note is not None and may_replace(dag_run.note):
            dag_run.note = note
    except Exception:
        log.exception("could not write the note of %s %s", dag_run.dag_id, dag_run.run_id)


@hookimpl
def on_dag_run_success(dag_run: DagRun, msg: str) -> None:
    _write_note(dag_run)


@hookimpl
def on_dag_run_failed(dag_run: DagRun, msg: str) -> None:
    _write_note(dag_run)
    _alert(dag_run)


def failure_of(dag_run: DagRun, session: Session) -> Failure | None:
    """What a finished Lockstep run failed on; None if it did not fail, or is not a Lockstep run."""
    state = getattr(dag_run.state, "value", dag_run.state)
    if state != "failed":
        return None
    values = _xcoms(dag_run, session)
    plan, _commit = _plan_and_commit(values)
    plan = plan if isinstance(plan, dict) else {}
    failures = [values[(t, FAILURE_KEY)] for t in TASKS if (t, FAILURE_KEY) in values]
    failure = failures[-1] if failures and isinstance(failures[-1], dict) else {}
    pipeline = plan.get("pipeline") or failure.get("pipeline")
    if not pipeline:
        return None
    checkpoint = plan.get("checkpoint_id")
    if checkpoint is None and (named := _FAILED_ON.search(str(failure.get("summary") or ""))):
        checkpoint = named.group(1)  # a plan that failed recovering it
    summary = failure.get("summary") or (f"lockstep {pipeline}: a task failed without a Lockstep summary (killed, "
                                         "timed out or lost): see its log")
    return Failure(str(pipeline), dag_run.run_id, int(checkpoint) if checkpoint is not None else None, str(summary))


def _previous_run(dag_run: DagRun, session: Session) -> DagRun | None:
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    return session.scalars(
        select(DagRun).where(DagRun.dag_id == dag_run.dag_id, DagRun.run_id != dag_run.run_id,
                             DagRun.state.in_(("success", "failed")), DagRun.start_date < dag_run.start_date)
        .order_by(DagRun.start_date.desc()).limit(1)).first()


def _alert(dag_run: DagRun) -> None:
    from sqlalchemy.orm import object_session

    session = object_session(dag_run)
    if session is None:
        return
    try:
        failure = failure_of(dag_run, session)
        if failure is None:
            return
        previous = _previous_run(dag_run, session)
        if not should_notify(failure, failure_of(previous, session) if previous is not None else None):
            log.info("%s: run %s failed too; the alert went out when the pipeline first failed", failure.pipeline,
                     failure.run_id)
            return
        from lockstep.paths import pipelines_dir
        from lockstep.spec import load_each

        spec = next((s for s in load_each(pipelines_dir())[0] if s.name == failure.pipeline), None)
        if spec is None or spec.alerts is None:
            return
        threading.Thread(target=_send, args=(spec, failure), name=f"lockstep-alert-{spec.name}", daemon=True).start()
    except Exception:
        log.exception("could not alert about %s %s", dag_run.dag_id, dag_run.run_id)


def _send(spec: PipelineSpec, failure: Failure) -> None:
    from airflow.configuration import conf

    from lockstep.ops.alerts import notify
    from lockstep_airflow.links import checkpoint_url, pipeline_url

    base = conf.get("api", "base_url", fallback="").rstrip("/")
    link = (checkpoint_url(spec.name, failure.checkpoint_id, base) if failure.checkpoint_id is not None
            else pipeline_url(spec.name, base))
    sent = notify(spec, failure, link)
    if sent:
        log.info("%s: alert about %s sent: %s", spec.name, failure.run_id, "; ".join(sent))
