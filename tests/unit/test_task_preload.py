"""What Airflow's forkserver preloads for Lockstep's tasks (`lockstep_airflow.task_preload`), and how a task
says whether it had them."""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lockstep_airflow.operators import preload_note

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_named_for_preloading_imports() -> None:
    """A renamed or removed module would be skipped by the preload, silently: each must import."""
    from lockstep_airflow.task_preload import MODULES

    for name in MODULES:
        importlib.import_module(name)


def test_a_task_says_whether_its_worker_preloaded_the_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "lockstep_airflow.task_preload", raising=False)
    assert "imported Lockstep's task modules itself" in preload_note()
    assert "mp_forkserver_preload" in preload_note()
    monkeypatch.setitem(sys.modules, "lockstep_airflow.task_preload", sys)
    assert preload_note().startswith("Lockstep's task modules were preloaded by the worker")


def test_the_operators_do_not_import_the_preload_themselves() -> None:
    """Else every task would say it was preloaded, and import it all on the way."""
    code = ("import sys, lockstep_airflow.operators, lockstep_airflow.dag_factory; "
            "print('lockstep_airflow.task_preload' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": ":".join(sys.path)})
    assert out.stdout.strip() == "False"


def test_the_preload_leaves_boto3_s_s3_models_loaded_and_no_connection_open() -> None:
    """`lockstep.store.s3.warm_models`, called by the preload, fills the default session's caches, so a task's own S3 client is built from them; the
    placeholder client it builds connects nowhere (its endpoint's port would refuse)."""
    code = ("import time, boto3, psutil, lockstep_airflow.task_preload as p; "
            "core = getattr(boto3.DEFAULT_SESSION, '_session', None); "
            "cache = core.get_component('data_loader')._cache if core is not None else {}; "
            "began = time.process_time(); "
            "from lockstep.store.s3 import s3_client; "
            "c = s3_client({'endpoint_url': 'http://127.0.0.1:9', 'aws_access_key_id': 'a', "
            "'aws_secret_access_key': 'b', 'region_name': 'us-east-1'}); c.get_paginator('list_objects_v2'); "
            "print(any('load_service_model' in str(k) for k in cache), "
            "len(psutil.Process().net_connections()), round(time.process_time() - began, 3))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": ":".join(sys.path)})
    cached, connections, _seconds = out.stdout.split()
    assert (cached, connections) == ("True", "0"), out.stdout


# ---- the dag-processor's parses (lockstep_airflow.parse_preload) --------------------------------------------
def test_the_parse_preload_runs_only_in_the_dag_processor():
    from lockstep_airflow.parse_preload import is_dag_processor, preload_in_dag_processor

    assert is_dag_processor(["/venv/bin/airflow", "dag-processor"])
    assert not is_dag_processor(["/venv/bin/airflow", "scheduler"])
    assert not is_dag_processor(["/venv/bin/airflow", "api_server"])
    assert not is_dag_processor(["/venv/bin/airflow"])
    assert preload_in_dag_processor(["/venv/bin/airflow", "triggerer"]) == []


def test_after_the_preload_parsing_every_dag_file_imports_nothing_of_lockstep_or_boto(tmp_path):
    """What `MODULES` names is what parsing dags/ imports: run in a fresh interpreter as the dag-processor, the
    preload leaves a parse of every DAG file (the repository's specs, a store it cannot reach) no Lockstep or boto
    module to import, and the local settings file the platform copies is what calls it."""
    code = textwrap.dedent(f"""
        import os, runpy, sys
        sys.argv = ["airflow", "dag-processor"]
        sys.path[:0] = [{str(ROOT / "plugins")!r}, {str(ROOT / "include")!r}]
        import airflow
        assert "lockstep_airflow.parse_preload" in sys.modules, "airflow_local_settings did not preload"
        before = set(sys.modules)
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag({str(ROOT / "dags")!r})
        assert not bag.import_errors, bag.import_errors
        print(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("lockstep", "lockstep_airflow",
              "boto3", "botocore")))
    """)
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "LOCKSTEP_PIPELINES_DIR": str(ROOT / "include" / "pipelines"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(
               {"conn_type": "aws", "login": "x", "password": "y",
                "extra": {"region_name": "us-east-1", "endpoint_url": "http://127.0.0.1:9"}})}
    (tmp_path / "config").mkdir()
    shutil.copyfile(ROOT / "config" / "airflow_local_settings.py", tmp_path / "config" / "airflow_local_settings.py")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-2000:]
