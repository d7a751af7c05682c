"""The embedded local platform behind ``lockstep dev``: Kafka (KRaft), an S3 API
server and optionally Airflow, started as background processes without Docker. With what
runs on it for people and tools: generated orders (``datagen``) and ``lockstep demo``.
A tool, not the engine: nothing in ``lockstep`` imports it."""
