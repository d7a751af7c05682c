"""The values a checkpoint is made of: partitions and ranges, the checkpoint documents, savepoints, the
committable and the output contract both writers share, transactional ids, failpoint names. Imports nothing
of Lockstep but ``errors``; no I/O. ``documents`` (the strict reader of the stored documents) is the
package's own.

Everything above it reads and writes these values (rules, store, kafka, spark, steps, ops, the Airflow
plugin, the JVM writer's Python side, the tools). Each module's ``__all__`` names what others may import."""

__all__ = [
    "checkpoint", "failpoints", "offsets", "output_contract", "savepoint", "state_manifest", "state_rows", "transactional_ids",
    "transactions",
]
