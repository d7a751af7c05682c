"""`lockstep bench --quick` end to end: its own platform, every competitor once on a tiny input,
a report with every table. No timing assertion: the machine is shared and the figures are noise.

Without Airflow (`--no-airflow`): starting `airflow standalone` and three DAG runs was a third of
this test's time; the report's Airflow table is rendered from results in tests/unit, and
`make bench` measures it.

Opt-in (``LOCKSTEP_BENCH_SMOKE=1``): `make bench` runs it first, before the half hour of measuring, and
`make test` skips it. It took 90-150 s of the suite's 30 minutes (a platform of its own, five spark-submit
JVMs), for code no pipeline runs; the report's rendering from results and the sink checks stay in the unit
tier (tests/unit/test_bench_peers.py, test_bench_sink_check.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep_bench.results import CONSUMER_PERF

pytestmark = pytest.mark.skipif(os.environ.get("LOCKSTEP_BENCH_SMOKE") != "1",
                                reason="set LOCKSTEP_BENCH_SMOKE=1 to run the quick bench end to end (make bench does)")

LOCKSTEP = str(Path(sys.executable).parent / "lockstep")


def test_quick_bench_writes_a_complete_report(tmp_path: Path) -> None:
    report, results = tmp_path / "BENCH.md", tmp_path / "results.json"
    done = subprocess.run([LOCKSTEP, "bench", "--quick", "--report", str(report), "--results", str(results),
                           "--state-dir", str(tmp_path / "state"), "--no-airflow"], capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    text = report.read_text()
    for heading in ("## Machine and versions", "## Throughput", "### Ratios", "## Fixed cost of a checkpoint",
                    "## Scaling with input size", "## Scaling with partitions", "## Plan time and metadata",
                    "Airflow's scheduling overhead was not measured in this run"):
        assert heading in text, heading
    ratios = text.split("### Ratios", 1)[1].split("\n## ", 1)[0]
    # One block per Lockstep run mode: "| <mode> | <competitor> | <end-to-end ratio> | ..."
    for mode, competitors in (
            ("Lockstep, Spark Connect (exactly-once)", ("Spark at-least-once", "raw client, 1 process",
                                                        "Lockstep, spark-submit (exactly-once)")),
            ("Lockstep, spark-submit (exactly-once)", ("Spark at-least-once", "raw client, 1 process",
                                                       "kafka-producer-perf-test", "kafka-consumer-perf-test",
                                                       "Lockstep, Python writer (before)"))):
        for competitor in competitors:
            row = next((line for line in ratios.splitlines() if line.startswith(f"| {mode} | {competitor} |")), None)
            assert row is not None and "×" in row.split("|")[3], (mode, competitor, ratios)
    writers = text.split("## Making Lockstep faster", 1)[1]
    assert "| Python writer (before) | 1 |" in writers and "| JVM writer (after) | 1 |" in writers
    assert "JVM writer ÷ Python writer at 10,000 records: **" in writers
    assert (tmp_path / "bench-throughput.png").read_bytes().startswith(b"\x89PNG")
    doc = json.loads(results.read_text())
    for writer in ("lockstep-connect", "lockstep", "lockstep-python-writer"):
        runs = [r for r in doc["main"] if r["pipeline"] == writer]
        assert runs and all(r["inner"]["status"] == "completed" for r in runs), writer
    assert {(r["kind"], r["mode"]) for r in doc["fixed"]} == {(kind, mode) for kind in ("empty", "one-record")
                                                               for mode in ("connect", "submit")}
    assert [p["checkpoints"] for p in doc["history"]] == [10, 100]
    assert not doc.get("airflow")
    # Every run's sink was read back and held exactly what it should (the consumer perf tool writes none).
    # The alternated partition pair: each round both counts, the order swapped from round to round.
    assert [(r["repeat"], r["partitions"]) for r in doc["partition_pairs"]] == [(0, 2), (0, 8)]
    assert "### 2 against 8 partitions, alternated" in text
    for run in doc["main"] + doc["sizes"] + doc["partitions"] + doc["partition_pairs"]:
        if run["pipeline"] == CONSUMER_PERF:
            assert run.get("sink") is None, run
        else:
            assert run["sink"] and run["sink"]["exact"], run
    assert "| sink read back |" in text and "**" not in text.split("| sink read back |", 1)[1].split("\n\n", 1)[0]
