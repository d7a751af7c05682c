"""Many pipelines in one Airflow (lockstep_bench.many_pipelines), its pure parts: the scheduler's loop
lines read from the platform's log, the generated specs, the settings, and the report's section with
its figures and verdicts. No Airflow, no Kafka, no S3 here."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lockstep_bench import many_pipelines, report, runner, workloads
from lockstep_bench.results import PIPELINES, Results

# As `airflow standalone` writes them into the platform's log: each component's output prefixed.
LOG = """\
scheduler       | 2026-11-26T17:40:01.1Z [debug    ] Ran scheduling loop in 12.50 ms [airflow.jobs.scheduler_job_runner.SchedulerJobRunner] loc=scheduler_job_runner.py:1867
scheduler       | 2026-11-26T17:40:01.2Z [debug    ] Next timed event is in 0.5 [airflow.jobs.scheduler_job_runner.SchedulerJobRunner]
api-server      | INFO:     127.0.0.1:5000 - "GET /api/v2/dags HTTP/1.1" 200 OK
api-server      | 2026-11-26T17:40:01.4Z [error    ] Error with id JWDnvEuM, statement: INSERT INTO log (dttm) VALUES (?)
scheduler       | 2026-11-26T17:40:01.5Z [error    ] Error with id XYZ (not the api-server's)
scheduler       | 2026-11-26T17:40:02.1Z [debug    ] Ran scheduling loop in 8 ms [airflow.jobs.scheduler_job_runner.SchedulerJobRunner]
scheduler       | 2026-11-26T17:40:03.1Z [debug    ] Ran scheduling loop in 400.25 ms [airflow.jobs.scheduler_job_runner.SchedulerJobRunner]
"""


def test_loop_stats_reads_the_schedulers_lines_only() -> None:
    stats = many_pipelines.loop_stats(LOG)
    assert stats["loops"] == 3 and stats["median_ms"] == 12.5 and stats["max_ms"] == 400.25
    assert stats["p95_ms"] == 400.25  # nearest rank of 3 samples: the largest
    assert many_pipelines.loop_stats("api-server | nothing") == {"loops": 0}
    assert len(many_pipelines.API_ERROR.findall(LOG)) == 1


def test_p95_is_the_nearest_rank() -> None:
    text = "\n".join(f"Ran scheduling loop in {ms}.00 ms" for ms in range(1, 101))
    stats = many_pipelines.loop_stats(text)
    assert (stats["loops"], stats["median_ms"], stats["p95_ms"], stats["max_ms"]) == (100, 50.5, 95.0, 100.0)


def test_generated_specs_are_valid_and_scheduled(tmp_path: Path) -> None:
    from lockstep.spec import load_spec

    path = workloads.write_spec(tmp_path, "bench-fleet-x-000", "in", "out", 1000, schedule=many_pipelines.SCHEDULE)
    assert load_spec(path).checkpoints.schedule == "* * * * *"
    assert load_spec(workloads.write_spec(tmp_path, "bench-page", "in", "out", 1000)).checkpoints.schedule is None


def test_page_prefix_is_the_plugins() -> None:
    from lockstep_airflow.links import URL_PREFIX

    assert many_pipelines.PAGE_PREFIX == URL_PREFIX


def _settings(*argv: str) -> runner.Settings:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    return runner.settings_from_args(parser.parse_args(list(argv)))


def test_pipelines_setting_defaults_to_50_quick_to_a_few_and_0_skips() -> None:
    assert _settings().pipelines == 50 and _settings("--pipelines", "0").pipelines == 0
    quick = _settings("--quick")
    assert 0 < quick.pipelines <= 5
    small = many_pipelines.FleetSettings.for_bench(quick.pipelines, quick=True)
    assert small.page_checkpoints < 10_000 and small.sample_s < 60
    full = many_pipelines.FleetSettings.for_bench(50, quick=False)
    assert (full.page_checkpoints, full.parse_repeats, full.page_repeats) == (10_000, 3, 5)
    assert 90 <= full.sample_s <= 120


def test_the_fleet_runs_one_task_per_checkpoint_on_postgres_unless_told_otherwise(tmp_path: Path) -> None:
    from lockstep.spec import load_spec

    default = _settings()
    assert (default.pipelines_tasks, default.airflow_db) == ("one", "postgres")
    other = _settings("--pipelines-tasks", "three", "--airflow-db", "sqlite")
    assert (other.pipelines_tasks, other.airflow_db) == ("three", "sqlite")
    assert many_pipelines.FleetSettings.for_bench(50, quick=True).tasks == "one"
    spec = workloads.write_spec(tmp_path, "bench-fleet", "in", "out", 1000, schedule="* * * * *", tasks="one")
    assert load_spec(spec).checkpoints.one_task


# ---- report ----------------------------------------------------------------------------------------
def _page_row(page: str, checkpoints: int, ms: float, size: int) -> dict[str, Any]:
    return {"page": page, "checkpoints": checkpoints, "path": "/lockstep/?pipeline=p", "median_ms": ms,
            "ms": [ms] * 5, "bytes": size}


def _doc(page_ms: float = 120.0, big_bytes: int = 21_000) -> dict[str, Any]:
    return {
        "pipelines": 50, "schedule": "* * * * *", "sample_s": 100.0, "page_fill_s": 40.0,
        "parse": {"timeout_s": 30.0, "points": [
            {"specs": 1, "dags": 1, "seconds": [1.1, 1.2, 1.3], "median_s": 1.2, "per_dag_s": 1.2, "errors": {}},
            {"specs": 50, "dags": 50, "seconds": [6.0, 6.5, 7.0], "median_s": 6.5, "per_dag_s": 0.13,
             "errors": {}, "task_dags": 1, "task_seconds": [1.3, 1.4, 1.5], "task_median_s": 1.4}]},
        "loops_one": {"loops": 180, "median_ms": 10.5, "p95_ms": 30.25, "max_ms": 90.0,
                      "during": "the scheduling-overhead runs of 1 pipeline"},
        "loops_many": {"loops": 95, "median_ms": 42.0, "p95_ms": 310.5, "max_ms": 900.0, "window_s": 100.2,
                       "dag_runs_finished": {"success": 61, "failed": 0}, "tasks_finished": {"success": 190, "failed": 1},
                       "load_average": [3.25, 2.0, 1.5],
                       "runs_open_at_end": {"queued": 3, "running": 4}, "api_server_errors": 2},
        "drain": {"seconds": 60.4, "runs_open_after": {"queued": 0, "running": 2}},
        "plans": {"plans": 50, "total_calls": 500, "per_plan": 10.0, "min": 10, "max": 10, "keys_listed": 150,
                  "seconds": 12.3, "errors": [], "by_calls": {"6/0": 45, "9/1": 5}},
        "page": {"deep_before": 5000, "rows": [
            _page_row("HTML, newest page", 10_000, page_ms, big_bytes),
            _page_row("HTML, before=5,000", 10_000, page_ms - 20, big_bytes),
            _page_row("JSON, newest page", 10_000, 80.0, 30_000),
            _page_row("JSON, before=5,000", 10_000, 70.0, 30_000),
            _page_row("HTML, newest page", 20, 60.0, 20_500),
            _page_row("JSON, newest page", 20, 50.0, 29_800)]},
    }


def _section(tmp_path: Path, doc: dict[str, Any]) -> str:
    run = {"pipeline": PIPELINES[0], "records": 1000, "partitions": 4, "wall_s": 5.0, "peak_rss_mb": 100.0,
           "cpu_s": 5.0, "repeat": 0, "records_per_s": 200.0,
           "inner": {"spark_seconds": 2.0, "plan_s": 0.5, "run_s": 4.0, "commit_s": 0.5, "session_seconds": 1.0}}
    res = Results(settings={"records": 1000, "partitions": 4, "repeats": 1, "partition_records": 1000},
                  environment={"cpus": 2}, main=[run], seconds=60.0, many_pipelines=doc)
    path = tmp_path / "BENCH.md"
    report.write(res, path)
    text = path.read_text()
    assert "## 50 pipelines in one Airflow" in text
    return text.split("## 50 pipelines in one Airflow", 1)[1].split("\n## ", 1)[0]


def test_report_shows_parse_loop_plan_and_page_figures(tmp_path: Path) -> None:
    text = _section(tmp_path, _doc())
    # Results from before the set-up was recorded: three tasks on SQLite, as the bench ran them then.
    assert "three tasks per checkpoint (plan, run, commit); Airflow's database on SQLite;" in text
    now = _section(tmp_path, {**_doc(), "tasks": "one", "airflow_db": "postgres"})
    assert "one task per checkpoint (`checkpoints.tasks: one`); Airflow's database on PostgreSQL" in now
    assert "| 1 | 1 | 1.20 | 1200 | 1.10, 1.20, 1.30 | 4% | – | – |" in text  # results from before the task's parse
    assert "| 50 | 50 | 6.50 | 130 | 6.00, 6.50, 7.00 | 22% | 1 | 1.40 |" in text
    assert "met: 6.50 s within it at 50 pipelines" in text
    assert "Each DAG beyond the first adds 108 ms" in text and "about 267 pipelines" in text
    assert "| 1 | 180 | 10.5 | 30.2 | 90.0 | the scheduling-overhead runs of 1 pipeline |" in text
    assert "| 50 | 95 | 42.0 | 310.5 | 900.0 | 100 s from unpausing: 61 DAG runs succeeded, 0 failed; " \
           "load average 3.2; at the end 4 runs running, 3 queued; " \
           "2 requests failed inside the api-server (SQLite) |" in text
    assert "the median loop takes 4.0× the 1-pipeline loop" in text
    assert "60 s later 2 of their runs were still running and 0 queued." in text
    assert "**500 calls for a round of 50 plans**, 10 per plan" in text
    assert "(45 plans made 6 calls listing 0 keys, 5 plans made 9 calls listing 1 key)" in text
    assert "| HTML, before=5,000 | 10,000 | 100 | 100, 100, 100, 100, 100 | 21,000 |" in text
    assert "| JSON, newest page | 20 | 50 |" in text
    assert "stays interactive at 10,000 checkpoints (every view under 500 ms, its size within 10% of the same " \
           "page at 20 checkpoints) — met: the slowest view, HTML, newest page, answers in 120 ms" in text
    assert "The newest HTML page takes 2.00× its time at 20 checkpoints" in text


def test_page_verdict_fails_when_slow_or_growing(tmp_path: Path) -> None:
    slow = _section(tmp_path, _doc(page_ms=1500.0))
    assert "— NOT met: the slowest view, HTML, newest page, answers in 1,500 ms" in slow
    grows = _section(tmp_path, _doc(big_bytes=90_000))
    assert "— NOT met:" in grows and "HTML, newest page 90,000 bytes" in grows


def test_report_without_the_measurement_has_no_section(tmp_path: Path) -> None:
    res = Results(settings={"records": 1000, "partitions": 4, "repeats": 1, "partition_records": 1000},
                  environment={"cpus": 2}, seconds=60.0)
    path = tmp_path / "BENCH.md"
    report.write(res, path)
    assert report.MANY_HEADING.search(path.read_text()) is None


# ---- runs within their minute, and --pipelines-only's section ----------------------------------------
def _run(after: str, end: str | None, state: str = "success") -> dict[str, Any]:
    return {"run_after": after, "end_date": end, "state": state}


def test_within_minute_counts_the_runs_due_in_the_sample_whose_outcome_is_known() -> None:
    from datetime import UTC, datetime

    since, until = datetime(2026, 12, 4, 16, 0, 0, tzinfo=UTC), datetime(2026, 12, 4, 16, 3, 0, tzinfo=UTC)
    runs = [_run("2026-12-04T15:59:00Z", "2026-12-04T16:00:05Z"),  # due before the sample: left out
            _run("2026-12-04T16:00:00Z", "2026-12-04T16:00:20Z"),  # 20 s: within
            _run("2026-12-04T16:01:00Z", "2026-12-04T16:02:30Z"),  # 90 s: late
            _run("2026-12-04T16:01:00Z", "2026-12-04T16:01:10Z", "failed"),  # ended in time, but failed
            _run("2026-12-04T16:02:00Z", None, "running"),  # due, its minute over, not ended: late
            _run("2026-12-04T16:02:30Z", None, "running"),  # still inside its minute at the end: left out
            _run("2026-12-04T16:02:40Z", "2026-12-04T16:02:50Z")]  # inside its minute, ended: 10 s, within
    found = many_pipelines.within_minute(runs, since, until)
    assert (found["due"], found["within"], found["ended"]) == (5, 2, 4)
    assert (found["median_s"], found["p95_s"], found["max_s"]) == (15.0, 90.0, 90.0)


def test_the_minute_target_is_met_only_when_every_due_run_made_it_and_the_loop_is_fast(tmp_path: Path) -> None:
    minute = {"due": 100, "within": 100, "ended": 100, "median_s": 12.0, "p95_s": 30.0, "max_s": 41.0}
    met = _section(tmp_path, {**_doc(), "minute": minute})
    assert "every run completes within its minute and the scheduler loop's p95 stays ≤ 1,000 ms — met: of the " \
           "100 runs due in the sample whose outcome was known at its end, 100 succeeded within it" in met
    late = _section(tmp_path, {**_doc(), "minute": {**minute, "within": 99}})
    assert "— NOT met: of the 100 runs" in late
    slow = _section(tmp_path, {**_doc(), "minute": minute,
                               "loops_many": {**_doc()["loops_many"], "p95_ms": 1500.0}})
    assert "— NOT met:" in slow


def test_pipelines_only_replaces_its_section_and_keeps_the_rest(tmp_path: Path) -> None:
    page = tmp_path / "BENCH.md"
    page.write_text("# Benchmarks\n\nintro\n\n## 50 pipelines in one Airflow\n\nold figures\n\n## Scaling\n\nkept\n")
    res = Results(settings={}, environment={"commit": "abc1234"}, many_pipelines={**_doc(), "pipelines": 200},
                  started_at="2026-12-04 16:00:00 UTC", seconds=600.0)
    report.replace_many_pipelines(res, page)
    text = page.read_text()
    assert "old figures" not in text and text.startswith("# Benchmarks\n\nintro\n\n## 200 pipelines in one Airflow")
    assert "_Measured in a run of its own_ (`lockstep bench --pipelines-only`, commit abc1234" in text
    assert "measured in an Airflow of its own, after one pipeline's two runs" in text
    assert report.OVERHEAD_RUNS not in text
    assert text.endswith("## Scaling\n\nkept\n") and text.count("## Scaling") == 1
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    assert parser.parse_args(["--pipelines-only"]).pipelines_only and not parser.parse_args([]).pipelines_only
