"""``lockstep bench --windows-only``: a windowed count per key, exactly-once Kafka to Kafka, raced against
Flink SQL and Quix Streams on the same input, every sink checked window by window.

The work, one definition per engine:

* **Input.** ``lockstep_dev.datagen.order(i)`` for i in ``[0, records)`` (about 200 bytes each, as the
  main race's), keyed by its customer (997 customers) and written to partition ``customer index %
  partitions``, so that each partition's event times (``created_at``, 1,700,000,000 + i seconds) rise.
  That is how a keyed topic looks, and Quix, which windows by the Kafka key and watches event time
  per partition, needs nothing else.
* **Result.** Per customer, the orders in each tumbling window of ``WINDOW_S`` seconds of ``created_at``,
  with ``OUT_OF_ORDERNESS_S`` of out-of-orderness (Flink's watermark delay, Quix's grace, Lockstep's
  ``out_of_orderness``); one output record per fired window, the customer as its key.
* **Lockstep** (connect mode): one checkpoint over the whole input, ``state.window`` with
  ``orders: count(*)`` over ``lockstep_examples.bench:window_input``.
* **Flink SQL**: a ``TUMBLE`` window table function over a bounded Kafka source in streaming mode,
  RocksDB state with incremental checkpoints every ``FLINK_CHECKPOINT_S`` seconds, exactly-once Kafka
  sink (``lockstep_bench.flink_sql.window_statements``).
* **Quix Streams**: ``tumbling_window(...).count().final(closing_strategy="partition")``, exactly-once,
  state in RocksDB with its changelog topics (``include/lockstep_bench/jobs/quix_window_job.py``).

**Which windows each engine must emit.** The input ends, and the engines differ in what they do with
the windows still open at that point. Flink's bounded source ends with the final watermark and fires
them all. Lockstep keeps them in its state until a later checkpoint's records move the watermark past
them. Quix keeps them until a later record in their partition does. So the check (``check``) asks
every engine for:

* every window that ends before the input's final watermark (the smallest of the partitions' largest
  event times, minus the out-of-orderness), each exactly once, with the exact count;
* nothing else except later windows, each also exactly once with the exact count of the input.

A window emitted twice, with a wrong count, or missing is a failure of the run.
"""
from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockstep.paths import cache_dir, project_root
from lockstep_bench import peers, workloads
from lockstep_bench import pipelines as pl
from lockstep_bench.measure import RunFailed, execute

#: ``lockstep_dev.datagen.order``: customer ``customer-{i % CUSTOMERS}``, created_at ``EPOCH + i`` seconds.
CUSTOMERS = 997
EPOCH = 1_700_000_000
WINDOW_S = 3600
OUT_OF_ORDERNESS_S = 10
FLINK_CHECKPOINT_S = 5
KEY_GROUPS = 32
TRANSFORM = "lockstep_examples.bench:window_input"
LOCKSTEP, FLINK, QUIX = "lockstep-connect", "flink-sql", "quix-streams"
ENGINES = (LOCKSTEP, FLINK, QUIX)
#: The sinks keep every record: Quix stamps a window's record with its start, in 2023, which the
#: broker's time retention would delete as soon as the segment rolled (and the check would find nothing).
KEEP = {"retention.ms": "-1"}


def window_state() -> dict[str, Any]:
    """Lockstep's ``state`` section: the same window as the peers'."""
    return {"key_groups": KEY_GROUPS,
            "event_time": {"column": "created_at", "out_of_orderness": f"{OUT_OF_ORDERNESS_S}s"},
            "window": {"key": "customer", "size": f"{WINDOW_S}s", "allowed_lateness": "0s",
                       "aggregates": {"orders": "count(*)"}}}


def partition_of(i: int, partitions: int) -> int:
    return (i % CUSTOMERS) % partitions


def customer_of(i: int) -> str:
    return f"customer-{i % CUSTOMERS}"


@dataclass(frozen=True)
class Expected:
    """The exact result of ``records`` orders over ``partitions``: every window's count, and the final
    watermark below which every window must have been emitted."""

    counts: dict[tuple[str, int], int]
    final_watermark_s: int

    @property
    def closed(self) -> set[tuple[str, int]]:
        return {w for w in self.counts if w[1] + WINDOW_S < self.final_watermark_s}


def expected(records: int, partitions: int) -> Expected:
    counts: Counter[tuple[str, int]] = Counter()
    last: dict[int, int] = {}
    for i in range(records):
        ts = EPOCH + i
        counts[(customer_of(i), ts - ts % WINDOW_S)] += 1
        last[partition_of(i, partitions)] = ts
    return Expected(dict(counts), min(last.values()) - OUT_OF_ORDERNESS_S if last else 0)


