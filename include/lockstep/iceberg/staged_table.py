"""The Iceberg sink's committable: the snapshot a checkpoint's run staged on a branch of its table.

The run writes the checkpoint's table rows as data files and stages one snapshot that adds them on the
branch `branch_name` names, beside the table's main branch, before prepared.json names it. Nothing of it is
visible on main until the commit publishes it: one snapshot on main that adds the same files and carries the
pipeline's and the checkpoint's names in its summary (`SUMMARY_PIPELINE`, `SUMMARY_CHECKPOINT`), which is how
recovery asks the table whether a checkpoint was published already. A repair leaves out the files of the lost
transactions' source partitions, which the next checkpoint writes again (``sources``).
"""
from __future__ import annotations

__all__ = [
    "BRANCH_PREFIX", "PROVENANCE_COLUMNS", "SUMMARY_CHECKPOINT", "SUMMARY_PIPELINE", "StagedTable", "TableFile", "branch_name",
]

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from lockstep.errors import MetadataError

T = TypeVar("T")

#: The columns a row's provenance adds, after the transform's: where its record came from, and the checkpoint
#: that wrote it.
PROVENANCE_COLUMNS = ("lockstep_source_topic", "lockstep_source_partition", "lockstep_source_offset",
                      "lockstep_checkpoint")
#: Every staged branch's name starts so: ``lockstep-<pipeline>-<checkpoint>``.
BRANCH_PREFIX = "lockstep-"
#: The summary properties of a staged and of a published snapshot.
SUMMARY_PIPELINE, SUMMARY_CHECKPOINT = "lockstep.pipeline", "lockstep.checkpoint"


def branch_name(pipeline: str, checkpoint_id: int) -> str:
    """The branch a checkpoint's snapshot is staged on."""
    return f"{BRANCH_PREFIX}{pipeline}-{checkpoint_id}"


@dataclass(frozen=True)
class TableFile:
    """One data file the run wrote: its path, its rows, and the source partitions (``topic:partition``) its rows
    came from."""

    path: str
    records: int
    sources: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "records": self.records, "sources": list(self.sources)}

    @classmethod
    def from_json(cls, doc: object, key: str) -> TableFile:
        return _read(key, "iceberg.files[]", doc, lambda d: cls(
            str(d["path"]), int(d["records"]), tuple(str(s) for s in d["sources"])))


@dataclass(frozen=True)
class StagedTable:
    """``table`` (``namespace.name``) in the catalog of connection ``catalog_conn_id``: the snapshot staged on
    ``branch`` (None: the checkpoint had no rows for the table, nothing staged) and its files."""

    catalog_conn_id: str
    table: str
    branch: str
    snapshot_id: int | None
    files: tuple[TableFile, ...] = ()

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    def without_sources(self, lost: frozenset[str]) -> tuple[TableFile, ...]:
        """The files to publish when the rows of source partitions ``lost`` go back to the next checkpoint."""
        return tuple(f for f in self.files if not lost.intersection(f.sources))

    def to_json(self) -> dict[str, object]:
        return {"catalog_conn_id": self.catalog_conn_id, "table": self.table, "branch": self.branch,
                "snapshot_id": self.snapshot_id, "files": [f.to_json() for f in self.files]}

    @classmethod
    def from_json(cls, doc: object, key: str) -> StagedTable:
        return _read(key, "iceberg", doc, lambda d: cls(
            str(d["catalog_conn_id"]), str(d["table"]), str(d["branch"]),
            None if d["snapshot_id"] is None else int(d["snapshot_id"]),
            tuple(TableFile.from_json(f, key) for f in d["files"])))


def _read(key: str, path: str, doc: object, make: Callable[[Any], T]) -> T:
    """``make(doc)``, or a MetadataError naming the document and the field."""
    if not isinstance(doc, dict):
        raise MetadataError(key, f"field {path!r} must be a JSON object")
    try:
        return make(doc)
    except MetadataError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise MetadataError(key, f"field {path!r} is invalid: {exc!r}") from exc
