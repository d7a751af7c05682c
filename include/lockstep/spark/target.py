"""Where a checkpoint's Spark run goes: a spark-submit per checkpoint, or a session on a Spark
Connect server that outlives the checkpoints (pure: connections are looked up by the caller).

* ``spark.mode: submit`` — ``spark-submit --master M``: M is the spec's ``spark.master``, else the
  ``spark_default`` connection's (host, and port if any, as Airflow's spark provider reads it),
  else ``local[*]``.
* ``spark.mode: connect`` — a Connect session on ``sc://host:port``: the spec's ``spark.remote``,
  else the ``spark_default`` connection when it is a Connect endpoint (host ``sc://…`` or type
  ``spark_connect``), else the ``spark_connect_default`` connection (Airflow's id for Connect).
* no ``spark.mode`` — connect, the default; a spec that names only ``spark.master`` means submit
  (a master has no use in connect mode).

Either way the job gets a session (`JobSession`): a classic one in the spark-submit driver, a
Connect one in the run step's process.
"""
from __future__ import annotations

__all__ = [
    "CONNECT", "JobSession", "SPARK_CONNECT_CONN_ID", "SparkEndpoint", "SparkTarget", "connect_url",
    "resolve_target", "spark_target",
]

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from lockstep.errors import LockstepError, TerminalError
from lockstep.spec import PipelineSpec, SparkSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SUBMIT, CONNECT = "submit", "connect"
SPARK_CONN_ID = "spark_default"
SPARK_CONNECT_CONN_ID = "spark_connect_default"
CONNECT_SCHEME = "sc://"
#: The port a Spark Connect server listens on unless told otherwise.
DEFAULT_CONNECT_PORT = 15002


@dataclass(frozen=True)
class SparkEndpoint:
    """What the run needs of a Spark connection (`lockstep.connections.Connection`'s fields)."""

    conn_type: str | None
    host: str | None
    port: int | None = None


@dataclass(frozen=True)
class SparkTarget:
    mode: str
    #: The master URL (submit) or the ``sc://host:port`` URL (connect).
    address: str
    #: Where the address came from, for the log and for errors.
    source: str


Lookup = Callable[[str], SparkEndpoint | None]


class JobReader(Protocol):
    """The part of a session's ``DataFrameReader`` the job reads Kafka (and the JVM writer's results) with."""

    def format(self, source: str) -> JobReader: ...

    def option(self, key: str, value: str) -> JobReader: ...

    def load(self) -> DataFrame: ...


class SessionConf(Protocol):
    """The part of a session's runtime configuration the run sets: the spec's ``spark.conf`` on a
    Connect session (`lockstep.spark.connect.set_session_conf`), the JVM writer's settings for one write."""

    def set(self, key: str, value: str) -> None: ...

    def unset(self, key: str) -> None: ...

    def isModifiable(self, key: str) -> bool: ...


class JobSession(Protocol):
    """What the checkpoint's Spark job uses of its session (`lockstep.spark.job.run_checkpoint_job`):
    pyspark's classic ``SparkSession`` (spark-submit) and its Connect ``SparkSession`` (connect mode)
    alike, which share no base class; and the session fake of the tests (``tests/support/fake_spark``)."""

    @property
    def read(self) -> JobReader: ...

    @property
    def conf(self) -> SessionConf: ...

    def range(self, start: int, end: int | None = None) -> Any: ...


def is_connect_endpoint(endpoint: SparkEndpoint | None) -> bool:
    return endpoint is not None and (endpoint.conn_type == "spark_connect"
                                     or (endpoint.host or "").startswith(CONNECT_SCHEME))


def connection_master(host: str | None, port: int | None) -> str:
    """A master URL from a Spark connection, as Airflow's spark provider reads it: the host holds
    the URL (``spark://h``, ``local[*]``, ``yarn``), the port, if any, is appended."""
    if not host:
        return "local[*]"
    return f"{host}:{port}" if port else host


def connect_url(host: str, port: int | None) -> str:
    """``sc://host:port`` from a connection whose host is ``host`` or ``sc://host`` (the port in the
    connection's port field or in the host; else Connect's default, 15002)."""
    address = host[len(CONNECT_SCHEME):] if host.startswith(CONNECT_SCHEME) else host
    address = address.rstrip("/")
    if port:
        address = f"{address.split(':')[0]}:{port}"
    elif ":" not in address:
        address = f"{address}:{DEFAULT_CONNECT_PORT}"
    return CONNECT_SCHEME + address


def resolve_target(spark: SparkSpec, lookup: Lookup) -> SparkTarget:
    """The run's mode and address (see the module's doc); ``lookup`` returns None for a
    connection that is not defined."""
    mode = spark.mode
    if mode is None:
        mode = SUBMIT if spark.master and not spark.remote else CONNECT
    if mode == SUBMIT:
        if spark.master:
            return SparkTarget(SUBMIT, spark.master, "spark.master")
        default = lookup(SPARK_CONN_ID)
        if default is not None and not is_connect_endpoint(default):
            return SparkTarget(SUBMIT, connection_master(default.host, default.port), f"connection {SPARK_CONN_ID}")
        return SparkTarget(SUBMIT, "local[*]", "the default (no spark.master, no Spark connection)")
    if spark.remote:
        return SparkTarget(CONNECT, spark.remote, "spark.remote")
    for conn_id in (SPARK_CONN_ID, SPARK_CONNECT_CONN_ID):
        endpoint = lookup(conn_id)
        if endpoint is not None and (is_connect_endpoint(endpoint) or conn_id == SPARK_CONNECT_CONN_ID) \
                and endpoint.host:
            return SparkTarget(CONNECT, connect_url(endpoint.host, endpoint.port), f"connection {conn_id}")
    raise TerminalError(
        f"spark.mode is connect (the default) but no Spark Connect endpoint is set: give the spec spark.remote "
        f"(sc://HOST:PORT), or define the {SPARK_CONN_ID} connection with host sc://HOST, or the "
        f"{SPARK_CONNECT_CONN_ID} connection (for the local platform: `lockstep dev up` starts a Connect "
        "server and `lockstep dev env` exports it); or set spark.mode: submit to run a spark-submit per "
        "checkpoint")


def spark_target(spec: PipelineSpec) -> SparkTarget:
    """Where this checkpoint's run goes (`lockstep.spark.target`), with the connections looked up
    here: from Airflow inside a task, from ``AIRFLOW_CONN_*`` in the CLI."""
    from lockstep.connections import get_connection

    def lookup(conn_id: str) -> SparkEndpoint | None:
        try:
            conn = get_connection(conn_id)
        except LockstepError:  # not defined
            return None
        return SparkEndpoint(conn.conn_type, conn.host, conn.port)

    return resolve_target(spec.spark, lookup)
