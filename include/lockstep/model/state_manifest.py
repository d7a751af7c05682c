"""A stateful pipeline's keyed state as the checkpoint records it: the state manifest.

The state itself is immutable Parquet files in S3, under the pipeline's checkpoint prefix
(``<prefix>/<pipeline>/state/<checkpoint>/kg-<group>[.delta][.<digest>].parquet``): per key group that holds
keys, a chain of a base and the deltas written since (`lockstep.store.state_chain`). The manifest
names them, with each group's figures (format 2), with what the next checkpoint needs besides: the event-time position of
each source partition (for the watermark), the watermark, the pending timers (windows not yet
fired), and the state's schema. A run writes the files first and the manifest in ``prepared.json``;
the commit copies it into the completed ``outcome.json``. The completed checkpoint's manifest *is* the committed
state: a checkpoint that never completes leaves files nobody reads (and garbage collection deletes).

Pure data, no I/O (`lockstep.store.state_files` moves the bytes, `lockstep.spark.keyed_state` computes).
"""
from __future__ import annotations

__all__ = [
    "STATE_FORMAT_VERSION", "GroupState", "PartitionTime", "StateManifest", "iso_ms",
]

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from lockstep.errors import MetadataError

STATE_MANIFEST_SCHEMA = "lockstep.state.manifest/1"
#: The layout of the state: 1, one full file per key group; 2, a chain per group (base, then deltas
#: with tombstones) and each group's figures in the manifest; 3, a checkpoint's deltas of several groups in
#: one pack that each of their chains names (a reader of format 2 would take the whole pack as each group's).
STATE_FORMAT_VERSION = 3


@dataclass(frozen=True)
class GroupState:
    """One key group's figures, kept so that a checkpoint that does not read the group carries them."""

    keys: int
    rows: int
    #: the sizes of the group's files, in the manifest's order (base first); of a pack of several groups'
    #: deltas, this group's share (its rows' part of the pack's bytes: the shares sum to the pack's size)
    file_bytes: tuple[int, ...]
    #: pending timers (windows not fired, keys not expired, a function's timers) and the earliest; the
    #: earliest may be early (a timer since removed), never late: a group whose earliest timer is due is read whole
    timers: int = 0
    next_timer_ms: int | None = None
    #: each file's content digest (`lockstep.store.state_cache.digest`), in the same order: a file read
    #: is checked against it, and a local cache is addressed by it
    digests: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"keys": self.keys, "rows": self.rows, "file_bytes": list(self.file_bytes), "timers": self.timers,
                "next_timer_ms": self.next_timer_ms, "digests": list(self.digests)}

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> GroupState:
        nxt = doc.get("next_timer_ms")
        return cls(keys=int(doc["keys"]), rows=int(doc["rows"]),  # type: ignore[call-overload]
                   file_bytes=tuple(int(b) for b in doc["file_bytes"]),  # type: ignore[attr-defined]
                   timers=int(doc.get("timers", 0)),  # type: ignore[call-overload]
                   next_timer_ms=None if nxt is None else int(nxt),  # type: ignore[call-overload]
                   digests=tuple(str(d) for d in doc.get("digests") or ()))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class PartitionTime:
    """Event time as one source partition has shown it: the largest event time seen (None before its
    first record) and when a checkpoint last read records of it (wall-clock ms, for idleness)."""

    max_event_ms: int | None
    active_at_ms: int

    def to_json(self) -> dict[str, object]:
        return {"max_event_ms": self.max_event_ms, "active_at_ms": self.active_at_ms}


