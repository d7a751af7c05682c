"""Airflow's metadata database on PostgreSQL, for the local platform (``lockstep dev up --with airflow
--airflow-db postgres``).

Airflow's default database, SQLite, takes one writer at a time: with 50 pipelines due every minute the
scheduler met ``database is locked`` and stopped (docs/operations.md, *Many pipelines in one Airflow*).
Airflow's documentation names PostgreSQL 14-18 or MySQL 8 for anything beyond development. The server here
is PostgreSQL 16 from the ``pgserver`` wheel (a build of PostgreSQL's own binaries; installed by
``make setup`` like every other dependency), run as a process of the platform's like Kafka or the S3 server:
its data in the platform's directory, listening on 127.0.0.1 only, with trust authentication (no password
to keep, as Kafka's local PLAINTEXT listener has none). PostgreSQL refuses to run as root; where the
platform runs as root (containers, CI), the server runs in a user namespace of its own as an unprivileged
user mapped onto root (``unshare --map-user``): its files are root's like the platform's other data, in
directories only root may enter (pytest's, for one), and ``down --wipe`` deletes them like the rest.
"""
from __future__ import annotations

__all__ = ["MARKER", "PostgresConfig", "binaries", "ensure_database", "init", "is_ready", "start"]

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockstep_dev import procs

#: What the server's command line contains (``procs.is_running``): its binary of the wheel.
MARKER = "pginstall/bin/postgres"
USER = "airflow"
DATABASE = "airflow"
#: The user id the server has inside its user namespace when the platform runs as root.
SERVER_UID = 1000


@dataclass(frozen=True)
class PostgresConfig:
    port: int
    home: Path

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def url(self) -> str:
        """SQLAlchemy's URL of Airflow's database (``[database] sql_alchemy_conn``)."""
        return f"postgresql+psycopg2://{USER}@127.0.0.1:{self.port}/{DATABASE}"


def binaries() -> Path:
    import pgserver

    return Path(pgserver.__file__).parent / "pginstall" / "bin"


def _as_server_user(argv: list[str]) -> list[str]:
    """``argv`` as an unprivileged user when this process is root (PostgreSQL refuses root), else as it is:
    ``unshare`` maps root onto ``SERVER_UID`` in a new user namespace and execs ``argv`` (the same pid)."""
    if os.geteuid() != 0:
        return argv
    return ["unshare", f"--map-user={SERVER_UID}", f"--map-group={SERVER_UID}", *argv]


def init(config: PostgresConfig) -> None:
    """Create the database cluster on the first start (``initdb``); nothing when it exists."""
    if (config.data_dir / "PG_VERSION").exists():
        return
    config.home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(_as_server_user([str(binaries() / "initdb"), "-D", str(config.data_dir), "-U", USER,
                                           "--auth=trust", "-E", "UTF8", "--no-sync"]),
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise procs.PlatformError(f"initdb of Airflow's PostgreSQL in {config.data_dir} failed: "
                                  f"{(done.stderr or done.stdout).strip()[-1000:]}")


def start(config: PostgresConfig, log_file: Path) -> int:
    """Start the server (``init`` first); returns its pid (``unshare`` execs the server: the same pid)."""
    init(config)
    argv = [str(binaries() / "postgres"), "-D", str(config.data_dir), "-p", str(config.port), "-h", "127.0.0.1",
            "-k", str(config.data_dir),  # its Unix socket beside its data, not in /var/run
            "-c", "max_connections=200",  # Airflow's scheduler, api-server, dag-processor, triggerer, tasks
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]  # a development box
    return procs.start_detached("postgres", _as_server_user(argv), log_file, env=dict(os.environ))


def _connect(config: PostgresConfig, database: str) -> Any:
    import psycopg2

    return psycopg2.connect(host="127.0.0.1", port=config.port, user=USER, dbname=database, connect_timeout=3)


def is_ready(config: PostgresConfig) -> bool:
    try:
        conn = _connect(config, "postgres")
    except Exception:  # noqa: BLE001 - not accepting connections yet
        return False
    conn.close()
    return True


def ensure_database(config: PostgresConfig) -> None:
    """Airflow's database, created once (``airflow db migrate``, run by ``airflow standalone``, fills it)."""
    conn = _connect(config, "postgres")
    try:
        conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
        cur = conn.cursor()
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
        if cur.fetchone() is None:
            cur.execute(f"CREATE DATABASE {DATABASE}")
    finally:
        conn.close()
