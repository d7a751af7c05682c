"""The Checkpoints page: a read-only, server-rendered view of every pipeline's checkpoints.

Mounted into Airflow's api-server by ``lockstep_plugin`` (under ``/lockstep``). Airflow
does not authenticate plugin apps by itself, and this page shows topic names, offsets
and abort reasons, so every route requires an authenticated Airflow user through
Airflow's own dependency: it accepts the UI's ``_token`` cookie (the page renders in
the UI's iframe) and ``Authorization: Bearer <JWT>`` (scripts, tests). Only the stylesheet
and the script under ``/lockstep/static/`` are public: they hold no data (see ``app.mount``).
``airflow.api_fastapi.core_api.security`` is an internal module: re-check it when
upgrading Airflow (verified on 3.3.2).

Plain HTML and a few lines of CSS: it must work when nothing else does, JavaScript off
included. One small script only improves links into the Airflow UI: the UI renders this
page in an iframe sandboxed without ``allow-top-navigation``, so a plain ``target="_top"``
link does nothing there; being same-origin with scripts allowed, the script navigates
the UI's own router instead (``history.pushState`` on the top window and a ``popstate``
event, which React Router handles like the back button). Opened directly at
``/lockstep/``, the same links are ordinary ``target="_top"`` links.

The HTML is in Jinja2 templates (``templates/``, autoescaped: every value is escaped unless it
is itself rendered by a template); the CSS and the script are files in ``static/``, served by
this app under ``/lockstep/static/``. This module decides what is shown (times, ages, links,
counts) and hands the templates plain values and a few functions to call.

Timestamps are shown in Airflow's ``[core] default_timezone`` (3.3 has no server-side UI
time zone any more: ``[webserver] default_ui_timezone`` was removed and the UI uses the
browser's zone or the user's choice), with the zone named and the ISO value in the title.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from airflow.api_fastapi.core_api.security import requires_authenticated
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from jinja2.ext import Extension

from lockstep.ops.lag import PartitionLag
from lockstep.ops.state_report import size_text
from lockstep.paths import pipelines_dir
from lockstep.rules.run_ownership import parse_cli_run_id
from lockstep_airflow.charts import Chart, SeriesInput, compact_count, compact_duration, line_chart
from lockstep_airflow.links import URL_PREFIX, checkpoint_url, dag_run_url, dag_url, pipeline_url, task_url
from lockstep_airflow.overview import (
    RUN_SEARCH_WINDOW,
    CheckpointRow,
    CheckpointsSection,
    DryRunRow,
    EmptyRun,
    Overview,
    PageQuery,
    PipelineOverview,
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
#: Task ids of the pipeline DAGs (dag_factory) whose logs a checkpoint row links to; a ``checkpoints.tasks: one``
#: DAG has the one task doing all three steps.
RUN_TASK, COMMIT_TASK, CHECKPOINT_TASK = "run", "commit", "checkpoint"

#: The page's HTML (Jinja2 templates) and its stylesheet and script, next to this module in the plugins
#: folder, which Airflow (and docker-compose.yaml's mount) takes whole.
TEMPLATES = Path(__file__).with_name("templates")
STATIC = Path(__file__).with_name("static")
#: Where the app serves ``STATIC``: ``/lockstep/static/<file>`` in the api-server.
STATIC_PATH = "/static"

app = FastAPI(
    title="Lockstep checkpoints",
    dependencies=[Depends(requires_authenticated())],
    docs_url=None, redoc_url=None, openapi_url=None,  # app-level dependencies do not cover these
)
# Public on purpose: app-level dependencies cover routes, not mounts, so these files are served
# without a session. They are the stylesheet and the link-routing script from this repository, the
# same bytes for everyone, with no pipeline data in them (the data is only in the authenticated
# pages and API). Public, they also load wherever the page does (the UI's frame, a page opened on
# its own) without depending on how the browser sends the session cookie for subresources.
app.mount(STATIC_PATH, StaticFiles(directory=STATIC), name="static")


@cache
def static_url(name: str) -> str:
    """The absolute URL of a file in ``static/`` (under ``URL_PREFIX``, like the page's JSON link), its
    content's hash in the query so that a browser never keeps a stale copy after an upgrade."""
    digest = hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:12]
    return f"{URL_PREFIX}{STATIC_PATH}/{name}?v={digest}"


