"""Builds the I/O objects a pipeline needs from its spec and connection ids.

Kept apart from the coordinator so the coordinator's steps read as the protocol,
and tests can build the same objects the DAG tasks and the CLI use.
"""
from __future__ import annotations

__all__ = [
    "checkpoint_store", "committer_for_connection", "kafka_admin",
]

import time
from typing import TYPE_CHECKING

from lockstep.connections import kafka_config, s3_client
from lockstep.errors import TerminalError
from lockstep.spec import PipelineSpec
from lockstep.store.checkpoint_store import CheckpointStore

if TYPE_CHECKING:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    from lockstep.kafka.committer import TransactionCommitter


def checkpoint_store(spec: PipelineSpec, timeout_s: float | None = None) -> CheckpointStore:
    """The pipeline's checkpoint store; with ``timeout_s`` on a client that fails fast (see ``s3_client``)."""
    bucket, root = spec.checkpoint_location
    return CheckpointStore(s3_client(spec.checkpoints.aws_conn_id, timeout_s), bucket, root, spec.name)


#: How long opening an admin client waits to tell refused credentials from a slow cluster.
CREDENTIALS_CHECK_S = 10.0


class KafkaCredentialsError(TerminalError):
    """The brokers refused a connection's credentials or its TLS settings; a retry cannot help."""


def kafka_admin(conn_id: str, check_s: float = CREDENTIALS_CHECK_S) -> AdminClient:
    """A confluent-kafka admin client of the connection, once the brokers accepted its credentials.

    librdkafka (and kafka-python) retry a refused SASL authentication or TLS handshake until their
    timeouts and then report a transport failure: a wrong password would look like an unreachable
    cluster, 30 s later. The first metadata request tells them apart here: refused credentials are a
    TerminalError within a second or two; an unreachable cluster is left to the step's own timeouts.
    """
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    events: list[KafkaError] = []
    # confluent-kafka's stub leaves callbacks out of a config's value types; error_cb is one all the same
    admin = AdminClient({**kafka_config(conn_id), "log_level": 3, "error_cb": events.append})  # type: ignore[dict-item]
    deadline = time.monotonic() + check_s
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1)
            return admin
        except Exception:  # noqa: BLE001 - KafkaException; the reason arrives through error_cb
            admin.poll(0)
        refused = [e for e in events if e.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL)]
        if refused:
            what = ("the broker rejected its credentials; check sasl.mechanism, sasl.username and sasl.password"
                    if refused[0].code() == KafkaError._AUTHENTICATION else
                    "the TLS handshake with the broker failed; check ssl.ca.location (the CA that signed the "
                    "brokers' certificates) and ssl.endpoint.identification.algorithm")
            raise KafkaCredentialsError(f"Kafka connection {conn_id!r}: {what} in its extra ({refused[0].str()})")
        if any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in events):
            break  # nothing listens: the step's own timeouts and messages say so
    return admin


def transaction_committer(spec: PipelineSpec) -> TransactionCommitter:
    """The committer talks to the sink cluster, where the transactions live."""
    return committer_for_connection(spec.sink.kafka_conn_id)


def committer_for_connection(conn_id: str, retry_deadline_s: float = 60.0) -> TransactionCommitter:
    """A committer on the cluster of ``conn_id`` (a checkpoint planned with another sink connection);
    ``retry_deadline_s`` bounds its retries (the Checkpoints page gives up sooner than a task)."""
    from lockstep.kafka.committer import TransactionCommitter
    from lockstep.kafka.internals import KafkaTransactionAdmin

    return TransactionCommitter(KafkaTransactionAdmin.for_connection(conn_id), retry_deadline_s=retry_deadline_s)
