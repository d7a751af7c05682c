"""The freshness race's windowed pipeline (``lockstep_bench.freshness``): its input and its figures (pure: numpy,
no services).

**The work.** Per customer, the orders in each tumbling window of `WINDOW_S` seconds of event time, with
`OUT_OF_ORDERNESS_S` of out-of-orderness (Flink's watermark delay, Quix's grace, Lockstep's
``out_of_orderness``); one output record per customer and window. The event time is the Kafka record's
timestamp, which the producer sets to the time it sent the record (the tick's, in ms), so a window closes in
real time and its result can be dated like a record's.

**The input.** ``freshness_load.produce --windowed`` sends the race's pool of orders with the customer as the
Kafka key. The record at offset ``o`` of partition ``p`` is pool record ``i = (o * partitions + p) % POOL``
(``freshness_load.pool_index``) and its customer is ``i % customers`` (`customers`: a multiple of the
partitions), so each partition holds customers of its own, as a keyed topic does: Quix windows by the Kafka
key within a partition, and a customer in two partitions would be two windows to it.

**Latency of a window** = the moment its result became visible to a ``read_committed`` consumer minus the
window's end (its last instant of event time, which is also wall time here). No engine can emit a window before
a record ``OUT_OF_ORDERNESS_S`` past its end has been produced, so that is every engine's floor.

**Which windows must arrive.** Those that end at least `MARGIN_S` before the load's final watermark (the
smallest of the partitions' last event times, minus the out-of-orderness): each exactly once with the exact
count. Later windows may arrive too (Lockstep and Flink fire what their watermark passed); each must then be
exact. A window whose start is in the warm-up is checked but left out of the latency.
"""
from __future__ import annotations

__all__ = ["MARGIN_S", "OUT_OF_ORDERNESS_S", "ROW", "WINDOW_S", "Expected", "complete", "customers", "expected",
           "figures"]

from dataclasses import dataclass
from typing import Any

import numpy as np

from lockstep_bench.freshness_figures import Ticks, over_the_load, sustained

WINDOW_S = 5
OUT_OF_ORDERNESS_S = 1
#: How far before the final watermark a window must end to be required of every engine.
MARGIN_S = 1
#: The watcher's row for each window record it sees: customer index (-1: not a customer of the input), window start
#: in epoch seconds, count, when it became visible (epoch seconds); native doubles.
ROW = 4


