"""A versioned table's rows (`lockstep.tables.materialize`, ``versions:``), pure pyarrow: which versions of each key a
delta keeps, and each key's latest value.

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
    "latest_rows", "versioned_delta",
]

from typing import TYPE_CHECKING

from lockstep.model.state_rows import KEY, TOMBSTONE

if TYPE_CHECKING:
    import pyarrow as pa

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
