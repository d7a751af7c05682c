"""What a checkpoint was planned with, against what its spec says now (pure decisions).

Plan pins the spec values a checkpoint depends on in its claim (`checkpoint.PlannedWith`).
Every later step of that checkpoint — its Spark run, its commit, the next run's recovery —
uses the pinned values, so editing the spec while a checkpoint is in flight takes effect
from the next checkpoint planned, as a Flink job change takes effect from a savepoint. A few
changes cannot be honoured that way; `refusal` says which, and how to get out.
"""
from __future__ import annotations

__all__ = [
    "Resolved", "Step", "pinned_clock", "planned_with", "prefix_changes", "refusal", "resolve_pinned",
    "transactions_deadline_ms",
]

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from lockstep.model.checkpoint import (
    CheckpointClaim,
    CheckpointStatus,
    CheckpointView,
    PlannedWith,
    PreparedCheckpoint,
)
from lockstep.model.transactions import utc_text
from lockstep.rules.commit_decision import DecisionKind
from lockstep.spec import PipelineSpec


def planned_with(spec: PipelineSpec) -> PlannedWith:
    """The values of ``spec`` a checkpoint planned now depends on."""
    return PlannedWith(
        source_topics=tuple(spec.source.topics), source_kafka_conn_id=spec.source.kafka_conn_id,
        sink_topic=spec.sink.topic, dead_letter_topic=spec.sink.dead_letter_topic, sink_writer=spec.sink.writer,
        sink_kafka_conn_id=spec.sink.kafka_conn_id, id_prefix=spec.transactions.id_prefix,
        timeout_ms=spec.transactions.timeout_ms,
        sink_parallelism=spec.sink.parallelism if spec.sink.parallelism is not None else "auto",
    )


@dataclass(frozen=True)
class SpecChange:
    """One spec field edited since a checkpoint was planned."""

    field: str  # the spec's name for it, e.g. "transactions.id_prefix"
    old: object  # a value of `PlannedWith`: topics (a tuple), a name or a timeout
    new: object

    def __str__(self) -> str:
        return f"{self.field} {_show(self.old)} -> {_show(self.new)}"


def _show(value: object) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


def spec_changes(planned: PlannedWith, now: PlannedWith) -> tuple[SpecChange, ...]:
    """The fields whose value differs, in the order of ``PlannedWith.FIELDS``."""
    return tuple(SpecChange(name, planned.value(name), now.value(name))
                 for name, _ in PlannedWith.FIELDS if planned.value(name) != now.value(name))


class Step(str, Enum):
    RUN = "Spark run"
    COMMIT = "commit"
    RECOVERY = "recovery"


@dataclass(frozen=True)
class Resolved:
    """The values one step of a checkpoint uses, and how they compare with the spec now."""

    checkpoint_id: int
    #: what the step uses: the claim's values, or the spec's for a claim that did not record them.
    values: PlannedWith
    #: False for claims of earlier Lockstep versions: `values` are then the spec's current ones.
    recorded: bool
    changes: tuple[SpecChange, ...] = ()

    def changed(self, field: str) -> SpecChange | None:
        return next((c for c in self.changes if c.field == field), None)

    def notice(self, step: Step) -> str | None:
        """The log line a step writes about this checkpoint's values, or None when there is nothing to say."""
        cid = self.checkpoint_id
        if not self.recorded:
            v = self.values
            return (f"checkpoint {cid}: its claim does not record the spec values it was planned with (an earlier "
                    f"Lockstep version claimed it), so the {step.value} uses the spec's current ones: "
                    f"transactions.id_prefix {v.id_prefix!r}, sink.topic {v.sink_topic!r}, sink.kafka_conn_id "
                    f"{v.sink_kafka_conn_id!r}. If you edited them after checkpoint {cid} was planned, restore them "
                    f"until it is settled")
        if not self.changes:
            return None
        return (f"checkpoint {cid}: the spec changed since it was planned ({'; '.join(map(str, self.changes))}); "
                f"the {step.value} keeps the values it was planned with, and the change takes effect from the next "
                "checkpoint planned")


def resolve_pinned(claim: CheckpointClaim, spec: PipelineSpec) -> Resolved:
    """The values every step of ``claim``'s checkpoint uses: the claim's, else the spec's."""
    now = planned_with(spec)
    if claim.planned_with is None:
        return Resolved(claim.checkpoint_id, now, recorded=False)
    return Resolved(claim.checkpoint_id, claim.planned_with, True, spec_changes(claim.planned_with, now))


