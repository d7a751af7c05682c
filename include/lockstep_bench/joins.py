"""``lockstep bench --joins-only``: orders enriched with their customer from a table topic, exactly-once
Kafka to Kafka, Lockstep's ``tables:`` join raced against Flink SQL's event-time temporal join on the same
input, every sink checked order by order (issue 41's "Done when": Lockstep ≥ 1.0× Flink SQL).

The work, one definition per engine:

* **Input.** A ``customers`` topic (compacted) of ``keys`` customers, produced first: key
  ``customer-{c}``, a JSON value ``{"name", "tier", "country"}`` (``customer(c)``), partition ``c %
  partitions``, every record stamped ``CUSTOMERS_AT`` (a day before the first order), so every version
  precedes every order in event time as it does in produce order. Then ``records`` orders on a topic of
  the same partition count as the windowed race's: ``{"order_id", "customer", "amount", "created_at"}``
  (``order(i)``), customer ``(i * 7919) % keys`` (every customer, spread), keyed and partitioned by
  its customer, ``created_at`` = ``EPOCH + i`` seconds (rising in each partition).
* **Result.** Each order once, as JSON ``{"order_id", "customer", "amount", "name", "tier"}``: its
  customer's name and tier joined in. Every order has a customer, so an inner join keeps them all.
* **Lockstep** (connect mode): one checkpoint over the whole input (the windowed race's timing), a spec
  with ``tables.customers`` and ``join: {by: data.customer, how: inner}``, and an SQL transform that
  selects the joined struct's fields (``lockstep_spec``).
* **Flink SQL**: ``FOR SYSTEM_TIME AS OF o.ts`` (``created_at``) against an ``upsert-kafka`` table over the
  customers topic (primary key ``id``, the Kafka timestamp as its rowtime and watermark), bounded sources
  in streaming mode, RocksDB state with incremental checkpoints every ``FLINK_CHECKPOINT_S`` seconds,
  exactly-once Kafka sink (``lockstep_bench.flink_sql.join_statements``). ``flink_join: regular``: a
  regular join on the upsert table instead (the fallback, labeled so in the report).
* **Reference** (``lockstep-connect-no-join``): the same Lockstep pipeline without the table, its query
  selecting the order's fields only; not in the ratio: the difference is what the table and the join cost.

**The check** (``check``): every output record parsed, each order id at most once, its customer, amount,
name and tier those of the generated order and customer (``expected_row``: the same documents the
producer sent, joined here by a dictionary lookup); every order present. Lockstep's sink must be exact (the
run fails otherwise, once the report is written); a peer's inexact sink is a finding the report shows.
"""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockstep.paths import cache_dir, project_root
from lockstep_bench import peers, workloads
from lockstep_bench import pipelines as pl
from lockstep_bench.flink_sql import JOIN_KINDS
from lockstep_bench.measure import execute
from lockstep_bench.windowed import KEEP, read_sink

EPOCH = 1_700_000_000
#: Every customer record's Kafka timestamp (ms): a day before the first order's ``created_at``.
CUSTOMERS_AT = (EPOCH - 86_400) * 1000
OUT_OF_ORDERNESS_S = 10
FLINK_CHECKPOINT_S = 5
TIERS = ("bronze", "silver", "gold")
COUNTRIES = ("DE", "FR", "NL", "PL", "SE")
LOCKSTEP, FLINK, LOCKSTEP_NO_JOIN = "lockstep-connect", "flink-sql", "lockstep-connect-no-join"
ENGINES = (LOCKSTEP, FLINK, LOCKSTEP_NO_JOIN)
#: The customers topic: compacted (a table's topic), and no time retention (its records are stamped in 2023).
CUSTOMERS_CONFIG = {"cleanup.policy": "compact", "retention.ms": "-1"}

ORDER_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "customer": {"type": "string"},
                                                 "amount": {"type": "number"}, "created_at": {"type": "integer"}},
                "required": ["order_id", "customer"]}
CUSTOMER_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "tier": {"type": "string"},
                                                    "country": {"type": "string"}}, "required": ["name"]}
#: Lockstep's transform: the order's fields and, from the joined ``customers`` struct, the name and tier.
QUERY = ("SELECT topic, partition, offset, key,\n"
         "       named_struct('order_id', data.order_id, 'customer', data.customer, 'amount', data.amount,\n"
         "                    'name', customers.data.name, 'tier', customers.data.tier) AS data\n"
         "FROM input")
