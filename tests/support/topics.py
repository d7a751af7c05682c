"""Creating topics on a real broker, the one way every test suite does it."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def create_topics(client: str | Mapping[str, Any], topics: Mapping[str, int], replication: int = 1,
                  config: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> list[str]:
    """Create ``topics`` (name -> partition count) and wait until the broker confirms each one.

    ``client`` is a bootstrap address or a whole confluent-kafka client configuration (a SASL_SSL
    listener's, say); ``config`` applies to every topic. A topic that already exists, or any other
    refusal, fails the test: tests use fresh names. Returns the names, in the order given.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": client} if isinstance(client, str) else dict(client))
    futures = admin.create_topics([NewTopic(name, partitions, replication, config=dict(config or {}))
                                   for name, partitions in topics.items()])
    for future in futures.values():  # ``admin`` stays referenced until here: a destroyed client fails its futures
        future.result(timeout=timeout_s)
    return list(topics)
