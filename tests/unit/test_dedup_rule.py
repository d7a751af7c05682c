"""Dedup's one definition of a copy (lockstep.rules.dedup, issue 39), without services.

The property test cuts random input (keys, event times, partitions) into random checkpoints, moves
the watermark as the run does (`rules.watermarks.advance`, with a fixed clock), and judges each
checkpoint twice: by a brute-force model that never forgets a passed record, and by the operator's
rule as it runs (``judge`` over the state the run loads, ``kept`` and its retention after). Both must
decide every record alike, and the decisions must keep the rule's promises whatever the order and
the cuts: no two passed records of a key within the TTL; every record passed, a copy of a passed
record, or late. `verify`'s ``audit`` must find nothing wrong in them, and find what a broken sink
or a broken retention does."""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from lockstep.rules import dedup
from lockstep.rules.dedup import DUPLICATE, LATE, PASS, Record, audit, is_copy, judge, kept, retained
from lockstep.rules.watermarks import advance
from lockstep.spec import parse_spec

NOW = 1_700_000_000_000  # the run's clock, fixed: no partition goes idle
IDLE = 300_000
TOPIC = "in"


@dataclass
class Case:
    ttl: int
    out_of_orderness: int
    #: per checkpoint, per partition, its records in offset order: (key, event ms)
    checkpoints: list[dict[int, list[tuple[str, int]]]]


