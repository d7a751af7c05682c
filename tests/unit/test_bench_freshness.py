"""The freshness race's figures (``lockstep_bench.freshness_figures``) on hand-made tick tables and sightings:
each record dated by the tick that sent it, missing, duplicated and unexpected records found, and the lag
called growing when it grows."""
from __future__ import annotations

import numpy as np
import pytest

from lockstep_bench import freshness_report
from lockstep_bench.freshness_figures import Ticks, figures, produced_at, sustained

POOL = 10


def _ticks(per_tick: list[tuple[int, int]], started: float = 1000.0, step: float = 1.0,
           seconds: float | None = None) -> Ticks:
    """Two partitions; ``per_tick``: records sent to each in each tick, a tick every ``step`` s."""
    rows, cum = [], [0, 0]
    for n, (a, b) in enumerate(per_tick):
        cum = [cum[0] + a, cum[1] + b]
        rows.append([started + n * step, *cum])
    return Ticks.from_json({"started": started, "seconds": seconds or len(per_tick) * step, "partitions": 2,
                            "ends": cum, "ticks": rows})


def test_a_record_is_dated_by_the_tick_that_sent_it() -> None:
    t = _ticks([(2, 1), (3, 0), (1, 4)])
    assert produced_at(t, 0, np.array([0, 1, 2, 4, 5])).tolist() == [1000.0, 1000.0, 1001.0, 1001.0, 1002.0]
    assert produced_at(t, 1, np.array([0, 1, 4])).tolist() == [1000.0, 1002.0, 1002.0]
    with pytest.raises(ValueError, match="beyond what the producer sent"):
        produced_at(t, 1, np.array([5]))


def _seen(t: Ticks, delay: float, kept: np.ndarray) -> list[np.ndarray]:
    """Every kept record visible ``delay`` s after it was produced, the others never."""
    out = []
    for p in range(2):
        offsets = np.arange(t.ends[p])
        at = produced_at(t, p, offsets) + delay
        want = kept[(offsets * 2 + p) % POOL].astype(bool)
        out.append(np.where(want, at, np.nan))
    return out


def test_latency_is_visibility_minus_production_and_the_check_is_exact() -> None:
    t = _ticks([(5, 5)] * 20)
    kept = np.array([1, 1, 0, 1, 1, 1, 1, 0, 1, 1], dtype=np.uint8)
    f = figures(t, _seen(t, 3.0, kept), kept, POOL, warm_up_s=5)
    assert f["exact"] and f["missing"] == 0 and f["unexpected"] == 0
    assert f["expected"] == f["found"] == 160
    assert f["latency_s"]["p50"] == pytest.approx(3.0) and f["latency_s"]["max"] == pytest.approx(3.0)
    assert f["measured_records"] == 120  # the first 5 s (5 ticks of 10 records, 8 kept) are the warm-up
    assert f["sustained"]


def test_a_missing_and_an_unexpected_record_are_found() -> None:
    t = _ticks([(5, 5)] * 4)
    kept = np.array([1, 1, 0, 1, 1, 1, 1, 0, 1, 1], dtype=np.uint8)
    seen = _seen(t, 1.0, kept)
    seen[0][0] = np.nan  # pool 0, kept: missing
    seen[1][0] = 1010.0  # pool 1 is kept; partition 0 offset 1 is pool 2, filtered out:
    seen[0][1] = 1010.0  # unexpected
    seen[1] = np.concatenate([seen[1], [1020.0]])  # beyond what was sent: unexpected
    f = figures(t, seen, kept, POOL, warm_up_s=0)
    assert not f["exact"] and f["missing"] == 1 and f["unexpected"] == 2
    assert not f["sustained"]


def test_a_growing_lag_is_not_sustained() -> None:
    t = _ticks([(5, 5)] * 50)
    kept = np.ones(POOL, dtype=np.uint8)
    seen = []
    for p in range(2):
        offsets = np.arange(t.ends[p])
        at = produced_at(t, p, offsets)
        seen.append(at + 1.0 + (at - t.started) * 0.5)  # each second of load adds half a second of lag
    f = figures(t, seen, kept, POOL, warm_up_s=0)
    assert f["exact"]
    assert f["last_fifth_p99_s"] > f["first_fifth_p99_s"] * 1.5 + 2
    assert not f["sustained"]
    assert not sustained(2.0, 5.1, 0) and sustained(2.0, 5.0, 0) and not sustained(2.0, 2.0, 1)


def test_the_report_states_the_targets_from_the_runs() -> None:
    def run(engine: str, rate: int, p99: float) -> dict[str, object]:
        return {"engine": engine, "rate": rate, "exact": True, "sustained": True,
                "latency_s": {"p50": p99 / 2, "p95": p99, "p99": p99, "max": p99, "mean": p99 / 2}}

    results = {"race": {"runs": [run("lockstep-airflow", 20_000, 8.0), run("flink-sql", 20_000, 6.0),
                                 run("lockstep-airflow", 100_000, 9.0)]}}
    sm = freshness_report.summary(results)
    assert sm["p99"] == 8.0 and sm["ratio"] == pytest.approx(1.33) and sm["p99_met"] and sm["ratio_met"]
    assert sm["highest"] == {"lockstep-airflow": 100_000, "flink-sql": 20_000}
    results["race"]["runs"][0]["latency_s"]["p99"] = 10.5
    sm = freshness_report.summary(results)
    assert not sm["p99_met"] and not sm["ratio_met"]


def test_make_bench_keeps_the_freshness_section_and_the_committed_page_has_it(tmp_path) -> None:
    """docs/BENCHMARKS.md's "Freshness" comes from docs/BENCHMARKS-freshness.md's summary, so `make bench`, which
    does not measure it, writes it again; the committed BENCHMARKS.md holds exactly what the next one writes."""
    from pathlib import Path

    from lockstep_bench import report
    from lockstep_bench.measure import page_summary
    from lockstep_bench.results import Results

    root = Path(__file__).resolve().parents[2]
    assert page_summary(root / freshness_report.PAGE, freshness_report.SUMMARY_MARK) is not None
    section = freshness_report.section(root / freshness_report.PAGE)
    assert "Measured apart by `make bench-freshness`" in section
    res = Results(settings={"records": 1000, "partitions": 4, "repeats": 1, "partition_records": 1000},
                  environment={"cpus": 2}, seconds=60.0)
    out = tmp_path / "BENCH.md"
    report.write(res, out)
    assert f"{section}\n\n## Making Lockstep faster" in out.read_text()
    assert f"{section}\n\n## Making Lockstep faster" in (root / "docs" / "BENCHMARKS.md").read_text()
