"""The Iceberg sink: a checkpoint's rows written as data files and staged as a snapshot on a branch of the
table (the run), published on the table's main branch with the checkpoint's Kafka transactions (the commit),
asked after by recovery (docs/iceberg.md). Every call into pyiceberg is in `lockstep.iceberg.table_sink`."""
from __future__ import annotations

__all__ = ["table_sink"]
