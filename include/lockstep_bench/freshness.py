"""``lockstep bench --freshness-only`` (``make bench-freshness``): how long after a record is produced its result
is visible to a ``read_committed`` consumer, at a steady rate, for Lockstep through the real Airflow scheduler and
for Flink SQL and Quix Streams on the same input.

The work, the same for every engine: the main race's transform (``lockstep_examples.bench``: parse, keep
``amount >= 30``, add ``amount_cents``, the source topic/partition/offset as headers) from a fresh 8-partition
topic to a fresh sink topic, exactly once.

* **Load** (``freshness_load.produce``): a producer process sends the benchmark's orders at a fixed rate for the
  run's seconds, the first ``warm_up_s`` of them uncounted in the latency (every engine's first seconds: a JVM's
  JIT, a first Spark job, Quix's first assignment) but checked like the rest.
* **Visibility** (``freshness_load.watch``): a watcher process reads the sink ``read_committed`` and notes when
  each record became visible; ``freshness_figures`` turns that and the producer's tick table into latencies,
  checks that every kept record arrived once and nothing else did, and says whether the engine sustained the
  rate (its lag did not grow, everything arrived within ``settle_s`` of the load's end).
* **Lockstep**: a lag-triggered pipeline (``checkpoints.trigger``: ``lag_records: 1``, ``poll_interval: 1s``) in
  connect mode, as a user would schedule it, through ``airflow standalone`` (scheduler, triggerer, dag-processor,
  api-server): the watcher fires, Airflow starts a DAG run, the run's tasks plan, run and commit. Its CPU is that
  of the Airflow processes (task processes included) and the Spark Connect server.
* **Flink SQL**: the same statements as the main race over an unbounded source in streaming mode,
  ``sink.delivery-guarantee = exactly-once``, checkpoints every ``peer_checkpoint_s`` seconds, each of which
  commits the sink's transactions (``jobs/flink_fresh_job.py``).
* **Quix Streams**: the main race's application, ``processing_guarantee="exactly-once"``,
  ``commit_interval = peer_checkpoint_s`` (``jobs/quix_job.py`` without end offsets).

**The windowed pipeline** (``windowed_rates``; ``lockstep_bench.freshness_windows`` says what it computes and how
its latency is dated): a tumbling count per customer over the Kafka records' timestamps, which the producer sets
to the moment it sent each record. Lockstep runs ``state.window`` in the same lag-triggered DAG; Flink SQL a
``TUMBLE`` over the same unbounded source (``jobs/flink_fresh_job.py --window-seconds``, RocksDB state); Quix
``tumbling_window(...).count().final(closing_strategy="partition")`` (``jobs/quix_window_job.py`` without end
offsets). The watcher dates each window's result, and the check is every window's exact count, once.

The engines take turns at each rate, each round starting one place further, each on its own topics.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockstep.paths import cache_dir, project_root
from lockstep_bench import freshness_figures, freshness_load, freshness_windows, peers, windowed, workloads

if TYPE_CHECKING:
    from lockstep.ops.airflow_client import AirflowClient
    from lockstep_dev.platform import Platform

LOCKSTEP, FLINK, QUIX = "lockstep-airflow", "flink-sql", "quix-streams"
#: Lockstep with its checkpoints at least ``spaced_interval_s`` apart (``checkpoints.trigger.min_interval``), the
#: peers' checkpoint interval: the stateless pipeline only (a window's result waits for the watermark's checkpoint).
LOCKSTEP_SPACED = "lockstep-airflow-spaced"
LOCKSTEPS = (LOCKSTEP, LOCKSTEP_SPACED)
#: The step lines of a Lockstep task log (``lockstep_airflow.operators``) and the seconds each reports.
STEP_LINES = {"wait": re.compile(r"(?:the checkpoint in flight settled|checkpoint \d+ was prepared) after ([0-9.]+) s"),
              "plan": re.compile(r"checkpoint \d+: planned \d+ records from .* in ([0-9.]+) s"),
              "run": re.compile(r"checkpoint \d+: run step finished in ([0-9.]+) s"),
              "commit": re.compile(r"checkpoint \d+: completed in ([0-9.]+) s"),
              # inside commit: a pipelined checkpoint's wait for the one it was planned on top of
              "below": re.compile(r"checkpoint \d+: checkpoint \d+ settled after ([0-9.]+) s")}
#: The run's one line of its stages' seconds (`lockstep.spark.stage_tracker`): ``checkpoint 12 stages: read 0.41 s, ...``.
STAGES_LINE = re.compile(r"checkpoint \d+ stages: (.*)")
STAGE = re.compile(r"([a-z_]+) ([0-9.]+) s")
#: A stateful run's line of its state (`lockstep.spark.keyed_state`): rows kept, rows read, and the seconds of its
#: load, apply and write, which the ``state``, ``write`` and ``save`` stages hold.
STATE_LINE = re.compile(r"checkpoint \d+: state \w+: \d+ keys, (\d+) rows, .* it read \d+ groups \((\d+) rows\) .*"
                        r"\(load ([0-9.]+) s, apply ([0-9.]+) s, write ([0-9.]+) s\)")
#: How many of a run's later DAG runs have their task logs read for ``STEP_LINES``.
STEP_LOGS = 8
ENGINES = (LOCKSTEP, LOCKSTEP_SPACED, FLINK, QUIX)
#: The pipelines raced: the main race's stateless transform, and a windowed count per customer.
STATELESS, WINDOWED = "stateless", "windowed"
LABELS = {LOCKSTEP: "Lockstep through Airflow (lag trigger, connect mode)",
          LOCKSTEP_SPACED: "Lockstep, checkpoints 5 s apart (lag trigger with min_interval 5s, as Flink's interval)",
          FLINK: "Flink SQL exactly-once (checkpoints every 5 s)",
          QUIX: "Quix Streams exactly-once (commit every 5 s)"}


@dataclass
class FreshnessSettings:
    rates: tuple[int, ...] = (2_000, 20_000, 100_000)
    #: the windowed pipeline's rates (none: not raced)
    windowed_rates: tuple[int, ...] = (2_000, 20_000)
    window_s: int = freshness_windows.WINDOW_S
    out_of_orderness_s: int = freshness_windows.OUT_OF_ORDERNESS_S
    #: the load's length, warm-up included
    seconds: float = 150.0
    warm_up_s: float = 30.0
    partitions: int = 8
    #: how long after the load every record must have arrived
    settle_s: float = 120.0
    engines: tuple[str, ...] = ENGINES
    #: Flink's checkpoint interval and Quix's commit interval
    peer_checkpoint_s: int = 5
    #: Lockstep's ``checkpoints.trigger.poll_interval``
    poll_s: int = 1
    #: Lockstep's ``checkpoints.tasks``: one task per checkpoint, the setting for freshness
    tasks: str = "one"
    #: Lockstep's ``checkpoints.pipelined`` (None: the spec's default, off)
    pipelined: bool | None = None
    #: Where Lockstep's stateless pipeline parses the JSON order: "format" (``source.value: json`` with its JSON
    #: Schema, as Flink's table declares ``'format' = 'json'``) or "transform" (``from_json`` in the transform)
    decode: str = "format"
    #: Lockstep's ``checkpoints.trigger.min_interval`` in seconds (0: none, checkpoints back to back)
    min_interval_s: int = 0
    #: ... and `LOCKSTEP_SPACED`'s: the peers' checkpoint interval
    spaced_interval_s: int = 5
    #: the Spark Connect server, which lives across every run as a user's does, warmed up when it starts as
    #: ``lockstep dev up --warm-checkpoints`` warms a new one (on a cold server the windowed pipeline's first
    #: checkpoints took 20-26 s, compiling its state's code on the way)
    warm_checkpoints: bool = True
    state_dir: Path | None = None
    results: Path | None = None
    report: Path = Path("docs/BENCHMARKS-freshness.md")

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


def stage_figures(log_text: str) -> dict[str, float]:
    """A run step's stages' seconds from its task log (`STAGES_LINE`) and, for a stateful run, its state's figures
    (`STATE_LINE`: ``state rows``, ``state rows read``, ``state load``, ``state apply``, ``state write``)."""
    found: dict[str, float] = {}
    if (m := STAGES_LINE.search(log_text)) is not None:
        found.update({name: float(seconds) for name, seconds in STAGE.findall(m.group(1))})
    if (m := STATE_LINE.search(log_text)) is not None:
        found.update(zip(("state rows", "state rows read", "state load", "state apply", "state write"),
                         map(float, m.groups()), strict=True))
    return found


def cpu_seconds(roots: tuple[int, ...]) -> float:
    """User + system seconds of the processes under ``roots``, their reaped children included."""
    import psutil

    total = 0.0
    for pid in roots:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in procs:
            try:
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                continue
    return total


#: Airflow's long-lived processes, by a word of their command line; the rest (task processes, the executor's
#: workers, standalone itself) count as "tasks and the rest".
COMPONENTS = ("scheduler", "triggerer", "dag-processor", "api-server")
TASKS = "tasks and the rest"


def component_of(cmdline: list[str]) -> str:
    """Which of `COMPONENTS` a process of Airflow's is, by its command line; `TASKS` otherwise."""
    words = " ".join(cmdline[:4]).replace("_", "-")  # standalone's api-server calls itself "airflow api_server"
    return next((c for c in COMPONENTS if f"airflow {c}" in words or words.endswith(f" {c}")), TASKS)


