"""docs/BENCHMARKS-lag-fleet.md from a ``--lag-fleet-only`` run's results (`lockstep_bench.lag_fleet`).

The page carries its headline figures in a comment (`SUMMARY_MARK`): docs/BENCHMARKS.md's section on it
(`section`) is written from them, by ``make bench`` and again after each ``--lag-fleet-only`` run (`replace_section`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lockstep_bench import measure
from lockstep_bench.freshness import COMPONENTS
from lockstep_bench.lag_fleet import PLATFORM_SERVICES, TARGET_P99_S
from lockstep_bench.measure import page_summary

PAGE = Path("docs") / "BENCHMARKS-lag-fleet.md"
SUMMARY_MARK = "<!-- lag-fleet-summary "
HEADING = "## Many lag-triggered pipelines"


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def render(results: dict[str, Any], rerendered: bool = False) -> str:
    s = results["settings"]
    race = results["race"]
    setup, start, load = race.get("setup", {}), race.get("start"), race.get("load")
    lines = ["# Many lag-triggered pipelines in one Airflow", ""]
    lines.append(f"Written by `lockstep bench --lag-fleet-only` (`make bench-lag-fleet`) on {results['started_at']}, "
                 f"commit {results['commit']}, in {results.get('seconds', 0) / 60:.1f} minutes"
                 + (" (rendered again from its results)" if rerendered else "")
                 + ". One run on this machine (2 cores, shared and noisy), on an isolated platform of its own: a Kafka "
                   "broker, the S3 server, a Spark Connect server warmed up as `lockstep dev up --warm-checkpoints` "
                   f"does, with {s.get('connect_task_slots', 2)} task slots (`LOCKSTEP_CONNECT_TASK_SLOTS`), and "
                   f"`airflow standalone` with its database on {setup.get('airflow_db', '?')} "
                   f"({setup.get('parallelism', '?')} task instances at once).")
    lines += ["", "## What ran", ""]
    idle = s["pipelines"] - s["fed"]
    lines.append(f"{s['pipelines']} pipelines (`lockstep_bench.lag_fleet`), each over a topic of its own with "
                 f"{s['partitions']} partitions, lag-triggered (`checkpoints.trigger`: `lag_records: 1`, "
                 f"`poll_interval: {s['poll_s']}s`), one task per checkpoint, connect mode, the freshness race's "
                 f"stateless transform. {s['fed']} of them are fed {s['rate']:,} records/s each "
                 f"({s['fed'] * s['rate']:,} in all) for {s['seconds']:.0f} s by one producer process; the other "
                 f"{idle} get nothing. One watcher process reads the fed pipelines' sinks `read_committed` and dates "
                 f"each record's visibility; records produced in the first {s['warm_up_s']:.0f} s count for exactness, "
                 "not for latency (`lockstep_bench.freshness_figures`).")
    if load is None:
        lines += ["", f"The run did not reach the load: {race.get('error', 'see its log')}", ""]
        return "\n".join(lines) + "\n"
    v = load["verdict"]
    lines += ["", "## Target (issue 69)", ""]
    lines.append(f"Every fed pipeline's p99 produce-to-visible at most {TARGET_P99_S:g} s with its sink exact, and "
                 f"the idle pipelines starting no run: **{'met' if v['met'] else 'NOT met'}**. {v['within']} of "
                 f"{v['fed']} fed pipelines within it (p99 median {_s(v['median_p99_s'])} s, worst "
                 f"{_s(v['worst_p99_s'])} s), {v['exact']} of {v['fed']} sinks exact; the {idle} idle pipelines "
                 f"started {v['idle_runs']} runs during the load"
                 + (f" ({', '.join(f'{k}: {n}' for k, n in sorted(load['idle_runs_started'].items())[:5])})"
                    if load["idle_runs_started"] else "") + ".")
    if start is not None:
        lines += ["", "## Start", ""]
        lines.append(f"All {s['pipelines']} unpaused at once: each watcher fires its pipeline's first checkpoint, which "
                     f"finds where to start. Every pipeline had one that succeeded {start['seconds']:.0f} s later "
                     f"({start['runs']} runs succeeded, {start['failed_runs']} failed; load average then "
                     f"{', '.join(f'{x:.1f}' for x in start['load_average'])}). Airflow answered and had parsed every "
                     f"DAG {setup.get('airflow_and_parse_s', 0):.0f} s after it was started.")
    lines += ["", "## Fed pipelines", "",
              "| pipeline | records | p50 s | p95 s | p99 s | max s | DAG runs in the load | sink |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in load["rows"]:
        lat = r["latency_s"]
        sink = "exact" if r["exact"] else (f"NOT exact: {r['found']:,} of {r['expected']:,} found, {r['duplicates']} "
                                           f"duplicated, {r['unexpected']} unexpected, {r['wrong']} wrong")
        lines.append(f"| {r['pipeline']} | {r['records']:,} | {_s(lat['p50'])} | {_s(lat['p95'])} | {_s(lat['p99'])} | "
                     f"{_s(lat['max'])} | {r['dag_runs']} | {sink} |")
    runs = load.get("runs", {})
    if runs:
        lines += ["", f"Where a checkpoint's time went, for the first {len(runs)} fed pipelines (medians over their DAG "
                      "runs in the load; steps and stages from the later runs' task logs):", "",
                  "| pipeline | DAG runs | queued → end s | run s | gap s | steps s | stages s |",
                  "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
        for name, f in runs.items():
            steps = ", ".join(f"{k} {v:.2f}" for k, v in f.get("median_step_s", {}).items() if v is not None) or "–"
            stages = ", ".join(f"{k} {v:.2f}" for k, v in f.get("median_stage_s", {}).items()
                               if v is not None and not k.startswith("state")) or "–"
            lines.append(f"| {name} | {f['runs']} | {_s(f.get('median_queued_s'))} | {_s(f.get('median_run_s'))} | "
                         f"{_s(f.get('median_gap_s'))} | {steps} | {stages} |")
    cpu, cores = load["cpu_s"], load["cpu_cores"]
    parts = [c for c in COMPONENTS if c in cpu]
    rest = round(cpu.get("airflow", 0.0) - sum(cpu[c] for c in parts), 1)
    wall = load["wall_s"]
    lines += ["", "## What it cost", "",
              f"CPU seconds over the load and its settling ({wall:.0f} s), of every process Lockstep needs here "
              "and, in italics, of the platform's services it talks to:", "",
              "| process | CPU s | cores |", "| --- | ---: | ---: |",
              f"| Airflow, all its processes | {cpu.get('airflow', 0):.1f} | {cores.get('airflow', 0):.2f} |"]
    lines += [f"| — its {c} | {cpu[c]:.1f} | {cores[c]:.2f} |" for c in parts]
    lines += [f"| — its task processes and the rest | {rest:.1f} | {rest / wall:.2f} |",
              f"| Spark Connect server | {cpu.get('spark-connect', 0):.1f} | {cores.get('spark-connect', 0):.2f} |"]
    names = {"kafka": "the Kafka broker", "s3": "the S3 server", "postgres": "Airflow's PostgreSQL"}
    lines += [f"| _platform: {names[k]}_ | {cpu[k]:.1f} | {cores[k]:.2f} |" for k in PLATFORM_SERVICES if k in cpu]
    loops = load.get("loops", {})
    lines += ["", f"Load average at the end: {', '.join(f'{x:.1f}' for x in load['load_average'])}. "
                  + (f"The scheduler's loop over the load: median {loops['median_ms']:.0f} ms, p95 "
                     f"{loops['p95_ms']:.0f} ms, max {loops['max_ms']:.0f} ms ({loops['loops']} loops)."
                     if loops.get("loops") else "No scheduler loop line was logged."), ""]
    lines += ["The watcher of an idle pipeline looks at its topic every poll; once a look has found it quiet, the "
              "next ones read only the broker's last stable offsets (`lockstep.rules.lag_trigger.still_quiet`), and "
              "the triggerer shares one Kafka admin and one S3 client per connection "
              "(docs/operations.md, *Many lag-triggered pipelines*).", ""]
    lines += [SUMMARY_MARK + json.dumps(summary(results), sort_keys=True) + " -->", ""]
    return "\n".join(lines)


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The figures docs/BENCHMARKS.md quotes (`section`)."""
    s, load = results["settings"], results["race"]["load"]
    return {"started_at": results["started_at"], "commit": results["commit"], "pipelines": s["pipelines"],
            "fed": s["fed"], "rate": s["rate"], "verdict": load["verdict"], "cpu_cores": load["cpu_cores"],
            "loops": {k: load.get("loops", {}).get(k) for k in ("median_ms", "p95_ms")}}


