"""The competitors, each one a process tree the runner starts, times and samples.

* ``lockstep``: one checkpoint over the whole input through the library's own steps
  (``coordinator.plan`` → ``steps.run.run_checkpoint`` (spark-submit) → ``coordinator.commit``),
  run as ``python -m lockstep_bench.pipelines lockstep``;
* ``spark``: Spark's own at-least-once Kafka → Kafka job (``include/lockstep_bench/jobs/spark_at_least_once_job.py``);
* ``raw``: one Python process, confluent-kafka consumer → transform → one transaction
  (``python -m lockstep_bench.pipelines raw``): the single-process client ceiling;
* ``kafka-producer-perf`` / ``kafka-consumer-perf``: Kafka's own perf tools from the broker jars;
* ``floor``: what a Spark Connect server spends on the input before any sink: Lockstep's reader over the
  same ranges into Spark's ``noop`` writer, then the same with a transform (``python -m lockstep_bench.pipelines
  floor``), the least any Spark-based engine pays for that work on this machine (the Iceberg race).

Every helper prints one ``BENCH_RESULT {json}`` line with what it measured inside.
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC

RESULT = "BENCH_RESULT "


@dataclass
class Command:
    """What the runner starts: argv, environment, and how to read the helper's own numbers."""

    argv: list[str]
    env: dict[str, str]
    parse: Any = None  # callable(stdout) -> dict
    cleanup_topics: list[str] = field(default_factory=list)
    #: Long-lived processes the run uses (the Spark Connect server), measured with its own tree.
    shared_pids: tuple[int, ...] = ()


def parse_result(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT):
            return cast("dict[str, Any]", json.loads(line[len(RESULT):]))
    raise RuntimeError("the benchmark helper printed no BENCH_RESULT line; last output:\n" + stdout[-3000:])


# ---- lockstep -------------------------------------------------------------------------------------
def lockstep_command(spec_path: Path, connect_server_pid: int | None = None) -> Command:
    """``connect_server_pid``: the spec runs in connect mode on this server, whose CPU and memory
    count as the run's (the server outlives the run; only its share during the run is counted)."""
    from lockstep.spark.conf import job_environment

    return Command([sys.executable, "-m", "lockstep_bench.pipelines", "lockstep", "--spec", str(spec_path)],
                   job_environment(os.environ), parse_result,
                   shared_pids=(connect_server_pid,) if connect_server_pid else ())


class _SessionReady(logging.Handler):
    """Picks the driver's "Spark session ready in X s" out of the spark-submit output."""

    pattern = re.compile(r"Spark (?:Connect )?session (?:\S+ on \S+ )?ready in ([0-9.]+) s")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seconds: float | None = None

    def emit(self, record: logging.LogRecord) -> None:
        found = self.pattern.search(record.getMessage())
        if found:
            self.seconds = float(found.group(1))


