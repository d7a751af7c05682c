"""The soak: new input every cycle, one checkpoint per cycle (plan, run and commit as three processes,
like the DAG's three tasks), faults from ``schedule`` injected at their moments, then clean cycles
until everything produced is covered, then the auditor.

Nothing here helps the pipeline recover: after a fault the next cycle simply runs, as the next
scheduled DAG run would. A pipeline that makes no progress for ``stuck_after`` fault-free cycles in
a row is reported stuck and the soak stops.
"""
from __future__ import annotations

import functools
import io
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from lockstep.model.failpoints import PAUSE_SIGNALS
from lockstep_soak import kill, proxy
from lockstep_soak.audit import (
    VALID,
    AuditResult,
    LsoWatch,
    Produced,
    StateFigures,
    audit,
    audit_dead_letters,
    audit_table,
    state_figures,
)
from lockstep_soak.schedule import (
    STATE_FILE_KINDS,
    STATEFUL_CASES,
    STATELESS_CASES,
    BadCase,
    Fault,
    FaultKind,
    anchor_faults,
    family,
    kinds_for,
    plan_bad_input,
    plan_faults,
)

if TYPE_CHECKING:
    from lockstep_dev.platform import Platform

SOURCE_PARTITIONS = 3
SINK_PARALLELISM = 2
#: duplicate_run: the retry starts at ``at`` times this share of what a clean run step takes (of the
#: expected cycle until one was measured) after the run step started, so that the first attempt is
#: still in its run: spark-submit alone takes ~10 s; a connect-mode run step of a soak cycle ~1-3 s, and
#: a share of the whole cycle let 2 of 22 duplicates in the connect-mode soak start after it had ended.
DUPLICATE_DELAY_SHARE = 0.4
DUPLICATE_RUN_SHARE = 0.6
#: partial_commit: how much longer than the transaction timeout the soak waits for the broker to abort.
ABORT_GRACE_S = 30.0
SINK_MAX_MESSAGE_BYTES = 16_384
OVERSIZE_PAD = 20_000
STEPS = ("plan", "run", "commit")
# The stateful soak: orders of many customers in tumbling event-time windows. Order i is created at
# T0 + i // EVENTS_PER_SECOND, so every cycle's input moves the watermark on; a window spans several
# cycles' orders (200 orders, 100 s, a cycle in `make soak-state`), so that between the checkpoints
# that fire windows (every key group read whole and written as a new base) the key groups get deltas,
# and compactions of their chains. Five cycles, not four: the fault schedule has a period of four (a
# clean cycle every fourth), and the same period would put its anchored faults at the same moment of
# the window every time. A cycle's orders name a fifth of the customers.
T0 = 1_700_000_000
CUSTOMERS = 1000
WINDOW_S = 500
#: the soak's state.compaction.max_deltas
MAX_DELTAS = 2
EVENTS_PER_SECOND = 2
REPAIRED = "completed after repair"  # CheckpointView.status_text of a repaired checkpoint
LATE_BY_S = 3600  # a late order is created this long before T0: its window fired with the first watermark


@dataclass
class SoakConfig:
    work_dir: Path
    cycles: int = 10
    seed: int | None = None
    records_per_cycle: int = 200
    bad_per_cycle: int = 4
    kinds: tuple[FaultKind, ...] | None = None  # None: every kind the mode has (`schedule.kinds_for`)
    timeout_ms: int = 60_000
    commit_margin_ms: int = 10_000
    writer: str = "jvm"
    spark_master: str | None = None  # None: the platform's (spark_default)
    faults_per_cycle: int = 2
    more_faults: float = 0.5  # the chance of each further fault in a cycle, up to faults_per_cycle
    min_faults: int = 0  # go on past ``cycles`` (up to 3x) until this many faults were injected
    drain_cycles: int = 6
    stuck_after: int = 6
    #: what a cycle is expected to take before a clean one has been measured (None: 8 s in connect mode,
    #: 30 s in submit mode, whose spark-submit alone takes about 10 s)
    first_cycle_s: float | None = None
    stateful: bool = False  # windows per customer (keyed state) instead of the stateless row transform
    #: the stateful soak's window: `WINDOW_S` is 5 cycles of 200 orders; a shorter soak with fewer orders
    #: a cycle takes a shorter one, so that windows fire in it
    window_s: int = WINDOW_S
    #: the stateful soak's state.compaction.max_delta_ratio: a tiny one compacts every key group a
    #: checkpoint gives a delta (a short soak's faults at the upload then meet a compaction)
    max_delta_ratio: float = 1.0
    #: "connect": each run a session on the platform's Spark Connect server (the default path users
    #: run); "submit": a spark-submit per run, whose driver is inside the run's own process tree
    mode: str = "connect"
    #: the bounds of a fault's hold time: how long a stopped service stays down, S3 slow or failing, a
    #: duplicated run's first attempt stopped
    hold_s: tuple[float, float] = (2.0, 12.0)
    #: the sink's records land in an Iceberg table too (``sink.iceberg``), read back by the audit
    iceberg: bool = False

    def resolved_seed(self) -> int:
        if self.seed is None:
            self.seed = random.SystemRandom().randrange(1, 2**31)
        return self.seed


