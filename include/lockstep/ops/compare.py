"""``lockstep replay --compare``: what a new version of a pipeline would have written for the input its
completed checkpoints committed, record by record against what they wrote.

Each checkpoint is a function of its claim (DESIGN.md): its ranges, its base state and pinned clock, the
registry schemas and table versions it pinned. So the same input can be run again through new code: each
compared checkpoint's output is computed again through the new spec's transform, routes, formats and
state operator, from that checkpoint's own claim (`lockstep.spark.job.replay_output`: the run's stages,
nothing written: no transaction, no state or table files, nothing in the sinks). Its committed records are
read back from the sink topics (``read_committed``, by their checkpoint and pipeline headers) and the two are
compared by provenance (`lockstep.rules.output_diff`).

With the pipeline's own spec every comparison must be empty: a standing check that the runs are
deterministic. What cannot be compared is reported, never guessed: input that retention deleted, a
checkpoint whose run the new spec cannot make (its error), table dead letters (their records are not read
again). The schemas: the claim's pinned ids while the new spec's formats are the claim's
(`lockstep.rules.replay.fingerprint`), else the registry's latest, as a new claim would pin them.

Both sides of a checkpoint are held in this process while it is compared: for the last checkpoints of a
pipeline, not a backfill's millions (``--last``, ``--from-checkpoint``).
"""
from __future__ import annotations

__all__ = [
    "Comparison", "committed_records", "compare", "compare_pipeline", "exit_code", "output_records",
]

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lockstep.connections import kafka_config, redact
from lockstep.errors import root_cause
from lockstep.model.output_contract import (
    CHECKPOINT_HEADER,
    ERROR_HEADER,
    LEADING_HEADERS,
    ORIGINAL_SIZE_HEADER,
    PIPELINE_HEADER,
    REPLAY_HEADER,
    ROUTE_COLUMN,
)
from lockstep.rules.output_diff import DEAD_LETTERS, SINK, CheckpointDiff, OutputRecord, diff_checkpoint
from lockstep.rules.replay import fingerprint
from lockstep.rules.state_diff import StateDiff, diff_state
from lockstep.spec import PipelineSpec, StateSpec

if TYPE_CHECKING:
    from lockstep.kafka.reader import CommittedRecord
    from lockstep.model.checkpoint import CheckpointView
    from lockstep.model.offsets import TopicPartition
    from lockstep.spark.keyed_state import StateAfter
    from lockstep.spark.target import JobSession
    from lockstep.store.checkpoint_store import CheckpointStore

log = logging.getLogger(__name__)

#: Lockstep's own headers: where a record came from, never what the code made of it.
_OWN_HEADERS = frozenset((*LEADING_HEADERS, ERROR_HEADER, ORIGINAL_SIZE_HEADER))


@dataclass
class Comparison:
    """The report: each compared checkpoint's difference, their total, and what could not be compared."""

    pipeline: str
    spec: str  #: the new spec's file
    compared_at: str
    checkpoints: list[CheckpointDiff] = field(default_factory=list)
    total: CheckpointDiff = field(default_factory=lambda: CheckpointDiff(-1))
    #: checkpoint id -> why it could not be compared
    not_compared: dict[int, str] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return all(d.empty for d in self.checkpoints)

    def to_json(self) -> dict[str, object]:
        return {"pipeline": self.pipeline, "spec": self.spec, "compared_at": self.compared_at, "same": self.same,
                "compared": [d.checkpoint_id for d in self.checkpoints],
                "total": {k: v for k, v in self.total.to_json().items() if k != "checkpoint"},
                "checkpoints": [d.to_json() for d in self.checkpoints],
                "not_compared": {str(k): v for k, v in sorted(self.not_compared.items())}, "notices": self.notices}

    def summary(self) -> dict[str, object]:
        """The report without any record's or state row's value (for XCom): which checkpoints, the totals' figures,
        what was not compared and why."""
        doc = {k: v for k, v in self.to_json().items() if k != "checkpoints"}
        total = {k: v for k, v in self.total.to_json().items() if k not in ("checkpoint", "examples", "state")}
        if self.total.state is not None:  # a stateful pipeline's: its figures, not its rows
            total["state"] = {k: v for k, v in self.total.state.to_json().items() if k != "examples"}
        doc["total"] = total
        return doc

    def lines(self) -> list[str]:
        ids = [d.checkpoint_id for d in self.checkpoints]
        head = (f"{self.pipeline}: {len(ids)} completed checkpoint{'s' if len(ids) != 1 else ''} "
                + (f"({ids[0]}-{ids[-1]}) " if ids else "") + f"computed again through {self.spec}: "
                + self.verdict())
        lines = [head, *self.notices]
        lines += [d.line() for d in self.checkpoints if not d.empty]
        if self.checkpoints:
            lines.append(self.total.line())
        shown = [e.line() for e in self.total.examples]
        shown += [e.line() for e in self.total.state.examples] if self.total.state is not None else []
        if shown:
            lines.append("examples:")
            lines += [f"  {line}" for line in shown]
        lines += [f"not compared: checkpoint {cid}: {why}" for cid, why in sorted(self.not_compared.items())]
        return lines

    def verdict(self) -> str:
        """'the same output' (and state), or what changes: the output, the state, or both."""
        stateful = any(d.state is not None for d in self.checkpoints)
        if self.same:
            return "the same output and state" if stateful else "the same output"
        output = not all(d.same_output for d in self.checkpoints)
        state = any(d.state is not None and not d.state.empty for d in self.checkpoints)
        return "the output and the state change" if output and state else \
            "the output changes" if output else "the state changes"


