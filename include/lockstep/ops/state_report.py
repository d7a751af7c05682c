"""``lockstep state``: what a stateful pipeline's keyed state holds (stats, rows) and its re-keying; and what a
pipeline's tables hold (docs/joins.md).

The committed state is the manifest of a completed checkpoint (`lockstep.model.state_manifest.StateManifest`);
the figures of ``stats`` come from it, with the files' sizes from one listing of the folder that
holds them. ``show`` reads the Parquet files one at a time and stops once it has the rows it prints,
so its memory is bounded by one key group's file. The derivations (report, user rows, refusals) are
pure; :func:`committed_state`, :func:`file_sizes` and :func:`read_rows` do the reading.
"""
from __future__ import annotations

__all__ = [
    "size_text",
]

import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lockstep.errors import TerminalError
from lockstep.model.checkpoint import CheckpointStatus
from lockstep.model.state_manifest import StateManifest, iso_ms
from lockstep.model.state_rows import EVENT, FROM_OFFSET, FROM_PARTITION, FROM_TOPIC, GROUP, KEY, WINDOW_START
from lockstep.rules.window_partials import aggregate_of
from lockstep.tables.pins import TableVersion

if TYPE_CHECKING:
    import pyarrow as pa

    from lockstep.spec import PipelineSpec
    from lockstep.store.checkpoint_store import PipelineStore
    from lockstep.store.state_files import StateFiles

#: The internal columns of the state rows (`lockstep.spark.keyed_state`) and the names users read them by.
USER_NAMES = {KEY: "key", EVENT: "event_time", GROUP: "key_group", WINDOW_START: "window_start",
              FROM_TOPIC: "latest_topic", FROM_PARTITION: "latest_partition", FROM_OFFSET: "latest_offset"}
#: Metrics of the manifest shown as seconds, in this order.
SECONDS = ("load_seconds", "apply_seconds", "write_seconds", "watermark_seconds")


def stateless(spec: PipelineSpec) -> TerminalError:
    return TerminalError(f"pipeline {spec.name} is stateless ({spec.path} has no state: section): it keeps no "
                         "keyed state to inspect or re-key")


# ---- which state ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommittedState:
    """The state after one completed checkpoint (``manifest`` None: the pipeline has no state yet)."""

    checkpoint_id: int | None
    manifest: StateManifest | None


def committed_state(store: PipelineStore, checkpoint: int | None = None) -> CommittedState:
    """The state of completed checkpoint ``checkpoint``, or of the latest completed one."""
    if checkpoint is None:
        latest = store.latest_completed()
        if latest is None or latest.completed is None:
            return CommittedState(None, None)
        return CommittedState(latest.checkpoint_id, latest.completed.state)
    view = store.view(checkpoint)
    if view is None:
        raise TerminalError(f"checkpoint {checkpoint} of {store.pipeline} is not in the store (retention deletes "
                            "old checkpoints; a savepoint keeps its state)")
    if view.status is not CheckpointStatus.COMPLETED or view.completed is None:
        raise TerminalError(f"checkpoint {checkpoint} is {view.status.value}, not completed: only a completed "
                            "checkpoint's state is committed")
    return CommittedState(checkpoint, view.completed.state)


def no_state_text(pipeline: str, found: CommittedState) -> str:
    if found.checkpoint_id is None:
        return f"{pipeline}: no completed checkpoint yet, so no state yet"
    return (f"{pipeline}: checkpoint {found.checkpoint_id} carries no state yet (the pipeline has not written "
            "state, or it was stateless then)")


# ---- stats ---------------------------------------------------------------------------------------
def file_sizes(files: StateFiles, manifest: StateManifest) -> dict[str, int]:
    """The sizes of the manifest's files: from the manifest itself (format 2 records each group's file
    sizes), else from one listing of each folder they are in; a file a listing lacks is left out."""
    if manifest.incremental:  # a pack of several groups' deltas: the sum of their shares
        sizes: dict[str, int] = {}
        for g, keys in manifest.files.items():
            for key, size in zip(keys, manifest.groups[g].file_bytes, strict=True):
                sizes[key] = sizes.get(key, 0) + size
        return sizes
    wanted = set(manifest.all_files)
    folders = {c for c in (files.checkpoint_of(k) for k in wanted) if c is not None}
    return {key: size for c in sorted(folders) for key, size in files.sizes(c).items() if key in wanted}


