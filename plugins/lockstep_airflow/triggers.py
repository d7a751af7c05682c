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
- those reads are one request a connection, not one a watcher: quiet watchers look on the ticks of the clock
  their poll interval makes, and the looks that meet there are read together (`_StableOffsetsReads`);
- once it fired, the next looks list only the checkpoints newer than the one it saw, until the run it started
  has claimed one (`lockstep.rules.lag_trigger.waiting_for_claim`).
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Mapping
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


def _read_stable(conn_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    from lockstep.kafka import broker_offsets

    return broker_offsets.last_stable_offsets(_CLIENTS.admin(conn_id), partitions)


class _StableOffsetsReads:
    """The last stable offsets of the quiet watchers' sources, read in one request for all of a connection's
    watchers that look in the same moment, instead of one request a watcher a poll: 200 idle pipelines polling
    every second were 200 ListOffsets requests a second to the broker, and as many threads in the triggerer.

    A watcher asks (`read`); the first ask of a connection waits `GATHER_S` for the others of that moment (quiet
    watchers look on their poll's ticks of the clock, `until_tick_s`), then one request reads every partition
    asked for, and asks that came while it ran are read next. A request that fails answers None to each ask:
    one watcher's source may be the cause, so each reads its own (`LockstepLagTrigger.look`) and meets the error
    alone. Lives on the triggerer's event loop, one per loop (`_reads`): no lock."""

    GATHER_S = 0.05

    def __init__(self) -> None:
        self._asks: dict[str, list[tuple[list[TopicPartition], asyncio.Future[Mapping[TopicPartition, int] | None]]]]
        self._asks = {}
        self._reading: set[asyncio.Task[None]] = set()
        self._conns: set[str] = set()

    async def read(self, conn_id: str, partitions: list[TopicPartition]) -> Mapping[TopicPartition, int] | None:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Mapping[TopicPartition, int] | None] = loop.create_future()
        self._asks.setdefault(conn_id, []).append((partitions, answer))
        if conn_id not in self._conns:
            self._conns.add(conn_id)
            task = loop.create_task(self._read_for(conn_id))
            self._reading.add(task)
            task.add_done_callback(self._reading.discard)
        return await answer

    async def _read_for(self, conn_id: str) -> None:
        from lockstep.connections import redact

        asks: list[tuple[list[TopicPartition], asyncio.Future[Mapping[TopicPartition, int] | None]]] = []
        try:
            await asyncio.sleep(self.GATHER_S)
            while asks := self._asks.pop(conn_id, []):
                wanted = sorted({tp for tps, _ in asks for tp in tps})
                try:
                    offsets: dict[TopicPartition, int] | None = await asyncio.to_thread(_read_stable, conn_id, wanted)
                except Exception as exc:  # noqa: BLE001 - each watcher reads its own and meets the error alone
                    log.debug("the last stable offsets of %d watchers could not be read together: %s", len(asks),
                              redact(str(exc)))
                    offsets = None
                for tps, answer in asks:
                    if not answer.done():
                        answer.set_result(None if offsets is None else {tp: offsets[tp] for tp in tps})
        finally:
            self._conns.discard(conn_id)
            # cancelled (the triggerer stopping) mid-read: no ask is left waiting; each reads its own
            for _, answer in asks + self._asks.pop(conn_id, []):
                if not answer.done():
                    answer.set_result(None)


_READS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _StableOffsetsReads] = weakref.WeakKeyDictionary()


def _reads() -> _StableOffsetsReads:
    """The running event loop's `_StableOffsetsReads` (the triggerer runs its triggers on one loop)."""
    loop = asyncio.get_running_loop()
    if loop not in _READS:
        _READS[loop] = _StableOffsetsReads()
    return _READS[loop]


def until_tick_s(poll_s: float, now_s: float | None = None) -> float:
    """Seconds until the next tick of the clock that ``poll_s`` makes (a multiple of it since the epoch), at least
    a tenth of it: quiet watchers with the same poll interval look in the same moment, so their reads meet."""
    now_s = time.time() if now_s is None else now_s
    left = poll_s - now_s % poll_s
    return left + poll_s if left < poll_s / 10 else left


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
            stable = None
            if self._quiet_as_it_was():
                stable = await self.read_with_others()
                if stable is not None and self._still_quiet(stable):
                    await asyncio.sleep(until_tick_s(self.poll_s))
                    continue
            payload = await asyncio.to_thread(self.look, stable)
            if payload is not None:
                yield TriggerEvent(payload)
                return
            quiet = self._quiet is not None and self.next_look_s == self.poll_s
            await asyncio.sleep(until_tick_s(self.poll_s) if quiet else self.next_look_s)

    def _quiet_as_it_was(self) -> bool:
        """Whether the next look may start with the last stable offsets alone, read with the other watchers':
        the last look found the source quiet, no fire waits for its run's claim, and the spec file is the one
        parsed (`_load_spec` parses an edited one, in a thread)."""
        if self._quiet is None or self._pending is not None or self._spec is None:
            return False
        try:
            return self._spec_key() == self._spec[0]
        except OSError:
            return False

    async def read_with_others(self) -> Mapping[TopicPartition, int] | None:
        """The last stable offsets of the source's partitions, read together with the other quiet watchers'
        (`_StableOffsetsReads`); None when that read failed and this watcher reads its own."""
        assert self._spec is not None
        return await _reads().read(self._spec[1].source.kafka_conn_id, self._partitions)

    def _still_quiet(self, stable: Mapping[TopicPartition, int]) -> bool:
        from lockstep.rules.lag_trigger import still_quiet

        if not still_quiet(self._quiet, stable, time.time()):
            return False
        self.looks += 1
        self._problem(None)
        return True

    def look(self, stable: Mapping[TopicPartition, int] | None = None) -> dict[str, Any] | None:
        """One look at the source: the event's payload when a checkpoint should start (the marker is
        written first), else None; ``stable``: the partitions' last stable offsets when they were just read
        (`read_with_others`). Blocking (Kafka and S3 clients): run off the event loop."""
        from lockstep.connections import redact

        try:
            return self._look(stable)
        except Exception as exc:  # noqa: BLE001 - logged and looked at again; see the module docstring
            _CLIENTS.forget()
            self._spec, self._quiet, self._pending = None, None, None
            self._problem(redact(f"{type(exc).__name__}: {exc}").splitlines()[0])
            return None

    def _look(self, stable: Mapping[TopicPartition, int] | None = None) -> dict[str, Any] | None:
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
        if self._quiet is not None:
            if stable is None:
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

        key = self._spec_key()
        if self._spec is None or self._spec[0] != key:
            self._spec = (key, load_spec(self.spec_path))
            self._quiet = None
        return self._spec[1]

    def _spec_key(self) -> tuple[int, int, int]:
        st = os.stat(self.spec_path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _problem(self, problem: str | None) -> None:
        """Log a look's problem once, not every few seconds, and say when it has gone."""
        if problem != self._last_problem:
            if problem is not None:
                log.warning("pipeline %s: the lag could not be looked at (%s); looking again every %g s",
                            self.pipeline, problem, self.poll_s)
            elif self._last_problem is not None:
                log.info("pipeline %s: the lag is looked at again", self.pipeline)
        self._last_problem = problem
