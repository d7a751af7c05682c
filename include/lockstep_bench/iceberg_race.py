"""``lockstep bench --iceberg-only``: Kafka → Iceberg exactly once, Lockstep against Flink's Iceberg sink on the
same input, every table read back row by row (issue 71's "Done when": Lockstep ≥ 2× the peer's records/s at 10M
records; the files each writes, and after compaction).

The work, one definition per engine:

* **Input.** ``records`` of the benchmark's JSON orders (`workloads.make_input`, about 200 bytes each) over
  ``partitions``.
* **Result.** The orders of at least ``MIN_AMOUNT`` (about 90%), once each, in a new table of the platform's
  Iceberg REST catalog (warehouse on its S3 server): the order's fields and ``amount_cents`` as columns, and where
  each row came from (its source partition and offset).
* **Lockstep** (``lockstep-connect``): one checkpoint over the whole input, connect mode, the spec of the drain
  race with ``lockstep_examples.bench:transform_for_table`` and ``sink.iceberg``: the table, with ``value`` (the
  order as JSON) beside the columns, and the same records to a Kafka topic. ``lockstep-table``: the table alone
  (no ``sink.topic``), the same columns (``value`` among them, as a column of the table: the peer's table has it
  too), the dead letters (none here) to Kafka.
* **Flink** (``flink-iceberg``): Flink SQL (PyFlink, the drain race's peer) with Iceberg's Flink runtime, batch
  mode over the bounded Kafka source, its Iceberg sink committing once the input ends, into the same catalog.
  ``flink-iceberg-and-kafka``: the same job also writing the records to a Kafka topic exactly once (the drain
  race's sink), the work Lockstep does.

**The check**: the table's rows scanned (their source partition and offset) and counted per input offset against
the orders the transform keeps (`sink_check.expected`): none missing, none twice, none unexpected. Lockstep's
Kafka topic is read back too. Lockstep's table and topic must be exact (the run fails otherwise, once the report is
written); a peer's inexact table is a finding the report shows.

**Files**: each engine's data files on the table's main branch after its run. Then the small files of a stream:
Lockstep over the same input in ``stream_checkpoints`` checkpoints into one table (files per checkpoint), then
``lockstep iceberg compact --keep 1`` (files after; its own seconds).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lockstep_bench import pipelines as pl
from lockstep_bench import sink_check, workloads
from lockstep_bench.measure import execute

LOCKSTEP, FLINK, FLINK_AND_KAFKA = "lockstep-connect", "flink-iceberg", "flink-iceberg-and-kafka"
LOCKSTEP_TABLE = "lockstep-table"
ENGINES = (LOCKSTEP, LOCKSTEP_TABLE, FLINK, FLINK_AND_KAFKA)
LOCKSTEPS = (LOCKSTEP, LOCKSTEP_TABLE)
#: Each Lockstep engine and the peer that does the same work: the table alone, or the table and a Kafka topic.
PAIRS = ((LOCKSTEP_TABLE, FLINK), (LOCKSTEP, FLINK_AND_KAFKA))
#: Spark's floor on the same input, in the same Connect server, written nowhere: Lockstep's reader alone, then the
#: reader and the race's transform (`lockstep_bench.pipelines.floor_command`). Not engines: no table, no check.
FLOOR_READ, FLOOR_TRANSFORM = "spark-read", "spark-read-transform"
FLOORS = (FLOOR_READ, FLOOR_TRANSFORM)
#: The catalog connection of the platform (`lockstep_dev.platform`) every engine writes through.
CATALOG = "iceberg_default"
NAMESPACE = "bench"
TRANSFORM = "lockstep_examples.bench:transform_for_table"
#: Lockstep's table columns for the partition and offset a row came from (`lockstep.iceberg.staged_table`); the
#: peer's are ``src_partition`` and ``src_offset``.
PROVENANCE = {LOCKSTEP: ("lockstep_source_partition", "lockstep_source_offset"),
              LOCKSTEP_TABLE: ("lockstep_source_partition", "lockstep_source_offset"),
              FLINK: ("src_partition", "src_offset"), FLINK_AND_KAFKA: ("src_partition", "src_offset")}


@dataclass(frozen=True)
class IcebergSettings:
    records: int = 10_000_000
    partitions: int = 8
    repeats: int = 1
    engines: tuple[str, ...] = ENGINES
    warm_up: bool = True
    #: Checkpoints of the small-files stream (0: none), over an input of its own of ``stream_records``.
    stream_checkpoints: int = 10
    stream_records: int = 1_000_000
    #: Spark's floor (`FLOORS`) measured once a round, after the engines.
    floor: bool = True
    report: Path = Path("docs/BENCHMARKS-iceberg.md")
    results: Path | None = None
    state_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.records < 1 or self.partitions < 1 or self.repeats < 1 or self.stream_checkpoints < 0:
            raise ValueError("--iceberg-records, --partitions and --repeats must be at least 1, "
                             "--iceberg-stream-checkpoints at least 0")
        unknown = set(self.engines) - set(ENGINES)
        if unknown:
            raise ValueError(f"unknown engines {sorted(unknown)}; choose from {', '.join(ENGINES)}")

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
                for k, v in self.__dict__.items()}


def load_table(name: str) -> Any:
    """The table ``name`` of the platform's catalog, through pyiceberg (as a user reads it: docs/iceberg.md)."""
    from pyiceberg.catalog import load_catalog

    from lockstep.connections import iceberg_catalog

    return load_catalog(CATALOG, **iceberg_catalog(CATALOG)).load_table(name)