def stats(checkpoint_id: int, manifest: StateManifest, sizes: Mapping[str, int], idle_timeout_ms: int,
          now_ms: int) -> dict[str, Any]:
    """The report of ``lockstep state stats`` (its ``--json``): the manifest's figures made readable.

    A partition counts as idle when no checkpoint read records of it for ``idle_timeout_ms`` before
    ``now_ms``: the next checkpoint does not let it hold the watermark back unless it reads records of it."""
    groups = []
    for g in sorted(manifest.files):
        keys = manifest.files[g]
        figures = manifest.groups.get(g)
        # the group's own bytes: of a pack of several groups' deltas, its share (format 2 records them)
        known = list(figures.file_bytes) if figures is not None and len(figures.file_bytes) == len(keys) \
            else [sizes[k] for k in keys if k in sizes]
        groups.append({"key_group": g, "files": len(keys), "deltas": max(len(keys) - 1, 0),
                       "bytes": sum(known) if len(known) == len(keys) else None,
                       "keys": figures.keys if figures else None, "rows": figures.rows if figures else None})
    partitions = []
    for tp, t in sorted(manifest.partitions.items()):
        partitions.append({"partition": tp, "max_event_time": iso_ms(t.max_event_ms), "max_event_ms": t.max_event_ms,
                           "active_at": iso_ms(t.active_at_ms), "idle": now_ms - t.active_at_ms > idle_timeout_ms})
    seen = sorted((t.max_event_ms, tp) for tp, t in manifest.partitions.items() if t.max_event_ms is not None)
    oldest, slowest = seen[0] if seen else (None, None)
    return {
        "checkpoint": checkpoint_id, "written_by": manifest.written_by, "operator": manifest.operator,
        "key_groups": manifest.key_groups, "groups_with_keys": len(manifest.files), "keys": manifest.keys,
        "rows": manifest.rows, "bytes": manifest.bytes, "files": manifest.file_count, "deltas": manifest.delta_count,
        "format_version": manifest.format_version,
        "watermark": iso_ms(manifest.watermark_ms), "watermark_ms": manifest.watermark_ms,
        "oldest_partition_event_time": iso_ms(oldest), "oldest_partition_event_ms": oldest,
        "oldest_partition": slowest,
        "idle_timeout_ms": idle_timeout_ms, "partitions": partitions,
        "timers": {"pending": manifest.timers, "next": iso_ms(manifest.next_timer_ms),
                   "next_ms": manifest.next_timer_ms},
        "metrics": dict(manifest.metrics), "per_key_group": groups,
    }


def size_text(n: int | None) -> str:
    """A byte count as people read it: ``812 B``, ``3.4 KiB``, ``1.2 GiB``; "?" when unknown."""
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def describe_stats(pipeline: str, doc: Mapping[str, Any], max_groups: int = 16) -> str:
    """The text of ``lockstep state stats``."""
    carried = f", written by checkpoint {doc['written_by']}" if doc["written_by"] != doc["checkpoint"] else ""
    lines = [f"{pipeline}: {doc['operator']} state after checkpoint {doc['checkpoint']}{carried}",
             f"  key groups   {doc['key_groups']} ({doc['groups_with_keys']} hold keys)",
             f"  keys         {doc['keys']:,}", f"  rows         {doc['rows']:,}",
             f"  size         {size_text(doc['bytes'])} ({doc['bytes']:,} bytes) in {doc['files']} files"
             + (f" ({doc['deltas']} of them deltas)" if doc.get("deltas") else ""),
             f"  watermark    {doc['watermark']}",
             f"  oldest partition event time {doc['oldest_partition_event_time']}"
             + (f" ({doc['oldest_partition']})" if doc["oldest_partition"] else "")]
    timers = doc["timers"]
    if doc["operator"] == "window":
        lines.append(f"  timers       {timers['pending']} windows pending, next fires at {timers['next']}")
    else:
        lines.append(f"  timers       {timers['pending']} pending, next at {timers['next']}")
    metrics = doc["metrics"]
    shown = [f"{name.removesuffix('_seconds')} {metrics[name]:.2f} s" for name in SECONDS if name in metrics]
    if "files_written" in metrics:
        shown.append(f"wrote {int(metrics['files_written'])} files ({size_text(int(metrics['bytes_written']))}, "
                     f"{int(metrics.get('compactions', 0))} compactions) after reading {int(metrics['groups_read'])} "
                     f"groups ({int(metrics['rows_loaded']):,} rows)")
    lines.append("  last run     " + (", ".join(shown) if shown else "nothing measured (a checkpoint without "
                                                                     "records carried the state forward)"))
    lines.append(f"  partitions (idle: no records read for {doc['idle_timeout_ms'] // 1000} s):")
    for p in doc["partitions"]:
        lines.append(f"    {p['partition']:28} max event {p['max_event_time']:24} last read {p['active_at']}"
                     + ("  idle" if p["idle"] else ""))
    if not doc["partitions"]:
        lines.append("    (none yet)")
    groups = doc["per_key_group"]
    lines.append("  per key group (group: files, size, keys):")
    for g in groups[:max_groups]:
        keys = f", {g['keys']:,} keys" if g.get("keys") is not None else ""
        lines.append(f"    {g['key_group']:>5}: {g['files']} file{'s' if g['files'] != 1 else ''}, {size_text(g['bytes'])}"
                     f"{keys}")
    if len(groups) > max_groups:
        lines.append(f"    ... {len(groups) - max_groups} more (--json lists them all)")
    if not groups:
        lines.append("    (no group holds keys)")
    return "\n".join(lines)


