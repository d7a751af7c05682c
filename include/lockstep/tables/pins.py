"""A pipeline's tables as checkpoints record them: which version of each table a checkpoint joined
against (pure data, no I/O).

A table is the latest value per key of a (compacted) Kafka topic, materialized by Lockstep
(`lockstep.tables.materialize`, docs/joins.md). Each checkpoint's claim pins, per table, the version it
starts from (``base``: the completed checkpoint's, or the savepoint's, its source offsets come from)
and the offsets of the table's topic it reads on top (``ranges``, up to the topic's last stable
offsets when planned). The run writes the new version's files (Parquet, in the state folder:
``state/<checkpoint>/table-<name>[.delta].parquet``) before ``prepared.json``, which names them; the
completed checkpoint's ``tables`` *are* the pipeline's tables. Kafka may compact or delete the topic's
old records since; a retry, a repair's recomputation and ``lockstep verify`` still join against
exactly the version the checkpoint pinned, because it is read from these files, never from the topic
again.
"""
from __future__ import annotations

__all__ = [
    "TablePin", "TableVersion", "tables_from_json", "tables_to_json", "pins_from_json", "pins_to_json",
]

from collections.abc import Mapping
from dataclasses import dataclass, field

from lockstep.errors import MetadataError
from lockstep.model.offsets import OffsetRange

TABLE_SCHEMA = "lockstep.table/1"


@dataclass(frozen=True)
class TableVersion:
    """One table as a checkpoint left it: its files (a base, then deltas) and how far into its topic
    they go."""

    name: str
    topic: str
    #: the checkpoint that wrote the newest file (a checkpoint that read no table records carries its base's)
    written_by: int
    #: partition -> the next offset of the topic to read (everything before it is in the files)
    ends: Mapping[int, int]
    #: S3 keys (bucket-relative) of its Parquet files, base first; each file's digest, in the same order
    files: tuple[str, ...] = ()
    digests: tuple[str, ...] = ()
    file_bytes: tuple[int, ...] = ()
    #: the keys the table holds (tombstoned keys gone)
    keys: int = 0

    @property
    def bytes(self) -> int:
        return sum(self.file_bytes)

    def to_json(self) -> dict[str, object]:
        return {"schema": TABLE_SCHEMA, "name": self.name, "topic": self.topic, "written_by": self.written_by,
                "ends": {str(p): o for p, o in sorted(self.ends.items())}, "files": list(self.files),
                "digests": list(self.digests), "file_bytes": list(self.file_bytes), "keys": self.keys}

    @classmethod
    def from_json(cls, doc: object, key: str, path: str) -> TableVersion:
        if not isinstance(doc, Mapping) or doc.get("schema") != TABLE_SCHEMA:
            raise MetadataError(key, f"field '{path}' is not a table version ({TABLE_SCHEMA})")
        try:
            version = cls(
                name=str(doc["name"]), topic=str(doc["topic"]), written_by=int(doc["written_by"]),
                ends={int(p): int(o) for p, o in dict(doc["ends"]).items()},
                files=tuple(str(f) for f in doc.get("files") or ()),
                digests=tuple(str(d) for d in doc.get("digests") or ()),
                file_bytes=tuple(int(b) for b in doc.get("file_bytes") or ()),
                keys=int(doc.get("keys", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MetadataError(key, f"field '{path}' is invalid: {exc!r}") from exc
        if version.digests and len(version.digests) != len(version.files):
            raise MetadataError(key, f"field '{path}' names {len(version.files)} files and "
                                     f"{len(version.digests)} digests")
        return version


@dataclass(frozen=True)
class TablePin:
    """What a claim pins of one table: the version it starts from (None: the table's first version,
    read from the topic's start) and the offsets it reads on top, per partition ``[start, end)``.

    ``skipped``: per partition, the offsets retention deleted between where ``base`` ends and the log
    start, skipped by ``checkpoints.skip_deleted_ranges`` (else the plan refuses them). ``earlier``: the
    aborted checkpoints whose claims pinned this same version before this one (a replay reuses its aborted
    checkpoint's pins, `lockstep.rules.replay`), oldest first: the run builds the version from the files
    the first of them wrote, when there are some, rather than from the topic again."""

    name: str
    base: TableVersion | None
    ranges: tuple[OffsetRange, ...] = field(default_factory=tuple)
    skipped: Mapping[int, int] = field(default_factory=dict)
    earlier: tuple[int, ...] = ()

    @property
    def records(self) -> int:
        return sum(r.count for r in self.ranges)

    def same_version(self, other: TablePin) -> bool:
        """Whether both pin the same version: the same base and the same offsets on top."""
        return (self.name, self.base, self.ranges) == (other.name, other.base, other.ranges)

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"base": None if self.base is None else self.base.to_json(),
                                  "ranges": [r.to_json() for r in self.ranges]}
        if self.skipped:
            doc["skipped"] = {str(p): n for p, n in sorted(self.skipped.items())}
        if self.earlier:
            doc["earlier"] = list(self.earlier)
        return doc

    @classmethod
    def from_json(cls, name: str, doc: object, key: str, path: str) -> TablePin:
        if not isinstance(doc, Mapping):
            raise MetadataError(key, f"field '{path}' must be a JSON object")
        raw = doc.get("base")
        try:
            ranges = tuple(OffsetRange.from_json(r) for r in doc.get("ranges") or ())
            skipped = {int(p): int(n) for p, n in dict(doc.get("skipped") or {}).items()}
            earlier = tuple(int(c) for c in doc.get("earlier") or ())
        except (TypeError, ValueError, KeyError) as exc:
            raise MetadataError(key, f"field '{path}' is invalid: {exc}") from exc
        return cls(name, None if raw is None else TableVersion.from_json(raw, key, f"{path}.base"), ranges, skipped,
                   earlier)


def tables_to_json(tables: Mapping[str, TableVersion]) -> dict[str, object]:
    return {name: t.to_json() for name, t in sorted(tables.items())}


def tables_from_json(doc: Mapping[str, object], key: str, name: str = "tables") -> dict[str, TableVersion]:
    """The table versions a document carries under ``name`` (none in documents of earlier versions)."""
    raw = doc.get(name) or {}
    if not isinstance(raw, Mapping):
        raise MetadataError(key, f"field {name!r} must map table names to table versions")
    return {str(t): TableVersion.from_json(v, key, f"{name}.{t}") for t, v in raw.items()}


def pins_to_json(pins: Mapping[str, TablePin]) -> dict[str, object]:
    return {name: p.to_json() for name, p in sorted(pins.items())}


def pins_from_json(doc: Mapping[str, object], key: str, name: str = "tables") -> dict[str, TablePin]:
    raw = doc.get(name) or {}
    if not isinstance(raw, Mapping):
        raise MetadataError(key, f"field {name!r} must map table names to pinned table versions")
    return {str(t): TablePin.from_json(str(t), v, key, f"{name}.{t}") for t, v in raw.items()}
