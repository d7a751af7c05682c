"""Running many teams' pipelines in a real Airflow: a spec that does not validate, beside good ones, shows
as one import error naming its file and field while every other pipeline keeps its DAG and completes its
checkpoints; a failing pipeline alerts its owner's webhook once per failure streak, from the scheduler."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import yaml

from ..integration.engine_helpers import open_transactions, verify
from ..support.data import produce_orders
from .conftest import add_connections, wait_for
from .test_pipeline_dag import explain, run_dag


def _errors_naming(airflow, text: str) -> list[dict]:
    found = airflow.get("/api/v2/importErrors", params={"limit": 100})
    found.raise_for_status()
    return [e for e in found.json()["import_errors"] if text in e["stack_trace"]]


def test_a_broken_spec_shows_one_import_error_and_the_other_pipelines_run(airflow, bootstrap):
    good = [airflow.new_pipeline(bootstrap, "iso") for _ in range(2)]
    doc = yaml.safe_load(good[0].spec_path.read_text())
    broken = airflow.write_spec({**doc, "name": f"{doc['name']}-broken", "transactions": {"id_prefix": f"{doc['name']}-x"},
                                 "checkpoints": {**doc["checkpoints"], "max_records": "many"}})
    try:
        errors = wait_for(lambda: _errors_naming(airflow, str(broken)) or None,
                          f"an import error naming {broken.name}", timeout=120, interval=2)
        assert len(errors) == 1 and errors[0]["filename"].endswith("lockstep_spec_errors.py"), errors
        assert f"{broken}: checkpoints.max_records: must be an integer" in errors[0]["stack_trace"], errors
        assert "every other pipeline keeps its DAG" in errors[0]["stack_trace"], errors

        client = airflow.client_for(*(p.spec().dag_id for p in good))
        for pipeline in good:
            dag_id = pipeline.spec().dag_id
            produce_orders(pipeline, 40)
            run_id, state = run_dag(client, dag_id)
            assert state == "success", explain(client, dag_id, run_id)
            report = verify(pipeline)
            assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
            assert report["expected_outputs"] == report["actual_outputs"] == 40
            assert open_transactions(pipeline) == []
            dag = airflow.get(f"/api/v2/dags/{dag_id}").json()
            assert dag["is_stale"] is False and dag["has_import_errors"] is False, dag
    finally:
        broken.unlink()
    wait_for(lambda: not _errors_naming(airflow, str(broken)), f"the import error of {broken.name} to clear",
             timeout=120, interval=2)


class _Webhook(BaseHTTPRequestHandler):
    received: list[tuple[dict, dict]] = []

    def do_POST(self) -> None:
        _Webhook.received.append((dict(self.headers), json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_failing_pipeline_alerts_its_owners_webhook_once_until_a_run_succeeds(airflow, bootstrap):
    server = HTTPServer(("127.0.0.1", 0), _Webhook)
    _Webhook.received = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        token = "alert-token-5c1d"
        add_connections(airflow, {"AIRFLOW_CONN_LS_TEST_ALERTS": json.dumps({
            "conn_type": "http", "host": f"http://127.0.0.1:{server.server_address[1]}/hooks/payments",
            "password": token})})
        pipeline = airflow.new_pipeline(bootstrap, "alert")
        doc = yaml.safe_load(pipeline.spec_path.read_text())
        pipeline.spec_path.write_text(yaml.safe_dump({**doc, "owner": "payments", "tags": ["tier-1"],
                                                      "alerts": {"webhook_conn_id": "ls_test_alerts"}}))
        spec = pipeline.spec()
        client = airflow.client_for(spec.dag_id)

        def owned() -> dict | None:
            dag = airflow.get(f"/api/v2/dags/{spec.dag_id}").json()
            return dag if dag.get("owners") == ["payments"] else None

        dag = wait_for(owned, "the DAG with its owner", timeout=60, interval=2)
        assert "tier-1" in [t["name"] for t in dag["tags"]], dag

        # Two failing runs in a row (a terminal cause): one alert.
        for _ in range(2):
            run_id, state = run_dag(client, spec.dag_id, {"restore_from": "does-not-exist"})
            assert state == "failed", explain(client, spec.dag_id, run_id)
        wait_for(lambda: _Webhook.received or None, "the alert", timeout=60, interval=1)
        headers, body = _Webhook.received[0]
        assert headers["Authorization"] == f"Bearer {token}"
        assert body["pipeline"] == pipeline.name and body["owner"] == "payments" and body["checkpoint_id"] is None
        assert f"lockstep-cause: lockstep {pipeline.name} plan failed: no checkpoint claimed: cannot restore: " \
               "savepoint 'does-not-exist' not found" in body["text"], body
        assert body["link"].endswith(f"/plugin/lockstep-checkpoints/lockstep/?pipeline={pipeline.name}"), body
        first_run = body["run_id"]

        # A run that succeeds ends the streak; the next failure alerts again.
        produce_orders(pipeline, 20)
        run_id, state = run_dag(client, spec.dag_id)
        assert state == "success", explain(client, spec.dag_id, run_id)
        run_id, state = run_dag(client, spec.dag_id, {"restore_from": "does-not-exist"})
        assert state == "failed"
        wait_for(lambda: len(_Webhook.received) >= 2 or None, "the second streak's alert", timeout=60, interval=1)
        assert [b["run_id"] for _, b in _Webhook.received] == [first_run, run_id], _Webhook.received
        scheduler_log = airflow.log_file.read_text(errors="replace")
        assert f"{pipeline.name}: alert about {first_run} sent: webhook ls_test_alerts" in scheduler_log
        assert token not in scheduler_log
    finally:
        server.shutdown()
        server.server_close()