def refusal(resolved: Resolved, step: Step, decision: DecisionKind | None = None,
            deadline_ms: int | None = None) -> str | None:
    """Why ``step`` must not go on with the values the checkpoint was planned with, or None.

    Topics, writer, prefix and timeout are honoured from the claim. A connection is not: a
    checkpoint planned for one cluster and carried out on another would read other records
    (source) or put its output on a cluster the pipeline has left (sink). So the Spark run
    refuses either change; a commit refuses a sink change only when it would commit something
    (``decision`` COMMIT) — aborting, or completing what is already committed, stays allowed,
    because that is how such a checkpoint gets settled without restoring the old value.
    ``deadline_ms``, when known, is when the checkpoint's transactions time out by themselves.
    """
    cid = resolved.checkpoint_id
    source, sink = resolved.changed("source.kafka_conn_id"), resolved.changed("sink.kafka_conn_id")
    if step is Step.RUN and source is not None:
        return (f"{_changed(source, cid)}: its ranges are offsets on the cluster of {source.old!r}, and reading "
                f"them from {source.new!r} would read other records. Restore source.kafka_conn_id: {source.old} until "
                f"checkpoint {cid} is settled, or let it abort: the next run's plan aborts checkpoint {cid} and plans "
                "again from the last completed checkpoint's offsets, which are offsets on the old cluster too")
    if step is Step.RUN and sink is not None:
        return (f"{_changed(sink, cid)}: its transactions belong on the cluster of {sink.old!r}, and writing them "
                f"to either cluster would split the output between the two. Restore sink.kafka_conn_id: {sink.old} "
                f"until checkpoint {cid} is settled, or let it abort: the next run's plan fences checkpoint {cid}'s "
                f"transactions through connection {sink.old!r} (it must still be defined) and replays its ranges "
                f"into {sink.new!r}")
    if step is Step.COMMIT and sink is not None and decision is DecisionKind.COMMIT:
        by = f", by about {utc_text(deadline_ms)}" if deadline_ms is not None else ""
        return (f"{_changed(sink, cid)}: its transactions are open on the cluster of {sink.old!r}, and committing "
                f"them would put its output there while the pipeline now writes to {sink.new!r}. Restore "
                f"sink.kafka_conn_id: {sink.old} until checkpoint {cid} is settled (its output is then committed on "
                f"the old cluster), or let it abort: its transactions time out on the old cluster "
                f"(transactions.timeout_ms={resolved.values.timeout_ms}{by}); the next run then aborts checkpoint "
                f"{cid} and replays its ranges into {sink.new!r}")
    return None


def prefix_changes(views: Sequence[CheckpointView], id_prefix: str) -> dict[str, str]:
    """One log line per earlier prefix that checkpoints in flight (claimed or prepared) were planned with.

    Recovery acts on them under that prefix (and fences lingering ids under the current one too);
    Flink logs a changed transactional id prefix on restore in the same way.
    """
    by_prefix: dict[str, list[int]] = {}
    for view in sorted(views, key=lambda v: v.checkpoint_id):
        planned = view.claim.planned_with
        if view.status in (CheckpointStatus.CLAIMED, CheckpointStatus.PREPARED) and planned is not None \
                and planned.id_prefix != id_prefix:
            by_prefix.setdefault(planned.id_prefix, []).append(view.checkpoint_id)
    lines = {}
    for old, cids in by_prefix.items():
        which = f"checkpoint{'s' if len(cids) > 1 else ''} {', '.join(map(str, cids))}"
        lines[old] = (f"transactions.id_prefix changed from {old!r} to {id_prefix!r} while {which} "
                      f"{'were' if len(cids) > 1 else 'was'} in flight: recovering {which} under {old!r}, the prefix "
                      f"{'they were' if len(cids) > 1 else 'it was'} planned with, and fencing lingering transactions "
                      f"under {id_prefix!r} too")
    return lines


def transactions_deadline_ms(prepared: PreparedCheckpoint, timeout_ms: int) -> int | None:
    """About when a prepared checkpoint's last transaction times out by itself (its writer opened it
    at ``opened_at_ms``; the broker's clock starts at its first record, a little later)."""
    opened = prepared.opened_at_ms
    return max(opened) + timeout_ms if opened else None


def _changed(change: SpecChange, cid: int) -> str:
    return f"{change.field} changed from {change.old!r} to {change.new!r} since checkpoint {cid} was planned"


def pinned_clock(starts: Mapping[str, int], base_written_by: int | None, earlier: Sequence[CheckpointView],
                 now_ms: int) -> tuple[int, int | None]:
    """The wall-clock time a new checkpoint's claim pins, and the earlier checkpoint it comes from (or None).

    A checkpoint is a function of its claim (DESIGN.md, invariant 11), and the clock is part of the
    claim: the watermark's idleness is measured against it, nothing in the run reads the wall clock.
    A checkpoint that starts where an aborted one started (the same start offsets and the same base
    state) replays it, so it takes that one's clock: a run aborted after prepare and planned again
    minutes later fires the same windows, calls the same records late and expires the same keys.
    ``earlier``: the checkpoints after the latest completed one (aborted or failed attempts), any order.
    Otherwise the clock is ``now_ms``.
    """
    for view in sorted(earlier, key=lambda v: v.checkpoint_id, reverse=True):
        claim = view.claim
        if claim.clock_ms is None:
            continue
        base = claim.state_base.written_by if claim.state_base is not None else None
        if base == base_written_by and {r.tp.key: r.start for r in claim.ranges} == dict(starts):
            return claim.clock_ms, view.checkpoint_id
    return now_ms, None