def exit_code(report: Comparison) -> int:
    """0: every compared checkpoint the same and every one compared; 1: some output or state changes; 2: nothing
    changes, but some checkpoint could not be compared."""
    if not report.same:
        return 1
    return 2 if report.not_compared or not report.checkpoints else 0


def output_records(rows: Iterable[Mapping[str, Any]]) -> list[OutputRecord]:
    """The computed output (the writers' columns) as the records a write would produce: a dead letter (an
    ``error``) to the dead letters, a routed record to its route's topic, the rest to the sink."""
    records = []
    for r in rows:
        error = r.get("error")
        route = r.get(ROUTE_COLUMN)
        role = DEAD_LETTERS if error is not None else route if route is not None else SINK
        headers = tuple((h["key"], _bytes(h["value"])) for h in (r.get("headers") or ()))
        records.append(OutputRecord((r["topic"], int(r["partition"]), int(r["offset"])), role, _bytes(r.get("key")),
                                    _bytes(r["value"]), headers, None if error is None else str(error)))
    return records


def committed_records(spec: PipelineSpec, records: Iterable[CommittedRecord], checkpoints: set[int]
                      ) -> dict[int, list[OutputRecord]]:
    """The records ``spec``'s pipeline committed in ``checkpoints``, by checkpoint: those its pipeline and
    checkpoint headers name (a dead-letter replay's and other producers' records are not its own)."""
    from lockstep.ops.verify import provenance

    found: dict[int, list[OutputRecord]] = {cid: [] for cid in checkpoints}
    for record in records:
        headers = record.headers
        named = dict(headers)
        if REPLAY_HEADER in named or (named.get(PIPELINE_HEADER) or b"").decode(errors="replace") != spec.name:
            continue
        try:
            cid = int(named.get(CHECKPOINT_HEADER) or b"")
            source = provenance(named)
        except ValueError:
            continue  # unreadable headers: `lockstep verify` reports them
        if source is None:
            continue
        if cid not in found:
            continue
        if record.topic == spec.sink.dead_letter_topic:
            role = DEAD_LETTERS
        else:
            role = SINK if record.topic == spec.sink.topic else record.topic
        error = named.get(ERROR_HEADER)
        found[cid].append(OutputRecord(
            source, role, record.key, record.value, tuple((k, v) for k, v in headers if k not in _OWN_HEADERS),
            None if error is None or role != DEAD_LETTERS else error.decode(errors="replace")))
    return found


def compare(running: PipelineSpec, new: PipelineSpec, views: Sequence[CheckpointView], store: CheckpointStore,
            spark: JobSession, committed: Callable[[set[int]], dict[int, list[OutputRecord]]],
            log_starts: Mapping[TopicPartition, int], examples: int = 5) -> Comparison:
    """``views`` (completed checkpoints of ``running``'s pipeline) computed again through ``new`` and compared
    with what they committed (``committed`` reads it, by checkpoint); input below ``log_starts`` is gone."""
    from lockstep.spark.job import replay_output

    report = Comparison(running.name, new.path, datetime.now(UTC).isoformat(timespec="seconds"))
    computed: dict[int, list[OutputRecord]] = {}
    states: dict[int, StateDiff] = {}
    for view in views:
        cid = view.checkpoint_id
        gone = [r for r in view.claim.ranges if not r.is_empty and r.start < log_starts.get(r.tp, 0)]
        if gone:
            report.not_compared[cid] = (f"its input {gone[0]} was deleted by retention (the log starts at "
                                        f"{log_starts.get(gone[0].tp, 0)})")
            continue
        if not view.claim.needs_spark:  # no records, no timer due: nothing written, then or now
            computed[cid] = []
            continue
        repair = view.completed.repair if view.completed is not None else None
        if repair is not None and repair.accepted:
            report.not_compared[cid] = (f"completed after a repair that accepted {repair.accepted}: it did not "
                                        "commit what its claim computes")
            continue
        same_pins = view.claim.fingerprint is not None and view.claim.fingerprint == fingerprint(new)
        try:
            replayed = replay_output(new, view, spark, store, None if same_pins else {})
            try:
                computed[cid] = output_records(row.asDict(recursive=True) for row in replayed.out.collect())
                if replayed.stateful is not None:
                    assert running.state is not None and new.state is not None  # what a stateful run means
                    states[cid] = state_compared(view, replayed.stateful.after(), store, running.state, new.state,
                                                 examples)
            finally:
                if replayed.stateful is not None:
                    replayed.stateful.discard()
        except Exception as exc:  # noqa: BLE001 - reported, the other checkpoints go on
            cause = redact(root_cause(exc))  # a client's or Spark's words may quote a connection
            log.warning("checkpoint %d: not computed again: %s", cid, cause)
            report.not_compared[cid] = f"not computed again through {new.path}: {cause}"
        if not same_pins and view.claim.schema_ids:
            notice = ("the new spec's formats differ from those the checkpoints pinned: their records are decoded "
                      "and encoded with the registry's latest schemas")
            if notice not in report.notices:
                report.notices.append(notice)
    if running.tables:
        report.notices.append("table records that did not decode (dead letters of a table) are not compared")
    before = committed(set(computed))
    for cid in sorted(computed):
        old = before.get(cid, [])
        if running.tables:
            sources = set(running.source.topics)
            old = [r for r in old if r.source[0] in sources]
        diff = diff_checkpoint(cid, old, computed[cid], examples)
        diff.state = states.get(cid)
        report.checkpoints.append(diff)
        report.total.add(diff, examples)
    return report


