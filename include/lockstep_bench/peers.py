"""The benchmark's exactly-once peers, Flink SQL and Quix Streams: their set-up and their commands.

Each peer runs in a venv of its own under ``.cache/bench/<peer>/`` (PyFlink pins pandas and pyarrow
versions the project's venv does not have), created by the benchmark the first time it needs the
peer, never by ``make setup``: ``python3.11 -m venv``, ``pip install`` of the pinned packages from
PyPI and, for Flink, the Kafka SQL connector jar from Maven Central. A marker file records what was
installed; a later run whose wanted versions equal the marker's reuses the folder as it is.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockstep_bench.pipelines import Command, parse_result

FLINK_VERSION = "2.3.0"  # newest apache-flink on PyPI
#: The newest flink-sql-connector-kafka built for Flink 2.x (5.0.0 is built for Flink 2.2; it runs on 2.3).
FLINK_KAFKA_CONNECTOR = "5.0.0-2.2"
QUIX_VERSION = "3.28.1"
MAVEN = "https://repo1.maven.org/maven2"
MARKER = "installed.json"
#: The peers' job scripts, relative to the project root.
JOBS = Path("include") / "lockstep_bench" / "jobs"


@dataclass(frozen=True)
class PeerEnv:
    """What one peer's folder must hold: a venv with ``packages``, and ``jars`` (file name → URL)."""

    name: str
    packages: tuple[str, ...]
    jars: tuple[tuple[str, str], ...] = ()
    python: str = "python3.11"

    def wanted(self) -> dict[str, Any]:
        """The marker's content for this set-up: what a reusable folder must have been made with."""
        return {"packages": list(self.packages), "jars": [name for name, _ in self.jars], "python": self.python}

    def folder(self, cache: Path) -> Path:
        return cache / "bench" / self.name

    def venv_python(self, cache: Path) -> Path:
        return self.folder(cache) / "venv" / "bin" / "python"

    def jar(self, cache: Path, index: int = 0) -> Path:
        return self.folder(cache) / self.jars[index][0]


#: Flink's S3 file system, a plugin: in a folder of its own under PyFlink's plugins folder, the one its gateway
#: gives the JVM whatever ``FLINK_PLUGINS_DIR`` says (seen with apache-flink 2.3.0); where the keyed-state bench's
#: Flink keeps its checkpoints when they go to S3 (``lockstep_bench.flink_restore``).
FLINK_S3_PLUGIN = (f"venv/lib/python3.11/site-packages/pyflink/plugins/s3-fs-hadoop/"
                   f"flink-s3-fs-hadoop-{FLINK_VERSION}.jar")
FLINK = PeerEnv("flink", (f"apache-flink=={FLINK_VERSION}",),
                ((f"flink-sql-connector-kafka-{FLINK_KAFKA_CONNECTOR}.jar",
                  f"{MAVEN}/org/apache/flink/flink-sql-connector-kafka/{FLINK_KAFKA_CONNECTOR}/"
                  f"flink-sql-connector-kafka-{FLINK_KAFKA_CONNECTOR}.jar"),
                 (FLINK_S3_PLUGIN,
                  f"{MAVEN}/org/apache/flink/flink-s3-fs-hadoop/{FLINK_VERSION}/flink-s3-fs-hadoop-{FLINK_VERSION}.jar")))
QUIX = PeerEnv("quix", (f"quixstreams=={QUIX_VERSION}",))