class _TableLines(logging.Handler):
    """Picks each table's materialization out of the run's log (``lockstep.tables.materialize``): "checkpoint N:
    table NAME: K keys after R offsets of TOPIC (...) in X s"."""

    pattern = re.compile(r"table (\S+): (\d+) keys after (\d+) offsets of \S+ \((?:[^)]*)\) in ([0-9.]+) s")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.tables: dict[str, dict[str, float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        found = self.pattern.search(record.getMessage())
        if found:
            name, keys, offsets, seconds = found.groups()
            self.tables[name] = {"keys": int(keys), "offsets": int(offsets), "seconds": float(seconds)}


class _RunPhases(logging.Handler):
    """When the run's milestones were logged (``lockstep.spark.job``, ``lockstep.tables.materialize``), for the
    phases between them: the formats line (the input's plan is made), the tables' lines (each table
    materialized), "reading N ranges" (the writers start: everything before it is the query's analysis and,
    for a source that may dead-letter, a first pass over the input that counts the records that do not
    decode) and "Spark tasks wrote their transactions" (the write's pass: read, decode, join, transform,
    write)."""

    MARKS = (("formats", re.compile(r"checkpoint \d+: formats: ")), ("table", re.compile(r"checkpoint \d+: table \S+: ")),
             ("reading", re.compile(r"checkpoint \d+: reading \d+ ranges")),
             ("written", re.compile(r"checkpoint \d+: \d+ Spark tasks wrote their transactions")))

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.at: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        for name, pattern in self.MARKS:
            if pattern.search(message):
                self.at[name] = record.created  # the last of several (one line per table)

    def phases(self) -> dict[str, float]:
        """``prepare_s``: from the formats line or the last table's, whichever came later, to the writers'
        start; ``write_s``: the writers' pass. Empty when a milestone is missing."""
        start = max((self.at[k] for k in ("formats", "table") if k in self.at), default=None)
        if start is None or "reading" not in self.at or "written" not in self.at:
            return {}
        return {"prepare_s": round(self.at["reading"] - start, 3),
                "write_s": round(self.at["written"] - self.at["reading"], 3)}


#: The libraries a checkpoint's steps import on their first use: the S3 client, the Kafka clients (the
#: committer's and the admin's), Parquet (state files) and, in connect mode, pyspark's Connect client. In a new
#: process that was 0.8 s inside the timed checkpoint (2026-12-02: kafka-python 0.22 s, boto3 0.11 s, the
#: Connect client 0.40-0.47 s with the pandas it checks for), which the reports define as excluding Python's
#: start and imports, as Flink's times start with its JVM and mini-cluster up. `import_clients` imports them
#: before the clock starts; ``imports_s`` records what that took, and _process_ times still include it.
CLIENT_MODULES = ("boto3", "boto3.s3.transfer", "kafka", "kafka.admin", "confluent_kafka", "confluent_kafka.admin",
                  "pyarrow.parquet")
CONNECT_CLIENT_MODULES = ("pyspark.sql.connect.session", "pyspark.sql.connect.client.retries",
                          "pyspark.sql.connect.dataframe", "pyspark.sql.connect.functions")


def import_clients(connect: bool) -> float:
    """Import `CLIENT_MODULES` (and `CONNECT_CLIENT_MODULES` for a run in connect mode); the seconds it took."""
    import importlib

    started = time.monotonic()
    for name in CLIENT_MODULES + (CONNECT_CLIENT_MODULES if connect else ()):
        importlib.import_module(name)
    return time.monotonic() - started


def run_lockstep_checkpoint(spec_path: str) -> dict[str, Any]:
    """plan → run → commit of one checkpoint, timed step by step (also used for the fixed cost), from when its
    process has imported the clients it uses (`import_clients`)."""
    from lockstep.spark.target import CONNECT, spark_target
    from lockstep.spec import load_spec
    from lockstep.steps.coordinator import Pipeline, commit, plan, run_checkpoint

    ready = _SessionReady()
    for name in ("lockstep.steps.run", "lockstep.spark.connect"):  # spark-submit's driver, or the Connect session
        spark_log = logging.getLogger(name)
        spark_log.addHandler(ready)
        spark_log.setLevel(logging.INFO)
        spark_log.propagate = False
    tables, phases = _TableLines(), _RunPhases()
    for name, handlers in (("lockstep.tables.materialize", (tables, phases)), ("lockstep.spark.job", (phases,))):
        job_log = logging.getLogger(name)
        for handler in handlers:
            job_log.addHandler(handler)
        job_log.setLevel(logging.INFO)
    spec = load_spec(spec_path)
    imports_s = import_clients(spark_target(spec).mode == CONNECT)
    t0 = time.monotonic()
    p = Pipeline.open(spec)
    planned = plan(p, run_id=f"bench-{uuid.uuid4().hex[:8]}")
    cid = planned.claim.checkpoint_id
    t1 = time.monotonic()
    run_checkpoint(spec, cid, p.store)
    t2 = time.monotonic()
    outcome = commit(p, cid)
    t3 = time.monotonic()
    view = p.store.view(cid)
    assert view is not None and view.prepared is not None  # committed, so prepared
    prepared = view.prepared
    result: dict[str, Any] = {"checkpoint": cid, "status": outcome.status.value, "plan_s": round(t1 - t0, 3),
              "run_s": round(t2 - t1, 3), "commit_s": round(t3 - t2, 3), "total_s": round(t3 - t0, 3),
              "imports_s": round(imports_s, 3),
              "spark_seconds": prepared.spark_seconds, "session_seconds": ready.seconds,
              "records_in": prepared.records_in, "records_out": prepared.records_out,
              "records_dead_lettered": prepared.records_dead_lettered,
              "transactions": len(prepared.transactions)}
    if prepared.stage_seconds:
        result["stages"] = {k: round(v, 2) for k, v in prepared.stage_seconds.items()}
    if prepared.iceberg is not None:  # sink.iceberg: the table's rows and files of the checkpoint (the Iceberg race)
        result["iceberg"] = {"rows": prepared.iceberg.records, "files": len(prepared.iceberg.files),
                             "completed_snapshot": view.completed.iceberg_snapshot if view.completed else None}
    if tables.tables:  # a pipeline with tables: each one's materialization (the join race)
        result["tables"] = tables.tables
    if phases.phases():
        result["phases"] = phases.phases()
    # A stateful pipeline's committed state: its size and what its checkpoint measured (the keyed-state bench).
    state = view.completed.state if view.completed is not None else prepared.state
    if state is not None:
        result["state"] = {"keys": state.keys, "rows": state.rows, "bytes": state.bytes, "files": state.file_count,
                           "deltas": state.delta_count, "metrics": dict(state.metrics)}
    return result


# ---- Spark's floor ---------------------------------------------------------------------------------
def floor_command(remote: str, bootstrap: str, source: str, ends: dict[int, int], tasks: int,
                  transform: str | None, connect_server_pid: int) -> Command:
    """One pass over ``source`` up to ``ends`` in the Spark Connect server at ``remote``, written nowhere
    (``noop``): Lockstep's reader in ``tasks`` tasks, with the input's headers as a stateless checkpoint reads
    them, then ``transform`` (``module:function``) when given. The server's CPU counts as the run's."""
    from lockstep.spark.conf import job_environment

    argv = [sys.executable, "-m", "lockstep_bench.pipelines", "floor", "--remote", remote, "--bootstrap", bootstrap,
            "--source", source, "--ends", json.dumps(ends), "--tasks", str(tasks)]
    return Command(argv + (["--transform", transform] if transform else []), job_environment(os.environ),
                   parse_result, shared_pids=(connect_server_pid,))


def run_floor(remote: str, bootstrap: str, source: str, ends: dict[int, int], tasks: int,
              transform: str | None) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    from lockstep.model.offsets import OffsetRange
    from lockstep.spark.kafka_reader import forget_read_settings, read_ranges

    spark = SparkSession.builder.remote(remote).create()
    try:
        ranges = tuple(OffsetRange(source, p, 0, end) for p, end in sorted(ends.items()))
        df = read_ranges(spark, {"bootstrap.servers": bootstrap}, ranges, headers=True, tasks=tasks)
        if transform:  # a transform of Spark's own functions (no UDF: nothing to ship to the server)
            module, function = transform.split(":")
            df = getattr(importlib.import_module(module), function)(df)
        started = time.monotonic()
        df.write.format("noop").mode("overwrite").save()
        pass_s = time.monotonic() - started
        forget_read_settings(spark)
    finally:
        spark.stop()
    records = sum(ends.values())
    return {"records_in": records, "records_out": 0, "pass_s": round(pass_s, 3), "tasks": tasks,
            "transform": transform}


# ---- Spark at-least-once ---------------------------------------------------------------------------
def spark_command(bootstrap: str, source: str, sink: str, ends: dict[int, int], master: str = "local[*]") -> Command:
    import shutil

    from lockstep.paths import project_root
    from lockstep.spark.conf import job_environment, spark_conf

    spark_submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent)) or "spark-submit"
    argv = [spark_submit, "--master", master, "--name", "bench-spark-at-least-once"]
    for key, value in spark_conf().items():
        argv += ["--conf", f"{key}={value}"]
    starting = {source: {str(p): 0 for p in ends}}
    ending = {source: {str(p): e for p, e in ends.items()}}
    argv += [str(project_root() / "include" / "lockstep_bench" / "jobs" / "spark_at_least_once_job.py"), "--bootstrap", bootstrap,
             "--source", source, "--sink", sink, "--starting", json.dumps(starting), "--ending", json.dumps(ending)]
    return Command(argv, job_environment(os.environ), parse_result)


