"""Where the project, its pipeline specs and its local state live.

The library is installed editable from the repository, so the repository root is
found from this file; ``LOCKSTEP_HOME`` overrides it (e.g. an installed copy).
"""
from __future__ import annotations

__all__ = [
    "cache_dir", "dev_state_dir", "iceberg_rest_jars", "jvm_writer_jar", "kafka_jars_dir", "minio_binary", "pipelines_dir",
    "project_root", "registry_app_dir", "registry_java", "spark_kafka_jars",
]

import os
from collections.abc import Mapping
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


def iceberg_rest_jars() -> Path:
    """The jars of the local platform's Iceberg REST catalog server, resolved by ``make setup``."""
    folder = cache_dir() / "jars" / "iceberg-rest"
    if not any(folder.glob("iceberg-open-api-*-test-fixtures.jar")):
        raise FileNotFoundError(f"the local Iceberg REST catalog is missing ({folder}); run `make setup` to resolve "
                                "it from Maven Central")
    return folder


def kafka_jars_dir() -> Path:
    return cache_dir() / "jars" / "kafka"


def spark_kafka_jars() -> list[str]:
    """The Spark Kafka connector, Spark's Avro functions, protobuf-java (the Protobuf formats' codec in
    Lockstep's jar) and the few jars they need beyond Spark's own.

    Maven also copies Hadoop/Scala jars that pyspark already ships; passing them
    twice invites class conflicts, so only the connector's own closure is used.
    """
    folder = cache_dir() / "jars" / "spark-kafka"
    wanted = ("spark-sql-kafka", "spark-token-provider-kafka", "kafka-clients", "commons-pool2", "spark-avro", "protobuf-java")
    jars = sorted(str(p) for p in folder.glob("*.jar") if p.name.startswith(wanted))
    if len(jars) < len(wanted):
        raise FileNotFoundError(
            f"Spark Kafka connector jars missing under {folder}; run `make setup` to resolve them from Maven Central"
        )
    return jars


def jvm_writer_jar() -> str:
    """Lockstep's JVM writer (``jvm/jvm-writer``), built by ``make setup``.

    ``LOCKSTEP_WRITER_JAR`` points at another build of it (a jar built from a changed source tree
    with ``jvm/build-jvm-writer.sh``, tested without replacing the shared one)."""
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


#: Apicurio Registry, the local Schema Registry; the Makefile reads this line to unpack the same version.
REGISTRY_VERSION = "3.3.3"
#: A JDK for the registry, which needs Java 21 or newer (the rest of the platform runs on Java 17).
REGISTRY_JAVA_HOME_ENV = "LOCKSTEP_REGISTRY_JAVA_HOME"
REGISTRY_MIN_JAVA = 21
#: Where JDKs are installed side by side on Debian and Ubuntu (and by Temurin's packages).
JVM_DIR = Path("/usr/lib/jvm")


def registry_app_dir() -> Path:
    """Apicurio Registry's Quarkus application (``quarkus-run.jar`` and its ``lib/``), unpacked by ``make setup``."""
    folder = cache_dir() / f"apicurio-registry-{REGISTRY_VERSION}"
    if not (folder / "quarkus-run.jar").is_file():
        raise FileNotFoundError(
            f"the local Schema Registry (Apicurio Registry {REGISTRY_VERSION}) is missing ({folder}); "
            "run `make setup` to resolve it from Maven Central"
        )
    return folder


def java_major(java_home: Path) -> int | None:
    """The major Java version of a JDK folder, from its ``release`` file (``JAVA_VERSION="25.0.3"``;
    ``"1.8.0_402"`` is 8), or None if the folder has no readable one. Reading the file instead of
    running ``java -version`` keeps the choice cheap and testable on fake folders."""
    try:
        text = (java_home / "release").read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() != "JAVA_VERSION":
            continue
        parts = value.strip().strip('"').split(".")
        try:
            major = int(parts[0].split("-")[0].split("+")[0])
            return int(parts[1]) if major == 1 and len(parts) > 1 else major
        except ValueError:
            return None
    return None


def registry_java(env: Mapping[str, str] | None = None, jvm_dir: Path = JVM_DIR) -> Path:
    """The ``java`` that runs the registry: Java 21 or newer, which the registry needs and the
    machine's default Java (17 here) is not.

    In order: ``$LOCKSTEP_REGISTRY_JAVA_HOME`` (used as given, refused if older than 21), else
    ``$JAVA_HOME`` if it is 21 or newer, else the newest JDK of 21 or newer under ``/usr/lib/jvm``.
    A JDK counts when its ``release`` file names its version and ``bin/java`` exists."""
    env = os.environ if env is None else env
    looked: list[str] = []

    def usable(home: Path) -> int | None:
        major = java_major(home)
        if major is None or not (home / "bin" / "java").is_file():
            return None
        return major

    explicit = env.get(REGISTRY_JAVA_HOME_ENV)
    if explicit:
        home = Path(explicit)
        major = usable(home)
        if major is None or major < REGISTRY_MIN_JAVA:
            what = "no JDK (no release file or bin/java)" if major is None else f"Java {major}"
            raise FileNotFoundError(
                f"{REGISTRY_JAVA_HOME_ENV}={explicit} is {what}; the Schema Registry needs Java "
                f"{REGISTRY_MIN_JAVA} or newer: point it at such a JDK, or unset it to search JAVA_HOME and {jvm_dir}"
            )
        return home / "bin" / "java"
    java_home = env.get("JAVA_HOME")
    if java_home:
        major = usable(Path(java_home))
        if major is not None and major >= REGISTRY_MIN_JAVA:
            return Path(java_home) / "bin" / "java"
        looked.append(f"JAVA_HOME={java_home} ({'no JDK' if major is None else f'Java {major}'})")
    found: list[tuple[int, str, Path]] = []
    if jvm_dir.is_dir():
        for home in sorted(p for p in jvm_dir.iterdir() if p.is_dir()):  # not the .jinfo files beside them
            major = usable(home)
            looked.append(f"{home} ({'no JDK' if major is None else f'Java {major}'})")
            if major is not None and major >= REGISTRY_MIN_JAVA:
                found.append((major, home.name, home))
    else:
        looked.append(f"{jvm_dir} (no such folder)")
    if found:  # the newest; on a tie the last name, so the choice never depends on the listing order
        return max(found)[2] / "bin" / "java"
    raise FileNotFoundError(
        f"no Java {REGISTRY_MIN_JAVA} or newer for the Schema Registry (Apicurio Registry {REGISTRY_VERSION}); "
        f"looked at: {', '.join(looked) or 'nothing'}. Install a JDK 21+ (e.g. Temurin 21 or 25) and set "
        f"{REGISTRY_JAVA_HOME_ENV} to its folder"
    )


def dev_state_dir() -> Path:
    """Data, logs and pid files of the local platform (``lockstep dev``).

    ``LOCKSTEP_DEV_DIR`` lets tests run an isolated platform next to a user's one.
    """
    env = os.environ.get("LOCKSTEP_DEV_DIR")
    return Path(env).resolve() if env else project_root() / "var" / "dev"
