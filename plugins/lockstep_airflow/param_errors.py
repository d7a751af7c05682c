"""Readable answers to a refused trigger: the rule that failed and what the param is for.

Airflow validates a DAG run's params with JSON schema and answers HTTP 400 with jsonschema's whole
report: the message, then the param's schema and the instance, pretty-printed ("Failed validating
'pattern' in schema: {...}"). The trigger form shows that dump as is. This root middleware of the
api-server keeps the message and replaces the dump with the param's title and, for the params of
Lockstep's DAGs, what is expected (``params.EXPECTED``).
It touches nothing but 400 answers to ``POST /api/v2/dags/<dag_id>/dagRuns`` and
``POST /api/v2/backfills`` whose detail is a param error; everything else streams through untouched.
The dump's layout is jsonschema's (checked with jsonschema 4 and Airflow 3.3.2): if it changes, the
original detail is kept.
"""
from __future__ import annotations

import ast
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

PARAM_ERROR = re.compile(r"^Invalid input for param (?P<param>[^:]+): (?P<message>.*?)\n\nFailed validating "
                         r"'(?P<rule>[^']+)' in schema(?:\[[^\]]*\])*:\n(?P<schema>.*?)\n\nOn instance(?:\[[^\]]*\])*:"
                         r"\n.*$", re.S)
TRIGGER_PATHS = re.compile(r"^/api/v2/(dags/(?P<dag_id>[^/]+)/dagRuns|backfills)$")
#: Lockstep's DAG ids (pipelines and the savepoints DAG) start with this.
LOCKSTEP_DAGS = "lockstep_"


def readable(detail: str, expected: dict[str, str] | None = None) -> str:
    """jsonschema's report reduced to one sentence: the param, its title, the failed rule and, when
    ``expected`` knows the param, what it takes."""
    match = PARAM_ERROR.match(detail)
    if match is None:
        return detail
    param, message = match["param"], " ".join(match["message"].split())
    try:
        schema = ast.literal_eval(match["schema"].strip())
    except (ValueError, SyntaxError):
        schema = {}
    title = schema.get("title") if isinstance(schema, dict) else None
    named = f"{param} ({title})" if title else param
    hint = (expected or {}).get(param)
    return f"Invalid input for param {named}: {message}" + (f"; expected {hint}." if hint else ".")


def rewrite_body(body: bytes, expected: dict[str, str] | None = None) -> bytes:
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    if not isinstance(doc, dict) or not isinstance(doc.get("detail"), str):
        return body
    new = readable(doc["detail"], expected)
    return body if new == doc["detail"] else json.dumps({**doc, "detail": new}).encode()


Scope = dict[str, Any]
Message = dict[str, Any]


class ReadableParamErrors:
    """Pure ASGI middleware (no buffering except for the 400 answers of the trigger routes)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        route = TRIGGER_PATHS.match(scope.get("path", "")) if scope.get("type") == "http" else None
        if route is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        from lockstep_airflow.params import EXPECTED

        expected = EXPECTED if (route["dag_id"] or "").startswith(LOCKSTEP_DAGS) else None
        start: Message | None = None
        passing = False
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start, passing
            if message["type"] == "http.response.start":
                if message.get("status") != 400:
                    passing = True
                    await send(message)
                else:
                    start = message
                return
            if passing or start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = rewrite_body(b"".join(chunks), expected)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, capture)
