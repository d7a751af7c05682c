"""Many lag-triggered pipelines in one Airflow, a few of them fed (issue 69: "200 lag-triggered pipelines").

``lockstep bench --lag-fleet-only`` (``make bench-lag-fleet``) writes docs/BENCHMARKS-lag-fleet.md.

``pipelines`` pipelines, each over a small topic of its own (``partitions`` partitions), lag-triggered as a user
who wants fresh results sets one (``checkpoints.trigger``: ``lag_records`` 1, ``poll_interval`` ``poll_s``), one
task per checkpoint, in connect mode on the platform's Spark Connect server, with the freshness race's stateless
transform; Airflow on PostgreSQL, the Spark Connect server with ``connect_task_slots`` task slots. ``fed`` of
them get ``rate`` records/s each, the rest nothing.

1. **Start.** Every DAG parsed, then every pipeline unpaused: each watcher fires its pipeline's first checkpoint,
   which finds where to start (`lockstep.rules.lag_trigger`). Waited for until every pipeline has a DAG run
   that succeeded; how long that took is the start's figure.
2. **Load.** One producer process sends ``rate`` records/s to each fed topic for ``seconds``; one watcher process
   reads the fed pipelines' sinks ``read_committed`` (``lockstep_bench.freshness_load``, several topics). Each fed
   pipeline's produce-to-visible latency comes from the freshness race's figures (records produced in the first
   ``warm_up_s`` count for exactness only), and its sink is checked record by record.
3. **Idle.** The idle pipelines' DAG runs are counted before and after the load: a watcher that started a run
   for a topic nothing was written to is a failure of the target.
4. **Cost.** CPU seconds over the load of Airflow's processes (its scheduler and triggerer apart), of the Spark
   Connect server, and the scheduler's loop times (its DEBUG line, as ``many_pipelines`` reads it); for a few fed
   pipelines, their DAG runs' lengths and steps (`lockstep_bench.freshness.dag_run_figures`).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockstep.paths import project_root
from lockstep_bench import freshness_figures, freshness_load, many_pipelines, workloads
from lockstep_bench.freshness import cpu_by_component, cpu_seconds, dag_run_figures

if TYPE_CHECKING:
    from lockstep.ops.airflow_client import AirflowClient
    from lockstep_dev.platform import Platform

#: Issue 69's target: every fed pipeline's p99 produce-to-visible at most this.
TARGET_P99_S = 15.0
#: The platform's services beside Lockstep's processes, whose CPU the report shows apart: the broker and the S3
#: server answer every watcher's and every checkpoint's requests.
PLATFORM_SERVICES = ("kafka", "s3", "postgres")
#: How many fed pipelines have their DAG runs' steps read from their task logs (each reads a few logs).
RUNS_LOOKED_AT = 3


@dataclass
class LagFleetSettings:
    pipelines: int = 200
    fed: int = 20
    #: records/s to each fed pipeline's topic
    rate: int = 1_000
    partitions: int = 2
    #: the load's length, warm-up included
    seconds: float = 120.0
    warm_up_s: float = 30.0
    #: how long after the load every record must have arrived
    settle_s: float = 120.0
    poll_s: int = 1
    #: how long every pipeline gets to complete its first checkpoint
    start_timeout_s: float = 1_200.0
    warm_checkpoints: bool = True
    #: task slots of the platform's Spark Connect server (``local[N]``; a checkpoint's own tasks stay as many as
    #: the cores): twenty small checkpoints at once, whose tasks mostly wait on Kafka, queued for 2 slots
    connect_task_slots: int = 8
    state_dir: Path | None = None
    results: Path | None = None
    report: Path = Path("docs/BENCHMARKS-lag-fleet.md")

    def __post_init__(self) -> None:
        if not 1 <= self.fed <= self.pipelines or self.rate < 1:
            raise ValueError(f"--lag-fleet-fed must be from 1 to --lag-fleet-pipelines ({self.pipelines}), and "
                             f"--lag-fleet-rate at least 1: the load feeds some pipelines (got {self.fed} fed at "
                             f"{self.rate} records/s)")

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


def idle_runs_started(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The idle pipelines' DAG runs started between two counts, by DAG (only those that started any)."""
    return {dag: n - before.get(dag, 0) for dag, n in after.items() if n > before.get(dag, 0)}


