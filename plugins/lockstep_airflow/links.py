"""Where things live in Airflow's UI: the one definition of the Checkpoints page's URLs.

The page is mounted at ``/lockstep`` and shown inside the UI under ``/plugin/<url_route>``;
the UI loads ``/plugin/<url_route><page path>`` into its frame, so a link of that form opens
the page, inside Airflow, at one checkpoint. Used by run notes, task extra links and the page.
"""
from __future__ import annotations

from urllib.parse import quote, urlencode

#: Where the FastAPI app is mounted in the api-server.
URL_PREFIX = "/lockstep"
#: The nav entry's route: the UI renders the page at ``/plugin/lockstep-checkpoints``.
URL_ROUTE = "lockstep-checkpoints"


def checkpoint_url(pipeline: str, checkpoint_id: int) -> str:
    """The Checkpoints page inside Airflow, showing ``pipeline`` at checkpoint ``checkpoint_id``."""
    query = urlencode({"pipeline": pipeline, "checkpoint": checkpoint_id})
    return f"/plugin/{URL_ROUTE}{URL_PREFIX}/?{query}#checkpoint-{checkpoint_id}"


def dag_run_url(dag_id: str, run_id: str) -> str:
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def task_url(dag_id: str, run_id: str, task_id: str) -> str:
    return f"{dag_run_url(dag_id, run_id)}/tasks/{quote(task_id, safe='')}"