@app.exception_handler(HTTPException)
async def _unauthenticated(request: Request, exc: HTTPException) -> Response:
    """A browser without a session gets a sign-in link (still 401/403, and no pipeline data)."""
    if exc.status_code in (401, 403) and "text/html" in request.headers.get("accept", ""):
        body = render("sign_in.html", detail=str(exc.detail), url_prefix=URL_PREFIX)
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
                           dry_run=dry, tasks=spec.checkpoints.tasks if spec else "three")
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


# ---- formatting (pure) -----------------------------------------------------------------------------
def thousands(value: int | float | None) -> str:
    """A count with thousands separators, '–' when unknown."""
    return "–" if value is None else f"{value:,}"


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


@dataclass(frozen=True)
class When:
    """A timestamp as shown: local time with its zone (None if unparsable) and how long ago ('' if not
    shown). The template's ``time`` macro keeps the ISO value for machines and the tooltip."""

    shown: str | None
    ago: str


def when(value: str | None, ctx: Ctx, age: bool = True) -> When:
    return When(local_time(value, ctx.tz), relative_age(_age_seconds(value, ctx.now)) if age else "")


def source_text(r: CheckpointRow | DryRunRow) -> str:
    """Where a checkpoint starts: its start source, and the savepoint or time it was restored from."""
    return r.start_source + (f" (restored from {r.restored_from})" if r.restored_from else "")


# ---- links into the Airflow UI ---------------------------------------------------------------------
def airflow_links(dag_id: str, run_id: str, ui_base: str = "", tasks: str = "three") -> dict[str, str] | None:
    """UI routes of the run that owns a checkpoint: the run, and the logs of its run and commit
    tasks (``tasks``: the spec's ``checkpoints.tasks``; with ``one``, the checkpoint task's log, as
    ``checkpoint_logs``). None for a CLI run (``lockstep run``), which has no DAG run."""
    if not run_id or parse_cli_run_id(run_id) is not None:
        return None
    if tasks == "one":
        return {"run": dag_run_url(dag_id, run_id, ui_base),
                "checkpoint_logs": task_url(dag_id, run_id, CHECKPOINT_TASK, ui_base)}
    return {"run": dag_run_url(dag_id, run_id, ui_base), "run_logs": task_url(dag_id, run_id, RUN_TASK, ui_base),
            "commit_logs": task_url(dag_id, run_id, COMMIT_TASK, ui_base)}


def checkpoint_link(ctx: Ctx, pipeline: str, checkpoint_id: int) -> str:
    """This page at one checkpoint of ``pipeline``, on whichever page of the table holds it."""
    return ctx.params.url(fragment=f"checkpoint-{checkpoint_id}", pipeline=pipeline, checkpoint=checkpoint_id,
                          before=None)


def savepoint_link(ctx: Ctx, pipeline: str, checkpoint_id: int) -> str:
    # ?checkpoint= rather than a bare #checkpoint-N: the link keeps working once N is off the first page.
    return PageParams(refresh=ctx.params.refresh).url(fragment=f"checkpoint-{checkpoint_id}", pipeline=pipeline,
                                                      checkpoint=checkpoint_id)


# ---- what the templates show -----------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    label: str
    numeric: bool  # right-aligned, tabular figures


def columns(headers: list[str]) -> tuple[Column, ...]:
    """Table headers; a leading ``#`` marks a numeric column."""
    return tuple(Column(h[1:], True) if h.startswith("#") else Column(h, False) for h in headers)


CHECKPOINT_HEADERS = ["#Id", "Status", "Ranges", "#In", "#Out", "#Dead-lettered", "#Transactions",
                      "#Duration", "Claimed at", "Run", "Abort reason"]
