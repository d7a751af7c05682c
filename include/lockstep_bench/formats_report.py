"""Writes docs/BENCHMARKS-formats.md from the results of ``lockstep bench --formats-only``
(``lockstep_bench.formats``), and the short "Formats" section of docs/BENCHMARKS.md from that page.

The page carries its headline figures in a comment (``SUMMARY_MARK``), so ``make bench``, which measures
none of them, states them in docs/BENCHMARKS.md from the committed page rather than dropping them. The
arithmetic (medians, ratios) is apart from the Markdown."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from lockstep_bench import formats
from lockstep_bench.measure import load_at, median, page_summary

FULL_COMMAND = ("lockstep bench --formats-only --results var/bench/formats-results.json "
                "--report docs/BENCHMARKS-formats.md")
PAGE = Path("docs") / "BENCHMARKS-formats.md"
SUMMARY_MARK = "<!-- formats-summary "
#: Issue 40: Lockstep with Avro in and out at least this share of the perf tools' records/s.
TARGET = 0.5
LABELS = {formats.LOCKSTEP_AVRO: "Lockstep, Avro (registry) in and out",
          formats.LOCKSTEP_JSON: "Lockstep, JSON (the benchmark transform)",
          formats.PERF: "kafka-producer-perf-test × k"}


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per competitor: the medians of its runs (records/s end to end; for the perf tools also their own)."""
    out: dict[str, dict[str, Any]] = {}
    for name in formats.COMPETITORS:
        mine = [r for r in runs if r["pipeline"] == name]
        if not mine:
            continue
        row: dict[str, Any] = {k: median([float(r[k]) for r in mine if r.get(k) is not None])
                               for k in ("records_per_s", "wall_s", "cpu_s", "peak_rss_mb", "broker_cpu_s",
                                         "connect_server_cpu_s")}
        row["runs"] = len(mine)
        row["exact_runs"] = sum(1 for r in mine if r["check"]["exact"])
        if name == formats.PERF:
            row["tool_records_per_s"] = median([float(r["inner"]["tool_records_per_s"]) for r in mine])
            row["producers"] = sorted({int(r["inner"]["producers"]) for r in mine})
        else:
            row["transactions"] = sorted({int(r["inner"]["transactions"]) for r in mine if "transactions" in r["inner"]})
            row["spark_seconds"] = median([float(r["inner"]["spark_seconds"]) for r in mine
                                           if r["inner"].get("spark_seconds")])
        out[name] = row
    return out


def _div(a: float | None, b: float | None) -> float | None:
    if not a or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The headline figures: medians, the ratios measured side by side, the target."""
    table = medians(results["race"]["runs"])
    perf = table.get(formats.PERF, {})
    avro = table.get(formats.LOCKSTEP_AVRO, {})
    js = table.get(formats.LOCKSTEP_JSON, {})
    ratios = {
        "avro_vs_perf": _div(avro.get("records_per_s"), perf.get("records_per_s")),
        "avro_vs_perf_tools_own": _div(avro.get("records_per_s"), perf.get("tool_records_per_s")),
        "json_vs_perf": _div(js.get("records_per_s"), perf.get("records_per_s")),
        "json_vs_perf_tools_own": _div(js.get("records_per_s"), perf.get("tool_records_per_s")),
        "avro_vs_json": _div(avro.get("records_per_s"), js.get("records_per_s")),
    }
    s = results["settings"]
    return {"started_at": results.get("started_at"), "commit": results.get("commit"), "records": s["records"],
            "partitions": s["partitions"], "repeats": s["repeats"], "producers": results["race"].get("producers"),
            "rates": {name: {"records_per_s": row.get("records_per_s"), "tool_records_per_s": row.get("tool_records_per_s")}
                      for name, row in table.items()},
            "ratios": {k: (round(v, 3) if v is not None else None) for k, v in ratios.items()},
            "target": TARGET, "met": ratios["avro_vs_perf"] is not None and ratios["avro_vs_perf"] >= TARGET,
            "input": results["race"].get("input", {}),
            "exact": all(r["check"]["exact"] for r in results["race"]["runs"] + results["race"].get("warm_up", []))}


def _x(v: float | None) -> str:
    return "?" if v is None else f"{v:.2f}×"


def _rate(v: float | None) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.0f}"


def headline(results: dict[str, Any]) -> list[str]:
    """The ratios as the run's last log lines."""
    sm = summary(results)
    r = sm["ratios"]
    return [f"Lockstep Avro ÷ perf tool (k={sm['producers']}): {_x(r['avro_vs_perf'])} end to end, "
            f"{_x(r['avro_vs_perf_tools_own'])} of the tools' own figure; target {TARGET}× "
            f"{'met' if sm['met'] else 'NOT met'}",
            f"Lockstep JSON ÷ perf tool: {_x(r['json_vs_perf'])} end to end, {_x(r['json_vs_perf_tools_own'])} of "
            f"the tools' own; Avro ÷ JSON {_x(r['avro_vs_json'])}"]


