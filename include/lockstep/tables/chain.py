"""A table's chain of files (docs/joins.md): its rows read and merged, the checkpoint's version written on the
chain (a delta, or the chain compacted into a new base), the version an earlier attempt wrote found again, and
a versioned table's rows (``versions:``): which versions of each key a delta keeps, and each key's latest value.
Over pyarrow; a table's files are stored as the keyed state's are (`lockstep.store.state_files`, merged by
`lockstep.store.state_chain`), and `lockstep.tables.materialize` computes in Spark what goes in them.

A table with ``versions`` keeps, per key, its values over time: every record of its topic is a version, timed
by the record's timestamp, and a null value is a version too (the key had no row from then on). Versions are
ordered by (timestamp, partition, offset). A checkpoint's delta holds, for each key its records touch, every
version it keeps (the base's and the new ones): those within ``versions`` of the table's newest record, and
the last one before that, which is still the value at the cutoff (unless it is a deletion). A key left with
no version gets a tombstone (`lockstep.store.state_chain`). Untouched keys keep their versions until a record
touches them.
"""
from __future__ import annotations

__all__ = [
    "first_written", "latest_rows", "live_keys", "read", "versioned_delta", "write",
]

import logging
from typing import TYPE_CHECKING

from lockstep.model.state_rows import KEY, TOMBSTONE
from lockstep.store import state_chain
from lockstep.tables.pinning import compact_table
from lockstep.tables.pins import TablePin, TableVersion

if TYPE_CHECKING:
    import pyarrow as pa

    from lockstep.spec import TableSpec
    from lockstep.store.state_files import StateFiles

log = logging.getLogger(__name__)

#: The order of a key's versions.
VERSION_ORDER = ("timestamp_ms", "partition", "offset")


def _sorted(rows: pa.Table, descending: bool) -> pa.Table:
    order = "descending" if descending else "ascending"
    return rows.sort_by([(KEY, "ascending"), *((c, order) for c in VERSION_ORDER)])


def _first_of_each_key(rows: pa.Table) -> pa.Array:
    """A mask of the first row of each key in ``rows`` (sorted by key)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = rows[KEY].combine_chunks()
    if not len(keys):
        return pa.array([], pa.bool_())
    changed = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))
    return pa.concat_arrays([pa.array([True]), changed.cast(pa.bool_())])


def latest_rows(rows: pa.Table | None) -> pa.Table | None:
    """Each key's latest version, keys whose latest version is a deletion left out (None: no rows)."""
    import pyarrow.compute as pc

    if rows is None or not rows.num_rows:
        return rows
    if TOMBSTONE in rows.column_names:
        rows = rows.drop_columns([TOMBSTONE])
    ordered = _sorted(rows, descending=True)
    latest = ordered.filter(_first_of_each_key(ordered))
    return latest.filter(pc.is_valid(latest["value"]))


def versioned_delta(current: pa.Table | None, new: pa.Table, retention_ms: int) -> pa.Table:
    """The delta of a versioned table: for each key ``new`` (every record read, a null value a deletion) touches,
    the versions it keeps of ``current``'s and ``new``'s, or a tombstone when none is kept."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from lockstep.store import state_chain

    touched = pc.unique(new[KEY])
    columns = [c for c in new.column_names if c != TOMBSTONE]
    parts = [new.select(columns)]
    newest = pc.max(new["timestamp_ms"]).as_py()
    if current is not None and current.num_rows:
        parts.insert(0, state_chain.select(current, touched).select(columns).cast(parts[0].schema))
        newest = max(x for x in (newest, pc.max(current["timestamp_ms"]).as_py()) if x is not None)
    cutoff = (newest or 0) - retention_ms
    # Newest first per key: keep versions at or after the cutoff, and the first one before it (the value at the
    # cutoff) unless it is a deletion.
    versions = _sorted(pa.concat_tables(parts), descending=True)
    keys = versions[KEY].to_pylist()
    times = versions["timestamp_ms"].to_pylist()
    live = pc.is_valid(versions["value"]).to_pylist()
    keep: list[bool] = []
    before: set[str] = set()  # keys whose value at the cutoff was kept (or is a deletion)
    for key, at, alive in zip(keys, times, live, strict=True):
        if at >= cutoff:
            keep.append(True)
        elif key in before:
            keep.append(False)
        else:
            before.add(key)
            keep.append(bool(alive))
    kept = versions.filter(pa.array(keep, pa.bool_()))
    kept = kept.append_column(TOMBSTONE, pa.nulls(kept.num_rows, pa.bool_()))
    gone = pc.filter(touched, pc.invert(pc.is_in(touched, value_set=pc.unique(kept[KEY])))) if kept.num_rows \
        else touched
    if not len(gone):
        return kept
    empty = {name: pa.nulls(len(gone), kept.schema.field(name).type) for name in kept.column_names}
    empty[KEY] = gone.cast(kept.schema.field(KEY).type)
    empty[TOMBSTONE] = pa.array([True] * len(gone), pa.bool_())
    return pa.concat_tables([kept, pa.table(empty, schema=kept.schema)])


# ---- a table's files: its chain read, and the checkpoint's version written --------------------------------
def read(files: StateFiles, version: TableVersion | None) -> pa.Table | None:
    """The rows of a table's version (its chain merged), None when it has none."""
    return files.read_table(version)


