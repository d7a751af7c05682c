"""Connection ids resolved the way Airflow resolves them, without needing Airflow.

A spec names connection ids (``kafka_default``, ``aws_default``). Airflow reads
``AIRFLOW_CONN_<ID>`` environment variables (JSON) before its database; the CLI,
the Spark job and tests read the same variables, and inside an Airflow worker we
fall back to Airflow's own lookup for connections defined in the UI.

This module resolves connections into client settings (`kafka_config`, `s3_client_kwargs`); it makes no
client. The clients are made from those settings by ``lockstep.kafka`` (``kafka.clients``) and
``lockstep.store`` (``store.s3``), which never import this module: ``lockstep.steps.client_factory``
puts the two together for a connection id.
"""
from __future__ import annotations

__all__ = [
    "Connection", "connection_env", "get_connection", "iceberg_catalog", "kafka_config", "redact", "s3_client_kwargs",
]

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lockstep.errors import TerminalError
from lockstep.kafka.client_configs import CONFLUENT, ClientConfig, client_configs
from lockstep.logs import redact_urls


@dataclass(frozen=True)
class Connection:
    conn_id: str
    conn_type: str | None = None
    host: str | None = None
    login: str | None = None
    password: str | None = None
    #: JSON, as Airflow keeps it; Any because readers reach into its nesting (``service_config.s3``)
    extra: dict[str, Any] = field(default_factory=dict)
    port: int | None = None


#: Extra fields that hold secrets (Kafka's SASL password, a TLS key's password, an AWS secret).
SECRET_EXTRAS = ("sasl.password", "ssl.key.password", "aws_secret_access_key", "aws_session_token",
                 # an Iceberg catalog's (its client's properties): the S3 secret, an OAuth2 credential or token
                 "s3.secret-access-key", "s3.session-token", "credential", "token")
#: Shorter values are not redacted: replacing every "x" in a message would hide the message.
MIN_REDACTED = 4
_seen_secrets: set[str] = set()


def _remember(conn: Connection) -> Connection:
    for value in (conn.password, *(conn.extra.get(k) for k in SECRET_EXTRAS)):
        if isinstance(value, str) and len(value) >= MIN_REDACTED:
            _seen_secrets.add(value)
    return conn


def known_secrets() -> list[str]:
    """The secrets of every connection this process has resolved or could resolve from its
    ``AIRFLOW_CONN_*`` environment, longest first (for redaction)."""
    for name, raw in os.environ.items():
        if name.startswith("AIRFLOW_CONN_"):
            try:
                _remember(_parse(name[len("AIRFLOW_CONN_"):].lower(), raw))
            except Exception:  # noqa: BLE001 - a malformed variable is reported where it is used
                pass
    return sorted(_seen_secrets, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every known connection secret replaced by ``***``, and the credentials of every URL in
    it (`lockstep.logs.redact_urls`)."""
    for secret in known_secrets():
        text = text.replace(secret, "***")
    return redact_urls(text)


def get_connection(conn_id: str) -> Connection:
    return _remember(_lookup(conn_id))


def _lookup(conn_id: str) -> Connection:
    raw = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    if raw is not None:
        return _parse(conn_id, raw)
    try:
        from airflow.sdk import BaseHook  # only inside Airflow

        hook: type[BaseHook] | None = BaseHook
    except Exception:  # noqa: BLE001 - Airflow absent or not configured
        hook = None
    if hook is not None:
        try:
            c = hook.get_connection(conn_id)
            return Connection(conn_id, c.conn_type, c.host, c.login, c.password, dict(c.extra_dejson or {}), c.port)
        except Exception as exc:
            raise TerminalError(f"connection {conn_id!r} is not defined in Airflow: {exc}") from exc
    raise TerminalError(
        f"connection {conn_id!r} is not defined: set AIRFLOW_CONN_{conn_id.upper()} "
        f"(for the local platform: eval \"$(lockstep dev env)\")"
    )


def _parse(conn_id: str, raw: str) -> Connection:
    if not raw.lstrip().startswith("{"):
        raise TerminalError(f"AIRFLOW_CONN_{conn_id.upper()} must be JSON (URI form is not supported by the CLI)")
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TerminalError(f"AIRFLOW_CONN_{conn_id.upper()} is not valid JSON: {exc}") from exc
    extra = doc.get("extra") or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    return Connection(conn_id, doc.get("conn_type"), doc.get("host"), doc.get("login"), doc.get("password"), extra,
                      doc.get("port"))


def connection_env(conn_ids: Iterable[str]) -> dict[str, str]:
    """The connections as ``AIRFLOW_CONN_<ID>`` JSON variables, the form :func:`get_connection`
    reads first: how a process without Airflow (the Spark job) is handed its connections."""
    env: dict[str, str] = {}
    for conn_id in dict.fromkeys(conn_ids):
        c = get_connection(conn_id)
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(
            {"conn_type": c.conn_type, "host": c.host, "login": c.login, "password": c.password, "port": c.port,
             "extra": c.extra})
    return env


def kafka_config(conn_id: str, dialect: str = CONFLUENT) -> ClientConfig:
    """A Kafka connection's settings for one client library (``lockstep.kafka.client_configs``):
    confluent-kafka by default, ``JAVA`` for Spark and the JVM writer, ``KAFKA_PYTHON`` for the
    committer. Like Airflow's Kafka provider, only ``extra`` is used. Every dialect is checked,
    so a setting one client cannot express fails the first step that resolves the connection."""
    conn = get_connection(conn_id)
    return client_configs(conn_id, conn.extra).for_dialect(dialect)


def iceberg_catalog(conn_id: str) -> dict[str, str]:
    """The Iceberg REST catalog client's properties (pyiceberg's ``load_catalog``) from an Airflow connection:
    its extra as they are (``s3.endpoint``, ``s3.access-key-id``, ``s3.secret-access-key``, ``warehouse``,
    ``credential``...), ``uri`` from the host when the extra has none, and the password as the catalog's
    ``token`` when the extra has no ``token`` or ``credential``."""
    conn = get_connection(conn_id)
    props = {str(k): str(v) for k, v in conn.extra.items() if v is not None}
    if "uri" not in props:
        if not conn.host:
            raise TerminalError(f"connection {conn_id!r}: an Iceberg catalog connection needs its REST catalog's URI, "
                                "as its host (http://host:port) or as extra.uri")
        host = conn.host if "://" in conn.host else f"http://{conn.host}"
        props["uri"] = f"{host}:{conn.port}" if conn.port else host
    if conn.password and "token" not in props and "credential" not in props:
        props["token"] = conn.password
        _seen_secrets.add(conn.password)
    return props


def s3_client_kwargs(conn_id: str) -> dict[str, object]:
    """The S3 client's arguments from an Airflow AWS connection (login/password = key/secret), for
    `lockstep.store.s3.s3_client`."""
    conn = get_connection(conn_id)
    extra = conn.extra
    kwargs: dict[str, object] = {}
    endpoint = extra.get("endpoint_url") or extra.get("service_config", {}).get("s3", {}).get("endpoint_url")
    if endpoint:
        kwargs["endpoint_url"] = endpoint
    if conn.login:
        kwargs["aws_access_key_id"] = conn.login
        kwargs["aws_secret_access_key"] = conn.password
    if extra.get("region_name"):
        kwargs["region_name"] = extra["region_name"]
    return kwargs