def section(page: Path) -> str:
    """docs/BENCHMARKS.md's section on the lag fleet: the committed page's figures, date and commit (measured
    apart, by ``make bench-lag-fleet``), or where to get them."""
    head = HEADING + "\n\n"
    sm = page_summary(page, SUMMARY_MARK)
    if sm is None:
        return (head + "Many lag-triggered pipelines in one Airflow, a few fed and the rest idle, are measured apart by "
                "`make bench-lag-fleet`, which writes [BENCHMARKS-lag-fleet.md](BENCHMARKS-lag-fleet.md); it has not "
                "been run for this page.")
    v, cores, loops = sm["verdict"], sm["cpu_cores"], sm["loops"]
    return (head + f"Measured apart by `make bench-lag-fleet` on {sm['started_at']}, commit {sm['commit']}, not in this "
            f"run: see [BENCHMARKS-lag-fleet.md](BENCHMARKS-lag-fleet.md). {sm['pipelines']} lag-triggered pipelines in "
            f"one Airflow (PostgreSQL), {sm['fed']} of them fed {sm['rate']:,} records/s each, the rest idle: "
            f"{v['within']} of {v['fed']} fed pipelines with a p99 produce-to-visible of at most {TARGET_P99_S:g} s "
            f"(median p99 {_s(v['median_p99_s'])} s, worst {_s(v['worst_p99_s'])} s), {v['exact']} of {v['fed']} "
            f"sinks exact, {v['idle_runs']} runs started by the idle ones (target: every fed p99 ≤ {TARGET_P99_S:g} s "
            f"and no idle run: {'met' if v['met'] else 'NOT met'}). CPU over the load: Airflow {cores.get('airflow', 0):.2f} "
            f"cores (its triggerer {cores.get('triggerer', 0):.2f}), Spark Connect {cores.get('spark-connect', 0):.2f}; "
            f"scheduler loop median {loops.get('median_ms') or 0:.0f} ms, p95 {loops.get('p95_ms') or 0:.0f} ms.")


def replace_section(report: Path, page: Path) -> None:
    """``report``'s (docs/BENCHMARKS.md's) lag-fleet section written again from ``page``, the rest as it was."""
    measure.replace_section(report, HEADING, section(page))


def write(results: dict[str, Any], path: Path, rerendered: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, rerendered))


def headline(results: dict[str, Any]) -> list[str]:
    load = results["race"].get("load")
    if load is None:
        return ["lag fleet: the run did not reach the load"]
    v = load["verdict"]
    return [f"lag fleet: {v['within']} of {v['fed']} fed pipelines with p99 ≤ {TARGET_P99_S:g} s (median "
            f"{_s(v['median_p99_s'])} s, worst {_s(v['worst_p99_s'])} s), {v['exact']} exact; idle runs "
            f"{v['idle_runs']}: target {'met' if v['met'] else 'NOT met'}; CPU cores {load['cpu_cores']}"]
