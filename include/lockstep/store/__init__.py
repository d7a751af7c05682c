"""The checkpoint store: checkpoint documents as immutable objects on S3, and savepoints."""
