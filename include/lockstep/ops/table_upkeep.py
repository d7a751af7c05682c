"""``lockstep iceberg compact | expire | orphans``: the upkeep of a pipeline's Iceberg table (``sink.iceberg``).

Each checkpoint adds a data file per source partition it read, so a pipeline that checkpoints every minute makes
thousands of small files a day. ``compact`` rewrites the rows of older checkpoints into as few files as the table's
target size allows, in one overwrite snapshot (the same rows; readers see no change). It leaves the newest
checkpoints alone (``keep``), so it never races the commit of a checkpoint in flight for the same files.
``expire`` removes old snapshots (and the files only they read) but never the snapshot of a checkpoint that is
not completed yet: its commit, run again, looks for it in main's history (docs/iceberg.md). ``orphans`` deletes
the data files no snapshot reads (of run attempts that died before staging, of aborted checkpoints, of expired
snapshots), older than an age and never in the folder of a checkpoint still in flight.

The figures are what the command prints (and ``--json``): files before and after, rows, snapshots expired, orphans
removed and their bytes. Each action's latest figures are also kept in the pipeline's store (a note,
`CheckpointStore.record_note`), with when, how long and who ran it, for the Checkpoints page. `upkeep` runs the
three in order: the ``lockstep_iceberg_upkeep`` DAG's task, and ``lockstep iceberg upkeep``.
"""
from __future__ import annotations

__all__ = ["Upkeep", "compact", "expire", "parse_age", "remove_orphans", "upkeep"]

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lockstep.errors import TerminalError
from lockstep.spec import PipelineSpec

if TYPE_CHECKING:
    from lockstep.iceberg.table_sink import IcebergTable


@dataclass(frozen=True)
class Upkeep:
    """What one upkeep command did to the table."""

    table: str
    action: str
    files_before: int
    files_after: int
    rows: int = 0
    before_checkpoint: int | None = None
    snapshots_expired: int = 0
    orphans: int = 0
    orphan_bytes: int = 0
    dry_run: bool = False

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def line(self) -> str:
        if self.action == "orphans":
            did = "would remove" if self.dry_run else "removed"
            return (f"{self.table}: {did} {self.orphans} orphan files ({self.orphan_bytes / 1e6:,.1f} MB); main reads "
                    f"{self.files_after} data files")
        if self.action == "expire":
            return (f"{self.table}: expired {self.snapshots_expired} snapshots; main reads {self.files_after} data "
                    "files")
        if self.rows == 0:
            return (f"{self.table}: nothing to compact before checkpoint {self.before_checkpoint} (main reads "
                    f"{self.files_before} data files)")
        return (f"{self.table}: compacted the {self.rows:,} rows of the checkpoints before {self.before_checkpoint}; "
                f"main reads {self.files_after} data files, was {self.files_before}")


log = logging.getLogger(__name__)

_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(raw: str | float, option: str = "--older-than") -> float:
    """An age in seconds from ``7d``, ``12h``, ``30m``, ``90s`` or a number of seconds; refused naming ``option``."""
    text = str(raw).strip()
    try:
        seconds = float(text[:-1]) * _AGE_UNITS[text[-1]] if text and text[-1] in _AGE_UNITS else float(text)
    except ValueError:
        raise TerminalError(f"{option} {text!r}: seconds, or a number with s, m, h or d (7d)") from None
    if seconds < 0:
        raise TerminalError(f"{option} {text!r}: an age cannot be negative")
    return seconds


def _recorded(spec: PipelineSpec, done: Upkeep, started: float, by: str) -> Upkeep:
    """Keep ``done`` as its action's latest figures in the pipeline's store (`CheckpointStore.record_note`),
    beside the other actions' latest: informational, for the Checkpoints page."""
    from lockstep.steps.client_factory import checkpoint_store
    from lockstep.store.checkpoint_store import TABLE_UPKEEP

    try:
        store = checkpoint_store(spec)
        last: dict[str, Any] = dict(store.note(TABLE_UPKEEP) or {})
        last[done.action] = {**done.to_json(), "line": done.line(), "by": by,
                             "at": datetime.now(UTC).isoformat(timespec="seconds"),
                             "seconds": round(time.monotonic() - started, 1)}
        store.record_note(TABLE_UPKEEP, last)
    except Exception as exc:  # noqa: BLE001 - the table's upkeep is done; only the page's figures are missing
        log.warning("%s: %s done, but its figures could not be kept for the Checkpoints page: %s", spec.name,
                    done.action, exc)
    return done


