"""The checkpoint store: checkpoint documents as immutable objects on S3, savepoints, the keyed state's
files and chains, and ``s3``, the one module that imports boto3 (the ``S3Client`` protocol and its
maker). Called by the steps, the Spark run (state files), ``ops`` and the Airflow plugin (its pages
read the store); ``state_cache`` is the state files' own."""

__all__ = [
    "checkpoint_store", "s3", "state_chain", "state_files",
]