def state_compared(view: CheckpointView, after: StateAfter, store: CheckpointStore, running: StateSpec,
                   new: StateSpec, examples: int = 5) -> StateDiff:
    """The state ``view``'s checkpoint committed (``running``'s) against the state its run again through ``new``
    leaves (``after``), over every key of the key groups either touched: the groups the run read or wrote, and
    those whose files the checkpoint changed. Elsewhere both are the base's rows (the claim's base state). Rows past
    their lifetime are left out on each side, by its own spec and watermark."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from lockstep.model.state_rows import KEY
    from lockstep.store.state_chain import unexpired

    committed = view.completed.state if view.completed is not None else None
    base = view.claim.state_base
    groups = set(after.groups)
    if committed is not None:
        old_files = base.files if base is not None else {}
        groups |= {g for g in set(committed.files) | set(old_files) if committed.files.get(g) != old_files.get(g)}
    files = store.state_files()
    before = files.read_state(committed, groups) if committed is not None else None
    if before is not None and committed is not None:
        before = unexpired(before, running, committed.watermark_ms)
    kept = files.read_state(base, groups) if base is not None else None
    parts = [after.rows]
    if kept is not None and kept.num_rows:
        kept = kept.filter(pc.invert(pc.is_in(kept[KEY], value_set=pa.array(sorted(after.touched), pa.string()))))
        kept = unexpired(kept, new, after.watermark_ms)
        parts.insert(0, kept)
    rows = [r for part in parts for r in part.to_pylist()]
    return diff_state(before.to_pylist() if before is not None else [], rows, examples)


def chosen(store: CheckpointStore, first: int | None, last: int | None, newest: int | None
           ) -> list[CheckpointView]:
    """The completed checkpoints from ``first`` to ``last`` (each inclusive), or the ``newest`` so many, in order."""
    views = []
    for cid in store.checkpoint_ids(after=first - 1 if first else None):
        if last is not None and cid > last:
            break
        view = store.view(cid)
        if view is not None and view.completed is not None:
            views.append(view)
    return views[-newest:] if newest else views


def compare_pipeline(running: PipelineSpec, new: PipelineSpec, first: int | None = None, last: int | None = None,
                     newest: int | None = None, examples: int = 5) -> Comparison:
    """The comparison as ``lockstep replay --compare`` runs it: the running pipeline's store and sinks, the
    Spark its checkpoints run on, and the report kept in the store for the Checkpoints page."""
    from lockstep.errors import TerminalError
    from lockstep.kafka.reader import read_committed
    from lockstep.ops.verify import audit_session, source_log_starts
    from lockstep.steps.client_factory import checkpoint_store
    from lockstep.store.checkpoint_store import COMPARISON

    if running.sink.table_only:
        raise TerminalError(f"{running.path}: {running.name} lands its records in an Iceberg table alone (no "
                            "sink.topic): `replay --compare` reads what each checkpoint committed from the sink topics "
                            "and cannot compare a table's rows yet (docs/iceberg.md). Run the new version as a new "
                            "pipeline into another table and compare the two with Spark SQL")
    store = checkpoint_store(running)
    views = chosen(store, first, last, newest)
    log_starts = source_log_starts(running, {v.checkpoint_id: v.claim.ranges for v in views})

    def committed(checkpoints: set[int]) -> dict[int, list[OutputRecord]]:
        if not checkpoints:
            return {}
        records = read_committed(kafka_config(running.sink.kafka_conn_id),
                                 (*running.sink.topics, running.sink.dead_letter_topic),
                                 f"lockstep-compare-{running.name}", lambda topic: f"reading {topic} to compare")
        return committed_records(running, records, checkpoints)

    with audit_session(running, "compare") as spark:
        report = compare(running, new, views, store, spark, committed, log_starts, examples)
    store.record_note(COMPARISON, report.to_json())
    return report


def _bytes(value: Any) -> bytes | None:
    """A column's value as the writers produce it: a string as its UTF-8 bytes; bytes, bytearray or memoryview
    (as Spark hands binary over) as bytes."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return bytes(value)
