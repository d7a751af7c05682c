"""Savepoints: named, retained copies of a completed checkpoint's restore point (its end offsets, the
topic ids they belong to, its keyed state and tables), to restore from: a replay, a backfill, a copy into
another pipeline. Kept after retention deletes the checkpoint itself, so a savepoint is its own document,
written by ``lockstep savepoint create`` and the savepoint DAG, read when a run restores from it.

What it copies, its checkpoint's restore point, is defined here once (`RestorePoint`) for both documents:
the completed checkpoint (`lockstep.model.checkpoint.CompletedCheckpoint`) records it, the savepoint stores
it again, and both read it back the same way.
"""

from __future__ import annotations

__all__ = [
    "SAVEPOINT_SCHEMA", "RestorePoint", "RestorePointFields", "Savepoint", "validate_savepoint_name",
]

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from lockstep.errors import TerminalError
from lockstep.model.documents import Reader, build
from lockstep.model.offsets import OffsetRange
from lockstep.model.state_manifest import StateManifest, optional_manifest
from lockstep.tables.pins import TableVersion, tables_from_json, tables_to_json

SAVEPOINT_SCHEMA = "lockstep.savepoint/1"

SAVEPOINT_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def validate_savepoint_name(name: str) -> str:
    """Savepoint names become S3 key segments, so they must not escape their folder."""
    if not isinstance(name, str) or not SAVEPOINT_NAME_RE.fullmatch(name) or ".." in name:
        raise TerminalError(
            f"invalid savepoint name {name!r}: use 1-100 characters of letters, digits, '.', '_' "
            "and '-', starting with a letter or digit, without '/' or '..'"
        )
    return name


class RestorePointFields(TypedDict):
    """A restore point's fields as read from a document, to pass on to its class."""

    end_offsets: dict[str, int]
    topic_ids: dict[str, str]
    state: StateManifest | None
    tables: dict[str, TableVersion]


class RestorePoint:
    """Where the next checkpoint starts after a completed one: its end offsets, the source topics' ids they
    belong to, the keyed state and the tables it committed. A completed checkpoint records it and a
    savepoint copies it (`Savepoint`), to restore from: its JSON is defined here once for both, so a
    savepoint reads back exactly what its checkpoint recorded, and a field added to one is added to the
    other."""

    end_offsets: Mapping[str, int]
    topic_ids: Mapping[str, str]
    state: StateManifest | None
    tables: Mapping[str, TableVersion]

    def restore_point_json(self, doc: dict[str, object], between: Mapping[str, object] | None = None
                           ) -> dict[str, object]:
        """``doc`` (the document's own fields, ``end_offsets`` among them) and the restore point's optional
        ones after them, each left out when empty, as documents of earlier versions have it; ``between``:
        fields of the document's own that it has always had between its topic ids and its state (a
        completed checkpoint's repair)."""
        if self.topic_ids:
            doc["topic_ids"] = dict(self.topic_ids)
        doc.update(between or {})
        if self.state is not None:
            doc["state"] = self.state.to_json()
        if self.tables:
            doc["tables"] = tables_to_json(self.tables)
        return doc

    @staticmethod
    def restore_point_fields(r: Reader) -> RestorePointFields:
        """The restore point's fields of the document ``r`` reads; those added after the first versions
        (topic ids, state, tables) read as empty when absent."""
        return RestorePointFields(end_offsets=r.offsets("end_offsets"), topic_ids=r.topic_ids("topic_ids"),
                                  state=optional_manifest(r.doc, r.key), tables=tables_from_json(r.doc, r.key))


@dataclass(frozen=True)
class Savepoint(RestorePoint):
    """A named, retained copy of a completed checkpoint's offsets, to restore (replay/backfill) from."""

    name: str
    pipeline: str
    checkpoint_id: int
    created_at: str
    end_offsets: Mapping[str, int]
    ranges: tuple[OffsetRange, ...]
    #: The source topics' ids its offsets belong to (from its checkpoint's claim; empty in savepoints of
    #: earlier versions, which are then not judged).
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    #: The keyed state of its checkpoint (stateful pipelines): a restore starts from it
    state: StateManifest | None = None
    #: The tables of its checkpoint: a restore starts from them
    tables: Mapping[str, TableVersion] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_savepoint_name(self.name)

    def to_json(self) -> dict[str, object]:
        return self.restore_point_json({
            "schema": SAVEPOINT_SCHEMA, "name": self.name, "pipeline": self.pipeline,
            "checkpoint_id": self.checkpoint_id, "created_at": self.created_at,
            "end_offsets": dict(self.end_offsets), "ranges": [r.to_json() for r in self.ranges],
        })

    @classmethod
    def from_json(cls, doc: object, key: str = "<savepoint>") -> Savepoint:
        r = Reader(doc, key, SAVEPOINT_SCHEMA)
        return build(key, lambda: cls(
            name=r.get("name", str), pipeline=r.get("pipeline", str), checkpoint_id=r.get("checkpoint_id", int),
            created_at=r.get("created_at", str), ranges=r.ranges("ranges"), **cls.restore_point_fields(r),
        ))