@dataclass
class Injected:
    fault: Fault
    target: str = ""
    injected_at: float | None = None   # monotonic
    healed_at: float | None = None     # service back / S3 normal again (the end of the fault's own hold time)
    recovered_at: float | None = None  # the first completed checkpoint after healing
    note: str = ""
    #: partial_commit: the checkpoint whose commit was killed
    checkpoint: int | None = None
    #: how the fault ended, for the report's per-kind outcome: a partial commit's checkpoint status once a
    #: later cycle settled it (``CheckpointView.status_text``: "completed after repair" when the broker
    #: had aborted the rest); a duplicate run's two attempts ("retry ok, first attempt failed")
    status: str | None = None
    #: whether the checkpoint of the fault's cycle failed (False: it completed despite the fault)
    failed_checkpoint: bool | None = None

    @property
    def recovery_s(self) -> float | None:
        """From the fault to the next completed checkpoint."""
        if self.injected_at is None or self.recovered_at is None:
            return None
        return self.recovered_at - self.injected_at

    @property
    def held_s(self) -> float | None:
        """The fault's own hold time: a service down, S3 slow or failing, the broker's transaction timeout a
        partial commit waits out, a duplicated run's first attempt; 0 for a kill."""
        if self.injected_at is None or self.healed_at is None:
            return None
        return max(0.0, min(self.healed_at, self.recovered_at or self.healed_at) - self.injected_at)

    @property
    def recovery_after_hold_s(self) -> float | None:
        """What recovery took once the fault itself was over: Lockstep's part."""
        if self.recovery_s is None or self.held_s is None:
            return None
        return self.recovery_s - self.held_s

    def to_json(self) -> dict[str, object]:
        return {**self.fault.to_json(), "target": self.target, "injected": self.injected_at is not None,
                "recovery_s": None if self.recovery_s is None else round(self.recovery_s, 1),
                "held_s": None if self.held_s is None else round(self.held_s, 1),
                "recovery_after_hold_s": None if self.recovery_after_hold_s is None
                else round(self.recovery_after_hold_s, 1), "note": self.note,
                **({"checkpoint": self.checkpoint} if self.checkpoint is not None else {}),
                **({"failed_checkpoint": self.failed_checkpoint} if self.failed_checkpoint is not None else {}),
                **({"status": self.status} if self.status is not None else {})}


@dataclass
class CycleResult:
    cycle: int
    checkpoint_id: int | None
    ok: bool
    seconds: float
    failed_step: str | None = None
    reason: str = ""
    faults: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"cycle": self.cycle, "checkpoint": self.checkpoint_id, "ok": self.ok, "seconds": round(self.seconds, 1),
                "failed_step": self.failed_step, "reason": self.reason, "faults": self.faults}


@dataclass
class SoakResult:
    seed: int
    topology: str
    config: dict[str, Any]
    cycles: list[CycleResult]
    injected: list[Injected]
    audit: AuditResult | None
    lso_longest_s: float
    lso_after_last_fault_s: float
    lso_open_at_end: list[str]
    stuck: str | None
    started: str
    seconds: float
    #: checkpoints left in the store at the end, by status (``CheckpointView.status_text``)
    statuses: dict[str, int] = field(default_factory=dict)
    #: every checkpoint seen "completed after repair": in the store at the end, or when its partial
    #: commit was settled (retention may have deleted it since)
    repaired: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.stuck is None and self.audit is not None and self.audit.ok and self.audit.uncovered == 0
                and not self.lso_open_at_end
                and self.lso_after_last_fault_s <= self.config["timeout_ms"] / 1000)

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "seed": self.seed, "topology": self.topology, "config": self.config,
                "started": self.started, "seconds": round(self.seconds, 1), "stuck": self.stuck,
                "lso_longest_s": round(self.lso_longest_s, 1),
                "lso_after_last_fault_s": round(self.lso_after_last_fault_s, 1),
                "lso_open_at_end": self.lso_open_at_end,
                "statuses": self.statuses, "repaired": self.repaired,
                "audit": self.audit.to_json() if self.audit else None,
                "cycles": [c.to_json() for c in self.cycles], "faults": [i.to_json() for i in self.injected]}


