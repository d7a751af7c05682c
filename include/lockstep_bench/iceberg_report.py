"""Writes docs/BENCHMARKS-iceberg.md from the results of ``lockstep bench --iceberg-only``
(``lockstep_bench.iceberg_race``): the engines' medians side by side, each Lockstep engine's ratio to the peer that
does the same work (issue 71's target: ≥ 2×), where Lockstep's checkpoint spends its time, every run with its
table's check and files, the small files of a stream before and after compaction, and the exact spec and SQL."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lockstep_bench import iceberg_race as race_
from lockstep_bench import measure
from lockstep_bench.measure import load_at, median, page_summary
from lockstep_bench.windowed_report import medians

FULL_COMMAND = ("lockstep bench --iceberg-only --repeats 2 --iceberg-no-warm-up --results var/bench/iceberg-results.json "
                "--report docs/BENCHMARKS-iceberg.md")
PAGE = Path("docs") / "BENCHMARKS-iceberg.md"
#: The page's headline figures (`summary`), for docs/BENCHMARKS.md's section (`section`).
SUMMARY_MARK = "<!-- iceberg-summary "
HEADING = "## Kafka → Iceberg"
#: Issue 71's "Done when": Lockstep into Iceberg at least twice the peer's records/s at 10M records.
TARGET = 2.0
LABELS = {race_.LOCKSTEP: "Lockstep (connect mode): the table and a Kafka topic, one checkpoint",
          race_.LOCKSTEP_TABLE: "Lockstep (connect mode): the table alone (no sink.topic), one checkpoint",
          race_.FLINK: "Flink SQL + Iceberg's Flink sink: the table only",
          race_.FLINK_AND_KAFKA: "Flink SQL + Iceberg's Flink sink: the table and a Kafka topic (exactly-once sink)"}


def paired(table: dict[str, dict[str, float]]) -> dict[tuple[str, str], float]:
    """Each Lockstep engine's median records/s over the peer's that does the same work (`iceberg_race.PAIRS`),
    where both ran."""
    return {(mine, peer): table[mine]["records_per_s"] / table[peer]["records_per_s"] for mine, peer in race_.PAIRS
            if mine in table and peer in table and table[peer]["records_per_s"]}


def headline(results: dict[str, Any]) -> list[str]:
    table = medians(results["race"]["runs"])
    return [f"{mine} ÷ {peer}: {ratio:.2f}× (target {TARGET}×: {'met' if ratio >= TARGET else 'not met'})"
            for (mine, peer), ratio in paired(table).items()] + \
        [f"{engine}: {row['records_per_s']:,.0f} records/s, exact {row['exact']}" for engine, row in table.items()]


def floor_figures(race: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Spark's floor (`iceberg_race.FLOORS`), medians over the rounds: the pass itself (``pass_s``: the Spark
    action, the session already open), the helper's wall and the CPU seconds of it and the Connect server."""
    out = {}
    for name in race_.FLOORS:
        mine = [f for f in race.get("floors") or [] if f["pipeline"] == name]
        if mine:
            out[name] = {"pass_s": median([f.get("inner", {}).get("pass_s") for f in mine]),
                         "wall_s": median([f["wall_s"] for f in mine]), "cpu_s": median([f["cpu_s"] for f in mine]),
                         "runs": len(mine)}
    return out


