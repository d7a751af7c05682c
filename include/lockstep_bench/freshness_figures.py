"""The freshness race's figures from what its producer and watcher recorded (pure: numpy, no services).

The producer's tick table dates every input record: partition ``p`` had been sent ``cum[p][k]`` records by
the end of tick ``k`` at ``times[k]``, so the record at offset ``o`` was produced at the first tick whose count
passed ``o``. The watcher recorded when each output record became visible to a ``read_committed`` consumer,
by its source partition and offset. A record's latency is the difference. Which source offsets an engine must
write is known from the producer's pool (``lockstep_bench.freshness_load.pool_index``) and the transform's
filter, so the check is exact: every kept record seen once, nothing else.

**Bounded lag.** An engine sustains a rate when every record of the load arrived within the settle time after
the load stopped and its lag did not grow while the load ran: the p99 latency of the records produced in the
last fifth of the measured period is at most `GROWTH` times that of the first fifth plus `SLACK_S`.
"""
from __future__ import annotations

__all__ = ["GROWTH", "SLACK_S", "Ticks", "expected_records", "figures", "over_the_load", "percentiles", "produced_at",
           "sustained"]

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: How much the last fifth's p99 may exceed the first fifth's before the lag counts as growing.
GROWTH = 1.5
SLACK_S = 2.0
PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class Ticks:
    """The producer's record of when it sent what (``freshness_load.produce``'s output)."""

    started: float
    seconds: float
    partitions: int
    ends: tuple[int, ...]
    times: np.ndarray  # (ticks,)
    cum: np.ndarray  # (partitions, ticks): records sent to each partition by the end of each tick

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Ticks:
        table = np.asarray(doc["ticks"], dtype=np.float64).reshape(-1, 1 + doc["partitions"])
        return cls(float(doc["started"]), float(doc["seconds"]), int(doc["partitions"]),
                   tuple(int(e) for e in doc["ends"]), table[:, 0].copy(), table[:, 1:].T.astype(np.int64))


def produced_at(ticks: Ticks, partition: int, offsets: np.ndarray) -> np.ndarray:
    """When the records at ``offsets`` of ``partition`` were produced (the time of the tick that sent them)."""
    index = np.searchsorted(ticks.cum[partition], offsets, side="right")
    if len(index) and index.max() >= len(ticks.times):
        raise ValueError(f"partition {partition}: offsets beyond what the producer sent ({ticks.ends[partition]})")
    return ticks.times[index]


def sustained(first_p99: float | None, last_p99: float | None, missing: int) -> bool:
    if missing or first_p99 is None or last_p99 is None:
        return False
    return last_p99 <= GROWTH * first_p99 + SLACK_S


def expected_records(kept: np.ndarray, ends: Sequence[int], partitions: int, pool: int) -> int:
    """How many output records the producer's ``ends`` (records sent to each partition) must give: those of its
    pool the transform keeps (``kept[i]``)."""
    total = 0
    for p, end in enumerate(ends):
        offsets = np.arange(end, dtype=np.int64)
        total += int(kept[(offsets * partitions + p) % pool].sum())
    return total


def percentiles(values: np.ndarray) -> dict[str, float | None]:
    if not len(values):
        return {**{f"p{q}": None for q in PERCENTILES}, "max": None, "mean": None}
    return {**{f"p{q}": round(float(np.percentile(values, q)), 3) for q in PERCENTILES},
            "max": round(float(values.max()), 3), "mean": round(float(values.mean()), 3)}


def over_the_load(lat: np.ndarray, at: np.ndarray, measured_from: float, measured_to: float, started: float,
                  bucket_s: float = 5.0) -> dict[str, Any]:
    """What the latencies ``lat`` of results dated ``at`` (a record's production, a window's end) say over the
    measured load: their percentiles, the p99 of the first and the last fifth (`sustained`), and the series of
    p50 and p99 in ``bucket_s`` steps (seconds into the load from ``started``)."""
    fifth = (measured_to - measured_from) / 5
    series = []
    if len(at):
        edges = np.arange(measured_from, measured_to + bucket_s, bucket_s)
        which = np.digitize(at, edges) - 1
        for b in range(len(edges) - 1):
            chunk = lat[which == b]
            if len(chunk):
                series.append([round(float(edges[b] - started), 1), round(float(np.percentile(chunk, 50)), 3),
                               round(float(np.percentile(chunk, 99)), 3)])
    return {"latency_s": percentiles(lat),
            "first_fifth_p99_s": percentiles(lat[at < measured_from + fifth])["p99"],
            "last_fifth_p99_s": percentiles(lat[at >= measured_to - fifth])["p99"], "series": series}


def figures(ticks: Ticks, seen: Sequence[np.ndarray], kept: np.ndarray, pool: int, warm_up_s: float,
            bucket_s: float = 5.0) -> dict[str, Any]:
    """Exactness and latency of one run. ``seen[p][o]``: when source offset ``o`` of partition ``p`` became
    visible (NaN: never); ``kept[i]``: the transform keeps pool record ``i``; records produced in the first
    ``warm_up_s`` count for exactness but not for latency."""
    measured_from = ticks.started + warm_up_s
    measured_to = ticks.started + ticks.seconds
    lat_all, produced_all = [], []
    expected = found = missing = unexpected = 0
    for p in range(ticks.partitions):
        end = ticks.ends[p]
        offsets = np.arange(end, dtype=np.int64)
        want = kept[(offsets * ticks.partitions + p) % pool].astype(bool)
        row = np.full(end, np.nan)
        got = seen[p] if p < len(seen) else np.array([])
        row[:min(end, len(got))] = got[:end]
        extra = got[end:]
        unexpected += int(np.count_nonzero(~np.isnan(extra)))
        visible = ~np.isnan(row)
        expected += int(want.sum())
        found += int(np.count_nonzero(want & visible))
        missing += int(np.count_nonzero(want & ~visible))
        unexpected += int(np.count_nonzero(~want & visible))
        ok = want & visible
        at = produced_at(ticks, p, offsets[ok])
        lat_all.append(row[ok] - at)
        produced_all.append(at)
    latency = np.concatenate(lat_all) if lat_all else np.array([])
    produced = np.concatenate(produced_all) if produced_all else np.array([])
    measured = produced >= measured_from
    lat = latency[measured]
    load = over_the_load(lat, produced[measured], measured_from, measured_to, ticks.started, bucket_s)
    return {
        "expected": expected, "found": found, "missing": missing, "unexpected": unexpected,
        "exact": missing == 0 and unexpected == 0,
        "measured_records": int(len(lat)), **load,
        "sustained": sustained(load["first_fifth_p99_s"], load["last_fifth_p99_s"], missing),
        "latest_visible_after_load_s": round(float(np.nanmax(latency + produced) - measured_to), 3) if len(latency) else None,
    }
