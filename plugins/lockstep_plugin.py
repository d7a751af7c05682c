"""Registers Lockstep's Checkpoints page with Airflow.

The FastAPI app is mounted by the api-server under ``/lockstep``; the external view
puts a "Checkpoints" entry in the UI's navigation that renders the page inside the UI
(an iframe at ``/plugin/lockstep-checkpoints``). The listener writes each pipeline run's
note when the run ends (in the scheduler). Restart Airflow after editing.
"""
from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from lockstep_airflow import listener
from lockstep_airflow.checkpoints_page import app
from lockstep_airflow.links import URL_PREFIX, URL_ROUTE
from lockstep_airflow.param_errors import ReadableParamErrors


class LockstepPlugin(AirflowPlugin):
    name = "lockstep"
    listeners = [listener]
    # A refused trigger answers with the rule and what is expected, not jsonschema's dump.
    fastapi_root_middlewares = [{"middleware": ReadableParamErrors, "name": "Lockstep: readable param errors"}]
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Lockstep checkpoints"}]
    external_views = [
        {
            "name": "Checkpoints",
            "href": f"{URL_PREFIX}/",
            "url_route": URL_ROUTE,
            "destination": "nav",
            "nav_top_level": True,
        },
        {
            "name": "Checkpoint",
            "href": f"{URL_PREFIX}/runs/{{DAG_ID}}/{{RUN_ID}}",
            "destination": "dag_run",
            "url_route": "lockstep-run-checkpoint",
        },
    ]
