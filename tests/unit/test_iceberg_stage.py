"""The Iceberg stage's work in a Spark task (`lockstep.iceberg.stage`), on Arrow batches: which rows the sink topic
took (the writers' one size estimate, on a batch at once) and the rows of each source partition."""
from __future__ import annotations

import random

import pyarrow as pa

from lockstep.iceberg.stage import _HEADERS, _by_source, _within
from lockstep.model.output_contract import sink_record_size

HEADER = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def batch(n: int, seed: int) -> pa.RecordBatch:
    rnd = random.Random(seed)
    values = [b"v" * rnd.randrange(0, 400) if rnd.random() > 0.05 else None for _ in range(n)]
    keys = [b"k" * rnd.randrange(0, 30) if rnd.random() > 0.3 else None for _ in range(n)]
    headers = [None if rnd.random() < 0.4 else
               [{"key": "h\u00e9" * rnd.randrange(1, 4), "value": b"x" * rnd.randrange(0, 50) if rnd.random() > 0.2
                 else None} for _ in range(rnd.randrange(0, 3))] for _ in range(n)]
    return pa.RecordBatch.from_pydict({
        "value": pa.array(values, pa.binary()), "key": pa.array(keys, pa.binary()),
        "lockstep_source_topic": pa.array([rnd.choice(["in", "orders-\u00fc"]) for _ in range(n)]),
        "lockstep_source_partition": pa.array([rnd.randrange(0, 12) for _ in range(n)], pa.int32()),
        "lockstep_source_offset": pa.array([rnd.randrange(0, 10 ** rnd.randrange(1, 12)) for _ in range(n)], pa.int64()),
        "lockstep_checkpoint": pa.array([7] * n, pa.int64()),
        _HEADERS: pa.array(headers, HEADER)})


def test_a_batch_keeps_exactly_the_rows_the_writers_size_estimate_lets_through() -> None:
    b = batch(2_000, seed=3)
    rows = b.to_pylist()
    sizes = [sink_record_size(len(r["key"] or b""), len(r["value"] or b""), r["lockstep_source_topic"],
                              r["lockstep_source_partition"], r["lockstep_source_offset"], 7, "pipe-\u00e9",
                              [(h["key"], h["value"]) for h in r[_HEADERS] or ()]) for r in rows]
    limit = sorted(sizes)[len(sizes) // 2]  # half of them too large
    kept = _within(b, "pipe-\u00e9", 7, limit)
    assert _HEADERS not in kept.column_names
    expected = [r["lockstep_source_offset"] for r, s in zip(rows, sizes, strict=True) if s <= limit]
    assert kept["lockstep_source_offset"].to_pylist() == expected
    assert 0 < len(expected) < len(rows)
    assert _within(b, "pipe-\u00e9", 7, max(sizes)).num_rows == len(rows)


def test_a_batch_without_headers_or_keys_is_measured_alike() -> None:
    b = batch(500, seed=5).drop_columns(["key", _HEADERS])
    rows = b.to_pylist()
    sizes = [sink_record_size(0, len(r["value"] or b""), r["lockstep_source_topic"], r["lockstep_source_partition"],
                              r["lockstep_source_offset"], 7, "p") for r in rows]
    limit = sorted(sizes)[100]
    assert _within(b, "p", 7, limit).num_rows == sum(s <= limit for s in sizes)


def test_rows_are_split_by_source_partition_and_none_is_lost() -> None:
    table = pa.Table.from_batches([batch(1_000, seed=9)]).drop_columns([_HEADERS])
    parts = dict(_by_source(table))
    assert sum(t.num_rows for t in parts.values()) == table.num_rows
    for source, rows in parts.items():
        topic, partition = source.rsplit(":", 1)
        assert set(rows["lockstep_source_topic"].to_pylist()) == {topic}
        assert set(rows["lockstep_source_partition"].to_pylist()) == {int(partition)}
    pc = pa.compute
    one = table.filter(pc.and_(pc.equal(table["lockstep_source_partition"], 3),
                               pc.equal(table["lockstep_source_topic"], "in")))
    assert [(s, t.num_rows) for s, t in _by_source(one)] == [("in:3", one.num_rows)]
    assert list(_by_source(table.slice(0, 0))) == []