def cpu_by_component(root: int) -> dict[str, float]:
    """User + system seconds so far of each long-lived Airflow process under ``root``, by `component_of`, with the
    children it has reaped (the dag-processor's parsing processes); the executor's workers and the task processes
    they fork are left to `TASKS`."""
    import psutil

    found: dict[str, float] = {}
    try:
        procs = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return found
    for proc in procs:
        try:
            name = component_of(proc.cmdline())
            if name != TASKS:
                t = proc.cpu_times()
                found[name] = found.get(name, 0.0) + t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return found


def cpu_parts(airflow: int, spark_connect: int) -> dict[str, float]:
    """CPU seconds so far of Lockstep's processes, part by part: Airflow's `COMPONENTS`, `TASKS` (the rest of
    Airflow's tree: the executor's workers, the task processes they fork, standalone itself) and the Spark Connect
    server. Their sum is `cpu_seconds` of both roots."""
    parts = cpu_by_component(airflow)
    parts[TASKS] = max(0.0, cpu_seconds((airflow,)) - sum(parts.values()))
    parts["spark-connect"] = cpu_seconds((spark_connect,))
    return parts


def _pause_quietly(client: AirflowClient, dag_id: str) -> None:
    from lockstep.ops.airflow_client import AirflowError

    for attempt in range(6):
        try:
            client.pause(dag_id)
            return
        except AirflowError:
            time.sleep(2 * (attempt + 1))