def customers(partitions: int) -> int:
    """How many customers: about 1,000, a multiple of ``partitions`` so that each partition holds its own."""
    return max(1, 1000 // partitions) * partitions


@dataclass(frozen=True)
class Expected:
    """Every window's exact count, by ``start_s * customers + customer``, and the windows every engine must emit."""

    keys: np.ndarray  # sorted int64 keys
    counts: np.ndarray  # int64, beside keys
    required: np.ndarray  # bool, beside keys
    customers: int
    final_watermark_ms: int

    def count_of(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``self.keys``, found) of each key."""
        pos = np.searchsorted(self.keys, keys)
        pos_ok = np.minimum(pos, max(len(self.keys) - 1, 0))
        found = (pos < len(self.keys)) & (self.keys[pos_ok] == keys) if len(self.keys) else np.zeros(len(keys), bool)
        return pos_ok, found


def expected(ticks: Ticks, pool: int, window_s: int = WINDOW_S, out_of_orderness_s: int = OUT_OF_ORDERNESS_S) -> Expected:
    """The exact result of the load the tick table describes: each record's event time is its tick's time in ms
    (what the producer set), its customer its pool index modulo `customers`."""
    n = customers(ticks.partitions)
    window_ms = window_s * 1000
    parts: list[np.ndarray] = []
    last_ms: list[int] = []
    for p in range(ticks.partitions):
        end = ticks.ends[p]
        if not end:
            continue
        offsets = np.arange(end, dtype=np.int64)
        tick = np.searchsorted(ticks.cum[p], offsets, side="right")
        ts_ms = np.floor(ticks.times[tick] * 1000).astype(np.int64)
        start_s = (ts_ms // window_ms) * window_s
        customer = ((offsets * ticks.partitions + p) % pool) % n
        parts.append(start_s * n + customer)
        last_ms.append(int(ts_ms[-1]))
    if not parts:
        empty = np.array([], dtype=np.int64)
        return Expected(empty, empty, np.array([], dtype=bool), n, 0)
    keys, counts = np.unique(np.concatenate(parts), return_counts=True)
    # A partition that got nothing holds every watermark back: no window is required then.
    final_ms = min(last_ms) - out_of_orderness_s * 1000 if len(last_ms) == ticks.partitions else 0
    ends_ms = (keys // n + window_s) * 1000
    return Expected(keys, counts.astype(np.int64), ends_ms + MARGIN_S * 1000 <= final_ms, n, int(final_ms))


def figures(ticks: Ticks, rows: np.ndarray, want: Expected, warm_up_s: float, window_s: int = WINDOW_S,
            bucket_s: float = 5.0) -> dict[str, Any]:
    """Exactness and latency of one windowed run. ``rows``: the watcher's (customer, start, count, visible) per
    window record it saw, in the order it saw them."""
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, ROW)
    n = want.customers
    customer, start, count, visible = rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64), \
        rows[:, 2].astype(np.int64), rows[:, 3]
    known_customer = (customer >= 0) & (customer < n)
    keys = np.where(known_customer, start * n + customer, -1)
    # The first sighting of each window counts; a later one is a duplicate.
    _, first_index = np.unique(keys, return_index=True)
    first = np.zeros(len(keys), dtype=bool)
    first[first_index] = True
    duplicated = int(np.count_nonzero(~first))
    pos, found_in_input = want.count_of(keys)
    found_in_input &= known_customer
    unknown = int(np.count_nonzero(first & ~found_in_input))
    right = found_in_input & (want.counts[pos] == count) if len(want.keys) else found_in_input
    wrong = int(np.count_nonzero(first & found_in_input & ~right))
    seen = np.zeros(len(want.keys), dtype=bool)  # by key, whatever the count (a wrong count is counted as wrong)
    ok = first & right
    if len(want.keys):
        seen[pos[first & found_in_input]] = True
    missing = int(np.count_nonzero(want.required & ~seen))
    required = int(want.required.sum())
    found = int(np.count_nonzero(ok & want.required[pos])) if len(want.keys) else 0
    open_emitted = int(np.count_nonzero(ok & ~want.required[pos])) if len(want.keys) else 0
    exact = missing == 0 and duplicated == 0 and unknown == 0 and wrong == 0 and required > 0

    measured_from = ticks.started + warm_up_s
    measured_to = ticks.started + ticks.seconds
    ends = (start + window_s).astype(np.float64)
    measured = ok & want.required[pos] & (start >= measured_from) if len(want.keys) else ok
    lat = visible[measured] - ends[measured]
    load = over_the_load(lat, ends[measured], measured_from, measured_to, ticks.started, bucket_s)
    latest = visible[ok & want.required[pos]] if len(want.keys) else np.array([])
    return {
        "expected": required, "found": found, "missing": missing, "unexpected": unknown,
        "wrong": wrong, "duplicated": duplicated, "open_emitted": open_emitted, "windows_seen": int(len(rows)),
        "exact": exact,
        "measured_records": int(len(lat)), "measured_windows": int(len(np.unique(start[measured]))), **load,
        "sustained": sustained(load["first_fifth_p99_s"], load["last_fifth_p99_s"], missing) and exact,
        "latest_visible_after_load_s": round(float(latest.max() - measured_to), 3) if len(latest) else None,
    }


def complete(rows: np.ndarray, want: Expected) -> bool:
    """Whether every required window has been seen (by key, whatever its count): the harness's wait."""
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, ROW)
    if not want.required.any():
        return True
    n = want.customers
    customer, start = rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64)
    keys = np.where((customer >= 0) & (customer < n), start * n + customer, -1)
    return bool(np.isin(want.keys[want.required], keys).all())
