"""The registry client's handling of answers and credentials, against a tiny local HTTP server that answers
as the Confluent API does (the real registry is in tests/integration/test_formats.py)."""
from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from lockstep.connections import redact
from lockstep.errors import TerminalError, TransientError
from lockstep.formats.registry import RegistryError, SchemaRegistry, registry_for

SECRET = "s3cr3t-registry-password"


class Answers(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str | None]] = []
    status = 200
    #: how many requests for /subjects/stalling/... answer 503 before one answers
    stalls = 0

    def _answer(self) -> None:
        Answers.seen.append((self.command, self.path, self.headers.get("Authorization")))
        if self.path.startswith("/schemas/ids/7"):
            body, status = {"schema": '"string"'}, 200
        elif self.path.startswith("/subjects/stalling") and Answers.stalls > 0:
            Answers.stalls -= 1
            body, status = {"error_code": 50301, "message": "busy"}, 503
        elif self.path.startswith("/subjects/stalling"):
            body, status = {"id": 3, "version": 2, "schema": '"string"'}, 200
        elif self.path.startswith("/subjects/missing"):
            body, status = {"error_code": 40401, "message": "Subject 'missing' not found."}, 404
        else:
            body, status = {"error_code": 50001, "message": "Error in the backend data store"}, Answers.status
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    httpd = HTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    Answers.seen.clear()
    Answers.status = 200
    Answers.stalls = 0
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_schema_is_fetched_once_per_id_with_basic_auth(server):
    client = SchemaRegistry(server, "lockstep", SECRET)
    assert client.schema(7).text == '"string"' and client.schema(7).schema_type == "AVRO"
    assert len(Answers.seen) == 1  # cached: an id always names the same schema
    assert Answers.seen[0][2] == "Basic " + base64.b64encode(f"lockstep:{SECRET}".encode()).decode()


class Waits(list[float]):
    """The waits a client slept, instead of sleeping them."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def quick(client: SchemaRegistry) -> Waits:
    waits = Waits()
    client.sleep = waits  # type: ignore[method-assign]
    return waits


def test_a_missing_subject_is_terminal_and_a_server_error_transient_neither_naming_the_password(server):
    client = SchemaRegistry(server, "lockstep", SECRET)
    waits = quick(client)
    with pytest.raises(RegistryError) as missing:
        client.version("missing")
    assert missing.value.status == 404 and "Subject 'missing' not found" in str(missing.value)
    assert isinstance(missing.value, TerminalError)
    Answers.status = 500
    with pytest.raises(TransientError) as failed:
        client.version("other")
    assert "HTTP 500" in str(failed.value)
    assert SECRET not in str(missing.value) + str(failed.value)
    # the 404 was answered once; the 500 was asked three times, after each of the client's waits
    assert [p for _, p, _ in Answers.seen].count("/subjects/missing/versions/latest") == 1
    assert [p for _, p, _ in Answers.seen].count("/subjects/other/versions/latest") == 3
    assert waits == list(SchemaRegistry.retry_waits_s) == [1.0, 3.0]


def test_a_registry_that_stalls_for_a_moment_costs_a_wait_not_the_checkpoint(server):
    client = SchemaRegistry(server, "lockstep", SECRET)
    waits = quick(client)
    Answers.stalls = 2
    assert client.version("stalling").id == 3
    assert len(Answers.seen) == 3 and waits == [1.0, 3.0]
    Answers.stalls = 3  # one more than the client tries again: transient, for Airflow's retry
    with pytest.raises(TransientError, match="HTTP 503"):
        client.version("stalling")


def test_an_unreachable_registry_is_transient():
    client = SchemaRegistry("http://127.0.0.1:9", "u", SECRET)
    waits = quick(client)
    with pytest.raises(TransientError, match="cannot reach it"):
        client.schema(1)
    assert waits == [1.0, 3.0]


def test_the_connection_names_the_registry_and_its_password_is_redacted(monkeypatch, server):
    monkeypatch.setenv("AIRFLOW_CONN_REG_UNIT", json.dumps({"conn_type": "http", "login": "lockstep", "password": SECRET,
                                                            "extra": {"url": server + "/"}}))
    client = registry_for("reg_unit")
    assert client.url == server and client.name == "reg_unit"
    assert redact(f"failed with {SECRET}") == "failed with ***"
    monkeypatch.setenv("AIRFLOW_CONN_REG_NONE", json.dumps({"conn_type": "http"}))
    with pytest.raises(TerminalError, match="names no schema registry"):
        registry_for("reg_none")


def test_a_password_in_the_registry_url_is_refused_without_showing_it(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_REG_URLPASS", json.dumps({"conn_type": "http", "extra": {
        "url": f"http://lockstep:{SECRET}@127.0.0.1:1/apis/ccompat/v7"}}))
    with pytest.raises(TerminalError, match="carries a password") as refused:
        registry_for("reg_urlpass")
    assert SECRET not in str(refused.value)
