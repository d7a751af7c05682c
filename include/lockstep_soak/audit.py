"""The soak's auditor, independent of the writer: what the soak itself produced (its delivery
reports) against what a ``read_committed`` consumer finds in the sink and dead-letter topics, over
the input offsets the pipeline says it covered (its consumer group's committed offsets).

It trusts no checkpoint metadata. A record is matched to its input by Lockstep's provenance
headers, and a sink record's payload is checked against the input it claims to come from, so a
header pointing at the wrong record is caught too. ``LsoWatch`` samples the last stable offset of
the output partitions for the whole soak: a transaction left open by a fault pins it.
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from lockstep.kafka.topics import record_headers
from lockstep.model.output_contract import (
    ERROR_HEADER,
    ORIGINAL_SIZE_HEADER,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)

if TYPE_CHECKING:
    from confluent_kafka import Message

    from lockstep.ops.table_check import TableCheck

Offset = tuple[int, int]  # (source partition, offset)
VALID = "valid"


@dataclass
class Produced:
    """One input record as the soak produced it."""
    case: str              # VALID or a schedule.BadCase value
    order_id: str | None   # what a sink record made from it must carry
    size: int
    event_ms: int | None = None  # stateful soak: the order's event time (created_at), None if it has none


@dataclass
class CaseOutcome:
    records: int = 0
    to_sink: int = 0
    dead_lettered: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> dict[str, object]:
        return {"records": self.records, "to_sink": self.to_sink, "dead_lettered": self.dead_lettered,
                "reasons": dict(self.reasons.most_common(3))}


@dataclass
class AuditResult:
    produced: int
    covered: int
    outputs: int
    lost: list[Offset] = field(default_factory=list)
    duplicated: list[Offset] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[Offset] = field(default_factory=list)
    cases: dict[str, CaseOutcome] = field(default_factory=dict)
    #: the stateful soak's windows and keyed state against their recomputation (None: a stateless soak)
    state: StateFigures | None = None
    #: ``--iceberg``: the table's rows against the sink topic's records, by provenance
    table: TableCheck | None = None

    @property
    def uncovered(self) -> int:
        return self.produced - self.covered

    @property
    def ok(self) -> bool:
        return (not (self.lost or self.duplicated or self.unexpected or self.mismatched)
                and (self.state is None or self.state.ok) and (self.table is None or self.table.ok))

    def to_json(self) -> dict[str, object]:
        return {"produced": self.produced, "covered": self.covered, "uncovered": self.uncovered,
                "outputs": self.outputs, "lost": len(self.lost), "duplicated": len(self.duplicated),
                "unexpected": len(self.unexpected), "mismatched": len(self.mismatched),
                "lost_sample": [f"{p}@{o}" for p, o in self.lost[:10]],
                "duplicated_sample": [f"{p}@{o}" for p, o in self.duplicated[:10]],
                "unexpected_sample": self.unexpected[:10],
                "cases": {k: v.to_json() for k, v in self.cases.items()},
                **({"state": self.state.to_json()} if self.state is not None else {}),
                **({"table": self.table.to_json()} if self.table is not None else {})}


def audit(kafka: dict[str, Any], source_topic: str, sink_topic: str, dead_letter_topic: str, group: str,
          produced: dict[Offset, Produced]) -> AuditResult:
    covered_to = committed_offsets(kafka, source_topic, group)
    covered = {key for key in produced if key[1] < covered_to.get(key[0], 0)}
    result = AuditResult(produced=len(produced), covered=len(covered), outputs=0)
    seen: Counter[Offset] = Counter()
    for case in sorted({p.case for p in produced.values()}):
        result.cases[case] = CaseOutcome()
    for key, planned in produced.items():
        if key in covered:
            result.cases[planned.case].records += 1
    for topic, msg in read_committed(kafka, (sink_topic, dead_letter_topic)):
        result.outputs += 1
        headers = _headers(msg)
        where = f"{topic}:{msg.partition()}@{msg.offset()}"
        try:
            if headers[SOURCE_TOPIC].decode() != source_topic:
                raise KeyError(SOURCE_TOPIC)
            key = (int(headers[SOURCE_PARTITION]), int(headers[SOURCE_OFFSET]))
        except (KeyError, ValueError):
            result.unexpected.append(f"{where} (no provenance of {source_topic})")
            continue
        rec = produced.get(key)
        if key not in covered or rec is None:
            result.unexpected.append(f"{where} (input {key[0]}@{key[1]} not covered by the group's offsets)")
            continue
        seen[key] += 1
        outcome = result.cases[rec.case]
        if topic == sink_topic:
            outcome.to_sink += 1
            if rec.order_id is not None and _order_id(msg.value()) != rec.order_id:
                result.mismatched.append(key)
        else:
            outcome.dead_lettered += 1
            reason = (headers.get(ERROR_HEADER) or b"").decode(errors="replace")
            if ORIGINAL_SIZE_HEADER in headers:
                reason += f" [original size {int(headers[ORIGINAL_SIZE_HEADER])} bytes kept in a header]"
            outcome.reasons[_shorten(reason)] += 1
    for key in sorted(covered):
        if seen[key] == 0:
            result.lost.append(key)
        elif seen[key] > 1:
            result.duplicated.append(key)
    return result


@dataclass
class StateFigures:
    """A stateful soak's windows and state, checked after the drain.

    The windows are ``lockstep verify``'s recomputation from the whole committed input (its JSON);
    the state is the latest completed checkpoint's manifest against what the soak itself produced:
    its rows must be exactly the valid covered orders whose window the manifest's watermark has not
    passed (a late order's window had always fired, so it never counts)."""
    windows_expected: int = 0
    windows_found: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    wrong: int = 0
    late: int = 0
    #: orders dead-lettered as late that the soak did not produce late (in-order input judged late)
    late_unplanned: int = 0
    complete: bool = False
    unchecked: list[str] = field(default_factory=list)
    samples: dict[str, list[str]] = field(default_factory=dict)
    checkpoint: int | None = None
    watermark_ms: int | None = None
    state_rows: int | None = None
    state_rows_expected: int | None = None
    state_keys: int | None = None
    #: rows of the committed state files (chains merged) that ``lockstep verify`` found not as recomputed
    state_mismatched: int = 0
    #: why the recomputation or the manifest could not be had (the soak then fails)
    error: str | None = None

    @property
    def state_equal(self) -> bool:
        return (self.state_rows is not None and self.state_rows == self.state_rows_expected
                and not self.state_mismatched)

    @property
    def ok(self) -> bool:
        return (self.error is None and self.complete and self.state_equal
                and not (self.lost or self.duplicated or self.unexpected or self.wrong or self.late_unplanned))

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "windows_expected": self.windows_expected, "windows_found": self.windows_found,
                "lost": self.lost, "duplicated": self.duplicated, "unexpected": self.unexpected, "wrong": self.wrong,
                "late": self.late, "late_unplanned": self.late_unplanned, "complete": self.complete,
                "unchecked": self.unchecked, "samples": self.samples, "checkpoint": self.checkpoint,
                "watermark_ms": self.watermark_ms, "state_rows": self.state_rows,
                "state_rows_expected": self.state_rows_expected, "state_keys": self.state_keys,
                "state_mismatched": self.state_mismatched, "state_equal": self.state_equal, "error": self.error}


