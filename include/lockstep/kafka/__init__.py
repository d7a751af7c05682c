"""Kafka I/O, the one package that imports the Kafka client libraries: client configurations, the
clients made from them, topic and offset lookups, the read_committed reader, the committer, and
``internals``, the one adapter that speaks the transaction protocol below the public client APIs.

Called by the steps (plan reads offsets, commit and recovery commit or fence), the Spark run (the
writers' clients and settings), ``ops`` (lag, verify, dead letters, the transaction console) and the
tools. Its public modules are in ``__all__``, and each module's own ``__all__`` names what others may
import."""

__all__ = [
    "broker_offsets", "client_configs", "clients", "committer", "internals", "reader", "topics",
]
