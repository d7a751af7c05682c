"""What parsing Lockstep's DAG files imports, imported once by Airflow's dag-processor before it forks its parsers.

The dag-processor parses each DAG file in a process it forks from itself, every ``[dag_processor]
min_file_process_interval`` (10 s on the local platform). Its own process has Airflow imported and nothing of
Lockstep, so every parse imported Lockstep's spec and steps, boto3 and the providers' asset URI handlers again
(Airflow looks one up for each Asset a DAG declares; the Amazon provider's brings its hooks). Timed on the local
platform's six DAG files and nine example specs, a round of parses cost 1.88 s of CPU, 0.46 s with this preload;
idle, the dag-processor used 0.10 cores (docs/operations.md, "The dag-processor's parses").

`preload_in_dag_processor` does nothing in any other process: the scheduler, triggerer and api-server import
`airflow_local_settings` as well, and have no use for these modules. ``lockstep dev up`` writes an
``airflow_local_settings.py`` that calls it into Airflow's ``config`` folder; docs/operations.md says how to add
the call to one's own. A module that fails to import is skipped, and a parse imports it itself, as before.

A parse still reads the DAG files and the specs each time. The modules preloaded are what it would have
imported, as of the dag-processor's start: restart the dag-processor after upgrading Lockstep, as the task
workers' forkserver (`lockstep_airflow.task_preload`) needs too.
"""
from __future__ import annotations

__all__ = ["MODULES", "is_dag_processor", "preload_in_dag_processor"]

import importlib
import sys
from collections.abc import Sequence

#: What parsing dags/ imports beyond Airflow itself: the DAG files' imports, then what building a pipeline's DAG
#: imports on its way (its trigger form reads the checkpoint store over boto3; a cron schedule is described).
MODULES = (
    "lockstep.paths", "lockstep.spec", "lockstep_airflow.dag_factory", "lockstep_airflow.operators",
    "lockstep_airflow.params", "lockstep.steps.client_factory", "lockstep.store.checkpoint_store",
    "lockstep.store.s3", "lockstep.state_function", "lockstep.tables.interval_join", "lockstep.connections",
    "boto3", "boto3.s3.inject", "botocore.client", "croniter", "cron_descriptor",
)


def is_dag_processor(argv: Sequence[str]) -> bool:
    """Whether this process is ``airflow dag-processor`` (as ``airflow standalone`` and the Helm chart start it)."""
    return list(argv[1:2]) == ["dag-processor"]


def preload_in_dag_processor(argv: Sequence[str] | None = None) -> list[str]:
    """In the dag-processor: import `MODULES`, have the providers' asset URI handlers found, and fill boto3's
    caches of the S3 models (`lockstep.store.s3.warm_models`, which opens no connection). What was preloaded;
    nothing in any other process."""
    if not is_dag_processor(sys.argv if argv is None else argv):
        return []
    loaded = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a parse imports it itself
            continue
        loaded.append(name)
    try:
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

        ProvidersManagerTaskRuntime().asset_uri_handlers  # type: ignore[no-untyped-call]  # noqa: B018 - found once, inherited by each parse
        loaded.append("asset URI handlers")
    except Exception:  # noqa: BLE001 - each parse finds them, as before
        pass
    try:
        from lockstep.store.s3 import warm_models

        warm_models()
        loaded.append("S3 models")
    except Exception:  # noqa: BLE001 - a parse's client reads them itself
        pass
    return loaded