#: The reference without the table: the same query less the customer's fields.
QUERY_NO_JOIN = ("SELECT topic, partition, offset, key,\n"
                 "       named_struct('order_id', data.order_id, 'customer', data.customer, 'amount', data.amount)"
                 " AS data\nFROM input")


def customer_index(i: int, keys: int) -> int:
    """Order ``i``'s customer: ``(i * 7919) % keys`` (7919 is prime, so each run of ``keys`` orders has every
    customer once when ``keys`` is not a multiple of it)."""
    return (i * 7919) % keys


def customer_id(c: int) -> str:
    return f"customer-{c}"


def customer(c: int) -> dict[str, str]:
    return {"name": f"Customer {c}", "tier": TIERS[c % len(TIERS)], "country": COUNTRIES[c % len(COUNTRIES)]}


def order(i: int, keys: int) -> dict[str, Any]:
    return {"order_id": f"o{i}", "customer": customer_id(customer_index(i, keys)),
            "amount": round((i * 7919 % 30000) / 100, 2), "created_at": EPOCH + i}


def partition_of(c: int, partitions: int) -> int:
    """Customer ``c``'s partition, in both topics (an order goes where its customer's record is)."""
    return c % partitions


def customer_records(keys: int, partitions: int) -> Iterable[tuple[bytes, int, bytes | None]]:
    """(value, partition, key) of every customer, for ``lockstep_dev.datagen.send``."""
    for c in range(keys):
        yield json.dumps(customer(c)).encode(), partition_of(c, partitions), customer_id(c).encode()


def order_records(records: int, keys: int, partitions: int) -> Iterable[tuple[bytes, int, bytes | None]]:
    for i in range(records):
        c = customer_index(i, keys)
        yield json.dumps(order(i, keys)).encode(), partition_of(c, partitions), customer_id(c).encode()


Row = tuple[str, str, float, str | None, str | None]


@dataclass(frozen=True)
class Expected:
    """What every engine must write for ``records`` orders over ``keys`` customers: ``expected_row(i)``
    for each order, once. ``enriched=False``: the reference's rows, without the customer's fields."""

    records: int
    keys: int
    enriched: bool = True
    table: dict[str, dict[str, str]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, records: int, keys: int, enriched: bool = True) -> Expected:
        # The customers as they were produced (their JSON documents), looked up by the order's customer.
        table = {customer_id(c): json.loads(json.dumps(customer(c))) for c in range(keys)} if enriched else {}
        return cls(records, keys, enriched, table)

    def row(self, i: int) -> Row:
        doc = json.loads(json.dumps(order(i, self.keys)))  # as the producer sent it
        if not self.enriched:
            return doc["order_id"], doc["customer"], float(doc["amount"]), None, None
        row = self.table.get(doc["customer"])
        if row is None:  # an inner join's order without a customer: no output (none in this input)
            raise KeyError(doc["customer"])
        return doc["order_id"], doc["customer"], float(doc["amount"]), row["name"], row["tier"]


def parse_output(value: bytes) -> Row:
    """(order_id, customer, amount, name, tier) of one engine's output record (name and tier None when absent)."""
    doc = json.loads(value)
    return (str(doc["order_id"]), str(doc["customer"]), float(doc["amount"]), doc.get("name"), doc.get("tier"))


@dataclass
class Verdict:
    records: int = 0  # output records read
    expected: int = 0
    missing: int = 0
    missing_samples: list[str] = field(default_factory=list)
    wrong: list[tuple[Row, Row]] = field(default_factory=list)  # (got, want)
    duplicated: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (self.missing or self.wrong or self.duplicated or self.unknown) and self.records > 0

    def summary(self) -> str:
        if self.exact:
            return f"exact: {self.records:,} orders, each once with its customer's fields"
        return (f"NOT exact: {self.missing:,} of {self.expected:,} orders missing, {len(self.wrong):,} with wrong "
                f"fields, {len(self.duplicated):,} written twice, {len(self.unknown):,} not in the input (first: "
                f"{(self.missing_samples + [w[0][0] for w in self.wrong] + self.duplicated + self.unknown)[:3]})")

    def to_json(self) -> dict[str, Any]:
        return {"exact": self.exact, "records": self.records, "expected": self.expected, "missing": self.missing,
                "wrong": len(self.wrong), "duplicated": len(self.duplicated), "unknown": len(self.unknown),
                "summary": self.summary(),
                "samples": {"missing": self.missing_samples[:5], "wrong (got, want)": self.wrong[:5],
                            "duplicated": self.duplicated[:5], "unknown": self.unknown[:5]}}