def _floor_section(race: dict[str, Any], table: dict[str, dict[str, float]]) -> list[str]:
    """What the target asks of the time and the CPU, set against Spark's floor on the same input."""
    floors = floor_figures(race)
    peer = table.get(race_.FLINK)
    if not floors or peer is None:
        return []
    budget = peer["wall_s"] / TARGET
    lines = ["", "## What the 2× target asks, against Spark's floor", "",
             f"Lockstep at {TARGET:g}× the peer's table only ({peer['wall_s']:.1f} s, {peer['cpu_s']:.0f} CPU s) "
             f"would finish its checkpoint in **{budget:.1f} s**, with at most {2 * budget:.0f} CPU seconds on this "
             "machine's 2 cores, the Kafka broker's share of them included. Spark's floor, measured once a round "
             "after the engines in the same Spark Connect server over the same input: Lockstep's reader into Spark's "
             "`noop` writer (no transform, no sink), then the same with the race's transform (the JSON parse and "
             "the columns). The pass is the Spark action alone; wall and CPU are the helper process's and the "
             "Connect server's.", "",
             "| what ran, nothing written | pass s | wall s | CPU s | pass ÷ the 2× budget |",
             "| --- | ---: | ---: | ---: | ---: |"]
    labels = {race_.FLOOR_READ: "Lockstep's reader alone", race_.FLOOR_TRANSFORM: "the reader and the race's transform"}
    for name, f in floors.items():
        lines.append(f"| {labels[name]} | {f['pass_s']:.1f} | {f['wall_s']:.1f} | {f['cpu_s']:.0f} | "
                     f"{f['pass_s'] / budget:.2f}× |")
    read = floors.get(race_.FLOOR_TRANSFORM) or next(iter(floors.values()))
    lines += ["", f"Reading and transforming the input in Spark, with nothing written, takes {read['pass_s']:.1f} s: "
              + (f"**more than the {budget:.1f} s the target leaves for the whole checkpoint**, so no sink written from "
                 "Spark can reach it on this machine." if read["pass_s"] >= budget else
                 f"{read['pass_s'] / budget:.0%} of the {budget:.1f} s the target leaves for the whole checkpoint.")]
    return lines


def _where_time_goes(engine: str, runs: list[dict[str, Any]]) -> list[str]:
    """A Lockstep engine's checkpoint, step by step and its run's stages (medians)."""
    stages = _stages(runs)
    if not stages:
        return []
    inner = [r.get("inner", {}) for r in runs]
    return ["", f"## Where {LABELS.get(engine, engine)} spends its time (medians, seconds)", "",
            f"Process {median([r['wall_s'] for r in runs]):.1f}: plan "
            f"{median([i.get('plan_s') for i in inner]):.1f}, run {median([i.get('run_s') for i in inner]):.1f}, "
            f"commit (Kafka transactions, then the table's snapshot) {median([i.get('commit_s') for i in inner]):.1f}. "
            "The run's stages:", "",
            "| " + " | ".join(stages) + " |", "| " + " | ".join("---:" for _ in stages) + " |",
            "| " + " | ".join(f"{v:.1f}" for v in stages.values()) + " |", "",
            "`keep` computes the output once for both writes; `write` is the Kafka transactions (without a sink "
            "topic: the dead letters alone, here none); `iceberg` writes the data files in the Spark tasks and "
            "stages their snapshot on the checkpoint's branch."]


def _stages(runs: list[dict[str, Any]]) -> dict[str, float]:
    names: dict[str, None] = {}
    for r in runs:
        names.update(dict.fromkeys(r.get("inner", {}).get("stages") or {}))
    return {n: median([(r.get("inner", {}).get("stages") or {}).get(n) for r in runs]) for n in names}