class Soak:
    def __init__(self, platform: Platform, config: SoakConfig, out: TextIO = sys.stdout) -> None:
        self.platform = platform
        self.config = config
        self.seed = config.resolved_seed()
        self.out = out
        self.nonce = uuid.uuid4().hex[:6]
        self.name = f"soak-{self.nonce}"
        self.source, self.sink, self.dead_letters = f"{self.name}-in", f"{self.name}-out", f"{self.name}-dlq"
        self.work = config.work_dir / self.name
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.kafka: dict[str, Any] = {"bootstrap.servers": platform.kafka.bootstrap}
        self.produced: dict[tuple[int, int], Produced] = {}
        self._next_record = 0
        self._platform_lock = threading.Lock()
        self._family_locks = {"kafka": threading.Lock(), "s3": threading.Lock()}
        self._threads: list[threading.Thread] = []
        self.injections: list[Injected] = []
        self._current: subprocess.Popen[str] | None = None
        self._current_step: str | None = None
        #: a duplicated run's first attempt, still running after the step's result (its retry's) was taken
        self._straggler: tuple[subprocess.Popen[str], Path, Injected] | None = None
        self._checkpoint: int | None = None
        #: how long the run steps that succeeded took, for a duplicate_run's moment
        self._run_seconds: list[float] = []
        self.proxy: proxy.FaultProxy | None = None
        self.spec_path = self.work / "pipeline.yaml"

    # ---- set-up ----------------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        brokers = len(self.platform.kafka.nodes)
        rf = min(3, brokers)
        isr = {"min.insync.replicas": "2"} if rf >= 3 else {}
        admin = AdminClient(self.kafka)
        topics = [NewTopic(self.source, SOURCE_PARTITIONS, rf, config=isr),
                  NewTopic(self.sink, SOURCE_PARTITIONS, rf,
                           config={**isr, "max.message.bytes": str(SINK_MAX_MESSAGE_BYTES)}),
                  NewTopic(self.dead_letters, 1, rf, config=isr)]
        for future in admin.create_topics(topics).values():
            future.result(timeout=60)

    def _write_spec(self) -> None:
        c = self.config
        master = f"\n  master: \"{c.spark_master}\"" if c.spark_master else ""
        transform = "lockstep_examples.python_rows:enrich"
        state = ""
        retain = 20
        if c.stateful:
            # idle_timeout: longer than any soak, so only the orders produced late are ever late (a
            # partition left unread through a run of failed cycles must not let the watermark pass it).
            # retain: every checkpoint kept, so that verify can recompute the state from the first input.
            transform = "lockstep_examples.orders:parse"
            retain = 100_000
            state = f"""state:
  key_groups: 8
  # Often, so that faults at state.mid_upload land while a chain is compacted (a compaction's file is
  # uploaded first): a base at a group's turn every 2 checkpoints, deltas merged past 2.
  compaction: {{max_deltas: {MAX_DELTAS}, max_delta_ratio: {c.max_delta_ratio}}}
  event_time: {{column: created_at, out_of_orderness: 2s, idle_timeout: 24h}}
  window:
    key: customer
    size: {c.window_s}s
    aggregates: {{orders: "count(*)", amount_cents: "sum(CAST(round(amount * 100) AS BIGINT))"}}
"""
        self.spec_path.write_text(f"""# Written by lockstep soak (seed {self.seed}).
name: {self.name}
source:
  topics: [{self.source}]
  kafka_conn_id: kafka_default
  auto_offset_reset: earliest
transform: {transform}
{state}sink:
  topic: {self.sink}
  dead_letter_topic: {self.dead_letters}
  writer: {c.writer}
  # Two transactions per checkpoint over the three source partitions, whatever the cores: a commit
  # killed between its EndTxns (partial_commit) leaves one committed and one to repair.
  parallelism: {SINK_PARALLELISM}{self._iceberg_section()}
checkpoints:
  store: s3://{self.platform.s3.bucket}/soak
  aws_conn_id: aws_soak
  max_records: {max(c.records_per_cycle * 4, 1000)}
  retain: {retain}
transactions:
  id_prefix: {self.name}
  timeout_ms: {c.timeout_ms}
  commit_margin_ms: {c.commit_margin_ms}
spark:
  # connect: each run is a session on the platform's Spark Connect server, which kill_connect kills;
  # submit: kill_run kills the run's own spark-submit, driver JVM and executors.
  mode: {c.mode}{master}
  conf:
    spark.sql.shuffle.partitions: 2
""")

    @property
    def table(self) -> str:
        """The soak's Iceberg table (``--iceberg``)."""
        return f"soak.{self.name.replace('-', '_')}"

    def _iceberg_section(self) -> str:
        if not self.config.iceberg:
            return ""
        # The catalog is reached directly, not through the fault proxy: S3's faults land on the checkpoint store.
        return f"\n  iceberg:\n    table: {self.table}"

    def _env(self) -> dict[str, str]:
        from lockstep_dev import s3 as s3_svc

        env = {**os.environ, **self.platform.client_env()}
        assert self.proxy is not None
        env["AIRFLOW_CONN_AWS_SOAK"] = json.dumps({
            "conn_type": "aws", "login": s3_svc.ACCESS_KEY, "password": s3_svc.SECRET_KEY,
            "extra": {"region_name": s3_svc.REGION, "endpoint_url": self.proxy.endpoint}})
        env.pop("LOCKSTEP_FAILPOINTS", None)
        return env

    # ---- input -----------------------------------------------------------------------------------
    def _produce(self, cycle: int, count: int) -> None:
        from confluent_kafka import Producer

        from lockstep_dev.datagen import order

        bad = plan_bad_input(self.seed, cycle, count, self.config.bad_per_cycle,
                             STATEFUL_CASES if self.config.stateful else STATELESS_CASES)
        producer = Producer({**self.kafka, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                             "message.max.bytes": 1_000_000})
        pending: dict[int, Produced] = {}
        failures: list[str] = []

        def delivered(err: Any, msg: Any, rec: Produced) -> None:
            if err is not None:
                failures.append(str(err))
            else:
                self.produced[(msg.partition(), msg.offset())] = rec

        for n in range(count):
            i = self._next_record
            self._next_record += 1
            case = bad.get(n)
            value: bytes | None
            if self.config.stateful:
                value, rec = timed_order(i, case)
            elif case is None:
                value, rec = order(i), Produced(VALID, f"o{i}", 0)
            elif case is BadCase.OVERSIZE:
                value = order(i, pad=OVERSIZE_PAD)
                rec = Produced(case.value, f"o{i}", 0)
            elif case is BadCase.NOT_UTF8:
                value, rec = b"\xff\xfe\xfa order " + str(i).encode(), Produced(case.value, None, 0)
            elif case is BadCase.NULL_VALUE:
                value, rec = None, Produced(case.value, None, 0)
            else:  # POISON: an order whose amount the row function cannot turn into cents
                value = json.dumps({"order_id": f"o{i}", "amount": "twelve", "currency": "EUR"}).encode()
                rec = Produced(case.value, f"o{i}", 0)
            rec.size = len(value or b"")
            pending[i] = rec
            producer.produce(self.source, value, key=f"k{i}".encode(), partition=i % SOURCE_PARTITIONS,
                             on_delivery=functools.partial(delivered, rec=rec))
            producer.poll(0)
        left = producer.flush(120)
        if left or failures:
            raise RuntimeError(f"soak input of cycle {cycle}: {left} records undelivered, errors {failures[:3]}")

    # ---- one cycle -------------------------------------------------------------------------------
    def _spawn(self, cycle: int, step: str, env: dict[str, str], suffix: str = "") -> tuple[subprocess.Popen[str], Path]:
        """Start one step's process; its log is ``cycle-NNNN-<step><suffix>.log``."""
        args = [sys.executable, "-m", "lockstep_soak.step", step, str(self.spec_path)]
        if step != "plan":
            args.append(str(self._checkpoint))
        log_path = self.logs / f"cycle-{cycle:04d}-{step}{suffix}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=log, start_new_session=True,
                                    text=True)
        return proc, log_path

    def _finish(self, proc: subprocess.Popen[str], log_path: Path, step: str) -> tuple[int, str]:
        """Wait for a step's process (at most 900 s, then kill its tree); its exit code and why it failed."""
        try:
            stdout, _ = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            kill.kill_tree(proc.pid)
            proc.communicate()
            return -9, "the step ran for 900 s and was killed by the soak"
        except BaseException:
            kill.kill_tree(proc.pid)  # the soak itself is stopped (Ctrl-C, SIGTERM): leave no step behind
            raise
        if proc.returncode == 0:
            doc = json.loads(stdout.strip().splitlines()[-1])
            if step == "plan":
                self._checkpoint = doc["checkpoint_id"]
            return 0, ""
        if proc.returncode == -9:
            return -9, "killed with SIGKILL (by a kill_run or partial_commit fault)"
        return proc.returncode, _last_line(log_path)

    def _step(self, cycle: int, step: str, env: dict[str, str]) -> tuple[int, str]:
        started = time.monotonic()
        proc, log_path = self._spawn(cycle, step, env)
        self._current, self._current_step = proc, step
        try:
            rc, reason = self._finish(proc, log_path, step)
        finally:
            self._current, self._current_step = None, None
        if step == "run" and rc == 0:
            self._run_seconds.append(time.monotonic() - started)
        return rc, reason

    def _run_twice(self, cycle: int, env: dict[str, str], inj: Injected, expected_s: float) -> tuple[int, str]:
        """The run step with a slow duplicate attempt, as Airflow retries a run task that timed out while
        its first attempt is still alive: the first attempt is stopped (SIGSTOP, a hung process as far as
        anyone can tell) at the fault's moment, the retry starts, and the first goes on after the hold
        time. Both work on the same claimed checkpoint: each one's producers fence the other's, state
        files are conditional creates and so is ``prepared.json``. The step's result is the retry's (the
        attempt Airflow waits for); the first attempt may go on into the commit step, and the cycle ends
        only once it is gone (`_end_straggler`)."""
        first, first_log = self._spawn(cycle, "run", env)
        self._current, self._current_step = first, "run"
        stopped: set[int] = set()
        try:
            runs = sorted(self._run_seconds[-5:])
            delay = inj.fault.at * (DUPLICATE_RUN_SHARE * runs[len(runs) // 2] if runs
                                    else DUPLICATE_DELAY_SHARE * expected_s)
            try:
                first.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                pass
            if first.poll() is not None:
                inj.note = f"missed: the run ended within {delay:.1f} s, before its duplicate started"
                return self._finish(first, first_log, "run")
            stopped = kill.stop_tree(first.pid)
            retry, retry_log = self._spawn(cycle, "run", env, "-retry")
            inj.injected_at = time.monotonic()
            inj.target = (f"checkpoint {self._checkpoint}: retry {delay:.1f} s into the run, the first attempt "
                          f"({len(stopped)} processes) stopped for {inj.fault.hold_s:.1f} s")
            resume = threading.Timer(inj.fault.hold_s, kill.continue_all, args=(stopped,))
            resume.start()
            self._current = retry
            self._straggler = (first, first_log, inj)
            rc, reason = self._finish(retry, retry_log, "run")
            inj.note = f"retry exited {rc}" + (f" ({reason[:160]})" if reason else "")
            inj.status = f"retry {'ok' if rc == 0 else 'failed'}"
            return rc, reason
        except BaseException:
            kill.kill_tree(first.pid)
            raise
        finally:
            if stopped and first.poll() is None and self._straggler is None:
                kill.continue_all(stopped)
            self._current, self._current_step = None, None

    def _end_straggler(self) -> None:
        """Wait for a duplicated run's first attempt (no two checkpoints' runs overlap) and say how it ended."""
        if self._straggler is None:
            return
        first, first_log, inj = self._straggler
        self._straggler = None
        kill.continue_all(kill.descendants(first.pid))  # in case the cycle ended within the hold time
        rc, reason = self._finish(first, first_log, "run")
        inj.healed_at = time.monotonic()
        inj.note = f"first attempt exited {rc}" + (f" ({reason[:160]})" if reason else "") + f"; {inj.note}"
        inj.status = f"{inj.status}, first attempt {'ok' if rc == 0 else 'failed'}"

    def run_cycle(self, cycle: int, faults: list[Fault], expected_s: float, env: dict[str, str]) -> CycleResult:
        """One checkpoint, with its faults at their moments (fractions of ``expected_s``)."""
        started = time.monotonic()
        injections = [Injected(f) for f in faults]
        self.injections.extend(injections)
        self._checkpoint = None
        steps_done = threading.Event()
        anchored = next((i for i in injections if i.fault.anchor), None)
        if anchored is not None:  # every step of the cycle pauses at the anchor; the first to get there signals
            assert anchored.fault.anchor is not None
            signals = self.logs / "signals"
            shutil.rmtree(signals, ignore_errors=True)
            signals.mkdir()
            env = {**env, "LOCKSTEP_FAILPOINTS": f"{anchored.fault.anchor}=pause", PAUSE_SIGNALS: str(signals)}
        for inj in injections:
            if inj.fault.anchor:
                thread = threading.Thread(target=self._inject_at_anchor,
                                          args=(inj, self.logs / "signals" / str(inj.fault.anchor), steps_done),
                                          daemon=True)
            elif inj.fault.kind not in (FaultKind.COMMIT_LATE, FaultKind.DUPLICATE_RUN):
                thread = threading.Thread(target=self._inject, args=(inj, started + inj.fault.at * expected_s),
                                          daemon=True)
            else:
                continue
            thread.start()
            self._threads.append(thread)
        result = CycleResult(cycle, None, ok=False, seconds=0.0)
        duplicate = next((i for i in injections if i.fault.kind is FaultKind.DUPLICATE_RUN), None)
        for step in STEPS:
            if step == "commit":
                late = next((i for i in injections if i.fault.kind is FaultKind.COMMIT_LATE), None)
                if late is not None:
                    wait_s = self.config.timeout_ms / 1000 + 5
                    late.injected_at, late.target = time.monotonic(), f"checkpoint {self._checkpoint}"
                    late.note = f"commit started {wait_s:.0f} s after the run"
                    time.sleep(wait_s)
                    late.healed_at = time.monotonic()
            if step == "run" and duplicate is not None:
                rc, reason = self._run_twice(cycle, env, duplicate, expected_s)
            else:
                rc, reason = self._step(cycle, step, env)
            if rc != 0:
                result.failed_step = step
                result.reason = reason or f"exit code {rc}"
                break
        else:
            result.ok = True
        self._end_straggler()
        steps_done.set()
        result.seconds = time.monotonic() - started
        result.checkpoint_id = self._checkpoint
        # Paced like scheduled runs: the next cycle starts no sooner than a clean one takes, so every
        # fault of this cycle lands within it; and it starts with every service back.
        while time.monotonic() < started + expected_s:
            time.sleep(0.1)
        for thread in self._threads:
            thread.join()
        self._threads = []
        for inj in injections:
            if inj.fault.kind is FaultKind.COMMIT_LATE and inj.injected_at is None:
                inj.note = f"missed: the cycle ended in {result.failed_step} before its commit"
            if inj.fault.kind is FaultKind.DUPLICATE_RUN and inj.injected_at is None and not inj.note:
                inj.note = f"missed: the cycle ended in {result.failed_step} before its run"
        result.faults = [i.fault.kind.value for i in injections]
        for inj in injections:
            if inj.injected_at is not None:
                inj.failed_checkpoint = not result.ok
        return result

    _stop_faults = False

    def _stop_all_faults(self) -> None:
        """Faults still waiting for their moment are missed; faults holding a service down finish."""
        self._stop_faults = True
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _inject_at_anchor(self, inj: Injected, signal: Path, steps_done: threading.Event) -> None:
        """An anchored fault: it lands when a step pauses at the fault's failpoint (the failpoint's
        ``pause`` action writes ``signal`` and waits for it to go), then the step goes on into it."""
        while not signal.exists():
            if steps_done.is_set() or self._stop_faults:
                inj.note = f"missed: the cycle never reached {inj.fault.anchor}"
                return
            time.sleep(0.02)
        # The paused step goes on a second into the fault (S3 down, slow or failing); a killed one never does.
        release = threading.Timer(1.0, lambda: signal.unlink(missing_ok=True))
        release.start()
        try:
            self._apply(inj)
        finally:
            release.join()
            signal.unlink(missing_ok=True)
        what = self._paused_at(inj.fault.cycle, str(inj.fault.anchor))
        at = f"{inj.fault.anchor}{f' ({what})' if what else ''}"
        inj.target = f"{inj.target} at {at}" if inj.target else at

    def _paused_at(self, cycle: int, anchor: str) -> str | None:
        """What a step paused at ``anchor`` was doing, from its log: which kind of state file it had just
        uploaded at ``state.mid_upload`` (a delta, a new base or a compaction's new base)."""
        if anchor != "state.mid_upload":
            return None
        for log_path in sorted(self.logs.glob(f"cycle-{cycle:04d}-*.log")):
            for line in log_path.read_text(errors="replace").splitlines():
                if f"lockstep failpoint {anchor} (" in line:
                    words = line.split(", ", 1)[-1].split()
                    return words[0] if words and words[0] in STATE_FILE_KINDS else None
        return None

    def _inject(self, inj: Injected, at: float) -> None:
        while time.monotonic() < at:
            if self._stop_faults:
                inj.note = "missed: the soak was stopped first"
                return
            time.sleep(0.05)
        self._apply(inj)

    def _apply(self, inj: Injected) -> None:
        kind = inj.fault.kind
        fam = self._family_locks.get(family(kind))
        if fam is not None and not fam.acquire(blocking=False):
            inj.note = f"missed: another {family(kind)} fault was still in progress"
            return
        try:
            if kind is FaultKind.KILL_RUN:
                self._kill_run(inj)
            elif kind is FaultKind.KILL_CONNECT:
                self._bounce("spark-connect", inj)
            elif kind is FaultKind.PARTIAL_COMMIT:
                self._partial_commit(inj)
            elif kind in (FaultKind.BROKER_COORDINATOR, FaultKind.BROKER_SINK_LEADER, FaultKind.BROKER_COMMIT):
                self._kill_broker(inj)
            elif kind is FaultKind.S3_RESTART:
                self._bounce("s3", inj)
            elif kind in (FaultKind.S3_SLOW, FaultKind.S3_ERRORS):
                assert self.proxy is not None
                inj.injected_at, inj.target = time.monotonic(), "s3 proxy"
                self.proxy.set_mode(proxy.SLOW if kind is FaultKind.S3_SLOW else proxy.ERRORS)
                time.sleep(inj.fault.hold_s)
                self.proxy.set_mode(proxy.PASS)
                inj.healed_at = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - a fault that could not be injected is reported, not fatal
            inj.note = f"injection failed: {type(exc).__name__}: {exc}"
        finally:
            if fam is not None:
                fam.release()

    def _kill_run(self, inj: Injected) -> None:
        proc, step = self._current, self._current_step
        if proc is None or proc.poll() is not None:
            inj.note = "missed: no step was running"
            return
        roots = [proc.pid]
        if step == "run" and self.platform.is_cluster and self.config.mode == "submit":
            # A standalone cluster's executors are children of the workers, not of the run. (In connect
            # mode they are the server's, and the run is the client: kill_connect kills the server.)
            workers = [self.platform.state.pids.get(f"spark-worker-{i}") for i in (1, 2)]
            roots += [pid for pid in kill.descendants(*[w for w in workers if w])
                      if "CoarseGrainedExecutorBackend" in kill.cmdline(pid)]
        killed = kill.kill_tree(*roots)
        inj.injected_at = inj.healed_at = time.monotonic()
        inj.target = f"{step} ({len(killed)} processes)"

    def _partial_commit(self, inj: Injected) -> None:
        """The step paused at ``commit.between_commits`` (one transaction committed) is killed; then the
        soak waits until the broker has aborted the others (transactions.timeout_ms), so that the next
        run finds a partial commit to repair, not one it could still roll forward."""
        step = self._current_step
        self._kill_run(inj)
        if inj.injected_at is None:
            return
        # The commit step commits this cycle's checkpoint; a plan rolling an earlier one forward, that one.
        inj.checkpoint = self._checkpoint if step == "commit" else None
        inj.target = f"checkpoint {inj.checkpoint if inj.checkpoint is not None else '(an earlier one)'}: {inj.target}"
        deadline = time.monotonic() + self.config.timeout_ms / 1000 + ABORT_GRACE_S
        open_ids = self._open_transactions()
        while open_ids and time.monotonic() < deadline and not self._stop_faults:
            time.sleep(1.0)
            open_ids = self._open_transactions()
        inj.healed_at = time.monotonic()
        waited = inj.healed_at - inj.injected_at
        inj.note = (f"the broker aborted the rest {waited:.0f} s after the kill" if not open_ids else
                    f"still open {waited:.0f} s after the kill: {', '.join(sorted(open_ids))}")

    def _open_transactions(self) -> set[str]:
        """The pipeline's transactional ids the broker still holds open (ListTransactions)."""
        from lockstep.kafka.internals import KafkaTransactionAdmin
        from lockstep.model.transactions import OPEN_STATES

        admin = KafkaTransactionAdmin(self.platform.kafka.bootstrap)
        try:
            return {t.transactional_id for t in admin.list_transactions(OPEN_STATES)
                    if t.transactional_id.startswith(f"{self.name}-")}
        finally:
            admin.close()

    def _statuses(self, env: dict[str, str], ids: list[int] | None = None) -> dict[int, str | None]:
        """``CheckpointView.status_text`` of ``ids`` (every checkpoint in the store: None), read in a
        process of its own like the steps; {} when it cannot be read (S3 down: asked again later)."""
        args = [sys.executable, "-m", "lockstep_soak.step", "status", str(self.spec_path), *map(str, ids or [])]
        log_path = self.logs / "status.log"
        with open(log_path, "a") as log:
            try:
                out = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=log, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                return {}
        if out.returncode != 0 or not out.stdout.strip():
            return {}
        doc = json.loads(out.stdout.strip().splitlines()[-1])
        return {int(k): v for k, v in doc["statuses"].items()}

    def _settle_partial_commits(self, env: dict[str, str]) -> None:
        """Record how each partial commit's checkpoint ended once a later cycle settled it."""
        pending = [i for i in self.injections if i.fault.kind is FaultKind.PARTIAL_COMMIT
                   and i.checkpoint is not None and i.status in (None, "prepared", "claimed")]
        if not pending:
            return
        found = self._statuses(env, sorted({i.checkpoint for i in pending if i.checkpoint is not None}))
        for inj in pending:
            if inj.checkpoint in found:
                inj.status = found[inj.checkpoint]

    def _kill_broker(self, inj: Injected) -> None:
        service = self._coordinator_service() if inj.fault.kind is not FaultKind.BROKER_SINK_LEADER \
            else self._sink_leader_service(inj.fault.cycle)
        self._bounce(service, inj)

    def _bounce(self, service: str, inj: Injected) -> None:
        with self._platform_lock:
            if not self.platform.running(service):
                inj.note = f"missed: {service} was already down"
                return
            self.platform.stop(service, out=io.StringIO(), kill=True)
        inj.injected_at, inj.target = time.monotonic(), service
        time.sleep(inj.fault.hold_s)
        restart = time.monotonic()
        with self._platform_lock:
            self.platform.start(service, out=io.StringIO())
        inj.healed_at = time.monotonic()
        inj.note = f"down {restart - inj.injected_at:.1f} s, then {inj.healed_at - restart:.1f} s to start again"

    def _broker_service(self, broker_id: int) -> str:
        return f"kafka-{broker_id}" if self.platform.is_cluster else "kafka"

    def _coordinator_service(self) -> str:
        from confluent_kafka.admin import AdminClient

        from lockstep.model.transactional_ids import transactional_id

        checkpoint = self._checkpoint or 1
        tid = transactional_id(self.name, checkpoint, 0)
        admin = AdminClient({**self.kafka, "log_level": 0})
        meta = admin.list_topics("__transaction_state", timeout=10).topics["__transaction_state"]
        partition = _java_abs(_java_hash(tid)) % len(meta.partitions)
        return self._broker_service(meta.partitions[partition].leader)

    def _sink_leader_service(self, cycle: int) -> str:
        from confluent_kafka.admin import AdminClient

        meta = AdminClient({**self.kafka, "log_level": 0}).list_topics(self.sink, timeout=10).topics[self.sink]
        return self._broker_service(meta.partitions[cycle % len(meta.partitions)].leader)

    # ---- the whole soak --------------------------------------------------------------------------
    def run(self) -> SoakResult:
        """The soak and its audit. In connect mode, on the platform's Spark Connect server: started if
        it is not running, and then stopped again at the end (on a cluster it holds the workers' cores)."""
        started_server = self.config.mode == "connect" and not self.platform.running("spark-connect")
        if started_server:
            self.platform.start("spark-connect", out=io.StringIO())
        try:
            return self._run()
        finally:
            if started_server:
                self.platform.stop("spark-connect", out=io.StringIO())

    def _run(self) -> SoakResult:
        c = self.config
        began, started_at = time.monotonic(), time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        max_cycles = c.cycles * 3 if c.min_faults else c.cycles
        kinds = kinds_for(c.mode, c.kinds)
        faults = plan_faults(self.seed, max_cycles, kinds, per_cycle=c.faults_per_cycle, more=c.more_faults,
                             hold_s=c.hold_s)
        if c.stateful:  # some faults land while the state is half uploaded or half collected
            faults = anchor_faults(faults, self.seed)
        self._say(f"lockstep soak: seed {self.seed}, {c.cycles} cycles of {c.records_per_cycle} records "
                  f"({c.bad_per_cycle} bad), {sum(1 for f in faults if f.cycle < c.cycles)} faults planned"
                  + (f" (more cycles until {c.min_faults} landed)" if c.min_faults else "") + ", topology "
                  f"{'cluster' if self.platform.is_cluster else 'single'}; pipeline {self.name}, logs in {self.logs}")
        self._create_topics()
        self.proxy = proxy.FaultProxy(self.platform.s3.port)
        self._write_spec()
        env = self._env()
        watch = LsoWatch(self.kafka, (self.sink, self.dead_letters))
        cycles: list[CycleResult] = []
        clean: list[float] = []
        stuck: str | None = None
        fault_free_failures = 0
        try:
            fault_cycles, cycle = c.cycles, -1
            while True:
                cycle += 1
                if cycle == fault_cycles and fault_cycles < max_cycles and self._injected() < c.min_faults:
                    fault_cycles += 1  # not enough faults landed yet: one more cycle with faults
                if cycle >= fault_cycles + c.drain_cycles:
                    break
                draining = cycle >= fault_cycles
                if draining:
                    self._stop_all_faults()
                    if self._covered_all():
                        break
                else:
                    self._produce(cycle, c.records_per_cycle)
                mine = [] if draining else [f for f in faults if f.cycle == cycle]
                expected = sum(clean[-5:]) / len(clean[-5:]) if clean else \
                    c.first_cycle_s or (8.0 if c.mode == "connect" else 30.0)
                cycle_started = time.monotonic()
                result = self.run_cycle(cycle, mine, expected, env)
                cycles.append(result)
                self._settle_partial_commits(env)
                if result.ok:
                    now = time.monotonic()
                    for inj in self.injections:
                        if inj.healed_at is not None and inj.recovered_at is None:
                            inj.recovered_at = now
                    if not mine:
                        clean.append(result.seconds)
                    fault_free_failures = 0
                elif not self._faulted_since(cycle_started):
                    fault_free_failures += 1
                self._say(f"cycle {cycle + 1:>4}{' (drain)' if draining else ''}: checkpoint {result.checkpoint_id} "
                          f"{'completed' if result.ok else 'failed in ' + str(result.failed_step)} in "
                          f"{result.seconds:.1f} s; faults: {', '.join(result.faults) or 'none'}"
                          + (f"\n           {result.reason}" if not result.ok else ""))
                if fault_free_failures >= c.stuck_after:
                    stuck = (f"{fault_free_failures} cycles in a row failed without a fault; last: "
                             f"{result.failed_step}: {result.reason}")
                    break
            if stuck is None and not self._covered_all():
                stuck = f"input not covered after {c.drain_cycles} drain cycles"
            time.sleep(2.0)
            try:
                watch.sample()
            except Exception:  # noqa: BLE001
                pass
        finally:
            if self._straggler is not None:  # the soak was stopped mid-cycle: leave no run behind
                kill.kill_tree(self._straggler[0].pid)
            self._stop_all_faults()
            watch.stop()
            self.proxy.close()
        last_fault = max((i.healed_at or i.injected_at or 0.0 for i in self.injections if i.injected_at), default=0.0)
        after = [((p.until or time.monotonic()) - max(p.since, last_fault))
                 for p in watch.pins if (p.until or time.monotonic()) >= last_fault] if last_fault else []
        # Direct to S3 from here on: the fault proxy is closed.
        statuses = self._statuses(self._direct_env(env))
        repaired = sorted({cid for cid, text in statuses.items() if text == REPAIRED}
                          | {i.checkpoint for i in self.injections if i.status == REPAIRED and i.checkpoint is not None})
        self._say("auditing: reading the sink and dead-letter topics read_committed ...")
        if c.stateful:
            result_audit, late_unplanned = audit_dead_letters(self.kafka, self.source, self.sink, self.dead_letters,
                                                              f"lockstep-{self.name}", self.produced)
            self._say("auditing: recomputing the windows (lockstep verify) and reading the state manifest ...")
            result_audit.state = self._audit_state(env, late_unplanned)
        else:
            result_audit = audit(self.kafka, self.source, self.sink, self.dead_letters, f"lockstep-{self.name}",
                                 self.produced)
        if c.iceberg:
            self._say(f"auditing: reading the Iceberg table {self.table} back ...")
            # The catalog's connection as the steps had it (`_env`), in this process too.
            os.environ.update({k: v for k, v in self.platform.connection_env().items() if "ICEBERG" in k})
            from lockstep.spec import load_spec

            iceberg = load_spec(self.spec_path).sink.iceberg
            assert iceberg is not None  # the spec `_write_spec` wrote with --iceberg
            result_audit.table = audit_table(self.kafka, self.sink, self.table, iceberg.catalog_conn_id)
        return SoakResult(
            seed=self.seed, topology="cluster" if self.platform.is_cluster else "single",
            config={"cycles": fault_cycles, "min_faults": c.min_faults, "records_per_cycle": c.records_per_cycle,
                    "bad_per_cycle": c.bad_per_cycle,
                    "timeout_ms": c.timeout_ms, "writer": c.writer, "faults_per_cycle": c.faults_per_cycle,
                    "more_faults": c.more_faults, "kinds": [k.value for k in kinds], "hold_s": list(c.hold_s),
                    "spark_master": c.spark_master or self.platform.spark_master, "stateful": c.stateful,
                    "mode": c.mode, "iceberg": c.iceberg,
                    **({"window_s": c.window_s, "customers": CUSTOMERS, "max_delta_ratio": c.max_delta_ratio}
                       if c.stateful else {})},
            cycles=cycles, injected=self.injections, audit=result_audit, lso_longest_s=watch.longest(),
            lso_after_last_fault_s=max(after, default=0.0),
            lso_open_at_end=[f"{p.partition} at {p.lso} for {p.seconds:.0f} s" for p in watch.open_pins()],
            stuck=stuck, started=started_at, seconds=time.monotonic() - began,
            statuses=dict(Counter(text or "unreadable" for text in statuses.values())), repaired=repaired)

    def _audit_state(self, env: dict[str, str], late_unplanned: int) -> StateFigures:
        """``lockstep verify --json`` (the windows recomputed from the whole committed input) and the
        latest completed checkpoint's state manifest, each in a process of its own with the steps'
        environment, against the orders the soak produced."""
        from lockstep_soak.audit import committed_offsets

        env = self._direct_env(env)
        errors: list[str] = []
        runs = {"verify": [sys.executable, "-c", "import sys; from lockstep.cli import main; sys.exit(main())",
                           "verify", "--spec", str(self.spec_path), "--json"],
                "state": [sys.executable, "-m", "lockstep_soak.step", "state", str(self.spec_path)]}
        docs: dict[str, dict[str, Any]] = {}
        for name, args in runs.items():
            log_path = self.logs / f"audit-{name}.log"
            with open(log_path, "w") as log:
                try:
                    out = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=log, text=True, timeout=1800)
                except subprocess.TimeoutExpired:
                    errors.append(f"{name}: no answer in 1800 s")
                    continue
            text = out.stdout
            try:  # the JSON document is the end of stdout (a library may have printed a line before it)
                docs[name] = json.loads(text[text.index("\n{") + 1:] if not text.startswith("{") else text)
            except ValueError:
                errors.append(f"{name} exited {out.returncode}: {_last_line(log_path)}")
        verified = docs.get("verify", {})
        state = docs.get("state") or {}
        manifest = state.get("manifest")
        if manifest is not None:
            manifest = {**manifest, "checkpoint": state.get("checkpoint")}
        covered_to = committed_offsets(self.kafka, self.source, f"lockstep-{self.name}")
        events = [rec.event_ms for (p, o), rec in self.produced.items()
                  if o < covered_to.get(p, 0) and rec.event_ms is not None]
        figures = state_figures(verified, manifest, events, self.config.window_s * 1000, late_unplanned)
        if errors:
            figures.error = "; ".join(errors)
        return figures

    def _direct_env(self, env: dict[str, str]) -> dict[str, str]:
        """The steps' environment with S3 reached directly: the fault proxy is closed once the cycles end."""
        from lockstep_dev import s3 as s3_svc

        return {**env, "AIRFLOW_CONN_AWS_SOAK": json.dumps({
            "conn_type": "aws", "login": s3_svc.ACCESS_KEY, "password": s3_svc.SECRET_KEY,
            "extra": {"region_name": s3_svc.REGION, "endpoint_url": self.platform.s3.endpoint}})}

    def _injected(self) -> int:
        return sum(1 for i in self.injections if i.injected_at is not None)

    def _faulted_since(self, moment: float) -> bool:
        """Whether a fault was active at some point after ``moment``."""
        return any(i.injected_at is not None and (i.healed_at is None or i.healed_at >= moment)
                   for i in self.injections)

    def _covered_all(self) -> bool:
        from lockstep_soak.audit import committed_offsets

        ends: dict[int, int] = {}
        for p, o in self.produced:
            ends[p] = max(ends.get(p, 0), o + 1)
        covered = committed_offsets(self.kafka, self.source, f"lockstep-{self.name}")
        return all(covered.get(p, 0) >= end for p, end in ends.items())


