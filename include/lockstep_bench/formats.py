"""``lockstep bench --formats-only``: Avro through the Schema Registry at scale (issue 40), Lockstep against
``kafka-producer-perf-test`` run with as many producers as Lockstep has transactions, in one run.

The work:

* **Input.** ``records`` orders, ``lockstep_dev.datagen.order(i, pad=PAD)``'s fields and values, over
  ``partitions`` partitions (record i in partition ``i % partitions``), twice: as the JSON of the other
  benchmarks (``workloads.make_input``), and as Avro (``lockstep_examples.bench.ORDER_SCHEMA``, encoded by
  fastavro) framed for the registry (magic byte, schema id, payload), the schema registered under
  ``<topic>-value`` in the platform's Apicurio.
* **Lockstep, Avro** (connect mode, one checkpoint over the input): ``source.value: avro-confluent``,
  ``lockstep_examples.bench:avro_transform`` (keep ``amount >= MIN_AMOUNT``, add ``amount_cents``),
  ``sink.value: avro-confluent`` with ``ENRICHED_SCHEMA``, ``auto_register: true``.
* **Lockstep, JSON**: the benchmark's JSON transform over the JSON input (the figure beside it).
* **kafka-producer-perf-test × k**: k processes at once, k the transactions of Lockstep's checkpoint (its
  prepared checkpoint's, read from the run, not assumed), each sending its share of ``records`` records
  of the Avro record's average size with the producer settings of the other benchmarks. Its wall time is
  from the first process's start to the last one's end (JVM starts included); the tools' own figure
  (each tool times its own send loop, after its JVM and producer started) is reported beside it.

The competitors alternate (round r starts r places along), after one uncounted run of each Lockstep
variant (which warms the server and the broker and tells k). **Every run's sink is checked**: Lockstep's
committed records counted with a ``read_committed`` consumer against the filter's exact count (and a
sample decoded: the registry's framing, the filter, the field), its dead-letter topic empty; the perf
tools' records counted by end offsets. A mismatch fails the run.

Then, unless ``parts`` is off, **where the time goes**: the same input read by Lockstep's own reader in a
Connect session into Spark's ``noop`` sink, alone, with the Avro decode, with decode + transform + encode,
and with the JSON transform, each timed with the Connect server's CPU seconds (no Kafka write, no commit).
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from lockstep_bench import pipelines as pl
from lockstep_bench import workloads
from lockstep_bench.measure import Run, RunFailed, execute

if TYPE_CHECKING:
    from lockstep_dev.platform import Platform

LOCKSTEP_AVRO, LOCKSTEP_JSON, PERF = "lockstep-connect-avro", "lockstep-connect-json", "kafka-producer-perf-k"
COMPETITORS = (LOCKSTEP_AVRO, LOCKSTEP_JSON, PERF)
AVRO_TRANSFORM = "lockstep_examples.bench:avro_transform"
#: The parts of "where the time goes", each a read of the whole input into Spark's noop sink.
PARTS = ("read", "read + Avro decode", "read + Avro decode + transform + encode", "read + JSON transform")
SAMPLE = 1000


@dataclass
class FormatSettings:
    records: int = 10_000_000
    partitions: int = 8
    repeats: int = 2
    warm_up: bool = True
    parts: bool = True
    report: Path = Path("docs/BENCHMARKS-formats.md")
    results: Path | None = None
    state_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.records < 1 or self.partitions < 1 or self.repeats < 1:
            raise ValueError("--formats-records, --partitions and --repeats must be at least 1")

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


# ---- the input and what the filter keeps ---------------------------------------------------------
def order_record(i: int) -> dict[str, Any]:
    """Order ``i`` as a record of ``ORDER_SCHEMA``: ``datagen.order(i, pad=PAD)``'s fields and values."""
    return cast("dict[str, Any]", json.loads(_order_json(i)))


def _order_json(i: int) -> bytes:
    from lockstep_dev.datagen import order

    return order(i, pad=workloads.PAD)


