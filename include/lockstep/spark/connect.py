"""The run step in connect mode: the checkpoint's Spark job in a session of a long-lived Spark
Connect server, driven from this process.

The driver code of the run (`lockstep.spark.job.run_checkpoint_job`) is the same as under
spark-submit; only the session differs.

**A warm session per pipeline.** The runs of `SESSION_EPOCH` checkpoints in a row share one session,
with an id made from the pipeline, its ``spark.conf``, the epoch (``checkpoint // SESSION_EPOCH``) and a
number k: a run asks for ids k = 0, 1, ... in turn and joins the first the server does not refuse (it
refuses a released id: a released session runs nothing). A run that ends well leaves the session open for
the next one, unless its checkpoint ends the epoch; one that fails releases it. Spark Connect gives each
session its own class loader, and Spark's cache of generated code is keyed by class loader, so with a new
session a checkpoint the server compiled the same query's classes again every time and ran them before the
JIT had optimised them (docs/benchmarks-making-faster.md, section 7, measures what that cost). The code
the executors' Python workers get is checked against what the session holds
(`lockstep.transform.ship_to_executors`): other code, a redeployed transform, releases it
(`lockstep.transform.StaleSession`) and the run takes the next id.

**Attempts.** Every attempt of a checkpoint asks for the same ids, so the first it does not refuse is the
warm session or that of an attempt whose client was killed (an Airflow task SIGKILLed, a crashed CLI).
Joining it, the new attempt interrupts whatever is left running there before it writes, so a stale task
cannot re-initialise a transactional id after this attempt's tasks did.
"""
from __future__ import annotations

__all__ = [
    "SESSION_EPOCH", "checkpoint_session", "connect_mode", "ends_epoch", "fail_fast_after",
    "hold_to_session", "new_session", "refused", "server_away", "warm_session_id",
]

import gc
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypedDict, cast

from lockstep.logs import redact_urls
from lockstep.transform import is_connect_session

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from lockstep.spark.target import JobSession

log = logging.getLogger(__name__)

_NAMESPACE = uuid.UUID("7c1f0d4e-5b1a-4c52-9a51-1f8f3c0c2a10")
#: What the server answers for a session id it released: a new session is needed.
_CLOSED = ("SESSION_CLOSED", "INVALID_HANDLE.SESSION_CLOSED")


#: Session ids looked for in turn (released ones are refused); beyond, a random id (nothing to find). At most
#: `SESSION_EPOCH` warm sessions of an epoch are released early (a failed run, a server that expired an idle
#: one), so the ids of an epoch do not run out in use.
MAX_ATTEMPTS = 50
#: Checkpoints in a row whose runs share one warm session; the run of the epoch's last releases it. A pipeline
#: therefore holds at most one open session on the server while it runs, whatever its rate.
SESSION_EPOCH = 32


def warm_session_id(pipeline: str, checkpoint_id: int, conf: Mapping[str, str], k: int) -> str:
    """The k-th session id of the runs of ``checkpoint_id``'s epoch (a UUID, as Connect requires): the same for
    every checkpoint of the epoch and every attempt, another for another ``spark.conf`` (a setting taken out
    of the spec must not stay set)."""
    settings = hashlib.sha256(json.dumps(sorted(conf.items())).encode()).hexdigest()[:16]
    made = uuid.uuid5(_NAMESPACE, f"{pipeline}/{settings}/{checkpoint_id // SESSION_EPOCH}/{k}")
    return str(uuid.UUID(bytes=made.bytes, version=4))


def ends_epoch(checkpoint_id: int) -> bool:
    """Whether the run of ``checkpoint_id`` is its warm session's last, which releases it."""
    return (checkpoint_id + 1) % SESSION_EPOCH == 0


class ConnectRun:
    """The session of one attempt; ``stop()`` (the task's ``on_kill``) interrupts its queries."""

    def __init__(self, spark: ConnectSession, url: str) -> None:
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


#: Set in ``os.environ`` by pyspark when a Connect session is created, and read by pyspark to
#: send ``pyspark.sql.functions`` to Connect's implementation. Inherited by a child process (a
#: spark-submit driver, ``lockstep verify``) it turns every classic session there into a demand
#: for a Connect URL, so `connect_mode` puts the environment back when the session is done.
_PYSPARK_MARKS = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@contextmanager
def connect_mode() -> Iterator[None]:
    """Around the use of Connect sessions: this process's environment as it was afterwards."""
    import os

    before = {name: os.environ.get(name) for name in _PYSPARK_MARKS}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class RetryPolicy(TypedDict):
    """Arguments of pyspark's ``DefaultPolicy`` (Connect's retries)."""

    max_retries: int
    initial_backoff: int
    backoff_multiplier: float
    max_backoff: int


