"""Where things live in Airflow's UI: the one definition of the URLs Lockstep links to.

The Checkpoints page is mounted at ``/lockstep`` and shown inside the UI under
``/plugin/<URL_ROUTE>``; the UI loads ``/plugin/<URL_ROUTE><page path>`` into its frame, so a link
of that form opens the page, inside Airflow, at one checkpoint. Used by run notes, task extra
links and the page itself. ``ui_base`` is Airflow's base path when it is served under a prefix.
"""
from __future__ import annotations

from urllib.parse import quote, urlencode

#: Where the FastAPI app is mounted in the api-server.
URL_PREFIX = "/lockstep"
#: The nav entry's route: the UI renders the page at ``/plugin/lockstep-checkpoints``.
URL_ROUTE = "lockstep-checkpoints"


def segment(value: str) -> str:
    """One path segment, encoded as the UI's ``encodeURIComponent`` does."""
    return quote(value, safe="!'()*~")


def checkpoint_url(pipeline: str, checkpoint_id: int, ui_base: str = "") -> str:
    """The Checkpoints page inside Airflow, showing ``pipeline`` at checkpoint ``checkpoint_id``."""
    query = urlencode({"pipeline": pipeline, "checkpoint": checkpoint_id})
    return f"{ui_base}/plugin/{URL_ROUTE}{URL_PREFIX}/?{query}#checkpoint-{checkpoint_id}"


def pipeline_url(pipeline: str, ui_base: str = "") -> str:
    """The Checkpoints page inside Airflow, showing only ``pipeline``."""
    return f"{ui_base}/plugin/{URL_ROUTE}{URL_PREFIX}/?{urlencode({'pipeline': pipeline})}"


def dag_url(dag_id: str, ui_base: str = "") -> str:
    return f"{ui_base}/dags/{segment(dag_id)}"


def dag_run_url(dag_id: str, run_id: str, ui_base: str = "") -> str:
    return f"{dag_url(dag_id, ui_base)}/runs/{segment(run_id)}"


def task_url(dag_id: str, run_id: str, task_id: str, ui_base: str = "") -> str:
    """A task of a run; the UI opens it on its Logs tab (Airflow 3.3 has no ``/logs`` route)."""
    return f"{dag_run_url(dag_id, run_id, ui_base)}/tasks/{segment(task_id)}"
