"""The windowed race's decisions without services: the expected windows, every engine's output format,
the sink check, the Flink statements and the report's arithmetic (lockstep_bench.windowed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockstep.spec import load_spec
from lockstep_bench import flink_sql, windowed, windowed_report
from lockstep_bench import workloads as wl
from lockstep_dev.datagen import order

H = windowed.WINDOW_S


def test_input_is_keyed_by_customer_each_partition_in_event_time_order() -> None:
    partitions = 8
    last: dict[int, int] = {}
    for i in range(5000):
        doc = json.loads(order(i))
        assert doc["customer"] == windowed.customer_of(i)
        p = windowed.partition_of(i, partitions)
        assert p == windowed.partition_of(i + windowed.CUSTOMERS, partitions)  # a customer keeps its partition
        assert doc["created_at"] > last.get(p, 0)
        last[p] = doc["created_at"]
    assert set(last) == set(range(partitions))


def test_expected_counts_every_record_once_and_closes_windows_below_the_smallest_partition_watermark() -> None:
    want = windowed.expected(3 * H, 4)
    assert sum(want.counts.values()) == 3 * H
    last_i = {p: max(i for i in range(3 * H) if windowed.partition_of(i, 4) == p) for p in range(4)}
    assert want.final_watermark_s == windowed.EPOCH + min(last_i.values()) - windowed.OUT_OF_ORDERNESS_S
    assert want.closed and all(start + H < want.final_watermark_s for _c, start in want.closed)
    assert any(start + H >= want.final_watermark_s for _c, start in want.counts)  # the last windows stay open
    first = windowed.EPOCH - windowed.EPOCH % H
    # customer-0 appears every 997 s: in the first window from EPOCH on, at EPOCH, EPOCH+997, ...
    assert want.counts[("customer-0", first)] == len(range(0, first + H - windowed.EPOCH, windowed.CUSTOMERS))


def test_every_engines_output_format_parses_to_the_same_window() -> None:
    start = windowed.EPOCH - windowed.EPOCH % H
    lockstep = json.dumps({"customer": "customer-3", "window_start": "2023-11-14T22:00:00Z",
                           "window_end": "2023-11-14T23:00:00Z", "orders": 4}).encode()
    flink = json.dumps({"customer": "customer-3", "window_start": "2023-11-14T22:00:00",
                        "window_end": "2023-11-14T23:00:00", "orders": 4}).encode()
    quix = json.dumps({"start": start * 1000, "end": (start + H) * 1000, "value": 4}).encode()
    assert start == 1_699_999_200  # 2023-11-14T22:00:00Z
    assert windowed.parse_window(b"customer-3", lockstep) == ("customer-3", start, 4)
    assert windowed.parse_window(b"customer-3", flink) == ("customer-3", start, 4)
    assert windowed.parse_window(b"customer-3", quix) == ("customer-3", start, 4)
    with pytest.raises(ValueError, match="without a key"):
        windowed.parse_window(None, quix)


def _all(want: windowed.Expected, which: set) -> list[tuple[str, int, int]]:
    return [(c, s, want.counts[(c, s)]) for c, s in sorted(which)]


def test_check_accepts_the_closed_windows_with_or_without_the_open_ones() -> None:
    want = windowed.expected(3 * H, 4)
    held = windowed.check(want, _all(want, want.closed))
    fired = windowed.check(want, _all(want, set(want.counts)))
    assert held.exact and held.open_emitted == 0 and held.windows == len(want.closed)
    assert fired.exact and fired.open_emitted == len(want.counts) - len(want.closed)


def test_check_names_missing_wrong_duplicated_and_unknown_windows() -> None:
    want = windowed.expected(3 * H, 4)
    rows = _all(want, want.closed)
    missing, wrong = rows[0], rows[1]
    bad = [(wrong[0], wrong[1], wrong[2] + 1), *rows[2:], rows[2], ("customer-9999", wrong[1], 1)]
    verdict = windowed.check(want, bad)
    assert not verdict.exact
    assert verdict.missing == [(missing[0], missing[1])]
    assert verdict.wrong == [(wrong[0], wrong[1], wrong[2] + 1, wrong[2])]
    assert verdict.duplicated == [(rows[2][0], rows[2][1])]
    assert verdict.unknown == [("customer-9999", wrong[1])]
    assert "NOT exact" in verdict.summary() and "1 closed windows missing" in verdict.summary()
    assert not windowed.check(want, []).exact


def test_lockstep_runs_the_same_window_as_the_peers(tmp_path: Path) -> None:
    path = wl.write_spec(tmp_path, "w", "in", "out", 1000, transform=windowed.TRANSFORM, state=windowed.window_state(),
                         remote="sc://localhost:15002")
    spec = load_spec(path)
    assert spec.state is not None and spec.state.window is not None
    assert spec.state.window.size_ms == spec.state.window.slide_ms == H * 1000
    assert spec.state.window.allowed_lateness_ms == 0
    assert spec.state.event_time.out_of_orderness_ms == windowed.OUT_OF_ORDERNESS_S * 1000


def test_flink_window_job_is_a_tumble_over_a_watermarked_bounded_source_into_an_exactly_once_sink() -> None:
    ddl, insert = flink_sql.window_statements("b:9092", "in", "out", {1: 7, 0: 5}, "tx", "g", H, 10)
    src, sink = ddl
    assert "WATERMARK FOR `ts` AS `ts` - INTERVAL '10' SECOND(2)" in src
    assert "'scan.bounded.specific-offsets' = 'partition:0,offset:5;partition:1,offset:7'" in src
    assert "'properties.isolation.level' = 'read_committed'" in src
    assert "'sink.delivery-guarantee' = 'exactly-once'" in sink and "'key.fields' = 'customer'" in sink
    assert f"TUMBLE(TABLE src, DESCRIPTOR(`ts`), INTERVAL '{H}' SECOND(4))" in insert
    assert "COUNT(*) AS `orders`" in insert and "GROUP BY `customer`, window_start, window_end" in insert


def _run(engine: str, wall: float, exact: bool = True) -> dict:
    return {"pipeline": engine, "wall_s": wall, "records_per_s": 1_000_000 / wall, "cpu_s": wall * 1.5,
            "peak_rss_mb": 1000.0, "inner": {"job_seconds": wall - 1}, "repeat": 0,
            "check": {"exact": exact, "windows": 10, "open_emitted": 0,
                      "summary": "exact" if exact else "NOT exact: 2 closed windows missing"}}


def test_report_gives_lockstep_speed_over_each_peer_from_medians() -> None:
    runs = [_run(windowed.LOCKSTEP, w) for w in (10, 12, 30)] + [_run(windowed.FLINK, w) for w in (20, 24, 22)] + \
        [_run(windowed.QUIX, 60, exact=False)]
    table = windowed_report.medians(runs)
    assert table[windowed.LOCKSTEP]["wall_s"] == 12
    assert table[windowed.QUIX]["exact"] is False and table[windowed.FLINK]["exact"] is True
    r = windowed_report.ratios(table)
    assert r[windowed.FLINK] == pytest.approx((1_000_000 / 12) / (1_000_000 / 22))
    text = windowed_report.render({"settings": {"records": 1_000_000, "partitions": 8, "repeats": 3},
                                   "started_at": "now", "race": {"windows": 5, "closed": 4, "runs": runs}})
    assert "NOT EXACT in 0 of 1 runs" in text and "exact in 3 of 3 runs" in text
    assert "run 7, quix-streams: NOT exact: 2 closed windows missing" in text
    assert f"**{r[windowed.FLINK]:.2f}×**" in text