def window_end_ms(event_ms: int, size_ms: int) -> int:
    """The end of the tumbling window of ``size_ms`` an event time falls in."""
    return event_ms - event_ms % size_ms + size_ms


def expected_state_rows(events: Sequence[int | None], size_ms: int, watermark_ms: int | None,
                        allowed_lateness_ms: int = 0) -> int:
    """The rows a tumbling-window state holds after the watermark reached ``watermark_ms``: one per
    valid order (``events`` are their event times; None is an order without one, never state) whose
    window has not fired (its end plus the allowed lateness is past the watermark; no watermark yet:
    nothing fired)."""
    return sum(1 for t in events if t is not None
               and (watermark_ms is None or window_end_ms(t, size_ms) + allowed_lateness_ms > watermark_ms))


def state_figures(verified: dict[str, Any], manifest: dict[str, Any] | None, events: Sequence[int | None],
                  size_ms: int, late_unplanned: int = 0) -> StateFigures:
    """The figures from ``lockstep verify --json``'s document and the latest completed checkpoint's
    state manifest (``StateManifest.to_json()`` plus its ``checkpoint``), ``events`` the event times
    of the valid covered orders the soak produced."""
    f = StateFigures(windows_expected=int(verified.get("expected_outputs", 0)),
                     windows_found=int(verified.get("actual_outputs", 0)), lost=int(verified.get("lost", 0)),
                     duplicated=int(verified.get("duplicated", 0)), unexpected=int(verified.get("unexpected", 0)),
                     wrong=int(verified.get("wrong", 0)), late=int(verified.get("late", 0)),
                     late_unplanned=late_unplanned, complete=bool(verified.get("complete")),
                     unchecked=list(verified.get("unchecked", [])),
                     state_mismatched=int(verified.get("state_mismatched", 0)),
                     samples={k: list(verified.get(f"{k}_sample") or [])[:5]
                              for k in ("lost", "duplicated", "unexpected", "wrong", "state_mismatched")
                              if verified.get(f"{k}_sample")})
    if manifest is None:
        f.error = "no completed checkpoint carries a state manifest"
        return f
    f.checkpoint = manifest.get("checkpoint")
    f.watermark_ms = manifest.get("watermark_ms")
    f.state_rows = int(manifest.get("rows", 0))
    f.state_keys = int(manifest.get("keys", 0))
    f.state_rows_expected = expected_state_rows(events, size_ms, f.watermark_ms)
    return f


