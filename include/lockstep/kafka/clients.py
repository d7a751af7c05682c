"""The confluent-kafka clients Lockstep makes, each from a connection's settings in the confluent
dialect (``lockstep.connections.kafka_config``): an admin client, one checked against the brokers'
verdict on its credentials, and a producer.

The rest of the core never imports confluent-kafka: it asks this package for a client (typed by the
Protocols of `lockstep.kafka.topics`) or for the operation itself (`lockstep.kafka.reader`,
`lockstep.kafka.broker_offsets`). This module takes configs, never connection ids: resolving a
connection is ``lockstep.connections``' job, and it is the one of the two that imports the other.
"""
from __future__ import annotations

__all__ = [
    "CREDENTIALS_CHECK_S", "admin_client", "checked_admin", "producer",
]

import time
from typing import TYPE_CHECKING

from lockstep.errors import TerminalError

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient

    from lockstep.kafka.client_configs import ClientConfig

#: How long opening an admin client waits to tell refused credentials from a slow cluster.
CREDENTIALS_CHECK_S = 10.0


class KafkaCredentialsError(TerminalError):
    """The brokers refused a connection's credentials or its TLS settings; a retry cannot help."""


def admin_client(config: ClientConfig) -> AdminClient:
    """A confluent-kafka admin client; nothing is sent until it is used."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(config)


def checked_admin(config: ClientConfig, conn_id: str, check_s: float = CREDENTIALS_CHECK_S) -> AdminClient:
    """A confluent-kafka admin client of connection ``conn_id`` (``config``, its confluent dialect),
    once the brokers accepted its credentials.

    librdkafka (and kafka-python) retry a refused SASL authentication or TLS handshake until their
    timeouts and then report a transport failure: a wrong password would look like an unreachable
    cluster, 30 s later. The first metadata request tells them apart here: refused credentials are a
    TerminalError within a second or two; an unreachable cluster is left to the step's own timeouts.
    """
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    events: list[KafkaError] = []
    # confluent-kafka's stub leaves callbacks out of a config's value types; error_cb is one all the same
    admin = AdminClient({**config, "log_level": 3, "error_cb": events.append})  # type: ignore[dict-item]
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


def producer(config: ClientConfig) -> Producer:
    """A confluent-kafka producer (the Python writer's transactional one, `lockstep.spark.python_writer`).
    Imported here, lazily, so modules that only read committables do not need confluent-kafka."""
    from confluent_kafka import Producer

    return Producer(config)
