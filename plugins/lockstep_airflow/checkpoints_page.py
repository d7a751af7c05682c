"""The Checkpoints page: a read-only, server-rendered view of every pipeline's checkpoints.

Mounted into Airflow's api-server by ``lockstep_plugin`` (under ``/lockstep``). Airflow
does not authenticate plugin apps by itself, and this page shows topic names, offsets
and abort reasons, so every route requires an authenticated Airflow user through
Airflow's own dependency: it accepts the UI's ``_token`` cookie (the page renders in
the UI's iframe) and ``Authorization: Bearer <JWT>`` (scripts, tests).
``airflow.api_fastapi.core_api.security`` is an internal module: re-check it when
upgrading Airflow (verified on 3.3.2).

Plain HTML and a few lines of CSS: it must work when nothing else does, JavaScript off
included. One small script only improves links into the Airflow UI: the UI renders this
page in an iframe sandboxed without ``allow-top-navigation``, so a plain ``target="_top"``
link does nothing there; being same-origin with scripts allowed, the script navigates
the UI's own router instead (``history.pushState`` on the top window and a ``popstate``
event, which React Router handles like the back button). Opened directly at
``/lockstep/``, the same links are ordinary ``target="_top"`` links.

Timestamps are shown in Airflow's ``[core] default_timezone`` (3.3 has no server-side UI
time zone any more: ``[webserver] default_ui_timezone`` was removed and the UI uses the
browser's zone or the user's choice), with the zone named and the ISO value in the title.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo
from html import escape
from typing import Any
from urllib.parse import urlencode, urlsplit

from airflow.api_fastapi.core_api.security import requires_authenticated
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, JSONResponse, Response

from lockstep.ops.lag import PartitionLag
from lockstep.paths import pipelines_dir
from lockstep.rules.run_ownership import parse_cli_run_id
from lockstep_airflow.links import URL_PREFIX, checkpoint_url, dag_run_url, dag_url, pipeline_url, task_url
from lockstep_airflow.overview import (
    RUN_SEARCH_WINDOW,
    CheckpointRow,
    CheckpointsSection,
    DryRunRow,
    EmptyRun,
    LastCompletedRow,
    Overview,
    PageQuery,
    PipelineOverview,
    Section,
    _parse_time,
    collapse_empty,
    describe_error,
    dry_run_row,
    find_run_checkpoints,
    find_spec_for_dag,
    gather,
    page_store,
    zone_name,
)

DEFAULT_LIMIT = 20
DEFAULT_REFRESH_S = 30
#: Task ids of the pipeline DAGs (dag_factory) whose logs a checkpoint row links to.
RUN_TASK, COMMIT_TASK = "run", "commit"

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


def airflow_timezone() -> tzinfo:
    """Airflow's ``[core] default_timezone`` (``airflow.settings.TIMEZONE``), UTC if unreadable."""
    try:
        from airflow.settings import TIMEZONE

        return TIMEZONE
    except Exception:  # noqa: BLE001 - a page must render in some zone
        return UTC


def airflow_ui_base() -> str:
    """The UI's path prefix (the path of ``[api] base_url``), '' when served at the root."""
    try:
        from airflow.configuration import conf

        return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    except Exception:  # noqa: BLE001
        return ""


@dataclass(frozen=True)
class PageParams:
    """The page's query string: what is shown, and how."""

    query: PageQuery = PageQuery()
    show_empty: bool = False
    refresh: int = DEFAULT_REFRESH_S

    def url(self, fragment: str = "", **changes: Any) -> str:
        """A relative link to this page with ``changes`` applied (so it works under any mount path)."""
        query_changes = {k: v for k, v in changes.items() if k in ("limit", "before", "checkpoint", "pipeline")}
        q = replace(self.query, **query_changes)
        show_empty = changes.get("show_empty", self.show_empty)
        refresh = changes.get("refresh", self.refresh)
        pairs: list[tuple[str, Any]] = [
            ("pipeline", q.pipeline), ("limit", q.limit if q.limit != DEFAULT_LIMIT else None),
            ("before", q.before), ("checkpoint", q.checkpoint), ("empty", "show" if show_empty else None),
            ("refresh", refresh if refresh != DEFAULT_REFRESH_S else None),
        ]
        text = urlencode([(k, v) for k, v in pairs if v is not None])
        return f"?{text}" + (f"#{fragment}" if fragment else "") if text else f"./{'#' + fragment if fragment else ''}"


