"""Spark settings every Lockstep Spark run needs, in one place.

Used by the Spark entry point in ``jobs/``, the SparkSubmitOperator in the DAGs and
the tests, so a run started anywhere gets the same Kafka connector and the same
safety settings.
"""
from __future__ import annotations

__all__ = [
    "KAFKA_READ_OPTIONS", "job_environment", "local_session", "spark_conf", "spark_env", "submit_command",
]

from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, TypeVar

from lockstep.paths import jvm_writer_jar, spark_kafka_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A speculative task attempt would init the same transactional id and fence the
# winner's open transaction, so speculation is always off.
REQUIRED_CONF: Mapping[str, str] = {
    "spark.speculation": "false",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.memory": "1g",
    "spark.ui.showConsoleProgress": "false",
}


#: Options of every Kafka read Lockstep's runs make (and the benchmark's Spark pipeline, so that the
#: comparison is of the same reads). A task's consumer otherwise waits the broker's full
#: ``fetch.max.wait.ms`` (500 ms) on some fetches; measured through a warm Connect session over 8
#: one-record partitions: 2.72 s to collect them with the default, 0.52 s with 10 ms. A fetch
#: with records answers at once either way, so a short wait costs only empty fetches.
KAFKA_READ_OPTIONS: Mapping[str, str] = {"kafka.fetch.max.wait.ms": "20"}


Env = TypeVar("Env", bound=MutableMapping[str, str])


def spark_env(env: Env) -> Env:
    """Environment every Spark launch gets: Lockstep's quiet log4j2 settings (through
    SPARK_CONF_DIR, which spark-submit puts on the classpath) and a loopback address."""
    from lockstep.paths import project_root

    env.setdefault("SPARK_CONF_DIR", str(project_root() / "include" / "lockstep" / "spark" / "spark-conf"))
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def spark_conf(extra: Mapping[str, object] | None = None) -> dict[str, str]:
    conf = {"spark.jars": ",".join([*spark_kafka_jars(), jvm_writer_jar()]), **REQUIRED_CONF}
    for key, value in (extra or {}).items():
        conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    conf["spark.speculation"] = "false"
    return conf


def local_session(app_name: str, master: str = "local[2]", extra: Mapping[str, object] | None = None) -> SparkSession:
    """A SparkSession with the Kafka connector on the classpath (for tests and the CLI)."""
    import os

    from pyspark.sql import SparkSession

    spark_env(os.environ)  # read by the JVM pyspark is about to launch
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in spark_conf(extra).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def job_script() -> str:
    from lockstep.paths import project_root

    return str(project_root() / "jobs" / "lockstep_checkpoint.py")


def job_environment(base: Mapping[str, str]) -> dict[str, str]:
    """Environment for spark-submit: this venv's Python on driver and workers, and
    ``include/`` importable so transforms living there load in the executors."""
    import sys

    from lockstep.paths import project_root

    include = str(project_root() / "include")
    env = spark_env(dict(base))
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = include + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PATH"] = f"{sys.executable.rsplit('/', 1)[0]}:{env.get('PATH', '')}"
    return env


def submit_command(spec_path: str, checkpoint_id: int, master: str, conf: Mapping[str, object] | None,
                   replay: bool = False) -> list[str]:
    """``replay``: the checkpoint is one of the spec's dead-letter replay pipeline (`lockstep.spark.dead_letter_replay`)."""
    import shutil
    import sys

    spark_submit = shutil.which("spark-submit", path=sys.executable.rsplit("/", 1)[0]) or "spark-submit"
    argv = [spark_submit, "--master", master, "--name", f"lockstep-checkpoint-{checkpoint_id}"]
    for key, value in spark_conf(conf).items():
        argv += ["--conf", f"{key}={value}"]
    return argv + [job_script(), "--spec", spec_path, "--checkpoint-id", str(checkpoint_id)] + (
        ["--replay"] if replay else [])