LAG_HEADERS = ["Partition", "#Committed offset", "#In flight", "#Unread", "#Last stable offset", "Oldest unread"]
TRANSACTION_HEADERS = ["Transaction", "Checkpoint", "Status", "#Task", "State", "#Age", "#Time left",
                       "Pinned partitions", "#Held back", "Resolve would"]
SAVEPOINT_HEADERS = ["Name", "#Checkpoint", "Created at"]


@dataclass(frozen=True)
class Toggle:
    """The line's switch between folding empty checkpoints and showing them."""

    text: str
    href: str
    label: str


@dataclass(frozen=True)
class CheckpointsView:
    items: list[CheckpointRow | EmptyRun]  # rows, consecutive empty ones folded unless shown
    summary: str
    toggle: Toggle | None


def _checkpoints(p: PipelineOverview, ctx: Ctx) -> CheckpointsView | None:
    """The checkpoints table's rows and summary line; None when there is none (an error, or no checkpoint)."""
    c: CheckpointsSection = p.checkpoints
    if c.error is not None or not c.rows:
        return None
    keep = [] if c.highlight is None else [c.highlight]
    items = list(c.rows) if ctx.params.show_empty else collapse_empty(c.rows, keep=keep)
    hidden = sum(i.count for i in items if isinstance(i, EmptyRun))
    empties = sum(1 for r in c.rows if r.empty)
    ids = [r.checkpoint_id for r in c.rows]
    stored = f"{c.oldest}–{c.newest}" if c.oldest is not None and c.newest is not None else "?"
    summary = f"checkpoints {min(ids)}–{max(ids)} of {stored} stored"
    if ctx.params.show_empty:
        toggle = Toggle(f"{empties} empty shown", ctx.params.url(pipeline=p.name, show_empty=False),
                        "fold empty ones") if empties else None
    else:
        toggle = Toggle(f"{hidden} empty folded", ctx.params.url(pipeline=p.name, show_empty=True),
                        "show all") if hidden else None
    return CheckpointsView(items, summary, toggle)


def _lag(r: PartitionLag, ctx: Ctx) -> dict[str, str | None]:
    """A lag row's oldest unread record (its age, local time on hover) and the checkpoints holding its
    records in flight."""
    return {"oldest": relative_age(r.oldest_unread_age_s).replace(" ago", " old") or "–",
            "oldest_at": local_time(r.oldest_unread_at, ctx.tz),
            "holders": ", ".join(str(c) for c in r.in_flight_checkpoints)}


def _transaction(r: Any, pipeline: str, ctx: Ctx) -> dict[str, str | None]:
    """One open transaction: the pipeline's (linked to its checkpoint) or a foreign one pinning its partitions."""
    from lockstep.ops.open_transactions import duration

    return {"checkpoint_href": None if r.foreign else checkpoint_link(ctx, pipeline, r.checkpoint_id),
            "where": "" if r.cluster is None else f" (connection {r.cluster})",
            "status": r.checkpoint_status or "–", "task": "–" if r.task_index is None else str(r.task_index),
            "age": duration(r.age_ms), "time_left": duration(r.time_left_ms)}


def lag_title(p: PipelineOverview) -> str:
    total = p.total_lag
    return "Lag" + (f" — {total:,} records not committed, {p.in_flight:,} of them in flight"
                    if total is not None else "")


def charts_view(p: PipelineOverview) -> list[Chart]:
    """The pipeline's charts over the checkpoints shown (``PipelineOverview.series``, which the JSON carries
    too): records, duration, records behind, and for a stateful pipeline the watermark's delay."""
    s = p.series
    if s is None:
        return []
    ids = s.checkpoint_ids
    charts = [
        line_chart("records", "Records per checkpoint", ids,
                   [SeriesInput("in", "in", s.records_in), SeriesInput("out", "out", s.records_out),
                    SeriesInput("dead", "dead-lettered", s.records_dead_lettered)],
                   thousands, noun="records", tick_fmt=compact_count, integer=True),
        line_chart("duration", "Duration, claim to completion", ids,
                   [SeriesInput("duration", "from claim to end", s.duration_s)], _duration,
                   tick_fmt=compact_duration, duration=True),
        line_chart("lag", "Records behind each checkpoint's end", ids,
                   [SeriesInput("behind", "behind", s.records_behind)], thousands, noun="records",
                   tick_fmt=compact_count, integer=True),
    ]
    if s.watermark_delay_s is not None:
        charts.append(line_chart("watermark", "Watermark behind the checkpoint's clock", ids,
                                 [SeriesInput("watermark", "behind", s.watermark_delay_s)], _duration,
                                 tick_fmt=compact_duration, duration=True))
    return charts


