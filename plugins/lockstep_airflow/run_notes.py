"""A DAG run's note: which checkpoint the run took, from where, and how it ended.

Pure text from what the tasks left in XCom (the plan's and the commit's return values, and the
failure summary a failed task pushes under ``FAILURE_KEY``). The note is Markdown, as Airflow
renders it, and links to the checkpoint on the Checkpoints page; the page links back to the run.
``listener.py`` writes it when the run ends.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lockstep_airflow.links import checkpoint_url

#: XCom key under which a failed Lockstep task leaves its one-line summary.
FAILURE_KEY = "lockstep_failure"
#: Airflow keeps notes up to 1,000 characters.
MAX_NOTE = 1000
#: Every note Lockstep writes starts with this, so a note a user wrote is never overwritten.
MARK = "lockstep · "
MAX_RANGES_SHOWN = 4


def origin(plan: Mapping[str, Any]) -> str:
    """Where the checkpoint starts, in words: "from checkpoint 41", "restored from savepoint x"."""
    source = str(plan.get("start_source") or "")
    restored = plan.get("restored_from")
    if restored:
        kind, _, value = restored.partition(":")
        target = {"checkpoint": f"checkpoint {value}", "time": f"time {value}"}.get(kind, f"savepoint {restored}")
        return f"restored from {target}"
    kind, _, value = source.partition(":")
    if kind == "checkpoint":
        return f"from checkpoint {value}"
    if kind == "savepoint":
        return f"from savepoint {value}"
    if kind == "group":
        return "from the consumer group's offsets"
    if source in ("earliest", "latest"):
        return f"from the {source} offsets (auto.offset.reset: no checkpoint or group offsets yet)"
    return f"from {source}" if source else ""


def _records(n: Any) -> str:
    n = int(n or 0)
    return f"{n:,} record" + ("" if n == 1 else "s")


def failure_text(summary: str, pipeline: str) -> str:
    """A task's summary without the parts the note already says ("lockstep <pipeline> ", "checkpoint N: ")."""
    text = summary.removeprefix(f"lockstep {pipeline} ")
    return re.sub(r"^(\w+ failed: )checkpoint \d+: ", r"\1", text)


def _clip(note: str) -> str:
    return note if len(note) <= MAX_NOTE else note[: MAX_NOTE - 1] + "…"


def run_note(pipeline: str, state: str, plan: Mapping[str, Any] | None, commit: Mapping[str, Any] | None,
             failure: str | None) -> str | None:
    """The note for a finished DAG run of ``pipeline``; None when there is nothing to say."""
    if plan is None or "checkpoint_id" not in plan:
        if failure:
            return _clip(f"{MARK}no checkpoint claimed · {failure_text(failure, pipeline)}")
        return None
    checkpoint_id = int(plan["checkpoint_id"])
    records, where = _records(plan.get("records")), origin(plan)
    if plan.get("dry_run"):
        ranges = list(plan.get("ranges") or [])
        shown = ", ".join(f"`{r}`" for r in ranges[:MAX_RANGES_SHOWN])
        more = f" and {len(ranges) - MAX_RANGES_SHOWN} more" if len(ranges) > MAX_RANGES_SHOWN else ""
        taken = f": {shown}{more}" if ranges else " (no new records)"
        restore = plan.get("restore") or {}
        again = (f"; the restore writes {int(restore.get('re_emitted') or 0):,} records a second time in all"
                 if plan.get("restored_from") and restore else "")
        return _clip(f"{MARK}dry run: checkpoint {checkpoint_id} would take {records} {where}{taken}{again}; "
                     "nothing was claimed")
    head = f"{MARK}[checkpoint {checkpoint_id}]({checkpoint_url(pipeline, checkpoint_id)}): {records} {where}"
    if failure:
        return _clip(f"{head} · {failure_text(failure, pipeline)}")
    if state == "success":
        if commit:
            return _clip(f"{head} · completed: {int(commit.get('records_out') or 0):,} written, "
                         f"{int(commit.get('dead_lettered') or 0):,} dead-lettered")
        return _clip(f"{head} · completed" + (", nothing new to write" if not plan.get("records") else ""))
    return _clip(f"{head} · {state}")


def may_replace(current: str | None) -> bool:
    """A run's note is Lockstep's to write when it is empty or Lockstep wrote it."""
    return not current or current.startswith(MARK)