@dataclass(frozen=True)
class Ctx:
    """What every renderer needs besides its data: the zone, 'now', the query, the UI's base path."""

    tz: tzinfo = UTC
    now: datetime | None = None
    params: PageParams = PageParams()
    ui_base: str = ""


def _params(limit: int, before: int | None, checkpoint: int | None, pipeline: str | None, empty: str,
            refresh: int) -> PageParams:
    return PageParams(PageQuery(limit=limit, before=before, checkpoint=checkpoint, pipeline=pipeline or None),
                      show_empty=empty == "show", refresh=refresh)


def _overview(params: PageParams) -> Overview:
    return gather(pipelines_dir(), query=params.query, tz=airflow_timezone())


_LIMIT = Query(DEFAULT_LIMIT, ge=1, le=200)
_BEFORE = Query(None, ge=1, description="show the checkpoints older than this id")
_CHECKPOINT = Query(None, ge=0, description="show the page holding this checkpoint, highlighted")
_PIPELINE = Query(None, max_length=200, description="only this pipeline")
_EMPTY = Query("collapse", pattern="^(collapse|show)$")
_REFRESH = Query(DEFAULT_REFRESH_S, ge=0, le=3600, description="seconds between reloads, 0 = off")


@app.get("/", response_class=HTMLResponse)
def checkpoints_page(limit: int = _LIMIT, before: int | None = _BEFORE, checkpoint: int | None = _CHECKPOINT,
                     pipeline: str | None = _PIPELINE, empty: str = _EMPTY, refresh: int = _REFRESH
                     ) -> HTMLResponse:
    params = _params(limit, before, checkpoint, pipeline, empty, refresh)
    ctx = Ctx(tz=airflow_timezone(), params=params, ui_base=airflow_ui_base())
    return HTMLResponse(render_page(_overview(params), ctx), headers={"Cache-Control": "no-store"})


@app.get("/api/pipelines")
def pipelines_json(limit: int = _LIMIT, before: int | None = _BEFORE, checkpoint: int | None = _CHECKPOINT,
                   pipeline: str | None = _PIPELINE) -> JSONResponse:
    params = _params(limit, before, checkpoint, pipeline, "show", DEFAULT_REFRESH_S)
    return JSONResponse(_overview(params).to_json(), headers={"Cache-Control": "no-store"})


@app.get("/runs/{dag_id}/{run_id:path}", response_class=HTMLResponse)
def run_checkpoint_page(dag_id: str, run_id: str) -> HTMLResponse:
    """The checkpoint a DAG run claimed: the "Checkpoint" tab of every DAG run in the Airflow UI."""
    directory = pipelines_dir()
    spec = find_spec_for_dag(directory, dag_id)
    rows: list[CheckpointRow] = []
    searched, error, dry = 0, None, None
    if spec is not None:
        try:
            store = page_store(spec)
            rows, searched = find_run_checkpoints(store, run_id, RUN_SEARCH_WINDOW)
            if not rows:  # a dry run claims nothing; the latest one is kept for this view
                dry = next((d for d in dry_run_row(store.last_dry_run()) if d.run_id == run_id), None)
        except Exception as exc:  # noqa: BLE001 - render the error, like the main page
            error = describe_error(exc)
    ctx = Ctx(tz=airflow_timezone(), now=datetime.now(UTC), ui_base=airflow_ui_base())
    html = render_run_page(dag_id, run_id, spec.name if spec else None, str(directory), rows, searched, error, ctx,
                           dry_run=dry)
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


