"""The trigger form of a pipeline DAG: its params, and the restore points it proposes.

``restore_from`` proposes the pipeline's savepoints, read from the checkpoint store when the DAG file is
parsed (free text is still accepted: a savepoint made since the last parse works, and so does
``checkpoint:ID`` for any completed checkpoint the Checkpoints page lists). Reading them must never make
parsing fail or hang: the store is read with a client that gives up in seconds, and any failure leaves the
proposals empty.

Completed checkpoints are not proposed: the form is part of the serialized DAG, and Airflow writes a new
DAG version whenever that changes after a run used the last one. Proposing the newest checkpoints made a
running pipeline a new DAG version at every parse (every 10 s on the local platform), each a row the
dag-processor wrote and the scheduler loaded again. Savepoints change only when someone makes or deletes one.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import Param

if TYPE_CHECKING:
    from lockstep.model.savepoint import Savepoint
    from lockstep.spec import PipelineSpec

log = logging.getLogger(__name__)
RESTORE_PATTERN = r"^(checkpoint:[0-9]+|time:[0-9][0-9T:.+Z-]{9,40}|[A-Za-z0-9][A-Za-z0-9._-]{0,99})$"
#: What each param takes, in words: the refusal of a bad value quotes it (``param_errors``).
EXPECTED = {
    "restore_from": "a savepoint name (letters, digits, '.', '_', '-', no '/', at most 100 characters), "
                    "checkpoint:ID or time:<ISO time with a zone, like 2026-11-20T10:00:00Z>, or nothing to "
                    "continue from the latest completed checkpoint",
    "max_records": "a whole number of records, 1 or more, or nothing for the spec's budget",
    "dry_run": "true or false",
    "pipeline": "the name of a pipeline spec",
    "action": "create or delete",
    "name": "a savepoint name: letters, digits, '.', '_', '-', no '/', at most 100 characters",
    "checkpoint_id": "the id of a completed checkpoint, or nothing for the latest",
}
#: Seconds an S3 call may take while a DAG file is parsed.
PARSE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class RestorePoint:
    value: str    # what restore_from takes: a savepoint name
    label: str    # what the form shows


def _when(iso: str | None) -> str:
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M %Z").strip() if iso else ""
    except ValueError:
        return iso or ""


def restore_points(savepoints: Iterable[Savepoint]) -> list[RestorePoint]:
    """The savepoints, newest first, as form choices named by their checkpoint and time."""
    return [RestorePoint(s.name, f"savepoint {s.name} (checkpoint {s.checkpoint_id}, {_when(s.created_at)})")
            for s in sorted(savepoints, key=lambda s: s.created_at, reverse=True)]


def read_restore_points(spec: PipelineSpec, s3_clients: MutableMapping[str, Any] | None = None) -> list[RestorePoint]:
    """The restore points of ``spec``'s store, or none when the store cannot be read right now.
    ``s3_clients``: the parse's S3 clients by connection id, shared by its pipelines (``checkpoint_store``).

    Only the DAG processor's parse feeds the trigger form: a worker parsing the file to run one
    task (Airflow's parsing context names the DAG) skips the S3 reads, so a task's start-up does
    not pay them for every pipeline in the file."""
    from airflow.sdk import get_parsing_context

    from lockstep.steps.client_factory import checkpoint_store

    if get_parsing_context().dag_id is not None:
        return []
    try:
        store = checkpoint_store(spec, timeout_s=PARSE_TIMEOUT_S, clients=s3_clients)
        return restore_points(store.list_savepoints())
    except Exception as exc:  # noqa: BLE001 - parsing a DAG file must not fail on the store
        log.warning("%s: restore points not readable while parsing (%s); restore_from proposes none",
                    spec.name, " ".join(str(exc).split())[:300])
        return []


def pipeline_params(points: list[RestorePoint] | None = None) -> dict[str, Param]:
    points = points or []
    restore_extra: dict[str, Any] = {}
    if points:
        restore_extra = {"examples": [p.value for p in points],
                         "values_display": {p.value: p.label for p in points}}
    return {
        "restore_from": Param(
            None, type=["null", "string"], pattern=RESTORE_PATTERN, title="Restore from",
            description="Start this checkpoint from a savepoint (its name), a completed checkpoint "
                        "(checkpoint:ID, an id the Checkpoints page lists) or a time (time:2026-11-20T10:00:00Z: "
                        "each partition's first record at or after it) instead of the latest completed "
                        "checkpoint; records after it are re-emitted. Pick a savepoint from the proposals or "
                        "type a name: letters, digits, '.', '_', '-' (no '/'), at most 100 characters.",
            **restore_extra,
        ),
        "max_records": Param(
            None, type=["null", "integer"], minimum=1, title="Record budget",
            description="Override the spec's per-checkpoint record budget for this run: a whole number, "
                        "1 or more (0 is refused, not changed). Empty: the spec's budget.",
        ),
        "dry_run": Param(
            False, type=["boolean", "null"], title="Plan only (dry run)",
            description="Show the offset ranges this checkpoint would take, in the plan's log, XCom and "
                        "the run's note; claims and commits nothing.",
        ),
    }
