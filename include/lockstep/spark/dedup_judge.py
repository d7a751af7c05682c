"""A dedup checkpoint's judgement on the driver, in Arrow (pure: no Spark, no I/O).

`lockstep.spark.dedup_run` collects the checkpoint's valid records narrow (the state key, its key
group, the event time and the provenance, a few dozen bytes each) and reads the state rows of the keys
they touch; :func:`judge` then decides, by `lockstep.rules.dedup`, which records pass. Spark only marks
them in the output (one join against the key and provenance of the passes or of the copies, whichever
are fewer), and the driver puts the passes beside the loaded rows as the new state. So neither the
loaded rows nor the judgement go through Spark jobs of their own: what a checkpoint of a large state
costs beside a stateless one is the read of the touched keys' rows and the collect of the narrow records.

The common cases are vectorised as the rule's :func:`lockstep.rules.dedup.judge` takes them: a key the
state does not hold whose records lie within ``ttl`` of its first passes its first; a key whose least
or greatest held time is within ``ttl`` of its first and its last record passes none. Any other key is
folded over its records in order (:func:`_fold`): with the records sorted, the nearest record passed
before one is the last passed, and the nearest held times are found by bisection, so a hot key with
many passes costs a sort, not the square of its passes.
"""
from __future__ import annotations

__all__ = ["RECORD_COLUMNS", "Judgement", "judge"]

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockstep.model.state_rows import EVENT, GROUP, KEY

if TYPE_CHECKING:
    import pyarrow as pa

#: The columns of the records :func:`judge` takes (and of the passed records it returns).
PROVENANCE = ("topic", "partition", "offset")
RECORD_COLUMNS = (KEY, GROUP, EVENT, *PROVENANCE)


@dataclass(frozen=True)
class Judgement:
    """A checkpoint's fresh records (not late), parted: those that pass and the copies, each sorted by
    key, then as judged."""

    passed: pa.Table
    copies: pa.Table


_ORDER = [(KEY, "ascending"), (EVENT, "ascending"), *((c, "ascending") for c in PROVENANCE)]


def judge(records: pa.Table, held: pa.Table, ttl_ms: int, before: int | None) -> Judgement:
    """Which of ``records`` (columns :data:`RECORD_COLUMNS`, no null key or event time) pass, given the
    state's rows of their keys (``held``: at least ``__ls_key`` and ``__ls_event_ms``, the rows the
    watermark ``before`` had let go already left out) and the watermark the checkpoint started from.
    Late records (``event + ttl <= before``) are in neither part."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    records = records.select(list(RECORD_COLUMNS))
    if before is not None:
        records = records.filter(pc.greater(pc.add(records[EVENT], pa.scalar(ttl_ms, pa.int64())), before))
    if not records.num_rows:
        return Judgement(records, records)
    r = records.take(pc.sort_indices(records, sort_keys=_ORDER)).combine_chunks()
    keys, times = r[KEY].chunk(0), r[EVENT].chunk(0)
    n = len(keys)
    changes = pc.not_equal(keys.slice(1), keys.slice(0, n - 1))
    starts = pc.indices_nonzero(pa.concat_arrays([pa.array([True]), changes])).cast(pa.int64())  # each key's first row
    ends = pa.concat_arrays([pc.subtract(starts.slice(1), 1), pa.array([n - 1], pa.int64())])  # its last
    per_key = pa.table({KEY: keys.take(starts), "__first": times.take(starts), "__last": times.take(ends),
                        "__start": starts, "__end": ends})
    if held.num_rows:
        spans = held.select([KEY, EVENT]).group_by(KEY).aggregate([(EVENT, "min"), (EVENT, "max")])
        spans = pa.table({KEY: spans[KEY].cast(per_key.schema.field(KEY).type),
                          "__hmin": spans[f"{EVENT}_min"].cast(pa.int64()),
                          "__hmax": spans[f"{EVENT}_max"].cast(pa.int64())})
        per_key = per_key.join(spans, KEY, join_type="left outer")
        hmin, hmax = per_key["__hmin"], per_key["__hmax"]
    else:
        hmin = hmax = pa.nulls(per_key.num_rows, pa.int64())
    first, last = per_key["__first"], per_key["__last"]

    def within(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
        return pc.less(pc.abs(pc.subtract(a, b)), ttl_ms)

    def covers(h: pa.ChunkedArray) -> pa.ChunkedArray:  # a held time within the TTL of the first and last record
        return pc.and_(within(first, h), within(last, h))

    new = pc.and_(pc.is_null(hmin), within(last, first))
    covered = pc.fill_null(pc.or_(covers(hmin), covers(hmax)), False)
    passed = [pc.filter(per_key["__start"], new)]
    mixed = per_key.filter(pc.invert(pc.or_(new, covered)))
    if mixed.num_rows:
        held_times: dict[str, list[int]] = {}
        if held.num_rows:
            wanted = held.filter(pc.is_in(held[KEY], value_set=mixed[KEY].combine_chunks()))
            for key, t in zip(wanted[KEY].to_pylist(), wanted[EVENT].to_pylist(), strict=True):
                held_times.setdefault(key, []).append(t)
        chosen: list[int] = []
        for key, start, end in zip(mixed[KEY].to_pylist(), mixed["__start"].to_pylist(), mixed["__end"].to_pylist(),
                                   strict=True):
            events = times.slice(start, end - start + 1).to_pylist()
            chosen += [start + i for i in _fold(events, sorted(held_times.get(key, ())), ttl_ms)]
        passed.append(pa.array(chosen, pa.int64()))
    rows = pa.concat_arrays([a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in passed])
    rows = rows.take(pc.sort_indices(rows))
    others = np.ones(n, dtype=bool)  # every record not late that did not pass is a copy
    others[rows.to_numpy()] = False
    return Judgement(r.take(rows), r.filter(pa.array(others)))


def _fold(events: list[int], held: list[int], ttl_ms: int) -> list[int]:
    """The indexes of the records that pass, of one key's records sorted as judged (``events``, their
    event times), against the key's sorted held times: a record passes unless a held time or a record
    passed before it is within the TTL (`lockstep.rules.dedup`'s fold)."""
    chosen: list[int] = []
    last: int | None = None
    for i, e in enumerate(events):
        if last is not None and e - last < ttl_ms:  # sorted: the last passed is the nearest passed
            continue
        j = bisect.bisect_left(held, e)
        if any(abs(e - held[k]) < ttl_ms for k in (j - 1, j) if 0 <= k < len(held)):
            continue
        chosen.append(i)
        last = e
    return chosen
