"""Writing a checkpoint's new keyed state: the files of the groups it changed, then the manifest that
names them with the groups nobody touched (`lockstep.store.state_chain`, `lockstep.rules.compaction`,
`lockstep.rules.manifest_figures`).

A group read whole gets a new base; another gets a delta of the keys it touched (tombstones for keys
whose state is gone), merged with the chain's newest deltas into one when they are too many, or a new
base when the deltas are big against the base (a new base drops expired keys). The deltas of several
groups go in one file, the checkpoint's pack, which each of their chains names: a restore reads a file
per checkpoint, not per group and checkpoint. A group left with no rows leaves the manifest.

First what becomes of each group (a delta needs its bytes to decide), then the uploads, a compaction's
first: a checkpoint that compacts is interrupted at ``state.mid_upload`` (its first file) while it
rewrites a chain, the moment the soak's S3 faults aim at. The order of the uploads is nobody else's
business: the manifest, written after them all, names what counts."""
from __future__ import annotations

__all__ = ["RANK", "Upload"]

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lockstep.model import failpoints
from lockstep.model.state_manifest import GroupState, StateManifest
from lockstep.model.state_rows import GROUP, KEY
from lockstep.rules.compaction import Compaction
from lockstep.rules.manifest_figures import Figures
from lockstep.rules.state_reads import ReadPlan
from lockstep.rules.watermarks import EventClock
from lockstep.spark.state_read import Loaded
from lockstep.spec import PipelineSpec, StateSpec

if TYPE_CHECKING:
    import pyarrow as pa

    from lockstep.store.state_files import StateFiles


#: The order the files go up in, by kind: a compaction's first, then the deltas, then other bases.
RANK = {"compaction": 0, "delta": 1, "delta-merge": 1, "base": 2}


@dataclass(frozen=True)
class Upload:
    """A state file to upload, and what to record of the key and digest it got (its chain's new file)."""

    key: str
    kind: str
    body: bytes
    record: Callable[[str, str], None]


@dataclass
class _Chains:
    """The manifest's files and figures per group, as the checkpoint leaves them: the base's (when it read
    incrementally), each group's replaced or dropped as its files are decided and uploaded."""

    files: dict[int, tuple[str, ...]]
    groups: dict[int, GroupState]

    def record_base(self, group: int, figures: Figures, size: int, key: str, name: str) -> None:
        from lockstep.rules.manifest_figures import as_base

        self.files[group] = (key,)
        self.groups[group] = as_base(figures, size, name)


@dataclass
class _Uploads:
    """The files to upload, in the order they were decided, and what they add up to."""

    queued: list[Upload] = field(default_factory=list)
    #: bytes written as deltas, as bases of compacted chains, and as other bases (new or read-whole groups)
    by_kind: dict[str, int] = field(default_factory=lambda: {"delta": 0, "compaction": 0, "base": 0})

    def put(self, key: str, body: bytes, kind: str, record: Callable[[str, str], None]) -> None:
        self.queued.append(Upload(key, kind, body, record))
        self.by_kind["delta" if kind == "delta-merge" else kind] += len(body)

    @property
    def size(self) -> int:
        return sum(len(u.body) for u in self.queued)


@dataclass(frozen=True)
class _Change:
    """A group read incrementally that changed: what compaction makes of it, its new rows of the touched
    keys, those rows as they were read, its delta and the delta's bytes."""

    step: Compaction
    rows: pa.Table
    before: pa.Table | None
    change: pa.Table
    body: bytes


@dataclass(frozen=True)
class _DeltaFile:
    """A group's delta (or its newest deltas merged with it), for the checkpoint's delta file or pack:
    ``alone`` is its bytes when it is the checkpoint's only one and known; ``chain``, ``digests`` and
    ``file_bytes`` are the group's chain that the file joins (less the deltas merged)."""

    group: int
    kind: str
    change: pa.Table
    alone: bytes | None
    old: GroupState
    chain: tuple[str, ...]
    digests: tuple[str, ...]
    file_bytes: tuple[int, ...]
    figures: tuple[Figures, Figures]

    def record(self, chains: _Chains, key: str, name: str, share: int) -> None:
        from lockstep.rules.manifest_figures import after_delta

        chains.files[self.group] = (*self.chain, key)
        chains.groups[self.group] = after_delta(self.old, *self.figures, self.file_bytes, self.digests, share, name)