def _index(order_id: str, records: int) -> int | None:
    """Order ``o{i}``'s i when it is one of the input's, else None."""
    if not order_id.startswith("o") or not order_id[1:].isdigit():
        return None
    i = int(order_id[1:])
    return i if i < records and order_id == f"o{i}" else None


def check(want: Expected, rows: Iterable[Row]) -> Verdict:
    verdict = Verdict(expected=want.records)
    seen = bytearray(want.records)
    for row in rows:
        verdict.records += 1
        i = _index(row[0], want.records)
        if i is None:
            verdict.unknown.append(row[0])
            continue
        if seen[i]:
            verdict.duplicated.append(row[0])
            continue
        seen[i] = 1
        true = want.row(i)
        if row != true:
            verdict.wrong.append((row, true))
    verdict.missing = want.records - sum(seen)
    if verdict.missing:
        verdict.missing_samples = [f"o{i}" for i in range(want.records) if not seen[i]][:5]
    return verdict


def lockstep_spec(folder: Path, name: str, orders: str, customers: str, sink: str, records: int, remote: str,
                  join: bool = True) -> Path:
    """The Lockstep pipeline (module docstring); ``join=False``: the reference, without the table."""
    tables = {"customers": {"topic": customers, "value": {"format": "json", "schema": CUSTOMER_SCHEMA},
                            "join": {"by": "data.customer", "how": "inner"}}} if join else None
    return workloads.write_spec(folder, name, orders, sink, records, remote=remote,
                                transform={"sql": QUERY if join else QUERY_NO_JOIN},
                                source_value={"format": "json", "schema": ORDER_SCHEMA}, sink_value="json",
                                tables=tables)


@dataclass
class JoinSettings:
    records: int = 1_000_000
    keys: int = 100_000
    partitions: int = 8  # the windowed race's
    repeats: int = 3
    engines: tuple[str, ...] = ENGINES
    flink_join: str = "temporal"
    warm_up: bool = True
    report: Path = Path("docs/BENCHMARKS-joins.md")
    results: Path | None = None
    state_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.records < 1 or self.keys < 1 or self.partitions < 1 or self.repeats < 1:
            raise ValueError("--joins-records, --joins-keys, --partitions and --repeats must be at least 1")
        unknown = set(self.engines) - set(ENGINES)
        if unknown:
            raise ValueError(f"unknown engines {sorted(unknown)}; choose from {', '.join(ENGINES)}")
        if self.flink_join not in JOIN_KINDS:
            raise ValueError(f"--joins-flink-join {self.flink_join!r}: one of {', '.join(JOIN_KINDS)}")

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
                for k, v in self.__dict__.items()}