def _seconds(value: Any) -> int:
    """A window start as epoch seconds: Quix's epoch milliseconds, or an ISO-8601 / SQL timestamp (UTC)."""
    if isinstance(value, (int, float)):
        return int(value // 1000)
    text = str(value).replace("Z", "+00:00")
    parsed = dt.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp())


def parse_window(key: bytes | None, value: bytes) -> tuple[str, int, int]:
    """(customer, window start in epoch seconds, count) from any engine's output record:
    Lockstep's and Flink's ``{"customer", "window_start", "window_end", "orders"}``, or Quix's
    ``{"start", "end", "value"}`` with the customer as the Kafka key."""
    doc = json.loads(value)
    if "window_start" in doc:
        return str(doc["customer"]), _seconds(doc["window_start"]), int(doc["orders"])
    if key is None:
        raise ValueError(f"a window without a key: {value[:200]!r}")
    return key.decode(), _seconds(doc["start"]), int(doc["value"])


@dataclass
class Verdict:
    windows: int = 0  # output records read
    closed_expected: int = 0
    missing: list[tuple[str, int]] = field(default_factory=list)
    wrong: list[tuple[str, int, int, int]] = field(default_factory=list)  # (customer, start, got, want)
    duplicated: list[tuple[str, int]] = field(default_factory=list)
    unknown: list[tuple[str, int]] = field(default_factory=list)
    open_emitted: int = 0  # windows after the final watermark that the engine fired anyway (exact ones)

    @property
    def exact(self) -> bool:
        return not (self.missing or self.wrong or self.duplicated or self.unknown) and self.windows > 0

    def summary(self) -> str:
        if self.exact:
            return (f"exact: {self.windows:,} windows ({self.closed_expected:,} closed by the final watermark, "
                    f"{self.open_emitted:,} later ones fired at the end of the input)")
        return (f"NOT exact: {len(self.missing):,} closed windows missing, {len(self.wrong):,} with a wrong count, "
                f"{len(self.duplicated):,} emitted twice, {len(self.unknown):,} not in the input "
                f"(first: {(self.missing + self.wrong + self.duplicated + self.unknown)[:3]})")

    def to_json(self) -> dict[str, Any]:
        return {"exact": self.exact, "windows": self.windows, "closed_expected": self.closed_expected,
                "open_emitted": self.open_emitted, "missing": len(self.missing), "wrong": len(self.wrong),
                "duplicated": len(self.duplicated), "unknown": len(self.unknown), "summary": self.summary(),
                "samples": {"missing": self.missing[:5], "wrong (customer, start, got, want)": self.wrong[:5],
                            "duplicated": self.duplicated[:5], "unknown": self.unknown[:5]}}


def check(want: Expected, rows: Iterable[tuple[str, int, int]]) -> Verdict:
    verdict = Verdict()
    seen: set[tuple[str, int]] = set()
    closed = want.closed
    verdict.closed_expected = len(closed)
    for customer, start, count in rows:
        verdict.windows += 1
        window = (customer, start)
        if window in seen:
            verdict.duplicated.append(window)
            continue
        seen.add(window)
        true = want.counts.get(window)
        if true is None:
            verdict.unknown.append(window)
        elif count != true:
            verdict.wrong.append((customer, start, count, true))
        elif window not in closed:
            verdict.open_emitted += 1
    verdict.missing = sorted(closed - seen)
    return verdict


