"""Dedup's one definition of a copy (pure). The Spark operator (`lockstep.spark.keyed_state`), the state's
retention (`lockstep.store.state_chain`, the run's read of its base) and `lockstep verify`
(`lockstep.ops.verify_state`) all follow it, so that a copy is a copy whichever of them asks, and
whatever the order in which a key's records arrive across checkpoints.

- **A copy.** A record of key K with event time ``e`` is a copy when a record of K that *passed* has
  event time ``f`` with ``|e - f| < ttl``. Symmetric: a copy that arrives before its original (in
  event time) is as much a copy as one that arrives after it.
- **Late.** A record is late, and cannot be judged any more, when ``e + ttl <= before``, the watermark
  the checkpoint started from (its base's). It goes to the dead-letter topic as ``late``.
- **Order within a checkpoint.** The records of a key that are not late are judged one by one in
  order of (event time, topic, partition, offset), each against every record of the key that passed
  before it, held in the state or passed earlier in the same checkpoint. So two records of a key at
  least ``ttl`` apart both pass, within one checkpoint as across checkpoints.
- **Retention.** A passed record's event time is held in the state until the watermark reaches
  ``f + 2 * ttl`` (:data:`RETENTION_TTLS`). Forgetting it then is exact: a record judged later is not
  late, so ``e > watermark - ttl >= f + ttl``, and it is no copy of ``f``. One TTL less would be the
  bug this rule replaces: a key forgotten at ``f + ttl`` while a copy at ``f + ttl/2`` could still come
  without being late, and pass a second time.

Which records pass may depend on the order in which they arrive when a key's records span more than
``ttl`` (with a TTL of 60 s, records at 0 s, 50 s and 100 s: 0 s and 100 s pass when 0 s is judged
first, 50 s alone when it is). What does not depend on it, and what `verify` checks: no two passed
records of a key are within ``ttl`` of each other, and every record that is not late passed or is
a copy of one that did.

:func:`judge` is the operator's per-checkpoint decision for one key, written as the Spark operator
computes it (its shortcuts for the common cases, then the fold in order): the unit tests hold it
against a model that never forgets.
"""
from __future__ import annotations

__all__ = [
    "Record", "audit", "retained", "retention_ms", "state_lifetime_ms",
]

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from lockstep.spec import StateSpec

#: A passed record's event time is held until the watermark reaches it plus this many TTLs.
RETENTION_TTLS = 2
#: What becomes of a record (the dead-letter errors of the last two are the same words).
PASS, DUPLICATE, LATE = "pass", "duplicate", "late"
#: The ways :func:`judge` decides a key (:func:`path`).
NEW, COVERED, FOLDED = "new", "covered", "folded"


class Record(NamedTuple):
    """A record of one key as dedup sees it; tuples order as records are judged within a checkpoint."""

    event_ms: int
    topic: str
    partition: int
    offset: int


def is_copy(event_ms: int, passed_ms: int, ttl_ms: int) -> bool:
    """A record at ``event_ms`` is a copy of a passed record of its key at ``passed_ms``."""
    return abs(event_ms - passed_ms) < ttl_ms


def is_late(event_ms: int, ttl_ms: int, before: int | None) -> bool:
    """A record too old to be judged against the watermark its checkpoint started from."""
    return before is not None and event_ms + ttl_ms <= before


def retention_ms(ttl_ms: int) -> int:
    """How long after its event time (in watermark) a passed record is held."""
    return RETENTION_TTLS * ttl_ms


def retained(passed_ms: int, ttl_ms: int, watermark: int | None) -> bool:
    """A passed record is still held at ``watermark`` (always before the first watermark)."""
    return watermark is None or passed_ms + retention_ms(ttl_ms) > watermark


def state_lifetime_ms(state: StateSpec) -> int | None:
    """How long after its event time a state row lives, in watermark: a dedup's passed record
    :func:`retention_ms`, a state function's key its ``ttl``; None (until removed) for windows and
    functions without a TTL. Rows past it read as absent and leave the files when rewritten."""
    if state.dedup is not None:
        return retention_ms(state.dedup.ttl_ms)
    return state.function.ttl_ms if state.function is not None else None


