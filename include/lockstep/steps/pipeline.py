"""A pipeline as its steps see it: the spec with the clients its steps use, and what more than one step does."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lockstep.connections import kafka_config
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointView,
)
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
    return aborted
