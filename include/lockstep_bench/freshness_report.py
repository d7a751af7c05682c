"""Writes docs/BENCHMARKS-freshness.md from the results of ``lockstep bench --freshness-only``
(``lockstep_bench.freshness``): per rate and engine the produce-to-visible latency, whether the engine sustained
the rate, its CPU, and the sink's check; Lockstep's p99 against Flink's and the issue's targets; a plot of
latency against rate. The arithmetic (``summary``) is apart from the Markdown.

The page carries its headline figures in a comment (``SUMMARY_MARK``), so ``make bench``, which measures none of
them, states them in docs/BENCHMARKS.md (``section``) from the committed page."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lockstep_bench import freshness, freshness_windows, measure
from lockstep_bench.measure import load_at, page_summary
from lockstep_bench.png import line_plot

FULL_COMMAND = ("lockstep bench --freshness-only --results var/bench/freshness-results.json "
                "--report docs/BENCHMARKS-freshness.md")
#: The targets at `TARGET_RATE` records/s (issue 44): Lockstep's p99 at most this many seconds, and at most
#: this many times Flink's p99.
TARGET_RATE = 20_000
#: issue 69's high rate: the stateless pipeline's p99 there within `TARGET_VS_FLINK` of Flink's
HIGH_RATE = 100_000
TARGET_P99_S = 10.0
TARGET_VS_FLINK = 1.5
PLOT = "benchmarks-freshness.png"
PAGE = Path("docs") / "BENCHMARKS-freshness.md"
SUMMARY_MARK = "<!-- freshness-summary "
HEADING = "## Freshness under sustained load"


def _row(runs: list[dict[str, Any]], engine: str, rate: int, pipeline: str = freshness.STATELESS) -> dict[str, Any] | None:
    return next((r for r in runs if r["engine"] == engine and r["rate"] == rate and freshness.pipeline_of(r) == pipeline),
                None)


def late_only(r: dict[str, Any]) -> bool:
    """A sink that is not exact only because records were still missing when the settle time ran out: nothing
    duplicated, unexpected or wrong. An engine that fell behind shows so; it is not a record lost (the watcher
    stopped looking)."""
    watch = r.get("watch", {})
    return bool(r.get("missing")) and not (r.get("unexpected") or r.get("duplicated") or r.get("wrong")
                                           or watch.get("duplicates") or watch.get("wrong") or watch.get("no_headers")
                                           or watch.get("not_windows"))


def sink_cell(r: dict[str, Any], settle_s: float, what: str = "records") -> str:
    """The table's sink cell: exact, incomplete (fell behind: missing when the settle time ran out), or not exact."""
    if r["exact"]:
        return "exact"
    if late_only(r):
        return f"incomplete: {r['missing']:,} {what} not visible within {settle_s:.0f} s of the load's end"
    duplicated = r.get("duplicated", r.get("watch", {}).get("duplicates", 0))
    return (f"**not exact**: {r['missing']:,} missing, {duplicated:,} duplicated, {r['unexpected']:,} unexpected, "
            f"{r.get('wrong', r.get('watch', {}).get('wrong', 0)):,} wrong")


def _against_flink(runs: list[dict[str, Any]], pipeline: str, engine: str = freshness.LOCKSTEP,
                   rate: int = TARGET_RATE) -> tuple[dict[str, Any] | None, float | None, float | None, float | None]:
    """(Lockstep's run, its p99, Flink's p99, the ratio) at ``rate`` (the target rate) for ``pipeline``."""
    mine = _row(runs, engine, rate, pipeline)
    flink = _row(runs, freshness.FLINK, rate, pipeline)
    p99 = (mine or {}).get("latency_s", {}).get("p99")
    flink_p99 = (flink or {}).get("latency_s", {}).get("p99")
    ratio = p99 / flink_p99 if p99 is not None and flink_p99 else None
    return mine, p99, flink_p99, None if ratio is None else round(ratio, 2)


