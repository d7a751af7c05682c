"""The lag-fleet bench's decisions and report (`lockstep_bench.lag_fleet`, `lag_fleet_report`), without services."""
from __future__ import annotations

from lockstep_bench import freshness, lag_fleet, lag_fleet_report


def _row(name: str, p99: float | None, exact: bool = True) -> dict:
    return {"pipeline": name, "records": 100_000, "expected": 80_000, "found": 80_000 if exact else 79_990,
            "duplicates": 0, "unexpected": 0, "wrong": 0, "exact": exact, "sustained": exact, "dag_runs": 12,
            "latency_s": {"p50": 3.0, "p95": 5.0, "p99": p99, "max": (p99 or 0) + 1, "mean": 3.2}}


def test_airflow_s_processes_are_told_apart_by_their_command_line() -> None:
    assert freshness.component_of(["/venv/bin/python", "/venv/bin/airflow", "triggerer"]) == "triggerer"
    assert freshness.component_of(["airflow", "scheduler"]) == "scheduler"
    assert freshness.component_of(["/venv/bin/python3", "/venv/bin/airflow", "dag-processor"]) == "dag-processor"
    assert freshness.component_of(["airflow", "api-server", "--port", "8080"]) == "api-server"
    assert freshness.component_of(["airflow api_server -- host:127.0.0.1 port:27190"]) == "api-server"
    assert freshness.component_of(["airflow worker -- LocalExecutor"]) == "tasks and the rest"
    assert freshness.component_of(["/venv/bin/airflow", "standalone"]) == "tasks and the rest"


def test_only_runs_started_during_the_load_count_against_the_idle_pipelines() -> None:
    before = {"a": 1, "b": 1}
    assert lag_fleet.idle_runs_started(before, {"a": 1, "b": 1}) == {}
    assert lag_fleet.idle_runs_started(before, {"a": 1, "b": 3, "c": 1}) == {"b": 2, "c": 1}


def test_the_target_needs_every_fed_pipeline_exact_within_15_s_and_no_idle_run() -> None:
    good = [_row("f0", 4.0), _row("f1", 14.9)]
    v = lag_fleet.verdict(good, {})
    assert v["met"] and (v["within"], v["worst_p99_s"], v["median_p99_s"]) == (2, 14.9, 9.45)
    assert not lag_fleet.verdict([_row("f0", 4.0), _row("f1", 15.1)], {})["met"]
    assert not lag_fleet.verdict([_row("f0", 4.0, exact=False)], {})["met"]
    assert not lag_fleet.verdict(good, {"idle-7": 1})["met"]
    assert not lag_fleet.verdict([], {})["met"]


def _results(rows: list[dict], idle: dict[str, int]) -> dict:
    settings = lag_fleet.LagFleetSettings().to_json()
    load = {"rows": rows, "idle_runs_started": idle, "wall_s": 150.0,
            "cpu_s": {"airflow": 90.0, "spark-connect": 60.0, "scheduler": 20.0, "triggerer": 6.0},
            "cpu_cores": {"airflow": 0.6, "spark-connect": 0.4, "scheduler": 0.13, "triggerer": 0.04},
            "loops": {"loops": 300, "median_ms": 120.0, "p95_ms": 700.0, "max_ms": 2000.0},
            "load_average": [3.0, 2.5, 2.0], "verdict": lag_fleet.verdict(rows, idle)}
    return {"settings": settings, "started_at": "2026-12-04 19:00:00 UTC", "commit": "abc1234", "seconds": 900,
            "race": {"setup": {"airflow_db": "postgres", "airflow_and_parse_s": 60.0},
                     "start": {"seconds": 240.0, "runs": 200, "failed_runs": 0, "load_average": [6.0, 4.0, 2.0]},
                     "load": load}}