def random_case(rng: random.Random) -> Case:
    """Few keys, many copies near each other and some beyond the TTL, partitions that hold the
    watermark back or run ahead, a random split of each partition's log into checkpoints."""
    ttl = rng.choice([1_000, 5_000, 60_000])
    keys = [f"k{i}" for i in range(rng.randint(1, 4))]
    partitions = rng.randint(1, 3)
    span = ttl * rng.choice([1, 3, 6])
    logs: dict[int, list[tuple[str, int]]] = {p: [] for p in range(partitions)}
    for _ in range(rng.randint(1, 30)):
        key = rng.choice(keys)
        event = rng.randint(0, span) if rng.random() < 0.7 else rng.choice([0, ttl, 2 * ttl, span]) + rng.randint(-1, 1)
        logs[rng.randrange(partitions)].append((key, event))
    n = rng.randint(1, 5)
    cuts = {p: sorted(rng.randint(0, len(log)) for _ in range(n - 1)) for p, log in logs.items()}
    checkpoints = []
    for c in range(n):
        checkpoints.append({p: log[([0, *cuts[p]])[c]:([*cuts[p], len(log)])[c]] for p, log in logs.items()})
    return Case(ttl, rng.choice([0, ttl // 10, ttl, 3 * ttl]), checkpoints)


@dataclass
class Outcome:
    """Every checkpoint's verdicts, and what the incremental state holds at the end."""

    verdicts: list[dict[tuple[str, Record], str]] = field(default_factory=list)
    #: the watermark each checkpoint started from
    befores: list[int | None] = field(default_factory=list)
    watermark: int | None = None
    state: dict[str, list[int]] = field(default_factory=dict)

    def all(self) -> dict[tuple[str, Record], str]:
        return {k: v for checkpoint in self.verdicts for k, v in checkpoint.items()}

    def passed(self) -> dict[str, list[Record]]:
        found: dict[str, list[Record]] = {}
        for (key, r), v in self.all().items():
            if v == PASS:
                found.setdefault(key, []).append(r)
        return found


Judge = Callable[[dict[str, list[Record]], int | None, int | None, Outcome, int], dict[tuple[str, Record], str]]


def run(case: Case, judge_checkpoint: Judge) -> Outcome:
    """The checkpoints in turn: each one's records, its watermark as the run computes it, its verdicts."""
    out = Outcome()
    partitions: dict = {}
    watermark: int | None = None
    offsets = dict.fromkeys(range(len(case.checkpoints[0])), 0)
    for checkpoint in case.checkpoints:
        by_key: dict[str, list[Record]] = {}
        batch_max: dict[str, int] = {}
        for p, records in checkpoint.items():
            for key, event in records:
                by_key.setdefault(key, []).append(Record(event, TOPIC, p, offsets[p]))
                offsets[p] += 1
                batch_max[f"{TOPIC}:{p}"] = max(batch_max.get(f"{TOPIC}:{p}", event), event)
        clock = advance(partitions, watermark, batch_max, [f"{TOPIC}:{p}" for p in checkpoint], NOW,
                        case.out_of_orderness, IDLE)
        partitions, watermark = dict(clock.partitions), clock.after
        out.befores.append(clock.before)
        out.verdicts.append(judge_checkpoint(by_key, clock.before, clock.after, out, case.ttl))
    out.watermark = watermark
    return out


def model(by_key: dict[str, list[Record]], before: int | None, after: int | None, out: Outcome,
          ttl: int) -> dict[tuple[str, Record], str]:
    """Brute force, unlimited memory: a checkpoint's records in order, each against every record of
    its key that ever passed."""
    ever = out.passed()
    verdicts = {}
    for key, records in sorted(by_key.items()):
        mine = list(ever.get(key, []))
        for r in sorted(records):
            if before is not None and r.event_ms + ttl <= before:
                verdicts[(key, r)] = LATE
            elif any(abs(r.event_ms - p.event_ms) < ttl for p in mine):
                verdicts[(key, r)] = DUPLICATE
            else:
                verdicts[(key, r)] = PASS
                mine.append(r)
    return verdicts


def operator(retention: Callable[[int, int, int | None], bool] = retained) -> Judge:
    """The rule as the run applies it: load the held times ``retention`` keeps at the base's
    watermark, ``judge`` each key, keep what ``kept`` keeps at the new watermark."""
    def checkpoint(by_key: dict[str, list[Record]], before: int | None, after: int | None, out: Outcome,
                   ttl: int) -> dict[tuple[str, Record], str]:
        verdicts = {}
        for key, records in sorted(by_key.items()):
            held = [t for t in out.state.get(key, []) if retention(t, ttl, before)]
            mine = judge(records, held, ttl, before)
            verdicts.update({(key, r): v for r, v in mine.items()})
            out.state[key] = [t for t in kept(held, [r for r, v in mine.items() if v == PASS], ttl, None)
                              if retention(t, ttl, after)]
        return verdicts
    return checkpoint


def broken_retention(passed_ms: int, ttl: int, watermark: int | None) -> bool:
    """The rule this one replaced: a key forgotten once the watermark passes its time plus one TTL."""
    return watermark is None or passed_ms + ttl > watermark


def promises_broken(case: Case, out: Outcome) -> list[str]:
    """What the decisions must keep, whatever the order and the cuts, checked from the outcome alone."""
    broken = []
    passed = out.passed()
    for key, rs in passed.items():
        times = sorted(r.event_ms for r in rs)
        broken += [f"{key} passed at {a} and {b}" for a, b in zip(times, times[1:], strict=False)
                   if is_copy(a, b, case.ttl)]
    for c, verdicts in enumerate(out.verdicts):
        for (key, r), v in verdicts.items():
            late = out.befores[c] is not None and r.event_ms + case.ttl <= out.befores[c]  # type: ignore[operator]
            if v == LATE and not late or v != LATE and late:
                broken.append(f"{key} {r} is {v} against watermark {out.befores[c]}")
            if v == DUPLICATE and not any(is_copy(r.event_ms, p.event_ms, case.ttl) for p in passed.get(key, [])):
                broken.append(f"{key} {r} dropped as a copy of nothing")
    return broken


CASES = [random_case(random.Random(seed)) for seed in range(400)]


def test_random_cases_cover_what_the_rule_is_about() -> None:
    """The generator makes the cases that matter: lates, copies across checkpoints, records of a key
    more than the TTL apart in one checkpoint, held records forgotten by retention."""
    seen = {"late": 0, "copy across checkpoints": 0, "two passes in a checkpoint": 0, "forgotten": 0}
    for case in CASES:
        out = run(case, operator())
        verdicts = out.all()
        seen["late"] += LATE in verdicts.values()
        firsts = {}
        for c, checkpoint in enumerate(out.verdicts):
            for (key, _), v in checkpoint.items():
                firsts.setdefault(key, c)
                if v == DUPLICATE and firsts[key] < c:
                    seen["copy across checkpoints"] += 1
            passes = [key for (key, _), v in checkpoint.items() if v == PASS]
            seen["two passes in a checkpoint"] += len(passes) != len(set(passes))
        seen["forgotten"] += sum(len(rs) for rs in out.passed().values()) > sum(len(t) for t in out.state.values())
    assert all(n >= 20 for n in seen.values()), seen


@pytest.mark.parametrize("case", CASES, ids=[f"seed{i}" for i in range(len(CASES))])
def test_the_incremental_rule_decides_as_a_model_that_never_forgets_and_keeps_its_promises(case: Case) -> None:
    expected = run(case, model)
    actual = run(case, operator())
    assert actual.verdicts == expected.verdicts, case
    assert promises_broken(case, actual) == [], case
    # verify's audit of that output finds nothing, and expects the state the run left.
    records = {}
    for (key, r), v in actual.all().items():
        if v != LATE:
            records.setdefault(key, []).append(r)
    found = audit(records, actual.passed(), case.ttl, actual.watermark)
    assert (found.uncovered, found.too_close) == ([], [])
    live = [(k, t) for k, ts in actual.state.items() for t in ts if retained(t, case.ttl, actual.watermark)]
    assert sorted(found.held.elements()) == sorted(live)  # rows past their lifetime are dropped when read


def test_a_retention_of_one_ttl_passes_copies_the_property_test_finds() -> None:
    """The property test can fail: with the old retention, some random cases pass a copy twice."""
    failing = [case for case in CASES if promises_broken(case, run(case, operator(broken_retention)))]
    assert len(failing) >= 5


# ---- the issue's sequence and the rule's parts ------------------------------------------------------------------
def test_the_issue_39_sequence_drops_the_copy_across_checkpoints() -> None:
    """ttl 60 s, out-of-orderness 10 s. Checkpoint 1: K at 0 s, another key at 100 s (the watermark
    moves to 90 s, past K's old expiry at 60 s). Checkpoint 2: a copy of K at 40 s, not late."""
    case = Case(60_000, 10_000, [{0: [("K", 0), ("X", 100_000)]}, {0: [("K", 40_000)]}])
    out = run(case, operator())
    assert out.befores == [None, 90_000]
    assert out.verdicts[1] == {("K", Record(40_000, TOPIC, 0, 2)): DUPLICATE}
    assert out.state == {"K": [0], "X": [100_000]}  # K held until the watermark reaches 120 s
    old = run(case, operator(broken_retention))
    assert old.verdicts[1] == {("K", Record(40_000, TOPIC, 0, 2)): PASS}  # the bug


def r(event: int, offset: int = 0, partition: int = 0) -> Record:
    return Record(event, TOPIC, partition, offset)


def test_judge_passes_records_a_ttl_apart_in_one_checkpoint_and_judges_in_event_time_then_provenance() -> None:
    records = [r(70, 0), r(10, 1), r(0, 2), r(0, 0, partition=1), r(139, 3), r(140, 4)]
    assert judge(records, [], 70, None) == {r(0, 2): PASS, r(0, 0, partition=1): DUPLICATE, r(10, 1): DUPLICATE,
                                            r(70, 0): PASS, r(139, 3): DUPLICATE, r(140, 4): PASS}


def test_judge_drops_copies_of_held_records_on_either_side_and_passes_what_is_beyond() -> None:
    assert judge([r(50), r(60, 1)], [100], 60, None) == {r(50): DUPLICATE, r(60, 1): DUPLICATE}  # before the held one
    assert judge([r(30), r(170, 1)], [100], 60, None) == {r(30): PASS, r(170, 1): PASS}
    assert judge([r(45), r(150, 1)], [100], 60, 100) == {r(45): DUPLICATE, r(150, 1): DUPLICATE}
    assert judge([r(40)], [100], 60, 100) == {r(40): LATE}
    # Neither the least nor the greatest held time covers them, the one between does: the fold finds it.
    assert judge([r(95), r(105, 1)], [0, 100, 200], 60, None) == {r(95): DUPLICATE, r(105, 1): DUPLICATE}
    assert judge([r(30), r(150, 1)], [0, 100, 200], 60, None) == {r(30): DUPLICATE, r(150, 1): DUPLICATE}


def test_kept_and_retained_hold_a_passed_record_for_twice_the_ttl() -> None:
    assert retained(0, 60, 119) and not retained(0, 60, 120) and retained(0, 60, None)
    assert kept([0, 100], [r(200)], 60, 120) == [100, 200]
    assert kept([5], [], 60, None) == [5]


def test_the_state_lifetime_is_twice_a_dedups_ttl_a_functions_ttl_and_none_for_windows() -> None:
    def state(**operator: object):
        return parse_spec({"name": "o", "source": {"topics": ["in"]}, "transform": "lockstep_examples.orders:parse",
                           "sink": {"topic": "out", "dead_letter_topic": "dlq"},
                           "checkpoints": {"store": "s3://lockstep/checkpoints"},
                           "state": {"event_time": {"column": "created_at"}, **operator}}, "o.yaml").state

    assert dedup.state_lifetime_ms(state(dedup={"key": "order_id", "ttl": "1m"})) == 120_000
    function = {"key": "customer", "process": "lockstep_examples.sessions:process", "state": {"n": "bigint"}}
    assert dedup.state_lifetime_ms(state(function={**function, "ttl": "1m"})) == 60_000
    assert dedup.state_lifetime_ms(state(function=function)) is None
    window = {"key": "customer", "size": "1m", "aggregates": {"n": "count(*)"}}
    assert dedup.state_lifetime_ms(state(window=window)) is None


def test_audit_finds_a_copy_passed_twice_a_record_lost_and_what_the_state_must_hold() -> None:
    records = {"K": [r(0), r(40_000, 1), r(200_000, 2)], "L": [r(5_000, 3)]}
    found = audit(records, {"K": [r(0), r(40_000, 1)], "L": [r(5_000, 3)]}, 60_000, 122_000)
    assert found.too_close == ["K"]
    assert found.uncovered == [("K", r(200_000, 2))]  # nothing within the TTL of it passed
    assert sorted(found.held.elements()) == [("K", 40_000), ("L", 5_000)]  # K at 0 s let go at 120 s
    clean = audit(records, {"K": [r(0), r(200_000, 2)], "L": [r(5_000, 3)]}, 60_000, None)
    assert (clean.too_close, clean.uncovered) == ([], [])
