"""Spark settings every Lockstep Spark run needs, in one place.

Used by the Spark entry point in ``jobs/``, the SparkSubmitOperator in the DAGs and
the tests, so a run started anywhere gets the same Kafka connector and the same
safety settings.
"""
from __future__ import annotations

from typing import Mapping

from lockstep.paths import spark_kafka_jars

# A speculative task attempt would init the same transactional id and fence the
# winner's open transaction, so speculation is always off.
REQUIRED_CONF: Mapping[str, str] = {
    "spark.speculation": "false",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.memory": "1g",
}


def spark_conf(extra: Mapping[str, object] | None = None) -> dict[str, str]:
    conf = {"spark.jars": ",".join(spark_kafka_jars()), **REQUIRED_CONF}
    for key, value in (extra or {}).items():
        conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    conf["spark.speculation"] = "false"
    return conf


def local_session(app_name: str, master: str = "local[2]", extra: Mapping[str, object] | None = None):
    """A SparkSession with the Kafka connector on the classpath (for tests and the CLI)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in spark_conf(extra).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