def produce_input(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    """The race's input (module docstring); returns the seconds it took."""
    from lockstep_bench.keyed_state import produce

    started = time.monotonic()
    produce(bootstrap, topic, list(range(records)), partitions,
            place=lambda _n, i: (partition_of(i, partitions), customer_of(i).encode()))
    return time.monotonic() - started


def read_sink(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    """Every committed record of ``topic`` (read_committed, up to its last stable offsets)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KTP

    ends = {p: e for p, e in workloads.end_offsets(bootstrap, topic).items() if e > 0}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-windows-check-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed", "log_level": 3})
    gone = {p: low for p in ends if (low := consumer.get_watermark_offsets(KTP(topic, p), timeout=30)[0]) > 0}
    consumer.close()
    if gone:
        raise RunFailed(f"{topic} no longer has its first records (partition: first offset left {gone}); "
                        "the broker deleted them, so the sink cannot be checked")
    _, out = workloads.read_committed(bootstrap, topic, {}, ends, lambda msg: (msg.key(), msg.value()), timeout_s=300)
    return out


@dataclass
class WindowSettings:
    records: int = 1_000_000
    partitions: int = 8
    repeats: int = 3
    engines: tuple[str, ...] = ENGINES
    warm_up: bool = True
    report: Path = Path("docs/BENCHMARKS-windows.md")
    results: Path | None = None
    state_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.records < 1 or self.partitions < 1 or self.repeats < 1:
            raise ValueError("--windows-records, --partitions and --repeats must be at least 1")
        unknown = set(self.engines) - set(ENGINES)
        if unknown:
            raise ValueError(f"unknown engines {sorted(unknown)}; choose from {', '.join(ENGINES)}")

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
                for k, v in self.__dict__.items()}


class WindowRace:
    """The engines over one input, alternating which goes first, each run's sink checked."""

    def __init__(self, settings: WindowSettings, bootstrap: str, remote: str, connect_pid: int, work_dir: Path,
                 log: Callable[[str], None]) -> None:
        self.s = settings
        self.bootstrap = bootstrap
        self.remote = remote
        self.connect_pid = connect_pid
        self.work_dir = work_dir
        self.log = log

    def command(self, engine: str, topic: str, sink: str, ends: dict[int, int]) -> pl.Command:

        if engine == LOCKSTEP:
            name = f"bench-windows-{uuid.uuid4().hex[:6]}"
            workloads.create_topic(self.bootstrap, f"{sink}-dlq", self.s.partitions)
            spec = workloads.write_spec(self.work_dir / "specs", name, topic, sink, self.s.records, remote=self.remote,
                                        transform=TRANSFORM, state=window_state())
            command = pl.lockstep_command(spec, self.connect_pid)
            command.cleanup_topics.append(f"{sink}-dlq")
            return command
        if engine == FLINK:
            return peers.flink_window_command(cache_dir(), project_root(), self.bootstrap, topic, sink, ends,
                                              WINDOW_S, OUT_OF_ORDERNESS_S, FLINK_CHECKPOINT_S)
        return peers.quix_window_command(cache_dir(), project_root(), self.bootstrap, topic, sink, ends,
                                         WINDOW_S, OUT_OF_ORDERNESS_S)

    def run(self, engine: str, topic: str, ends: dict[int, int], want: Expected, repeat: int) -> dict[str, Any]:
        sink = f"bench-windows-out-{engine}-{uuid.uuid4().hex[:6]}"
        workloads.create_topic(self.bootstrap, sink, self.s.partitions, KEEP)
        command = self.command(engine, topic, sink, ends)
        try:
            run = execute(engine, command, self.s.records, self.s.partitions, repeat=repeat)
            verdict = check(want, (parse_window(k, v) for k, v in read_sink(self.bootstrap, sink)))
        finally:
            for t in (sink, *command.cleanup_topics):
                workloads.delete_topic(self.bootstrap, t)
        self.log(f"{engine:17} {run.wall_s:7.1f} s  {run.records_per_s:10,.0f} rec/s  peak {run.peak_rss_mb:,.0f} MB  "
                 f"cpu {run.cpu_s:.0f} s  {verdict.summary()}  {json.dumps(run.inner)}")
        # A peer's sink that is not exact is a finding the report shows; Lockstep's fails the benchmark
        # (``run_windows_bench``) once the report is written.
        return {**run.to_json(), "check": verdict.to_json()}

    def measure(self) -> dict[str, Any]:
        topic = f"bench-windows-in-{uuid.uuid4().hex[:6]}"
        workloads.create_topic(self.bootstrap, topic, self.s.partitions)
        try:
            seconds = produce_input(self.bootstrap, topic, self.s.records, self.s.partitions)
            self.log(f"{self.s.records:,} keyed orders over {self.s.partitions} partitions produced in {seconds:.1f} s")
            ends = workloads.end_offsets(self.bootstrap, topic)
            want = expected(self.s.records, self.s.partitions)
            names = self.s.engines
            # One run of each engine first, not counted: the broker, its transaction coordinator, the page
            # cache and the Connect server (long-lived by design, warm in production) are warm for every
            # measured run, as in the main race.
            warm_up = [self.run(name, topic, ends, want, -1) for name in names] if self.s.warm_up else []
            runs = []
            for r in range(self.s.repeats):
                for i in range(len(names)):
                    runs.append(self.run(names[(r + i) % len(names)], topic, ends, want, r))
            return {"input_seconds": round(seconds, 1), "windows": len(want.counts), "closed": len(want.closed),
                    "final_watermark_s": want.final_watermark_s, "runs": runs, "warm_up": warm_up}
        finally:
            workloads.delete_topic(self.bootstrap, topic)
