"""Builds the I/O objects a pipeline needs from its spec and connection ids.

Kept apart from the coordinator so the coordinator's steps read as the protocol,
and tests can build the same objects the DAG tasks and the CLI use.
"""
from __future__ import annotations

__all__ = [
    "checkpoint_store", "committer_for_connection", "kafka_admin", "s3_client",
]

from collections.abc import MutableMapping
from typing import TYPE_CHECKING

from lockstep.connections import kafka_config, s3_client_kwargs
from lockstep.kafka.client_configs import KAFKA_PYTHON
from lockstep.kafka.clients import CREDENTIALS_CHECK_S, checked_admin
from lockstep.spec import PipelineSpec
from lockstep.store import s3
from lockstep.store.checkpoint_store import CheckpointStore

if TYPE_CHECKING:
    from lockstep.kafka.committer import TransactionCommitter
    from lockstep.kafka.topics import TopicAdmin
    from lockstep.store.s3 import S3Client


def s3_client(conn_id: str, timeout_s: float | None = None, max_pool_connections: int | None = None) -> S3Client:
    """An S3 client of the AWS connection ``conn_id`` (`lockstep.store.s3.s3_client`): patient by default
    (DAG tasks), or one that gives up after about ``timeout_s`` seconds per call (a page view, a DAG file
    being parsed); ``max_pool_connections`` for a client many threads share."""
    return s3.s3_client(s3_client_kwargs(conn_id), timeout_s, max_pool_connections)


def checkpoint_store(spec: PipelineSpec, timeout_s: float | None = None,
                     clients: MutableMapping[str, S3Client] | None = None,
                     max_pool_connections: int | None = None) -> CheckpointStore:
    """The pipeline's checkpoint store; with ``timeout_s`` on a client that fails fast (see ``s3_client``).
    ``clients``: S3 clients by AWS connection id, all built with this ``timeout_s``, to reuse and to add to
    (a DAG file's parse reads every pipeline's store: one client per connection, not one per pipeline; a
    boto3 client costs about 17 ms of CPU to build). ``max_pool_connections``: see ``s3_client``."""
    bucket, root = spec.checkpoint_location
    conn_id = spec.checkpoints.aws_conn_id
    client = clients.get(conn_id) if clients is not None else None
    if client is None:
        client = s3_client(conn_id, timeout_s, max_pool_connections)
        if clients is not None:
            clients[conn_id] = client
    return CheckpointStore(client, bucket, root, spec.name)


def kafka_admin(conn_id: str, check_s: float = CREDENTIALS_CHECK_S) -> TopicAdmin:
    """An admin client of the Kafka connection, once the brokers accepted its credentials
    (`lockstep.kafka.clients.checked_admin`: refused credentials are a ``KafkaCredentialsError``)."""
    return checked_admin(kafka_config(conn_id), conn_id, check_s)


def transaction_committer(spec: PipelineSpec) -> TransactionCommitter:
    """The committer talks to the sink cluster, where the transactions live."""
    return committer_for_connection(spec.sink.kafka_conn_id)


def committer_for_connection(conn_id: str, retry_deadline_s: float = 60.0) -> TransactionCommitter:
    """A committer on the cluster of ``conn_id`` (a checkpoint planned with another sink connection);
    ``retry_deadline_s`` bounds its retries (the Checkpoints page gives up sooner than a task)."""
    from lockstep.kafka.committer import TransactionCommitter
    from lockstep.kafka.internals import KafkaTransactionAdmin

    admin = KafkaTransactionAdmin.from_configs(kafka_config(conn_id, KAFKA_PYTHON), kafka_config(conn_id))
    return TransactionCommitter(admin, retry_deadline_s=retry_deadline_s)
