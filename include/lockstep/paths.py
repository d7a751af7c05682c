"""Where the project, its pipeline specs and its local state live.

The library is installed editable from the repository, so the repository root is
found from this file; ``LOCKSTEP_HOME`` overrides it (e.g. an installed copy).
"""
from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("LOCKSTEP_HOME")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parents[2]


#: Points an Airflow deployment (or a test session) at another folder of specs.
PIPELINES_DIR_ENV = "LOCKSTEP_PIPELINES_DIR"


def pipelines_dir() -> Path:
    """The folder of pipeline spec files: ``$LOCKSTEP_PIPELINES_DIR`` or ``include/pipelines``.

    The DAG files, the CLI and the Airflow plugin page must all see the same set of specs, so the
    folder is decided here only."""
    return Path(os.environ.get(PIPELINES_DIR_ENV) or project_root() / "include" / "pipelines")


def cache_dir() -> Path:
    """Git-ignored downloads and builds (Kafka and Spark-Kafka jars, the JVM writer, MinIO)."""
    return project_root() / ".cache"


def kafka_jars_dir() -> Path:
    return cache_dir() / "jars" / "kafka"


def spark_kafka_jars() -> list[str]:
    """The Spark Kafka connector, Spark's Avro functions and the few jars they need beyond Spark's own.

    Maven also copies Hadoop/Scala jars that pyspark already ships; passing them
    twice invites class conflicts, so only the connector's own closure is used.
    """
    folder = cache_dir() / "jars" / "spark-kafka"
    wanted = ("spark-sql-kafka", "spark-token-provider-kafka", "kafka-clients", "commons-pool2", "spark-avro")
    jars = sorted(str(p) for p in folder.glob("*.jar") if p.name.startswith(wanted))
    if len(jars) < len(wanted):
        raise FileNotFoundError(
            f"Spark Kafka connector jars missing under {folder}; run `make setup` to resolve them from Maven Central"
        )
    return jars


def jvm_writer_jar() -> str:
    """Lockstep's JVM writer (``buildsrc/jvm-writer``), built by ``make setup``.

    ``LOCKSTEP_WRITER_JAR`` points at another build of it (a jar built from a changed source tree
    with ``buildsrc/build-jvm-writer.sh``, tested without replacing the shared one)."""
    env = os.environ.get("LOCKSTEP_WRITER_JAR")
    jar = Path(env).resolve() if env else cache_dir() / "jars" / "lockstep" / "lockstep-jvm-writer.jar"
    if not jar.is_file():
        raise FileNotFoundError(f"Lockstep's JVM writer jar is missing ({jar}); run `make setup` to build it")
    return str(jar)


def minio_binary() -> Path:
    """MinIO, the local S3 server of ``lockstep dev``, built from its Go module by ``make setup``."""
    binary = cache_dir() / "bin" / "minio"
    if not binary.is_file():
        raise FileNotFoundError(
            f"the local S3 server (MinIO) is missing ({binary}); run `make setup` to build it (needs Go)"
        )
    return binary


def dev_state_dir() -> Path:
    """Data, logs and pid files of the local platform (``lockstep dev``).

    ``LOCKSTEP_DEV_DIR`` lets tests run an isolated platform next to a user's one.
    """
    env = os.environ.get("LOCKSTEP_DEV_DIR")
    return Path(env).resolve() if env else project_root() / "var" / "dev"