# ---- show ----------------------------------------------------------------------------------------
def user_rows(table: pa.Table) -> list[dict[str, Any]]:
    """State rows as users read them: key, event_time (ISO), key_group, then the operator's columns; a window's
    partial aggregates under their output names, with the window's start (ISO) and its latest record."""
    internal = [c for c in USER_NAMES if c in table.column_names]
    data = [c for c in table.column_names if c not in USER_NAMES]
    rows = []
    for raw in table.to_pylist():
        row: dict[str, Any] = {USER_NAMES[c]: iso_ms(raw[c]) if c in (EVENT, WINDOW_START) else raw[c]
                               for c in internal}
        row.update((aggregate_of(c) or c, raw[c]) for c in data)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class ShownRows:
    rows: list[dict[str, Any]]
    #: more rows match than were kept (``limit`` reached)
    more: bool
    files_read: int


def _batches(body: bytes, key: str | None, group: int) -> Iterator[pa.Table]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from lockstep.store import state_chain

    for batch in pq.ParquetFile(io.BytesIO(body)).iter_batches(batch_size=1024):
        table = state_chain.of_group(pa.Table.from_batches([batch]), group)  # a pack holds other groups' too
        if key is not None:
            table = table.filter(pc.equal(table[KEY], key))
        if table.num_rows:
            yield table


def read_rows(files: StateFiles, manifest: StateManifest, key: str | None = None, limit: int = 20) -> ShownRows:
    """Up to ``limit`` rows of the state (only key ``key``'s when given), key group by key group, each
    group's chain merged (`lockstep.store.state_chain`). Reading stops once one row more than ``limit``
    was found; ``files_read`` counts the files read."""
    import pyarrow as pa

    from lockstep.store import state_chain

    kept: list[dict[str, Any]] = []
    read = 0
    for group in sorted(manifest.files):
        chain = []
        for path in manifest.files[group]:
            read += 1
            tables = list(_batches(files.get(path, manifest.written_by), key, group))
            chain.append(pa.concat_tables(tables) if tables else None)
        merged = state_chain.merge([t for t in chain if t is not None])
        if merged is not None and merged.num_rows:
            kept.extend(user_rows(merged.slice(0, limit + 1 - len(kept))))
            if len(kept) > limit:
                return ShownRows(kept[:limit], True, read)
    return ShownRows(kept, False, read)


def _cell(value: Any) -> str:
    text = "null" if value is None else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def describe_rows(pipeline: str, checkpoint_id: int, manifest: StateManifest, shown: ShownRows,
                  key: str | None) -> str:
    """The text of ``lockstep state show``: one line per row, ``name=value`` after the key."""
    which = f"key {key!r}" if key is not None else f"{manifest.rows:,} rows, {manifest.keys:,} keys"
    lines = [f"{pipeline}: {manifest.operator} state after checkpoint {checkpoint_id} ({which})"]
    for row in shown.rows:
        rest = " ".join(f"{k}={_cell(v)}" for k, v in row.items() if k not in ("key", "event_time", "key_group"))
        lines.append(f"  {_cell(row.get('key')):24} {row.get('event_time', ''):24} kg={row.get('key_group')}  {rest}")
    if not shown.rows:
        lines.append(f"  no rows{f' for key {key!r}' if key is not None else ''}")
    if shown.more:
        lines.append(f"  ... more rows (showing the first {len(shown.rows)}; --limit shows more)")
    return "\n".join(lines)


# ---- tables --------------------------------------------------------------------------------------
def committed_tables(store: PipelineStore, checkpoint: int | None = None) -> tuple[int | None, dict[str, TableVersion]]:
    """The tables (`lockstep.tables.pins`) of completed checkpoint ``checkpoint``, or of the latest completed one."""
    if checkpoint is None:
        latest = store.latest_completed()
        if latest is None or latest.completed is None:
            return None, {}
        return latest.checkpoint_id, dict(latest.completed.tables)
    view = store.view(checkpoint)
    if view is None or view.status is not CheckpointStatus.COMPLETED or view.completed is None:
        raise TerminalError(f"checkpoint {checkpoint} of {store.pipeline} is "
                            f"{view.status.value if view else 'not in the store'}, not completed: only a completed "
                            "checkpoint's tables are committed")
    return checkpoint, dict(view.completed.tables)


