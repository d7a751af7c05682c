"""A small client for Airflow 3's REST API: what the demo and the end-to-end tests
need (token, unpause, trigger, wait, task logs). Standard library only.

Its answers are Airflow's JSON as ``json.loads`` returns it (Any): the client hands them on as they
come, and its callers read the fields they know."""
from __future__ import annotations

__all__ = [
    "AirflowClient", "AirflowError", "IDEMPOTENT", "TERMINAL",
]

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, cast

TERMINAL = {"success", "failed"}


#: Requests that change nothing, or set a value, when asked twice: one that got no answer may be asked again.
#: (A POST that timed out may have made its DAG run: it is not asked again.)
IDEMPOTENT = frozenset({"GET", "PATCH"})


class AirflowError(RuntimeError):
    def __init__(self, message: str, busy: bool = False) -> None:
        super().__init__(message)
        #: The same request may pass again: Airflow's database refused it ("Database error"), or an idempotent
        #: request got no answer in time (the api-server starved of CPU)
        self.busy = busy


class AirflowClient:
    def __init__(self, base_url: str, username: str, password: str, timeout_s: float = 30) -> None:
        self.base_url = base_url.rstrip("/")
        #: How long one request waits for its answer
        self.timeout_s = timeout_s
        self._token = self._login(username, password)

    def _login(self, username: str, password: str) -> str:
        body = self._call("POST", "/auth/token", {"username": username, "password": password}, auth=False)
        return cast(str, body["access_token"])

    @property
    def token(self) -> str:
        return self._token

    def _call(self, method: str, path: str, payload: object = None, auth: bool = True,
              accept: str = "application/json", attempts: int = 4) -> Any:
        """One request. Airflow's "Database error" (HTTP 500: its SQLite database busy under load, a write refused
        while the scheduler holds it) is tried again, up to ``attempts`` times: the API rolled the request back,
        so nothing of it was done (no run made, no DAG unpaused). So is a GET or PATCH that got no answer within
        the request's timeout or whose connection dropped (asking again reads or sets the same thing)."""
        for attempt in range(1, attempts + 1):
            try:
                return self._request(method, path, payload, auth, accept)
            except AirflowError as exc:
                if attempt == attempts or not exc.busy:
                    raise
                time.sleep(2 * attempt)
        raise AssertionError("unreachable")

    def _request(self, method: str, path: str, payload: object, auth: bool, accept: str) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", accept)
        if auth:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")[:2000]
            raise AirflowError(f"{method} {path}: HTTP {exc.code}: {body}",
                               busy=exc.code == 500 and "Database error" in body) from exc
        except (TimeoutError, ConnectionError, http.client.RemoteDisconnected, urllib.error.URLError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            # Refused: nothing listens (Airflow down or not yet up), which asking again at once does not change.
            raise AirflowError(f"{method} {path}: no answer from {self.base_url} ({reason})",
                               busy=method in IDEMPOTENT and not isinstance(reason, ConnectionRefusedError)) from exc
        return json.loads(raw) if raw else None

    def wait_for_dag(self, dag_id: str, timeout: float = 180) -> None:
        """Wait until the dag-processor has parsed ``dag_id`` (new DAGs appear after a parse)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._call("GET", f"/api/v2/dags/{dag_id}")
                return
            except AirflowError as exc:
                if time.monotonic() > deadline:
                    errors = self._call("GET", "/api/v2/importErrors")
                    raise AirflowError(f"DAG {dag_id} did not appear within {timeout:.0f} s; import errors: "
                                       f"{errors}") from exc
                time.sleep(2)

    def unpause(self, dag_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": True})

    def trigger(self, dag_id: str, conf: Mapping[str, object] | None = None) -> str:
        run = self._call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return str(run["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return cast(str, self.dag_run(dag_id, run_id)["state"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        while True:
            state = self.run_state(dag_id, run_id)
            if state in TERMINAL:
                return state
            if time.monotonic() > deadline:
                raise AirflowError(f"run {run_id} of {dag_id} still {state} after {timeout:.0f} s")
            time.sleep(2)

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return cast("dict[str, Any]", self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{_q(run_id)}"))

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        body = self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=100")
        return cast("list[dict[str, Any]]", body["dag_runs"])

    def extra_links(self, dag_id: str, run_id: str, task_id: str) -> dict[str, str | None]:
        body = self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{_q(run_id)}/taskInstances/{task_id}/links")
        return cast("dict[str, str | None]", body["extra_links"])

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        body = self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{_q(run_id)}/taskInstances/{task_id}/xcomEntries/"
                                 f"{key}?deserialize=true")
        return body["value"]

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        body = self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{_q(run_id)}/taskInstances")
        return {ti["task_id"]: ti for ti in body["task_instances"]}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int | None = None) -> str:
        """The task log as text (events joined line by line)."""
        if try_number is None:
            try_number = max(1, self.task_instances(dag_id, run_id)[task_id]["try_number"])
        body = self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{_q(run_id)}/taskInstances/{task_id}/logs/{try_number}"
                                 "?full_content=true")
        content = body.get("content", [])
        if isinstance(content, str):
            return content
        lines = []
        for item in content:
            if isinstance(item, dict):
                extra = " ".join(f"{k}={v}" for k, v in item.items() if k not in ("event", "timestamp", "level", "logger"))
                lines.append(f"{item.get('level', '')} {item.get('event', '')} {extra}".strip())
            else:
                lines.append(str(item))
        return "\n".join(lines)


def _q(run_id: str) -> str:
    """Run ids hold ':' and '+' (manual__2026-...+00:00): escape them in URL paths."""
    return urllib.parse.quote(run_id, safe="")
