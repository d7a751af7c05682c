"""The Iceberg sink's room (``sink.iceberg``, docs/iceberg.md): a checkpoint's rows written as data files and
staged as a snapshot on a branch of the table (the run), published on the table's main branch with the
checkpoint's Kafka transactions (the commit), asked after by recovery. Each module sits on its role's floor:

- `staged_table` (model's): the committable, the snapshot a run staged and its files;
- `table_commit` (rules', pure): what the commit does with the table after the Kafka decision;
- `table_sink` (I/O): the one adapter to pyiceberg (the catalog, the files, staging, publishing, dropping);
- `stage` (spark's): the run's ``iceberg`` stage, the rows of the records written to the sink topic.

A change to the sink touches this package and its tests (tests/unit/test_iceberg_*.py,
tests/integration/test_iceberg.py).
"""
from __future__ import annotations

__all__ = ["stage", "staged_table", "table_commit", "table_sink"]
