"""The throughput runs' sink check (``lockstep_bench.sink_check``): which inputs must have an output, and a sink
with a missing, a duplicated and an unexpected record found out, on hand-made sightings."""
from __future__ import annotations

import json

import numpy as np

from lockstep_bench.sink_check import expected, tally
from lockstep_dev.datagen import order
from lockstep_examples.bench import transform_value


def test_what_must_be_there_is_what_the_transform_keeps_of_each_partitions_inputs() -> None:
    records, partitions = 1_003, 4
    want = expected(records, partitions)
    assert [len(w) for w in want] == [251, 251, 251, 250]
    for p, w in enumerate(want):
        for o, keep in enumerate(w):
            # produce_orders sends order i to partition i % partitions: offset o of p is order o * partitions + p
            assert keep == (transform_value(order(o * partitions + p)) is not None), (p, o)
    assert all(w.all() for w in expected(records, partitions, keep_all=True))
    dropped = [i for i in range(records) if json.loads(order(i))["amount"] < 30]
    assert dropped and sum(int((~w).sum()) for w in want) == len(dropped)  # the ~10% the filter drops


def test_an_exact_sink_and_one_with_every_kind_of_fault() -> None:
    want = [np.array([True, False, True]), np.array([True, True])]
    exact = tally(want, [np.array([1, 0, 1]), np.array([1, 1])], records=4)
    assert exact.exact and exact.expected == 4 and exact.summary() == "exact: 4 records"
    bad = tally(want, [np.array([2, 1, 0]), np.array([1, 1, 0, 1])], records=6, unattributed=1)
    assert not bad.exact
    # partition 0: offset 0 twice (1 duplicate), offset 1 filtered but there (unexpected), offset 2 missing;
    # partition 1: offset 3 beyond the input (unexpected); and one output naming no input (unexpected).
    assert (bad.duplicates, bad.missing, bad.unexpected) == (1, 1, 3)
    assert "NOT exact: 6 read, 4 expected" in bad.summary()
