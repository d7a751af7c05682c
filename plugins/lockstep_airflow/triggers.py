"""The lag watcher of a lag-triggered pipeline (``checkpoints.trigger``): an Airflow event trigger.

The pipeline's DAG is scheduled on an Asset whose ``AssetWatcher`` runs `LockstepLagTrigger` in the
triggerer. The trigger looks at the source every ``poll_interval`` (the lag as ``lockstep status``
computes it: records up to the last stable offsets that no checkpoint has claimed) and fires, which
makes Airflow start a DAG run, when `lockstep.rules.lag_trigger.start_reason` says so. While the topic
is idle nothing fires and no run starts; the decision and why it is edge-triggered are in that module.

A look that fails (the broker or S3 away, the spec being edited) is logged and tried again at the next
look: a watcher that died would stop the pipeline with nothing in a task log to say why.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

log = logging.getLogger(__name__)


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

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"spec_path": self.spec_path, "pipeline": self.pipeline, "poll_s": self.poll_s})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            payload = await asyncio.to_thread(self.look)
            if payload is not None:
                yield TriggerEvent(payload)
                return
            await asyncio.sleep(self.poll_s)

    def look(self) -> dict[str, Any] | None:
        """One look at the source: the event's payload when a checkpoint should start (the marker is
        written first), else None. Blocking (Kafka and S3 clients): run off the event loop."""
        from lockstep.connections import redact
        from lockstep.ops.lag import trigger_look
        from lockstep.rules.lag_trigger import Fired, start_reason
        from lockstep.spec import load_spec
        from lockstep.steps.client_factory import checkpoint_store

        try:
            spec = load_spec(self.spec_path)
            if spec.checkpoints.trigger is None:
                self._problem(f"{self.spec_path} has no checkpoints.trigger any more; this watcher waits for the "
                              "DAG to be parsed again")
                return None
            store = checkpoint_store(spec, timeout_s=10)
            seen = trigger_look(spec, store)
            marker = store.trigger_fired()
            fired = Fired.from_json(marker[0]) if marker is not None else None
            now = time.time()
            reason = start_reason(seen, spec.checkpoints.trigger, fired, now,
                                  in_flight_lease_s=spec.transactions.timeout_ms / 1000)
            if reason is None:
                self._problem(None)
                return None
            if not store.record_trigger_fired(Fired(now, seen.newest_checkpoint).to_json(),
                                              replacing=marker[1] if marker is not None else None):
                log.info("pipeline %s: another instance of this watcher fired first; this one does not", self.pipeline)
                self._problem(None)
                return None
        except Exception as exc:  # noqa: BLE001 - logged and looked at again; see the module docstring
            self._problem(redact(f"{type(exc).__name__}: {exc}").splitlines()[0])
            return None
        log.info("pipeline %s: a checkpoint starts: %s", self.pipeline, reason)
        return {"pipeline": self.pipeline, "reason": reason, "unread": seen.unread,
                "newest_checkpoint": seen.newest_checkpoint}

    def _problem(self, problem: str | None) -> None:
        """Log a look's problem once, not every few seconds, and say when it has gone."""
        if problem != self._last_problem:
            if problem is not None:
                log.warning("pipeline %s: the lag could not be looked at (%s); looking again every %g s",
                            self.pipeline, problem, self.poll_s)
            elif self._last_problem is not None:
                log.info("pipeline %s: the lag is looked at again", self.pipeline)
        self._last_problem = problem
