"""What Airflow's forkserver preloads for Lockstep's tasks (`lockstep_airflow.task_preload`), and how a task
says whether it had them."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from lockstep_airflow.operators import preload_note


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