#: Iceberg's Flink runtime built for Flink 2.1 (the newest Flink its releases are built for; it runs on PyFlink
#: 2.3, tried 2026-12-05), Iceberg's AWS bundle (its S3 file IO) and Hadoop's client jars, which its catalog needs.
ICEBERG_FLINK_VERSION = "1.11.0"
HADOOP_VERSION = "3.4.1"
ICEBERG_FLINK_RUNTIME = f"iceberg-flink-runtime-2.1-{ICEBERG_FLINK_VERSION}.jar"
FLINK_ICEBERG = PeerEnv("flink-iceberg", FLINK.packages, (
    FLINK.jars[0],
    (ICEBERG_FLINK_RUNTIME, f"{MAVEN}/org/apache/iceberg/iceberg-flink-runtime-2.1/{ICEBERG_FLINK_VERSION}/"
                            f"{ICEBERG_FLINK_RUNTIME}"),
    (f"iceberg-aws-bundle-{ICEBERG_FLINK_VERSION}.jar", f"{MAVEN}/org/apache/iceberg/iceberg-aws-bundle/"
     f"{ICEBERG_FLINK_VERSION}/iceberg-aws-bundle-{ICEBERG_FLINK_VERSION}.jar"),
    (f"hadoop/hadoop-client-api-{HADOOP_VERSION}.jar", f"{MAVEN}/org/apache/hadoop/hadoop-client-api/{HADOOP_VERSION}/"
     f"hadoop-client-api-{HADOOP_VERSION}.jar"),
    (f"hadoop/hadoop-client-runtime-{HADOOP_VERSION}.jar", f"{MAVEN}/org/apache/hadoop/hadoop-client-runtime/"
     f"{HADOOP_VERSION}/hadoop-client-runtime-{HADOOP_VERSION}.jar")))


def is_installed(env: PeerEnv, cache: Path) -> bool:
    """True when the folder was set up for exactly these versions and its files are still there."""
    marker = env.folder(cache) / MARKER
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return recorded == env.wanted() and env.venv_python(cache).exists() and \
        all(env.jar(cache, i).exists() for i in range(len(env.jars)))


def ensure(env: PeerEnv, cache: Path, log: Callable[[str], None] = lambda _m: None,
           run: Callable[..., Any] = subprocess.run) -> Path:
    """Set up the peer's folder unless the marker says it already is; returns the venv's Python.

    The marker is written last and removed first, so an interrupted set-up is redone, not reused."""
    if is_installed(env, cache):
        return env.venv_python(cache)
    folder = env.folder(cache)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).unlink(missing_ok=True)
    log(f"setting up the {env.name} peer in {folder} ({', '.join(env.packages)}); once, reused afterwards")
    python = shutil.which(env.python) or env.python
    if not env.venv_python(cache).exists():
        run([python, "-m", "venv", str(folder / "venv")], check=True)
    run([str(env.venv_python(cache)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         *env.packages], check=True)
    for name, url in env.jars:
        target = folder / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".part")
            with urllib.request.urlopen(url, timeout=300) as response, open(partial, "wb") as out:
                shutil.copyfileobj(response, out)
            partial.rename(target)
    (folder / MARKER).write_text(json.dumps(env.wanted(), indent=1) + "\n")
    return env.venv_python(cache)


def versions() -> dict[str, str]:
    """The peers' versions for the report's Machine and versions table."""
    return {"pyflink": FLINK_VERSION, "flink_kafka_connector": FLINK_KAFKA_CONNECTOR, "quixstreams": QUIX_VERSION}


def parallelism(partitions: int) -> int:
    """Flink's parallelism: the machine's cores, as Spark's ``local[*]`` uses them, capped by the
    partitions (a reader without a partition has nothing to do)."""
    return max(1, min(os.cpu_count() or 1, partitions))


