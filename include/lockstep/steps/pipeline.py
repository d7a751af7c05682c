"""A pipeline as its steps see it: the spec with the clients its steps use, and what more than one step does
(marking a checkpoint aborted, publishing its end offsets, awaiting calls on threads of their own). The steps
(`plan`, `recover`, `commit`, `run`) are peers above this module: each imports it, none imports another
for a helper."""
from __future__ import annotations

__all__ = [
    "Pipeline",
]

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lockstep.connections import kafka_config
from lockstep.kafka import broker_offsets
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointView,
)
from lockstep.model.offsets import TopicPartition, offsets_from_json
from lockstep.rules.pinned import resolve_pinned
from lockstep.rules.recovery import replay_hint
from lockstep.spec import PipelineSpec
from lockstep.steps.client_factory import (
    checkpoint_store,
    committer_for_connection,
    kafka_admin,
    transaction_committer,
)

if TYPE_CHECKING:
    from lockstep.kafka.client_configs import ClientConfig
    from lockstep.kafka.committer import Committer
    from lockstep.kafka.topics import TopicAdmin
    from lockstep.store.checkpoint_store import PipelineStore

log = logging.getLogger(__name__)


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class Pipeline:
    """A spec with the clients its steps use; built once per task."""

    spec: PipelineSpec
    store: PipelineStore
    #: the source cluster's admin client (topics, offsets), and its settings (consumer group offsets)
    source_admin: TopicAdmin
    source_kafka: ClientConfig
    #: a committer on the spec's sink cluster
    committer_factory: Callable[[], Committer]
    wall_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    #: committers on other sink clusters, by connection id: for checkpoints planned with another
    #: ``sink.kafka_conn_id`` than the spec's current one.
    committer_for: Callable[[str], Committer] = field(default=committer_for_connection)

    def committer(self, conn_id: str | None = None) -> Committer:
        """A committer on the cluster of ``conn_id``; None (or the spec's own) is the spec's sink cluster."""
        if conn_id is None or conn_id == self.spec.sink.kafka_conn_id:
            return self.committer_factory()
        return self.committer_for(conn_id)

    @classmethod
    def open(cls, spec: PipelineSpec) -> Pipeline:
        source_admin = kafka_admin(spec.source.kafka_conn_id)
        if spec.sink.kafka_conn_id != spec.source.kafka_conn_id:
            kafka_admin(spec.sink.kafka_conn_id)  # refused credentials fail now, not in the committer 30 s later
        return cls(spec, checkpoint_store(spec), source_admin, kafka_config(spec.source.kafka_conn_id),
                   lambda: transaction_committer(spec))


def unusable_sink(checkpoint_id: int, planned_conn: str, spec_conn: str, exc: Exception) -> str:
    return (f"it was planned with sink.kafka_conn_id {planned_conn!r} (the spec now says {spec_conn!r}) and its "
            f"transactions live on that cluster, but the connection cannot be used: {exc}. Define connection "
            f"{planned_conn!r} again (or restore sink.kafka_conn_id: {planned_conn}) until checkpoint {checkpoint_id} "
            "is settled")


def mark_aborted(p: Pipeline, view: CheckpointView, reason: str) -> AbortedCheckpoint:
    latest = p.store.latest_completed()
    replay_from = f"checkpoint {latest.checkpoint_id}" if latest else "the pipeline's start offsets"
    hint = replay_hint(view.claim.ranges, replay_from)
    aborted = AbortedCheckpoint(p.spec.name, view.checkpoint_id, now_iso(), reason, hint)
    p.store.mark_aborted(aborted)
    log.error("checkpoint %d aborted: %s; %s", view.checkpoint_id, reason, hint)
    drop_staged(p, view.checkpoint_id, before=False)
    return aborted


