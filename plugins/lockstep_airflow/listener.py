"""Writes each Lockstep DAG run's note when the run ends (an Airflow listener, in the scheduler).

A task cannot set its own run's note in Airflow 3.3 (the Task SDK has no call for it), so the
scheduler does it: when a run succeeds or fails, this reads what the run's tasks left in XCom
and sets the note ``run_notes.run_note`` composes, on the run object the scheduler is about to
commit. Runs of other DAGs, and notes a user wrote, are left alone. A failure here is logged and
never affects the run (Airflow catches listener errors too).
"""
from __future__ import annotations

import logging
from typing import Any

from airflow.listeners import hookimpl

from lockstep_airflow.run_notes import FAILURE_KEY, may_replace, run_note

log = logging.getLogger(__name__)
TASKS = ("plan", "run", "commit")


def _xcoms(dag_run: Any, session: Any) -> dict[tuple[str, str], Any]:
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    rows = session.scalars(
        select(XComModel).where(XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id,
                                XComModel.task_id.in_(TASKS), XComModel.key.in_(("return_value", FAILURE_KEY))))
    return {(row.task_id, row.key): XComModel.deserialize_value(row) for row in rows}


def note_for(dag_run: Any, session: Any) -> str | None:
    values = _xcoms(dag_run, session)
    plan = values.get(("plan", "return_value"))
    commit = values.get(("commit", "return_value"))
    failures = [values[(t, FAILURE_KEY)] for t in TASKS if (t, FAILURE_KEY) in values]
    failure = failures[-1] if failures else None
    pipeline = (plan or {}).get("pipeline") or (failure or {}).get("pipeline")
    if not pipeline:
        return None  # not a Lockstep run
    state = getattr(dag_run.state, "value", dag_run.state)
    return run_note(pipeline, str(state), plan if isinstance(plan, dict) else None,
                    commit if isinstance(commit, dict) else None, (failure or {}).get("summary"))


def _write_note(dag_run: Any) -> None:
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
def on_dag_run_success(dag_run: Any, msg: str) -> None:
    _write_note(dag_run)


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    _write_note(dag_run)
