"""The formats benchmark's decisions without services: the Avro input is the JSON input's orders, the filter's
expected count, the perf tools' shares, the sink sample's check, and the report's arithmetic and the
"Formats" section docs/BENCHMARKS.md takes from the page (lockstep_bench.formats, formats_report)."""
from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest

from lockstep_bench import formats, formats_report
from lockstep_bench.measure import RunFailed
from lockstep_examples.bench import ENRICHED_SCHEMA, MIN_AMOUNT, ORDER_SCHEMA


def test_the_avro_input_holds_the_json_inputs_orders_field_for_field() -> None:
    write = formats.avro_payload_writer()
    schema = fastavro.parse_schema(ORDER_SCHEMA)
    for i in (0, 1, 2, 996, 997, 29_999, 30_000, 9_999_999):
        assert formats.avro_record(i) == formats.order_record(i)
        assert fastavro.schemaless_reader(io.BytesIO(write(formats.avro_record(i))), schema, None) == \
            formats.order_record(i)
    assert [f["name"] for f in ENRICHED_SCHEMA["fields"]] == [f["name"] for f in ORDER_SCHEMA["fields"]] + ["amount_cents"]


@pytest.mark.parametrize("records", [0, 1, 2_999, 30_000, 30_001, 95_432])
def test_kept_is_the_filters_exact_count(records: int) -> None:
    assert formats.kept(records) == sum(1 for i in range(records) if formats.order_record(i)["amount"] >= MIN_AMOUNT)


def test_the_perf_tools_share_every_record() -> None:
    assert formats.shares(10, 3) == [4, 3, 3]
    assert formats.shares(8, 2) == [4, 4]
    assert sum(formats.shares(10_000_000, 7)) == 10_000_000


def enriched(i: int) -> dict:
    o = formats.order_record(i)
    return {**o, "amount_cents": round(o["amount"] * 100)}


def test_check_values_accepts_the_transforms_output_and_names_what_is_wrong() -> None:
    good = [enriched(i) for i in range(200) if formats.order_record(i)["amount"] >= MIN_AMOUNT]
    assert formats.check_values(good) == []
    dropped = next(i for i in range(200) if formats.order_record(i)["amount"] < MIN_AMOUNT)
    assert "< 30" in formats.check_values([enriched(dropped)])[0]
    assert "is not" in formats.check_values([{**good[0], "amount_cents": 1}])[0]


def test_a_sink_that_is_not_exact_fails_the_run() -> None:
    race = formats.FormatsRace.__new__(formats.FormatsRace)
    assert race._verdict("x", {"found": 3, "how": "count"}, [])["exact"]
    with pytest.raises(RunFailed, match="NOT exact: 2 committed"):
        race._verdict("x", {"found": 2, "how": "count"}, ["2 committed records in the sink, the filter keeps 3"])


def run(name: str, rate: float, repeat: int, **inner) -> dict:
    return {"pipeline": name, "records": 1000, "partitions": 8, "wall_s": 1000 / rate, "records_per_s": rate,
            "peak_rss_mb": 100.0, "cpu_s": 5.0, "broker_cpu_s": 1.0, "connect_server_cpu_s": 3.0, "repeat": repeat,
            "inner": inner, "check": {"exact": True, "summary": "sink exact", "found": 1}}


def results() -> dict:
    runs = []
    for r, (avro, js, perf, own) in enumerate(((300.0, 200.0, 500.0, 800.0), (320.0, 180.0, 400.0, 700.0))):
        runs += [run(formats.LOCKSTEP_AVRO, avro, r, transactions=2, spark_seconds=2.0),
                 run(formats.LOCKSTEP_JSON, js, r, transactions=2, spark_seconds=3.0),
                 run(formats.PERF, perf, r, producers=2, tool_records_per_s=own, first_start_to_last_end_s=2.0)]
    return {"settings": {"records": 1000, "partitions": 8, "repeats": 2}, "started_at": "2026-11-27 04:00:00 UTC",
            "commit": "abc1234", "seconds": 60, "environment": {"cpus": 2},
            "race": {"input": {"schema_id": 1, "avro_record_bytes": 125.0, "json_record_bytes": 205.0, "kept": 900,
                               "avro_records_per_s": 100_000, "json_records_per_s": 110_000},
                     "warm_up": [], "runs": runs, "producers": 2,
                     "parts": [{"part": "read", "noop_s": 1.0, "rows": 1000, "tasks": 2, "connect_server_cpu_s": 1.0},
                               {"part": formats.PARTS[2], "noop_s": 2.0, "rows": 1000, "tasks": 2,
                                "connect_server_cpu_s": 4.0}]}}


def test_summary_ratios_are_medians_measured_side_by_side() -> None:
    sm = formats_report.summary(results())
    assert sm["ratios"]["avro_vs_perf"] == pytest.approx(310 / 450, abs=1e-3)
    assert sm["ratios"]["avro_vs_perf_tools_own"] == pytest.approx(310 / 750, abs=1e-3)
    assert sm["ratios"]["json_vs_perf"] == pytest.approx(190 / 450, abs=1e-3)
    assert sm["met"] is True and sm["exact"] is True and sm["producers"] == 2


def test_the_page_carries_its_figures_and_the_benchmarks_section_states_them(tmp_path: Path) -> None:
    page = tmp_path / "BENCHMARKS-formats.md"
    formats_report.write(results(), page)
    text = page.read_text()
    assert "**Target (issue 40): Lockstep with Avro ≥ 0.5× the perf tools — met: 0.69×**" in text
    assert "| read + Avro decode + transform + encode | 2.0 | 500 | 4.0 | 4000.00 | 3000.00 |" in text
    section = formats_report.section(page)
    assert section.startswith("## Formats")
    assert "2026-11-27 04:00:00 UTC, commit abc1234" in section and "**0.69×**" in section
    assert "kafka-producer-perf-test × 2" in section
    assert "has not been run" in formats_report.section(tmp_path / "missing.md")


def test_a_summary_survives_the_page_round_trip(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    formats_report.write(results(), page)
    assert formats_report.read_summary(page) == json.loads(json.dumps(formats_report.summary(results())))


def test_make_bench_keeps_the_formats_section_and_the_committed_page_has_it(tmp_path: Path) -> None:
    """docs/BENCHMARKS.md's "Formats" comes from docs/BENCHMARKS-formats.md, so `make bench`, which does not
    measure it, writes it again; the committed BENCHMARKS.md holds exactly what the next `make bench` writes."""
    from lockstep_bench import report
    from lockstep_bench.results import Results

    root = Path(__file__).resolve().parents[2]
    section = formats_report.section(root / formats_report.PAGE)
    assert formats_report.read_summary(root / formats_report.PAGE) is not None  # the committed page has its figures
    res = Results(settings={"records": 1000, "partitions": 4, "repeats": 1, "partition_records": 1000},
                  environment={"cpus": 2}, seconds=60.0)
    out = tmp_path / "BENCH.md"
    report.write(res, out)
    generated = out.read_text()
    assert f"{section}\n\n## Freshness under sustained load" in generated
    assert generated.index("## Keyed state") < generated.index("## Formats")
    assert f"{section}\n\n## Freshness under sustained load" in (root / "docs" / "BENCHMARKS.md").read_text()
