"""A new user's walk through Airflow's UI in headless Chromium, one screenshot per step (artifacts/walk-*.png).

Runs are triggered through the REST API (what the trigger form posts); what the user reads is checked
in the real UI: the failed plan task's log ends with the one-line summary and was not retried, a failed
Spark run's summary names the job's own cause, the run's note links to its checkpoint on the
Checkpoints page and the page links back to the run, and the example downstream DAG ran after the commit.
"""
from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from lockstep.paths import project_root
from lockstep_airflow.links import checkpoint_url, dag_run_url, task_url

from ..integration.engine_helpers import store
from ..support.data import produce_orders
from .browser import Browser, chromium_binary
from .conftest import wait_for
from .test_pipeline_dag import DOWNSTREAM, downstream_on, explain, note, run_dag

ARTIFACTS = project_root() / "artifacts"


@pytest.fixture(scope="module")
def pipeline(airflow, bootstrap):
    return airflow.new_pipeline(bootstrap, "walk")


@pytest.fixture(scope="module")
def client(airflow, pipeline):
    return airflow.client_for(pipeline.spec().dag_id)


@pytest.fixture(scope="module")
def ui(airflow, tmp_path_factory):
    """A browser signed in through Airflow's login form."""
    if chromium_binary() is None:
        pytest.fail("Chromium is missing: run scripts/install-chromium.sh (make wires it in)")
    folder = tmp_path_factory.mktemp("walk-browser")
    with Browser(folder / "profile", folder / "chromium.log") as b:
        b.navigate(f"{airflow.url}/auth/login?next=/")
        b.type_into("input[name=username]", airflow.username)
        b.type_into("input[name=password]", airflow.password)
        b.evaluate("document.querySelector('button[type=submit]').click()")
        b.wait_for("!location.pathname.startsWith('/auth') && document.readyState === 'complete'", "the sign-in")
        yield b


def shows(ui: Browser, text: str, what: str, timeout: float = 60) -> None:
    ui.wait_for(f"document.body.innerText.includes({json.dumps(text)})", what, timeout)


def test_a_missing_savepoint_fails_once_and_the_log_ends_with_the_way_out(airflow, client, pipeline, ui):
    dag_id = pipeline.spec().dag_id
    run_id, state = run_dag(client, dag_id, {"restore_from": "does-not-exist"})
    assert state == "failed"
    assert client.task_instances(dag_id, run_id)["plan"]["try_number"] == 1  # terminal: no retry

    ui.navigate(f"{airflow.url}{task_url(dag_id, run_id, 'plan')}")
    shows(ui, "Trigger a new run with restore_from naming an existing savepoint", "the plan's summary in its log")
    text = ui.text()
    summary = next(x for x in text.splitlines() if f"lockstep {pipeline.name} plan failed:" in x)
    assert "savepoint 'does-not-exist' not found" in summary, summary
    ui.screenshot(ARTIFACTS / "walk-1-missing-savepoint-log.png")


def test_a_failed_spark_run_names_the_jobs_cause(airflow, client, pipeline, ui):
    dag_id = pipeline.spec().dag_id
    produce_orders(pipeline, 40, start=100)
    run_id, state = run_dag(client, dag_id, {"lockstep_failpoints": "job.mid_produce=raise"})
    assert state == "failed"
    checkpoint_id = max(store(pipeline).checkpoint_ids())

    ui.navigate(f"{airflow.url}{task_url(dag_id, run_id, 'run')}")
    shows(ui, f"lockstep {pipeline.name} run failed: checkpoint {checkpoint_id}:", "the run's summary in its log", 90)
    summary = next(x for x in ui.text().splitlines() if f"lockstep {pipeline.name} run failed:" in x)
    assert "failpoint job.mid_produce raised" in summary and "spark-submit" not in summary, summary
    ui.screenshot(ARTIFACTS / "walk-2-failed-spark-run-log.png")

    ui.navigate(f"{airflow.url}{dag_run_url(dag_id, run_id)}")
    shows(ui, "failpoint job.mid_produce raised", "the failed run's note with the cause")
    ui.screenshot(ARTIFACTS / "walk-3-failed-run-note.png")


