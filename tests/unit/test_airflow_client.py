"""The demo's and tests' Airflow REST client against a small HTTP server on this host: a request Airflow's database
refused ("Database error", HTTP 500) is tried again, up to four times, and any other refusal is not; a GET that got no
answer in time is asked again, a POST not (it may have made its run)."""
from __future__ import annotations

import json
import threading
import time
import types
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer

import pytest

from lockstep.ops import airflow_client
from lockstep.ops.airflow_client import AirflowClient, AirflowError


def _sleep_in_client(monkeypatch: pytest.MonkeyPatch, sleep: Callable[[float], object]) -> None:
    """The client's ``time.sleep`` replaced, and no one else's: patched in the time module itself, every thread
    of the test process (xdist's own) would spin through its waits, and a sleep that records each call grew a
    worker to 20 GB before the kernel killed it."""
    monkeypatch.setattr(airflow_client, "time", types.SimpleNamespace(sleep=sleep, monotonic=time.monotonic))


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
    _sleep_in_client(monkeypatch, lambda s: None)
    server, posts = serve([500, 200])
    try:
        client = AirflowClient(f"http://127.0.0.1:{server.server_port}", "admin", "pw")
        assert client.trigger("lockstep_orders") == "manual__2"
        assert posts == ["/api/v2/dags/lockstep_orders/dagRuns"] * 2
    finally:
        server.shutdown()


def test_a_trigger_refused_for_another_reason_or_too_often_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    _sleep_in_client(monkeypatch, lambda s: None)
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


def serve_slowly(delays: list[float]) -> tuple[HTTPServer, list[str]]:
    """A server whose answers to GET and POST (but the login) come after ``delays`` seconds, one per request, each
    request in its own thread (a late answer holds up no other)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: dict[str, object]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            seen.append(f"GET {self.path}")
            threading.Event().wait(delays.pop(0))
            self._answer({"state": "success"})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/auth/token":
                return self._answer({"access_token": "t"})
            seen.append(f"POST {self.path}")
            threading.Event().wait(delays.pop(0))
            self._answer({"dag_run_id": "manual__1"})

        def log_message(self, *args: object) -> None:
            pass

        def handle(self) -> None:
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped waiting

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=lambda: server.serve_forever(poll_interval=0.05), daemon=True).start()
    return server, seen


def test_a_poll_that_gets_no_answer_in_time_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # The api-server starved of CPU answered one GET of the cluster DAG's test after its 30 s (CI, 2026-12-04);
    # a poll reads and changes nothing, so the wait goes on.
    _sleep_in_client(monkeypatch, lambda s: None)
    server, seen = serve_slowly([1.0, 0.0])
    try:
        client = AirflowClient(f"http://127.0.0.1:{server.server_port}", "admin", "pw", timeout_s=0.3)
        assert client.run_state("lockstep_orders", "manual__1") == "success"
        assert seen == ["GET /api/v2/dags/lockstep_orders/dagRuns/manual__1"] * 2
    finally:
        server.shutdown()


def test_a_trigger_that_gets_no_answer_in_time_is_not_sent_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # It may have made its DAG run: a second POST would make another.
    _sleep_in_client(monkeypatch, lambda s: None)
    server, seen = serve_slowly([1.0, 0.0])
    try:
        client = AirflowClient(f"http://127.0.0.1:{server.server_port}", "admin", "pw", timeout_s=0.3)
        with pytest.raises(AirflowError, match="POST /api/v2/dags/lockstep_orders/dagRuns: no answer"):
            client.trigger("lockstep_orders")
        assert seen == ["POST /api/v2/dags/lockstep_orders/dagRuns"]
    finally:
        server.shutdown()


def test_a_server_that_refuses_connections_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing listens: asking again a moment later changes nothing, so the first refusal is the answer.
    waits: list[float] = []
    _sleep_in_client(monkeypatch, waits.append)
    server = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_port
    server.server_close()
    with pytest.raises(AirflowError, match="no answer from .*refused"):
        AirflowClient(f"http://127.0.0.1:{port}", "admin", "pw", timeout_s=0.3)
    assert waits == []
