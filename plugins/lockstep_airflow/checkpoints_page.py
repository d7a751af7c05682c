"""The Checkpoints page: a read-only, server-rendered view of every pipeline's checkpoints.

Mounted into Airflow's api-server by ``lockstep_plugin`` (under ``/lockstep``). Airflow
does not authenticate plugin apps by itself, and this page shows topic names, offsets
and abort reasons, so every route requires an authenticated Airflow user through
Airflow's own dependency: it accepts the UI's ``_token`` cookie (the page renders in
the UI's iframe) and ``Authorization: Bearer <JWT>`` (scripts, tests).
``airflow.api_fastapi.core_api.security`` is an internal module: re-check it when
upgrading Airflow (verified on 3.3.2).

Plain HTML and a few lines of CSS, no JavaScript: it must work when nothing else does.
"""
from __future__ import annotations

from html import escape
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, JSONResponse, Response

from airflow.api_fastapi.core_api.security import requires_authenticated
from lockstep.pipelines import pipelines_dir
from lockstep_airflow.overview import CheckpointRow, LagRow, Overview, PipelineOverview, Section, gather

#: Where this app is mounted; the login link sends the user back here.
URL_PREFIX = "/lockstep"
DEFAULT_LIMIT = 20

app = FastAPI(
    title="Lockstep checkpoints",
    dependencies=[Depends(requires_authenticated())],
    docs_url=None, redoc_url=None, openapi_url=None,  # app-level dependencies do not cover these
)


@app.exception_handler(HTTPException)
async def _unauthenticated(request: Request, exc: HTTPException) -> Response:
    """A browser without a session gets a sign-in link (still 401/403, and no pipeline data)."""
    if exc.status_code in (401, 403) and "text/html" in request.headers.get("accept", ""):
        body = (f"<!doctype html><title>Sign in required</title><p>{escape(str(exc.detail))}. "
                f'<a href="/auth/login?next={URL_PREFIX}/" target="_top">Sign in to Airflow</a> '
                "to see Lockstep checkpoints.</p>")
        return HTMLResponse(body, status_code=exc.status_code)
    return await http_exception_handler(request, exc)


def _overview(limit: int) -> Overview:
    return gather(pipelines_dir(), limit=limit)


@app.get("/", response_class=HTMLResponse)
def checkpoints_page(limit: int = Query(DEFAULT_LIMIT, ge=1, le=200)) -> HTMLResponse:
    return HTMLResponse(render_page(_overview(limit)), headers={"Cache-Control": "no-store"})


@app.get("/api/pipelines")
def pipelines_json(limit: int = Query(DEFAULT_LIMIT, ge=1, le=200)) -> JSONResponse:
    return JSONResponse(_overview(limit).to_json(), headers={"Cache-Control": "no-store"})


