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
