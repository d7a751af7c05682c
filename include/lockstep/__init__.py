"""Lockstep: exactly-once Kafka pipelines as Airflow-scheduled bounded Spark runs.

Its public surface is its top-level modules, what users import by name (README, "Layout"); the role
packages below them (``model``, ``rules``, ``store``, ...) each declare their own in ``__all__``."""

__all__ = [
    "__version__", "connections", "errors", "logs", "paths", "rows", "spec", "state_function",
    "transform",
]

__version__ = "0.1.0"
