"""The embedded local platform behind ``lockstep dev``: Kafka (KRaft), an S3 API
server and optionally Airflow, started as background processes without Docker."""