def verdict(rows: list[dict[str, Any]], idle_started: dict[str, int]) -> dict[str, Any]:
    """The target's verdict: every fed pipeline exact with a p99 of at most `TARGET_P99_S`, and no idle run."""
    p99s = [r["latency_s"]["p99"] for r in rows if r.get("latency_s", {}).get("p99") is not None]
    within = sum(1 for r in rows if r.get("exact") and (r.get("latency_s", {}).get("p99") or 1e9) <= TARGET_P99_S)
    return {"fed": len(rows), "within": within, "exact": sum(1 for r in rows if r.get("exact")),
            "worst_p99_s": max(p99s) if p99s else None,
            "median_p99_s": round(statistics.median(p99s), 3) if p99s else None,
            "idle_runs": sum(idle_started.values()),
            "met": bool(rows) and within == len(rows) and not idle_started}


class LagFleet:
    """The pipelines, their platform's Airflow, and what is measured; `measure` returns the results."""

    def __init__(self, settings: LagFleetSettings, platform: Platform, work_dir: Path,
                 log: Callable[[str], None]) -> None:
        self.s = settings
        self.platform = platform
        self.bootstrap = str(platform.kafka.bootstrap)
        self.work_dir = work_dir
        self.log = log
        self.client: AirflowClient | None = None
        self.names: list[str] = []
        self.dag_ids: dict[str, str] = {}

    @property
    def fed(self) -> list[str]:
        return self.names[:self.s.fed]

    @property
    def idle(self) -> list[str]:
        return self.names[self.s.fed:]

    # ---- set-up ---------------------------------------------------------------------------------------
    def prepare(self) -> dict[str, Any]:
        """Topics and specs, then Airflow (its DAG file reads the specs' folder) with every DAG parsed."""
        from lockstep.ops.airflow_client import AirflowClient
        from lockstep.spec import load_spec

        s = self.s
        tag = uuid.uuid4().hex[:4]
        folder = self.work_dir / "lag-fleet-specs"
        self.names = [f"lagfleet-{tag}-{i:03d}" for i in range(s.pipelines)]
        started = time.monotonic()
        workloads.create_topics(self.bootstrap, [t for n in self.names for t in (f"{n}-in", f"{n}-out")], s.partitions)
        workloads.create_topics(self.bootstrap, [f"{n}-out-dlq" for n in self.names])
        for name in self.names:
            spec = workloads.write_spec(folder, name, f"{name}-in", f"{name}-out", max_records=100_000,
                                        remote=self.platform.spark_connect.url, retain=5,
                                        trigger={"lag_records": 1, "poll_interval": f"{s.poll_s}s"}, tasks="one")
            self.dag_ids[name] = load_spec(spec).dag_id
        topics_s = round(time.monotonic() - started, 1)
        os.environ["LOCKSTEP_PIPELINES_DIR"] = str(folder)
        os.environ.update(many_pipelines.SCHEDULER_DEBUG)
        self.log(f"lag fleet: {s.pipelines} pipelines' topics and specs in {topics_s:.0f} s; starting Airflow")
        started = time.monotonic()
        self.platform.up(with_airflow=True, out=sys.stderr)
        self.client = AirflowClient(self.platform.airflow.url, "admin", self.platform.airflow.admin_password() or "")
        for dag_id in self.dag_ids.values():
            self.client.wait_for_dag(dag_id, timeout=600)
        parsed_s = round(time.monotonic() - started, 1)
        self.log(f"lag fleet: {len(self.dag_ids)} DAGs parsed {parsed_s:.0f} s after Airflow was started")
        return {"topics_s": topics_s, "airflow_and_parse_s": parsed_s, "airflow_db": self.platform.state.airflow_db,
                "parallelism": self.platform.airflow.parallelism}

    def close(self) -> None:
        if self.client is not None:
            try:
                many_pipelines.set_paused(self.client, list(self.dag_ids.values()), True)
            finally:
                self.platform.stop("airflow", out=sys.stderr)
                os.environ.pop("LOCKSTEP_PIPELINES_DIR", None)
                for key in many_pipelines.SCHEDULER_DEBUG:
                    os.environ.pop(key, None)

    # ---- the phases ----------------------------------------------------------------------------------
    def runs_by_dag(self, states: tuple[str, ...] = ()) -> dict[str, int]:
        """Every DAG run of the fleet so far (``states``: only those), counted by pipeline name."""
        assert self.client is not None
        by_dag = {dag: name for name, dag in self.dag_ids.items()}
        counted: Counter[str] = Counter()
        offset = 0
        query = "".join(f"&state={state}" for state in states)
        while True:
            page = self.client._call("GET", f"/api/v2/dags/~/dagRuns?limit=100&offset={offset}{query}")
            runs = page.get("dag_runs", [])
            counted.update(by_dag[r["dag_id"]] for r in runs if r["dag_id"] in by_dag)
            offset += len(runs)
            if not runs or offset >= int(page.get("total_entries", 0)):
                return dict(counted)

    def start(self) -> dict[str, Any]:
        """Every pipeline unpaused; until each has a DAG run that succeeded (its first checkpoint)."""
        assert self.client is not None
        started = time.monotonic()
        many_pipelines.set_paused(self.client, list(self.dag_ids.values()), False)
        done: dict[str, int] = {}
        while time.monotonic() - started < self.s.start_timeout_s:
            done = self.runs_by_dag(("success",))
            if len(done) == len(self.names):
                break
            time.sleep(10)
        failed = self.runs_by_dag(("failed",))
        doc = {"seconds": round(time.monotonic() - started, 1), "pipelines_with_a_run": len(done),
               "failed_runs": sum(failed.values()), "runs": sum(done.values()), "load_average": os.getloadavg()}
        self.log(f"lag fleet: start: {doc}")
        if len(done) < len(self.names):
            raise RuntimeError(f"{len(self.names) - len(done)} of {len(self.names)} pipelines had no successful first "
                               f"checkpoint within {self.s.start_timeout_s:.0f} s ({sum(failed.values())} runs failed)")
        return doc

    def load(self) -> dict[str, Any]:
        """The fed pipelines loaded, their sinks watched; the idle ones' runs counted around it."""
        import numpy as np

        s = self.s
        folder = self.work_dir / "lag-fleet-load"
        folder.mkdir(parents=True, exist_ok=True)
        py = sys.executable
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(project_root() / "include"),
                                                                          os.environ.get("PYTHONPATH")]))}
        kept = np.frombuffer(freshness_load.kept_mask(freshness_load._pool(0)), dtype=np.uint8)
        idle_before = {n: c for n, c in self.runs_by_dag().items() if n in set(self.idle)}
        fed_before = {n: c for n, c in self.runs_by_dag().items() if n in set(self.fed)}
        log_offset = many_pipelines.log_size(self.platform)
        roots = (self.platform.state.pids["airflow"], self.platform.state.pids["spark-connect"])
        pids = self.platform.state.pids

        def cpu_now() -> dict[str, float]:
            return {"airflow": cpu_seconds(roots[:1]), "spark-connect": cpu_seconds(roots[1:]),
                    **cpu_by_component(roots[0]),
                    **{name: cpu_seconds((pids[name],)) for name in PLATFORM_SERVICES if name in pids}}

        cpu_before = cpu_now()
        since = datetime.now(UTC)
        wall_started = time.monotonic()
        sinks = [arg for n in self.fed for arg in ("--topic", f"{n}-out")]
        watcher = subprocess.Popen([py, "-m", "lockstep_bench.freshness_load", "watch", "--bootstrap", self.bootstrap,
                                    *sinks, "--partitions", str(s.partitions), "--folder", str(folder)], env=env)
        sources = [arg for n in self.fed for arg in ("--topic", f"{n}-in")]
        self.log(f"lag fleet: {s.fed} pipelines fed at {s.rate:,} records/s each for {s.seconds:.0f} s; "
                 f"{len(self.idle)} idle")
        producer = subprocess.run([py, "-m", "lockstep_bench.freshness_load", "produce", "--bootstrap", self.bootstrap,
                                   *sources, "--partitions", str(s.partitions), "--rate", str(s.rate), "--seconds",
                                   str(s.seconds), "--out", str(folder / "ticks.json")], env=env, check=False)
        if producer.returncode:
            watcher.kill()
            raise RuntimeError(f"the load failed (exit {producer.returncode})")
        ticks = {n: freshness_figures.Ticks.from_json(json.loads(
            (freshness_load.topic_folder(folder, f"{n}-in", len(self.fed)) / "ticks.json").read_text()))
            for n in self.fed}
        want = sum(freshness_figures.expected_records(kept, t.ends, t.partitions, freshness_load.POOL)
                   for t in ticks.values())
        deadline = time.monotonic() + s.settle_s
        while time.monotonic() < deadline and _seen(folder) < want:
            time.sleep(0.5)
        time.sleep(1.0)  # a duplicate written after the last expected record would arrive now
        wall = time.monotonic() - wall_started
        cpu_after = cpu_now()
        (folder / "stop").write_text("")
        watcher.wait(120)
        load_average = os.getloadavg()
        loops = many_pipelines.loop_stats(many_pipelines.log_since(self.platform, log_offset))
        idle_after = {n: c for n, c in self.runs_by_dag().items() if n in set(self.idle)}
        fed_after = {n: c for n, c in self.runs_by_dag().items() if n in set(self.fed)}
        rows = [self._pipeline_figures(folder, n, ticks[n], kept, fed_after.get(n, 0) - fed_before.get(n, 0))
                for n in self.fed]
        started_idle = idle_runs_started(idle_before, idle_after)
        assert self.client is not None
        runs = {n: dag_run_figures(self.client, self.dag_ids[n], since.timestamp()) for n in self.fed[:RUNS_LOOKED_AT]}
        cpu = {k: round(cpu_after.get(k, 0.0) - cpu_before.get(k, 0.0), 1) for k in cpu_after}
        doc = {"rows": rows, "idle_runs_started": started_idle, "wall_s": round(wall, 1), "cpu_s": cpu,
               "cpu_cores": {k: round(v / wall, 2) for k, v in cpu.items()}, "loops": loops,
               "load_average": [round(x, 2) for x in load_average], "since": since.isoformat(), "runs": runs,
               "verdict": verdict(rows, started_idle)}
        self.log(f"lag fleet: {doc['verdict']}; CPU cores {doc['cpu_cores']}; scheduler loops {loops}")
        return doc

    def _pipeline_figures(self, folder: Path, name: str, ticks: freshness_figures.Ticks, kept: Any,
                          dag_runs: int) -> dict[str, Any]:
        from array import array

        import numpy as np

        sink = freshness_load.topic_folder(folder, f"{name}-out", self.s.fed)
        seen = []
        for p in range(ticks.partitions):
            a = array("d")
            a.frombytes((sink / f"seen-{p}.bin").read_bytes())
            seen.append(np.frombuffer(a, dtype=np.float64))
        counts = json.loads((sink / "watch.json").read_text())
        figs = freshness_figures.figures(ticks, seen, kept, freshness_load.POOL, self.s.warm_up_s)
        exact = figs["exact"] and not counts["duplicates"] and not counts["wrong"] and not counts["no_headers"]
        return {"pipeline": name, "records": int(sum(ticks.ends)), "expected": figs["expected"],
                "found": figs["found"], "duplicates": counts["duplicates"], "unexpected": figs["unexpected"],
                "wrong": counts["wrong"], "exact": exact, "latency_s": figs["latency_s"],
                "sustained": figs["sustained"] and exact, "dag_runs": dag_runs}

    def measure(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        try:
            doc["setup"] = self.prepare()
            doc["start"] = self.start()
            doc["load"] = self.load()
        finally:
            self.close()
        return doc

def _seen(folder: Path) -> int:
    try:
        return int(json.loads((folder / "progress.json").read_text()).get("seen", 0))
    except (OSError, ValueError):
        return 0