def _write(spec: PipelineSpec, cid: int, base: StateManifest | None, plan: ReadPlan, loaded: Loaded,
           table: pa.Table, files: StateFiles, columns: dict[str, str], clock: EventClock,
           metrics: dict[str, float]) -> StateManifest:
    """The new state's files, then the manifest that names them with the groups nobody touched.

    ``table`` holds the new rows of every key the checkpoint read or gave records to (the module's
    docstring says what each group gets)."""
    import pyarrow.compute as pc

    from lockstep.rules.manifest_figures import manifest
    from lockstep.store import state_chain

    state = spec.state
    assert state is not None
    table = state_chain.unexpired(table, state, clock.after)
    incremental = base is not None and not plan.full
    chains = _Chains(dict(base.files) if base is not None and incremental else {},
                     dict(base.groups) if base is not None and incremental else {})
    new_groups = set(pc.unique(table[GROUP]).to_pylist()) if table.num_rows else set()
    whole_groups, changes, unchanged = _judge_groups(state, cid, plan, loaded, table, new_groups, chains,
                                                     incremental)
    uploads = _Uploads()
    packing, compactions, merges = _place_groups(state, cid, plan, loaded, table, new_groups, chains, incremental,
                                                 files, clock, whole_groups, changes, uploads)
    _pack_deltas(files, cid, packing, chains, uploads)
    _upload(files, cid, uploads.queued)
    metrics.update(rows=float(table.num_rows), files_written=float(len(uploads.queued)),
                   bytes_written=float(uploads.size), groups_unchanged=float(unchanged),
                   compactions=float(compactions), delta_merges=float(merges),
                   delta_bytes=float(uploads.by_kind["delta"]), compaction_bytes=float(uploads.by_kind["compaction"]),
                   base_bytes=float(uploads.by_kind["base"]))
    from lockstep.rules.state_base import state_shape

    return manifest(state.operator, state.key_groups, cid, chains.files, chains.groups, columns, clock.after,
                    clock.partitions, state.schema_version, state_shape(state))


def _judge_groups(state: StateSpec, cid: int, plan: ReadPlan, loaded: Loaded, table: pa.Table, new_groups: set[int],
                  chains: _Chains, incremental: bool) -> tuple[set[int], dict[int, _Change], int]:
    """(the groups that get a new base of every row, the changes of the others with what compaction makes
    of each, how many groups did not change): what becomes of each group the checkpoint touched."""
    from lockstep.rules.compaction import compaction_due
    from lockstep.store import state_chain

    whole_groups: set[int] = set()
    changes: dict[int, _Change] = {}
    unchanged = 0
    for group in sorted(new_groups | set(loaded.chains)):
        old = chains.groups.get(group)
        if not incremental or old is None or plan.reads_whole(group):
            whole_groups.add(group)  # every row of the group: a new base (taken when uploaded)
            continue
        rows, before, change = _group_change(table, group, new_groups, loaded)
        if not change.num_rows:
            unchanged += 1
            continue  # nothing changed in the group: its files stay as they are
        body = state_chain.parquet(change)
        step = compaction_due(old.file_bytes, len(body), state.compaction, group, cid)
        changes[group] = _Change(step, rows, before, change, body)
    return whole_groups, changes, unchanged


def _group_change(table: pa.Table, group: int, new_groups: set[int],
                  loaded: Loaded) -> tuple[pa.Table, pa.Table | None, pa.Table]:
    """(the group's new rows, its rows as read, its delta): the delta leaves out the keys the checkpoint
    touched and left as they were."""
    import pyarrow.compute as pc

    from lockstep.store import state_chain

    rows = _group_rows(table, group, new_groups)
    before = loaded.selected.get(group)
    same = state_chain.unchanged_keys(rows, before)
    touched = before[KEY] if before is not None else rows[KEY].slice(0, 0)
    if len(same):  # keys the checkpoint touched and left as they were: not in the delta
        touched = pc.filter(touched, pc.invert(pc.is_in(touched, value_set=same)))
        changed = rows.filter(pc.invert(pc.is_in(rows[KEY], value_set=same)))
    else:
        changed = rows
    return rows, before, state_chain.delta(changed, touched, group)


def _place_groups(state: StateSpec, cid: int, plan: ReadPlan, loaded: Loaded, table: pa.Table, new_groups: set[int],
                  chains: _Chains, incremental: bool, files: StateFiles, clock: EventClock, whole_groups: set[int],
                  changes: dict[int, _Change], uploads: _Uploads) -> tuple[list[_DeltaFile], int, int]:
    """(the groups' deltas to pack, how many chains were compacted, how many had deltas merged): each new
    base queued for upload, each group left with no rows out of the manifest."""
    from lockstep.store import state_chain

    packing: list[_DeltaFile] = []
    compactions = merges = 0
    for group in sorted([*changes, *whole_groups]):
        old = chains.groups.get(group)
        whole: pa.Table | None
        if group in whole_groups:
            whole = _group_rows(table, group, new_groups)
        else:
            change = changes.pop(group)
            assert old is not None
            if change.step is not Compaction.BASE:
                delta = _delta_file(state, clock, loaded, chains, group, old, change)
                merges += delta.kind == "delta-merge"
                packing.append(delta)
                continue
            compactions += 1
            merged = state_chain.merge([*loaded.chains[group], change.change])
            whole = state_chain.unexpired(merged, state, clock.after) if merged is not None else None
        compacting = incremental and old is not None and not plan.reads_whole(group)
        chains.files.pop(group, None)
        chains.groups.pop(group, None)
        if whole is None or not whole.num_rows:
            continue
        body = state_chain.parquet(whole)
        figures = _figures(whole, state, clock.after)

        def record(key: str, name: str, group: int = group, figures: Figures = figures, size: int = len(body)) -> None:
            chains.record_base(group, figures, size, key, name)

        uploads.put(files.key(cid, group), body, "compaction" if compacting else "base", record)
    return packing, compactions, merges