class JoinRace:
    """The engines over one input, alternating which goes first, each run's sink checked."""

    def __init__(self, settings: JoinSettings, bootstrap: str, remote: str, connect_pid: int, work_dir: Path,
                 log: Callable[[str], None]) -> None:
        self.s = settings
        self.bootstrap = bootstrap
        self.remote = remote
        self.connect_pid = connect_pid
        self.work_dir = work_dir
        self.log = log
        self.specs: dict[str, str] = {}  # engine -> the last spec it ran (the report quotes them)

    def command(self, engine: str, orders: str, customers: str, sink: str, ends: dict[str, dict[int, int]]) -> pl.Command:
        if engine == FLINK:
            return peers.flink_join_command(cache_dir(), project_root(), self.bootstrap, orders, ends["orders"],
                                            customers, ends["customers"], sink, FLINK_CHECKPOINT_S,
                                            OUT_OF_ORDERNESS_S, self.s.flink_join)
        name = f"bench-joins-{uuid.uuid4().hex[:6]}"
        workloads.create_topic(self.bootstrap, f"{sink}-dlq", self.s.partitions)
        spec = lockstep_spec(self.work_dir / "specs", name, orders, customers, sink, self.s.records, self.remote,
                             join=engine == LOCKSTEP)
        self.specs[engine] = spec.read_text()
        command = pl.lockstep_command(spec, self.connect_pid)
        command.cleanup_topics.append(f"{sink}-dlq")
        return command

    def run(self, engine: str, orders: str, customers: str, ends: dict[str, dict[int, int]],
            want: dict[bool, Expected], repeat: int) -> dict[str, Any]:
        sink = f"bench-joins-out-{engine}-{uuid.uuid4().hex[:6]}"
        workloads.create_topic(self.bootstrap, sink, self.s.partitions, KEEP)
        command = self.command(engine, orders, customers, sink, ends)
        try:
            run = execute(engine, command, self.s.records, self.s.partitions, repeat=repeat)
            verdict = check(want[engine != LOCKSTEP_NO_JOIN],
                            (parse_output(v) for _k, v in read_sink(self.bootstrap, sink)))
        finally:
            for t in (sink, *command.cleanup_topics):
                workloads.delete_topic(self.bootstrap, t)
        self.log(f"{engine:24} {run.wall_s:7.1f} s  {run.records_per_s:10,.0f} rec/s  peak {run.peak_rss_mb:,.0f} MB  "
                 f"cpu {run.cpu_s:.0f} s  {verdict.summary()}  {json.dumps(run.inner)}")
        return {**run.to_json(), "check": verdict.to_json()}

    def produce(self, orders: str, customers: str) -> dict[str, float]:
        """The customers, then the orders (module docstring); the seconds each took."""
        from lockstep_dev.datagen import send

        started = time.monotonic()
        send(self.bootstrap, customers, customer_records(self.s.keys, self.s.partitions), timeout_s=300,
             timestamp_ms=CUSTOMERS_AT)
        produced = time.monotonic()
        send(self.bootstrap, orders, order_records(self.s.records, self.s.keys, self.s.partitions), timeout_s=300)
        return {"customers": round(produced - started, 1), "orders": round(time.monotonic() - produced, 1)}

    def measure(self) -> dict[str, Any]:
        tag = uuid.uuid4().hex[:6]
        orders, customers = f"bench-joins-orders-{tag}", f"bench-joins-customers-{tag}"
        workloads.create_topic(self.bootstrap, orders, self.s.partitions)
        workloads.create_topic(self.bootstrap, customers, self.s.partitions, CUSTOMERS_CONFIG)
        try:
            seconds = self.produce(orders, customers)
            self.log(f"{self.s.keys:,} customers in {seconds['customers']:.1f} s, then {self.s.records:,} orders in "
                     f"{seconds['orders']:.1f} s, over {self.s.partitions} partitions each")
            ends = {"orders": workloads.end_offsets(self.bootstrap, orders),
                    "customers": workloads.end_offsets(self.bootstrap, customers)}
            want = {True: Expected.of(self.s.records, self.s.keys), False: Expected.of(self.s.records, self.s.keys,
                                                                                         enriched=False)}
            names = self.s.engines
            # One run of each engine first, not counted (as the windowed race): the broker, its transaction
            # coordinator, the page cache and the Connect server are warm for every measured run.
            warm_up = [self.run(name, orders, customers, ends, want, -1) for name in names] if self.s.warm_up else []
            runs = []
            for r in range(self.s.repeats):
                for i in range(len(names)):
                    runs.append(self.run(names[(r + i) % len(names)], orders, customers, ends, want, r))
            return {"input_seconds": seconds, "runs": runs, "warm_up": warm_up, "specs": self.specs,
                    "flink_sql": flink_statements_for_report(self.s.flink_join, ends)}
        finally:
            workloads.delete_topic(self.bootstrap, orders)
            workloads.delete_topic(self.bootstrap, customers)


def flink_statements_for_report(kind: str, ends: dict[str, dict[int, int]]) -> list[str]:
    """Flink's statements as the job ran them over ``ends`` (the run's end offsets), with placeholders for the
    addresses and names that differ per run."""
    from lockstep_bench.flink_sql import join_statements

    ddl, insert = join_statements("<bootstrap>", "<orders>", ends["orders"], "<customers>", ends["customers"],
                                  "<sink>", "<transactional id prefix>", "<group>", OUT_OF_ORDERNESS_S, kind)
    return [*ddl, insert]
