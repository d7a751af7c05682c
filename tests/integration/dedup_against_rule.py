"""Both dedup operators against their Python reference (`lockstep.rules.dedup.judge`) on random keys, in
a Spark Connect session: the driver's (`lockstep.spark.dedup_run._dedup_on_driver`: the judgement of
`lockstep.spark.dedup_judge`, whose unit tests hold it to the reference without Spark, and its marks
joined into Spark's records) and a re-keying checkpoint's, in Spark (`dedup._dedup`). Run as a
script by test_state.py, so the Connect client never shares the test's Python process.

    python dedup_against_rule.py sc://HOST:PORT SEED

Each round makes a few hundred keys of random records (copies near each other, records more than
the TTL apart, late ones) and random held times, runs both operators, and prints one JSON document:
the verdicts and state rows that differ from the reference's, how often each of the reference's
paths was taken (so the test knows the rare ones ran), and which side the driver marked (passes or
copies, inline or kept on the server).
"""
from __future__ import annotations

import json
import random
import sys

import pyarrow as pa

from lockstep.rules.dedup import PASS, Record, judge, kept, retained
from lockstep.rules.dedup import path as rules_path
from lockstep.rules.watermarks import EventClock
from lockstep.spark import dedup_run as dedup
from lockstep.spark.dedup_judge import RECORD_COLUMNS
from lockstep.spark.dedup_run import _dedup, _dedup_on_driver
from lockstep.spark.state_read import Loaded
from lockstep.spec import parse_spec

GOOD = ("value binary, key binary, topic string, partition int, offset bigint, error string, "
        "__ls_key string, __ls_event_ms bigint, __ls_key_group int")
LOADED = "__ls_key string, __ls_event_ms bigint, __ls_key_group int"


def state(ttl_s: int):
    return parse_spec({"name": "d", "source": {"topics": ["in"]}, "transform": "lockstep_examples.orders:parse",
                       "sink": {"topic": "out", "dead_letter_topic": "dlq"}, "checkpoints": {"store": "s3://lockstep/d"},
                       "state": {"key_groups": 4, "event_time": {"column": "created_at"},
                                 "dedup": {"key": "order_id", "ttl": f"{ttl_s}s", "duplicates": "dead_letter"}}},
                      "d.yaml").state


def inputs(rng: random.Random, ttl: int, keys: int, apart: bool) -> tuple[list[tuple], list[tuple]]:
    """Records and held times of ``keys`` keys; ``apart``: a key's records two TTLs apart (most pass)."""
    records, held = [], []
    offsets = [0, 0, 0]
    for k in range(keys):
        key, base = f"k{k}", rng.randint(0, 5 * ttl)
        if rng.random() < 0.5:
            held += [(key, base + rng.randint(-2 * ttl, 3 * ttl), k % 4) for _ in range(rng.randint(1, 3))]
        for i in range(rng.randint(1, 5)):
            p = rng.randrange(3)
            event = base + (2 * ttl * i if apart else rng.choice([0, rng.randint(-ttl, ttl), rng.randint(-3 * ttl, 3 * ttl)]))
            records.append((b"v", None, "in", p, offsets[p], None, key, event, k % 4))
            offsets[p] += 1
    return records, held