def upkeep(spec: PipelineSpec, keep: int = 10, expire_older_than_s: float = 7 * 86400,
           orphans_older_than_s: float = 3 * 86400, dry_run: bool = False, by: str = "lockstep iceberg upkeep",
           report: Callable[[str], object] | None = None) -> list[Upkeep]:
    """`compact`, `expire`, then `remove_orphans` (``dry_run``: orphans only counted), in that order: expiry
    drops the snapshots compaction replaced, and the files only those read become orphans once old enough.
    ``report``: called with each action's line as it is done (the task log)."""
    steps: tuple[Callable[[], Upkeep], ...] = (
        lambda: compact(spec, keep, by=by), lambda: expire(spec, expire_older_than_s, by=by),
        lambda: remove_orphans(spec, orphans_older_than_s, dry_run, by=by))
    done: list[Upkeep] = []
    for step in steps:
        done.append(step())
        if report is not None:
            report(done[-1].line())
    return done


def _table(spec: PipelineSpec) -> IcebergTable:
    from lockstep.iceberg.table_sink import IcebergTable

    if spec.sink.iceberg is None:
        raise TerminalError(f"{spec.path}: pipeline {spec.name} has no sink.iceberg: there is no table to look after")
    return IcebergTable(spec.sink.iceberg.catalog_conn_id, spec.sink.iceberg.table)


def _latest_completed(spec: PipelineSpec) -> int | None:
    from lockstep.steps.client_factory import checkpoint_store

    latest = checkpoint_store(spec).latest_completed()
    return latest.checkpoint_id if latest is not None else None


def _writers(spec: PipelineSpec) -> list[PipelineSpec]:
    """The pipelines that write ``spec``'s table: the pipeline, and the one its dead-letter replays run as (each
    with its own checkpoints, named so in the table's snapshots and data folders)."""
    from lockstep.spark.dead_letter_replay import replay_spec

    return [spec, replay_spec(spec)]


def compact(spec: PipelineSpec, keep: int = 10, by: str = "lockstep iceberg compact") -> Upkeep:
    """The rows of every completed checkpoint but the newest ``keep`` rewritten into fewer files."""
    if keep < 1:
        raise TerminalError(f"keep {keep}: keep at least the newest checkpoint's files")
    started = time.monotonic()
    table = _table(spec)
    latest = _latest_completed(spec)
    before = (latest + 1 - keep) if latest is not None else 0
    files = table.data_files()
    if before <= 1:
        return _recorded(spec, Upkeep(table.name, "compact", files, files, 0, max(before, 0)), started, by)
    _, _, rows = table.compact(before)
    return _recorded(spec, Upkeep(table.name, "compact", files, table.data_files(), rows, before), started, by)


def expire(spec: PipelineSpec, older_than_s: float, by: str = "lockstep iceberg expire") -> Upkeep:
    """Snapshots older than ``older_than_s`` seconds expired, but those of checkpoints not completed yet (the
    pipeline's and its dead-letter replays')."""
    started = time.monotonic()
    table = _table(spec)
    expired = table.expire(int((time.time() - older_than_s) * 1000),
                           {w.name: _latest_completed(w) for w in _writers(spec)})
    files = table.data_files()
    return _recorded(spec, Upkeep(table.name, "expire", files, files, snapshots_expired=expired), started, by)


def remove_orphans(spec: PipelineSpec, older_than_s: float, dry_run: bool = False,
                   by: str = "lockstep iceberg orphans") -> Upkeep:
    """The table's orphan files older than ``older_than_s`` seconds deleted (``dry_run``: only counted), never one
    in the folder of a checkpoint of this pipeline (or of its dead-letter replays) not completed or aborted yet."""
    from lockstep.model.checkpoint import CheckpointStatus
    from lockstep.steps.client_factory import checkpoint_store

    started = time.monotonic()
    table = _table(spec)
    settled = (CheckpointStatus.COMPLETED, CheckpointStatus.ABORTED)
    in_flight = {w.name: [v.checkpoint_id for v in checkpoint_store(w).views_after(None) if v.status not in settled]
                 for w in _writers(spec)}
    found = table.orphans(int((time.time() - older_than_s) * 1000), in_flight)
    if not dry_run:
        table.remove(found)
    files = table.data_files()
    return _recorded(spec, Upkeep(table.name, "orphans", files, files, orphans=len(found),
                                  orphan_bytes=sum(o.size for o in found), dry_run=dry_run), started, by)
