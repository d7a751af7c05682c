"""A Spark Connect server: one long-lived Spark driver that every checkpoint's run connects to.

Started with pyspark's own ``spark-submit`` and the Connect server class that ships in its jars,
with the settings every Lockstep run needs (``lockstep.spark.conf``: the Kafka connector and
Lockstep's writer jar on the classpath, speculation off) and the environment a job gets
(``spark.conf.job_environment``: this venv's Python for the Python workers, ``include/``
importable). The master is ``local[*]``, or the standalone master of a cluster platform.

``python -m lockstep_dev.spark_connect --host 0.0.0.0 --port 15002`` runs the same server in the
foreground (docker-compose.yaml's ``spark-connect`` service).
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from lockstep_dev import procs

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
MARKER = SERVER_CLASS
#: A client that went away (a killed task) leaves its running query detached; the server
#: interrupts it after this long instead of the default 5 minutes. The next attempt of the
#: checkpoint interrupts it at once anyway (`lockstep.spark.connect`).
DETACHED_TIMEOUT = "30s"
#: The environment variable that gives a local server more task slots than cores (`start`).
TASK_SLOTS_ENV = "LOCKSTEP_CONNECT_TASK_SLOTS"


@dataclass(frozen=True)
class ConnectConfig:
    port: int
    data_dir: Path
    master: str = "local[*]"
    #: The address the server listens on (loopback locally; all interfaces in a container).
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


def server_command(config: ConnectConfig, conf: Mapping[str, object] | None = None) -> list[str]:
    """spark-submit of the Connect server with every setting a Lockstep run needs."""
    from lockstep.spark.conf import spark_conf

    spark_submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent)) or "spark-submit"
    settings = {**spark_conf(conf), "spark.connect.grpc.binding.address": config.host,
                "spark.connect.grpc.binding.port": str(config.port),
                "spark.connect.execute.manager.detachedTimeout": DETACHED_TIMEOUT}
    argv = [spark_submit, "--master", config.master, "--name", "lockstep-spark-connect", "--class", SERVER_CLASS]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    return argv + ["spark-internal"]


def start(config: ConnectConfig, log_file: Path, base_env: Mapping[str, str]) -> int:
    from lockstep.spark.conf import job_environment

    config.data_dir.mkdir(parents=True, exist_ok=True)
    # The server's heap (driver and executors in one JVM locally): 1g unless LOCKSTEP_CONNECT_DRIVER_MEMORY
    # says otherwise (the keyed-state benchmark's 10M keys need more).
    memory = base_env.get("LOCKSTEP_CONNECT_DRIVER_MEMORY") or os.environ.get("LOCKSTEP_CONNECT_DRIVER_MEMORY")
    conf: dict[str, object] = {"spark.driver.memory": memory} if memory else {}
    # Task slots of a local server: more than the cores, for many small checkpoints at once whose tasks mostly
    # wait on Kafka (a checkpoint's own tasks stay as many as the cores: spark.default.parallelism).
    slots = base_env.get(TASK_SLOTS_ENV) or os.environ.get(TASK_SLOTS_ENV)
    if slots and config.master.startswith("local"):
        config = replace(config, master=f"local[{int(slots)}]")
        conf["spark.default.parallelism"] = str(os.cpu_count() or 1)
    command = server_command(config, conf or None)
    return procs.start_detached("spark-connect", command, log_file, env=job_environment(base_env),
                                cwd=config.data_dir)


def is_ready(config: ConnectConfig) -> bool:
    """The gRPC port accepts connections once the server's SparkContext is up."""
    try:
        with socket.create_connection(("127.0.0.1", config.port), timeout=1):
            return True
    except OSError:
        return False


def warm_up(config: ConnectConfig) -> None:
    """One small query through a session of its own, so the first checkpoint does not pay the
    server's first-query cost (class loading, code generation)."""
    from lockstep.spark.connect import connect_mode, new_session

    with connect_mode():
        spark = new_session(config.url)
        try:
            spark.range(1000).selectExpr("sum(id)").collect()
        finally:
            spark.stop()


def main(argv: list[str] | None = None) -> None:
    """The server in the foreground (a container's main process)."""
    import argparse
    import os

    from lockstep.spark.conf import job_environment

    parser = argparse.ArgumentParser(description="Lockstep's Spark Connect server, in the foreground")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=15002)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--data-dir", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)
    argv = server_command(ConnectConfig(args.port, args.data_dir, args.master, args.host))
    os.execvpe(argv[0], argv, job_environment(os.environ))


if __name__ == "__main__":
    main()