def cpu_ratio(runs: list[dict[str, Any]], engine: str = freshness.LOCKSTEP) -> float | None:
    """``engine``'s CPU cores ÷ Flink's, the stateless pipeline at the target rate (issue 69: ≤ `TARGET_VS_FLINK`)."""
    mine = _row(runs, engine, TARGET_RATE) or {}
    flink = _row(runs, freshness.FLINK, TARGET_RATE) or {}
    if not mine.get("cpu_cores") or not flink.get("cpu_cores"):
        return None
    return round(float(mine["cpu_cores"]) / float(flink["cpu_cores"]), 2)


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """Lockstep's p99 at the target rate, its ratio to Flink's, whether the targets are met, its CPU's ratio to
    Flink's, each engine's highest sustained rate (the stateless pipeline's: the issues' targets); the same for
    Lockstep with its checkpoints spaced as Flink's (``spaced``) when it ran; the windowed pipeline's figures when
    it ran (``windowed``; issue 69: within `TARGET_VS_FLINK` of Flink's p99); issue 69's figures at `HIGH_RATE`
    (``high``, ``high_spaced``) when Lockstep and Flink both ran there."""
    runs = results["race"]["runs"]
    mine, p99, flink_p99, ratio = _against_flink(runs, freshness.STATELESS)
    engines = list(dict.fromkeys(r["engine"] for r in runs))
    cpu = cpu_ratio(runs)
    out: dict[str, Any] = {
        "p99": p99, "flink_p99": flink_p99, "ratio": ratio,
        "cpu_ratio": cpu, "cpu_met": cpu is not None and cpu <= TARGET_VS_FLINK,
        "p99_met": p99 is not None and p99 <= TARGET_P99_S and bool(mine and mine.get("exact")),
        "ratio_met": ratio is not None and ratio <= TARGET_VS_FLINK,
        "highest": {e: freshness.highest_sustained(runs, e) for e in engines},
        "exact": all(r.get("exact") for r in runs if "error" not in r),
        #: runs whose sink is not exact: "<engine>@<rate>" (and the pipeline) -> only late (fell behind) or wrong
        "inexact": {f"{r['engine']}@{r['rate']}" + ("" if freshness.pipeline_of(r) == freshness.STATELESS else
                                                   f" ({freshness.pipeline_of(r)})"):
                    ("late" if late_only(r) else "wrong") for r in runs if "error" not in r and not r.get("exact")},
        "errors": [f"{r['engine']} ({freshness.pipeline_of(r)}) at {r['rate']}/s: {r['error'][:300]}"
                   for r in runs if "error" in r]}
    spaced, s_p99, _, s_ratio = _against_flink(runs, freshness.STATELESS, freshness.LOCKSTEP_SPACED)
    if spaced is not None:
        s_cpu = cpu_ratio(runs, freshness.LOCKSTEP_SPACED)
        out["spaced"] = {"p99": s_p99, "ratio": s_ratio, "ratio_met": s_ratio is not None and s_ratio <= TARGET_VS_FLINK,
                         "cpu_ratio": s_cpu, "cpu_met": s_cpu is not None and s_cpu <= TARGET_VS_FLINK,
                         "interval_s": results.get("settings", {}).get("spaced_interval_s")}
    # issue 69: the stateless pipeline at the high rate, back to back and spaced, within 1.5x of Flink's p99
    for key, engine in (("high", freshness.LOCKSTEP), ("high_spaced", freshness.LOCKSTEP_SPACED)):
        high, h_p99, h_flink, h_ratio = _against_flink(runs, freshness.STATELESS, engine, HIGH_RATE)
        if high is not None and h_flink is not None:
            out[key] = {"rate": HIGH_RATE, "p99": h_p99, "flink_p99": h_flink, "ratio": h_ratio,
                        "met": h_ratio is not None and h_ratio <= TARGET_VS_FLINK and bool(high.get("exact"))}
    if any(freshness.pipeline_of(r) == freshness.WINDOWED for r in runs):
        _, w_p99, w_flink, w_ratio = _against_flink(runs, freshness.WINDOWED)
        raced = dict.fromkeys(r["engine"] for r in runs if freshness.pipeline_of(r) == freshness.WINDOWED)
        out["windowed"] = {"p99": w_p99, "flink_p99": w_flink, "ratio": w_ratio,
                           "met": w_ratio is not None and w_ratio <= TARGET_VS_FLINK,
                           "highest": {e: freshness.highest_sustained(runs, e, freshness.WINDOWED) for e in raced}}
    return out


