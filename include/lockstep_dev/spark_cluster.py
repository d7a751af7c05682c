"""A Spark standalone cluster: one master and its workers, separate JVMs from pyspark's own ``spark-class``.

Workers start with an environment that knows nothing of this repository (no ``PYTHONPATH``
into ``include/``), the way a worker on another host would: whatever a checkpoint's executors
need — the Kafka connector and Lockstep's writer jars, the transform's Python package — must be
shipped by Spark itself from the driver.
"""
from __future__ import annotations

import json
import os
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from lockstep_dev import procs

MASTER_MARKER = "org.apache.spark.deploy.master.Master"
WORKER_MARKER = "org.apache.spark.deploy.worker.Worker"
DAEMON_MEMORY = "256m"


@dataclass(frozen=True)
class SparkClusterConfig:
    master_port: int
    master_ui_port: int
    worker_ui_ports: tuple[int, ...]
    data_dir: Path
    worker_cores: int = 1
    worker_memory: str = "1g"

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.master_ui_port}"


def spark_class() -> str:
    path = Path(sys.executable).parent / "spark-class"
    if not path.exists():
        raise procs.PlatformError(f"{path} not found: pyspark is not installed in this venv. Run `make setup`.")
    return str(path)


def _daemon_env(config: SparkClusterConfig) -> dict[str, str]:
    from importlib.util import find_spec

    from lockstep.spark.conf import spark_env

    # Lockstep's own Spark settings (its quiet log4j2) for the daemons and the executors they start, even
    # when this process's spark-submits were given another SPARK_CONF_DIR (the test session's, see
    # tests/support/spark_archive.py).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR")}
    env = spark_env(env)
    pyspark = find_spec("pyspark")
    if pyspark is None or pyspark.origin is None:
        raise procs.PlatformError("pyspark is not installed in this venv. Run `make setup`.")
    env["SPARK_HOME"] = str(Path(pyspark.origin).parent)  # spark-class would ask `python3`
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["SPARK_DAEMON_MEMORY"] = DAEMON_MEMORY
    env["SPARK_LOG_DIR"] = str(config.data_dir / "logs")
    env["SPARK_NO_DAEMONIZE"] = "1"
    return env


def start_master(config: SparkClusterConfig, log_file: Path) -> int:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    argv = [spark_class(), MASTER_MARKER, "--host", "127.0.0.1", "--port", str(config.master_port),
            "--webui-port", str(config.master_ui_port)]
    return procs.start_detached("spark-master", argv, log_file, env=_daemon_env(config), cwd=config.data_dir)


def start_worker(config: SparkClusterConfig, index: int, log_file: Path) -> int:
    work_dir = config.data_dir / f"worker-{index}"
    work_dir.mkdir(parents=True, exist_ok=True)
    argv = [spark_class(), WORKER_MARKER, "--host", "127.0.0.1", "--cores", str(config.worker_cores),
            "--memory", config.worker_memory, "--work-dir", str(work_dir),
            "--webui-port", str(config.worker_ui_ports[index - 1]), config.master_url]
    return procs.start_detached(f"spark-worker-{index}", argv, log_file, env=_daemon_env(config), cwd=work_dir)


def master_state(config: SparkClusterConfig) -> dict[str, Any]:
    """The master's own view (its web UI's JSON): alive workers, running applications."""
    with urllib.request.urlopen(f"{config.ui_url}/json/", timeout=3) as resp:
        return cast("dict[str, Any]", json.loads(resp.read()))


def alive_workers(config: SparkClusterConfig) -> int:
    return sum(1 for w in master_state(config).get("workers", []) if w.get("state") == "ALIVE")