def table_stats(checkpoint_id: int | None, tables: Mapping[str, TableVersion]) -> dict[str, Any]:
    """``lockstep state stats`` of a pipeline's tables: each one's version, files and offsets."""
    return {"checkpoint": checkpoint_id, "tables": [
        {"table": name, "topic": t.topic, "written_by": t.written_by, "keys": t.keys, "files": len(t.files),
         "deltas": max(len(t.files) - 1, 0), "bytes": t.bytes,
         "ends": {str(p): o for p, o in sorted(t.ends.items())}} for name, t in sorted(tables.items())]}


def describe_table_stats(pipeline: str, doc: Mapping[str, Any]) -> str:
    if doc["checkpoint"] is None:
        return f"{pipeline}: no completed checkpoint yet, so no table yet"
    lines = [f"{pipeline}: tables after checkpoint {doc['checkpoint']}"]
    for t in doc["tables"]:
        ends = ", ".join(f"{p}:{o}" for p, o in t["ends"].items())
        lines.append(f"  {t['table']}: {t['keys']:,} keys, {t['files']} files ({t['deltas']} deltas), "
                     f"{size_text(t['bytes'])}, written by checkpoint {t['written_by']}; {t['topic']} read up to {ends}")
    return "\n".join(lines)


def table_rows(files: StateFiles, version: TableVersion, key: str | None = None, limit: int = 20) -> ShownRows:
    """Up to ``limit`` of a table's rows (its latest value per key; only key ``key``'s, its text, when given)."""
    import pyarrow.compute as pc

    from lockstep.tables.chain import latest_rows

    rows = latest_rows(files.read_table(version))
    if rows is not None and key is not None:
        rows = rows.filter(pc.equal(rows["key"], key.encode()))
    found = [] if rows is None else rows.slice(0, limit + 1).to_pylist()

    def text(raw: bytes | None) -> str | None:
        return None if raw is None else raw.decode("utf-8", "replace")

    shown = [{"key": text(r["key"]), "value": text(r["value"]), "partition": r["partition"], "offset": r["offset"],
              "timestamp": iso_ms(r["timestamp_ms"])} for r in found]
    return ShownRows(shown[:limit], len(shown) > limit, len(version.files))


def describe_table_rows(pipeline: str, checkpoint_id: int, version: TableVersion, shown: ShownRows,
                        key: str | None) -> str:
    which = f"key {key!r}" if key is not None else f"{version.keys:,} keys"
    lines = [f"{pipeline}: table {version.name} after checkpoint {checkpoint_id} ({which}; {version.topic})"]
    for row in shown.rows:
        lines.append(f"  {_cell(row['key']):24} {row['timestamp']:24} {row['partition']}@{row['offset']}  "
                     f"{_cell(row['value'])}")
    if not shown.rows:
        lines.append(f"  no rows{f' for key {key!r}' if key is not None else ''}")
    if shown.more:
        lines.append(f"  ... more rows (showing the first {len(shown.rows)}; --limit shows more)")
    return "\n".join(lines)


# ---- rekey ---------------------------------------------------------------------------------------
def rekey_refusal(found: CommittedState, key_groups: int) -> str | None:
    """Why ``lockstep state rekey --key-groups key_groups`` is refused now, or None."""
    if found.manifest is None:
        return (f"{no_state_text('the pipeline', found)}: there is nothing to re-key. Set state.key_groups in the "
                "spec instead; it is fixed when the first checkpoint writes state")
    if not 1 <= key_groups <= 32_768:
        return f"--key-groups must be between 1 and 32768, got {key_groups}"
    if key_groups == found.manifest.key_groups:
        return (f"the state (checkpoint {found.checkpoint_id}) already has {key_groups} key groups: "
                "nothing to re-key")
    return None


def rekey_text(spec: PipelineSpec, found: CommittedState, key_groups: int) -> str:
    """What ``lockstep state rekey`` recorded, and what happens next."""
    assert found.manifest is not None and spec.state is not None
    m = found.manifest
    lines = [f"{spec.name}: re-keying from {m.key_groups} to {key_groups} key groups recorded "
             f"(state of checkpoint {found.checkpoint_id}: {m.keys:,} keys, {m.rows:,} rows, {size_text(m.bytes)}).",
             f"The next checkpoint reads the whole state and writes it in {key_groups} key groups, each as a new "
             "base (later checkpoints write deltas again); the files of the old layout stay with the "
             "checkpoints and savepoints that name them until garbage collection."]
    if spec.state.key_groups != key_groups:
        lines.append(f"Now set state.key_groups: {key_groups} in {spec.path} (it says {spec.state.key_groups}): "
                     f"until then the plan refuses the checkpoint.")
    else:
        lines.append(f"{spec.path} already says state.key_groups: {key_groups}; the next checkpoint re-keys.")
    return "\n".join(lines)