def kept(records: int) -> int:
    """How many of orders ``[0, records)`` the benchmark's filter keeps (``amount >= MIN_AMOUNT``).

    Order i's amount is ``(i * 7919 % 30000) / 100``; 7919 is prime to 30,000, so every 30,000 consecutive
    orders take each residue once, and a full period keeps the residues from ``MIN_AMOUNT * 100`` up."""
    from lockstep_examples.bench import MIN_AMOUNT

    floor = round(MIN_AMOUNT * 100)
    period, rest = divmod(records, 30_000)
    return period * (30_000 - floor) + sum(1 for i in range(period * 30_000, records) if i * 7919 % 30_000 >= floor)


def avro_record(i: int, note: str = "x" * workloads.PAD) -> dict[str, Any]:
    """Order ``i`` built directly (the generator's fast path): ``order_record(i)``'s values, a test checks."""
    from lockstep_dev.datagen import CURRENCIES

    return {"order_id": f"o{i}", "customer": f"customer-{i % 997}", "amount": round((i * 7919 % 30000) / 100, 2),
            "currency": CURRENCIES[i % 3], "created_at": 1_700_000_000 + i, "note": note}


def avro_payload_writer() -> Callable[[dict[str, Any]], bytes]:
    """One record's Avro payload (no framing) in ``ORDER_SCHEMA``, by fastavro."""
    import fastavro

    from lockstep_examples.bench import ORDER_SCHEMA

    schema = fastavro.parse_schema(ORDER_SCHEMA)

    def write(record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, record)
        return out.getvalue()
    return write


def produce_avro(bootstrap: str, topic: str, records: int, partitions: int, schema_id: int) -> tuple[float, int]:
    """The Avro input: ``records`` orders framed with ``schema_id``, record i into partition ``i % partitions``.
    Returns (seconds, bytes of the framed values)."""
    from lockstep.formats.wire import header
    from lockstep_dev.datagen import send

    write = avro_payload_writer()
    head = header(schema_id)
    note = "x" * workloads.PAD
    started = time.monotonic()
    try:
        total = send(bootstrap, topic, ((head + write(avro_record(i, note)), i % partitions, None)
                                        for i in range(records)), timeout_s=300)
    except RuntimeError as exc:
        raise RunFailed(str(exc)) from exc
    return time.monotonic() - started, total


# ---- kafka-producer-perf-test, k at once --------------------------------------------------------------
def shares(records: int, k: int) -> list[int]:
    """``records`` split over ``k`` producers, the first ones one more when it does not divide."""
    base, extra = divmod(records, k)
    return [base + (1 if n < extra else 0) for n in range(k)]


def perf_command(bootstrap: str, topic: str, records: int, producers: int, record_size: int, work_dir: Path) -> pl.Command:
    return pl.Command([sys.executable, "-m", "lockstep_bench.formats", "perf", "--bootstrap", bootstrap, "--topic", topic,
                       "--records", str(records), "--producers", str(producers), "--record-size", str(record_size),
                       "--work-dir", str(work_dir)], dict(os.environ), pl.parse_result)