def headline(results: dict[str, Any]) -> list[str]:
    sm = summary(results)
    return [f"at {TARGET_RATE:,} records/s: Lockstep p99 {sm['p99']} s (target ≤ {TARGET_P99_S:g} s: "
            f"{'met' if sm['p99_met'] else 'not met'}), Flink SQL p99 {sm['flink_p99']} s, ratio {sm['ratio']}× "
            f"(target ≤ {TARGET_VS_FLINK}×: {'met' if sm['ratio_met'] else 'not met'}); CPU {sm['cpu_ratio']}× Flink's",
            *([f"with checkpoints {sp['interval_s']} s apart: p99 {sp['p99']} s, {sp['ratio']}× Flink's; CPU "
               f"{sp['cpu_ratio']}× Flink's"] if (sp := sm.get("spaced")) else []),
            "highest sustained rate: " + ", ".join(f"{e} {v:,}/s" if v else f"{e} none" for e, v in sm["highest"].items()),
            *([f"windowed, at {TARGET_RATE:,} records/s: Lockstep p99 {w['p99']} s from a window's end to its result, "
               f"Flink SQL {w['flink_p99']} s, ratio {w['ratio']}×; highest sustained: "
               + ", ".join(f"{e} {v:,}/s" if v else f"{e} none" for e, v in w["highest"].items())]
              if (w := sm.get("windowed")) else [])]


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _config(r: dict[str, Any]) -> str:
    """A Lockstep run's row label in the tables of where its time goes: its pipeline, and how far apart its
    checkpoints were held when they were."""
    return freshness.pipeline_of(r) + (", checkpoints spaced" if r["engine"] == freshness.LOCKSTEP_SPACED else "")


def _s(v: Any) -> str:
    return "–" if v is None else f"{v:.2f}"