def render(results: dict[str, Any], rerendered: bool = False) -> str:
    s, race = results["settings"], results["race"]
    table = medians(race["runs"])
    env = results.get("environment", {})
    inp = race["input"]
    lines = [
        "# Benchmarks: Kafka → Iceberg, exactly once",
        "",
        f"Written by `{FULL_COMMAND}` (`make bench-iceberg`) on {results['started_at']} at commit "
        f"`{results['commit']}`{' (rendered again from its results)' if rerendered else ''}; "
        f"{results.get('seconds', 0):.0f} s in all, load average {load_at(results, 'start')} at the start and "
        f"{load_at(results, 'end')} at the end. "
        + ("One run of each engine first, not counted; then " if s.get("warm_up", True) else "No uncounted run first; ")
        + f"{s['repeats']} round(s), the order rotated each round.",
        "",
        f"Machine: {env.get('cpu_model', '?')} ({env.get('cpus', '?')} cores), {env.get('memory', '?')}; "
        f"Kafka {env.get('kafka', '?')}, Spark {env.get('spark', '?')}, Java {env.get('java', '?')}; peers: "
        + ", ".join(f"{k} {v}" for k, v in (results.get("peers") or {}).items()) + ".",
        "",
        f"**Input**: {inp['records']:,} JSON orders ({inp['bytes'] / 1e6:,.0f} MB) over {inp['partitions']} partitions, "
        "on an isolated platform (one Kafka broker, MinIO, Iceberg 1.10's REST catalog on MinIO, a Spark Connect "
        "server). **Output**: the orders of at least 30.00 (about 90%) in a new Iceberg table per run, the order's "
        "fields and `amount_cents` as columns plus the source partition and offset of each row. Every table is "
        "scanned after its run and each row counted against the input offset it names: missing, twice, unexpected.",
        "",
        "## Records per second (medians)",
        "",
        "| engine | records/s | wall s | CPU s | peak RSS MB | table | data files | table MB |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for engine, row in table.items():
        mine = [r for r in race["runs"] if r["pipeline"] == engine]
        files = median([r["check"]["files"] for r in mine])
        size = median([r["check"]["bytes"] / 1e6 for r in mine])
        lines.append(f"| {LABELS.get(engine, engine)} | {row['records_per_s']:,.0f} | {row['wall_s']:.1f} | "
                     f"{row['cpu_s']:.0f} | {row['peak_rss_mb']:,.0f} | "
                     f"{'exact' if row['exact'] else 'NOT exact'} ({row['exact_runs']}/{row['runs']}) | "
                     f"{files:.0f} | {size:,.0f} |")
    lines += ["", "Each Lockstep engine ÷ the peer that does the same work (records/s; target ≥ 2×):", ""]
    lines += [f"- **{LABELS.get(mine, mine)} ÷ {LABELS.get(peer, peer)}: {r:.2f}×** "
              f"({'met' if r >= TARGET else 'not met'})" for (mine, peer), r in paired(table).items()]
    lines += _floor_section(race, table)
    for engine in race_.LOCKSTEPS:
        lines += _where_time_goes(engine, [r for r in race["runs"] if r["pipeline"] == engine])
    stream = race.get("stream")
    if stream:
        per = [c.get("files") for c in stream["checkpoints"]]
        lines += ["", "## Small files: a stream of checkpoints, then compaction", "",
                  f"Lockstep over {stream['records']:,} records of their own in {len(per)} checkpoints into one "
                  "table: each checkpoint adds a file "
                  f"per source partition it read (files per checkpoint: {', '.join(str(f) for f in per)}). Then "
                  "`lockstep iceberg compact --keep 1` rewrote the older checkpoints' files in one snapshot "
                  f"({stream['compact_s']:.1f} s, the rows read and written by pyiceberg in one process).", "",
                  "| | data files | rows on main | check |", "| --- | ---: | ---: | --- |",
                  f"| after {len(per)} checkpoints | {stream['before']['files']} | {stream['before']['records']:,} | "
                  f"{stream['before']['summary']} |",
                  f"| after `compact --keep 1` | {stream['after']['files']} | {stream['after']['records']:,} | "
                  f"{stream['after']['summary']} |"]
    lines += ["", "## Every run", "", "| round | engine | wall s | records/s | CPU s | table | files | topic |",
              "| ---: | --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for r in race["warm_up"] + race["runs"]:
        topic = r.get("topic_check")
        lines.append(f"| {'warm-up' if r['repeat'] < 0 else r['repeat'] + 1} | {r['pipeline']} | {r['wall_s']:.1f} | "
                     f"{r['records_per_s']:,.0f} | {r['cpu_s']:.0f} | {r['check']['summary']} | {r['check']['files']} | "
                     f"{'-' if topic is None else 'exact' if topic['exact'] else 'NOT exact'} |")
    lines += ["", "## What each engine ran", ""]
    for engine in race_.LOCKSTEPS:
        if race.get("specs", {}).get(engine):
            lines += [f"{LABELS.get(engine, engine)}: its spec (names differ per run):", "", "```yaml",
                      race["specs"][engine].rstrip(), "```", ""]
    for name, statements in (race.get("flink_sql") or {}).items():
        lines += [f"{LABELS.get(name, name)}: its statements (placeholders for what differs per run):", "", "```sql",
                  ";\n\n".join(statements) + ";", "```", ""]
    lines += ["Raw results: `var/bench/iceberg-results.json` of the run (`lockstep bench --iceberg-only --from-results "
              "FILE` renders this page again).", "",
              SUMMARY_MARK + json.dumps({**summary(results), "started_at": results["started_at"]}, sort_keys=True)
              + " -->", ""]
    return "\n".join(lines)


def write(results: dict[str, Any], path: Path, rerendered: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, rerendered))


def summary(results: dict[str, Any]) -> dict[str, Any]:
    table = medians(results["race"]["runs"])
    return {"rates": {e: round(r["records_per_s"]) for e, r in table.items()},
            "ratios": {f"{mine} / {peer}": round(r, 2) for (mine, peer), r in paired(table).items()},
            "exact": {e: r["exact"] for e, r in table.items()}, "commit": results.get("commit"),
            "floor_pass_s": {n: round(f["pass_s"], 1) for n, f in floor_figures(results["race"]).items()}}



def section(page: Path) -> str:
    """docs/BENCHMARKS.md's section on Kafka → Iceberg: the committed page's figures, date and commit (measured
    apart, by ``make bench-iceberg``), or where to get them."""
    head = HEADING + "\n\n"
    sm = page_summary(page, SUMMARY_MARK)
    if sm is None:
        return (head + "Kafka → Iceberg against Flink's Iceberg sink is measured apart by `make bench-iceberg`, which "
                "writes [BENCHMARKS-iceberg.md](BENCHMARKS-iceberg.md); it has not been run for this page.")
    rates, ratios, floor = sm["rates"], sm["ratios"], sm.get("floor_pass_s") or {}
    short = {race_.LOCKSTEP_TABLE: "Lockstep's table alone", race_.FLINK: "Flink's table only",
             race_.LOCKSTEP: "Lockstep's table and topic", race_.FLINK_AND_KAFKA: "Flink's table and exactly-once topic"}
    pairs = "; ".join(f"{short[mine]} {rates[mine]:,} against {short[peer]} {rates[peer]:,}: "
                      f"**{ratios[f'{mine} / {peer}']:.2f}×**" for mine, peer in race_.PAIRS if f"{mine} / {peer}" in ratios)
    text = (f"Measured apart by `make bench-iceberg` on {sm['started_at']}, commit {sm['commit']}, not in this run: see "
            f"[BENCHMARKS-iceberg.md](BENCHMARKS-iceberg.md). 10,000,000 JSON orders into a new Iceberg table per run, "
            f"every table scanned back row by row ({'exact' if all(sm['exact'].values()) else 'NOT exact'}), records/s, "
            f"medians: {pairs} (target ≥ {TARGET:g}×: "
            f"{'met' if ratios and min(ratios.values()) >= TARGET else 'not met'}).")
    if race_.FLOOR_TRANSFORM in floor:
        text += (f" Spark alone reads and transforms the input, writing nothing, in {floor[race_.FLOOR_TRANSFORM]} s "
                 "(the page sets that floor against the time the target leaves).")
    return head + text


def replace_section(report: Path, page: Path) -> None:
    """``report``'s (docs/BENCHMARKS.md's) Kafka → Iceberg section written again from ``page``, the rest as it was."""
    measure.replace_section(report, HEADING, section(page))
