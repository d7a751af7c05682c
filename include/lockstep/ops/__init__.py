"""Operating a pipeline: verify, a new spec's output compared with the committed one (``replay --compare``),
transaction-aware lag, drift audit, the transaction console, open transactions, dead letters, metrics,
alerts, spec validation, and the Airflow REST client these use.

Called by the CLI, the Airflow plugin (pages, operators, listener) and the tools (bench, demo); nothing
else in the core imports ``ops``. ``verify_state`` is ``verify``'s stateful half, used through ``verify``."""

__all__ = [
    "airflow_client", "alerts", "compare", "deadletters", "drift", "lag", "metrics", "open_transactions", "state_report",
    "table_check", "table_upkeep", "transaction_console", "validate", "verify",
]
