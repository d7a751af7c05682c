"""Which fault hits which cycle, when and for how long: pure, from a seed, so a failure replays.

A cycle is one checkpoint: plan -> Spark run -> commit, each a process of its own like the DAG's
three tasks. A fault's ``at`` is a fraction of the cycle's expected duration (the driver scales it
by what clean cycles took; a ``duplicate_run`` counts it from the start of the run step); ``hold_s``
is how long a stopped service stays down or a slow / failing S3 lasts (or a duplicated run's first
attempt stays stopped). Bad input is placed the same way: which records of a cycle's input are which
bad case.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import Enum

from lockstep.model.failpoints import STATE_FAILPOINTS


class FaultKind(str, Enum):
    KILL_RUN = "kill_run"                      # kill -9 of the whole process tree of the running step
    BROKER_COORDINATOR = "broker_coordinator"  # SIGKILL + restart of the broker leading the txn coordinator
    BROKER_SINK_LEADER = "broker_sink_leader"  # SIGKILL + restart of the leader of a sink partition
    S3_RESTART = "s3_restart"                  # SIGKILL + restart of the S3 server
    S3_SLOW = "s3_slow"                        # S3 answers every request late for a while
    S3_ERRORS = "s3_errors"                    # S3 answers 503 (and drops open connections) for a while
    COMMIT_LATE = "commit_late"                # the commit step starts after transactions.timeout_ms
    PARTIAL_COMMIT = "partial_commit"          # the commit killed between its EndTxns; the broker aborts the rest
    DUPLICATE_RUN = "duplicate_run"            # a second run step of the same checkpoint races the first
    KILL_CONNECT = "kill_connect"              # SIGKILL + restart of the Spark Connect server (connect mode)
    BROKER_COMMIT = "broker_commit"            # SIGKILL + restart of the coordinator's broker as the EndTxns go out

    @property
    def describe(self) -> str:
        return DESCRIPTIONS[self]


DESCRIPTIONS = {
    FaultKind.KILL_RUN: "kill -9 of the process tree of the step that is running (plan, spark-submit, driver JVM, "
                        "Python workers, executor JVMs, commit) at a uniformly random moment of the cycle",
    FaultKind.BROKER_COORDINATOR: "SIGKILL of the broker leading the transaction coordinator of the checkpoint's "
                                  "transactional ids, restarted after the hold time",
    FaultKind.BROKER_SINK_LEADER: "SIGKILL of the broker leading a sink partition, restarted after the hold time",
    FaultKind.S3_RESTART: "SIGKILL of the S3 server (MinIO, data on disk), restarted after the hold time",
    FaultKind.S3_SLOW: "every S3 request delayed by the fault proxy for the hold time",
    FaultKind.S3_ERRORS: "S3 answers 503 Slow Down to every request, open connections dropped, for the hold time",
    FaultKind.COMMIT_LATE: "the commit step starts only after transactions.timeout_ms, so the broker aborts first",
    FaultKind.PARTIAL_COMMIT: "kill -9 of the commit after its first transaction is committed (failpoint "
                              "commit.between_commits), then the soak waits until the broker has timed the "
                              "others out: the next run must repair the checkpoint (completed after repair)",
    FaultKind.DUPLICATE_RUN: "a second run step of the same checkpoint (Airflow's retry of a timed-out task) "
                             "started while the first is in its Spark run; the first is stopped (SIGSTOP) for the "
                             "hold time, then both race to upload state files and write prepared.json",
    FaultKind.KILL_CONNECT: "SIGKILL of the Spark Connect server, the driver of every connect-mode run, at a random "
                            "moment of the cycle; started again after the hold time, as its supervisor would",
    FaultKind.BROKER_COMMIT: "SIGKILL of the broker leading the transaction coordinator of the checkpoint's "
                             "transactional ids just as the commit sends its EndTxns together (failpoint "
                             "commit.after_verify), restarted after the hold time",
}

#: Faults that stop a service need a topology where the service can come back by itself.
SERVICE_FAULTS = (FaultKind.BROKER_COORDINATOR, FaultKind.BROKER_SINK_LEADER, FaultKind.S3_RESTART,
                  FaultKind.BROKER_COMMIT)
#: Faults that only mean something when the checkpoints run on a Spark Connect server.
CONNECT_FAULTS = (FaultKind.KILL_CONNECT,)


def kinds_for(mode: str, kinds: tuple[FaultKind, ...] | None = None) -> tuple[FaultKind, ...]:
    """The fault kinds a soak in ``mode`` ("connect" or "submit") injects: ``kinds`` (every kind when
    None) less those that need a Connect server when there is none."""
    chosen = tuple(FaultKind) if kinds is None else kinds
    return chosen if mode == "connect" else tuple(k for k in chosen if k not in CONNECT_FAULTS)


@dataclass(frozen=True)
class Fault:
    cycle: int
    kind: FaultKind
    at: float       # fraction of the expected cycle duration, in [0, 1)
    #: how long the service stays down / S3 stays slow or failing / a duplicated run's first attempt stays
    #: stopped (0: not applicable)
    hold_s: float
    #: A failpoint the fault waits for instead of ``at``: the step pauses there and the fault lands at
    #: that exact moment (``anchor_faults``).
    anchor: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"cycle": self.cycle, "kind": self.kind.value, "at": round(self.at, 3), "hold_s": round(self.hold_s, 1),
                **({"anchor": self.anchor} if self.anchor else {})}


class BadCase(str, Enum):
    OVERSIZE = "oversize"      # larger than the sink topic's max.message.bytes once transformed
    NOT_UTF8 = "not_utf8"      # bytes that are not UTF-8
    NULL_VALUE = "null_value"  # a tombstone: null value
    POISON = "poison"          # a JSON order the row function raises for
    LATE = "late"              # stateful soak: a valid order whose window fired long before (event time far back)


BAD_CASE_DESCRIPTIONS = {
    BadCase.OVERSIZE: "a valid order padded past the sink topic's max.message.bytes",
    BadCase.NOT_UTF8: "a value of bytes that are not UTF-8",
    BadCase.NULL_VALUE: "a null value (tombstone)",
    BadCase.POISON: "a JSON order whose amount makes the transform's row function raise",
    BadCase.LATE: "a valid order created long before the rest: late once a checkpoint's watermark passed its window",
}

#: The bad cases of each soak. The stateless soak's never include ``late`` (event time means nothing
#: to it); the stateful soak's drop ``oversize`` (a window's output is small whatever its input).
STATELESS_CASES = (BadCase.OVERSIZE, BadCase.NOT_UTF8, BadCase.NULL_VALUE, BadCase.POISON)
STATEFUL_CASES = (BadCase.NOT_UTF8, BadCase.NULL_VALUE, BadCase.POISON, BadCase.LATE)


#: Relative frequency of each kind: a late commit costs a whole transaction timeout, so it is rarer. A
#: partial commit costs one too, but it is the case a transaction timeout makes hard, so it stays common.
WEIGHTS = {FaultKind.COMMIT_LATE: 0.4}

#: Faults that decide their whole cycle, so they are never paired: a late commit's cycle waits out the
#: transaction timeout, and a partial commit or a broker lost during the commit must land at their
#: failpoint, which another fault would keep the cycle from reaching.
SOLO = (FaultKind.COMMIT_LATE, FaultKind.PARTIAL_COMMIT, FaultKind.BROKER_COMMIT)

#: Where a partial commit lands: the commit step pauses there (one transaction committed, the rest
#: not) and is killed.
PARTIAL_COMMIT_ANCHOR = "commit.between_commits"
#: Where a broker_commit lands: every transaction verified open; a second later the commit sends their
#: EndTxns together, to a coordinator whose broker is down.
BROKER_COMMIT_ANCHOR = "commit.after_verify"
#: The kinds that always land at a failpoint, and which.
ANCHORS = {FaultKind.PARTIAL_COMMIT: PARTIAL_COMMIT_ANCHOR, FaultKind.BROKER_COMMIT: BROKER_COMMIT_ANCHOR}


def family(kind: FaultKind) -> str:
    """Faults of one family are never paired in a cycle (two broker kills could take the quorum)."""
    if kind in (FaultKind.BROKER_COORDINATOR, FaultKind.BROKER_SINK_LEADER, FaultKind.BROKER_COMMIT):
        return "kafka"
    if kind in (FaultKind.S3_RESTART, FaultKind.S3_SLOW, FaultKind.S3_ERRORS):
        return "s3"
    return str(kind.value)


def plan_faults(seed: int, cycles: int, kinds: tuple[FaultKind, ...], clean_every: int = 4,
                per_cycle: int = 2, more: float = 0.5, hold_s: tuple[float, float] = (2.0, 12.0)) -> list[Fault]:
    """Faults for ``cycles`` cycles: every ``clean_every``-th cycle has none (the pipeline must make
    progress between faults), the others one (each kind once before any repeats), and with
    probability ``more`` each, up to ``per_cycle`` in all, of other families at other moments.
    The `SOLO` kinds are never paired: each decides the whole cycle. The kinds of `ANCHORS` land at
    their failpoint in the stateless soak as in the stateful one."""
    if not kinds:
        return []
    rng = random.Random(seed)
    faults: list[Fault] = []
    first_round = list(kinds)  # every kind once (in seeded order) before any repeats
    rng.shuffle(first_round)
    for cycle in range(cycles):
        if clean_every and cycle % clean_every == clean_every - 1:
            continue
        first = first_round.pop() if first_round else _pick(rng, kinds)
        chosen = [first]
        while first not in SOLO and len(chosen) < per_cycle:
            taken = {family(k) for k in chosen}
            others = tuple(k for k in kinds if family(k) not in taken and k not in SOLO)
            if not others or rng.random() >= more:
                break
            chosen.append(_pick(rng, others))
        faults.extend(Fault(cycle, kind, rng.random(), _hold(rng, kind, hold_s),
                            anchor=ANCHORS.get(kind))
                      for kind in chosen)
    return faults


#: The moments of a stateful checkpoint a stateful soak's faults may be anchored to (failpoints, where
#: the step pauses while the fault lands): its state files half uploaded (a compaction's first, when it
#: compacts), and the commit's garbage collection half done.
STATE_ANCHORS = STATE_FAILPOINTS
UPLOAD_ANCHOR, GC_ANCHOR = STATE_FAILPOINTS
#: The kinds of state file a checkpoint uploads, as `state.mid_upload`'s detail names the first
#: (``lockstep.spark.state_write``): what a fault there interrupted.
STATE_FILE_KINDS = ("delta", "delta-merge", "base", "compaction")
#: The faults that mean something at such a moment: a kill -9 of the step, and every S3 fault.
ANCHORABLE = (FaultKind.KILL_RUN, FaultKind.S3_RESTART, FaultKind.S3_SLOW, FaultKind.S3_ERRORS)
#: Faults at the upload that leave garbage: the failed run's checkpoint is aborted by the next plan, and
#: the state file it had uploaded is the next commit's to collect. A kill always fails the run; S3 down
#: for longer than the client's retries too (in the soaks so far, 503s and slowness never did).
LEAVES_GARBAGE = (FaultKind.KILL_RUN, FaultKind.S3_RESTART)


def anchor_faults(faults: list[Fault], seed: int, share: float = 0.8) -> list[Fault]:
    """The stateful soak's faults with some anchorable ones, at most one per cycle, moved from their
    moment to a state moment. A cycle with an anchored fault holds only that one: with others beside
    it, the cycle seldom gets as far as its anchor (a commit's garbage collection comes last).

    - ``share`` of the cycles with an anchorable fault get one at `UPLOAD_ANCHOR` (one of
      `LEAVES_GARBAGE` when they have one and the next cycle an anchorable fault too);
    - the cycle after such a fault at the upload gets one at `GC_ANCHOR` (an S3 fault when it has
      one): that commit collects the failed checkpoint's file. Other commits seldom have garbage, since the
      soak retains every checkpoint (its audit recomputes the state from the first input).

    A random generator of its own, so the other cycles' faults stay what ``plan_faults`` made them."""
    rng = random.Random(f"{seed}/anchors")
    by_cycle: dict[int, list[Fault]] = {}
    for f in faults:
        by_cycle.setdefault(f.cycle, []).append(f)
    anchored: dict[int, Fault] = {f.cycle: f for f in faults if f.anchor}  # a partial commit is anchored already
    killed_at_upload: int | None = None
    for cycle in sorted(by_cycle):
        candidates = [f for f in by_cycle[cycle] if f.kind in ANCHORABLE]
        if cycle in anchored or not candidates:
            continue
        if killed_at_upload == cycle - 1:
            s3 = [f for f in candidates if f.kind is not FaultKind.KILL_RUN]
            anchored[cycle] = replace((s3 or candidates)[0], anchor=GC_ANCHOR)
        elif rng.random() < share:
            # A kill only where the next cycle can have the fault at the collection of its garbage.
            collects = any(f.kind in ANCHORABLE for f in by_cycle.get(cycle + 1, ())) and cycle + 1 not in anchored
            kills = [f for f in candidates if f.kind in LEAVES_GARBAGE and collects]
            anchored[cycle] = chosen = replace((kills or candidates)[0], anchor=UPLOAD_ANCHOR)
            if chosen.kind in LEAVES_GARBAGE:
                killed_at_upload = cycle
    return [anchored.get(f.cycle, f) for f in faults if f.cycle not in anchored or f.kind is anchored[f.cycle].kind]


def _pick(rng: random.Random, kinds: tuple[FaultKind, ...]) -> FaultKind:
    return rng.choices(kinds, weights=[WEIGHTS.get(k, 1.0) for k in kinds])[0]


def _hold(rng: random.Random, kind: FaultKind, bounds: tuple[float, float]) -> float:
    if kind in (FaultKind.KILL_RUN, FaultKind.COMMIT_LATE, FaultKind.PARTIAL_COMMIT):
        return 0.0
    return rng.uniform(*bounds)


def plan_bad_input(seed: int, cycle: int, records: int, per_cycle: int,
                   cases: tuple[BadCase, ...] = STATELESS_CASES) -> dict[int, BadCase]:
    """Which of a cycle's ``records`` input records (by index) are bad, and which case each is:
    ``per_cycle`` of them, ``cases`` in turn, at seeded positions."""
    if records <= 0 or per_cycle <= 0 or not cases:
        return {}
    rng = random.Random(f"{seed}/{cycle}/bad")
    positions = rng.sample(range(records), min(per_cycle, records))
    return {pos: cases[(cycle * per_cycle + n) % len(cases)] for n, pos in enumerate(sorted(positions))}
