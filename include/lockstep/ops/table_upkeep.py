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
removed and their bytes.
"""
from __future__ import annotations

__all__ = ["Upkeep", "compact", "expire", "remove_orphans"]

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

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


def _table(spec: PipelineSpec) -> IcebergTable:
    from lockstep.iceberg.table_sink import IcebergTable

    if spec.sink.iceberg is None:
        raise TerminalError(f"{spec.path}: pipeline {spec.name} has no sink.iceberg: there is no table to look after")
    return IcebergTable(spec.sink.iceberg.catalog_conn_id, spec.sink.iceberg.table)


def _latest_completed(spec: PipelineSpec) -> int | None:
    from lockstep.steps.client_factory import checkpoint_store

    latest = checkpoint_store(spec).latest_completed()
    return latest.checkpoint_id if latest is not None else None


def compact(spec: PipelineSpec, keep: int = 10) -> Upkeep:
    """The rows of every completed checkpoint but the newest ``keep`` rewritten into fewer files."""
    table = _table(spec)
    latest = _latest_completed(spec)
    before = (latest + 1 - keep) if latest is not None else 0
    files = table.data_files()
    if before <= 1:
        return Upkeep(table.name, "compact", files, files, 0, max(before, 0))
    _, _, rows = table.compact(before)
    return Upkeep(table.name, "compact", files, table.data_files(), rows, before)


def expire(spec: PipelineSpec, older_than_s: float) -> Upkeep:
    """Snapshots older than ``older_than_s`` seconds expired, but those of checkpoints not completed yet."""
    table = _table(spec)
    expired = table.expire(int((time.time() - older_than_s) * 1000), spec.name, _latest_completed(spec))
    files = table.data_files()
    return Upkeep(table.name, "expire", files, files, snapshots_expired=expired)


def remove_orphans(spec: PipelineSpec, older_than_s: float, dry_run: bool = False) -> Upkeep:
    """The table's orphan files older than ``older_than_s`` seconds deleted (``dry_run``: only counted), never one
    in the folder of a checkpoint of this pipeline that is not completed or aborted yet."""
    from lockstep.model.checkpoint import CheckpointStatus
    from lockstep.steps.client_factory import checkpoint_store

    table = _table(spec)
    store = checkpoint_store(spec)
    settled = (CheckpointStatus.COMPLETED, CheckpointStatus.ABORTED)
    in_flight = [v.checkpoint_id for v in store.views_after(None) if v.status not in settled]
    found = table.orphans(int((time.time() - older_than_s) * 1000), spec.name, in_flight)
    if not dry_run:
        table.remove(found)
    files = table.data_files()
    return Upkeep(table.name, "orphans", files, files, orphans=len(found), orphan_bytes=sum(o.size for o in found),
                  dry_run=dry_run)