def render(results: dict[str, Any], rerendered: bool = False) -> str:
    s, every = results["settings"], results["race"]["runs"]
    runs = [r for r in every if freshness.pipeline_of(r) == freshness.STATELESS]
    windowed_runs = [r for r in every if freshness.pipeline_of(r) == freshness.WINDOWED]
    env = results.get("environment", {})
    sm = summary(results)
    measured = s["seconds"] - s["warm_up_s"]
    ratio = "–" if sm["ratio"] is None else f"{sm['ratio']:.2f}×"
    lines = [
        "# Freshness under sustained load: Lockstep through Airflow against Flink SQL and Quix Streams",
        "",
        f"Generated by `make bench-freshness` (`{FULL_COMMAND}`) on {results['started_at']}, commit "
        f"{results.get('commit', '?')}, in {results.get('seconds', 0):.0f} s"
        + (" (report re-rendered from its results)" if rerendered else "") + f". Machine: {env.get('cpus', '?')} "
        f"CPUs, {env.get('memory', '?')}; load average {load_at(results, 'start')} at the start, "
        f"{load_at(results, 'end')} at the end. Every figure below comes from that one run.",
        "",
        "**The question.** At a steady rate, how long after a record is produced can a `read_committed` consumer "
        "see its result, and up to what rate does that hold?",
        "",
        f"**The work.** The main race's transform (parse the JSON order, keep `amount >= 30`, add `amount_cents`, "
        f"the source topic/partition/offset as headers), exactly once, from a fresh {s['partitions']}-partition "
        "topic to a fresh sink, for each engine and rate. A producer process sends orders of about 200 bytes at "
        f"the rate for {s['seconds']:.0f} s; the first {s['warm_up_s']:.0f} s are a warm-up, left out of the "
        f"latency figures but checked like the rest, so each figure is over {measured:.0f} s of load. A watcher "
        "process reads the sink `read_committed` (fetch wait 5 ms) and notes when each record became visible. "
        "**Latency** = that moment minus the moment the producer sent the record. The engines take turns at each "
        "rate, each round starting one place further, on the same machine with the producer and the watcher "
        "(2 cores for everything)." + (" The windowed pipeline has [its own section](#the-windowed-pipeline)."
                                        if windowed_runs else ""),
        "",
        "- **Lockstep**: a lag-triggered pipeline (`checkpoints.trigger: {lag_records: 1, poll_interval: "
        f"{s['poll_s']}s"
        + (f", min_interval: {s['min_interval_s']}s" if s.get("min_interval_s") else "")
        + "}`), connect mode, "
        + ("its source's values declared as JSON with the order's JSON Schema (`source.value: {format: json, "
           "schema: ...}`, as Flink's table declares `'format' = 'json'`), so Lockstep parses the order and the "
           "stateless transform filters and encodes it, " if s.get("decode", "transform") == "format" else
           "the stateless transform parsing the order itself (`from_json`), ")
        + "through `airflow standalone` (scheduler, triggerer, dag-processor, "
        "api-server) as a user runs it: the watcher fires, Airflow starts a DAG run, the run plans, runs and "
        "commits a checkpoint. CPU: Airflow's processes (task processes included) and the Spark Connect server"
        + (", which serves every run and was warmed up when it started, as `lockstep dev up --warm-checkpoints` "
           "warms a new server." if s.get("warm_checkpoints") else ".")
        + (f" It races the stateless pipeline twice: with its checkpoints back to back, and with them at least "
           f"{s.get('spaced_interval_s', 5)} s apart (`min_interval: {s.get('spaced_interval_s', 5)}s`, \"checkpoints "
           "spaced\"), the peers' interval: each checkpoint costs about the same CPU whatever its records, so the "
           "first is the freshest and the second the cheaper." if freshness.LOCKSTEP_SPACED in s.get("engines", ())
           else ""),
        f"- **Flink SQL**: PyFlink's Table API in streaming mode, the main race's statements over an unbounded "
        f"Kafka source, `sink.delivery-guarantee = exactly-once`, checkpoints every {s['peer_checkpoint_s']} s "
        "(each commits the sink's transactions), local mini-cluster. CPU: its process tree.",
        f"- **Quix Streams**: `processing_guarantee=\"exactly-once\"`, `commit_interval={s['peer_checkpoint_s']}`. "
        "CPU: its process.",
        "",
        "**Checked**: every record the transform keeps must be visible exactly once and nothing else "
        "(by source partition and offset), and one in 97 is compared with the transform's output for its input. "
        "**Sustained** means that, and that the lag did not grow: the p99 of the records produced in the last "
        "fifth of the measured load is at most 1.5 × the first fifth's + 2 s, and everything arrived within "
        f"{s['settle_s']:.0f} s of the load's end.",
        "",
        "## Targets (issues 44 and 69)",
        "",
        "| at 20,000 records/s | measured | target | |",
        "| --- | ---: | ---: | --- |",
        f"| Lockstep p99, produce to visible, through the scheduler | {_s(sm['p99'])} s | ≤ {TARGET_P99_S:g} s | "
        f"{'met' if sm['p99_met'] else 'not met'} |",
        f"| Lockstep p99 ÷ Flink SQL p99 | {ratio} | "
        f"≤ {TARGET_VS_FLINK}× | {'met' if sm['ratio_met'] else 'not met'} |",
        f"| Lockstep CPU ÷ Flink SQL CPU (issue 69) | {_x(sm.get('cpu_ratio'))} | ≤ {TARGET_VS_FLINK}× | "
        f"{'met' if sm.get('cpu_met') else 'not met'} |",
        *([f"| with checkpoints {sp['interval_s']} s apart: Lockstep p99 | {_s(sp['p99'])} s | ≤ {TARGET_P99_S:g} s "
           f"| {'met' if sp['p99'] is not None and sp['p99'] <= TARGET_P99_S else 'not met'} |",
           f"| with checkpoints {sp['interval_s']} s apart: p99 ÷ Flink SQL p99 | {_x(sp['ratio'])} | "
           f"≤ {TARGET_VS_FLINK}× | {'met' if sp['ratio_met'] else 'not met'} |",
           f"| with checkpoints {sp['interval_s']} s apart: CPU ÷ Flink SQL CPU (issue 69) | {_x(sp['cpu_ratio'])} "
           f"| ≤ {TARGET_VS_FLINK}× | {'met' if sp['cpu_met'] else 'not met'} |"] if (sp := sm.get("spaced")) else []),
        *([f"| at {h['rate']:,} records/s: Lockstep p99 ÷ Flink SQL p99 (issue 69) | {_x(h['ratio'])} "
           f"({_s(h['p99'])} s ÷ {_s(h['flink_p99'])} s) | ≤ {TARGET_VS_FLINK}× | {'met' if h['met'] else 'not met'} |"]
          if (h := sm.get("high")) else []),
        *([f"| at {h['rate']:,} records/s, checkpoints spaced: p99 ÷ Flink SQL p99 (issue 69) | {_x(h['ratio'])} "
           f"({_s(h['p99'])} s ÷ {_s(h['flink_p99'])} s) | ≤ {TARGET_VS_FLINK}× | {'met' if h['met'] else 'not met'} |"]
          if (h := sm.get("high_spaced")) else []),
        *([f"| windowed, at {TARGET_RATE:,} records/s: p99 ÷ Flink SQL p99 (issue 69) | {_x(w['ratio'])} "
           f"({_s(w['p99'])} s ÷ {_s(w['flink_p99'])} s) | ≤ {TARGET_VS_FLINK}× | {'met' if w.get('met') else 'not met'} |"]
          if (w := sm.get("windowed")) and w.get("ratio") is not None else []),
        "",
        "Highest rate sustained (of those tried): " + ", ".join(
            f"{freshness.LABELS.get(e, e)} **{v:,}/s**" if v else f"{freshness.LABELS.get(e, e)} **none**"
            for e, v in sm["highest"].items()) + ".",
        "",
        "## Latency by rate",
        "",
        "| rate records/s | engine | p50 s | p95 s | p99 s | max s | sustained | sink | records checked | CPU cores |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    lines += _run_rows(runs, s["settle_s"], "records")
    achieved = ", ".join(f"{r['achieved_rate']:,}" for r in [*runs, *windowed_runs] if "achieved_rate" in r)
    lines += ["", f"_rate_ is what the producer was asked for; it sent {achieved} "
              "records/s (achieved, per run). _CPU cores_ = CPU seconds of the engine's processes ÷ the run's wall time "
              "(load and settle).", ""]
    if sm["errors"]:
        lines += ["**Runs that failed**:", "", *(f"- {e}" for e in sm["errors"]), ""]
    if windowed_runs:
        lines += _windowed(s, windowed_runs, sm["windowed"])
    mine = [r for r in every if r["engine"] in freshness.LOCKSTEPS and "airflow" in r]
    if mine:
        lines += ["## Where Lockstep's time goes", "",
                  "Per DAG run (one checkpoint) during the load, medians: _run_ from the run's start to its end; "
                  "_gap_ from one run's end to the next one's start, negative when the next run started first (the "
                  "watcher fires one run ahead, and a one-task run starts at once and waits in its process for the "
                  "checkpoint in flight); each task from its start to its end; the steps as the task log reports "
                  "them (0.1 s resolution): _wait_ for the checkpoint in flight"
                  + ("" if any("wait" in r["airflow"].get("median_step_s", {}) for r in mine) else
                     " (this run's logs had no separate wait line: its _plan_ includes the wait)")
                  + ", plan, run, commit, and inside commit _below_, a pipelined checkpoint's wait for the one it "
                  "was planned on top of to complete (`checkpoints.pipelined`). A task's time beyond its steps is the "
                  "task process starting: Airflow's "
                  "supervisor and task runner, the DAG file parsed again, Lockstep's imports.", "",
                  "| pipeline | rate records/s | DAG runs | run s | gap s | tasks s | steps s |",
                  "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
        for r in mine:
            a = r["airflow"]
            tasks = ", ".join(f"{t} {v}" for t, v in a["median_task_s"].items())
            steps = ", ".join(f"{t} {v}" for t, v in a.get("median_step_s", {}).items())
            lines.append(f"| {_config(r)} | {r['rate']:,} | {a['runs']} | {_s(a['median_run_s'])} | "
                         f"{_s(a['median_gap_s'])} | {tasks} "
                         f"| {steps} |")
        lines.append("")
        lines += _stages(mine)
        lines += cpu_parts_table(mine)
    lines += ["## Latency against rate", "", f"![p99 latency against rate]({PLOT})", "",
              "Raw results: every run's latency percentiles, its latency over the load in 5 s steps "
              "(`series`: seconds into the load, p50, p99), its checks and Lockstep's DAG runs are in the results "
              "JSON.", ""]
    headline_figures = {**sm, "started_at": results["started_at"], "commit": results.get("commit", "?"),
                        "rates": {f"{r['engine']}@{r['rate']}": r["latency_s"] for r in runs if "error" not in r},
                        **({"window_s": s.get("window_s"),
                            "windowed_rates": {f"{r['engine']}@{r['rate']}": r["latency_s"] for r in windowed_runs
                                               if "error" not in r}} if windowed_runs else {})}
    lines += [SUMMARY_MARK + json.dumps(headline_figures, sort_keys=True) + " -->", ""]
    return "\n".join(lines)


def _run_rows(runs: list[dict[str, Any]], settle_s: float, what: str) -> list[str]:
    """A latency table's rows, one per run; ``what`` the sink's items: records, or windows (whose _checked_ cell
    adds the later windows an engine fired too)."""
    rows = []
    for r in runs:
        label = freshness.LABELS.get(r["engine"], r["engine"])
        if "error" in r:
            rows.append(f"| {r['rate']:,} | {label} | – | – | – | – | failed | – | – | – |")
            continue
        lat = r["latency_s"]
        checked = f"{r['found']:,} of {r['expected']:,}" + (
            f" (+{r['open_emitted']:,} later)" if what == "windows" else "")
        rows.append(f"| {r['rate']:,} | {label} | {_s(lat['p50'])} | {_s(lat['p95'])} | {_s(lat['p99'])} | "
                    f"{_s(lat['max'])} | {'yes' if r['sustained'] else 'no'} (p99 first fifth "
                    f"{_s(r['first_fifth_p99_s'])}, last {_s(r['last_fifth_p99_s'])}) | "
                    f"{sink_cell(r, settle_s, what)} | {checked} | {r['cpu_cores']:.2f} |")
    return rows


def _stages(mine: list[dict[str, Any]]) -> list[str]:
    """The run step's stages (its job's one log line, `lockstep.spark.stage_tracker`) and, for a stateful
    pipeline, its state's figures: where the run's seconds go, part by part (none in results of earlier runs)."""
    staged = [r for r in mine if r["airflow"].get("median_stage_s")]
    if not staged:
        return []
    lines = ["The run step's own stages, medians of the same DAG runs (`stage_seconds` in prepared.json): what the "
             "Spark run spends where. For the windowed pipeline, _state rows_ is what its state holds after a "
             "checkpoint, _state rows read_ what a checkpoint read of it, and _state load, apply, write_ the seconds "
             "of reading it (inside _state_), collecting the new state (inside _save_) and writing it (inside "
             "_save_).", "",
             "| pipeline | rate records/s | stages s | state |", "| --- | ---: | --- | --- |"]
    for r in staged:
        st = r["airflow"]["median_stage_s"]
        spent = ", ".join(f"{k} {v}" for k, v in st.items() if not k.startswith("state ") and v >= 0.05)
        state = ", ".join(f"{k[6:]} {int(v):,}" if k.startswith("state rows") else f"{k[6:]} {v}"
                          for k, v in st.items() if k.startswith("state "))
        lines.append(f"| {_config(r)} | {r['rate']:,} | {spent} | {state or '-'} |")
    return [*lines, ""]


def cpu_parts_table(mine: list[dict[str, Any]]) -> list[str]:
    """CPU seconds a checkpoint of Lockstep's costs, part by part (`freshness.cpu_parts` over the run ÷ its DAG
    runs); none for results of earlier runs, which kept no parts."""
    parted = [r for r in mine if r.get("cpu_parts_s") and r["airflow"].get("runs")]
    if not parted:
        return []
    parts = [*freshness.COMPONENTS, freshness.TASKS, "spark-connect"]
    lines = ["CPU seconds a checkpoint costs, part by part: each part's CPU over the run (load and settle) ÷ the DAG "
             "runs. Airflow's four long-lived processes cost time whether or not a checkpoint runs; _tasks and the "
             "rest_ is the executor's workers and the task processes they fork (Airflow's supervisor and task "
             "runner, the DAG file parsed again, the plan, the run's Spark Connect client, the commit); "
             "_spark-connect_ is the server's whole CPU, the records' work included.", "",
             "| pipeline | rate records/s | DAG runs | " + " | ".join(parts) + " | all |",
             "| --- | ---: | ---: | " + " | ".join("---:" for _ in parts) + " | ---: |"]
    for r in parted:
        n, cpu = r["airflow"]["runs"], r["cpu_parts_s"]
        cells = " | ".join(f"{cpu.get(p, 0.0) / n:.2f}" for p in parts)
        lines.append(f"| {_config(r)} | {r['rate']:,} | {n} | {cells} | "
                     f"{sum(cpu.values()) / n:.2f} |")
    return [*lines, ""]


def _windowed(s: dict[str, Any], runs: list[dict[str, Any]], sm: dict[str, Any]) -> list[str]:
    """The windowed pipeline's section: what it computes, how a window's latency is dated, each run's figures."""
    window_s = s.get("window_s", 5)
    ooo = s.get("out_of_orderness_s", 1)
    customers = freshness_windows.customers(s["partitions"])
    ratio = "–" if sm["ratio"] is None else f"{sm['ratio']:.2f}×"
    lines = [
        "## The windowed pipeline",
        "",
        f"**The work.** Per customer, the orders in each tumbling window of {window_s} s of event time, with "
        f"{ooo} s of out-of-orderness (Flink's watermark delay, Quix's grace, Lockstep's `out_of_orderness`), one "
        "output record per customer and window, exactly once. The event time is the Kafka record's timestamp, "
        "which the producer sets to the moment it sent the record, so windows close in real time. The same "
        f"producer, rates and length as above; each of the {s['partitions']} partitions holds customers of its "
        f"own ({customers:,} in all), the customer as the key.",
        "",
        f"- **Lockstep**: `state.window` (`size: {window_s}s`, `event_time: {{column: timestamp, out_of_orderness: "
        f"{ooo}s}}`, 32 key groups, state on S3) in the same lag-triggered DAG through `airflow standalone`.",
        f"- **Flink SQL**: a `TUMBLE` window over the same unbounded source with the records' timestamps as the "
        f"rowtime, RocksDB state, exactly-once sink, checkpoints every {s['peer_checkpoint_s']} s.",
        "- **Quix Streams**: `tumbling_window(...).count().final(closing_strategy=\"partition\")` over the records' "
        f"timestamps, exactly-once, RocksDB state with its changelog topics, commit every {s['peer_checkpoint_s']} s.",
        "",
        "**Latency of a window** = when its result became visible to a `read_committed` consumer minus the window's "
        f"end. No engine can emit a window before a record {ooo} s past its end exists, so {ooo} s is every "
        "engine's floor. Windows that start in the warm-up are checked but not timed. **Checked**: every window "
        "that ends at least 1 s before the load's final watermark must be visible once with its exact count; a "
        "later window an engine fires anyway must be exact too; nothing else. **Sustained** as above, by the "
        "windows' ends.",
        "",
        f"At {TARGET_RATE:,} records/s Lockstep's p99 is **{_s(sm['p99'])} s** against Flink SQL's "
        f"{_s(sm['flink_p99'])} s ({ratio}; issue 69: ≤ {TARGET_VS_FLINK}×, "
        f"{'met' if sm.get('ratio') is not None and sm['ratio'] <= TARGET_VS_FLINK else 'not met'}). Highest rate "
        "sustained (of those "
        "tried): " + ", ".join(f"{freshness.LABELS.get(e, e).split(' (')[0]} **{v:,}/s**" if v else
                               f"{freshness.LABELS.get(e, e).split(' (')[0]} **none**"
                               for e, v in sm["highest"].items()) + ".",
        "",
        "| rate records/s | engine | p50 s | p95 s | p99 s | max s | sustained | sink | windows checked | CPU cores |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    lines += _run_rows(runs, s["settle_s"], "windows")
    lines += ["", "_windows checked_: the windows every engine must emit, found exactly once with their exact count, "
              "and the later ones this engine fired too (each exact). The p-figures are over every customer's window "
              f"result ({customers:,} per window) in the measured {s['seconds'] - s['warm_up_s']:.0f} s.", ""]
    return lines


def section(page: Path) -> str:
    """docs/BENCHMARKS.md's "Freshness" section: the committed freshness page's figures, its date and commit
    (measured apart, by ``make bench-freshness``), or where to get them."""
    head = HEADING + "\n\n"
    sm = page_summary(page, SUMMARY_MARK)
    if sm is None:
        return (head + "Produce-to-visible latency at steady rates, Lockstep through Airflow against Flink SQL and "
                "Quix Streams, is measured apart by `make bench-freshness`, which writes "
                "[BENCHMARKS-freshness.md](BENCHMARKS-freshness.md); it has not been run for this page.")
    rows = sm["rates"]
    ratio = "–" if sm["ratio"] is None else f"{sm['ratio']:.2f}×"

    def p99(engine: str) -> str:
        v = rows.get(f"{engine}@{TARGET_RATE}", {}).get("p99")
        return "–" if v is None else f"{v:.2f} s"

    return (head + f"Measured apart by `make bench-freshness` on {sm['started_at']}, commit {sm['commit']}, not in "
            "this run: see [BENCHMARKS-freshness.md](BENCHMARKS-freshness.md). At "
            f"{TARGET_RATE:,} records/s, from produce to visible for a `read_committed` consumer, every sink read "
            f"back ({_exactness(sm)}): Lockstep through the Airflow scheduler (lag trigger, "
            f"`checkpoints.tasks: one`) p99 **{p99(freshness.LOCKSTEP)}**, Flink SQL (checkpoints every 5 s) "
            f"{p99(freshness.FLINK)}, Quix Streams (commit every 5 s) {p99(freshness.QUIX)}; Lockstep ÷ Flink "
            f"{ratio} "
            f"(targets: ≤ {TARGET_P99_S:g} s and ≤ {TARGET_VS_FLINK}×: "
            f"{'met' if sm['p99_met'] and sm['ratio_met'] else 'not met'})"
            + (f"; Lockstep's CPU {sm['cpu_ratio']:.2f}× Flink's (issue 69: ≤ {TARGET_VS_FLINK}×)"
               if sm.get("cpu_ratio") is not None else "")
            + (f". With its checkpoints {sp['interval_s']} s apart (`checkpoints.trigger.min_interval`, the peers' "
               f"interval): p99 **{_s(sp['p99'])} s**, {_x(sp['ratio'])} Flink's; CPU {_x(sp['cpu_ratio'])} Flink's"
               if (sp := sm.get("spaced")) else "")
            + (f". At {h['rate']:,} records/s: Lockstep p99 **{_s(h['p99'])} s**, Flink SQL {_s(h['flink_p99'])} s, "
               f"{_x(h['ratio'])} (issue 69: ≤ {TARGET_VS_FLINK}×: {'met' if h['met'] else 'not met'})"
               + (f"; with its checkpoints spaced p99 **{_s(hs['p99'])} s**, {_x(hs['ratio'])} Flink's"
                  if (hs := sm.get("high_spaced")) else "")
               if (h := sm.get("high")) else "")
            + ". Highest rate sustained: "
            + ", ".join(f"{freshness.LABELS.get(e, e).split(' (')[0]} {v:,}/s" if v else
                        f"{freshness.LABELS.get(e, e).split(' (')[0]} none" for e, v in sm["highest"].items()) + "."
            + (_windowed_sentence(sm["windowed"], sm.get("windowed_rates", {}), sm.get("window_s"))
               if sm.get("windowed") else ""))


def _exactness(sm: dict[str, Any]) -> str:
    """How exact the page's sinks were, as the section says it: naming the runs that fell behind apart from any
    that were wrong (results before ``inexact`` say exact or NOT exact)."""
    if sm["exact"]:
        return "exact"
    inexact = sm.get("inexact")
    if not inexact:
        return "NOT exact"
    late = [k for k, v in inexact.items() if v == "late"]
    wrong = [k for k, v in inexact.items() if v != "late"]
    return "; ".join(filter(None, [
        "exact except " + ", ".join(late) + " (fell behind: records not visible within the settle time)" if late else "",
        "NOT exact: " + ", ".join(wrong) if wrong else ""]))


def _windowed_sentence(w: dict[str, Any], rates: dict[str, Any], window_s: int | None) -> str:
    def p99(engine: str) -> str:
        v = rates.get(f"{engine}@{TARGET_RATE}", {}).get("p99")
        return "–" if v is None else f"{v:.2f} s"

    ratio = "–" if w.get("ratio") is None else f"{w['ratio']:.2f}×"
    return (f" The windowed pipeline (a {window_s or '?'} s tumbling count per customer), from a window's end to its "
            f"result at "
            f"{TARGET_RATE:,} records/s: Lockstep p99 **{p99(freshness.LOCKSTEP)}**, Flink SQL {p99(freshness.FLINK)}, "
            f"Quix Streams {p99(freshness.QUIX)}; Lockstep ÷ Flink {ratio} (issue 69: ≤ {TARGET_VS_FLINK}×).")


def plot(results: dict[str, Any]) -> bytes:
    runs = [r for r in results["race"]["runs"] if "error" not in r and r["latency_s"]["p99"] is not None]

    def name(engine: str) -> str:
        return freshness.LABELS.get(engine, engine).split(" (")[0].replace(" through Airflow", "") + " p99"

    series = {}
    for pipeline in (freshness.STATELESS, freshness.WINDOWED):
        mine = [r for r in runs if freshness.pipeline_of(r) == pipeline]
        for e in dict.fromkeys(r["engine"] for r in mine):
            label = name(e) if pipeline == freshness.STATELESS else name(e).replace(" p99", " windowed p99")
            series[label] = [(float(r["rate"]), float(r["latency_s"]["p99"])) for r in mine if r["engine"] == e]
    return line_plot(series, "p99 latency against rate (windowed: from a window's end)", "records/s (log scale)", "seconds")


def write(results: dict[str, Any], path: Path, rerendered: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, rerendered) + "\n")
    (path.parent / PLOT).write_bytes(plot(results))


def replace_section(report: Path, page: Path) -> None:
    """``report``'s (docs/BENCHMARKS.md's) freshness section written again from ``page``, the rest as it was."""
    measure.replace_section(report, HEADING, section(page))