def drop_staged(p: Pipeline, checkpoint_id: int, before: bool) -> None:
    """The Iceberg sink's staged branch of an aborted checkpoint dropped (``before``: of every checkpoint before
    ``checkpoint_id``, which are all settled). Housekeeping: a staged branch is never on main, so a failure here
    is a warning, and the next completed checkpoint's commit drops what is left."""
    iceberg = p.spec.sink.iceberg
    if iceberg is None:
        return
    from lockstep.errors import LockstepError
    from lockstep.iceberg.staged_table import branch_name
    from lockstep.iceberg.table_sink import IcebergTable

    table = IcebergTable(iceberg.catalog_conn_id, iceberg.table)
    try:
        if not table.exists():
            return
        if before:
            dropped = [b for cid, b in sorted(table.branches(p.spec.name).items()) if cid < checkpoint_id
                       and table.drop(b)]
            if dropped:
                log.info("checkpoint %d: dropped the staged branches of earlier checkpoints of %s: %s", checkpoint_id,
                         iceberg.table, ", ".join(dropped))
        elif table.drop(branch_name(p.spec.name, checkpoint_id)):
            log.info("checkpoint %d: dropped its snapshot staged on %s", checkpoint_id, iceberg.table)
    except LockstepError as exc:
        log.warning("checkpoint %d: could not drop staged branches of Iceberg table %s (%s); nothing of them is on "
                    "its main branch, and the next completed checkpoint drops them", checkpoint_id, iceberg.table, exc)


#: The most EndTxn requests a commit has in flight at once (one thread each; kafka-python's client sends
#: them over its connections from its IO thread).
COMMIT_THREADS = 16


def each_together(fn: Callable[[str], object], items: Sequence[str], threads: int | None = None) -> list[BaseException]:
    """``fn`` on every item, each on a thread of its own (at most ``threads``, default `COMMIT_THREADS`), all
    awaited; returns the errors in the items' order (none: every call returned)."""
    if len(items) <= 1:
        errors: list[BaseException] = []
        for item in items:
            try:
                fn(item)
            except Exception as exc:  # noqa: BLE001 - handed back like the threads' errors
                errors.append(exc)
        return errors
    with ThreadPoolExecutor(min(threads or COMMIT_THREADS, len(items)), thread_name_prefix="lockstep-commit") as pool:
        futures = [pool.submit(fn, item) for item in items]
        return [e for e in (f.exception() for f in futures) if e is not None]


def _is_latest_completed(p: Pipeline, checkpoint_id: int) -> bool:
    latest = p.store.latest_completed()
    return latest is not None and latest.checkpoint_id == checkpoint_id


def publish_end_offsets(p: Pipeline, view: CheckpointView) -> None:
    """Publish end offsets for lag tools; never backwards unless this checkpoint was a restore and is
    still the latest completed one (committing an older restore again must not undo what followed)."""
    group = p.spec.source.consumer_group
    moved = resolve_pinned(view.claim, p.spec).changed("source.kafka_conn_id")
    if moved is not None:
        log.warning("checkpoint %d: not publishing its end offsets to consumer group %s: they are offsets on the "
                    "cluster of %r, and source.kafka_conn_id is now %r", view.checkpoint_id, group, moved.old,
                    moved.new)
        return
    assert view.completed is not None  # only completed checkpoints are published
    ends = offsets_from_json(view.completed.end_offsets)
    current = broker_offsets.group_offsets(p.source_kafka, group, list(ends))
    allow_backwards = view.claim.restored_from is not None and _is_latest_completed(p, view.checkpoint_id)
    target: dict[TopicPartition, int] = {}
    for tp, end in ends.items():
        if tp in current and current[tp] > end and not allow_backwards:
            log.warning("checkpoint %d: group %s is at %d on %s, ahead of %d; not moving it backwards",
                        view.checkpoint_id, group, current[tp], tp.key, end)
        elif current.get(tp) != end:
            target[tp] = end
    broker_offsets.publish_offsets(p.source_kafka, group, target)
    if target:
        log.info("checkpoint %d: published offsets of %d partitions to consumer group %s", view.checkpoint_id,
                 len(target), group)