# ---- formatting (pure) -----------------------------------------------------------------------------
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


def relative_age(seconds: float | None) -> str:
    """'just now', '42 s ago', '3 min ago', '2 h 5 min ago', '4 d ago'; '' when unknown."""
    if seconds is None:
        return ""
    s = int(seconds)
    if s < 5:
        return "just now"
    if s < 60:
        return f"{s} s ago"
    if s < 3600:
        return f"{s // 60} min ago"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min ago" if m else f"{h} h ago"
    return f"{s // 86400} d ago"


def local_time(value: str | None, tz: tzinfo) -> str | None:
    """``2025-01-01 01:02 CET``: an aware ISO timestamp in ``tz``, the zone named; None if unparsable."""
    at = _parse_time(value)
    if at is None:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)  # Lockstep writes aware UTC; a naive one is read as UTC
    local = at.astimezone(tz)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname() or zone_name(tz)}"


def _age_seconds(value: str | None, now: datetime | None) -> float | None:
    at = _parse_time(value)
    if at is None or now is None:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return max((now - at).total_seconds(), 0.0)


def _time(value: str | None, ctx: Ctx, age: bool = True) -> str:
    """A ``<time>`` element: local time with its zone, ISO value kept for machines and the tooltip."""
    shown = local_time(value, ctx.tz)
    if shown is None:
        return _e(value) if value else "–"
    rel = relative_age(_age_seconds(value, ctx.now)) if age else ""
    return (f'<time datetime="{_e(value)}" title="{_e(value)}">{_e(shown)}</time>'
            + (f' <span class="meta">{_e(rel)}</span>' if rel else ""))


# ---- links into the Airflow UI ---------------------------------------------------------------------
def airflow_links(dag_id: str, run_id: str, ui_base: str = "") -> dict[str, str] | None:
    """UI routes of the run that owns a checkpoint: the run, and the logs of its run and commit
    tasks. None for a CLI run (``lockstep run``), which has no DAG run."""
    if not run_id or parse_cli_run_id(run_id) is not None:
        return None
    return {"run": dag_run_url(dag_id, run_id, ui_base), "run_logs": task_url(dag_id, run_id, RUN_TASK, ui_base),
            "commit_logs": task_url(dag_id, run_id, COMMIT_TASK, ui_base)}