def write(files: StateFiles, table: TableSpec, checkpoint_id: int, pin: TablePin, current: pa.Table | None,
          delta: pa.Table, ends: dict[int, int]) -> tuple[pa.Table | None, TableVersion]:
    """The checkpoint's version of the table: its delta written on the base's chain, or the chain compacted into
    a new base when it is due (`lockstep.tables.pinning.compact_table`); its rows and the version that names
    its files (a retry writes the same bytes, or beside them: `StateFiles.create`)."""
    base = pin.base
    chain = [] if base is None else list(base.files)
    body = state_chain.parquet(delta)
    if compact_table(list(base.file_bytes) if base is not None else [], len(body), checkpoint_id):
        merged = state_chain.merge([t for t in (current, delta) if t is not None])
        assert merged is not None
        body = state_chain.parquet(merged)
        where, digest = files.put_table(files.table_key(checkpoint_id, table.name), body)
        keys: tuple[str, ...] = (where,)
        digests: tuple[str, ...] = (digest,)
        sizes: tuple[int, ...] = (len(body),)
        rows: pa.Table | None = merged
    else:
        assert base is not None
        where, digest = files.put_table(files.table_key(checkpoint_id, table.name, delta=True), body)
        keys, digests, sizes = (*chain, where), (*base.digests, digest), (*base.file_bytes, len(body))
        rows = state_chain.merge([t for t in (current, delta) if t is not None])
    return rows, TableVersion(table.name, table.topic, checkpoint_id, ends, keys, digests, sizes, live_keys(rows))


def first_written(files: StateFiles, table: TableSpec, checkpoint_id: int, pin: TablePin, current: pa.Table | None,
                  ends: dict[int, int]) -> tuple[pa.Table | None, TableVersion] | None:
    """The version an earlier attempt of this same pin wrote, from its file: the first of the aborted checkpoints
    whose pins this one replays (``pin.earlier``), else an earlier attempt of this checkpoint (a retry). Not the
    topic again: compaction or retention may have removed records of the pinned offsets since, and the version
    built from what is left would differ from the one the first attempt joined (docs/joins.md). None: no
    attempt got as far as writing it."""
    base = pin.base
    for cid in (*pin.earlier, checkpoint_id):
        for delta in (True, False) if base is not None else (False,):
            key = files.table_key(cid, table.name, delta=delta)
            found = files.written(key)
            if found is None:
                continue
            rows, digest, size = found
            if delta:
                assert base is not None
                rows = state_chain.merge([t for t in (current, rows) if t is not None])
                keys, digests, sizes = (*base.files, key), (*base.digests, digest), (*base.file_bytes, size)
            else:
                keys, digests, sizes = (key,), (digest,), (size,)
            log.info("checkpoint %d: table %s: its pinned version as %s wrote it (%s), not read from %s again",
                     checkpoint_id, table.name, f"aborted checkpoint {cid}" if cid != checkpoint_id
                     else "an earlier attempt", files.url(key), table.topic)
            return rows, TableVersion(table.name, table.topic, checkpoint_id, ends, keys, digests, sizes,
                                      live_keys(rows))
    return None


def live_keys(rows: pa.Table | None) -> int:
    """How many keys have a row now (a versioned table's rows hold earlier values and deletions too, and so may a
    table whose spec dropped ``versions`` since, until its keys are touched)."""
    return state_chain.key_count(latest_rows(rows))