def test_the_report_states_the_verdict_each_fed_pipeline_and_the_cost() -> None:
    text = lag_fleet_report.render(_results([_row("f0", 4.0), _row("f1", 16.0, exact=False)], {"idle-3": 1}))
    assert "**NOT met**. 1 of 2 fed pipelines within it" in text
    assert "1 of 2 sinks exact" in text and "started 1 runs during the load (idle-3: 1)" in text
    assert "| f0 | 100,000 | 3.00 | 5.00 | 4.00 | 5.00 | 12 | exact |" in text
    assert "NOT exact: 79,990 of 80,000 found" in text
    assert "| — its triggerer | 6.0 | 0.04 |" in text and "| — its task processes and the rest | 64.0 | 0.43 |" in text
    assert "median 120 ms, p95 700 ms" in text
    met = lag_fleet_report.render(_results([_row("f0", 4.0)], {}))
    assert "**met**" in met and "started 0 runs during the load." in met


def test_a_run_that_did_not_reach_its_load_says_why() -> None:
    results = _results([], {})
    results["race"] = {"error": "3 of 200 pipelines had no successful first checkpoint"}
    text = lag_fleet_report.render(results)
    assert "did not reach the load: 3 of 200 pipelines" in text


def test_the_main_page_s_section_is_written_again_from_the_lag_fleet_page_and_nothing_else_moves(tmp_path) -> None:
    page = tmp_path / "BENCHMARKS-lag-fleet.md"
    main = tmp_path / "BENCHMARKS.md"
    assert "has not been run for this page" in lag_fleet_report.section(page)
    main.write_text("# Benchmarks\n\n## Freshness under sustained load\n\nfresh\n\n## Making Lockstep faster\n\nprose\n")
    lag_fleet_report.write(_results([_row("f0", 4.0), _row("f1", 6.0)], {}), page)
    lag_fleet_report.replace_section(main, page)
    text = main.read_text()
    assert text.index("## Freshness") < text.index(lag_fleet_report.HEADING) < text.index("## Making Lockstep faster")
    assert "2 of 2 fed pipelines with a p99 produce-to-visible of at most 15 s (median p99 5.00 s, worst 6.00 s)" in text
    assert "commit abc1234" in text and "met)" in text
    lag_fleet_report.write(_results([_row("f0", 40.0)], {"idle-1": 2}), page)
    lag_fleet_report.replace_section(main, page)
    again = main.read_text()
    assert again.count(lag_fleet_report.HEADING) == 1 and "2 runs started by the idle ones" in again
    assert again.endswith("## Making Lockstep faster\n\nprose\n") and "fresh\n" in again


def test_the_committed_pages_agree_make_bench_writes_the_same_lag_fleet_section_again() -> None:
    from pathlib import Path

    from lockstep_bench.measure import page_summary

    root = Path(__file__).resolve().parents[2]
    page = root / lag_fleet_report.PAGE
    assert page_summary(page, lag_fleet_report.SUMMARY_MARK) is not None
    section = lag_fleet_report.section(page)
    assert "Measured apart by `make bench-lag-fleet`" in section
    assert f"{section}\n\n## " in (root / "docs" / "BENCHMARKS.md").read_text()


def test_one_topic_s_load_files_are_in_the_folder_itself_several_topics_each_in_its_own() -> None:
    from pathlib import Path

    from lockstep_bench.freshness_load import topic_folder

    assert topic_folder(Path("/w"), "a-in", 1) == Path("/w")
    assert topic_folder(Path("/w"), "a-in", 20) == Path("/w/a-in")


def test_a_fleet_without_a_fed_pipeline_is_refused_before_anything_starts():
    import pytest

    with pytest.raises(ValueError, match="--lag-fleet-fed must be from 1 to --lag-fleet-pipelines"):
        lag_fleet.LagFleetSettings(fed=0)
    with pytest.raises(ValueError, match="--lag-fleet-fed"):
        lag_fleet.LagFleetSettings(pipelines=10, fed=11)
    assert lag_fleet.LagFleetSettings(pipelines=10, fed=10).fed == 10