def timed_order(i: int, case: BadCase | None) -> tuple[bytes | None, Produced]:
    """Order ``i`` of the stateful soak (``lockstep_examples.orders:parse``'s input), or its bad case."""
    created = T0 + i // EVENTS_PER_SECOND
    doc: dict[str, object] = {"order_id": f"o{i}", "customer": f"c{i % CUSTOMERS}",
                              "amount": round((i * 7919 % 30000) / 100, 2), "currency": "EUR", "created_at": created}
    if case is None:
        return json.dumps(doc).encode(), Produced(VALID, f"o{i}", 0, created * 1000)
    if case is BadCase.LATE:
        doc["created_at"] = created = T0 - LATE_BY_S + i % WINDOW_S
        return json.dumps(doc).encode(), Produced(case.value, f"o{i}", 0, created * 1000)
    if case is BadCase.NOT_UTF8:
        return b"\xff\xfe\xfa order " + str(i).encode(), Produced(case.value, None, 0)
    if case is BadCase.NULL_VALUE:
        return None, Produced(case.value, None, 0)
    if case is BadCase.POISON:  # an amount that is not a number: the transform gives it an error
        return json.dumps({**doc, "amount": "twelve"}).encode(), Produced(case.value, f"o{i}", 0)
    raise ValueError(f"the stateful soak has no bad case {case.value}")


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:400] if lines else "(no output: the process was killed)"


def _java_hash(text: str) -> int:
    """Java's String.hashCode, which Kafka uses to place a transactional id on a coordinator."""
    h = 0
    for ch in text.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def _java_abs(n: int) -> int:
    """Kafka's Utils.abs: Integer.MIN_VALUE maps to 0."""
    return 0 if n == -(1 << 31) else abs(n)
