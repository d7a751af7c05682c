"""The demo's and tests' Airflow REST client against a small HTTP server on this host: a request Airflow's database
refused ("Database error", HTTP 500) is tried again, up to four times, and any other refusal is not."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from lockstep.ops.airflow_client import AirflowClient, AirflowError


def serve(answers: list[int]) -> tuple[HTTPServer, list[str]]:
    posts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/auth/token":
                code, body = 201, {"access_token": "t"}
            else:
                posts.append(self.path)
                code = answers.pop(0)
                body = {"dag_run_id": f"manual__{len(posts)}"} if code == 200 else {"detail": {"reason": "Database error"}}
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, posts


def test_a_trigger_refused_by_a_busy_database_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda s: None)
    server, posts = serve([500, 200])
    try:
        client = AirflowClient(f"http://127.0.0.1:{server.server_port}", "admin", "pw")
        assert client.trigger("lockstep_orders") == "manual__2"
        assert posts == ["/api/v2/dags/lockstep_orders/dagRuns"] * 2
    finally:
        server.shutdown()


def test_a_trigger_refused_for_another_reason_or_too_often_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda s: None)
    server, posts = serve([404, 500, 500, 500, 500])
    try:
        client = AirflowClient(f"http://127.0.0.1:{server.server_port}", "admin", "pw")
        with pytest.raises(AirflowError, match="HTTP 404"):
            client.trigger("missing")
        with pytest.raises(AirflowError, match="HTTP 500"):
            client.trigger("lockstep_orders")
        assert len(posts) == 5  # the 404 once, the 500 four times
    finally:
        server.shutdown()