def render(results: dict[str, Any], rerendered: bool = False) -> str:
    s, race = results["settings"], results["race"]
    table = medians(race["runs"])
    sm = summary(results)
    r = sm["ratios"]
    env = results.get("environment", {})
    inp = race.get("input", {})
    k = race.get("producers")
    lines = [
        "# Formats: Avro through the Schema Registry against kafka-producer-perf-test",
        "",
        f"Generated by `make bench-formats` (`{FULL_COMMAND}`) on {results['started_at']}, commit "
        f"{results.get('commit', '?')}, in {results.get('seconds', 0):.0f} s"
        + (" (report re-rendered from its results)" if rerendered else "") + ". Every figure on this page comes "
        "from that one run on an isolated platform (Kafka broker, S3 server, Spark Connect server and Apicurio "
        "Registry started by the benchmark); the machine is shared, so the ratios measured side by side are "
        "what holds.",
        "",
        f"**The work** (`lockstep_bench/formats.py`). {s['records']:,} orders (`lockstep_dev.datagen.order` "
        f"with its padding) over {s['partitions']} partitions, twice: as Avro framed for the registry (magic "
        f"byte, schema id {inp.get('schema_id', '?')}, payload; `BenchOrder` registered under `<topic>-value`), "
        f"{inp.get('avro_record_bytes', '?')} bytes a record, and as the other benchmarks' JSON, "
        f"{inp.get('json_record_bytes', '?')} bytes a record. Lockstep runs one checkpoint over the input in "
        "connect mode (a warm, long-lived Spark Connect server):",
        "",
        "- **Avro**: `source.value: avro-confluent` (decoded by schema id with Spark's `from_avro`), "
        "`lockstep_examples.bench:avro_transform` (keep `amount >= 30`, add `amount_cents`, return `data`), "
        "`sink.value: avro-confluent` with `BenchEnrichedOrder`, `auto_register: true`;",
        "- **JSON**: the benchmark transform of docs/BENCHMARKS.md (`from_json`, the same filter and field, "
        "`to_json`) over the JSON input;",
        f"- **kafka-producer-perf-test × k**: k = {k} processes at once, k being the transactions Lockstep's "
        "checkpoints wrote (read from each run's prepared checkpoint), each sending its share of the records, "
        f"{inp.get('avro_record_bytes', '?')}-byte records (the Avro input's average), with the producer settings "
        "of the other benchmarks (`acks=all`, `linger.ms=20`, `batch.size=1000000`, lz4). Its wall time runs "
        "from the first JVM's start to the last one's end, **JVM start included**; the tools' own figure (each "
        "times its own send loop, after its JVM and producer started; the records over the longest of those) "
        "is beside it.",
        "",
        f"The competitors alternated over {s['repeats']} rounds (each round starting one place further), after "
        "one uncounted run of each Lockstep variant; figures are medians. A Lockstep run's wall time is its "
        "whole process (plan, the Spark stage, commit); its CPU includes the Spark Connect server's; the broker's "
        "CPU is apart.",
        "",
        f"**Every sink was read back.** Lockstep's: the committed records counted by a `read_committed` consumer "
        f"against the filter's exact count ({inp.get('kept', 0):,} of {s['records']:,}), its dead-letter topic "
        f"empty, and the first {formats.SAMPLE:,} records of a partition decoded (Avro: with the writer schema "
        "their framing names, which must be a version of the sink's subject) and compared with the input's "
        "orders. The perf tools': their end offsets. A mismatch fails the run. "
        + ("All sinks were exact." if sm["exact"] else "**Some sink was not exact (see Every run).**"),
        "",
        "| competitor | records/s | wall s | CPU s | broker CPU s | peak RSS MB | ÷ perf tool, end to end | "
        "÷ perf tool, tools' own | sinks |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    perf = table.get(formats.PERF, {})
    for name, row in table.items():
        rate = row["records_per_s"]
        own = f" (tools' own: {_rate(row['tool_records_per_s'])})" if name == formats.PERF else ""
        lines.append(f"| {LABELS[name]} | {_rate(rate)}{own} | {row['wall_s']:.1f} | {row['cpu_s']:.0f} | "
                     f"{row['broker_cpu_s']:.0f} | {row['peak_rss_mb']:,.0f} | "
                     f"{'—' if name == formats.PERF else _x(_div(rate, perf.get('records_per_s')))} | "
                     f"{'—' if name == formats.PERF else _x(_div(rate, perf.get('tool_records_per_s')))} | "
                     f"exact in {row['exact_runs']} of {row['runs']} |")
    lines += [
        "",
        f"- **Target (issue 40): Lockstep with Avro ≥ {TARGET}× the perf tools — "
        f"{'met' if sm['met'] else 'not met'}: {_x(r['avro_vs_perf'])}** end to end "
        f"({_x(r['avro_vs_perf_tools_own'])} of the tools' own figure, which leaves their JVM starts out).",
        f"- Lockstep with the JSON transform: {_x(r['json_vs_perf'])} end to end "
        f"({_x(r['json_vs_perf_tools_own'])} of the tools' own). Avro ÷ JSON: {_x(r['avro_vs_json'])}.",
        f"- Input generated in this run: Avro {_rate(inp.get('avro_records_per_s'))} records/s "
        f"({inp.get('avro_seconds', '?')} s; fastavro's `schemaless_writer` per record and confluent-kafka's "
        f"producer, one Python process), JSON {_rate(inp.get('json_records_per_s'))} records/s "
        f"({inp.get('json_seconds', '?')} s, the project's generator).",
    ]
    for name, stage in ((formats.LOCKSTEP_AVRO, "read, decode, transform, encode, write"),
                        (formats.LOCKSTEP_JSON, "read, transform, write")):
        measured = table.get(name)
        if measured:
            lines.append(f"- {LABELS[name]}: the Spark stage ({stage}) "
                         f"{measured['spark_seconds']:.1f} s of {measured['wall_s']:.1f} s, "
                         f"{' or '.join(str(t) for t in measured['transactions'])} transactions, "
                         f"CPU {measured['cpu_s']:.0f} s of which the Spark Connect server "
                         f"{measured['connect_server_cpu_s']:.0f} s; the broker {measured['broker_cpu_s']:.0f} s.")
    parts = race.get("parts") or []
    if parts:
        read = next((p for p in parts if p["part"] == "read"), None)
        lines += ["", "## Where the time goes", "",
                  "The Avro and the JSON input read again by Lockstep's own reader in a Connect session, in as many "
                  "tasks as the checkpoints read with, into Spark's `noop` sink: no Kafka write, no transaction, "
                  "no commit. Each part's Connect server CPU seconds, and per record; \"beyond the read\" is the "
                  "part's CPU minus the read's alone. A checkpoint does more than the parts: it produces, with "
                  "Lockstep's headers on every record, and commits. With a decoded source, the write's own pass "
                  "also counts the records that do not decode (`lockstep.formats.codecs.watch`, connect mode); only "
                  "when there are some does it write the output again with them beside it, each in its source "
                  "partition's task (`lockstep.spark.placement.place`: a shuffle).", "",
                  "| part | noop s | records/s | server CPU s | CPU µs per record | beyond the read, µs per record |",
                  "|---|---:|---:|---:|---:|---:|"]
        for p in parts:
            per = p["connect_server_cpu_s"] / p["rows"] * 1e6 if p["rows"] else float("nan")
            beyond = ((p["connect_server_cpu_s"] - read["connect_server_cpu_s"]) / p["rows"] * 1e6
                      if read and p["rows"] and p is not read else None)
            lines.append(f"| {p['part']} | {p['noop_s']:.1f} | {_rate(p['rows'] / p['noop_s'] if p['noop_s'] else None)}"
                         f" | {p['connect_server_cpu_s']:.1f} | {per:.2f} | "
                         f"{'—' if beyond is None else f'{beyond:.2f}'} |")
    lines += ["", "## Every run", "",
              "The first runs marked warm-up are not in the medians; they also told k.", "",
              "| # | competitor | wall s | records/s | CPU s | Connect server CPU s | broker CPU s | peak RSS MB | "
              "sink check | its own figures |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---|---|"]
    warm = len(race.get("warm_up", []))
    for i, run in enumerate(race.get("warm_up", []) + race["runs"], 1):
        own = ", ".join(f"{key} {v}" for key, v in run.get("inner", {}).items() if key not in ("state",))
        lines.append(f"| {i}{' (warm-up)' if i <= warm else ''} | {run['pipeline']} | {run['wall_s']:.1f} | "
                     f"{run['records_per_s']:,.0f} | {run['cpu_s']:.0f} | {run.get('connect_server_cpu_s', 0):.0f} | "
                     f"{run.get('broker_cpu_s', 0):.0f} | {run['peak_rss_mb']:,.0f} | {run['check']['summary']} | "
                     f"{own} |")
    lines += ["", "## Machine and versions", "",
              f"- machine: {env.get('cpus', '?')} cores ({env.get('cpu_model', '?')}), {env.get('memory', '?')}, "
              f"Linux {env.get('kernel', '?')}; load average {load_at(results, 'start')} at the start, "
              f"{load_at(results, 'end')} at the end",
              f"- Spark {env.get('spark', '?')}, Kafka {env.get('kafka', '?')} (broker and perf tool), "
              f"{env.get('java', '?')}, Python {env.get('python', '?')}, confluent-kafka "
              f"{env.get('confluent_kafka', '?')}; Apicurio Registry (the platform's)", "",
              SUMMARY_MARK + json.dumps(sm, sort_keys=True) + " -->", ""]
    return "\n".join(lines)


def write(results: dict[str, Any], path: Path, rerendered: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, rerendered))