#: How long a request waits for a Connect server that does not answer: pyspark's default retries
#: for at least 10 minutes; a run retries a few times over about 10 s (measured: 14 s to fail
#: against a refused port), then fails as retryable, and the run task's retry (or the next run)
#: takes it from there, as after a lost spark-submit.
RETRIES = RetryPolicy(max_retries=6, initial_backoff=100, backoff_multiplier=3.0, max_backoff=4000)


def new_session(url: str, session_id: str | None = None) -> ConnectSession:
    """A Connect session on ``url`` (with this id, if given); use it inside `connect_mode`."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    address = url.rstrip("/") + (f"/;session_id={session_id}" if session_id else "")
    # remote() makes a Connect session; pyspark types what the builder creates as its classic class
    spark = cast("ConnectSession", SparkSession.builder.remote(address).create())
    spark.client.set_retry_policies([DefaultPolicy(**RETRIES)])
    return spark


def refused(exc: BaseException) -> bool:
    """A gRPC error saying nothing listens at the server's address any more: it is down or restarting."""
    import grpc

    if not isinstance(exc, grpc.RpcError):
        return False
    try:
        # an RpcError raised by a call is also a grpc.Call, which has code() and details()
        return bool(exc.code() == grpc.StatusCode.UNAVAILABLE
                    and "Connection refused" in (exc.details() or ""))
    except AttributeError:
        return False


