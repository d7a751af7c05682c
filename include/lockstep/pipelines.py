"""Where pipeline specs are read from.

The DAG files, the CLI and the Airflow plugin page must all see the same set of
specs, so the folder is decided in one place. ``LOCKSTEP_PIPELINES_DIR`` points
an Airflow deployment (or a test session) at another folder without touching
the repository.
"""
from __future__ import annotations

import os
from pathlib import Path

from lockstep.paths import project_root

PIPELINES_DIR_ENV = "LOCKSTEP_PIPELINES_DIR"


def pipelines_dir() -> Path:
    """The folder of pipeline spec files: ``$LOCKSTEP_PIPELINES_DIR`` or ``include/pipelines``."""
    return Path(os.environ.get(PIPELINES_DIR_ENV) or project_root() / "include" / "pipelines")
