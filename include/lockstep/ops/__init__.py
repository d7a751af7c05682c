"""Operating a pipeline: verify, transaction-aware lag, drift audit, the transaction console, open
transactions, dead letters, metrics, and the Airflow REST client these use."""
