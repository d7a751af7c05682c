"""A failed checkpoint's alert: when it is sent (once per checkpoint), what it says, and how it reaches a
webhook and an SMTP server (real sockets on this host; the secrets of their connections never logged)."""
from __future__ import annotations

import json
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from lockstep.errors import SpecError
from lockstep.ops import alerts
from lockstep.rules.alert_policy import Failure, alert_text, should_notify
from lockstep.spec import AlertsSpec, parse_spec


def failure(checkpoint: int | None, summary: str = "lockstep p run failed: checkpoint 7: boom", run: str = "r2") -> Failure:
    return Failure("p", run, checkpoint, summary)


@pytest.mark.parametrize("previous, expected", [
    (None, True),                               # the run before succeeded, or there was none
    (failure(7, run="r1"), False),              # failing again: already told
    (failure(6, run="r1"), False),              # a failed checkpoint's records are replayed by the next one
    (failure(None, "lockstep p plan failed: no checkpoint claimed: x", "r1"), False),
])
def test_only_the_first_failure_of_a_streak_notifies(previous, expected):
    assert should_notify(failure(7), previous) is expected


def test_the_alert_names_the_checkpoint_its_cause_and_its_link():
    text = alert_text(failure(7), "payments", "http://af/plugin/x#checkpoint-7")
    assert text.splitlines()[:3] == [
        "Lockstep pipeline p (owner payments): checkpoint 7 failed in DAG run r2.",
        "lockstep-cause: lockstep p run failed: checkpoint 7: boom",
        "Checkpoint: http://af/plugin/x#checkpoint-7"]


BASE = {"name": "p", "source": {"topics": ["in"]}, "transform": "m:f", "sink": {"topic": "out", "dead_letter_topic": "dlq"},
        "checkpoints": {"store": "s3://bucket/p"}}


def test_owner_tags_and_alerts_are_read_from_the_spec():
    spec = parse_spec({**BASE, "owner": "payments", "tags": ["tier-1", "eu"],
                       "alerts": {"webhook_conn_id": "payments_hook", "email": "oncall@example.com"}}, "p.yaml")
    assert (spec.owner, spec.tags) == ("payments", ("tier-1", "eu"))
    assert spec.alerts == AlertsSpec("payments_hook", ("oncall@example.com",), "smtp_default")
    plain = parse_spec(BASE, "p.yaml")
    assert (plain.owner, plain.tags, plain.alerts) == ("lockstep", (), None)


@pytest.mark.parametrize("extra, field", [
    ({"alerts": {"email": ["not-an-address"]}}, "alerts.email"),
    ({"alerts": {"smtp_conn_id": "smtp"}}, "alerts"),
    ({"alerts": {"pager": "x"}}, "alerts.pager"),
    ({"tags": "tier-1"}, "tags"),
    ({"tags": ["a,b"]}, "tags"),
    ({"owner": 3}, "owner"),
])
def test_bad_owner_tags_and_alerts_are_refused_naming_the_field(extra, field):
    with pytest.raises(SpecError) as refused:
        parse_spec({**BASE, **extra}, "p.yaml")
    assert [p.field for p in refused.value.problems] == [field], refused.value


class _Hook(BaseHTTPRequestHandler):
    received: list[tuple[str, dict, dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Hook.received.append((self.path, dict(self.headers), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook():
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    _Hook.received = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def spec_with(alerts_doc: dict):
    return parse_spec({**BASE, "owner": "payments", "alerts": alerts_doc}, "p.yaml")


def test_the_webhook_gets_the_text_and_the_fields_with_the_connections_token(hook, monkeypatch, caplog):
    port = hook.server_address[1]
    monkeypatch.setenv("AIRFLOW_CONN_PAYMENTS_HOOK", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": port, "password": "hook-token-4711",
        "extra": {"schema": "http", "endpoint": "/services/T1/B2"}}))
    sent = alerts.notify(spec_with({"webhook_conn_id": "payments_hook"}), failure(7), "http://af/x")
    assert sent == ["webhook payments_hook"]
    [(path, headers, body)] = _Hook.received
    assert path == "/services/T1/B2" and headers["Authorization"] == "Bearer hook-token-4711"
    assert body["text"].startswith("Lockstep pipeline p (owner payments): checkpoint 7 failed")
    assert (body["checkpoint_id"], body["cause"], body["link"]) == (7, failure(7).summary, "http://af/x")
    assert "hook-token-4711" not in caplog.text


def test_a_webhook_that_cannot_be_reached_is_logged_without_its_secrets(monkeypatch, caplog):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setenv("AIRFLOW_CONN_DOWN_HOOK", json.dumps({
        "conn_type": "http", "host": f"http://127.0.0.1:{closed}/hook", "login": "u", "password": "pw-0815-secret"}))
    assert alerts.notify(spec_with({"webhook_conn_id": "down_hook"}), failure(7), "http://af/x") == []
    assert "not sent to webhook connection down_hook" in caplog.text
    assert "pw-0815-secret" not in caplog.text


class _Smtp(socketserver.StreamRequestHandler):
    """Just enough SMTP for one message (EHLO, AUTH PLAIN, MAIL, RCPT, DATA, QUIT)."""

    messages: list[dict] = []

    def handle(self) -> None:
        self.wfile.write(b"220 test\r\n")
        got: dict = {"rcpt": []}
        while line := self.rfile.readline().decode():
            verb = line[:4].upper()
            if verb == "EHLO":
                self.wfile.write(b"250-test\r\n250 AUTH PLAIN\r\n")
            elif verb == "AUTH":
                got["auth"] = line.split()[-1]
                self.wfile.write(b"235 ok\r\n")
            elif verb == "RCPT":
                got["rcpt"].append(line.split(":", 1)[1].strip())
                self.wfile.write(b"250 ok\r\n")
            elif verb == "DATA":
                self.wfile.write(b"354 go\r\n")
                data = []
                while (chunk := self.rfile.readline().decode()) != ".\r\n":
                    data.append(chunk)
                got["data"] = "".join(data)
                _Smtp.messages.append(got)
                self.wfile.write(b"250 ok\r\n")
            elif verb == "QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 ok\r\n")


def test_the_email_goes_through_the_smtp_connection(monkeypatch):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Smtp)
    _Smtp.messages = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("AIRFLOW_CONN_MAIL", json.dumps({
            "conn_type": "smtp", "host": "127.0.0.1", "port": server.server_address[1], "login": "lockstep",
            "password": "smtp-pw", "extra": {"from_email": "lockstep@example.com"}}))
        sent = alerts.notify(spec_with({"email": ["a@example.com", "b@example.com"], "smtp_conn_id": "mail"}),
                             failure(7), "http://af/x")
    finally:
        server.shutdown()
        server.server_close()
    assert sent == ["e-mail to a@example.com, b@example.com"]
    [message] = _Smtp.messages
    assert message["rcpt"] == ["<a@example.com>", "<b@example.com>"] and message["auth"]
    assert "Subject: Lockstep p: checkpoint 7 failed" in message["data"]
    assert "lockstep-cause: lockstep p run failed: checkpoint 7: boom" in message["data"]