def read_summary(page: Path) -> dict[str, Any] | None:
    """The headline figures a formats page carries (None: no page, or one without them)."""
    return page_summary(page, SUMMARY_MARK)


def section(page: Path) -> str:
    """docs/BENCHMARKS.md's "Formats" section: the figures of the committed formats page, with its date and
    commit (measured apart, by ``make bench-formats``), or where to get them."""
    head = "## Formats\n\n"
    sm = read_summary(page)
    if sm is None:
        return (head + "Avro framed for the Schema Registry through Lockstep against `kafka-producer-perf-test` is "
                "measured apart by `make bench-formats` (`lockstep bench --formats-only`), which writes "
                "[BENCHMARKS-formats.md](BENCHMARKS-formats.md); it has not been run for this page.")
    r, rates = sm["ratios"], sm["rates"]
    avro = rates.get(formats.LOCKSTEP_AVRO, {})
    js = rates.get(formats.LOCKSTEP_JSON, {})
    perf = rates.get(formats.PERF, {})
    return (head + f"Measured apart by `make bench-formats` (`lockstep bench --formats-only`) on {sm['started_at']}, "
            f"commit {sm['commit']}, not in this run: see [BENCHMARKS-formats.md](BENCHMARKS-formats.md). "
            f"{sm['records']:,} orders over {sm['partitions']} partitions, connect mode, one checkpoint, every sink "
            f"read back ({'exact' if sm['exact'] else 'NOT exact'}), medians of {sm['repeats']} alternated rounds:\n\n"
            "| | records/s | ÷ perf tool, end to end | ÷ perf tool, tools' own |\n|---|---:|---:|---:|\n"
            f"| Lockstep, Avro in and out (registry-framed; parse → filter → encode) | {_rate(avro.get('records_per_s'))} "
            f"| **{_x(r['avro_vs_perf'])}** | {_x(r['avro_vs_perf_tools_own'])} |\n"
            f"| Lockstep, JSON (the benchmark transform) | {_rate(js.get('records_per_s'))} | {_x(r['json_vs_perf'])} "
            f"| {_x(r['json_vs_perf_tools_own'])} |\n"
            f"| kafka-producer-perf-test × {sm['producers']} (Lockstep's transactions) | "
            f"{_rate(perf.get('records_per_s'))} (tools' own: {_rate(perf.get('tool_records_per_s'))}) | — | — |\n\n"
            f"Target (issue 40): Avro ≥ {sm['target']}× the perf tools end to end — "
            f"{'met' if sm['met'] else 'not met'}.")