# ---- raw client ceiling ---------------------------------------------------------------------------
def raw_command(bootstrap: str, source: str, sink: str, ends: dict[int, int]) -> Command:
    from lockstep.spark.conf import job_environment

    return Command([sys.executable, "-m", "lockstep_bench.pipelines", "raw", "--bootstrap", bootstrap,
                    "--source", source, "--sink", sink, "--ends", json.dumps(ends)],
                   job_environment(os.environ), parse_result)


def run_raw_client(bootstrap: str, source: str, sink: str, ends: dict[int, int]) -> dict[str, Any]:
    """Consume ``[0, end)`` of every partition, transform each record, produce in one transaction."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as KTP

    from lockstep.spark.python_writer import DEFAULT_PRODUCER_CONFIG
    from lockstep_examples.bench import transform_value

    started = time.monotonic()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760, "log_level": 3})
    config = {k: v for k, v in DEFAULT_PRODUCER_CONFIG.items() if k != "statistics.interval.ms"}
    producer = Producer({**config, "bootstrap.servers": bootstrap, "transactional.id": f"bench-raw-{uuid.uuid4().hex[:6]}",
                         "enable.idempotence": True, "log_level": 3,
                         # One transaction over the whole input, as Lockstep's bench pipelines have (900 s): at
                         # librdkafka's default of 60 s the broker aborted it (a fence) at 5M records.
                         "transaction.timeout.ms": 900_000})
    producer.init_transactions(60)
    producer.begin_transaction()
    remaining = {p: e for p, e in ends.items() if e > 0}
    consumer.assign([KTP(source, p, 0) for p in remaining])
    records_in = records_out = 0
    topic_bytes = source.encode()
    while remaining:
        for msg in consumer.consume(10_000, timeout=0.1):  # a short batch waits its whole timeout
            if msg.error():
                continue
            p, offset = msg.partition(), msg.offset()
            if p is None or offset is None:  # a consumed record has both
                continue
            end = remaining.get(p)
            if end is None or offset >= end:
                continue
            records_in += 1
            raw = msg.value()
            value = transform_value(raw) if raw is not None else None  # a tombstone is no order: filtered out
            if value is not None:
                headers: list[tuple[str, str | bytes | None]] = [
                    (SOURCE_TOPIC, topic_bytes), (SOURCE_PARTITION, str(p).encode()), (SOURCE_OFFSET, str(offset).encode())]
                while True:
                    try:
                        producer.produce(sink, value, headers=headers)
                        break
                    except BufferError:
                        producer.poll(0.05)
                records_out += 1
                if records_out % 1000 == 0:
                    producer.poll(0)
            if offset + 1 >= end:
                del remaining[p]
    consumer.close()
    producer.commit_transaction(120)
    return {"records_in": records_in, "records_out": records_out, "job_seconds": round(time.monotonic() - started, 3)}


# ---- Kafka's perf tools ---------------------------------------------------------------------------
LOG4J2 = "status = warn\nrootLogger.level = warn\nappender.c.type = Console\nappender.c.name = C\n" \
         "appender.c.layout.type = PatternLayout\nappender.c.layout.pattern = %m%n\nrootLogger.appenderRef.c.ref = C\n"


def _java(tool: str, args: list[str], work_dir: Path) -> list[str]:
    from lockstep_dev.kafka_nodes import classpath, java_binary

    work_dir.mkdir(parents=True, exist_ok=True)
    log4j = work_dir / "perf-log4j2.properties"
    log4j.write_text(LOG4J2)
    return [java_binary(), "-Xmx512m", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath(),
            f"org.apache.kafka.tools.{tool}", *args]


def producer_perf_command(bootstrap: str, topic: str, records: int, record_size: int, work_dir: Path) -> Command:
    args = ["--topic", topic, "--num-records", str(records), "--record-size", str(record_size), "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=20", "batch.size=1000000",
            "compression.type=lz4"]
    return Command(_java("ProducerPerformance", args, work_dir), dict(os.environ), parse_producer_perf)


def parse_producer_perf(stdout: str) -> dict[str, Any]:
    found = re.findall(r"(\d+) records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\)", stdout)
    if not found:
        raise RuntimeError("kafka-producer-perf-test printed no summary:\n" + stdout[-2000:])
    sent, rate, mb = found[-1]
    return {"records_in": int(sent), "records_out": int(sent), "tool_records_per_s": float(rate), "tool_mb_per_s": float(mb)}


def consumer_perf_command(bootstrap: str, topic: str, records: int, work_dir: Path) -> Command:
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records), "--timeout", "60000"]
    return Command(_java("ConsumerPerformance", args, work_dir), dict(os.environ), parse_consumer_perf)


def parse_consumer_perf(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.count(",") >= 9]
    header = next((line for line in lines if "nMsg.sec" in line), None)
    data = [line for line in lines if "nMsg.sec" not in line]
    if header is None or not data:
        raise RuntimeError("kafka-consumer-perf-test printed no summary:\n" + stdout[-2000:])
    row = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in data[-1].split(",")]))
    return {"records_in": int(row["data.consumed.in.nMsg"]), "records_out": 0,
            "tool_records_per_s": float(row["nMsg.sec"]), "tool_mb_per_s": float(row["MB.sec"]),
            "fetch_records_per_s": float(row.get("fetch.nMsg.sec", 0) or 0)}


# ---- helper entry point ---------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lockstep_bench.pipelines")
    sub = parser.add_subparsers(dest="which", required=True)
    lk = sub.add_parser("lockstep")
    lk.add_argument("--spec", required=True)
    raw = sub.add_parser("raw")
    for name in ("--bootstrap", "--source", "--sink", "--ends"):
        raw.add_argument(name, required=True)
    fl = sub.add_parser("floor")
    for name in ("--remote", "--bootstrap", "--source", "--ends"):
        fl.add_argument(name, required=True)
    fl.add_argument("--tasks", type=int, required=True)
    fl.add_argument("--transform")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.which == "lockstep":
        result = run_lockstep_checkpoint(args.spec)
    elif args.which == "floor":
        result = run_floor(args.remote, args.bootstrap, args.source, {int(k): v for k, v in json.loads(args.ends).items()},
                           args.tasks, args.transform)
    else:
        result = run_raw_client(args.bootstrap, args.source, args.sink,
                                {int(k): v for k, v in json.loads(args.ends).items()})
    print(RESULT + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
