"""What a DAG run's note says, the task's extra link, restore proposals in the trigger form and
the redaction of connection secrets: pure functions, no Airflow server."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))

from lockstep_airflow.links import checkpoint_url, dag_run_url, task_url
from lockstep_airflow.run_notes import MARK, MAX_NOTE, may_replace, origin, run_note

PLAN = {"pipeline": "orders", "checkpoint_id": 42, "records": 5000, "ranges": ["orders:0[0,2500)", "orders:1[0,2500)"],
        "start_source": "checkpoint:41", "restored_from": None, "dry_run": False}


def test_a_completed_run_names_its_checkpoint_its_origin_and_links_to_the_page():
    note = run_note("orders", "success", PLAN, {"records_out": 4990, "dead_lettered": 10}, None)
    assert note == (f"{MARK}[checkpoint 42](/plugin/lockstep-checkpoints/lockstep/?pipeline=orders&checkpoint=42"
                    "#checkpoint-42): 5,000 records from checkpoint 41 · completed: 4,990 written, 10 dead-lettered")


def test_an_empty_checkpoint_says_so():
    note = run_note("orders", "success", {**PLAN, "records": 0, "ranges": []}, None, None)
    assert note.endswith("0 records from checkpoint 41 · completed, nothing new to write")


@pytest.mark.parametrize("plan, expected", [
    ({"start_source": "savepoint:before-upgrade", "restored_from": "before-upgrade"},
     "restored from savepoint before-upgrade"),
    ({"start_source": "checkpoint:7", "restored_from": "checkpoint:7"}, "restored from checkpoint 7"),
    ({"start_source": "time:2026-11-20T10:00:00Z", "restored_from": "time:2026-11-20T10:00:00Z"},
     "restored from time 2026-11-20T10:00:00Z"),
    ({"start_source": "group"}, "from the consumer group's offsets"),
    ({"start_source": "earliest"}, "from the earliest offsets (auto.offset.reset: no checkpoint or group offsets yet)"),
    ({"start_source": "latest"}, "from the latest offsets (auto.offset.reset: no checkpoint or group offsets yet)"),
])
def test_the_origin_in_words(plan, expected):
    assert origin(plan) == expected


def test_a_failed_run_carries_the_summary_without_repeating_pipeline_and_checkpoint():
    summary = ("lockstep orders run failed: checkpoint 42: the Spark run failed after 12.0 s: failpoint "
               "job.after_flush raised; a retry or the next run fences its transactions and replays its ranges")
    note = run_note("orders", "failed", PLAN, None, summary)
    assert note.startswith(f"{MARK}[checkpoint 42](")
    assert note.endswith("· run failed: the Spark run failed after 12.0 s: failpoint job.after_flush raised; a retry "
                         "or the next run fences its transactions and replays its ranges")


def test_a_plan_that_claimed_nothing_still_gets_its_summary():
    summary = ("lockstep orders plan failed: no checkpoint claimed: cannot restore: savepoint 'nope' not found; "
               "Trigger a new run with restore_from naming an existing savepoint")
    assert run_note("orders", "failed", None, None, summary) == (
        f"{MARK}no checkpoint claimed · plan failed: no checkpoint claimed: cannot restore: savepoint 'nope' not "
        "found; Trigger a new run with restore_from naming an existing savepoint")


def test_a_dry_run_shows_what_it_would_take_and_that_nothing_was_claimed():
    many = {**PLAN, "dry_run": True, "ranges": [f"orders:{p}[0,10)" for p in range(6)], "records": 60}
    note = run_note("orders", "success", many, None, None)
    assert note == (f"{MARK}dry run: checkpoint 42 would take 60 records from checkpoint 41: `orders:0[0,10)`, "
                    "`orders:1[0,10)`, `orders:2[0,10)`, `orders:3[0,10)` and 2 more; nothing was claimed")
    assert "](" not in note  # no link: there is no such checkpoint on the page


def test_a_dry_run_of_a_restore_says_how_much_it_writes_again():
    restore = {**PLAN, "dry_run": True, "ranges": ["orders:0[0,10)"], "records": 10, "restored_from": "nightly",
               "start_source": "savepoint:nightly", "restore": {"re_emitted": 1200, "new": 30}}
    note = run_note("orders", "success", restore, None, None)
    assert note.endswith("`orders:0[0,10)`; the restore writes 1,200 records a second time in all; nothing was claimed")


def test_runs_that_are_not_lockstep_runs_get_no_note_and_long_notes_fit_airflow():
    assert run_note("orders", "success", None, None, None) is None
    long = run_note("orders", "failed", PLAN, None, "lockstep orders run failed: " + "x" * 5000)
    assert len(long) == MAX_NOTE and long.endswith("…")


def test_a_note_written_by_a_user_is_kept():
    assert may_replace(None) and may_replace("") and may_replace(f"{MARK}checkpoint 1 …")
    assert not may_replace("rerun after the broker upgrade — Ana")


def test_links_escape_what_would_break_a_url():
    assert checkpoint_url("a b&c", 3) == "/plugin/lockstep-checkpoints/lockstep/?pipeline=a+b%26c&checkpoint=3#checkpoint-3"
    assert dag_run_url("lockstep_orders", "manual__2026-11-23T10:00:00+00:00") == \
        "/dags/lockstep_orders/runs/manual__2026-11-23T10%3A00%3A00%2B00%3A00"
    assert task_url("d", "r/1", "plan") == "/dags/d/runs/r%2F1/tasks/plan"


def test_the_checkpoint_extra_link_is_the_one_the_task_set():
    from lockstep_airflow.operators import CheckpointLink, LockstepPlanOperator

    task = LockstepPlanOperator(task_id="plan", spec_path="x.yaml")
    assert CheckpointLink().get_link(task, ti_key=None) == ""  # a plan that claimed nothing links nowhere
    task._link("orders", 42)
    assert CheckpointLink().get_link(task, ti_key=None) == checkpoint_url("orders", 42)
    assert [link.name for link in LockstepPlanOperator.operator_extra_links] == ["Checkpoint"]


# ---- the trigger form's restore proposals ------------------------------------------------------------
def test_restore_proposals_are_the_savepoints_newest_first_and_no_checkpoint():
    """Completed checkpoints are not proposed: the form is part of the serialized DAG, and a form that changed
    with every checkpoint made a running pipeline a new DAG version at every parse."""
    from lockstep_airflow.params import restore_points

    savepoints = [SimpleNamespace(name="old", checkpoint_id=3, created_at="2026-11-01T08:00:00+00:00"),
                  SimpleNamespace(name="before-upgrade", checkpoint_id=9, created_at="2026-11-20T08:00:00+00:00")]
    points = restore_points(savepoints)
    assert [p.value for p in points] == ["before-upgrade", "old"]
    assert points[0].label == "savepoint before-upgrade (checkpoint 9, 2026-11-20 08:00 UTC)"


def test_the_form_proposes_restore_points_accepts_free_text_and_marks_nothing_required():
    from lockstep_airflow.params import RestorePoint, pipeline_params

    params = pipeline_params([RestorePoint("before-upgrade", "savepoint before-upgrade (…)")])
    restore = params["restore_from"].dump()
    assert restore["schema"]["examples"] == ["before-upgrade"]
    assert restore["schema"]["values_display"] == {"before-upgrade": "savepoint before-upgrade (…)"}
    assert "enum" not in restore["schema"]  # a name typed by hand is still accepted
    for name, param in params.items():  # optional in the form: every type admits null
        assert "null" in param.schema["type"], name
    assert params["dry_run"].value is False


def test_a_worker_parsing_the_file_to_run_a_task_reads_no_restore_points(monkeypatch):
    from airflow.sdk.definitions._internal.dag_parsing_context import _airflow_parsing_context_manager

    from lockstep_airflow import params as params_module

    def must_not_be_called(spec, timeout_s=None, clients=None):
        raise AssertionError("a worker's parse read the checkpoint store")

    monkeypatch.setattr("lockstep.steps.client_factory.checkpoint_store", must_not_be_called)
    # Airflow's context manager puts back the variables it found set, and leaves those it set: set through
    # monkeypatch first, they are removed again after this test (left, every later parse in this worker
    # would have been a task's, reading no restore points).
    for name in ("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "_AIRFLOW_PARSING_CONTEXT_TASK_ID"):
        monkeypatch.setenv(name, "")
    with _airflow_parsing_context_manager(dag_id="lockstep_orders", task_id="plan"):
        assert params_module.read_restore_points(SimpleNamespace(name="orders")) == []


def test_a_store_that_cannot_be_read_at_parse_time_proposes_nothing(monkeypatch):
    from lockstep_airflow import params as params_module

    def down(spec, timeout_s=None, clients=None):
        raise RuntimeError("S3 endpoint http://127.0.0.1:9 refused the connection")

    monkeypatch.setattr("lockstep.steps.client_factory.checkpoint_store", down)
    assert params_module.read_restore_points(SimpleNamespace(name="orders")) == []


# ---- secrets ---------------------------------------------------------------------------------------
def test_secrets_of_resolved_and_env_connections_are_redacted(monkeypatch):
    from lockstep import connections

    monkeypatch.setattr(connections, "_seen_secrets", set())
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SECURE", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "b:9093", "sasl.password": "s3cr3t-sasl"}}))
    monkeypatch.setenv("AIRFLOW_CONN_AWS_SECURE", json.dumps(
        {"conn_type": "aws", "login": "AKIA", "password": "aws-secret-key", "extra": {}}))
    monkeypatch.setenv("AIRFLOW_CONN_BROKEN", "{not json")
    text = "login failed for sasl.jaas.config password=\"s3cr3t-sasl\"; S3 said aws-secret-key is wrong; x"
    assert connections.redact(text) == "login failed for sasl.jaas.config password=\"***\"; S3 said *** is wrong; x"
    assert "AKIA" in connections.redact("key AKIA")  # a login is not a secret


def test_short_secrets_are_not_redacted_everywhere(monkeypatch):
    from lockstep import connections

    monkeypatch.setattr(connections, "_seen_secrets", set())
    monkeypatch.setenv("AIRFLOW_CONN_TINY", json.dumps({"conn_type": "aws", "login": "a", "password": "x"}))
    assert connections.redact("exit 1: x") == "exit 1: x"


# ---- a refused trigger, in words ------------------------------------------------------------------
def _refusal(conf: dict) -> str:
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    from lockstep_airflow.params import pipeline_params

    params = ParamsDict(pipeline_params())
    with pytest.raises(ParamValidationError) as refused:
        params.update(conf)
        params.validate()
    return str(refused.value)


@pytest.mark.parametrize("conf, expected", [
    ({"restore_from": "a/b"}, "Invalid input for param restore_from (Restore from): 'a/b' does not match "
                              "'^(checkpoint:[0-9]+|time:[0-9][0-9T:.+Z-]{9,40}|[A-Za-z0-9][A-Za-z0-9._-]{0,99})$'; "
                              "expected a savepoint name"),
    ({"max_records": 0}, "Invalid input for param max_records (Record budget): 0 is less than the minimum of 1; "
                         "expected a whole number of records, 1 or more, or nothing for the spec's budget."),
    ({"dry_run": "yes"}, "Invalid input for param dry_run (Plan only (dry run)): 'yes' is not of type 'boolean', "
                         "'null'; expected true or false."),
])
def test_a_refused_param_is_explained_in_one_sentence_without_the_schema_dump(conf, expected):
    from lockstep_airflow.param_errors import readable
    from lockstep_airflow.params import EXPECTED

    raw = _refusal(conf)
    assert "Failed validating" in raw  # what Airflow answers by itself
    text = readable(raw, EXPECTED)
    assert text.startswith(expected) and "\n" not in text and "Failed validating" not in text, text


def test_an_error_that_is_not_jsonschemas_report_is_kept_as_it_is():
    from lockstep_airflow.param_errors import readable, rewrite_body

    assert readable("DAG with dag_id: 'x' not found") == "DAG with dag_id: 'x' not found"
    assert rewrite_body(b"not json") == b"not json"
    assert rewrite_body(b'{"detail": [{"loc": ["body"]}]}') == b'{"detail": [{"loc": ["body"]}]}'


def test_the_middleware_rewrites_only_refused_triggers():
    import asyncio

    from lockstep_airflow.param_errors import ReadableParamErrors

    raw = _refusal({"max_records": 0})

    def app_answering(status: int, detail: str):
        async def app(scope, receive, send):
            body = json.dumps({"detail": detail}).encode()
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body[:10], "more_body": True})
            await send({"type": "http.response.body", "body": body[10:]})
        return app

    def call(app, path: str, method: str = "POST") -> tuple[int, dict, dict]:
        sent: list[dict] = []

        async def send(message):
            sent.append(message)

        asyncio.run(ReadableParamErrors(app)({"type": "http", "method": method, "path": path}, None, send))
        start = sent[0]
        body = b"".join(m.get("body", b"") for m in sent[1:])
        assert int(dict(start["headers"])[b"content-length"]) == len(body)
        return start["status"], json.loads(body), dict(start["headers"])

    status, doc, _ = call(app_answering(400, raw), "/api/v2/dags/lockstep_orders/dagRuns")
    assert status == 400 and doc["detail"].endswith("expected a whole number of records, 1 or more, or nothing "
                                                    "for the spec's budget.")
    _, doc, _ = call(app_answering(400, raw), "/api/v2/dags/someone_elses/dagRuns")
    assert doc["detail"] == "Invalid input for param max_records (Record budget): 0 is less than the minimum of 1."
    for path, method, status in (("/api/v2/dags/lockstep_orders/dagRuns", "GET", 400),
                                 ("/api/v2/dags/lockstep_orders", "POST", 400),
                                 ("/api/v2/dags/lockstep_orders/dagRuns", "POST", 200)):
        assert call(app_answering(status, raw), path, method)[1]["detail"] == raw