def run_perf(bootstrap: str, topic: str, records: int, producers: int, record_size: int, work_dir: Path) -> dict[str, Any]:
    """``producers`` ProducerPerformance JVMs started together, each with its share of ``records``."""
    procs = []
    first_start = time.monotonic()
    for n, count in enumerate(shares(records, producers)):
        command = pl.producer_perf_command(bootstrap, topic, count, record_size, work_dir / f"perf-{n}")
        procs.append(subprocess.Popen(command.argv, env=command.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = [p.communicate()[0] for p in procs]
    last_end = time.monotonic()
    failed = [(p.returncode, out[-2000:]) for p, out in zip(procs, outputs) if p.returncode != 0]
    if failed:
        raise RunFailed(f"kafka-producer-perf-test failed: exit {failed[0][0]}; last output:\n{failed[0][1]}")
    tools = [pl.parse_producer_perf(out) for out in outputs]
    sent = sum(t["records_in"] for t in tools)
    # Each tool's own elapsed time: its records over its own rate (its send loop, after its JVM started).
    own_s = max(t["records_in"] / t["tool_records_per_s"] for t in tools if t["tool_records_per_s"])
    span = last_end - first_start
    return {"records_in": sent, "records_out": sent, "producers": producers, "record_size": record_size,
            "first_start_to_last_end_s": round(span, 3), "span_records_per_s": round(sent / span, 1),
            "tool_records_per_s": round(sent / own_s, 1), "tools_longest_s": round(own_s, 3),
            "per_tool_records_per_s": [t["tool_records_per_s"] for t in tools]}


# ---- checks -----------------------------------------------------------------------------------------
def count_committed(bootstrap: str, topic: str) -> int:
    """The committed records of ``topic``, counted by a read_committed consumer up to the last stable offsets."""
    ends = {p: e for p, e in workloads.end_offsets(bootstrap, topic).items() if e > 0}
    count, _ = workloads.read_committed(bootstrap, topic, {}, ends, timeout_s=1800)
    return count


def high_watermarks(bootstrap: str, topic: str) -> int:
    return sum(workloads.end_offsets(bootstrap, topic, committed=False).values())


def sample(bootstrap: str, topic: str, n: int = SAMPLE) -> list[bytes]:
    """The first ``n`` committed values of ``topic``'s partition 0."""
    ends = workloads.end_offsets(bootstrap, topic)
    _, values = workloads.read_committed(bootstrap, topic, {}, {0: min(ends.get(0, 0), n)}, lambda m: m.value(),
                                         timeout_s=120)
    return values


def check_values(values: list[dict[str, Any]]) -> list[str]:
    """What is wrong with output records (decoded): each must be an order the filter keeps, with its cents."""
    from lockstep_examples.bench import MIN_AMOUNT

    problems = []
    for v in values:
        i = int(str(v.get("order_id", "o-1"))[1:])
        want = {**order_record(i), "amount_cents": round(order_record(i)["amount"] * 100)}
        if v != want:
            problems.append(f"{v} is not {want}")
        elif v["amount"] < MIN_AMOUNT:
            problems.append(f"{v['order_id']} has amount {v['amount']} < {MIN_AMOUNT}")
    return problems


def decode_sink_avro(values: list[bytes], registry: Any, subject: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The sink's values decoded with the writer schema their framing names, which must be a version of
    ``subject``; the problems found on the way."""
    import fastavro

    from lockstep.formats.wire import unframe

    ids = {s.id: s for s in registry.subject_schemas(subject)}
    out, problems = [], []
    for value in values:
        try:
            schema_id, payload = unframe(value)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if schema_id not in ids:
            problems.append(f"schema id {schema_id} is no version of {subject} ({sorted(ids)})")
            continue
        schema = fastavro.parse_schema(json.loads(ids[schema_id].text))
        record = fastavro.schemaless_reader(io.BytesIO(payload), schema, None)
        assert isinstance(record, dict)  # the subject's schemas are records
        out.append(record)
    return out, problems


@dataclass(frozen=True)
class Inputs:
    avro_topic: str
    json_topic: str
    avro_bytes: int
    json_bytes: int
    avro_seconds: float
    json_seconds: float
    schema_id: int
    records: int

    @property
    def avro_record_size(self) -> int:
        """The Avro input's average framed value, the perf tool's record size."""
        return round(self.avro_bytes / self.records)


class FormatsRace:
    """The three competitors over the same records, alternating, every sink checked."""

    def __init__(self, settings: FormatSettings, platform: Platform, work_dir: Path, log: Callable[[str], None]) -> None:
        self.s = settings
        self.platform = platform
        self.bootstrap = platform.kafka.bootstrap
        self.remote = platform.spark_connect.url
        self.connect_pid = int(platform.state.pids["spark-connect"])
        self.work_dir = work_dir
        self.log = log
        self.producers: int | None = None  # k: Lockstep's transactions, from its runs

    @property
    def registry(self) -> Any:
        from lockstep.formats.registry import registry_for

        return registry_for("schema_registry_default")

    def _cpu(self, pid: int) -> float:
        from lockstep_bench.measure import _tree

        try:
            return sum(cpu for _mem, cpu in _tree(pid).values())
        except Exception:  # noqa: BLE001 - a process gone: nothing to count
            return 0.0

    def _broker_pids(self) -> list[int]:
        return [int(pid) for name, pid in self.platform.state.pids.items() if name.startswith("kafka")]

    # ---- inputs -----------------------------------------------------------------------------------
    def make_inputs(self) -> Inputs:
        from lockstep_examples.bench import ORDER_SCHEMA

        n, parts = self.s.records, self.s.partitions
        avro_topic = f"bench-formats-avro-{uuid.uuid4().hex[:6]}"
        workloads.create_topic(self.bootstrap, avro_topic, parts)
        schema_id = self.registry.register(f"{avro_topic}-value", json.dumps(ORDER_SCHEMA), "AVRO")
        self.log(f"generating {n:,} Avro records (schema id {schema_id}) over {parts} partitions")
        avro_s, avro_bytes = produce_avro(self.bootstrap, avro_topic, n, parts, schema_id)
        self.log(f"Avro input: {avro_s:.1f} s, {n / avro_s:,.0f} records/s, {avro_bytes / n:.1f} bytes a record")
        self.log(f"generating {n:,} JSON records over {parts} partitions")
        w = workloads.make_input(self.bootstrap, n, parts, name=f"bench-formats-json-{uuid.uuid4().hex[:6]}")
        self.log(f"JSON input: {w.generate_seconds:.1f} s, {n / w.generate_seconds:,.0f} records/s")
        for topic in (avro_topic, w.topic):
            if high_watermarks(self.bootstrap, topic) != n:
                raise RunFailed(f"input {topic} holds {high_watermarks(self.bootstrap, topic):,} records, not {n:,}")
        return Inputs(avro_topic, w.topic, avro_bytes, w.bytes, avro_s, w.generate_seconds, schema_id, n)

    # ---- one run ------------------------------------------------------------------------------------
    def _spec(self, name: str, inputs: Inputs, sink: str) -> Path:
        from lockstep_examples.bench import ENRICHED_SCHEMA

        tag = f"bench-formats-{'avro' if name == LOCKSTEP_AVRO else 'json'}-{uuid.uuid4().hex[:6]}"
        if name == LOCKSTEP_AVRO:
            return workloads.write_spec(self.work_dir / "specs", tag, inputs.avro_topic, sink, self.s.records,
                                        remote=self.remote, transform=AVRO_TRANSFORM, source_value="avro-confluent",
                                        sink_value={"format": "avro-confluent", "schema": ENRICHED_SCHEMA,
                                                    "auto_register": True})
        return workloads.write_spec(self.work_dir / "specs", tag, inputs.json_topic, sink, self.s.records,
                                    remote=self.remote)

    def run(self, name: str, inputs: Inputs, repeat: int) -> dict[str, Any]:
        sink = f"bench-formats-out-{name}-{uuid.uuid4().hex[:6]}"
        workloads.create_topic(self.bootstrap, sink, self.s.partitions)
        topics = [sink]
        if name == PERF:
            if self.producers is None:
                raise RunFailed("kafka-producer-perf-test has no producer count: no Lockstep run reported its "
                                "transactions before it")
            command = perf_command(self.bootstrap, sink, self.s.records, self.producers, inputs.avro_record_size,
                                   self.work_dir)
        else:
            workloads.create_topic(self.bootstrap, f"{sink}-dlq", self.s.partitions)
            topics.append(f"{sink}-dlq")
            command = pl.lockstep_command(self._spec(name, inputs, sink), self.connect_pid)
        brokers = {pid: self._cpu(pid) for pid in self._broker_pids()}
        connect = self._cpu(self.connect_pid)
        try:
            run = execute(name, command, self.s.records, self.s.partitions, repeat=repeat)
            cpu = {"broker_cpu_s": round(sum(self._cpu(p) - c for p, c in brokers.items()), 2),
                   "connect_server_cpu_s": round(self._cpu(self.connect_pid) - connect, 2)}
            check = self.check(name, run, sink)
        finally:
            for t in topics:
                workloads.delete_topic(self.bootstrap, t)
        if name == PERF:  # the tools' span, first JVM start to last end (the helper's own start left out)
            span = float(run.inner["first_start_to_last_end_s"])
            run = Run(run.pipeline, run.records, run.partitions, span, run.peak_rss_mb, run.cpu_s, run.inner, run.repeat)
        elif run.inner.get("transactions"):
            if self.producers not in (None, run.inner["transactions"]):
                self.log(f"note: {name} wrote {run.inner['transactions']} transactions, an earlier run "
                         f"{self.producers}; the perf tool follows the latest")
            self.producers = int(run.inner["transactions"])
        self.log(f"{name:22} {run.wall_s:7.1f} s  {run.records_per_s:10,.0f} rec/s  peak {run.peak_rss_mb:,.0f} MB  "
                 f"cpu {run.cpu_s:.0f} s (broker {cpu['broker_cpu_s']:.0f} s)  {check['summary']}  "
                 f"{json.dumps(run.inner)}")
        return {**run.to_json(), **cpu, "check": check}

    def check(self, name: str, run: Run, sink: str) -> dict[str, Any]:
        """The run's sink against what it must hold; RunFailed when it does not."""
        n = self.s.records
        if name == PERF:
            found = high_watermarks(self.bootstrap, sink)
            problems = [] if found == n else [f"the sink holds {found:,} records, the tools were to send {n:,}"]
            return self._verdict(name, {"expected": n, "found": found, "how": "end offsets"}, problems)
        want = kept(n)
        found = count_committed(self.bootstrap, sink)
        dead = high_watermarks(self.bootstrap, f"{sink}-dlq")
        problems = []
        if found != want:
            problems.append(f"{found:,} committed records in the sink, the filter keeps {want:,}")
        if dead:
            problems.append(f"{dead:,} records in the dead-letter topic")
        if run.inner.get("records_in") != n or run.inner.get("records_out") != want:
            problems.append(f"the checkpoint reports {run.inner.get('records_in')} in, {run.inner.get('records_out')} "
                            f"out; {n} in, {want} out expected")
        values = sample(self.bootstrap, sink)
        if name == LOCKSTEP_AVRO:
            decoded, wrong = decode_sink_avro(values, self.registry, f"{sink}-value")
        else:
            decoded, wrong = [json.loads(v) for v in values], []
        wrong += check_values(decoded)
        if len(decoded) < min(SAMPLE, want // self.s.partitions // 2):
            wrong.append(f"only {len(decoded)} sample records decoded")
        problems += wrong[:5]
        return self._verdict(name, {"expected": want, "found": found, "dead_letters": dead, "sampled": len(decoded),
                                    "how": "read_committed count"}, problems)

    def _verdict(self, name: str, doc: dict[str, Any], problems: list[str]) -> dict[str, Any]:
        exact = not problems
        summary = (f"sink exact: {doc['found']:,} records ({doc['how']})" if exact else
                   f"sink NOT exact: {'; '.join(problems)}")
        if not exact:
            raise RunFailed(f"{name}: {summary}")
        return {**doc, "exact": exact, "summary": summary}

    # ---- where the time goes ------------------------------------------------------------------------
    def parts(self, inputs: Inputs) -> list[dict[str, Any]]:
        from lockstep_examples.bench import ENRICHED_SCHEMA

        sink = f"bench-formats-parts-{uuid.uuid4().hex[:6]}"  # never written: its subject, as a plan registers it
        self.registry.register(f"{sink}-value", json.dumps(ENRICHED_SCHEMA), "AVRO")
        spec = self._spec(LOCKSTEP_AVRO, inputs, sink)
        out = []
        for part in PARTS:
            topic = inputs.json_topic if "JSON" in part else inputs.avro_topic
            command = pl.Command([sys.executable, "-m", "lockstep_bench.formats", "part", "--spec", str(spec),
                                  "--topic", topic, "--part", part], dict(os.environ), pl.parse_result,
                                 shared_pids=(self.connect_pid,))
            connect = self._cpu(self.connect_pid)
            run = execute(f"part: {part}", command, self.s.records, self.s.partitions)
            row = {"part": part, "wall_s": run.wall_s, "noop_s": run.inner["noop_s"], "tasks": run.inner["tasks"],
                   "connect_server_cpu_s": round(self._cpu(self.connect_pid) - connect, 2), "rows": run.inner["rows"]}
            self.log(f"part {part:42} noop {row['noop_s']:6.1f} s  server cpu {row['connect_server_cpu_s']:6.1f} s")
            out.append(row)
        return out

    # ---- the race --------------------------------------------------------------------------------------
    def measure(self) -> dict[str, Any]:
        inputs = self.make_inputs()
        try:
            warm = [self.run(name, inputs, -1) for name in (LOCKSTEP_AVRO, LOCKSTEP_JSON)] if self.s.warm_up else []
            runs = []
            for r in range(self.s.repeats):
                for i in range(len(COMPETITORS)):
                    runs.append(self.run(COMPETITORS[(r + i) % len(COMPETITORS)], inputs, r))
            parts = self.parts(inputs) if self.s.parts else []
        finally:
            for topic in (inputs.avro_topic, inputs.json_topic):
                workloads.delete_topic(self.bootstrap, topic)
        n = self.s.records
        return {"input": {"avro_seconds": round(inputs.avro_seconds, 1), "json_seconds": round(inputs.json_seconds, 1),
                          "avro_records_per_s": round(n / inputs.avro_seconds), "json_records_per_s":
                          round(n / inputs.json_seconds), "avro_record_bytes": round(inputs.avro_bytes / n, 1),
                          "json_record_bytes": round(inputs.json_bytes / n, 1), "schema_id": inputs.schema_id,
                          "kept": kept(n)},
                "warm_up": warm, "runs": runs, "parts": parts, "producers": self.producers}


# ---- helper processes ---------------------------------------------------------------------------------
def measure_part(spec_path: str, topic: str, part: str) -> dict[str, Any]:
    """One of ``PARTS`` over the whole of ``topic`` in a Connect session, into Spark's noop sink, in as many
    tasks as Lockstep's checkpoint reads with."""
    from lockstep.connections import kafka_config
    from lockstep.formats.codecs import Formats, decodable, decode
    from lockstep.kafka.client_configs import JAVA
    from lockstep.model.offsets import OffsetRange
    from lockstep.spark.connect import connect_mode, new_session
    from lockstep.spark.kafka_reader import default_parallelism, read_ranges
    from lockstep.spec import load_spec
    from lockstep_examples.bench import avro_transform, transform

    spec = load_spec(spec_path)
    ends = workloads.end_offsets(workloads_bootstrap(), topic)
    ranges = tuple(OffsetRange(topic, p, 0, e) for p, e in sorted(ends.items()))
    with connect_mode():
        spark = new_session(str(spec.spark.remote))
        try:
            tasks = min(default_parallelism(spark), len(ranges))
            df = read_ranges(spark, kafka_config(spec.source.kafka_conn_id, JAVA), ranges, tasks=tasks)
            if part == "read":
                out = df.selectExpr("length(value) AS n")
            elif part == "read + JSON transform":
                out = transform(df).select("value")
            elif part == "read + Avro decode":
                out = decodable(decode(df, Formats(spec).readings)).select("data")
            else:
                out = Formats(spec).transformed(df, avro_transform)[0].select("value", "error")
            started = time.monotonic()
            out.write.format("noop").mode("overwrite").save()
            noop_s = time.monotonic() - started
        finally:
            spark.stop()
    rows = sum(ends.values())
    return {"noop_s": round(noop_s, 3), "tasks": tasks, "rows": rows}


def workloads_bootstrap() -> str:
    from lockstep.connections import kafka_config

    return str(kafka_config("kafka_default")["bootstrap.servers"])


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m lockstep_bench.formats")
    sub = parser.add_subparsers(dest="which", required=True)
    perf = sub.add_parser("perf")
    for name in ("--bootstrap", "--topic", "--records", "--producers", "--record-size", "--work-dir"):
        perf.add_argument(name, required=True)
    part = sub.add_parser("part")
    for name in ("--spec", "--topic", "--part"):
        part.add_argument(name, required=True)
    args = parser.parse_args(argv)
    if args.which == "perf":
        result = run_perf(args.bootstrap, args.topic, int(args.records), int(args.producers), int(args.record_size),
                          Path(args.work_dir))
    else:
        result = measure_part(args.spec, args.topic, args.part)
    print(pl.RESULT + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
