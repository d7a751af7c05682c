"""Lockstep: exactly-once Kafka pipelines as Airflow-scheduled bounded Spark runs."""

__version__ = "0.1.0"