def judge(records: Iterable[Record], held: Sequence[int], ttl_ms: int, before: int | None) -> dict[Record, str]:
    """What one checkpoint does with the records of one key: each record's verdict (:data:`PASS`,
    :data:`DUPLICATE`, :data:`LATE`), given the event times the state holds of the key (``held``,
    those :func:`retained` at ``before``) and the watermark the checkpoint started from.

    Written as the Spark operator computes it: a key the state does not hold whose records lie
    within ``ttl`` of its first passes its first (the common new key); a key whose least or greatest
    held time is within ``ttl`` of its first and its last record drops them all (the common repeat);
    any other key is folded over its records in order."""
    verdicts = {r: LATE for r in records if is_late(r.event_ms, ttl_ms, before)}
    fresh = sorted(r for r in records if r not in verdicts)
    if not fresh:
        return verdicts
    way = path(fresh, held, ttl_ms)
    passed = [fresh[0]] if way == NEW else [] if way == COVERED else _fold(fresh, held, ttl_ms)
    chosen = set(passed)
    verdicts.update({r: PASS if r in chosen else DUPLICATE for r in fresh})
    return verdicts


def path(fresh: Sequence[Record], held: Sequence[int], ttl_ms: int) -> str:
    """Which way :func:`judge` decides a key's records that are not late (``fresh``, not empty): :data:`NEW`,
    a key the state does not hold whose records are within ``ttl`` of its first (the first passes);
    :data:`COVERED`, a key whose least or greatest held time is within ``ttl`` of its first and its last
    record (none passes); else :data:`FOLDED`, each record judged in order."""
    times = sorted(r.event_ms for r in fresh)
    first, last = times[0], times[-1]
    if not held and is_copy(last, first, ttl_ms):
        return NEW
    if held and any(is_copy(first, h, ttl_ms) and is_copy(last, h, ttl_ms) for h in (min(held), max(held))):
        return COVERED
    return FOLDED


def _fold(fresh: Sequence[Record], held: Sequence[int], ttl_ms: int) -> list[Record]:
    """The records that pass, judged in order against the held times and those passed before them."""
    passed: list[Record] = []
    for r in fresh:
        if not any(is_copy(r.event_ms, h, ttl_ms) for h in held) and \
                not any(is_copy(r.event_ms, p.event_ms, ttl_ms) for p in passed):
            passed.append(r)
    return passed


def kept(held: Iterable[int], passed: Iterable[Record], ttl_ms: int, after: int | None) -> list[int]:
    """The key's event times the state holds after the checkpoint: what it held and what passed,
    less what the new watermark lets go."""
    return sorted(t for t in (*held, *(r.event_ms for r in passed)) if retained(t, ttl_ms, after))


@dataclass
class Audit:
    """What `verify` finds of a dedup's sink against the rule (:func:`audit`)."""

    #: records that neither passed nor are a copy of a record that passed: lost
    uncovered: list[tuple[str, Record]] = field(default_factory=list)
    #: keys with two passed records within the TTL of each other: duplicated
    too_close: list[str] = field(default_factory=list)
    #: (key, event time) of each passed record the state must still hold at the watermark
    held: Counter[tuple[str, int]] = field(default_factory=Counter)


def audit(records: Mapping[str, Iterable[Record]], passed: Mapping[str, Iterable[Record]], ttl_ms: int,
          watermark: int | None) -> Audit:
    """Check a dedup's output against the rule, from the whole input at once, without knowing where
    checkpoints cut it: ``records``, each key's valid records that were not dead-lettered as late;
    ``passed``, each key's records found in the sink. The checks hold whatever the arrival order."""
    found = Audit()
    for key, mine in sorted(passed.items()):
        times = sorted(r.event_ms for r in mine)
        if any(is_copy(b, a, ttl_ms) for a, b in zip(times, times[1:], strict=False)):
            found.too_close.append(key)
        found.held.update((key, t) for t in times if retained(t, ttl_ms, watermark))
    for key, rs in sorted(records.items()):
        times = sorted(r.event_ms for r in passed.get(key, ()))
        found.uncovered += [(key, r) for r in sorted(rs) if not _near(r.event_ms, times, ttl_ms)]
    return found


def _near(event_ms: int, times: Sequence[int], ttl_ms: int) -> bool:
    """Some time of the sorted ``times`` is within ``ttl_ms`` of ``event_ms`` (a record passed is its own)."""
    import bisect

    i = bisect.bisect_left(times, event_ms)
    return any(is_copy(event_ms, times[j], ttl_ms) for j in (i - 1, i) if 0 <= j < len(times))
