"""``airflow standalone`` over this repository's dags/ and plugins/.

Standalone runs the scheduler, dag-processor, api-server and triggerer with
LocalExecutor on SQLite; it is started in its own process group so ``dev down``
stops every child. Settings are sized for a 2-core machine.
"""
from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from lockstep.paths import project_root
from lockstep_dev import procs

MARKER = "airflow standalone"
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
#: ``[scheduler] mp_forkserver_preload``: Airflow, its executor and task runner, then Lockstep's task modules.
PRELOAD = "airflow,airflow.executors.local_executor,lockstep_airflow.task_preload"
#: The module Airflow imports from ``$AIRFLOW_HOME/config`` in each of its processes (`write_local_settings`).
LOCAL_SETTINGS = "airflow_local_settings.py"


#: ``[core] parallelism``: the task instances LocalExecutor runs at once. Tried and not kept: Airflow's default, 32,
#: on PostgreSQL. With 200 lag-triggered pipelines, 20 of them fed, every checkpoint then ran at once on the 2 cores
#: (load average 17-27) and the fed pipelines' p99 was 81-107 s, against 64 s at 4 (docs/operations.md).
PARALLELISM = 4


@dataclass(frozen=True)
class AirflowConfig:
    port: int
    home: Path
    #: SQLAlchemy's URL of Airflow's metadata database; None: SQLite in ``home`` (Airflow's own default)
    database_url: str | None = None

    @property
    def parallelism(self) -> int:
        """``[core] parallelism`` (`PARALLELISM`)."""
        return PARALLELISM

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self, connections: Mapping[str, str]) -> dict[str, str]:
        root = project_root()
        env = {
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            # An idle scheduler looks again after this long (Airflow's default: 1 s). Each DAG run waits for a few
            # such looks (the run created, started, its task queued, its end seen): at 0.25 s a lag-triggered
            # checkpoint cycle is about 1.5 s shorter (docs/BENCHMARKS-freshness.md).
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.25",
            # Task workers forked from a forkserver that imported what a Lockstep task imports
            # (lockstep_airflow.task_preload): each task inherits those modules instead of importing them again.
            "AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
            "AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD": PRELOAD,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            # Task processes report to the api-server's Execution API; its default URL
            # assumes port 8080, which is wrong whenever another port is chosen.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url or f"sqlite:///{self.home / 'airflow.db'}",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
        }
        env.update(connections)
        return env

    def admin_password(self) -> str | None:
        path = self.home / PASSWORDS_FILE
        if not path.exists():
            return None
        return cast("dict[str, str]", json.loads(path.read_text())).get("admin")


def write_local_settings(home: Path) -> Path:
    """The repository's ``config/airflow_local_settings.py`` copied into ``home/config``, where each Airflow process
    imports it as it starts (it preloads the dag-processor's parses: `lockstep_airflow.parse_preload`)."""
    target = home / "config" / LOCAL_SETTINGS
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(project_root() / "config" / LOCAL_SETTINGS, target)
    return target


def start(config: AirflowConfig, log_file: Path, env: Mapping[str, str], airflow_bin: str) -> int:
    config.home.mkdir(parents=True, exist_ok=True)
    write_local_settings(config.home)
    return procs.start_detached("airflow", [airflow_bin, "standalone"], log_file, env=env, cwd=config.home)


def is_ready(config: AirflowConfig) -> bool:
    with urllib.request.urlopen(f"{config.url}/api/v2/monitor/health", timeout=3) as resp:
        body = json.loads(resp.read())
    return cast(int, resp.status) == 200 and body.get("scheduler", {}).get("status") == "healthy"
