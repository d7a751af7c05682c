"""``lockstep bench``: start an isolated platform, generate the input, run every measurement.

Competitors are alternated (A B C D, B C D A, ...) over the same input topic so that the noise of
a shared machine hits all of them alike; the report quotes medians and ratios measured together.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from lockstep.paths import cache_dir, project_root
from lockstep_bench import (
    formats,
    freshness,
    history,
    iceberg_race,
    joins,
    keyed_state,
    lag_fleet,
    peers,
    sink_check,
    windowed,
    workloads,
)
from lockstep_bench import pipelines as pl
from lockstep_bench.measure import Run, RunFailed, execute
from lockstep_bench.results import (
    CONSUMER_PERF,
    FLINK_SQL,
    LARGE_PIPELINES,
    LOCKSTEP,
    LOCKSTEP_CONNECT,
    LOCKSTEP_CONNECT_IDENTITY,
    LOCKSTEP_PYTHON,
    PARTITION_PIPELINES,
    PEERS,
    PIPELINES,
    PRODUCER_PERF,
    QUIX,
    RAW,
    SPARK,
    Results,
    run_of,
)

if TYPE_CHECKING:
    from lockstep_dev.platform import Platform

S = TypeVar("S")


@dataclass
class Settings:
    records: int = 1_000_000
    partitions: int = 8
    repeats: int = 3
    sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000, 5_000_000)
    partition_counts: tuple[int, ...] = (1, 8, 64, 256, 1024)
    partition_records: int = 1_000_000
    #: Few and many partitions, Lockstep alternating between them over ``partition_rounds`` rounds (issue 44).
    partition_pair: tuple[int, int] = (8, 1024)
    partition_rounds: int = 3
    #: The large input's records (0: skipped), over ``partitions``.
    large_records: int = 10_000_000
    history: tuple[int, ...] = (10, 1_000, 10_000)
    fixed_repeats: int = 3
    perf_tools: bool = True
    python_writer: bool = True
    airflow: bool = True
    #: Generated pipelines scheduled together in the Airflow of the overhead measurement (0: skipped).
    pipelines: int = 50
    #: The generated pipelines' tasks per checkpoint (``checkpoints.tasks``), and the database of the Airflow
    #: they run in: the set-up docs/operations.md recommends for many pipelines.
    pipelines_tasks: str = "one"
    airflow_db: str = "postgres"
    peers: bool = True  # Flink SQL and Quix Streams, exactly-once (set up on first use)
    report: Path = Path("docs/BENCHMARKS.md")
    results: Path | None = None
    baseline: Path | None = None
    state_dir: Path | None = None
    quick: bool = False

    @classmethod
    def quick_settings(cls, **overrides: Any) -> Settings:
        base: dict[str, Any] = dict(records=10_000, partitions=4, repeats=1, sizes=(10_000,), partition_counts=(4,),
                    partition_records=10_000, partition_pair=(2, 8), partition_rounds=1, large_records=0,
                    history=(10, 100), fixed_repeats=1, quick=True,
                    peers=False, pipelines=3)  # the smoke test stays offline of PyFlink; --peers forces them on
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Bench:
    def __init__(self, settings: Settings, platform: Platform, work_dir: Path) -> None:
        self.s = settings
        self.platform = platform
        self.bootstrap = platform.kafka.bootstrap
        self.work_dir = work_dir
        #: per input topic (and whether the transform keeps everything): which input offsets have an output
        self._want: dict[tuple[str, bool], list[Any]] = {}
        #: per input topic: the transactions of Lockstep's latest checkpoint over it (the perf tool's producers)
        self._transactions: dict[str, int] = {}
        # How each competitor's process is made: name -> (workload, ends, sink topic, tag) -> Command.
        # A new competitor is one entry here, one name in ``results`` and its label in ``report``.
        self.commands: dict[str, Any] = {
            LOCKSTEP: lambda w, ends, sink, tag: self._lockstep(w, sink, tag, "jvm"),
            LOCKSTEP_CONNECT: lambda w, ends, sink, tag: self._lockstep(w, sink, tag, "jvm", connect=True),
            LOCKSTEP_CONNECT_IDENTITY: lambda w, ends, sink, tag: self._lockstep(w, sink, tag, "jvm", connect=True,
                                                                                 transform=workloads.IDENTITY),
            LOCKSTEP_PYTHON: lambda w, ends, sink, tag: self._lockstep(w, sink, tag, "python"),
            SPARK: lambda w, ends, sink, tag: pl.spark_command(self.bootstrap, w.topic, sink, ends),
            RAW: lambda w, ends, sink, tag: pl.raw_command(self.bootstrap, w.topic, sink, ends),
            FLINK_SQL: lambda w, ends, sink, tag: peers.flink_command(cache_dir(), project_root(), self.bootstrap,
                                                                      w.topic, sink, ends),
            QUIX: lambda w, ends, sink, tag: peers.quix_command(cache_dir(), project_root(), self.bootstrap, w.topic,
                                                                sink, ends),
            # As many producers as Lockstep's checkpoint has transactions (each writes with one producer):
            # the tool's ceiling for the same number of writers.
            PRODUCER_PERF: lambda w, ends, sink, tag: formats.perf_command(
                self.bootstrap, sink, w.records, self._producers(w), round(w.bytes / w.records),
                self.work_dir / f"perf-{tag}"),
            CONSUMER_PERF: lambda w, ends, sink, tag: pl.consumer_perf_command(self.bootstrap, w.topic, w.records,
                                                                               self.work_dir),
        }

    def _lockstep(self, w: workloads.Workload, sink: str, tag: str, writer: str, connect: bool = False,
                  transform: str = workloads.TRANSFORM) -> pl.Command:
        spec = workloads.write_spec(self.work_dir / "specs", f"bench-{tag}", w.topic, sink, w.records, writer=writer,
                                    remote=self.platform.spark_connect.url if connect else None, transform=transform)
        return pl.lockstep_command(spec, self.connect_server_pid if connect else None)

    @property
    def connect_server_pid(self) -> int:
        """The platform's Spark Connect server: connect mode's runs count its CPU and memory as theirs."""
        return self.platform.state.pids["spark-connect"]

    def competitors(self) -> tuple[str, ...]:
        """The end-to-end pipelines of the main comparison and the size scaling, in alternation order."""
        return PIPELINES + (PEERS if self.s.peers else ())

    # ---- one run of one competitor -------------------------------------------------------------
    def run_one(self, name: str, w: workloads.Workload, ends: dict[int, int], repeat: int = 0,
                sink: str | None = None) -> Run:
        """One run into a new sink topic, deleted after its read-back; or into ``sink``, a topic earlier runs
        wrote to (kept), read back from where this run began."""
        tag = uuid.uuid4().hex[:6]
        fresh = sink is None and name != CONSUMER_PERF
        sink = sink or f"bench-out-{name}-{tag}"
        if fresh:
            workloads.create_topic(self.bootstrap, sink, w.partitions)
        starts = {} if fresh or name == CONSUMER_PERF else workloads.end_offsets(self.bootstrap, sink)
        try:
            run = execute(name, self.commands[name](w, ends, sink, tag), w.records, w.partitions, repeat=repeat)
            if name != CONSUMER_PERF:
                run.sink = self._read_back(name, w, sink, starts).to_json()
        finally:
            if fresh:
                workloads.delete_topic(self.bootstrap, sink)
        if run.inner.get("records_in", w.records) != w.records:
            raise RunFailed(f"{name} read {run.inner['records_in']} records, expected {w.records}")
        if name in (LOCKSTEP, LOCKSTEP_CONNECT) and run.inner.get("transactions"):
            self._transactions[w.topic] = int(run.inner["transactions"])
        check = run.sink or {}
        log(f"{name:22} {w.label}: {run.wall_s:7.1f} s  {run.records_per_s:10,.0f} rec/s  "
            f"peak {run.peak_rss_mb:,.0f} MB  cpu {run.cpu_s:.0f} s  {json.dumps(run.inner)}"
            + (f"  sink {sink_check.SinkCheck(**{k: v for k, v in check.items() if k != 'exact'}).summary()}"
               if check else ""))
        if check and not check["exact"] and name in (LOCKSTEP, LOCKSTEP_CONNECT, LOCKSTEP_CONNECT_IDENTITY, LOCKSTEP_PYTHON):
            raise RunFailed(f"{name}'s sink {sink} was not exact: {check}")
        return run

    def _producers(self, w: workloads.Workload) -> int:
        """Lockstep's transactions over ``w`` as its latest run reported them, else one per partition (its
        writer's default before any run, ``sink.parallelism: auto`` capped by the partitions)."""
        return self._transactions.get(w.topic) or w.partitions

    def _read_back(self, name: str, w: workloads.Workload, sink: str, starts: dict[int, int]) -> sink_check.SinkCheck:
        """The run's output in its sink, from ``starts``, against its input (``lockstep_bench.sink_check``): the
        perf tool's by count."""
        if name == PRODUCER_PERF:
            return sink_check.read_back(self.bootstrap, sink, None, count=w.records, starts=starts)
        keep_all = name == LOCKSTEP_CONNECT_IDENTITY
        key = (w.topic, keep_all)
        if key not in self._want:
            self._want[key] = sink_check.expected(w.records, w.partitions, keep_all=keep_all)
        return sink_check.read_back(self.bootstrap, sink, self._want[key], starts=starts)

    def alternate(self, w: workloads.Workload, names: tuple[str, ...], repeats: int) -> list[Run]:
        """Each round runs every competitor once; round r starts r places further along the list,
        so no competitor always runs first (right after the input was written) or last."""
        ends = workloads.end_offsets(self.bootstrap, w.topic)
        runs = []
        for r in range(repeats):
            for i in range(len(names)):
                runs.append(self.run_one(names[(r + i) % len(names)], w, ends, repeat=r))
        return runs

    def warm_up(self, w: workloads.Workload, res: Results) -> None:
        """One run of Lockstep, Spark and each peer over the main input, not counted: the broker's JIT,
        its transaction coordinator and the page cache (the peers' venvs too) are warm before the first
        measured run."""
        ends = workloads.end_offsets(self.bootstrap, w.topic)
        names = (LOCKSTEP_CONNECT, LOCKSTEP, SPARK) + (PEERS if self.s.peers else ())
        took = [f"{name} {self.run_one(name, w, ends, repeat=-1).wall_s:.1f} s" for name in names]
        res.notes.append(f"warm-up before the main comparison, not counted: {', '.join(took)}")

    # ---- sections ------------------------------------------------------------------------------
    def main_comparison(self, res: Results) -> workloads.Workload:
        log(f"generating {self.s.records:,} records over {self.s.partitions} partitions")
        w = workloads.make_input(self.bootstrap, self.s.records, self.s.partitions, name="bench-in-main")
        res.notes.append(f"input generated in {w.generate_seconds:.1f} s ({w.records / w.generate_seconds:,.0f} "
                         "records/s with the project's generator)")
        names = self.competitors() + ((LOCKSTEP_PYTHON,) if self.s.python_writer else ()) + \
            ((PRODUCER_PERF, CONSUMER_PERF) if self.s.perf_tools else ())
        if self.s.quick:  # the quick run's figures mean nothing anyway (the test of make test): no warm-up
            res.notes.append("no warm-up before the main comparison (--quick)")
        else:
            self.warm_up(w, res)
        res.main = [r.to_json() for r in self.alternate(w, names, self.s.repeats)]
        return w

    def fixed_cost(self, res: Results) -> None:
        topic = f"bench-fixed-{uuid.uuid4().hex[:6]}"
        workloads.create_topic(self.bootstrap, topic, self.s.partitions)
        sink = f"{topic}-out"
        workloads.create_topic(self.bootstrap, sink, self.s.partitions)
        from lockstep_dev.datagen import produce_orders

        # One pipeline per run mode over the same input; each gets the new record in turn.
        specs = {mode: workloads.write_spec(self.work_dir / "specs", f"bench-fixed-{mode}-{uuid.uuid4().hex[:6]}",
                                            topic, f"{sink}" if mode == "submit" else f"{sink}-{mode}", 1000,
                                            remote=self.platform.spark_connect.url if mode == "connect" else None)
                 for mode in ("connect", "submit")}
        workloads.create_topic(self.bootstrap, f"{sink}-connect", self.s.partitions)
        for n in range(self.s.fixed_repeats):
            produce_orders(self.bootstrap, topic, 1, start=n, pad=workloads.PAD, partitions=self.s.partitions)
            for mode, spec in specs.items():
                for kind in ("one-record", "empty"):
                    command = pl.lockstep_command(spec, self.connect_server_pid if mode == "connect" else None)
                    run = execute(f"checkpoint ({kind}, {mode})", command, 1 if kind == "one-record" else 0,
                                  self.s.partitions, repeat=n)
                    res.fixed.append({"kind": kind, "mode": mode, **run.to_json()})
                    log(f"fixed cost {kind} ({mode}): {run.wall_s:.1f} s process, steps {json.dumps(run.inner)}")
        spec = specs["submit"]
        self._history(res, spec, topic)
        workloads.delete_topic(self.bootstrap, sink)
        workloads.delete_topic(self.bootstrap, f"{sink}-connect")

    def _history(self, res: Results, fixed_spec: Path, topic: str) -> None:
        from lockstep.spec import load_spec

        name = f"bench-history-{uuid.uuid4().hex[:6]}"
        spec_path = workloads.write_spec(self.work_dir / "specs", name, topic, f"{topic}-out", 1000)
        ends = workloads.end_offsets(self.bootstrap, topic)
        points = history.measure(load_spec(spec_path), list(self.s.history), topic, ends, log=log)
        res.history = [p.to_json() for p in points]

    def scaling(self, res: Results, main: workloads.Workload, main_runs: list[Run]) -> None:
        reuse = {(main.records, main.partitions): main_runs}
        # The Python writer runs in the size scaling too: the before/after of the JVM writer by input size.
        size_pipelines = self.competitors() + ((LOCKSTEP_PYTHON,) if self.s.python_writer else ())
        for size in self.s.sizes:
            runs = reuse.get((size, main.partitions))
            if runs is None:
                w = workloads.make_input(self.bootstrap, size, main.partitions)
                runs = self.alternate(w, size_pipelines, 1)
                workloads.delete_topic(self.bootstrap, w.topic)
            res.sizes += [{**r.to_json(), "reused": (size, main.partitions) in reuse} for r in runs
                          if r.pipeline in size_pipelines]
        for parts in self.s.partition_counts:
            runs = reuse.get((self.s.partition_records, parts))
            if runs is None:
                w = workloads.make_input(self.bootstrap, self.s.partition_records, parts)
                runs = self.alternate(w, PARTITION_PIPELINES, 1)
                workloads.delete_topic(self.bootstrap, w.topic)
            res.partitions += [{**r.to_json(), "reused": (self.s.partition_records, parts) in reuse} for r in runs
                               if r.pipeline in PARTITION_PIPELINES]

    def partition_pairs(self, res: Results) -> None:
        """The same ``partition_records`` over few and many partitions, Lockstep (connect mode) alternating
        between them: each round runs both, the order swapped every round, after one uncounted run of each.
        A fixed cost per partition shows only side by side, once the few-partition run is fast (issue 44:
        single runs put it at 1.04×, alternated rounds at 0.52-0.85×)."""
        few, many = self.s.partition_pair
        inputs = {p: workloads.make_input(self.bootstrap, self.s.partition_records, p) for p in (few, many)}
        ends = {p: workloads.end_offsets(self.bootstrap, w.topic) for p, w in inputs.items()}
        # Each count's runs write to one sink topic whose partitions have all been written before, as a
        # running pipeline's sink: a partition's first write costs the broker (kafka-producer-perf-test alone,
        # 450k records into 1,024 new partitions: 59-89k records/s; into the same partitions once written:
        # 291-312k; 8 partitions: 317-352k). Each run's read-back starts where it began.
        sinks = {p: f"bench-out-pairs-{p}-{uuid.uuid4().hex[:6]}" for p in (few, many)}
        for p, sink in sinks.items():
            workloads.create_topic(self.bootstrap, sink, p)
            workloads.touch_partitions(self.bootstrap, sink, p)
        if not self.s.quick:  # the quick run's figures mean nothing: no warm-up
            took = [f"{p} partitions {self.run_one(LOCKSTEP_CONNECT, inputs[p], ends[p], -1, sinks[p]).wall_s:.1f} s"
                    for p in (few, many)]
            res.notes.append(f"warm-up before the alternated partition rounds, not counted: {', '.join(took)}")
        for r in range(self.s.partition_rounds):
            for p in ((few, many) if r % 2 == 0 else (many, few)):
                res.partition_pairs.append(self.run_one(LOCKSTEP_CONNECT, inputs[p], ends[p], r, sinks[p]).to_json())
        for topic in [w.topic for w in inputs.values()] + list(sinks.values()):
            workloads.delete_topic(self.bootstrap, topic)

    def large_input(self, res: Results) -> None:
        """``large_records`` over ``partitions``: Lockstep in connect mode (with the benchmark transform, and with
        the identity transform), the raw client and the broker's own producer perf tool, alternated once, in this
        run (issue 28: Lockstep ≥ 0.5× the perf tool)."""
        if not self.s.large_records:
            return
        log(f"generating the large input: {self.s.large_records:,} records over {self.s.partitions} partitions")
        w = workloads.make_input(self.bootstrap, self.s.large_records, self.s.partitions)
        names = LARGE_PIPELINES if self.s.perf_tools else tuple(p for p in LARGE_PIPELINES if p != PRODUCER_PERF)
        res.large += [r.to_json() for r in self.alternate(w, names, 1)]
        workloads.delete_topic(self.bootstrap, w.topic)