# ---- rendering -------------------------------------------------------------------------------------
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px 24px;color:#1f2328;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:0}h3{font-size:14px;margin:14px 0 6px;color:#444}
.meta{color:#666;font-size:12px}.pipeline{border:1px solid #d0d7de;border-radius:8px;padding:12px 16px;margin:16px 0}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eaeef2;vertical-align:top}
th{background:#f6f8fa;font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
td.n,td.t{white-space:nowrap}code{font-size:12px}.error{background:#fff1f0;border:1px solid #ffa39e;color:#a8071a;padding:6px 10px;border-radius:6px;white-space:pre-wrap}
.empty{color:#666;font-style:italic}.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600}
.completed{background:#dafbe1;color:#116329}.aborted{background:#ffebe9;color:#a40e26}
.prepared{background:#fff8c5;color:#7d4e00}.claimed{background:#eaeef2;color:#424a53}
"""


def _e(value: Any) -> str:
    return "" if value is None else escape(str(value))


def _num(value: int | float | None) -> str:
    return '<td class="n">–</td>' if value is None else f'<td class="n">{value:,}</td>'


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _table(section: Section, headers: list[str], row, empty: str) -> str:
    if section.error is not None:
        return f'<div class="error">{_e(section.error)}</div>'
    if not section.rows:
        return f'<p class="empty">{_e(empty)}</p>'
    head = "".join(f'<th class="n">{_e(h[1:])}</th>' if h.startswith("#") else f"<th>{_e(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(row(r) for r in section.rows)}</tbody></table>"


def _checkpoint(r: CheckpointRow) -> str:
    reason = _e(r.abort_reason) + (f'<br><span class="meta">{_e(r.replay_hint)}</span>' if r.replay_hint else "")
    source = _e(r.start_source) + (f" (restored from {_e(r.restored_from)})" if r.restored_from else "")
    return (
        f'<tr id="checkpoint-{r.checkpoint_id}"><td class="n">{r.checkpoint_id}</td>'
        f'<td><span class="badge {_e(r.status)}">{_e(r.status)}</span></td>'
        f"<td>{'<br>'.join(f'<code>{_e(x)}</code>' for x in r.ranges) or '–'}"
        f'<br><span class="meta">from {source}</span></td>'
        f"{_num(r.records_in)}{_num(r.records_out)}{_num(r.records_dead_lettered)}{_num(r.transactions)}"
        f'<td class="n">{_duration(r.duration_s)}</td><td class="t">{_e(r.claimed_at)}</td><td>{reason}</td></tr>'
    )


def _lag(r: LagRow) -> str:
    return f"<tr><td><code>{_e(r.partition)}</code></td>{_num(r.committed)}{_num(r.last_stable)}{_num(r.lag)}</tr>"


def _savepoint(r: Any) -> str:
    return (f"<tr><td>{_e(r.name)}</td><td class=\"n\"><a href=\"#checkpoint-{r.checkpoint_id}\">"
            f"{r.checkpoint_id}</a></td><td class=\"t\">{_e(r.created_at)}</td></tr>")


def render_pipeline(p: PipelineOverview) -> str:
    total = p.total_lag
    lag_title = "Consumer lag" + (f" — {total:,} records behind" if total is not None else "")
    return (
        f'<section class="pipeline" id="pipeline-{_e(p.name)}"><h2>{_e(p.name)}</h2>'
        f'<div class="meta"><a href="/dags/{_e(p.dag_id)}" target="_top">{_e(p.dag_id)}</a> · '
        f"{_e(', '.join(p.topics))} → {_e(p.sink_topic)} (dead letters: {_e(p.dead_letter_topic)}) · "
        f"group <code>{_e(p.consumer_group)}</code> · store <code>{_e(p.store)}</code></div>"
        + (f"<p>{_e(p.description)}</p>" if p.description else "")
        + f"<h3>{_e(lag_title)}</h3>"
        + _table(p.lag, ["Partition", "#Committed offset", "#Last stable offset", "#Lag"], _lag,
                 "No partitions.")
        + "<h3>Recent checkpoints</h3>"
        + _table(p.checkpoints, ["#Id", "Status", "Ranges", "#In", "#Out", "#Dead-lettered", "#Transactions",
                                 "#Duration", "Claimed at", "Abort reason"], _checkpoint,
                 "No checkpoints yet: the DAG has not run.")
        + "<h3>Savepoints</h3>"
        + _table(p.savepoints, ["Name", "#Checkpoint", "Created at"], _savepoint, "No savepoints.")
        + "</section>"
    )


def render_page(overview: Overview) -> str:
    errors = "".join(f'<div class="error">{_e(e)}</div>' for e in overview.spec_errors)
    body = "".join(render_pipeline(p) for p in overview.pipelines) or (
        f'<p class="empty">No pipeline specs in {_e(overview.pipelines_dir)}.</p>')
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Lockstep checkpoints</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head><body>'
        f'<h1>Lockstep checkpoints</h1><div class="meta">{len(overview.pipelines)} pipeline(s) from '
        f"<code>{_e(overview.pipelines_dir)}</code> · generated {_e(overview.generated_at)} · "
        f'<a href="{URL_PREFIX}/api/pipelines">JSON</a></div>{errors}{body}</body></html>'
    )
