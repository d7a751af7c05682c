"""Kafka I/O: client configurations, topic and offset lookups, the committer, and ``internals``, the
one adapter that speaks the transaction protocol below the public client APIs.

Called by the steps (plan reads offsets, commit and recovery commit or fence), the Spark run (the
writers' client settings), ``ops`` (lag, verify, the transaction console) and the connections. Its
public modules are in ``__all__``, and each module's own ``__all__`` names what others may import."""

__all__ = [
    "broker_offsets", "client_configs", "committer", "internals", "topics",
]