def main(url: str, seed: int) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    rng = random.Random(seed)
    report: dict[str, object] = {"differ": [], "paths": {}, "rounds": 0, "marked": []}
    taken: dict[str, int] = report["paths"]  # type: ignore[assignment]
    # The last round's keys send records two TTLs apart: more pass than are copies.
    for n, (ttl_s, before, apart) in enumerate(((10, None, False), (60, 100_000, False), (1, 3_000, False),
                                                (30, None, True))):
        ttl, after = ttl_s * 1000, None if before is None else before + 30_000
        records, held = inputs(rng, ttl, 150, apart)
        live = [h for h in held if retained(h[1], ttl, before)]  # as the run loads its base
        by_key: dict[str, list[Record]] = {}
        for row in records:
            by_key.setdefault(row[6], []).append(Record(row[7], row[2], row[3], row[4]))
        want: dict[tuple, str | None] = {}
        passed: dict[str, list[Record]] = {}
        for key, rs in by_key.items():
            mine = [t for k, t, _ in live if k == key]
            verdicts = judge(rs, mine, ttl, before)
            want.update({(r.topic, r.partition, r.offset): None if v == PASS else v for r, v in verdicts.items()})
            passed[key] = [r for r, v in verdicts.items() if v == PASS]
            fresh = [r for r, v in verdicts.items() if v != "late"]
            if fresh:
                path = rules_path(fresh, mine, ttl)
                taken[path] = taken.get(path, 0) + 1
        good, loaded = spark.createDataFrame(records, GOOD), spark.createDataFrame(live, LOADED)
        output, new_state, frames = _dedup(state(ttl_s), EventClock(before, after, {}, ()), good, loaded)
        got = {(r["topic"], r["partition"], r["offset"]): r["error"] for r in output.collect()}
        rows = sorted((r["__ls_key"], r["__ls_event_ms"]) for r in new_state.collect())
        for frame in frames:
            frame.unpersist()
        # every row: the loaded ones too, less what the new watermark lets go
        expected = sorted([*((k, t) for k, ps in passed.items() for t in kept([], ps, ttl, after)),
                           *((k, t) for k, t, _ in live if retained(t, ttl, after))])
        report["differ"] += [f"ttl {ttl_s}s {k}: {got.get(k)} (rule: {v})"  # type: ignore[operator]
                             for k, v in want.items() if got.get(k, "missing") != v]
        if rows != expected:
            report["differ"].append(f"ttl {ttl_s}s: state "  # type: ignore[attr-defined]
                                    f"{sorted(set(rows) ^ set(expected))[:10]}")
        report["rounds"] = int(report["rounds"]) + 1  # type: ignore[call-overload]
        # The driver's: the same records collected narrow, the rows loaded as the driver holds them; every
        # other round with its marks kept on the server whatever their size.
        dedup.MARKS_INLINE_BYTES = 0 if n % 2 else 8 << 20
        narrow = pa.table({c: pa.array([r[i] for r in records], t) for c, i, t in zip(
            RECORD_COLUMNS, (6, 8, 7, 2, 3, 4), (pa.string(), pa.int32(), pa.int64(), pa.string(), pa.int32(), pa.int64()),
            strict=True)})
        rows_loaded = pa.table({"__ls_key": pa.array([h[0] for h in live], pa.string()),
                                "__ls_event_ms": pa.array([h[1] for h in live], pa.int64()),
                                "__ls_key_group": pa.array([h[2] for h in live], pa.int32())})
        on_driver = Loaded(loaded, selected={0: rows_loaded})
        output, added, marked = _dedup_on_driver(spark, state(ttl_s), EventClock(before, after, {}, ()), good, narrow,
                                                 on_driver)
        got = {(r["topic"], r["partition"], r["offset"]): r["error"] for r in output.collect()}
        report["differ"] += [f"driver, ttl {ttl_s}s {k}: {got.get(k)} (rule: {v})"  # type: ignore[operator]
                             for k, v in want.items() if got.get(k, "missing") != v]
        added_rows = sorted(zip(added["__ls_key"].to_pylist(), added["__ls_event_ms"].to_pylist(), strict=True))
        expected = sorted((k, t) for k, ps in passed.items() for t in kept([], ps, ttl, after))
        if added_rows != expected:
            report["differ"].append(f"driver, ttl {ttl_s}s: state "  # type: ignore[attr-defined]
                                    f"{sorted(set(added_rows) ^ set(expected))[:10]}")
        report["marked"].append(marked)  # type: ignore[attr-defined]
        report.setdefault("late", 0)
        report["late"] = int(report["late"]) + sum(v == "late" for v in want.values())  # type: ignore[call-overload]
    print(json.dumps(report))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
