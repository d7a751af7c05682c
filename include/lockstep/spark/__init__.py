"""The Spark side of a checkpoint: where the run goes (``target``: submit or connect, ``connect``'s
sessions), the settings every run needs (``conf``), the job that reads the claimed ranges and pre-commits
(``job``, ``kafka_reader``) as a list of named stages, each timed (``input_stages``: read to the sink's
settings; ``output_stages``: transform to write; ``stage_tracker``), the two writers and what they write
with (``python_writer``, ``jvm_writer``, ``writer_settings``), routes (``routes``), the records a Spark
data error is raised for, set aside as dead letters (``raised``), keyed state (``keyed_state`` runs a
stateful checkpoint's steps: ``keyed_rows``, ``state_read``, ``windows``, ``dedup_run``,
``state_function_run``, ``state_write``; ``state_worker``) and dead-letter replay as a mode of the job
(``dead_letter_replay``). The record formats' Spark side is `lockstep.formats.codecs`, the tables'
`lockstep.tables.materialize`, an SQL query's `lockstep.sql`: each in its feature's room.

Called by the run step, the spark-submit driver (``jobs/``), ``ops`` (verify recomputes with the same
code) and the tools. ``placement``, the job's stages and their tracker are the job's own; the keyed
state's steps are ``keyed_state``'s (its ``__all__`` names what others import of them)."""

__all__ = [
    "conf", "connect", "dead_letter_replay", "job", "jvm_writer", "kafka_reader", "keyed_state", "python_writer", "raised",
    "routes", "state_worker", "target", "writer_settings",
]