def _env(extra_path: Path) -> dict[str, str]:
    """The job's environment: ``include/`` on PYTHONPATH (header names, the threshold, the SQL)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_"))}
    env["PYTHONPATH"] = str(extra_path)
    env.pop("VIRTUAL_ENV", None)
    return env


def flink_command(cache: Path, root: Path, bootstrap: str, source: str, sink: str, ends: Mapping[int, int]) -> Command:
    argv = [str(FLINK.venv_python(cache)), str(root / JOBS / "flink_sql_job.py"), "--bootstrap", bootstrap,
            "--source", source, "--sink", sink, "--ends", json.dumps({str(p): e for p, e in ends.items()}),
            "--connector-jar", str(FLINK.jar(cache)), "--parallelism", str(parallelism(len(ends))),
            "--transactional-id-prefix", f"bench-flink-{uuid.uuid4().hex[:8]}"]
    return Command(argv, _env(root / "include"), parse_result)


def flink_iceberg_versions() -> dict[str, str]:
    """The Iceberg race's peer's versions, for its report."""
    return {"pyflink": FLINK_VERSION, "flink_kafka_connector": FLINK_KAFKA_CONNECTOR,
            "iceberg_flink_runtime": f"{ICEBERG_FLINK_VERSION} (for Flink 2.1)", "hadoop_client": HADOOP_VERSION}


def flink_iceberg_command(cache: Path, root: Path, bootstrap: str, source: str, ends: Mapping[int, int], table: str,
                          sink: str | None, catalog_uri: str, platform_env: Mapping[str, str]) -> Command:
    """The Iceberg race's Flink job (``jobs/flink_iceberg_job.py``): into ``table``, and ``sink`` too when given.
    The catalog's keys reach it in its environment (``platform_env``), not its arguments."""
    jars = [str(FLINK_ICEBERG.jar(cache, i)) for i in range(3)]
    argv = [str(FLINK_ICEBERG.venv_python(cache)), str(root / JOBS / "flink_iceberg_job.py"), "--bootstrap", bootstrap,
            "--source", source, "--ends", json.dumps({str(p): e for p, e in ends.items()}), "--table", table,
            "--catalog-uri", catalog_uri, "--jars", ",".join(jars), "--parallelism", str(parallelism(len(ends)))]
    if sink is not None:
        argv += ["--sink", sink, "--transactional-id-prefix", f"bench-flink-{uuid.uuid4().hex[:8]}"]
    env = {**_env(root / "include"), **{k: v for k, v in platform_env.items() if k == "AIRFLOW_CONN_ICEBERG_DEFAULT"}}
    env["HADOOP_CLASSPATH"] = os.pathsep.join(str(FLINK_ICEBERG.jar(cache, i)) for i in (3, 4))
    return Command(argv, env, parse_result)


def quix_command(cache: Path, root: Path, bootstrap: str, source: str, sink: str, ends: Mapping[int, int]) -> Command:
    argv = [str(QUIX.venv_python(cache)), str(root / JOBS / "quix_job.py"), "--bootstrap", bootstrap,
            "--source", source, "--sink", sink, "--ends", json.dumps({str(p): e for p, e in ends.items()})]
    return Command(argv, _env(root / "include"), parse_result)


def flink_fresh_command(cache: Path, root: Path, bootstrap: str, source: str, sink: str, partitions: int,
                        checkpoint_s: int, window: tuple[int, int] | None = None) -> Command:
    """The freshness race's Flink job: unbounded, checkpoints every ``checkpoint_s`` (``lockstep_bench.freshness``);
    ``window``: (size, out-of-orderness) seconds, the windowed pipeline."""
    argv = [str(FLINK.venv_python(cache)), str(root / JOBS / "flink_fresh_job.py"), "--bootstrap", bootstrap,
            "--source", source, "--sink", sink, "--partitions", str(partitions),
            "--connector-jar", str(FLINK.jar(cache)), "--parallelism", str(parallelism(partitions)),
            "--checkpoint-seconds", str(checkpoint_s), "--transactional-id-prefix", f"bench-flink-{uuid.uuid4().hex[:8]}"]
    if window:
        argv += ["--window-seconds", str(window[0]), "--out-of-orderness-seconds", str(window[1])]
    return Command(argv, _env(root / "include"))


def quix_fresh_command(cache: Path, root: Path, bootstrap: str, source: str, sink: str, commit_s: float,
                       window: tuple[int, int] | None = None) -> Command:
    """The freshness race's Quix application: no end offsets, runs until stopped, commits every ``commit_s``;
    ``window``: (size, out-of-orderness) seconds, the windowed race's application over the records' timestamps."""
    if window:
        argv = [str(QUIX.venv_python(cache)), str(root / JOBS / "quix_window_job.py"), "--bootstrap", bootstrap,
                "--source", source, "--sink", sink, "--commit-seconds", str(commit_s), "--window-seconds",
                str(window[0]), "--out-of-orderness-seconds", str(window[1]), "--record-timestamps"]
    else:
        argv = [str(QUIX.venv_python(cache)), str(root / JOBS / "quix_job.py"), "--bootstrap", bootstrap,
                "--source", source, "--sink", sink, "--commit-seconds", str(commit_s)]
    return Command(argv, _env(root / "include"))