def _delta_file(state: StateSpec, clock: EventClock, loaded: Loaded, chains: _Chains, group: int, old: GroupState,
                change: _Change) -> _DeltaFile:
    """A group's delta joining its chain, or merged with the chain's newest deltas into one
    (``Compaction.DELTAS``; the base stays as it is)."""
    from lockstep.rules.compaction import deltas_to_merge
    from lockstep.store import state_chain

    chain, digests, file_bytes = chains.files[group], old.digests, old.file_bytes
    kind, delta = "delta", change.change
    alone: bytes | None = change.body  # the delta's file when it is the checkpoint's only one
    if change.step is Compaction.DELTAS:
        kind, alone = "delta-merge", None
        n = deltas_to_merge(old.file_bytes, len(change.body))
        delta = state_chain.merge_deltas([*loaded.chains[group][-n:], change.change])
        chain, digests, file_bytes = chain[:-n], digests[:-n], file_bytes[:-n]
    figures = (_figures(change.before, state, clock.before), _figures(change.rows, state, clock.after))
    return _DeltaFile(group, kind, delta, alone, old, chain, digests, file_bytes, figures)


def _pack_deltas(files: StateFiles, cid: int, packing: list[_DeltaFile], chains: _Chains, uploads: _Uploads) -> None:
    """One group's delta in a file of its own; several groups' deltas in one pack, each group's chain naming
    it with its share of the bytes."""
    from lockstep.rules.manifest_figures import pack_shares
    from lockstep.store import state_chain

    if len(packing) == 1:
        delta = packing[0]
        body = delta.alone if delta.alone is not None else state_chain.parquet(delta.change)

        def record_one(key: str, name: str, delta: _DeltaFile = delta, share: int = len(body)) -> None:
            delta.record(chains, key, name, share)

        uploads.put(files.key(cid, delta.group, delta=True), body, delta.kind, record_one)
    elif packing:
        body = state_chain.parquet(state_chain.packed([d.change for d in packing]))
        shares = pack_shares(len(body), [d.change.num_rows for d in packing])

        def record_pack(key: str, name: str) -> None:
            for delta, share in zip(packing, shares, strict=True):
                delta.record(chains, key, name, share)

        uploads.put(files.pack_key(cid), body, "delta-merge" if any(d.kind == "delta-merge" for d in packing)
                    else "delta", record_pack)


def _upload(files: StateFiles, cid: int, queued: list[Upload]) -> None:
    """The uploads by :data:`RANK`: the first alone (a checkpoint that compacts is interrupted at
    ``state.mid_upload`` while it rewrites a chain), then the rest side by side. Where another attempt of
    this checkpoint already wrote other bytes under a file's name, ours go under another
    (`StateFiles.create`)."""
    ordered = sorted(queued, key=lambda u: RANK[u.kind])
    if not ordered:
        return
    first = ordered[0]
    key, name = files.put_table(first.key, first.body)
    failpoints.hit("state.mid_upload", f" (checkpoint {cid}, {first.kind} {key})")
    first.record(key, name)
    done = files.put_tables([(u.key, u.body) for u in ordered[1:]])
    for upload, (key, name) in zip(ordered[1:], done, strict=True):
        upload.record(key, name)


def _group_rows(table: pa.Table, group: int, new_groups: set[int]) -> pa.Table:
    import pyarrow.compute as pc

    return table.filter(pc.equal(table[GROUP], group)) if group in new_groups else table.slice(0, 0)


def _figures(table: pa.Table | None, state: StateSpec, watermark: int | None) -> Figures:
    """The keys, rows and pending timers of some state rows (none: all zero)."""
    from lockstep.store import state_chain

    if table is None:
        return Figures()
    timers, earliest = state_chain.timers(table, state, watermark)
    return Figures(state_chain.key_count(table), table.num_rows, timers, earliest)