class FreshnessRace:
    def __init__(self, settings: FreshnessSettings, platform: Platform, work_dir: Path,
                 log: Callable[[str], None]) -> None:
        self.s = settings
        self.platform = platform
        self.bootstrap = platform.kafka.bootstrap
        self.work_dir = work_dir
        self.log = log
        self.kept: Any = None  # numpy uint8 array: the transform keeps pool record i
        self.client: AirflowClient | None = None
        self.specs: dict[tuple[str, str, int], Path] = {}
        self.topics: dict[tuple[str, str, int], tuple[str, str]] = {}

    def _runs(self) -> list[tuple[str, int]]:
        """(pipeline, rate) of every run's load, in the order they run."""
        return [(STATELESS, rate) for rate in self.s.rates] + [(WINDOWED, rate) for rate in self.s.windowed_rates]

    def _engines(self, pipeline: str) -> tuple[str, ...]:
        """The engines that race ``pipeline``: `LOCKSTEP_SPACED` races the stateless one only."""
        return engines_for(self.s.engines, pipeline)

    def _min_interval_s(self, engine: str) -> int:
        return self.s.spaced_interval_s if engine == LOCKSTEP_SPACED else self.s.min_interval_s

    # ---- set-up ---------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Every run's topics, and Lockstep's specs before Airflow starts (its DAG file reads the folder)."""
        import numpy as np

        self.kept = np.frombuffer(freshness_load.kept_mask(freshness_load._pool(0)), dtype=np.uint8)
        folder = self.work_dir / "freshness-specs"
        for pipeline, rate in self._runs():
            for engine in self._engines(pipeline):
                kind = "" if pipeline == STATELESS else "win-"
                short = "spaced" if engine == LOCKSTEP_SPACED else engine.split("-")[0]
                name = f"fresh-{kind}{short}-{rate}-{uuid.uuid4().hex[:6]}"
                source, sink = f"{name}-in", f"{name}-out"
                workloads.create_topic(self.bootstrap, source, self.s.partitions)
                # A window's record is stamped with its window's time by some engines: keep it whatever its age.
                workloads.create_topic(self.bootstrap, sink, self.s.partitions,
                                       config=windowed.KEEP if pipeline == WINDOWED else None)
                workloads.create_topic(self.bootstrap, f"{sink}-dlq", 1)
                self.topics[(pipeline, engine, rate)] = (source, sink)
                if engine in LOCKSTEPS:
                    stateless = pipeline == STATELESS
                    decoded = stateless and self.s.decode == "format"  # the order parsed by the json format
                    interval = self._min_interval_s(engine)
                    self.specs[(pipeline, engine, rate)] = workloads.write_spec(
                        folder, name, source, sink, max_records=max(100_000, rate * 60),
                        remote=self.platform.spark_connect.url, retain=5,
                        trigger={"lag_records": 1, "poll_interval": f"{self.s.poll_s}s",
                                 **({"min_interval": f"{interval}s"} if interval else {})},
                        tasks=self.s.tasks,
                        pipelined=self.s.pipelined,
                        transform=(workloads.JSON_TRANSFORM if decoded else workloads.TRANSFORM if stateless
                                   else windowed.TRANSFORM),
                        source_value=workloads.json_source() if decoded else None,
                        state=None if stateless else window_state(self.s.window_s, self.s.out_of_orderness_s))
        if any(e in LOCKSTEPS for e in self.s.engines):
            os.environ["LOCKSTEP_PIPELINES_DIR"] = str(folder)
            self.log("starting airflow standalone for Lockstep's lag-triggered pipelines")
            started = time.monotonic()
            self.platform.up(with_airflow=True, out=sys.stderr)
            from lockstep.ops.airflow_client import AirflowClient

            self.client = AirflowClient(self.platform.airflow.url, "admin", self.platform.airflow.admin_password() or "")
            from lockstep.spec import load_spec

            for path in self.specs.values():
                self.client.wait_for_dag(load_spec(path).dag_id)
            self.log(f"airflow ready after {time.monotonic() - started:.0f} s")

    def close(self) -> None:
        if self.client is not None:
            self.platform.stop("airflow", out=sys.stderr)
            os.environ.pop("LOCKSTEP_PIPELINES_DIR", None)

    # ---- engines --------------------------------------------------------------------------------------
    @contextmanager
    def _lockstep(self, pipeline: str, engine: str, rate: int) -> Iterator[tuple[int, ...]]:
        from lockstep.spec import load_spec

        assert self.client is not None
        dag_id = load_spec(self.specs[(pipeline, engine, rate)]).dag_id
        self.client.unpause(dag_id)
        deadline = time.monotonic() + 300
        while not any(r["state"] == "success" for r in self.client.dag_runs(dag_id)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{dag_id}: no DAG run succeeded within 300 s of unpausing it")
            time.sleep(1)
        try:
            yield (self.platform.state.pids["airflow"], self.platform.state.pids["spark-connect"])
        finally:
            _pause_quietly(self.client, dag_id)
            deadline = time.monotonic() + 120
            while any(r["state"] in ("running", "queued") for r in self.client.dag_runs(dag_id)) and \
                    time.monotonic() < deadline:
                time.sleep(1)

    @contextmanager
    def _peer(self, pipeline: str, engine: str, rate: int) -> Iterator[tuple[int, ...]]:
        source, sink = self.topics[(pipeline, engine, rate)]
        root = project_root()
        window = (self.s.window_s, self.s.out_of_orderness_s) if pipeline == WINDOWED else None
        if engine == FLINK:
            cmd = peers.flink_fresh_command(cache_dir(), root, self.bootstrap, source, sink, self.s.partitions,
                                            self.s.peer_checkpoint_s, window)
        else:
            cmd = peers.quix_fresh_command(cache_dir(), root, self.bootstrap, source, sink, self.s.peer_checkpoint_s,
                                           window)
        out_path = self.work_dir / f"{engine}-{pipeline}-{rate}.log"
        with out_path.open("w") as out:
            proc = subprocess.Popen(cmd.argv, env=cmd.env, stdout=subprocess.PIPE, stderr=out, text=True,
                                    start_new_session=True)
            ready = threading.Event()
            lines: list[str] = []

            def pump() -> None:
                assert proc.stdout is not None
                for line in proc.stdout:
                    lines.append(line)
                    if line.startswith("BENCH_READY"):
                        ready.set()

            threading.Thread(target=pump, daemon=True).start()
            try:
                deadline = time.monotonic() + 180
                while not ready.wait(0.5):
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"{engine} did not start (see {out_path}): {''.join(lines)[-2000:]}")
                yield (proc.pid,)
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(60)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(10)

    # ---- one run --------------------------------------------------------------------------------------
    def run(self, engine: str, rate: int, pipeline: str = STATELESS) -> dict[str, Any]:
        source, sink = self.topics[(pipeline, engine, rate)]
        folder = self.work_dir / f"{engine}-{pipeline}-{rate}"
        folder.mkdir(parents=True, exist_ok=True)
        py = sys.executable
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(project_root() / "include"),
                                                                          os.environ.get("PYTHONPATH")]))}
        lockstep = engine in LOCKSTEPS
        engine_cm = self._lockstep(pipeline, engine, rate) if lockstep else self._peer(pipeline, engine, rate)
        windows = pipeline == WINDOWED
        watch = ["watch-windows"] if windows else ["watch", "--partitions", str(self.s.partitions)]
        with engine_cm as roots:
            watcher = subprocess.Popen([py, "-m", "lockstep_bench.freshness_load", *watch, "--bootstrap",
                                        self.bootstrap, "--topic", sink, "--folder", str(folder)], env=env)
            cpu_before = cpu_seconds(roots)
            parts_before = cpu_parts(*roots) if lockstep else {}
            wall_started = time.monotonic()
            producer = subprocess.run([py, "-m", "lockstep_bench.freshness_load", "produce", "--bootstrap",
                                       self.bootstrap, "--topic", source, "--partitions", str(self.s.partitions),
                                       "--rate", str(rate), "--seconds", str(self.s.seconds), "--out",
                                       str(folder / "ticks.json"), *(["--windowed"] if windows else [])],
                                      env=env, check=False)
            if producer.returncode:
                watcher.kill()
                raise RuntimeError(f"the load of {engine} at {rate}/s failed (exit {producer.returncode})")
            ticks_doc = json.loads((folder / "ticks.json").read_text())
            ticks = freshness_figures.Ticks.from_json(ticks_doc)
            if windows:
                want_windows = freshness_windows.expected(ticks, freshness_load.POOL, self.s.window_s,
                                                          self.s.out_of_orderness_s)

                def arrived() -> bool:
                    return freshness_windows.complete(_window_rows(folder), want_windows)
            else:
                want = self._expected(ticks_doc["ends"])

                def arrived() -> bool:
                    try:
                        return int(json.loads((folder / "progress.json").read_text()).get("seen", 0)) >= want
                    except (OSError, ValueError):
                        return False
            deadline = time.monotonic() + self.s.settle_s
            while time.monotonic() < deadline and not arrived():
                time.sleep(0.5)
            time.sleep(1.0)  # a duplicate written after the last expected record would arrive now
            cpu = cpu_seconds(roots) - cpu_before
            parts = {k: round(v - parts_before.get(k, 0.0), 1) for k, v in cpu_parts(*roots).items()} \
                if lockstep else {}
            wall = time.monotonic() - wall_started
            (folder / "stop").write_text("")
            watcher.wait(120)
        counts = json.loads((folder / "watch.json").read_text())
        if windows:
            figs = freshness_windows.figures(ticks, _window_rows(folder), want_windows, self.s.warm_up_s,
                                             self.s.window_s)
            exact = figs["exact"] and not counts["not_windows"]
        else:
            figs, exact = self._record_figures(folder, ticks, counts)
        row = {"engine": engine, "rate": rate, "pipeline": pipeline, "records": ticks_doc["records"],
               "sent_s": ticks_doc["sent_s"], "achieved_rate": round(ticks_doc["records"] / max(ticks_doc["sent_s"], 1e-9)),
               "slowest_tick_s": ticks_doc["slowest_tick_s"], "watch": counts, **figs,
               "exact": exact, "sustained": figs["sustained"] and exact,
               "cpu_s": round(cpu, 1), "cpu_cores": round(cpu / wall, 2), "wall_s": round(wall, 1)}
        if lockstep:
            row["airflow"] = self._dag_runs(pipeline, engine, rate, ticks_doc["started"])
            row["cpu_parts_s"] = parts
        lat = figs["latency_s"]
        what = "windows" if windows else "records"
        self.log(f"{engine} {pipeline} at {rate:,}/s: p50 {lat['p50']} s, p99 {lat['p99']} s, max {lat['max']} s; "
                 f"{figs['found']:,} of {figs['expected']:,} {what} found, "
                 f"{figs.get('duplicated', counts.get('duplicates'))} duplicated, "
                 f"{figs['unexpected']} unexpected, {'exact' if exact else 'NOT EXACT'}; "
                 f"{'sustained' if row['sustained'] else 'not sustained'}; CPU {row['cpu_cores']} cores")
        for topic in (source, sink):
            workloads.delete_topic(self.bootstrap, topic)
        return row

    def _record_figures(self, folder: Path, ticks: freshness_figures.Ticks,
                        counts: dict[str, int]) -> tuple[dict[str, Any], bool]:
        """The stateless pipeline's figures from the watcher's visibility times, and whether the sink is exact."""
        import numpy as np

        seen = []
        for p in range(self.s.partitions):
            a = array("d")
            a.frombytes((folder / f"seen-{p}.bin").read_bytes())
            seen.append(np.frombuffer(a, dtype=np.float64))
        assert self.kept is not None
        figs = freshness_figures.figures(ticks, seen, self.kept, freshness_load.POOL, self.s.warm_up_s)
        return figs, figs["exact"] and not counts["duplicates"] and not counts["wrong"] and not counts["no_headers"]

    def _expected(self, ends: list[int]) -> int:
        assert self.kept is not None
        return freshness_figures.expected_records(self.kept, ends, self.s.partitions, freshness_load.POOL)

    def _dag_runs(self, pipeline: str, engine: str, rate: int, load_started: float) -> dict[str, Any]:
        from lockstep.spec import load_spec

        assert self.client is not None
        return dag_run_figures(self.client, load_spec(self.specs[(pipeline, engine, rate)]).dag_id, load_started)

    def measure(self) -> dict[str, Any]:
        rows = []
        self.prepare()
        try:
            for turn, (pipeline, rate) in enumerate(self._runs()):
                engines = self._engines(pipeline)
                order = list(engines[turn % len(engines):]) + list(engines[:turn % len(engines)])
                for engine in order:
                    self.log(f"freshness: {engine}, {pipeline}, at {rate:,} records/s for {self.s.seconds:.0f} s")
                    try:
                        rows.append(self.run(engine, rate, pipeline))
                    except Exception as exc:  # noqa: BLE001 - one engine's failure is a row, not the end
                        self.log(f"freshness: {engine}, {pipeline}, at {rate:,}/s failed: {exc}")
                        rows.append({"engine": engine, "rate": rate, "pipeline": pipeline, "error": str(exc)[:2000]})
        finally:
            self.close()
        return {"settings": self.s.to_json(), "runs": rows}