def audit_table(kafka: dict[str, Any], sink_topic: str, table: str, catalog_conn_id: str) -> TableCheck:
    """The Iceberg table's rows on its main branch against the sink topic's committed records, by provenance: each
    record a row, once (`lockstep.ops.verify.check_table`)."""
    from lockstep.iceberg.table_sink import IcebergTable
    from lockstep.ops.table_check import check_table

    records: Counter[tuple[str, int, int]] = Counter()
    for _, msg in read_committed(kafka, (sink_topic,)):
        h = _headers(msg)
        records[(h[SOURCE_TOPIC].decode(), int(h[SOURCE_PARTITION]), int(h[SOURCE_OFFSET]))] += 1
    return check_table(table, IcebergTable(catalog_conn_id, table).provenance(), records)


def audit_dead_letters(kafka: dict[str, Any], source_topic: str, sink_topic: str, dead_letter_topic: str,
                       group: str, produced: dict[Offset, Produced], late_error: str = "late",
                       late_case: str = "late") -> tuple[AuditResult, int]:
    """The stateful soak's per-record audit: a window's output stands for many orders, so only the
    dead-letter topic is checked record by record. Every covered bad order is dead-lettered exactly
    once (lost: never; duplicated: more); a valid order is never dead-lettered; an order produced
    late is dead-lettered once as ``late`` or not at all (then it was counted in its window: no
    checkpoint had passed its window yet). Returns the result and how many dead letters were ``late``
    for an order the soak produced in order (``late_unplanned``). Sink records are counted only."""
    covered_to = committed_offsets(kafka, source_topic, group)
    covered = {key for key in produced if key[1] < covered_to.get(key[0], 0)}
    result = AuditResult(produced=len(produced), covered=len(covered), outputs=0)
    seen: Counter[Offset] = Counter()
    late_unplanned = 0
    for case in sorted({p.case for p in produced.values()}):
        result.cases[case] = CaseOutcome()
    for key, planned in produced.items():
        if key in covered:
            result.cases[planned.case].records += 1
    for topic, msg in read_committed(kafka, (sink_topic, dead_letter_topic)):
        result.outputs += 1
        if topic == sink_topic:
            continue  # windows: checked against their recomputation
        headers = _headers(msg)
        where = f"{topic}:{msg.partition()}@{msg.offset()}"
        try:
            if headers[SOURCE_TOPIC].decode() != source_topic:
                raise KeyError(SOURCE_TOPIC)
            key = (int(headers[SOURCE_PARTITION]), int(headers[SOURCE_OFFSET]))
        except (KeyError, ValueError):
            result.unexpected.append(f"{where} (no provenance of {source_topic})")
            continue
        rec = produced.get(key)
        if key not in covered or rec is None:
            result.unexpected.append(f"{where} (input {key[0]}@{key[1]} not covered by the group's offsets)")
            continue
        seen[key] += 1
        reason = (headers.get(ERROR_HEADER) or b"").decode(errors="replace")
        outcome = result.cases[rec.case]
        outcome.dead_lettered += 1
        outcome.reasons[_shorten(reason)] += 1
        if reason == late_error and rec.case != late_case:
            late_unplanned += 1
        elif rec.case == VALID or (rec.case == late_case and reason != late_error):
            result.unexpected.append(f"{where} (a valid order {key[0]}@{key[1]} dead-lettered: {reason[:80]})")
    for key in sorted(covered):
        case = produced[key].case
        if seen[key] == 0 and case not in (VALID, late_case):
            result.lost.append(key)
        elif seen[key] > 1:
            result.duplicated.append(key)
    return result, late_unplanned


def _headers(msg: Message) -> dict[str, bytes]:
    """A sink or dead-letter record's headers by name; one with a null value counts as missing (Lockstep
    writes none: its provenance and error headers always carry a value)."""
    return {name: value for name, value in record_headers(msg) if value is not None}