def hold_to_session(spark: ConnectSession) -> None:
    """Once ``spark`` is open on its server: a refused connection fails the call at once instead of
    through `RETRIES`. A session lives in its server's memory; a server that stopped (killed, restarted
    by its supervisor) took it along, so no retry could bring it back: waiting them out (10-15 s) only
    delayed the run's failure and so the retry of the checkpoint. Any other unavailability (a dropped
    stream, a network hiccup) is retried as before, and a session not yet open waits for a restarting
    server as before (`new_session`)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy, RetryPolicy

    class Refused(RetryPolicy):  # taken up, with no retry left: the call ends in RetriesExceeded at once
        def can_retry(self, exception: BaseException) -> bool:
            return refused(exception)

    class OnItsServer(DefaultPolicy):
        def can_retry(self, e: BaseException) -> bool:
            return not refused(e) and bool(super().can_retry(e))

    # A refused call must still end in RetriesExceeded, as any exhausted retry does (`server_away`,
    # `fail_fast_after`): an error no policy takes up would propagate as gRPC's own.
    spark.client.set_retry_policies([Refused(max_retries=0), OnItsServer(**RETRIES)])


#: The calls a run still makes once its server stopped answering (taking its settings out of the session's
#: conf, releasing the session) are tried once each, not through `RETRIES` again.
ONCE = RetryPolicy(max_retries=0, initial_backoff=100, backoff_multiplier=1.0, max_backoff=100)


def fail_fast_after(spark: object, exc: BaseException) -> None:
    """After ``exc``: when it says the server did not answer through the client's retries (killed, away), the
    session's later calls are tried once each. Each would otherwise wait out the retries again (10-15 s): a
    run whose server was killed while it wrote took 51 s to fail, measured, four times the retries (the
    write, then the JVM writer's and the reads' settings taken out of the conf, then the session's release).
    A server back by then still gets the calls (its session then holds no credentials); a dead one refuses
    each at once. A classic session, or any other failure: nothing changes."""
    from pyspark.errors.exceptions.base import RetriesExceeded

    # Only a Connect session has a client: a classic one's `client` property raises.
    if not isinstance(exc, RetriesExceeded) or not is_connect_session(spark):
        return
    from pyspark.sql.connect.client.retries import DefaultPolicy

    spark.client.set_retry_policies([DefaultPolicy(**ONCE)])  # type: ignore[attr-defined]


def server_away(exc: BaseException, url: str, source: str | None = None) -> str | None:
    """The cause to report when ``exc`` says the server at ``url`` stopped answering (killed,
    restarting, unreachable), else None: pyspark's own words there ("The maximum number of retries
    has been exceeded") name neither the server nor what to do. ``source`` says where the address
    came from (``connection spark_connect_default``, ``spark.remote``)."""
    from pyspark.errors.exceptions.base import RetriesExceeded

    if not isinstance(exc, RetriesExceeded):
        return None
    cause = exc.__cause__
    try:  # a grpc.RpcError: its status and details say why (refused, unavailable, deadline)
        # typed BaseException | None; anything but an RpcError fails into the except below
        detail = f"{cause.code().name}: {cause.details()}"[:300]  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - not a gRPC error: its first line
        detail = str(cause or exc).strip().splitlines()[0][:300]
    where = f" (from {source})" if source else ""
    way_out = "Check that it runs (`lockstep dev status`, or the server's own supervisor)"
    if source and source.startswith("connection "):
        way_out += f", or point the {source.split()[1]} connection at one that does"
    how = ("it refused the connection: it is down or restarting, and a run's session does not outlive its "
           "server" if isinstance(cause, BaseException) and refused(cause)
           else f"through {RETRIES['max_retries']} retries, 10-15 s")
    return f"the Spark Connect server at {redact_urls(url)}{where} did not answer ({how}): {detail}. {way_out}"


@contextmanager
def _active(spark: ConnectSession) -> Iterator[None]:
    """``spark`` as this thread's active session while the run uses it, the one before it after.

    pyspark 4.0 binds what a local checkpoint keeps (``localCheckpoint``) to the thread's *active*
    session, not to the session that made it, and a session made while another one is open does not
    become the active one: the kept result then names a relation the run's session has and the other
    one does not ("No DataFrame with id ... is found in the session"). pyspark has no public setter.
    """
    from pyspark.sql.connect.session import SparkSession

    local = SparkSession._active_session
    before = getattr(local, "session", None)
    local.session = spark
    try:
        yield
    finally:
        local.session = before


def _forget(spark: ConnectSession) -> None:
    """Drop a session the server refused, so pyspark does not keep it as this thread's active one."""
    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - it is closed on the server already
        pass


def _closed(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in _CLOSED)


@contextmanager
def checkpoint_session(url: str, pipeline: str, checkpoint_id: int,
                       conf: Mapping[str, str] | None = None) -> Iterator[ConnectRun]:
    """The pipeline's warm Connect session for one attempt of the checkpoint's run, left open on the way out
    for the next checkpoint's run unless this one ends the epoch or failed; ``conf`` (the spec's
    ``spark.conf``) is set on the session where Spark lets a session set it."""
    with connect_mode():
        with _attempt_session(url, pipeline, checkpoint_id, conf or {}) as run:
            set_session_conf(run.spark, conf or {}, checkpoint_id)
            yield run


def set_session_conf(spark: JobSession, conf: Mapping[str, str], checkpoint_id: int) -> list[str]:
    """Set the spec's ``spark.conf`` on a Connect session: runtime settings (``spark.sql.*`` and the
    like) apply per session; the others (executor memory, jars) belong to the server's own start and
    are named in a warning, not dropped in silence. Returns the keys that were not set."""
    ignored = []
    for key, value in conf.items():
        if key == "spark.speculation":
            continue  # always off (spec validation), and the server starts with it off
        try:
            modifiable = spark.conf.isModifiable(key)
        except Exception:  # noqa: BLE001 - an unknown key: Spark decides on set
            modifiable = True
        if modifiable:
            spark.conf.set(key, value)
        else:
            ignored.append(key)
    if ignored:
        log.warning("checkpoint %d: spark.conf %s cannot be set on a Spark Connect session (they are the "
                    "server's start-up settings) and do not apply to this run; set them where the server "
                    "starts, or use spark.mode: submit", checkpoint_id, ", ".join(sorted(ignored)))
    return ignored


@contextmanager
def _attempt_session(url: str, pipeline: str, checkpoint_id: int, conf: Mapping[str, str]) -> Iterator[ConnectRun]:
    started = time.monotonic()
    spark, interrupted = None, []
    for k in range(MAX_ATTEMPTS):
        spark = new_session(url, warm_session_id(pipeline, checkpoint_id, conf, k))
        try:
            # New, warm, or the session of an earlier attempt that was killed: stop whatever it still runs.
            interrupted = spark.interruptAll()
            break
        except Exception as exc:
            if not _closed(exc):
                raise
            _forget(spark)
            spark = None
    if spark is None:
        spark = new_session(url, None)
    hold_to_session(spark)
    if interrupted:
        log.warning("checkpoint %d: interrupted %d operation(s) an earlier attempt left running in Spark Connect "
                    "session %s", checkpoint_id, len(interrupted), spark.session_id)
    log.info("checkpoint %d: Spark Connect session %s on %s ready in %.1f s", checkpoint_id, spark.session_id,
             redact_urls(url), time.monotonic() - started)
    run = ConnectRun(spark, url)
    keep = not ends_epoch(checkpoint_id)
    try:
        with _active(spark):
            yield run
    except BaseException:
        keep = False  # whatever a failed run left set or running goes with its session
        raise
    finally:
        if keep:
            # A run's local checkpoints are released as their DataFrames are collected while the client is
            # open (pyspark's CachedRemoteRelation); a kept session would hold those in a cycle until it ends.
            gc.collect()
        spark.release_session_on_close = not keep
        try:
            spark.stop()  # closes this process's connection; releases the session on the server unless kept
        except Exception as exc:  # noqa: BLE001 - the run's own outcome is what matters
            log.warning("checkpoint %d: could not release Spark Connect session %s: %s", checkpoint_id,
                        spark.session_id, exc)