def flink_window_command(cache: Path, root: Path, bootstrap: str, source: str, sink: str, ends: Mapping[int, int],
                         window_s: int, out_of_orderness_s: int, checkpoint_s: int) -> Command:
    """The windowed race's Flink job (``lockstep_bench.windowed`` says what it runs)."""
    argv = [str(FLINK.venv_python(cache)), str(root / JOBS / "flink_window_job.py"), "--bootstrap", bootstrap,
            "--source", source, "--sink", sink, "--ends", json.dumps({str(p): e for p, e in ends.items()}),
            "--connector-jar", str(FLINK.jar(cache)), "--parallelism", str(parallelism(len(ends))),
            "--checkpoint-seconds", str(checkpoint_s), "--window-seconds", str(window_s),
            "--out-of-orderness-seconds", str(out_of_orderness_s),
            "--transactional-id-prefix", f"bench-flink-{uuid.uuid4().hex[:8]}"]
    return Command(argv, _env(root / "include"), parse_result)


def flink_join_command(cache: Path, root: Path, bootstrap: str, orders: str, orders_ends: Mapping[int, int],
                       customers: str, customers_ends: Mapping[int, int], sink: str, checkpoint_s: int,
                       out_of_orderness_s: int, join: str = "temporal") -> Command:
    """The join race's Flink job (``lockstep_bench.joins`` says what it runs)."""
    def offsets(ends: Mapping[int, int]) -> str:
        return json.dumps({str(p): e for p, e in ends.items()})

    argv = [str(FLINK.venv_python(cache)), str(root / JOBS / "flink_join_job.py"), "--bootstrap", bootstrap,
            "--orders", orders, "--orders-ends", offsets(orders_ends), "--customers", customers,
            "--customers-ends", offsets(customers_ends), "--sink", sink, "--connector-jar", str(FLINK.jar(cache)),
            "--parallelism", str(parallelism(len(orders_ends))), "--checkpoint-seconds", str(checkpoint_s),
            "--out-of-orderness-seconds", str(out_of_orderness_s), "--join", join,
            "--transactional-id-prefix", f"bench-flink-{uuid.uuid4().hex[:8]}"]
    return Command(argv, _env(root / "include"), parse_result)


def flink_restore_command(cache: Path, root: Path, bootstrap: str, source: str, sink: str, group: str, partitions: int,
                          state_dir: Path, checkpoint_s: float, transactional_id_prefix: str,
                          restore_from: str | None = None, claim_mode: str = "CLAIM",
                          checkpoints: str | None = None) -> Command:
    """The keyed-state benchmark's Flink job (``lockstep_bench.flink_restore`` says what it runs): it runs
    until told to stop on stdin, so ``parse`` reads its ``BENCH_RESULT`` once it has. ``checkpoints``: an s3:// URI
    for its checkpoints (`FLINK_S3_PLUGIN`), else under ``state_dir``."""
    argv = [str(FLINK.venv_python(cache)), str(root / JOBS / "flink_restore_job.py"), "--bootstrap", bootstrap,
            "--source", source, "--sink", sink, "--group", group, "--connector-jar", str(FLINK.jar(cache)),
            "--parallelism", str(parallelism(partitions)), "--checkpoint-seconds", str(checkpoint_s),
            "--state-dir", str(state_dir), "--transactional-id-prefix", transactional_id_prefix]
    if checkpoints:
        argv += ["--checkpoints", checkpoints]
    if restore_from:
        argv += ["--restore-from", restore_from, "--claim-mode", claim_mode]
    return Command(argv, _env(root / "include"), parse_result)


def quix_window_command(cache: Path, root: Path, bootstrap: str, source: str, sink: str, ends: Mapping[int, int],
                        window_s: int, out_of_orderness_s: int) -> Command:
    """The windowed race's Quix application (``lockstep_bench.windowed`` says what it runs)."""
    argv = [str(QUIX.venv_python(cache)), str(root / JOBS / "quix_window_job.py"), "--bootstrap", bootstrap,
            "--source", source, "--sink", sink, "--ends", json.dumps({str(p): e for p, e in ends.items()}),
            "--window-seconds", str(window_s), "--out-of-orderness-seconds", str(out_of_orderness_s)]
    return Command(argv, _env(root / "include"), parse_result)


def setup_all(log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict[str, str]:
    """Both peers' set-up (before the platform starts, so no download overlaps a measurement)."""
    from lockstep.paths import cache_dir

    for env in (FLINK, QUIX):
        ensure(env, cache_dir(), log)
    return versions()