def _order_id(value: bytes | None) -> str | None:
    if value is None:  # a tombstone is not an order
        return None
    try:
        return cast(str, json.loads(value)["order_id"])
    except Exception:  # noqa: BLE001 - anything that is not an order is a mismatch
        return None


def _shorten(reason: str, limit: int = 160) -> str:
    import re

    reason = re.sub(r"\b\d+\b", "N", reason)  # sizes and offsets differ per record; the kind of reason matters
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


def committed_offsets(kafka: dict[str, Any], topic: str, group: str, patience_s: float = 90.0) -> dict[int, int]:
    """The group's committed offsets of ``topic``. Asked right after a broker fault, the group's
    coordinator may be moving (NOT_COORDINATOR, still loading): asked again until ``patience_s``."""
    import time

    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    moving = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
              KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._TRANSPORT}
    deadline = time.monotonic() + patience_s
    while True:
        consumer = Consumer({**kafka, "group.id": group, "enable.auto.commit": False, "log_level": 0})
        try:
            partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
            committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
            return {tp.partition: max(tp.offset, 0) for tp in committed}
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or error.code() not in moving or time.monotonic() > deadline:
                raise
        finally:
            consumer.close()
        time.sleep(1.0)


def read_committed(kafka: dict[str, Any], topics: tuple[str, ...]) -> Iterator[tuple[str, Message]]:
    """Every record of ``topics`` up to their last stable offsets, as a read_committed consumer sees them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka, "group.id": "lockstep-soak-auditor", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        assignment = []
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=30).topics[topic]
            assignment += [TopicPartition(topic, p, 0) for p in meta.partitions]
        consumer.assign(assignment)
        remaining = {(tp.topic, tp.partition) for tp in assignment}
        deadline = time.monotonic() + 300
        while remaining:
            if time.monotonic() > deadline:
                raise RuntimeError(f"auditor: could not read to the end of {sorted(remaining)} in 300 s")
            for msg in consumer.consume(1000, timeout=0.1):  # a short batch waits its whole timeout
                name, error = msg.topic(), msg.error()
                if error:
                    if error.code() == -191:  # _PARTITION_EOF
                        remaining.discard((name, msg.partition()))
                        continue
                    raise RuntimeError(f"auditor: reading {name}: {error}")
                assert name is not None  # a record read from a topic names it
                yield name, msg
    finally:
        consumer.close()


@dataclass
class Pinned:
    partition: str
    lso: int
    since: float
    until: float | None = None

    @property
    def seconds(self) -> float:
        return (self.until or time.monotonic()) - self.since


class LsoWatch:
    """Samples every output partition's last stable offset against its high watermark once a second.
    An interval in which a partition's LSO stays at one offset below the high watermark is a pin."""

    def __init__(self, kafka: dict[str, Any], topics: tuple[str, ...], interval_s: float = 1.0) -> None:
        from confluent_kafka.admin import AdminClient

        self._admin = AdminClient({**kafka, "log_level": 0})  # a broker down is expected: no log spam
        self._topics = topics
        self._interval = interval_s
        self.pins: list[Pinned] = []
        self._open: dict[str, Pinned] = {}
        self.samples = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lso-watch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a broker is down: the next sample tells
                self.errors += 1

    def sample(self) -> None:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        meta = self._admin.list_topics(timeout=5)
        tps = [TopicPartition(t, p) for t in self._topics for p in meta.topics[t].partitions]
        latest = {tp: OffsetSpec.latest() for tp in tps}
        lso = {f"{k.topic}:{k.partition}": f.result().offset for k, f in self._admin.list_offsets(
            latest, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=5).items()}
        hw = {f"{k.topic}:{k.partition}": f.result().offset for k, f in self._admin.list_offsets(
            latest, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=5).items()}
        now = time.monotonic()
        self.samples += 1
        for name in lso:
            pin = self._open.get(name)
            if pin is not None and lso[name] != pin.lso:
                pin.until = now
                del self._open[name]
                pin = None
            if pin is None and lso[name] < hw.get(name, lso[name]):
                pin = Pinned(name, lso[name], now)
                self._open[name] = pin
                self.pins.append(pin)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def longest(self, since: float = 0.0) -> float:
        """The longest pin that was open at or after ``since`` (monotonic seconds)."""
        spans = [p.seconds for p in self.pins if (p.until or time.monotonic()) >= since]
        return max(spans, default=0.0)

    def open_pins(self) -> list[Pinned]:
        return list(self._open.values())
