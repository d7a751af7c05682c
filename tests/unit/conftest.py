"""Fixtures for unit tests: these run with the Python venv alone (`make unit`), without Java, Maven,
Go or a service, so nothing here may need what `make setup` builds beyond the venv."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def built_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stand-in jar files where `make setup` puts the Spark Kafka connector and Lockstep's writer,
    for tests of the command lines and settings that name them (no JVM reads them)."""
    from lockstep.spark import conf as sparkconf

    folder = tmp_path / "jars"
    folder.mkdir()
    names = ("spark-sql-kafka-0-10_2.13-4.0.0.jar", "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
             "kafka-clients-3.9.0.jar", "commons-pool2-2.12.0.jar", "lockstep-jvm-writer.jar")
    jars = [str(folder / name) for name in names]
    for jar in jars:
        Path(jar).touch()
    monkeypatch.setattr(sparkconf, "spark_kafka_jars", lambda: jars[:-1])
    monkeypatch.setenv("LOCKSTEP_WRITER_JAR", jars[-1])
    return jars
