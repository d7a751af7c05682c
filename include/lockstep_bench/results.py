"""The results model of ``lockstep bench``: the competitors' names, what one run's results hold,
and their per-competitor summary. The runner fills it, the report reads it; neither imports the
other for it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lockstep_bench.measure import Run, Summary

LOCKSTEP, SPARK, RAW = "lockstep", "spark-at-least-once", "raw-client"
# Lockstep in connect mode: each checkpoint a session on a long-lived Spark Connect server.
LOCKSTEP_CONNECT = "lockstep-connect"
#: Lockstep's run modes, the new one first: the ratio table has a block per mode.
LOCKSTEP_MODES = (LOCKSTEP_CONNECT, LOCKSTEP)
# Lockstep with its earlier writer (confluent-kafka in a Python worker fed through Arrow): the "before"
# of the JVM writer, measured in the same run.
LOCKSTEP_PYTHON = "lockstep-python-writer"
PRODUCER_PERF, CONSUMER_PERF = "kafka-producer-perf", "kafka-consumer-perf"
PIPELINES = (LOCKSTEP_CONNECT, LOCKSTEP, SPARK, RAW)
#: The partition scaling: Lockstep in its default mode, Spark's own pipeline and the raw client (spark-submit
#: mode is the same Spark stage plus a JVM start, and minutes at 1,024 partitions for nothing more).
PARTITION_PIPELINES = (LOCKSTEP_CONNECT, SPARK, RAW)
#: Lockstep in connect mode with the identity transform (``lockstep_examples.bench:identity``): its own path
#: (read, write in transactions, commit) without the benchmark transform's JSON work.
LOCKSTEP_CONNECT_IDENTITY = "lockstep-connect-identity"
#: The large input (10M records): Lockstep, with the benchmark transform and without, against the broker's own
#: producer ceiling and the raw client.
LARGE_PIPELINES = (LOCKSTEP_CONNECT, LOCKSTEP_CONNECT_IDENTITY, RAW, PRODUCER_PERF)
# The exactly-once peers, each in a venv of its own (``lockstep_bench.peers``): Flink SQL with Flink's
# exactly-once Kafka sink, and a Quix Streams application with processing_guarantee="exactly-once".
FLINK_SQL, QUIX = "flink-sql-exactly-once", "quix-exactly-once"
PEERS = (FLINK_SQL, QUIX)
STAGE_KEYS = {LOCKSTEP: "spark_seconds", LOCKSTEP_CONNECT: "spark_seconds", LOCKSTEP_CONNECT_IDENTITY: "spark_seconds",
              LOCKSTEP_PYTHON: "spark_seconds",
              SPARK: "job_seconds", RAW: "job_seconds", FLINK_SQL: "job_seconds", QUIX: "job_seconds",
              PRODUCER_PERF: "tool", CONSUMER_PERF: "tool"}
#: The fields of a saved run (``Run.to_json()``) that make a ``Run`` again.
RUN_FIELDS = ("pipeline", "records", "partitions", "wall_s", "peak_rss_mb", "cpu_s", "inner", "repeat")
#: Fields a saved run may lack (results from before they existed).
OPTIONAL_RUN_FIELDS = ("sink",)


@dataclass
class Results:
    settings: dict[str, Any]
    environment: dict[str, Any] = field(default_factory=dict)
    main: list[dict[str, Any]] = field(default_factory=list)
    fixed: list[dict[str, Any]] = field(default_factory=list)
    sizes: list[dict[str, Any]] = field(default_factory=list)
    partitions: list[dict[str, Any]] = field(default_factory=list)
    #: Lockstep (connect mode) over few and many partitions, alternated round by round (``repeat`` the round).
    partition_pairs: list[dict[str, Any]] = field(default_factory=list)
    #: The large input: Lockstep (connect mode), the raw client and kafka-producer-perf-test on it, alternated.
    large: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    airflow: list[dict[str, Any]] = field(default_factory=list)
    #: Many generated pipelines in one Airflow (``lockstep_bench.many_pipelines``): parse, loop, plan, page.
    many_pipelines: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    started_at: str = ""
    seconds: float = 0.0
    load: dict[str, Any] = field(default_factory=dict)


def run_of(doc: dict[str, Any]) -> Run:
    """A saved run read back."""
    return Run(**{k: doc[k] for k in RUN_FIELDS}, **{k: doc[k] for k in OPTIONAL_RUN_FIELDS if k in doc})


def summarize(runs: list[dict[str, Any]]) -> dict[str, Summary]:
    by_name: dict[str, list[Run]] = {}
    for doc in runs:
        by_name.setdefault(doc["pipeline"], []).append(run_of(doc))
    return {name: Summary.of(rs, STAGE_KEYS.get(name)) for name, rs in by_name.items()}