def _ui_link(href: str, text: str, title: str = "") -> str:
    """A link into the Airflow UI: target=_top for a page opened on its own, and data-airflow for
    the script that routes it inside the UI's frame (where _top navigation is sandboxed away)."""
    t = f' title="{_e(title)}"' if title else ""
    return f'<a href="{_e(href)}" target="_top" data-airflow{t}>{_e(text)}</a>'


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
tr.highlight td{background:#fff8c5}tr.collapsed td{color:#666;background:#fafbfc;font-style:italic}
.notice{background:#fff8c5;border:1px solid #e3c55b;padding:6px 10px;border-radius:6px}
.paging{display:flex;gap:16px;justify-content:space-between;margin:6px 0;font-size:13px}
details.legend{font-size:12px;color:#444;margin:8px 0;border:1px solid #eaeef2;border-radius:6px;padding:4px 10px}
details.legend dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:6px 0}details.legend dt{font-weight:600}
.links a{margin-right:8px;white-space:nowrap}td.ranges code{white-space:nowrap}.scroll{overflow-x:auto}
"""

#: Routes links into the Airflow UI when this page is inside the UI's (same-origin) iframe.
SCRIPT = """
document.addEventListener("click", function (e) {
  var a = e.target.closest ? e.target.closest("a[data-airflow]") : null;
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  var top;
  try { top = window.top; if (top === window || !top.history || !top.location.href) return; }
  catch (err) { return; }
  var state = top.history.state || {};
  top.history.pushState({usr: null, key: Math.random().toString(36).slice(2, 10),
                         idx: (typeof state.idx === "number" ? state.idx : 0) + 1}, "", a.getAttribute("href"));
  top.dispatchEvent(new PopStateEvent("popstate", {state: top.history.state}));
  e.preventDefault();
});
"""

LEGEND = (
    '<details class="legend" open><summary>Legend</summary><dl>'
    "<dt><code>orders:0[3750,3750)</code></dt><dd>topic <code>orders</code>, partition 0, offsets from 3750 "
    "(included) to 3750 (excluded): <code>[start,end)</code>, so equal ends mean no records.</dd>"
    "<dt>Last stable offset</dt><dd>the end of a partition that a <code>read_committed</code> consumer may read: "
    "past it are records of transactions still open.</dd>"
    "<dt>Lag</dt><dd><em>committed offset</em>: the end of the latest completed checkpoint (before the first "
    "one, the consumer group's offset); output of every record before it is visible. <em>In flight</em>: "
    "records claimed by checkpoints not completed yet, written in open transactions and invisible to "
    "<code>read_committed</code> readers until the commit. <em>Unread</em>: records up to the last stable "
    "offset no checkpoint has claimed; the oldest unread record is the first of them.</dd>"
    '<dt>Status</dt><dd><span class="badge claimed">claimed</span> offsets reserved, Spark not finished · '
    '<span class="badge prepared">prepared</span> output written in open transactions, decision is commit · '
    '<span class="badge completed">completed</span> committed, offsets moved on · '
    '<span class="badge aborted">aborted</span> nothing committed, the next run replays the ranges.</dd>'
    "<dt>Empty</dt><dd>completed checkpoints with no records (every range empty); consecutive ones "
    "are folded into one row unless all are shown.</dd></dl></details>"
)

CHECKPOINT_HEADERS = ["#Id", "Status", "Ranges", "#In", "#Out", "#Dead-lettered", "#Transactions",
                      "#Duration", "Claimed at", "Run", "Abort reason"]


def _head(headers: list[str]) -> str:
    return "".join(f'<th class="n">{_e(h[1:])}</th>' if h.startswith("#") else f"<th>{_e(h)}</th>" for h in headers)


def _table(section: Section, headers: list[str], row, empty: str) -> str:
    if section.error is not None:
        return f'<div class="error">{_e(section.error)}</div>'
    if not section.rows:
        return f'<p class="empty">{_e(empty)}</p>'
    rows = "".join(row(r) for r in section.rows)
    return f"<table><thead><tr>{_head(headers)}</tr></thead><tbody>{rows}</tbody></table>"


def _run_cell(r: CheckpointRow, dag_id: str, ctx: Ctx) -> str:
    links = airflow_links(dag_id, r.run_id, ctx.ui_base)
    name = f"<code>{_e(r.run_id)}</code>"
    if links is None:
        return f'<td>{name}<br><span class="meta">CLI run: no DAG run</span></td>'
    return (f'<td>{name}<br><span class="links">{_ui_link(links["run"], "DAG run", f"DAG run {r.run_id}")}'
            f'{_ui_link(links["run_logs"], "run log", "logs of the run task")}'
            f'{_ui_link(links["commit_logs"], "commit log", "logs of the commit task")}</span></td>')


def _checkpoint(r: CheckpointRow, dag_id: str, ctx: Ctx, highlight: int | None = None) -> str:
    reason = _e(r.abort_reason) + (f'<br><span class="meta">{_e(r.replay_hint)}</span>' if r.replay_hint else "")
    source = _e(r.start_source) + (f" (restored from {_e(r.restored_from)})" if r.restored_from else "")
    cls = ' class="highlight"' if r.checkpoint_id == highlight else ""
    return (
        f'<tr id="checkpoint-{r.checkpoint_id}"{cls}><td class="n">{r.checkpoint_id}</td>'
        f'<td><span class="badge {_e(r.status)}">{_e(r.status)}</span></td>'
        f"<td class=\"ranges\">{'<br>'.join(f'<code>{_e(x)}</code>' for x in r.ranges) or '–'}"
        f'<br><span class="meta">from {source}</span></td>'
        f"{_num(r.records_in)}{_num(r.records_out)}{_num(r.records_dead_lettered)}{_num(r.transactions)}"
        f'<td class="n">{_duration(r.duration_s)}</td><td class="t">{_time(r.claimed_at, ctx)}</td>'
        f"{_run_cell(r, dag_id, ctx)}<td>{reason}</td></tr>"
    )


def _empty_run(run: EmptyRun, pipeline: str, ctx: Ctx) -> str:
    anchors = "".join(f'<span id="checkpoint-{i}"></span>' for i in run.ids)
    show = ctx.params.url(fragment=f"checkpoint-{run.last}", pipeline=pipeline, show_empty=True)
    return (f'<tr class="collapsed" id="checkpoints-{run.first}-{run.last}"><td colspan="{len(CHECKPOINT_HEADERS)}">'
            f"{anchors}checkpoints {run.first}–{run.last}: {run.count} empty, completed · "
            f'<a href="{_e(show)}">show them</a></td></tr>')


def _paging(p: PipelineOverview, ctx: Ctx) -> str:
    c = p.checkpoints
    links = []
    if c.newer:
        links.append(f'<a href="{_e(ctx.params.url(pipeline=p.name, before=c.newer_before, checkpoint=None))}" '
                     'rel="prev">← newer</a>')
    else:
        links.append("<span></span>")
    if c.older_before is not None:
        links.append(f'<a href="{_e(ctx.params.url(pipeline=p.name, before=c.older_before, checkpoint=None))}" '
                     'rel="next">older →</a>')
    return f'<nav class="paging">{"".join(links)}</nav>' if c.newer or c.older_before is not None else ""


def _checkpoints(p: PipelineOverview, ctx: Ctx) -> str:
    c: CheckpointsSection = p.checkpoints
    if c.error is not None or not c.rows:
        return _table(c, CHECKPOINT_HEADERS, None, "No checkpoints yet: the DAG has not run.")
    notice = ""
    if c.missing is not None:
        notice = (f'<p class="notice">Checkpoint {c.missing} is not in the store (retention deletes old '
                  "checkpoints; savepoints keep their offsets): showing the newest.</p>")
    keep = [] if c.highlight is None else [c.highlight]
    items = list(c.rows) if ctx.params.show_empty else collapse_empty(c.rows, keep=keep)
    hidden = sum(i.count for i in items if isinstance(i, EmptyRun))
    empties = sum(1 for r in c.rows if r.empty)
    ids = [r.checkpoint_id for r in c.rows]
    summary = f"checkpoints {min(ids)}–{max(ids)}, {len(ids)} of {c.total}"
    if ctx.params.show_empty:
        toggle = (f" · {empties} empty shown · <a href=\"{_e(ctx.params.url(pipeline=p.name, show_empty=False))}\">"
                  "fold empty ones</a>") if empties else ""
    else:
        toggle = (f" · {hidden} empty folded · <a href=\"{_e(ctx.params.url(pipeline=p.name, show_empty=True))}\">"
                  "show all</a>") if hidden else ""
    body = "".join(_empty_run(i, p.name, ctx) if isinstance(i, EmptyRun)
                   else _checkpoint(i, p.dag_id, ctx, c.highlight) for i in items)
    return (f'{notice}<div class="meta">{summary}{toggle}</div>{_paging(p, ctx)}'
            f'<div class="scroll"><table><thead><tr>{_head(CHECKPOINT_HEADERS)}</tr></thead><tbody>{body}</tbody>'
            f"</table></div>{_paging(p, ctx)}")


def _lag(r: PartitionLag, ctx: Ctx) -> str:
    if r.oldest_unread_at is None:
        oldest = '<td class="t">–</td>'
    else:
        shown = relative_age(r.oldest_unread_age_s).replace(" ago", " old") or "–"
        oldest = (f'<td class="t"><time datetime="{_e(r.oldest_unread_at)}" '
                  f'title="{_e(local_time(r.oldest_unread_at, ctx.tz))}">{_e(shown)}</time></td>')
    holders = ", ".join(str(c) for c in r.in_flight_checkpoints)
    in_flight = (f'<td class="n" title="claimed by checkpoint {_e(holders)}">{r.in_flight:,}</td>'
                 if r.in_flight else _num(r.in_flight))
    return (f"<tr><td><code>{_e(r.partition)}</code></td>{_num(r.committed)}{in_flight}{_num(r.unread)}"
            f"{_num(r.last_stable)}{oldest}</tr>")


def _unread(s: Section, label: str, none: str) -> str | None:
    """The line of a one-row section that has no row to show: why it could not be read, or ``none``."""
    if s.error is not None:
        return f'<div class="meta">{_e(label)}: – <span class="error">{_e(s.error)}</span></div>'
    return None if s.rows else none


def _last_completed(p: PipelineOverview, ctx: Ctx) -> str:
    if (line := _unread(p.last_completed, "Last completed checkpoint",
                        '<div class="meta">Last completed checkpoint: none yet.</div>')) is not None:
        return line
    r: LastCompletedRow = p.last_completed.rows[0]
    href = ctx.params.url(fragment=f"checkpoint-{r.checkpoint_id}", pipeline=p.name, checkpoint=r.checkpoint_id,
                          before=None)
    age = relative_age(r.age_s)
    return (f'<div class="meta">Last completed checkpoint: <a href="{_e(href)}">{r.checkpoint_id}</a>, '
            f'<strong class="since">{_e(age or "–")}</strong> ({_time(r.completed_at, ctx, age=False)})</div>')


def _dry_run(p: PipelineOverview, ctx: Ctx) -> str:
    """The latest dry run, under the checkpoints: what it would have taken; nothing was claimed."""
    if (line := _unread(p.last_dry_run, "Last dry run", "")) is not None:
        return line
    r: DryRunRow = p.last_dry_run.rows[0]
    links = airflow_links(p.dag_id, r.run_id, ctx.ui_base)
    run = _ui_link(links["run"], r.run_id) if links else f"<code>{_e(r.run_id)}</code>"
    source = _e(r.start_source) + (f" (restored from {_e(r.restored_from)})" if r.restored_from else "")
    ranges = ", ".join(f"<code>{_e(x)}</code>" for x in r.ranges) or "no new records"
    return (f'<div class="meta dry-run">Last dry run ({run}, {_time(r.planned_at, ctx)}): would take '
            f"{r.records:,} records as checkpoint {r.checkpoint_id} from {source}: {ranges}; "
            "nothing was claimed.</div>")


def _savepoint(r: Any, pipeline: str, ctx: Ctx) -> str:
    # ?checkpoint= rather than a bare #checkpoint-N: the link keeps working once N is off the first page.
    href = PageParams(refresh=ctx.params.refresh).url(fragment=f"checkpoint-{r.checkpoint_id}", pipeline=pipeline,
                                                      checkpoint=r.checkpoint_id)
    return (f'<tr><td>{_e(r.name)}</td><td class="n"><a href="{_e(href)}">{r.checkpoint_id}</a></td>'
            f'<td class="t">{_time(r.created_at, ctx)}</td></tr>')


TRANSACTION_HEADERS = ["Transaction", "Checkpoint", "Status", "#Task", "State", "#Age", "#Time left",
                       "Pinned partitions", "#Held back", "Resolve would"]


def _transaction(r: Any, pipeline: str, ctx: Ctx) -> str:
    """One open transaction: the pipeline's (linked to its checkpoint) or a foreign one pinning its partitions."""
    from lockstep.ops.open_transactions import duration

    if r.foreign:
        checkpoint = '<td class="n">foreign</td>'
    else:
        href = ctx.params.url(fragment=f"checkpoint-{r.checkpoint_id}", pipeline=pipeline,
                              checkpoint=r.checkpoint_id, before=None)
        checkpoint = f'<td class="n"><a href="{_e(href)}">{r.checkpoint_id}</a></td>'
    where = "" if r.cluster is None else f" (connection {r.cluster})"
    pinned = ", ".join(f"<code>{_e(h.partition)}</code> LSO {h.last_stable:,}" for h in r.pinned) or "–"
    task = "–" if r.task_index is None else str(r.task_index)
    return (f"<tr><td><code>{_e(r.transactional_id)}</code>{_e(where)}</td>{checkpoint}"
            f"<td>{_e(r.checkpoint_status or '–')}</td><td class=\"n\">{task}</td><td>{_e(r.state)}</td>"
            f'<td class="n">{_e(duration(r.age_ms))}</td><td class="n">{_e(duration(r.time_left_ms))}</td>'
            f"<td>{pinned}</td>{_num(r.held_back)}<td>{_e(r.action)}</td></tr>")


def render_pipeline(p: PipelineOverview, ctx: Ctx | None = None) -> str:
    ctx = ctx or Ctx()
    total = p.total_lag
    lag_title = "Lag" + (f" — {total:,} records not committed, {p.in_flight:,} of them in flight"
                         if total is not None else "")
    return (
        f'<section class="pipeline" id="pipeline-{_e(p.name)}"><h2>{_e(p.name)}</h2>'
        f'<div class="meta">{_ui_link(dag_url(p.dag_id, ctx.ui_base), p.dag_id)} · '
        f"{_e(', '.join(p.topics))} → {_e(p.sink_topic)} (dead letters: {_e(p.dead_letter_topic)}) · "
        f"group <code>{_e(p.consumer_group)}</code> · store <code>{_e(p.store)}</code> · "
        f'<a href="{_e(ctx.params.url(pipeline=p.name, before=None, checkpoint=None))}">only this pipeline</a></div>'
        + (f"<p>{_e(p.description)}</p>" if p.description else "")
        + f"<h3>{_e(lag_title)}</h3>"
        + _last_completed(p, ctx)
        + _table(p.lag, ["Partition", "#Committed offset", "#In flight", "#Unread", "#Last stable offset",
                         "Oldest unread"],
                 lambda r: _lag(r, ctx), "No partitions.")
        + "<h3>Checkpoints</h3>"
        + _checkpoints(p, ctx)
        + _dry_run(p, ctx)
        + "<h3>Open transactions</h3>"
        + _table(p.transactions, TRANSACTION_HEADERS, lambda r: _transaction(r, p.name, ctx),
                 "No open transactions, and none holding back this pipeline's partitions.")
        + "<h3>Savepoints</h3>"
        + _table(p.savepoints, ["Name", "#Checkpoint", "Created at"], lambda r: _savepoint(r, p.name, ctx),
                 "No savepoints.")
        + "</section>"
    )


def _refresh(ctx: Ctx) -> tuple[str, str]:
    """The meta refresh tag, and the visible line saying so with a link to pause or resume."""
    if ctx.params.refresh > 0:
        pause = ctx.params.url(refresh=0)
        return (f'<meta http-equiv="refresh" content="{ctx.params.refresh}">',
                f'refreshes every {ctx.params.refresh} s · <a href="{_e(pause)}">pause</a>')
    return "", f'auto-refresh paused · <a href="{_e(ctx.params.url(refresh=DEFAULT_REFRESH_S))}">resume</a>'


def _document(title: str, head: str, body: str) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>{head}'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head><body>'
        f"{body}<script>{SCRIPT}</script></body></html>"
    )


def render_page(overview: Overview, ctx: Ctx | None = None) -> str:
    ctx = ctx or Ctx()
    if ctx.now is None:
        ctx = replace(ctx, now=_parse_time(overview.generated_at))
    errors = "".join(f'<div class="error">{_e(e)}</div>' for e in overview.spec_errors)
    only = ctx.params.query.pipeline
    empty = (f'No pipeline named {_e(only)} in {_e(overview.pipelines_dir)}.' if only
             else f"No pipeline specs in {_e(overview.pipelines_dir)}.")
    body = "".join(render_pipeline(p, ctx) for p in overview.pipelines) or f'<p class="empty">{empty}</p>'
    meta_refresh, refresh_line = _refresh(ctx)
    filtered = (f' · only <code>{_e(only)}</code> (<a href="{_e(PageParams(refresh=ctx.params.refresh).url())}">'
                "all pipelines</a>)") if only else ""
    return _document("Lockstep checkpoints", meta_refresh, (
        f'<h1>Lockstep checkpoints</h1><div class="meta">{len(overview.pipelines)} pipeline(s) from '
        f"<code>{_e(overview.pipelines_dir)}</code>{filtered} · "
        f"generated {_time(overview.generated_at, ctx, age=False)}"
        f" · times in {_e(overview.timezone)} · {refresh_line} · "
        # A download, not a navigation: inside Airflow's frame a plain link would replace the page.
        f'<a href="{URL_PREFIX}/api/pipelines" download="lockstep-checkpoints.json">JSON</a></div>'
        f"{LEGEND}{errors}{body}"))


def render_run_page(dag_id: str, run_id: str, pipeline: str | None, pipelines_dir: str, rows: list[CheckpointRow],
                    searched: int, error: str | None, ctx: Ctx, dry_run: DryRunRow | None = None) -> str:
    """The per-run view (the DAG run's "Checkpoint" tab)."""
    title = f"Checkpoint of run {run_id}"
    if pipeline is None:
        body = (f'<p class="empty">DAG <code>{_e(dag_id)}</code> is not a Lockstep pipeline: no spec in '
                f"<code>{_e(pipelines_dir)}</code> has this DAG id.</p>")
    elif error is not None:
        body = f'<div class="error">{_e(error)}</div>'
    elif dry_run is not None:
        source = _e(dry_run.start_source) + (f" (restored from {_e(dry_run.restored_from)})"
                                             if dry_run.restored_from else "")
        ranges = "".join(f"<li><code>{_e(x)}</code></li>" for x in dry_run.ranges) or "<li>no new records</li>"
        body = (f"<p>A dry run ({_time(dry_run.planned_at, ctx)}): it would take {dry_run.records:,} records as "
                f"checkpoint {dry_run.checkpoint_id} from {source}; nothing was claimed.</p><ul>{ranges}</ul>")
    elif not rows:
        body = (f'<p class="empty">No checkpoint of pipeline <code>{_e(pipeline)}</code> was claimed by this run '
                f"among its newest {searched} checkpoint(s) (the search looks at the newest {RUN_SEARCH_WINDOW}). "
                "The run may not have got as far as claiming one, or its checkpoint is older: see "
                f"{_ui_link(pipeline_url(pipeline, ctx.ui_base), 'the Checkpoints page')}.</p>")
    else:
        table = "".join(_checkpoint(r, dag_id, ctx) for r in rows)
        links = " · ".join(_ui_link(checkpoint_url(pipeline, r.checkpoint_id, ctx.ui_base),
                                    f"checkpoint {r.checkpoint_id} in the Checkpoints page") for r in rows)
        body = (f'<div class="scroll"><table><thead><tr>{_head(CHECKPOINT_HEADERS)}</tr></thead><tbody>{table}'
                "</tbody></table></div>"
                f'<p class="meta">{links}</p>')
    head = (f'<h1>{_e(title)}</h1><div class="meta">DAG <code>{_e(dag_id)}</code>'
            + (f" · pipeline <code>{_e(pipeline)}</code>" if pipeline else "")
            + f" · times in {_e(zone_name(ctx.tz))}</div>")
    return _document(title, "", head + body)
