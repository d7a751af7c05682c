"""The checkpoint store: checkpoint documents as immutable objects on S3, savepoints, and the keyed
state's files and chains. Called by the steps, the Spark run (state files), ``ops`` and the Airflow plugin
(its pages read the store); ``state_cache`` is the state files' own."""

__all__ = [
    "checkpoint_store", "state_chain", "state_files",
]