@dataclass(frozen=True)
class StateManifest:
    """The committed keyed state of a pipeline after one checkpoint."""

    #: "window" or "dedup": state of one operator is never read by another
    operator: str
    key_groups: int
    #: the checkpoint that wrote ``files`` (a checkpoint without records carries its base's forward)
    written_by: int
    #: key group -> S3 keys (bucket-relative) of its Parquet files: the base, then its deltas in order (a delta
    #: may be a checkpoint's pack, which holds the deltas of several groups: `lockstep.store.state_files`)
    files: Mapping[int, tuple[str, ...]]
    #: the state rows' columns: name -> Spark type (``simpleString``), the schema a change is checked against
    columns: Mapping[str, str]
    watermark_ms: int | None
    partitions: Mapping[str, PartitionTime]
    keys: int = 0
    rows: int = 0
    bytes: int = 0
    #: pending timers: windows with rows that have not fired yet (their count and the earliest firing time)
    timers: int = 0
    next_timer_ms: int | None = None
    format_version: int = STATE_FORMAT_VERSION
    #: the version of the state's schema the spec declares (``state.function.version``; 1 for windows and dedup)
    schema_version: int = 1
    #: what the checkpoint that wrote it measured (seconds to load, apply and write, rows in, ...)
    metrics: Mapping[str, float] = field(default_factory=dict)
    #: each key group's figures (format 2); empty in format 1, whose files are one full snapshot per group
    groups: Mapping[int, GroupState] = field(default_factory=dict)
    #: what the stored rows mean, as the operator's spec said when they were written (a window's key, size,
    #: slide and aggregates; a dedup's or a function's key): a spec that says otherwise is refused
    #: (`lockstep.rules.state_base.shape_refusal`). Empty in manifests of earlier versions, which are not judged.
    shape: Mapping[str, object] = field(default_factory=dict)

    @property
    def incremental(self) -> bool:
        """Whether a checkpoint may read and write some groups only (format 2: every group's figures known)."""
        return self.format_version >= 2 and set(self.groups) == set(self.files)

    @property
    def delta_count(self) -> int:
        """The distinct files that are deltas (a checkpoint's pack of deltas counts once, whatever the groups
        whose chains name it)."""
        return len({k for f in self.files.values() for k in f[1:]})

    @property
    def file_count(self) -> int:
        return len(self.all_files)

    @property
    def all_files(self) -> tuple[str, ...]:
        """Every file the groups' chains name, each once (a pack of deltas is named by every group it holds
        rows of), in the groups' order."""
        return tuple(dict.fromkeys(k for g in sorted(self.files) for k in self.files[g]))

    def carried_forward(self) -> StateManifest:
        """The same state, as the manifest of a checkpoint that read no records (nothing measured)."""
        return replace(self, metrics={})

    def to_json(self) -> dict[str, object]:
        return {
            "schema": STATE_MANIFEST_SCHEMA, "operator": self.operator, "key_groups": self.key_groups,
            "written_by": self.written_by, "format_version": self.format_version,
            "schema_version": self.schema_version,
            "files": {str(g): list(keys) for g, keys in sorted(self.files.items())},
            "columns": dict(self.columns), "watermark_ms": self.watermark_ms,
            "partitions": {tp: t.to_json() for tp, t in sorted(self.partitions.items())},
            "keys": self.keys, "rows": self.rows, "bytes": self.bytes, "timers": self.timers,
            "next_timer_ms": self.next_timer_ms, "metrics": dict(self.metrics),
            **({"groups": {str(g): s.to_json() for g, s in sorted(self.groups.items())}} if self.groups else {}),
            **({"shape": dict(self.shape)} if self.shape else {}),
        }

    @classmethod
    def from_json(cls, doc: object, key: str, path: str = "state") -> StateManifest:
        def bad(what: str) -> MetadataError:
            return MetadataError(key, f"field '{path}' {what}")

        if not isinstance(doc, Mapping) or doc.get("schema") != STATE_MANIFEST_SCHEMA:
            raise bad(f"is not a state manifest ({STATE_MANIFEST_SCHEMA})")
        try:
            files = {int(g): tuple(str(k) for k in keys) for g, keys in dict(doc["files"]).items()}
            partitions = {str(tp): PartitionTime(None if t["max_event_ms"] is None else int(t["max_event_ms"]),
                                                 int(t["active_at_ms"]))
                          for tp, t in dict(doc["partitions"]).items()}
            watermark = doc["watermark_ms"]
            next_timer = doc.get("next_timer_ms")
            return cls(
                operator=str(doc["operator"]), key_groups=int(doc["key_groups"]), written_by=int(doc["written_by"]),
                files=files, columns={str(k): str(v) for k, v in dict(doc["columns"]).items()},
                watermark_ms=None if watermark is None else int(watermark), partitions=partitions,
                keys=int(doc.get("keys", 0)), rows=int(doc.get("rows", 0)), bytes=int(doc.get("bytes", 0)),
                timers=int(doc.get("timers", 0)), next_timer_ms=None if next_timer is None else int(next_timer),
                format_version=int(doc.get("format_version", 1)),
                schema_version=int(doc.get("schema_version", 1)),
                metrics={str(k): float(v) for k, v in dict(doc.get("metrics") or {}).items()},
                groups={int(g): GroupState.from_json(v) for g, v in dict(doc.get("groups") or {}).items()},
                shape={str(k): v for k, v in dict(doc.get("shape") or {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise bad(f"is invalid: {exc!r}") from exc


def iso_ms(ms: int | None) -> str:
    """Epoch milliseconds (an event time, a watermark) as ISO 8601 in UTC with a Z
    (``2026-11-20T10:00:00.000Z``); "none" for None. How logs, reports and pages show state's times."""
    from datetime import UTC, datetime

    if ms is None:
        return "none"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def optional_manifest(doc: Mapping[str, object], key: str, name: str = "state") -> StateManifest | None:
    """The manifest a document carries under ``name``, or None (stateless pipelines, earlier versions)."""
    raw = doc.get(name)
    return None if raw is None else StateManifest.from_json(raw, key, name)