def environment(bootstrap: str) -> dict[str, Any]:
    import platform as py_platform
    import subprocess

    import confluent_kafka
    import pyarrow
    import pyspark

    from lockstep.paths import kafka_jars_dir

    def read(path: str, key: str) -> str:
        try:
            for line in open(path):
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "?"

    kafka = next((p.name[len("kafka_2.13-"):-4] for p in kafka_jars_dir().glob("kafka_2.13-*.jar")), "?")
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr.splitlines()[0]
    except Exception:  # noqa: BLE001
        java = "?"
    try:
        import psutil
        sampler = f"psutil {psutil.__version__}"
    except ImportError:
        sampler = "/proc"
    return {
        "cpus": os.cpu_count(), "cpu_model": read("/proc/cpuinfo", "model name"),
        "memory": _gib(read("/proc/meminfo", "MemTotal")), "kernel": py_platform.release(),
        "python": py_platform.python_version(), "kafka": kafka, "spark": pyspark.__version__,
        "confluent_kafka": f"{_first(confluent_kafka.version())} (librdkafka {_first(confluent_kafka.libversion())})",
        "pyarrow": pyarrow.__version__, "java": java, "memory_sampler": sampler, "bootstrap": bootstrap,
    }


def _first(version: Any) -> str:
    return str(version[0] if isinstance(version, tuple) else version)


