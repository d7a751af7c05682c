"""Sending a failed checkpoint's alert (`lockstep.rules.alert_policy`) to the spec's ``alerts``: a webhook and
e-mail, each through an Airflow connection whose secrets never reach a log line.

The webhook is a JSON POST: ``text`` (what a Slack or Teams incoming webhook shows) and the failure's
fields. Its connection (type http) gives the URL: ``host`` as a whole URL, or ``schema``/``host``/``port``
with ``extra.endpoint``; a ``password`` is sent as a bearer token (with a ``login``: basic auth), and
``extra.headers`` as headers. E-mail goes through the SMTP connection (``host``, ``port``, ``login``,
``password``; ``extra.from_email``, ``extra.starttls``, ``extra.ssl``).
"""
from __future__ import annotations

__all__ = [
    "notify",
]

import base64
import json
import logging
import smtplib
import urllib.request
from email.message import EmailMessage

from lockstep.connections import Connection, get_connection, redact
from lockstep.rules.alert_policy import Failure, alert_text
from lockstep.spec import PipelineSpec

log = logging.getLogger(__name__)
TIMEOUT_S = 10.0


def notify(spec: PipelineSpec, failure: Failure, link: str) -> list[str]:
    """Send the alert to each target of ``spec.alerts``; returns what was sent (a target that fails is
    logged, without its secrets, and does not stop the others)."""
    alerts = spec.alerts
    if alerts is None:
        return []
    text = alert_text(failure, spec.owner, link)
    sent = []
    if alerts.webhook_conn_id:
        try:
            post_webhook(get_connection(alerts.webhook_conn_id), {
                "text": text, "pipeline": failure.pipeline, "owner": spec.owner, "run_id": failure.run_id,
                "checkpoint_id": failure.checkpoint_id, "cause": failure.summary, "link": link})
            sent.append(f"webhook {alerts.webhook_conn_id}")
        except Exception as exc:  # noqa: BLE001 - an alert never fails anything; say why it was not sent
            log.warning("alert of %s not sent to webhook connection %s: %s", spec.name, alerts.webhook_conn_id,
                        redact(str(exc)))
    if alerts.email:
        try:
            send_email(get_connection(alerts.smtp_conn_id), alerts.email,
                       f"Lockstep {failure.pipeline}: checkpoint {failure.checkpoint_id} failed"
                       if failure.checkpoint_id is not None else f"Lockstep {failure.pipeline}: a run failed", text)
            sent.append(f"e-mail to {', '.join(alerts.email)}")
        except Exception as exc:  # noqa: BLE001
            log.warning("alert of %s not e-mailed through connection %s: %s", spec.name, alerts.smtp_conn_id,
                        redact(str(exc)))
    return sent


def webhook_url(conn: Connection) -> str:
    host = conn.host or ""
    if host.startswith(("http://", "https://")):
        base = host
    else:
        scheme = str(conn.extra.get("schema") or "https")
        base = f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")
    return base + str(conn.extra.get("endpoint") or "")


def post_webhook(conn: Connection, body: dict[str, object]) -> None:
    headers = {"Content-Type": "application/json", **{str(k): str(v) for k, v in (conn.extra.get("headers") or {}).items()}}
    if conn.password and conn.login:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{conn.login}:{conn.password}".encode()).decode()
    elif conn.password:
        headers["Authorization"] = f"Bearer {conn.password}"
    request = urllib.request.Request(webhook_url(conn), json.dumps(body).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        if response.status >= 300:
            raise OSError(f"the webhook answered HTTP {response.status}")


def send_email(conn: Connection, to: tuple[str, ...], subject: str, text: str) -> None:
    message = EmailMessage()
    message["From"] = str(conn.extra.get("from_email") or conn.login or "lockstep@localhost")
    message["To"] = ", ".join(to)
    message["Subject"] = subject
    message.set_content(text)
    smtp_class = smtplib.SMTP_SSL if conn.extra.get("ssl") else smtplib.SMTP
    with smtp_class(conn.host or "localhost", int(conn.port or 25), timeout=TIMEOUT_S) as smtp:
        if conn.extra.get("starttls"):
            smtp.starttls()
        if conn.login and conn.password:
            smtp.login(conn.login, conn.password)
        smtp.send_message(message)
