"""The run step in connect mode: the checkpoint's Spark job in a session of a long-lived Spark
Connect server, driven from this process.

The driver code of the run (`lockstep.sparkjob.run_checkpoint_job`) is the same as under
spark-submit; only the session differs. Each attempt gets a session of its own, with an id made
from the pipeline, the checkpoint and the attempt's number: attempt k asks for ids 0, 1, ... in
turn. An attempt that ended in its process released its session, and the server refuses a released
id (a released session runs nothing); the first id it does not refuse is either new or the session
of an attempt whose client was killed (an Airflow task SIGKILLed, a crashed CLI). Joining that one,
the new attempt interrupts whatever the killed one left running on the server before it writes, so
a stale task cannot re-initialise a transactional id after this attempt's tasks did.
"""
from __future__ import annotations

import logging
import time
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

log = logging.getLogger(__name__)

_NAMESPACE = uuid.UUID("7c1f0d4e-5b1a-4c52-9a51-1f8f3c0c2a10")
#: What the server answers for a session id it released: a new session is needed.
_CLOSED = ("SESSION_CLOSED", "INVALID_HANDLE.SESSION_CLOSED")


#: Attempts of one checkpoint whose sessions are looked for; beyond, a random id (nothing to find).
MAX_ATTEMPTS = 50


def checkpoint_session_id(pipeline: str, checkpoint_id: int, attempt: int) -> str:
    """The session id of an attempt of this checkpoint's run (a UUID, as Connect requires)."""
    made = uuid.uuid5(_NAMESPACE, f"{pipeline}/{checkpoint_id}/{attempt}")
    return str(uuid.UUID(bytes=made.bytes, version=4))


class ConnectRun:
    """The session of one attempt; ``stop()`` (the task's ``on_kill``) interrupts its queries."""

    def __init__(self, spark: Any, url: str) -> None:
        self.spark = spark
        self.url = url

    @property
    def session_id(self) -> str:
        return self.spark.session_id

    def stop(self) -> None:
        try:
            self.spark.interruptAll()
        except Exception as exc:  # noqa: BLE001 - best effort on the way out
            log.warning("could not interrupt Spark Connect session %s: %s", self.session_id, exc)


def _session(url: str, session_id: str | None) -> Any:
    from pyspark.sql import SparkSession

    address = url.rstrip("/") + (f"/;session_id={session_id}" if session_id else "")
    return SparkSession.builder.remote(address).create()


def _closed(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in _CLOSED)


@contextmanager
def checkpoint_session(url: str, pipeline: str, checkpoint_id: int) -> Iterator[ConnectRun]:
    """A Connect session for one attempt of the checkpoint's run, released on the way out."""
    started = time.monotonic()
    spark, interrupted = None, []
    for attempt in range(MAX_ATTEMPTS):
        spark = _session(url, checkpoint_session_id(pipeline, checkpoint_id, attempt))
        try:
            # New, or the session of an earlier attempt that was killed: stop whatever it still runs.
            interrupted = spark.interruptAll()
            break
        except Exception as exc:  # noqa: BLE001 - a released session is refused: try the next id
            if not _closed(exc):
                raise
            spark = None
    if spark is None:
        spark = _session(url, None)
    if interrupted:
        log.warning("checkpoint %d: interrupted %d operation(s) an earlier attempt left running in Spark Connect "
                    "session %s", checkpoint_id, len(interrupted), spark.session_id)
    log.info("checkpoint %d: Spark Connect session %s on %s ready in %.1f s", checkpoint_id, spark.session_id, url,
             time.monotonic() - started)
    run = ConnectRun(spark, url)
    try:
        yield run
    finally:
        try:
            spark.stop()  # releases the session on the server
        except Exception as exc:  # noqa: BLE001 - the run's own outcome is what matters
            log.warning("checkpoint %d: could not release Spark Connect session %s: %s", checkpoint_id,
                        spark.session_id, exc)
