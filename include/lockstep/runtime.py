"""Builds the I/O objects a pipeline needs from its spec and connection ids.

Kept apart from the coordinator so the coordinator's steps read as the protocol,
and tests can build the same objects the DAG tasks and the CLI use.
"""
from __future__ import annotations

from typing import Any

from lockstep.connections import kafka_config, s3_client
from lockstep.kafka_clients import KAFKA_PYTHON
from lockstep.spec import PipelineSpec
from lockstep.store import CheckpointStore


def checkpoint_store(spec: PipelineSpec) -> CheckpointStore:
    bucket, root = spec.checkpoint_location
    return CheckpointStore(s3_client(spec.checkpoints.aws_conn_id), bucket, root, spec.name)


def kafka_admin(conn_id: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({**kafka_config(conn_id), "log_level": 3})


def transaction_committer(spec: PipelineSpec) -> Any:
    """The committer talks to the sink cluster, where the transactions live."""
    from lockstep.committer import TransactionCommitter

    client = kafka_config(spec.sink.kafka_conn_id, KAFKA_PYTHON)  # the admin client: EndTxn, DescribeTransactions
    producer = kafka_config(spec.sink.kafka_conn_id)  # confluent-kafka: fence() re-initialises ids
    bootstrap = client.pop("bootstrap_servers")
    producer.pop("bootstrap.servers")
    return TransactionCommitter(bootstrap, client_config=client, producer_config=producer)
