"""Kafka I/O: client configurations, topic and offset lookups, the committer, and ``internals``, the
one adapter that speaks the transaction protocol below the public client APIs."""