def engines_for(engines: tuple[str, ...], pipeline: str) -> tuple[str, ...]:
    """Of ``engines``, those that race ``pipeline``: every one for the stateless pipeline; `LOCKSTEP_SPACED` not
    for the windowed one, whose results wait for a checkpoint past each window's end."""
    return engines if pipeline == STATELESS else tuple(e for e in engines if e != LOCKSTEP_SPACED)


def dag_run_figures(client: AirflowClient, dag_id: str, load_started: float) -> dict[str, Any]:
    """The DAG runs of ``dag_id`` that started after ``load_started`` and succeeded: how many, how long each took,
    the gap between one's end and the next one's start, and, from the later runs' task logs, their steps' and
    stages' seconds (`STEP_LINES`, `stage_figures`)."""
    from datetime import datetime

    def ts(text: str | None) -> float | None:
        return datetime.fromisoformat(text).timestamp() if text else None

    runs: list[dict[str, Any]] = []
    for r in client.dag_runs(dag_id):
        start, end = ts(r.get("start_date")), ts(r.get("end_date"))
        if start is None or end is None or start < load_started or r.get("state") != "success":
            continue
        tasks = client.task_instances(dag_id, r["dag_run_id"])
        per_task = {t: round((ts(ti.get("end_date")) or 0) - (ts(ti.get("start_date")) or 0), 2)
                    for t, ti in tasks.items()}
        queued = ts(r.get("queued_at")) or start
        runs.append({"run_id": r["dag_run_id"], "queued_at": queued, "start": start, "end": end,
                     "wall_s": round(end - queued, 2), "tasks_s": per_task})
    runs.sort(key=lambda r: r["start"])
    # From one run's end to the next run's start: with the watcher one run ahead the next run is queued
    # before this one ends, so what is left is Airflow starting it.
    gaps = [b["start"] - a["end"] for a, b in zip(runs, runs[1:], strict=False)]
    steps: dict[str, list[float]] = {}
    stages: dict[str, list[float]] = {}
    for r in runs[len(runs) // 2:][:STEP_LOGS]:  # the later runs: past the warm-up
        for task in r["tasks_s"]:
            text = client.task_log(dag_id, r["run_id"], task)
            for step, pattern in STEP_LINES.items():
                if (m := pattern.search(text)) is not None:
                    steps.setdefault(step, []).append(float(m.group(1)))
            for name, value in stage_figures(text).items():
                stages.setdefault(name, []).append(value)

    def med(values: list[float]) -> float | None:
        return round(sorted(values)[len(values) // 2], 2) if values else None

    return {"runs": len(runs), "median_run_s": med([r["end"] - r["start"] for r in runs]),
            "median_queued_s": med([r["wall_s"] for r in runs]),
            "median_gap_s": med(gaps),
            "median_task_s": {t: med([r["tasks_s"].get(t, 0.0) for r in runs]) for t in
                              (runs[0]["tasks_s"] if runs else {})},
            "median_step_s": {k: med(v) for k, v in steps.items()},
            "median_stage_s": {k: med(v) for k, v in stages.items()}}


def window_state(window_s: int, out_of_orderness_s: int) -> dict[str, Any]:
    """Lockstep's ``state`` section for the windowed pipeline: the windowed race's count per customer, over the
    Kafka record's timestamp (the transform keeps the reader's ``timestamp`` column)."""
    state = windowed.window_state()
    state["event_time"] = {"column": "timestamp", "out_of_orderness": f"{out_of_orderness_s}s"}
    state["window"] = {**state["window"], "size": f"{window_s}s"}
    return state


def _window_rows(folder: Path) -> Any:
    """The window watcher's rows so far (``freshness_load.watch_windows``), whole rows only."""
    import numpy as np

    try:
        body = (folder / "windows.bin").read_bytes()
    except OSError:
        body = b""
    row = 8 * freshness_windows.ROW
    return np.frombuffer(body[:len(body) - len(body) % row], dtype=np.float64).reshape(-1, freshness_windows.ROW)


def pipeline_of(row: dict[str, Any]) -> str:
    """A run's pipeline; results from before the windowed pipeline have none: stateless."""
    return str(row.get("pipeline", STATELESS))


def highest_sustained(rows: list[dict[str, Any]], engine: str, pipeline: str = STATELESS) -> int | None:
    rates = [r["rate"] for r in rows if r.get("engine") == engine and r.get("sustained") and pipeline_of(r) == pipeline]
    return max(rates) if rates else None


__all__ = ["COMPONENTS", "ENGINES", "FLINK", "LABELS", "LOCKSTEP", "LOCKSTEPS", "LOCKSTEP_SPACED", "QUIX",
           "STATELESS", "TASKS", "WINDOWED", "FreshnessRace", "FreshnessSettings", "component_of", "cpu_by_component",
           "cpu_parts", "cpu_seconds", "engines_for", "highest_sustained", "pipeline_of", "stage_figures", "window_state"]