def _gib(meminfo: str) -> str:
    try:
        return f"{int(meminfo.split()[0]) / 2**20:.1f} GiB"
    except (ValueError, IndexError):
        return meminfo


@contextmanager
def isolated_platform(root: Path, warm_checkpoints: bool = False, airflow_db: str | None = None) -> Iterator[Any]:
    """A Kafka + S3 + Schema Registry + Spark Connect platform of the benchmark's own on free ports, its clients' environment
    set in this process (and so in the runs it starts) while it is up; wiped afterwards. ``warm_checkpoints``: its
    Spark Connect server is warmed up as ``lockstep dev up --warm-checkpoints`` does (`lockstep_dev.warm_checkpoints`);
    ``airflow_db``: the database of an Airflow it starts (`lockstep_dev.platform.AIRFLOW_DATABASES`)."""
    from lockstep_dev.platform import Platform

    platform = Platform(state_dir=root / "platform", ports={"kafka": 0, "controller": 0, "s3": 0, "airflow": 0,
                                                            "spark-connect": 0, "registry": 0, "postgres": 0,
                                                            "registry-management": 0, "iceberg": 0},
                        warm_checkpoints=warm_checkpoints, airflow_db=airflow_db)
    log(f"starting an isolated Kafka + S3 + Spark Connect platform in {root}")
    platform.up(with_connect=True, out=sys.stderr)
    saved = {k: os.environ.get(k) for k in platform.client_env()}
    os.environ.update(platform.client_env())
    os.environ.pop("LOCKSTEP_FAILPOINTS", None)
    try:
        yield platform
    finally:
        platform.down(wipe=True, out=sys.stderr)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_bench(settings: Settings) -> Path:
    from lockstep_bench import report

    started = time.monotonic()
    root = settings.state_dir or Path(tempfile.mkdtemp(prefix="lockstep-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    peer_versions = peers.setup_all(log) if settings.peers else {}  # before any measurement: may download
    res = Results(settings={k: (str(v) if isinstance(v, Path) else v) for k, v in settings.__dict__.items()},
                  started_at=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    res.load["start"] = os.getloadavg()
    results_path = settings.results or (root / "results.json")
    with isolated_platform(root, airflow_db=settings.airflow_db) as platform:
        res.environment = {**environment(platform.kafka.bootstrap), **peer_versions}
        bench = Bench(settings, platform, root)
        main = bench.main_comparison(res)
        main_runs = [run_of(d) for d in res.main]
        bench.fixed_cost(res)
        bench.scaling(res, main, main_runs)
        bench.partition_pairs(res)
        bench.large_input(res)
        res.load["end"] = os.getloadavg()
        if settings.airflow:  # last: Airflow's own load must not touch the figures above
            from lockstep_bench import airflow_overhead, many_pipelines

            fleet = None
            if settings.pipelines:
                fleet = many_pipelines.Fleet(platform, root, many_pipelines.FleetSettings.for_bench(
                    settings.pipelines, settings.quick, settings.pipelines_tasks), log)
                fleet.prepare()
            res.airflow = airflow_overhead.measure(platform, root, settings.fixed_repeats, log, fleet=fleet)
            res.many_pipelines = fleet.results if fleet is not None else {}
        res.seconds = round(time.monotonic() - started, 1)
        results_path.parent.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(res.__dict__, indent=1, default=str))
        log(f"raw results in {results_path}")
        baseline = json.loads(settings.baseline.read_text()) if settings.baseline else None
        report_path = settings.report if settings.report.is_absolute() else project_root() / settings.report
        report.write(res, report_path, baseline)
        log(f"report written to {report_path} ({res.seconds:.0f} s in all)")
        return report_path


def run_pipelines_bench(settings: Settings) -> Path:
    """``--pipelines-only``: the generated pipelines in one Airflow (`lockstep_bench.many_pipelines`: parse, the
    scheduler's loop with every pipeline due every minute, S3 calls per plan, the Checkpoints page) on an isolated
    platform of their own, with the one pipeline's overhead runs before them; only that section of the report is
    replaced, saying it comes from its own run."""
    from lockstep_bench import airflow_overhead, many_pipelines, report

    started = time.monotonic()
    root = settings.state_dir or Path(tempfile.mkdtemp(prefix="lockstep-bench-pipelines-"))
    root.mkdir(parents=True, exist_ok=True)
    res = Results(settings={k: (str(v) if isinstance(v, Path) else v) for k, v in settings.__dict__.items()},
                  started_at=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    with isolated_platform(root, airflow_db=settings.airflow_db) as platform:
        res.environment = {**environment(platform.kafka.bootstrap), "commit": commit_of(project_root())}
        fleet = many_pipelines.Fleet(platform, root, many_pipelines.FleetSettings.for_bench(
            settings.pipelines, settings.quick, settings.pipelines_tasks), log)
        fleet.prepare()
        res.airflow = airflow_overhead.measure(platform, root, 1, log, fleet=fleet)
        res.many_pipelines = fleet.results
    res.seconds = round(time.monotonic() - started, 1)
    results_path = settings.results or (root / "results.json")
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(res.__dict__, indent=1, default=str))
    log(f"raw results in {results_path}")
    path = settings.report if settings.report.is_absolute() else project_root() / settings.report
    report.replace_many_pipelines(res, path)
    log(f"its section of {path} replaced")
    return path


def commit_of(root: Path) -> str:
    """The checked-out commit, marked when the work tree differs from it (the report names what it measured)."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return f"{head} with uncommitted changes" if dirty else head


def restart_connect(platform: Platform, warm_checkpoints: bool = False) -> int:
    """The platform's Spark Connect server stopped and started again, a new JVM (the keyed-state bench's cold
    checkpoints); returns its pid. ``start`` waits until it serves and runs its one warm-up query, and with
    ``warm_checkpoints`` the platform's warm-up checkpoints (`lockstep_dev.warm_checkpoints`)."""
    platform.stop("spark-connect", out=sys.stderr)
    platform.warm_checkpoints = warm_checkpoints
    try:
        platform.start("spark-connect", out=sys.stderr)
    finally:
        platform.warm_checkpoints = False
    return int(platform.state.pids["spark-connect"])


class FocusedSettings(Protocol):
    """What the runner reads of every focused bench's settings (`keyed_state.StateSettings`,
    `windowed.WindowSettings`, ...): where its report, results and platform go, and the settings as its
    results record them."""

    @property
    def report(self) -> Path: ...

    @property
    def results(self) -> Path | None: ...

    @property
    def state_dir(self) -> Path | None: ...

    def to_json(self) -> dict[str, Any]: ...


def _opening(settings: FocusedSettings) -> dict[str, Any]:
    """The first fields of a focused bench's results: its settings, when, at which commit, the load."""
    return {"settings": settings.to_json(), "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "commit": commit_of(project_root()), "load": {"start": os.getloadavg()}}


def _kept(results: dict[str, Any], settings: FocusedSettings, results_path: Path, started: float,
          write: Callable[[dict[str, Any], Path], object]) -> Path:
    """A focused bench's end: its duration, the raw results and the report (``write``) on disk."""
    results["seconds"] = round(time.monotonic() - started, 1)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(results, indent=1, default=str))
    log(f"raw results in {results_path}")
    report_path = settings.report if settings.report.is_absolute() else project_root() / settings.report
    write(results, report_path)
    log(f"report written to {report_path} ({results['seconds']:.0f} s in all)")
    return report_path


def _focused_run(settings: FocusedSettings, name: str, write: Callable[[dict[str, Any], Path], object],
                 measure: Callable[[Platform, Path, dict[str, Any]], None],
                 before: Callable[[Path, dict[str, Any]], None] | None = None,
                 warm_checkpoints: bool = False, airflow_db: str | None = None) -> tuple[dict[str, Any], Path]:
    """What every focused bench does around its measurement: its work folder (``--state-dir``, else a new
    one), its results' opening (`_opening`), then ``before`` (what must precede any measurement: setting up
    peers may download), ``measure`` on an isolated platform (``airflow_db``: the database of an Airflow it starts),
    and the results and report kept (`_kept`). Returns the results and the report's path."""
    started = time.monotonic()
    root = settings.state_dir or Path(tempfile.mkdtemp(prefix=f"lockstep-bench-{name}-"))
    root.mkdir(parents=True, exist_ok=True)
    results = _opening(settings)
    if before is not None:
        before(root, results)
    results_path = settings.results or (root / "results.json")
    with isolated_platform(root, warm_checkpoints=warm_checkpoints, airflow_db=airflow_db) as platform:
        results["environment"] = environment(platform.kafka.bootstrap)
        measure(platform, root, results)
        results["load"]["end"] = os.getloadavg()
    return results, _kept(results, settings, results_path, started, write)


def _flink_peer(results: dict[str, Any]) -> None:
    """Flink SQL set up (it may download) and its versions in the results."""
    peers.ensure(peers.FLINK, cache_dir(), log)
    results["peers"] = {k: v for k, v in peers.versions().items() if k.startswith(("pyflink", "flink"))}


def run_state_bench(settings: keyed_state.StateSettings) -> Path:
    """``--state-only``: what keyed state costs per checkpoint by state size (lockstep_bench.keyed_state)."""
    from lockstep_bench import keyed_state_report

    saved_cache = os.environ.get("LOCKSTEP_STATE_CACHE")

    def before(root: Path, results: dict[str, Any]) -> None:
        results["notes"] = []
        if settings.flink:  # before any measurement: may download
            _flink_peer(results)
        os.environ["LOCKSTEP_STATE_CACHE"] = str(root / "state-cache")  # the checkpoints' local cache, emptied for cold runs
        # 10M keys built up in one checkpoint ran the 1g server out of heap; each size's figures are its own run's.
        os.environ.setdefault("LOCKSTEP_CONNECT_DRIVER_MEMORY", "6g" if max(settings.keys) > 2_000_000 else "1g")

    def measure(platform: Platform, root: Path, results: dict[str, Any]) -> None:
        bench = keyed_state.StateBench(settings, platform.kafka.bootstrap, platform.spark_connect.url,
                                       platform.state.pids["spark-connect"], root, log,
                                       restart_connect=lambda warm: restart_connect(platform, warm),
                                       bucket=platform.state.bucket)
        results["sizes"] = bench.measure()

    report_path = _focused_run(settings, "state", keyed_state_report.write, measure, before)[1]
    if saved_cache is None:
        os.environ.pop("LOCKSTEP_STATE_CACHE", None)
    else:
        os.environ["LOCKSTEP_STATE_CACHE"] = saved_cache
    return report_path


def run_windows_bench(settings: windowed.WindowSettings) -> Path:
    """``--windows-only``: the windowed count per key raced against Flink SQL and Quix (lockstep_bench.windowed)."""
    from lockstep_bench import windowed_report

    def before(root: Path, results: dict[str, Any]) -> None:
        if set(settings.engines) - {windowed.LOCKSTEP}:
            results["peers"] = peers.setup_all(log)  # before any measurement: may download

    def measure(platform: Platform, root: Path, results: dict[str, Any]) -> None:
        results["race"] = windowed.WindowRace(settings, platform.kafka.bootstrap, platform.spark_connect.url,
                                              platform.state.pids["spark-connect"], root, log).measure()

    results, report_path = _focused_run(settings, "windows", windowed_report.write, measure, before)
    wrong = [r["check"]["summary"] for r in results["race"]["runs"] + results["race"]["warm_up"]
             if r["pipeline"] == windowed.LOCKSTEP and not r["check"]["exact"]]
    if wrong:
        raise RunFailed(f"Lockstep's windowed output was not exact in {len(wrong)} runs: {wrong[0]}")
    return report_path


def run_joins_bench(settings: joins.JoinSettings) -> Path:
    """``--joins-only``: orders enriched from a table topic, Lockstep's join raced against Flink SQL's temporal
    join (lockstep_bench.joins)."""
    from lockstep_bench import joins_report

    def before(root: Path, results: dict[str, Any]) -> None:
        if joins.FLINK in settings.engines:  # before any measurement: may download
            _flink_peer(results)

    def measure(platform: Platform, root: Path, results: dict[str, Any]) -> None:
        results["race"] = joins.JoinRace(settings, platform.kafka.bootstrap, platform.spark_connect.url,
                                         platform.state.pids["spark-connect"], root, log).measure()

    results, report_path = _focused_run(settings, "joins", joins_report.write, measure, before)
    sm = joins_report.summary(results)
    log(f"Lockstep ÷ Flink SQL ({sm['flink_join']} join): " + ("not measured (Flink did not run)" if sm["ratio"] is None
        else f"{sm['ratio']}× (target {sm['target']}×: {'met' if sm['met'] else 'not met'})") +
        f"; records/s {sm['rates']}")
    wrong = [r["check"]["summary"] for r in results["race"]["runs"] + results["race"]["warm_up"]
             if r["pipeline"] != joins.FLINK and not r["check"]["exact"]]
    if wrong:
        raise RunFailed(f"Lockstep's joined output was not exact in {len(wrong)} runs: {wrong[0]}")
    return report_path


def run_iceberg_bench(settings: iceberg_race.IcebergSettings) -> Path:
    """``--iceberg-only``: Kafka → Iceberg, Lockstep raced against Flink's Iceberg sink, every table read back
    (lockstep_bench.iceberg_race)."""
    from lockstep_bench import iceberg_report

    flinks = set(settings.engines) - set(iceberg_race.LOCKSTEPS)

    def before(root: Path, results: dict[str, Any]) -> None:
        if flinks:  # before any measurement: may download
            peers.ensure(peers.FLINK_ICEBERG, cache_dir(), log)
            results["peers"] = peers.flink_iceberg_versions()

    def measure(platform: Platform, root: Path, results: dict[str, Any]) -> None:
        command = (lambda engine, source, ends, table, sink: peers.flink_iceberg_command(
            cache_dir(), project_root(), platform.kafka.bootstrap, source, ends, table, sink,
            platform.iceberg.url, platform.client_env())) if flinks else None
        results["race"] = iceberg_race.IcebergRace(settings, platform.kafka.bootstrap, platform.spark_connect.url,
                                                   platform.state.pids["spark-connect"], root, log,
                                                   flink_command=command).measure()

    results, report_path = _focused_run(settings, "iceberg", iceberg_report.write, measure, before)
    for line in iceberg_report.headline(results):
        log(line)
    if report_path.resolve() == (project_root() / iceberg_report.PAGE).resolve():
        main_page = project_root() / "docs" / "BENCHMARKS.md"
        iceberg_report.replace_section(main_page, report_path)
        log(f"its section of {main_page} written again")
    race = results["race"]
    wrong = [r["check"]["summary"] for r in race["runs"] + race["warm_up"]
             if r["pipeline"] in iceberg_race.LOCKSTEPS
             and not (r["check"]["exact"] and (r["topic_check"] is None or r["topic_check"]["exact"]))]
    if race.get("stream") and not race["stream"]["after"]["exact"]:
        wrong.append(race["stream"]["after"]["summary"])
    if wrong:
        raise RunFailed(f"Lockstep's table or topic was not exact in {len(wrong)} runs: {wrong[0]}")
    return report_path


def run_freshness_bench(settings: freshness.FreshnessSettings) -> Path:
    """``--freshness-only``: produce-to-visible latency at steady rates, Lockstep through Airflow against Flink SQL
    and Quix (lockstep_bench.freshness)."""
    from lockstep_bench import freshness_report

    def before(root: Path, results: dict[str, Any]) -> None:
        if set(settings.engines) - set(freshness.LOCKSTEPS):
            results["peers"] = peers.setup_all(log)  # before any measurement: may download

    def measure(platform: Platform, root: Path, results: dict[str, Any]) -> None:
        results["race"] = freshness.FreshnessRace(settings, platform, root, log).measure()

    results, report_path = _focused_run(settings, "freshness", freshness_report.write, measure, before,
                                        warm_checkpoints=settings.warm_checkpoints)
    for line in freshness_report.headline(results):
        log(line)
    if report_path.resolve() == (project_root() / freshness_report.PAGE).resolve():
        main_page = project_root() / "docs" / "BENCHMARKS.md"
        freshness_report.replace_section(main_page, report_path)
        log(f"its section of {main_page} written again")
    wrong = [f"{r['engine']} ({freshness.pipeline_of(r)}) at {r['rate']}/s" for r in results["race"]["runs"]
             if r["engine"] in freshness.LOCKSTEPS and not r.get("exact")]
    if wrong:
        raise RunFailed(f"Lockstep's output was not exact (or the run failed): {', '.join(wrong)}")
    return report_path


def run_lag_fleet_bench(settings: lag_fleet.LagFleetSettings) -> Path:
    """``--lag-fleet-only``: many lag-triggered pipelines in one Airflow, a few of them fed, the rest idle
    (lockstep_bench.lag_fleet)."""
    from lockstep_bench import lag_fleet_report

    def measure(platform: Platform, root: Path, results: dict[str, Any]) -> None:
        results["race"] = {}
        try:
            results["race"] = lag_fleet.LagFleet(settings, platform, root, log).measure()
        except Exception as exc:  # noqa: BLE001 - the report says how far it got
            results["race"]["error"] = str(exc)[:2000]
            log(f"lag fleet failed: {exc}")

    from lockstep_dev.spark_connect import TASK_SLOTS_ENV

    saved = os.environ.get(TASK_SLOTS_ENV)
    os.environ[TASK_SLOTS_ENV] = str(settings.connect_task_slots)
    try:
        results, report_path = _focused_run(settings, "lag-fleet", lag_fleet_report.write, measure,
                                            warm_checkpoints=settings.warm_checkpoints, airflow_db="postgres")
    finally:
        if saved is None:
            os.environ.pop(TASK_SLOTS_ENV, None)
        else:
            os.environ[TASK_SLOTS_ENV] = saved
    for line in lag_fleet_report.headline(results):
        log(line)
    load = results["race"].get("load")
    if load is not None and report_path.resolve() == (project_root() / lag_fleet_report.PAGE).resolve():
        main_page = project_root() / "docs" / "BENCHMARKS.md"
        lag_fleet_report.replace_section(main_page, report_path)
        log(f"its section of {main_page} written again")
    if load is None:
        raise RunFailed(f"the lag fleet did not reach its load: {results['race'].get('error', '?')}")
    if load["verdict"]["exact"] < load["verdict"]["fed"]:
        raise RunFailed("a fed pipeline's sink was not exact (see the report)")
    return report_path


def run_formats_bench(settings: formats.FormatSettings) -> Path:
    """``--formats-only``: Avro through the Schema Registry against the perf tool (lockstep_bench.formats)."""
    from lockstep_bench import formats_report

    def measure(platform: Platform, root: Path, results: dict[str, Any]) -> None:
        results["race"] = formats.FormatsRace(settings, platform, root, log).measure()

    results, report_path = _focused_run(settings, "formats", formats_report.write, measure)
    for line in formats_report.headline(results):
        log(line)
    return report_path


# ---- CLI ------------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    ints = lambda text: tuple(int(x) for x in text.split(",") if x)
    parser.add_argument("--records", type=int, help="input records of the main comparison (default 1,000,000)")
    parser.add_argument("--partitions", type=int, help="input partitions of the main comparison (default 8)")
    parser.add_argument("--repeats", type=int, help="alternated repeats per competitor (default 3)")
    parser.add_argument("--pipelines-only", action="store_true",
                        help="only the generated pipelines in one Airflow (--pipelines of them, due every minute; "
                             "--pipelines-tasks, --airflow-db apply), on a platform of their own: replaces that "
                             "section of docs/BENCHMARKS.md")
    parser.add_argument("--sizes", type=ints, help="input sizes for the scaling table "
                                                   "(default 10000,100000,1000000,5000000)")
    parser.add_argument("--partition-counts", type=ints, help="partition counts for scaling (default 1,8,64,256,1024)")
    parser.add_argument("--partition-records", type=int, help="records per partition-scaling point (default 1000000)")
    parser.add_argument("--partition-pair", type=ints, help="few,many partitions that Lockstep alternates between, "
                                                            "round by round (default 8,1024)")
    parser.add_argument("--partition-rounds", type=int, help="rounds of the alternated partition pair (default 3)")
    parser.add_argument("--large-records", type=int, help="records of the large input, run by Lockstep (connect), the "
                                                          "raw client and kafka-producer-perf-test (default 10000000; "
                                                          "0 skips it)")
    parser.add_argument("--history", type=ints, help="past-checkpoint counts for plan time (default 10,1000,10000)")
    parser.add_argument("--no-perf-tools", dest="perf_tools", action="store_false", default=None,
                        help="skip Kafka's producer/consumer perf tools")
    parser.add_argument("--no-python-writer", dest="python_writer", action="store_false", default=None,
                        help="skip Lockstep with its Python writer (the before of the JVM writer)")
    parser.add_argument("--no-airflow", dest="airflow", action="store_false", default=None,
                        help="skip the Airflow scheduling-overhead measurement (it starts airflow standalone)")
    parser.add_argument("--pipelines", type=int, help="generated pipelines scheduled together in the Airflow "
                                                      "of the overhead measurement: parse time, scheduler loop, "
                                                      "S3 calls per plan, the Checkpoints page at 10,000 "
                                                      "checkpoints (default 50; 0 skips it)")
    parser.add_argument("--pipelines-tasks", choices=["one", "three"],
                        help="the generated pipelines' tasks per checkpoint (checkpoints.tasks; default one)")
    parser.add_argument("--airflow-db", choices=["sqlite", "postgres"],
                        help="the database of the measurement's Airflow (lockstep dev up --airflow-db; default "
                             "postgres)")
    parser.add_argument("--no-peers", dest="peers", action="store_false", default=None,
                        help="skip the exactly-once peers, Flink SQL and Quix Streams (and their set-up)")
    parser.add_argument("--peers", dest="peers", action="store_true",
                        help="run the peers even with --quick (set up in .cache/bench/ on first use)")
    parser.add_argument("--quick", action="store_true", help="a small end-to-end run (10k records, 1 repeat)")
    parser.add_argument("--report", type=Path, help="where to write the Markdown report (default docs/BENCHMARKS.md)")
    parser.add_argument("--results", type=Path, help="also keep the raw results JSON here")
    parser.add_argument("--baseline", type=Path, help="results JSON of an earlier run: adds a before/after table")
    parser.add_argument("--state-dir", type=Path, help="platform data folder (default: a new temporary folder)")
    parser.add_argument("--from-results", type=Path, help="only rewrite the report from an earlier run's results "
                                                          "JSON (no platform, nothing measured)")
    state = parser.add_argument_group("keyed state (--state-only: only this, report docs/BENCHMARKS-state.md)")
    state.add_argument("--state-only", action="store_true",
                       help="measure what keyed state costs per checkpoint by state size, a stateful (dedup) "
                            "pipeline beside a stateless one over the same records; nothing else")
    state.add_argument("--state-keys", type=ints, help="state sizes in keys (default 100000,1000000,10000000)")
    state.add_argument("--state-records", type=int, help="new records per measured checkpoint (default 100000)")
    state.add_argument("--state-touched", type=float,
                       help="the share of the held keys each measured checkpoint's repeats touch (default 0.01)")
    state.add_argument("--state-checkpoints", type=int, help="measured checkpoints per state size (default 3)")
    state.add_argument("--state-new-keys", type=int,
                       help="of each measured checkpoint's records, how many have keys the state does not hold "
                            "(default 100; the rest repeat held keys)")
    windows = parser.add_argument_group("windowed race (--windows-only: only this, report docs/BENCHMARKS-windows.md)")
    windows.add_argument("--windows-only", action="store_true",
                         help="race a windowed count per key against Flink SQL and Quix Streams, every sink "
                              "checked window by window; nothing else (--partitions and --repeats apply)")
    windows.add_argument("--windows-records", type=int, help="input records of the race (default 1,000,000)")
    windows.add_argument("--windows-engines", type=lambda text: tuple(x for x in text.split(",") if x),
                         help="which engines race (default lockstep-connect,flink-sql,quix-streams)")
    ice = parser.add_argument_group("Iceberg race (--iceberg-only: only this, report docs/BENCHMARKS-iceberg.md)")
    ice.add_argument("--iceberg-only", action="store_true",
                     help="race Lockstep into an Iceberg table (sink.iceberg, connect mode) against Flink's Iceberg "
                          "sink, every table read back row by row, then a stream's small files and their compaction; "
                          "nothing else (--partitions and --repeats apply)")
    ice.add_argument("--iceberg-records", type=int, help="input records of the race (default 10,000,000)")
    ice.add_argument("--iceberg-engines", type=lambda text: tuple(x for x in text.split(",") if x),
                     help="which engines race (default lockstep-connect,lockstep-table,flink-iceberg,"
                          "flink-iceberg-and-kafka)")
    ice.add_argument("--iceberg-stream-checkpoints", type=int,
                     help="checkpoints of the small-files stream, over 1,000,000 records of its own (default 10; "
                          "0: none)")
    ice.add_argument("--iceberg-no-warm-up", dest="iceberg_warm_up", action="store_false", default=None,
                     help="no uncounted run of each engine first (at 10M records, rotate the order over --repeats "
                          "rounds instead)")
    ice.add_argument("--iceberg-no-floor", dest="iceberg_floor", action="store_false", default=None,
                     help="skip Spark's floor (the input read, then read and transformed, into Spark's noop writer "
                          "once a round: the least a Spark-based sink pays)")
    join = parser.add_argument_group("join race (--joins-only: only this, report docs/BENCHMARKS-joins.md)")
    join.add_argument("--joins-only", action="store_true",
                      help="race Lockstep's stream-table join (tables:, connect mode) against Flink SQL's "
                           "event-time temporal join, every sink checked order by order; nothing else "
                           "(--partitions and --repeats apply)")
    join.add_argument("--joins-records", type=int, help="orders of the race (default 1,000,000)")
    join.add_argument("--joins-keys", type=int, help="customers in the table (default 100,000)")
    join.add_argument("--joins-engines", type=lambda text: tuple(x for x in text.split(",") if x),
                      help="which engines race (default lockstep-connect,flink-sql,lockstep-connect-no-join)")
    join.add_argument("--joins-flink-join", choices=("temporal", "regular"),
                      help="Flink's join: the event-time temporal join (default) or a regular join on the upsert "
                           "table (the fallback, labeled as such in the report)")
    fresh = parser.add_argument_group("freshness (--freshness-only: only this, report docs/BENCHMARKS-freshness.md)")
    fresh.add_argument("--freshness-only", action="store_true",
                       help="produce at steady rates and time each record from its produce to its visibility to a "
                            "read_committed consumer: Lockstep through the real Airflow scheduler (lag trigger) "
                            "against Flink SQL and Quix Streams, every sink read back; nothing else "
                            "(--partitions applies)")
    fresh.add_argument("--freshness-rates", type=ints, help="records/s of the loads (default 2000,20000,100000)")
    fresh.add_argument("--freshness-windowed-rates", type=ints,
                       help="records/s of the windowed pipeline's loads (default 2000,20000; '' for none)")
    fresh.add_argument("--freshness-seconds", type=float, help="each load's length, warm-up included (default 150)")
    fresh.add_argument("--freshness-warm-up", type=float, help="the first seconds of each load that the latency "
                                                                 "figures leave out (default 30)")
    fresh.add_argument("--freshness-tasks", choices=("one", "three"),
                       help="Lockstep's checkpoints.tasks: one task per checkpoint (default) or plan, run, commit")
    fresh.add_argument("--freshness-pipelined", type=lambda text: {"on": True, "off": False}[text],
                       metavar="{on,off}",
                       help="Lockstep's checkpoints.pipelined: plan on top of the checkpoint in flight (default: the "
                            "spec's default, off)")
    fresh.add_argument("--freshness-decode", choices=("format", "transform"),
                       help="where Lockstep's stateless pipeline parses the JSON order: its source.value json format "
                            "with a JSON Schema (default, as Flink's 'format' = 'json') or from_json in the transform")
    fresh.add_argument("--freshness-min-interval", type=int, metavar="SECONDS",
                       help="Lockstep's checkpoints.trigger.min_interval: checkpoints at least this many seconds apart, "
                            "start to start (default 0: as soon as a record is unread)")
    fresh.add_argument("--freshness-engines", type=lambda text: tuple(x for x in text.split(",") if x),
                       help="which engines race (default lockstep-airflow,lockstep-airflow-spaced,flink-sql,"
                            "quix-streams; the spaced one: checkpoints at least 5 s apart, the stateless pipeline only)")
    fleet = parser.add_argument_group("lag fleet (--lag-fleet-only: only this, report docs/BENCHMARKS-lag-fleet.md)")
    fleet.add_argument("--lag-fleet-only", action="store_true",
                       help="many lag-triggered pipelines in one Airflow (PostgreSQL), a few fed at a steady rate, the "
                            "rest idle: the fed ones' produce-to-visible latency, every sink read back, the idle ones' "
                            "runs, the CPU of Airflow's processes; nothing else (--partitions applies, default 2)")
    fleet.add_argument("--lag-fleet-pipelines", type=int, help="pipelines in all (default 200)")
    fleet.add_argument("--lag-fleet-fed", type=int, help="of them, those fed (default 20)")
    fleet.add_argument("--lag-fleet-rate", type=int, help="records/s to each fed pipeline (default 1,000)")
    fleet.add_argument("--lag-fleet-seconds", type=float, help="the load's length, warm-up included (default 120)")
    fmt = parser.add_argument_group("formats (--formats-only: only this, report docs/BENCHMARKS-formats.md)")
    fmt.add_argument("--formats-only", action="store_true",
                     help="Avro framed for the Schema Registry through Lockstep (parse, filter, encode), the JSON "
                          "benchmark transform beside it, and kafka-producer-perf-test with as many producers as "
                          "Lockstep's transactions, alternated, every sink read back; nothing else (--partitions "
                          "and --repeats apply, default 8 and 2)")
    fmt.add_argument("--formats-records", type=int, help="input records of the formats race (default 10,000,000)")
    fmt.add_argument("--formats-no-parts", dest="formats_parts", action="store_false", default=None,
                     help="skip \"where the time goes\" (the input read into Spark's noop sink: alone, with the "
                          "Avro decode, with decode + transform + encode, with the JSON transform)")
    state.add_argument("--state-key-groups", type=int, help="the stateful pipeline's state.key_groups (default 32)")
    state.add_argument("--state-restores", type=int,
                       help="at the largest size, how many times the restore's checkpoints (cold, warmed up, same "
                            "host, warm) and Flink's restore run; the report takes each one's median (default 3)")
    state.add_argument("--state-no-flink", dest="state_flink", action="store_false", default=None,
                       help="skip Flink SQL's RocksDB restore of the largest state (and its set-up in .cache/bench/)")
    state.add_argument("--state-no-flink-s3", dest="state_flink_s3", action="store_false", default=None,
                       help="skip Flink's second chain of restores, with its checkpoints on the platform's S3")


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {k: getattr(args, k) for k in ("records", "partitions", "repeats", "sizes", "partition_counts",
                                                 "partition_records", "partition_pair", "partition_rounds",
                                                 "large_records", "history", "perf_tools",
                                                 "python_writer", "airflow", "pipelines", "pipelines_tasks",
                                                 "airflow_db", "peers", "report", "results",
                                                 "baseline", "state_dir")}
    settings = Settings.quick_settings(**overrides) if args.quick else \
        Settings(**{k: v for k, v in overrides.items() if v is not None})
    return settings


#: The options every focused bench takes (argument -> its settings' field).
_FOCUSED_OPTIONS = {"partitions": "partitions", "report": "report", "results": "results", "state_dir": "state_dir"}


def _focused_settings(kind: Callable[..., S], args: argparse.Namespace, options: Mapping[str, str]) -> S:
    """A focused bench's settings: ``kind``'s defaults, overridden by each of its ``options`` (argument ->
    field) and `_FOCUSED_OPTIONS` that the command line gives."""
    names = {**options, **_FOCUSED_OPTIONS}
    return kind(**{field: getattr(args, arg) for arg, field in names.items() if getattr(args, arg, None) is not None})


def state_settings_from_args(args: argparse.Namespace) -> keyed_state.StateSettings:
    """``--state-only``'s settings; ``--partitions``, ``--report``, ``--results`` and ``--state-dir`` apply too."""
    return _focused_settings(keyed_state.StateSettings, args, {
        "state_keys": "keys", "state_records": "records", "state_checkpoints": "checkpoints",
        "state_new_keys": "new_keys", "state_key_groups": "key_groups", "state_touched": "touched",
        "state_flink": "flink", "state_flink_s3": "flink_s3", "state_restores": "restores"})


def windows_settings_from_args(args: argparse.Namespace) -> windowed.WindowSettings:
    return _focused_settings(windowed.WindowSettings, args, {
        "windows_records": "records", "windows_engines": "engines", "repeats": "repeats"})


def iceberg_settings_from_args(args: argparse.Namespace) -> iceberg_race.IcebergSettings:
    return _focused_settings(iceberg_race.IcebergSettings, args, {
        "iceberg_records": "records", "iceberg_engines": "engines", "iceberg_stream_checkpoints": "stream_checkpoints",
        "iceberg_warm_up": "warm_up", "iceberg_floor": "floor", "repeats": "repeats"})


def joins_settings_from_args(args: argparse.Namespace) -> joins.JoinSettings:
    return _focused_settings(joins.JoinSettings, args, {
        "joins_records": "records", "joins_keys": "keys", "joins_engines": "engines",
        "joins_flink_join": "flink_join", "repeats": "repeats"})


def freshness_settings_from_args(args: argparse.Namespace) -> freshness.FreshnessSettings:
    return _focused_settings(freshness.FreshnessSettings, args, {
        "freshness_rates": "rates", "freshness_windowed_rates": "windowed_rates",
        "freshness_seconds": "seconds", "freshness_warm_up": "warm_up_s",
        "freshness_engines": "engines", "freshness_tasks": "tasks", "freshness_pipelined": "pipelined",
        "freshness_min_interval": "min_interval_s", "freshness_decode": "decode"})


def lag_fleet_settings_from_args(args: argparse.Namespace) -> lag_fleet.LagFleetSettings:
    return _focused_settings(lag_fleet.LagFleetSettings, args, {
        "lag_fleet_pipelines": "pipelines", "lag_fleet_fed": "fed", "lag_fleet_rate": "rate",
        "lag_fleet_seconds": "seconds"})


def formats_settings_from_args(args: argparse.Namespace) -> formats.FormatSettings:
    return _focused_settings(formats.FormatSettings, args, {
        "formats_records": "records", "formats_parts": "parts", "repeats": "repeats"})


def rewrite_report(results: Path, report_path: Path, baseline: Path | None = None) -> Path:
    """Render the report again from saved results (e.g. after a fix to the writer)."""
    from lockstep_bench import report

    doc = json.loads(results.read_text())
    res = Results(**doc)
    # Static facts of this machine and venv; the run's own figures are left as they were.
    fresh = environment(res.environment.get("bootstrap", "?"))
    res.environment.update({k: fresh[k] for k in ("memory", "confluent_kafka")})
    path = report_path if report_path.is_absolute() else project_root() / report_path
    report.write(res, path, json.loads(baseline.read_text()) if baseline else None, rerendered=True)
    log(f"report rewritten to {path} from {results}")
    return path


class ReportWriter(Protocol):
    """A focused bench's report module's ``write``: the report at ``path`` from a run's results."""

    def __call__(self, results: dict[str, Any], path: Path, rerendered: bool = False) -> None: ...


@dataclass(frozen=True)
class Focused:
    """A focused bench of the command line: its ``--X-only`` flag measures only it, into its own report,
    or with ``--from-results`` only writes that report again from a saved run's results."""

    #: the attribute of ``args`` that its ``--X-only`` flag sets
    only: str
    #: its report's module in lockstep_bench, imported only when it is written (as its run imports it)
    report: str
    #: its settings: their default ``report`` is where a report written again goes without ``--report``
    settings: Callable[[], FocusedSettings]
    #: its measurement, with the settings the command line gives
    run: Callable[[argparse.Namespace], Path]

    def main(self, args: argparse.Namespace) -> None:
        if not args.from_results:
            self.run(args)
            return
        write = cast(ReportWriter, importlib.import_module(f"lockstep_bench.{self.report}").write)
        path = args.report or self.settings().report
        path = path if path.is_absolute() else project_root() / path
        write(json.loads(args.from_results.read_text()), path, rerendered=True)
        log(f"report rewritten to {path} from {args.from_results}")


#: The focused benches, in the order their flags are looked at: the first one given runs, alone.
FOCUSED = (
    Focused("freshness_only", "freshness_report", freshness.FreshnessSettings,
            lambda args: run_freshness_bench(freshness_settings_from_args(args))),
    Focused("lag_fleet_only", "lag_fleet_report", lag_fleet.LagFleetSettings,
            lambda args: run_lag_fleet_bench(lag_fleet_settings_from_args(args))),
    Focused("formats_only", "formats_report", formats.FormatSettings,
            lambda args: run_formats_bench(formats_settings_from_args(args))),
    Focused("iceberg_only", "iceberg_report", iceberg_race.IcebergSettings,
            lambda args: run_iceberg_bench(iceberg_settings_from_args(args))),
    Focused("joins_only", "joins_report", joins.JoinSettings,
            lambda args: run_joins_bench(joins_settings_from_args(args))),
    Focused("windows_only", "windowed_report", windowed.WindowSettings,
            lambda args: run_windows_bench(windows_settings_from_args(args))),
    Focused("state_only", "keyed_state_report", keyed_state.StateSettings,
            lambda args: run_state_bench(state_settings_from_args(args))),
)


def main(args: argparse.Namespace) -> int:
    for focused in FOCUSED:
        if getattr(args, focused.only):
            focused.main(args)
            return 0
    if args.from_results:
        rewrite_report(args.from_results, args.report or Path("docs/BENCHMARKS.md"), args.baseline)
        return 0
    if args.pipelines_only:
        run_pipelines_bench(settings_from_args(args))
        return 0
    run_bench(settings_from_args(args))
    return 0