def test_a_runs_note_links_to_its_checkpoint_and_back_and_downstream_runs(airflow, client, pipeline, ui, bootstrap):
    dag_id = pipeline.spec().dag_id
    sink = f"kafka://{bootstrap.split(',')[0]}/{pipeline.sink}"
    downstream = downstream_on(client, sink)
    try:
        run_id, state = run_dag(client, dag_id)  # recovers the failed checkpoint and commits its replay
        assert state == "success", explain(client, dag_id, run_id)
        checkpoint_id = store(pipeline).latest_completed().checkpoint_id
        assert note(client, dag_id, run_id).startswith(f"lockstep · [checkpoint {checkpoint_id}](")

        # The run's note, rendered by Airflow as Markdown, links to the checkpoint on the page.
        ui.navigate(f"{airflow.url}{dag_run_url(dag_id, run_id)}")
        page = checkpoint_url(pipeline.name, checkpoint_id)
        selector = json.dumps(f'a[href="{page}"]')
        ui.wait_for(f"document.querySelector({selector}) !== null", "the note's link to the checkpoint", 60)
        ui.screenshot(ARTIFACTS / "walk-4-run-note.png")
        if ui.evaluate(f"document.querySelector({selector}).target") == "_blank":
            ui.navigate(f"{airflow.url}{page}")  # Airflow opens note links in a new tab: follow it there
        else:
            ui.evaluate(f"document.querySelector({selector}).click()")
        ui.wait_for("location.pathname.startsWith('/plugin/lockstep-checkpoints')", "the Checkpoints page")
        frame = "document.querySelector('iframe') && document.querySelector('iframe').contentDocument"
        ui.wait_for(f"{frame} && {frame}.getElementById('checkpoint-{checkpoint_id}') !== null",
                    f"checkpoint {checkpoint_id} inside the page's frame", 60)
        ui.screenshot(ARTIFACTS / "walk-5-checkpoint-on-the-page.png")

        # ... and the page links back to the run, inside Airflow's frame.
        back = json.dumps(f'#checkpoint-{checkpoint_id} a[href="{dag_run_url(dag_id, run_id)}"]')
        ui.wait_for(f"{frame}.querySelector({back}) !== null", "the checkpoint's link to its DAG run")
        ui.evaluate(f"{frame}.querySelector({back}).click()")
        ui.wait_for(f"location.pathname === {json.dumps(dag_run_url(dag_id, run_id))}", "the DAG run page", 30)

        # The example DAG scheduled on the sink's Asset ran after the commit.
        runs = wait_for(lambda: [r for r in client.dag_runs(downstream) if r["state"] == "success"] or None,
                        "the downstream DAG to run after the commit", timeout=120)
        ui.navigate(f"{airflow.url}{dag_run_url(downstream, runs[0]['dag_run_id'])}")
        shows(ui, downstream, "the downstream run's page")
        ui.screenshot(ARTIFACTS / "walk-6-downstream-run.png")

        # The trigger form: restore_from takes a checkpoint the page lists (savepoints are proposed; a test of
        # test_pipeline_dag.py waits for one).
        ui.navigate(f"{airflow.url}/dags/{dag_id}")
        ui.wait_for("Array.from(document.querySelectorAll('button')).some(b => b.innerText.trim() === 'Trigger')",
                    "the Trigger button")
        ui.evaluate("Array.from(document.querySelectorAll('button')).find(b => b.innerText.trim() === 'Trigger')"
                    ".click()")
        shows(ui, "Restore from", "the trigger form with the pipeline's params")
        ui.screenshot(ARTIFACTS / "walk-7-trigger-form.png")
    finally:
        client._call("PATCH", f"/api/v2/dags/{quote(DOWNSTREAM)}", {"is_paused": True})
