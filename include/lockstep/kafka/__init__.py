"""Kafka I/O, the one package that imports the Kafka client libraries: client configurations, the
clients made from them, topic and offset lookups, the read_committed reader, the committer, and
``internals``, the one adapter that speaks the transaction protocol below the public client APIs."""