def read_table(name: str, columns: tuple[str, str], want: list[np.ndarray]) -> dict[str, Any]:
    """The table's rows on main, by the partition and offset each names, against ``want``; with its data files."""
    table = load_table(name)
    started = time.monotonic()
    rows = table.scan(selected_fields=columns).to_arrow()
    partitions = rows[columns[0]].to_numpy()
    offsets = rows[columns[1]].to_numpy()
    seen = []
    for p in range(len(want)):
        mine = offsets[partitions == p]
        seen.append(np.bincount(mine, minlength=len(want[p])) if len(mine) else np.zeros(0, dtype=np.int64))
    outside = int(np.count_nonzero((partitions < 0) | (partitions >= len(want))))
    check = sink_check.tally(want, seen, rows.num_rows, outside)
    files = [t.file for t in table.scan().plan_files()]
    return {**check.to_json(), "summary": check.summary(), "files": len(files),
            "bytes": sum(f.file_size_in_bytes for f in files), "read_s": round(time.monotonic() - started, 1),
            "snapshots": len(table.metadata.snapshots)}


class IcebergRace:
    """The engines over one input, alternating which goes first, each run's table read back."""

    def __init__(self, settings: IcebergSettings, bootstrap: str, remote: str, connect_pid: int, work_dir: Path,
                 log: Callable[[str], None], flink_command: Callable[..., pl.Command] | None = None) -> None:
        self.s = settings
        self.bootstrap = bootstrap
        self.remote = remote
        self.connect_pid = connect_pid
        self.work_dir = work_dir
        self.log = log
        #: (engine, source, ends, table, sink topic or None) -> the peer's command (`lockstep_bench.peers`).
        self.flink_command = flink_command
        self.specs: dict[str, str] = {}

    def spec(self, name: str, source: str, sink: str, table: str, max_records: int, kind: str = LOCKSTEP) -> Path:
        """Lockstep's spec: the drain race's with ``sink.iceberg``; for `LOCKSTEP_TABLE` without ``sink.topic``
        (its dead letters to ``<sink>-dlq``)."""
        alone = kind == LOCKSTEP_TABLE
        path = workloads.write_spec(self.work_dir / "specs", name, source, sink, max_records, remote=self.remote,
                                    transform=TRANSFORM)
        doc = yaml.safe_load(path.read_text())
        doc["sink"]["iceberg"] = {"table": table, "catalog_conn_id": CATALOG}
        if alone:
            del doc["sink"]["topic"]
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.specs[kind] = path.read_text()
        return path

    def run(self, engine: str, w: workloads.Workload, ends: dict[int, int], want: list[np.ndarray],
            repeat: int) -> dict[str, Any]:
        tag = uuid.uuid4().hex[:6]
        table = f"{NAMESPACE}.{engine.replace('-', '_')}_{tag}"
        sink = f"bench-iceberg-out-{engine}-{tag}" if engine in (LOCKSTEP, FLINK_AND_KAFKA) else None
        if sink is not None:
            workloads.create_topic(self.bootstrap, sink, w.partitions)
        if engine in LOCKSTEPS:
            named = sink or f"bench-iceberg-out-{engine}-{tag}"  # a table alone: only its dead-letter topic is made
            workloads.create_topic(self.bootstrap, f"{named}-dlq", w.partitions)
            command = pl.lockstep_command(self.spec(f"bench-iceberg-{tag}", w.topic, named, table, w.records, engine),
                                          self.connect_pid)
            command.cleanup_topics.append(f"{named}-dlq")
        else:
            if self.flink_command is None:
                raise RuntimeError(f"{engine}: no peer command")
            command = self.flink_command(engine, w.topic, ends, table, sink)
        try:
            run = execute(engine, command, w.records, w.partitions, repeat=repeat)
            checked = read_table(table, PROVENANCE[engine], want)
            topic = sink_check.read_back(self.bootstrap, sink, want).to_json() if sink is not None else None
        finally:
            for t in ([sink] if sink else []) + command.cleanup_topics:
                workloads.delete_topic(self.bootstrap, t)
        self.log(f"{engine:24} {run.wall_s:7.1f} s  {run.records_per_s:10,.0f} rec/s  peak {run.peak_rss_mb:,.0f} MB  "
                 f"cpu {run.cpu_s:.0f} s  table {checked['summary']}, {checked['files']} files"
                 + (f"  topic exact: {topic['exact']}" if topic else "") + f"  {json.dumps(run.inner)}")
        return {**run.to_json(), "table": table, "check": checked, "topic_check": topic}

    def floor(self, name: str, w: workloads.Workload, ends: dict[int, int], repeat: int) -> dict[str, Any]:
        """What the Connect server spends reading the input (and transforming it, for `FLOOR_TRANSFORM`) with
        nothing written: the least a Spark-based engine pays before its sink."""
        command = pl.floor_command(self.remote, self.bootstrap, w.topic, ends, w.partitions,
                                   TRANSFORM if name == FLOOR_TRANSFORM else None, self.connect_pid)
        run = execute(name, command, w.records, w.partitions, repeat=repeat)
        self.log(f"{name:24} {run.wall_s:7.1f} s  {run.records_per_s:10,.0f} rec/s  cpu {run.cpu_s:.0f} s  "
                 f"pass {run.inner.get('pass_s')} s")
        return run.to_json()

    def stream(self) -> dict[str, Any]:
        """Lockstep over an input of ``stream_records`` in ``stream_checkpoints`` checkpoints into one table: the
        files each checkpoint adds, then `lockstep iceberg compact --keep 1` and the files after."""
        n = self.s.stream_checkpoints
        w = workloads.make_input(self.bootstrap, self.s.stream_records, self.s.partitions, name="bench-iceberg-stream")
        want = sink_check.expected(w.records, w.partitions)
        tag = uuid.uuid4().hex[:6]
        table, sink = f"{NAMESPACE}.stream_{tag}", f"bench-iceberg-stream-{tag}"
        workloads.create_topic(self.bootstrap, sink, w.partitions)
        workloads.create_topic(self.bootstrap, f"{sink}-dlq", w.partitions)
        spec = self.spec(f"bench-iceberg-stream-{tag}", w.topic, sink, table, -(-w.records // n), "stream")
        checkpoints = []
        try:
            for i in range(n):
                run = execute(f"{LOCKSTEP} stream", pl.lockstep_command(spec, self.connect_pid), w.records // n,
                              w.partitions, repeat=i)
                checkpoints.append({"wall_s": run.wall_s, **run.inner.get("iceberg", {}),
                                    "records_in": run.inner.get("records_in"), "run_s": run.inner.get("run_s")})
                self.log(f"stream checkpoint {i + 1}/{n}: {run.wall_s:.1f} s, {json.dumps(run.inner.get('iceberg'))}")
            before = read_table(table, PROVENANCE[LOCKSTEP], want)
            started = time.monotonic()
            out = subprocess.run([str(Path(sys.executable).with_name("lockstep")), "iceberg", "compact", "--spec",
                                  str(spec), "--keep", "1", "--json"], capture_output=True, text=True, check=True)
            compact_s = round(time.monotonic() - started, 1)
            after = read_table(table, PROVENANCE[LOCKSTEP], want)
        finally:
            for t in (sink, f"{sink}-dlq", w.topic):
                workloads.delete_topic(self.bootstrap, t)
        self.log(f"stream: {n} checkpoints, {before['files']} files before compaction, {after['files']} after "
                 f"({compact_s} s); table {after['summary']}")
        return {"records": w.records, "checkpoints": checkpoints, "before": before, "after": after, "compact_s": compact_s,
                "compact_output": out.stdout.strip()[-2000:]}

    def measure(self) -> dict[str, Any]:
        self.log(f"generating {self.s.records:,} records over {self.s.partitions} partitions")
        w = workloads.make_input(self.bootstrap, self.s.records, self.s.partitions, name="bench-iceberg-in")
        try:
            ends = workloads.end_offsets(self.bootstrap, w.topic)
            want = sink_check.expected(w.records, w.partitions)
            names = self.s.engines
            # One run of each engine first, not counted: the broker, the catalog, the page cache, the Connect
            # server and the peer's JVM classes are warm for every measured run.
            warm_up = [self.run(name, w, ends, want, -1) for name in names] if self.s.warm_up else []
            runs, floors = [], []
            for r in range(self.s.repeats):
                for i in range(len(names)):
                    runs.append(self.run(names[(r + i) % len(names)], w, ends, want, r))
                if self.s.floor:
                    floors += [self.floor(name, w, ends, r) for name in FLOORS]
            stream = self.stream() if self.s.stream_checkpoints and LOCKSTEP in names else None
            return {"input": {"records": w.records, "partitions": w.partitions, "bytes": w.bytes,
                              "generate_s": round(w.generate_seconds, 1)},
                    "runs": runs, "floors": floors, "warm_up": warm_up, "stream": stream, "specs": self.specs,
                    "flink_sql": {e: flink_statements_for_report(e, ends) for e in names if e not in LOCKSTEPS}}
        finally:
            workloads.delete_topic(self.bootstrap, w.topic)


def flink_statements_for_report(engine: str, ends: dict[int, int]) -> list[str]:
    """The peer's statements as its job ran them over ``ends``, placeholders for what differs per run (and for the
    catalog's keys)."""
    from lockstep_bench.flink_sql import iceberg_catalog, iceberg_statements

    ddl, inserts = iceberg_statements("<bootstrap>", "<source>", ends, f"{NAMESPACE}.<table>", "<group>",
                                      "<sink>" if engine == FLINK_AND_KAFKA else None, "<transactional id prefix>")
    return [iceberg_catalog("<catalog uri>", "s3://lockstep/iceberg", "<s3 endpoint>", "<access key>", "<secret key>",
                            "us-east-1"), *ddl, *inserts]