@dataclass(frozen=True)
class Refresh:
    """The page's reload: every ``seconds`` (0: paused), and the link that pauses or resumes it."""

    seconds: int
    href: str


def _refresh(ctx: Ctx) -> Refresh:
    if ctx.params.refresh > 0:
        return Refresh(ctx.params.refresh, ctx.params.url(refresh=0))
    return Refresh(0, ctx.params.url(refresh=DEFAULT_REFRESH_S))


# ---- templates -------------------------------------------------------------------------------------
class _OneLine(Extension):
    """Template sources are read with their line breaks, and the indentation after each, removed:
    the templates are laid out for reading, the pages stay the one line of HTML they always were
    (a table row is one line; tests and scripts match it so). A space where two lines join must
    therefore be written inside a line, never at its end."""

    _BREAK = re.compile(r"\n[ \t]*")

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return self._BREAK.sub("", source)


def _blank_none(value: Any) -> Any:
    """``{{ None }}`` prints nothing, as an absent abort reason or title should."""
    return "" if value is None else value


_env = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    finalize=_blank_none,
    extensions=[_OneLine],
)
_env.filters.update(thousands=thousands, duration=_duration, size=size_text)
_env.tests["empty_run"] = lambda item: isinstance(item, EmptyRun)
_env.globals.update(
    static_url=static_url, when=when, relative_age=relative_age, source_text=source_text,
    airflow_links=airflow_links, checkpoint_link=checkpoint_link, savepoint_link=savepoint_link,
    dag_url=dag_url, pipeline_url=pipeline_url, checkpoint_url=checkpoint_url,
    checkpoints_view=_checkpoints, charts_view=charts_view, lag_view=_lag, transaction_view=_transaction, lag_title=lag_title,
    CHECKPOINT_COLUMNS=columns(CHECKPOINT_HEADERS), LAG_COLUMNS=columns(LAG_HEADERS),
    TRANSACTION_COLUMNS=columns(TRANSACTION_HEADERS), SAVEPOINT_COLUMNS=columns(SAVEPOINT_HEADERS),
    RUN_SEARCH_WINDOW=RUN_SEARCH_WINDOW, URL_PREFIX=URL_PREFIX,
)


def render(template: str, **values: Any) -> str:
    return _env.get_template(template).render(**values)


# ---- rendering -------------------------------------------------------------------------------------
def render_pipeline(p: PipelineOverview, ctx: Ctx | None = None) -> str:
    return render("pipeline.html", p=p, ctx=ctx or Ctx())


def render_page(overview: Overview, ctx: Ctx | None = None) -> str:
    ctx = ctx or Ctx()
    if ctx.now is None:
        ctx = replace(ctx, now=_parse_time(overview.generated_at))
    return render("checkpoints.html", overview=overview, ctx=ctx, only=ctx.params.query.pipeline,
                  all_pipelines=PageParams(refresh=ctx.params.refresh).url(), refresh=_refresh(ctx))


def render_run_page(dag_id: str, run_id: str, pipeline: str | None, pipelines_dir: str, rows: list[CheckpointRow],
                    searched: int, error: str | None, ctx: Ctx, dry_run: DryRunRow | None = None,
                    tasks: str = "three") -> str:
    """The per-run view (the DAG run's "Checkpoint" tab)."""
    return render("run.html", dag_id=dag_id, run_id=run_id, pipeline=pipeline, pipelines_dir=pipelines_dir,
                  rows=rows, searched=searched, error=error, ctx=ctx, dry_run=dry_run, zone=zone_name(ctx.tz),
                  tasks=tasks)
