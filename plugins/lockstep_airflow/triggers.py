"""The lag watcher of a lag-triggered pipeline (``checkpoints.trigger``): an Airflow event trigger.

The pipeline's DAG is scheduled on an Asset whose ``AssetWatcher`` runs `LockstepLagTrigger` in the
triggerer. The trigger looks at the source every ``poll_interval`` (the lag as ``lockstep status``
computes it: records up to the last stable offsets that no checkpoint has claimed) and fires, which
makes Airflow start a DAG run, when `lockstep.rules.lag_trigger.start_reason` says so. While the topic
is idle nothing fires and no run starts; the decision and why it is edge-triggered are in that module.

A look that fails (the broker or S3 away, the spec being edited) is logged and tried again at the next
look: a watcher that died would stop the pipeline with nothing in a task log to say why.

**Hundreds of watchers in one triggerer.** Every lag-triggered pipeline has a watcher, and most topics are
idle most of the time, so a look must cost little when nothing happens:

- the Kafka admin and S3 clients are the triggerer's, one per connection id, shared by every watcher's
  looks (`_SharedClients`), instead of two new clients a look (one admin client is also a handful of
  librdkafka threads);
- the spec is parsed again only when its file changed;
- once a look found the source quiet, the next looks read only the broker's last stable offsets and stop
  there while they do not move (`lockstep.rules.lag_trigger.still_quiet`);
- once it fired, the next looks list only the checkpoints newer than the one it saw, until the run it started
  has claimed one (`lockstep.rules.lag_trigger.waiting_for_claim`).
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

if TYPE_CHECKING:
    from lockstep.kafka.topics import TopicAdmin
    from lockstep.model.offsets import TopicPartition
    from lockstep.rules.lag_trigger import Fired, Quiet
    from lockstep.spec import PipelineSpec
    from lockstep.store.checkpoint_store import CheckpointStore
    from lockstep.store.s3 import S3Client

log = logging.getLogger(__name__)


class _SharedClients:
    """The triggerer's Kafka admin and S3 clients by connection id, shared by every watcher's looks (which run in
    threads). They are built again after `TTL_S`, so that a connection changed in Airflow takes effect, and
    after any look that failed (`forget`)."""

    TTL_S = 300.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._admins: dict[str, TopicAdmin] = {}
        self._s3: dict[str, S3Client] = {}
        self._since = time.monotonic()

    def _fresh(self) -> None:
        if time.monotonic() - self._since > self.TTL_S:
            self._admins.clear()
            self._s3.clear()
            self._since = time.monotonic()

    def admin(self, conn_id: str) -> TopicAdmin:
        from lockstep.steps.client_factory import kafka_admin

        with self._lock:
            self._fresh()
            if conn_id not in self._admins:
                self._admins[conn_id] = kafka_admin(conn_id)
            return self._admins[conn_id]

    def store(self, spec: PipelineSpec) -> CheckpointStore:
        from lockstep.steps.client_factory import checkpoint_store

        with self._lock:  # boto3 builds clients on a session that is not thread-safe
            self._fresh()
            return checkpoint_store(spec, timeout_s=10, clients=self._s3)

    def forget(self) -> None:
        with self._lock:
            self._admins.clear()
            self._s3.clear()


_CLIENTS = _SharedClients()


class LockstepLagTrigger(BaseEventTrigger):
    """Fires once when a checkpoint of ``pipeline`` should start (its spec at ``spec_path``).

    The pipeline name is in the arguments so that two pipelines' watchers never share a trigger row
    (Airflow shares rows between watchers with equal arguments)."""

    def __init__(self, spec_path: str, pipeline: str, poll_s: float = 5.0) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # BaseEventTrigger.__init__ is unannotated
        self.spec_path = spec_path
        self.pipeline = pipeline
        self.poll_s = poll_s
        self._last_problem: str | None = None
        self._spec: tuple[tuple[int, int, int], PipelineSpec] | None = None
        #: what the last look that read the store left, while the source is quiet, and the partitions it saw
        self._quiet: Quiet | None = None
        self._partitions: list[TopicPartition] = []
        #: the fire whose run has yet to claim its checkpoint, while it has (`waiting_for_claim`)
        self._pending: Fired | None = None
        #: looks made, and of them those that read the store (the log line of a fire says both)
        self.looks = self.full_looks = 0
        #: seconds until the next look: ``poll_s``, or less when checkpoints.trigger.min_interval ends sooner
        self.next_look_s = poll_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"spec_path": self.spec_path, "pipeline": self.pipeline, "poll_s": self.poll_s})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            payload = await asyncio.to_thread(self.look)
            if payload is not None:
                yield TriggerEvent(payload)
                return
            await asyncio.sleep(self.next_look_s)

    def look(self) -> dict[str, Any] | None:
        """One look at the source: the event's payload when a checkpoint should start (the marker is
        written first), else None. Blocking (Kafka and S3 clients): run off the event loop."""
        from lockstep.connections import redact

        try:
            return self._look()
        except Exception as exc:  # noqa: BLE001 - logged and looked at again; see the module docstring
            _CLIENTS.forget()
            self._spec, self._quiet, self._pending = None, None, None
            self._problem(redact(f"{type(exc).__name__}: {exc}").splitlines()[0])
            return None

    def _look(self) -> dict[str, Any] | None:
        from lockstep.kafka import broker_offsets, topics
        from lockstep.ops.lag import trigger_look
        from lockstep.rules.lag_trigger import (
            Fired,
            interval_left_s,
            quiet,
            start_reason,
            still_quiet,
            waiting_for_claim,
        )

        self.next_look_s = self.poll_s
        spec = self._load_spec()
        if spec.checkpoints.trigger is None:
            self._problem(f"{self.spec_path} has no checkpoints.trigger any more; this watcher waits for the "
                          "DAG to be parsed again")
            return None
        self.looks += 1
        if self._pending is not None and waiting_for_claim(self._pending, self._pending.newest_checkpoint, time.time()):
            newer = next(iter(_CLIENTS.store(spec).checkpoint_ids(after=self._pending.newest_checkpoint)), None)
            if newer is None:
                return None
        self._pending = None
        admin = _CLIENTS.admin(spec.source.kafka_conn_id)
        stable = None
        if self._quiet is not None:
            stable = broker_offsets.last_stable_offsets(admin, self._partitions)
            if still_quiet(self._quiet, stable, time.time()):
                self._problem(None)
                return None
        self.full_looks += 1
        partitions = topics.partitions(admin, spec.source.topics)
        if stable is None or partitions != self._partitions:
            stable = broker_offsets.last_stable_offsets(admin, partitions)
        store = _CLIENTS.store(spec)
        seen = trigger_look(spec, store, admin, read_first=(partitions, stable))
        marker = store.trigger_fired()
        fired = Fired.from_json(marker[0]) if marker is not None else None
        now = time.time()
        reason = start_reason(seen, spec.checkpoints.trigger, fired, now,
                              in_flight_lease_s=spec.transactions.timeout_ms / 1000)
        self._problem(None)
        if reason is None:
            self._quiet, self._partitions = quiet(seen, stable, now), partitions
            self._pending = fired if waiting_for_claim(fired, seen.newest_checkpoint, now) else None
            if (left := interval_left_s(seen, spec.checkpoints.trigger, fired, now)) > 0:
                self.next_look_s = min(self.poll_s, left + 0.05)  # look again as the interval ends
            return None
        self._quiet = None
        if not store.record_trigger_fired(Fired(now, seen.newest_checkpoint).to_json(),
                                          replacing=marker[1] if marker is not None else None):
            log.info("pipeline %s: another instance of this watcher fired first; this one does not", self.pipeline)
            return None
        log.info("pipeline %s: a checkpoint starts: %s (this watcher looked %d times, %d of them at the store)",
                 self.pipeline, reason, self.looks, self.full_looks)
        return {"pipeline": self.pipeline, "reason": reason, "unread": seen.unread,
                "newest_checkpoint": seen.newest_checkpoint}

    def _load_spec(self) -> PipelineSpec:
        """The spec, parsed again only when its file changed (its inode, size or modification time)."""
        from lockstep.spec import load_spec

        st = os.stat(self.spec_path)
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._spec is None or self._spec[0] != key:
            self._spec = (key, load_spec(self.spec_path))
            self._quiet = None
        return self._spec[1]

    def _problem(self, problem: str | None) -> None:
        """Log a look's problem once, not every few seconds, and say when it has gone."""
        if problem != self._last_problem:
            if problem is not None:
                log.warning("pipeline %s: the lag could not be looked at (%s); looking again every %g s",
                            self.pipeline, problem, self.poll_s)
            elif self._last_problem is not None:
                log.info("pipeline %s: the lag is looked at again", self.pipeline)
        self._last_problem = problem
