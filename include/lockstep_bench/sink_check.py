"""Every throughput run's sink, read back: what a ``read_committed`` consumer sees, checked record by record.

A competitor's own count is what it says about itself; the sink is what it did. After each run of the main race,
the scaling runs and the fixed-cost runs, the runner reads the run's sink topic to its last stable offsets and
checks it against the input:

* **Input.** ``lockstep_dev.datagen.produce_orders`` sends order ``i`` to partition ``i % partitions``, so the
  record at offset ``o`` of partition ``p`` is order ``o * partitions + p`` (one producer, in order).
* **What must be there.** The benchmark transform keeps an order when its amount (``(i * 7919 % 30000) / 100``,
  ``datagen.order``) is at least ``lockstep_examples.bench.MIN_AMOUNT``; the identity transform keeps all.
  Every competitor writes the source partition and offset as headers (``lockstep.model.output_contract``), so
  each output record names its input.
* **The check.** Every kept input seen exactly once, nothing else (`tally`, pure). A sink without the headers
  (``kafka-producer-perf-test``'s own records) is checked by its count.
"""
from __future__ import annotations

__all__ = ["SinkCheck", "expected", "read_back", "tally"]

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: ``datagen.order``'s amount: ``round((i * AMOUNT_STEP % AMOUNT_MOD) / 100, 2)``.
AMOUNT_STEP, AMOUNT_MOD = 7919, 30000


@dataclass(frozen=True)
class SinkCheck:
    """What the sink held against what it should."""

    records: int  # output records read (read_committed)
    expected: int
    missing: int = 0
    duplicates: int = 0
    unexpected: int = 0
    #: no headers to name inputs by: only the count was compared
    by_count: bool = False

    @property
    def exact(self) -> bool:
        return self.records == self.expected and not (self.missing or self.duplicates or self.unexpected)

    def summary(self) -> str:
        if self.exact:
            return f"exact: {self.records:,} records" + (" (by count)" if self.by_count else "")
        return (f"NOT exact: {self.records:,} read, {self.expected:,} expected; {self.missing:,} missing, "
                f"{self.duplicates:,} duplicated, {self.unexpected:,} unexpected")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "exact": self.exact}


def expected(records: int, partitions: int, keep_all: bool = False) -> list[np.ndarray]:
    """Per partition, whether each input offset has an output (the transform keeps that order)."""
    from lockstep_examples.bench import MIN_AMOUNT

    out = []
    for p in range(partitions):
        n = records // partitions + (1 if p < records % partitions else 0)
        i = np.arange(n, dtype=np.int64) * partitions + p
        out.append(np.ones(n, dtype=bool) if keep_all else (i * AMOUNT_STEP % AMOUNT_MOD) >= round(MIN_AMOUNT * 100))
    return out


def tally(want: Sequence[np.ndarray], seen: Sequence[np.ndarray], records: int, unattributed: int = 0) -> SinkCheck:
    """``seen[p][o]``: how often an output named input offset ``o`` of partition ``p`` (arrays may be longer or
    shorter than ``want``'s); ``unattributed``: outputs naming no input of the run (another partition, no
    headers)."""
    missing = duplicates = 0
    unexpected = unattributed
    total = 0
    for p, w in enumerate(want):
        s = np.zeros(len(w), dtype=np.int64)
        got = seen[p] if p < len(seen) else np.zeros(0, dtype=np.int64)
        s[:min(len(w), len(got))] = got[:len(w)]
        unexpected += int(got[len(w):].sum())
        total += int(w.sum())
        missing += int(np.count_nonzero(w & (s == 0)))
        duplicates += int(np.clip(s - 1, 0, None)[w].sum())
        unexpected += int(s[~w].sum())
    return SinkCheck(records=records, expected=total, missing=missing, duplicates=duplicates, unexpected=unexpected)


def read_back(bootstrap: str, topic: str, want: Sequence[np.ndarray] | None, count: int | None = None,
              timeout_s: float = 1800, starts: dict[int, int] | None = None) -> SinkCheck:
    """Read ``topic`` from ``starts`` (its offsets before the run, when earlier runs wrote to it; the start
    by default) to its last stable offsets and check it against ``want`` (`expected`), or, with ``want``
    None, its record count against ``count``."""
    from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION
    from lockstep_bench import workloads

    ends = workloads.end_offsets(bootstrap, topic)
    parts = len(want) if want is not None else 0
    seen = [bytearray(len(w) + 1) for w in (want or [])]
    unattributed = 0

    def take(msg: Any) -> None:
        nonlocal unattributed
        p = o = None
        for key, value in msg.headers() or []:
            if key == SOURCE_PARTITION and value is not None:
                p = int(value)
            elif key == SOURCE_OFFSET and value is not None:
                o = int(value)
        if p is None or o is None or not 0 <= p < parts:
            unattributed += 1
            return
        row = seen[p]
        if o >= len(row):
            unattributed += 1
            return
        if row[o] < 255:
            row[o] += 1

    n, _ = workloads.read_committed(bootstrap, topic, starts or {}, ends, take=None if want is None else take,
                                    timeout_s=timeout_s)
    if want is None:
        return SinkCheck(records=n, expected=count or 0, by_count=True)
    return tally(want, [np.frombuffer(bytes(s), dtype=np.uint8).astype(np.int64) for s in seen], n, unattributed)
