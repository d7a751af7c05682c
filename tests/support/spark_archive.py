"""A class-data-sharing archive of Spark's classes for the test session's Spark JVMs.

The suite is bound by CPU (docs/testing.md), and every checkpoint's spark-submit and every Spark
Connect server a test starts is a new JVM that loads and verifies Spark's classes again. An AppCDS
archive (JDK 17's dynamic archive, ``-XX:ArchiveClassesAtExit``) maps them instead. Measured on a
trivial PySpark job with the client compiler only, as the tests run: 10.0 s of wall time and 10.2 s of
CPU without the archive, 5.9-6.5 s and 5.4-6.2 s with it.

CDS refuses a non-empty directory on the class path, and spark-submit puts ``SPARK_CONF_DIR`` (the
quiet log4j2 settings, `lockstep.spark.conf.spark_env`) first on it. The test session's spark-submits
therefore get an empty ``SPARK_CONF_DIR`` and the same log4j2 file through ``-Dlog4j2.configurationFile``.
The Spark standalone cluster's daemons and executors keep the project's folder
(`lockstep_dev.spark_cluster`), and a user's runs are untouched: this is the test session's only.

``make test`` and ``make integration`` build the archive first (``python -m tests.support.spark_archive``,
about 30 s, once per JDK, pyspark and checkout); `tests/conftest.py` uses it when it is there, and runs
without it (the client compiler only) when it is not. A JVM that cannot map it (another JDK) runs
without it, its warning on stderr.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The flags every test-session Spark JVM gets: C2's compilations cost CPU a JVM of seconds never earns
#: back (docs/testing.md); the executors a cluster starts for the session's apps too (a ``spark.*``
#: system property of the driver is a default of its SparkConf).
C1_ONLY = "-XX:TieredStopAtLevel=1 -Dspark.executor.defaultJavaOptions=-XX:TieredStopAtLevel=1"
LOG4J2 = ROOT / "include" / "lockstep" / "spark" / "spark-conf" / "log4j2.properties"
#: The JVM's own messages on stderr, warnings and errors only: a JVM that cannot map the archive says so
#: there, never on the stdout a test may read.
QUIET = "-Xlog:disable -Xlog:all=warning:stderr"
JOB = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("lockstep-test-class-archive").getOrCreate()
spark.range(100000).selectExpr("sum(id)", "count(*)").collect()
df = spark.createDataFrame([(i, str(i)) for i in range(1000)], "a int, b string")
df.groupBy((df.a % 7).alias("k")).count().orderBy("k").collect()
spark.stop()
"""


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java") or "java"
    return str(Path(java).resolve())


def folder() -> Path:
    """Where this JDK's, pyspark's and checkout's archive lives: another of any has another folder."""
    import importlib.metadata

    key = "|".join((_java(), importlib.metadata.version("pyspark"), str(ROOT)))
    return ROOT / ".cache" / "jvm" / hashlib.sha256(key.encode()).hexdigest()[:12]


def _env(opts: str) -> dict[str, str]:
    conf = folder() / "spark-conf"  # empty: CDS refuses a non-empty directory on the class path
    conf.mkdir(parents=True, exist_ok=True)
    return {"SPARK_CONF_DIR": str(conf),
            "SPARK_SUBMIT_OPTS": f"{C1_ONLY} -Dlog4j2.configurationFile=file:{LOG4J2} {opts}".strip()}


def session_env() -> dict[str, str]:
    """The test session's Spark settings: with the archive when it was built, else the client compiler only."""
    archive = folder() / "spark.jsa"
    if not archive.is_file():
        return {"SPARK_SUBMIT_OPTS": C1_ONLY}
    return _env(f"-XX:SharedArchiveFile={archive} {QUIET}")


def build() -> Path:
    """Dump the archive from a small local job's JVM (written aside, then renamed)."""
    archive = folder() / "spark.jsa"
    if archive.is_file():
        return archive
    part = archive.with_suffix(".jsa.part")
    part.unlink(missing_ok=True)
    spark_submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent)) or "spark-submit"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as job:
        job.write(JOB)
    env = {**os.environ, **_env(f"-XX:ArchiveClassesAtExit={part} {QUIET}"), "SPARK_LOCAL_IP": "127.0.0.1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    try:
        done = subprocess.run([spark_submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false", job.name],
                              env=env, capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(job.name)
    if done.returncode != 0 or not part.is_file():
        raise RuntimeError(f"the Spark class archive was not written (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout)[-2000:]}")
    os.replace(part, archive)
    return archive


if __name__ == "__main__":
    try:
        print(f"Spark class archive: {build()}")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:  # the tests then run without it
        print(f"no Spark class archive, the tests' Spark JVMs load their classes as usual: {exc}", file=sys.stderr)
