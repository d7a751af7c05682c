"""The Checkpoints page without services: overview gathering over an in-memory S3 (the real
CheckpointStore on a fake client that counts its calls), and the pure rendering."""
from __future__ import annotations

import io
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from botocore.exceptions import ClientError

from lockstep.errors import TransientError
from lockstep.model.checkpoint import CheckpointClaim, CompletedCheckpoint, PreparedCheckpoint, PreparedTransaction
from lockstep.model.offsets import OffsetRange
from lockstep.model.transactions import TransactionState
from lockstep.ops.lag import PartitionLag
from lockstep.ops.open_transactions import OpenTransaction, PartitionHold
from lockstep.store.checkpoint_store import COMPARISON, TABLE_UPKEEP, CheckpointStore
from lockstep_airflow.checkpoints_page import (
    Ctx,
    PageParams,
    airflow_links,
    local_time,
    relative_age,
    render_page,
    render_run_page,
)
from lockstep_airflow.overview import (
    CheckpointRow,
    EmptyRun,
    PageQuery,
    collapse_empty,
    find_run_checkpoints,
    gather,
    select_window,
    window_ids,
)

NOW = datetime(2025, 1, 1, 1, 0, tzinfo=UTC)
AMSTERDAM = ZoneInfo("Europe/Amsterdam")


# ---- an in-memory S3 ---------------------------------------------------------------------------------
def _error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "op")


class FakeS3:
    """The calls CheckpointStore makes, on a dict; ``calls`` counts them by operation. A listing page holds
    ``page_size`` keys or prefixes (S3: 1,000)."""

    def __init__(self, page_size: int = 1000) -> None:
        self.objects: dict[str, bytes] = {}
        self.calls: dict[str, int] = {}
        self.page_size = page_size

    def _count(self, op: str) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        self._count("get_object")
        if Key not in self.objects:
            raise _error("NoSuchKey", 404)
        body = self.objects[Key]
        return {"Body": io.BytesIO(body), "ETag": str(hash(body))}

    def put_object(self, Bucket: str, Key: str, Body: bytes, IfNoneMatch: str | None = None,
                   IfMatch: str | None = None, ContentType: str | None = None) -> dict[str, Any]:
        self._count("put_object")
        if IfNoneMatch == "*" and Key in self.objects:
            raise _error("PreconditionFailed", 412)
        if IfMatch is not None and str(hash(self.objects.get(Key))) != IfMatch:
            raise _error("PreconditionFailed", 412)
        self.objects[Key] = Body
        return {}

    def get_paginator(self, name: str) -> FakeS3:
        assert name == "list_objects_v2"
        return self

    def paginate(self, Bucket: str, Prefix: str, Delimiter: str | None = None,
                 StartAfter: str | None = None):
        keys = sorted(k for k in self.objects if k.startswith(Prefix) and (StartAfter is None or k > StartAfter))
        entries: list[tuple[str, bool]] = []
        for key in keys:
            rest = key[len(Prefix):]
            if Delimiter and Delimiter in rest:
                common = Prefix + rest.split(Delimiter)[0] + Delimiter
                if not entries or entries[-1] != (common, True):
                    entries.append((common, True))
            else:
                entries.append((key, False))
        for start in range(0, max(len(entries), 1), self.page_size):
            self._count("list_objects_v2")
            chunk = entries[start:start + self.page_size]
            yield {"CommonPrefixes": [{"Prefix": k} for k, common in chunk if common],
                   "Contents": [{"Key": k} for k, common in chunk if not common]}


# ---- seeding -----------------------------------------------------------------------------------------
SPEC = {
    "name": "orders",
    "description": "Orders enriched.",
    "source": {"topics": ["orders"], "kafka_conn_id": "kafka_default"},
    "transform": "lockstep_examples.orders:enrich",
    "sink": {"topic": "orders-out", "dead_letter_topic": "orders-dlq", "kafka_conn_id": "kafka_default"},
    "checkpoints": {"store": "s3://lockstep/unit", "aws_conn_id": "aws_default", "schedule": None},
}


def _at(minutes: int) -> str:
    return (datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes)).isoformat()


def seed(store: CheckpointStore, count: int, empty: range = range(0), run_ids: dict[int, str] | None = None) -> None:
    """``count`` completed checkpoints of 10 records each on orders:0, ids in ``empty`` with none."""
    offset = 0
    for cid in range(1, count + 1):
        records = 0 if cid in empty else 10
        rng = (OffsetRange("orders", 0, offset, offset + records),)
        offset += records
        run_id = (run_ids or {}).get(cid, f"scheduled__{_at(cid)}")
        store.claim(CheckpointClaim("orders", cid, run_id, _at(cid), rng, f"checkpoint:{cid - 1}"))
        txns = () if not records else (PreparedTransaction(f"orders-{cid}-0", 1, 0, (), records, 0, 0, 0),)
        store.write_prepared(PreparedCheckpoint("orders", cid, _at(cid), txns, records, records, 0, 1.0))
        store.mark_completed(CompletedCheckpoint("orders", cid, _at(cid),
                                                 {"orders:0": offset}, tuple(t.transactional_id for t in txns)))


@pytest.fixture
def specs_dir(tmp_path: Path) -> Path:
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(SPEC))
    return tmp_path


def _gather(specs_dir: Path, s3: FakeS3, query: PageQuery, lag: list[PartitionLag] | None = None, lag_for=None,
            transactions_for=lambda spec, store, now: []):
    return gather(specs_dir, query=query, now=lambda: NOW, tz=AMSTERDAM,
                  store_for=lambda spec: CheckpointStore(s3, "lockstep", "unit/orders", spec.name),
                  lag_for=lag_for or (lambda spec, store, now: lag or []), transactions_for=transactions_for)


def _lag_store_reads(spec, store, now) -> list[PartitionLag]:
    """What ``lag.read_lag`` asks of the store (its Kafka side is not the store's cost)."""
    latest = store.latest_completed()
    store.views_after(latest.checkpoint_id if latest else None)
    return []


def _page_module():
    """checkpoints_page itself (its app, its static folder), through a function imported above."""
    return sys.modules[render_page.__module__]


# ---- windows and collapsing ------------------------------------------------------------------------------
def test_select_window_newest_page_and_paging():
    ids = list(range(1, 51))
    shown, page = select_window(ids, 20)
    assert shown == list(range(50, 30, -1)) and page.older_before == 31 and not page.newer
    shown, page = select_window(ids, 20, before=31)
    assert shown == list(range(30, 10, -1)) and page.older_before == 11 and page.newer and page.newer_before is None
    shown, page = select_window(ids, 20, before=11)
    assert shown == list(range(10, 0, -1)) and page.older_before is None and page.newer_before == 31


def test_select_window_holds_the_asked_checkpoint_and_reports_a_missing_one():
    ids = list(range(1, 501))
    shown, page = select_window(ids, 20, checkpoint=100)
    assert 100 in shown and len(shown) == 20 and page.highlight == 100 and page.older_before and page.newer
    shown, page = select_window(ids, 20, checkpoint=2)  # near the oldest: still a full page
    assert shown == list(range(20, 0, -1)) and page.older_before is None
    shown, page = select_window(ids, 20, checkpoint=500)
    assert shown[0] == 500 and not page.newer
    shown, page = select_window(list(range(300, 501)), 20, checkpoint=7)  # deleted by retention
    assert page.missing == 7 and page.highlight is None and shown[0] == 500


def _row(cid: int, empty: bool, status: str = "completed") -> CheckpointRow:
    return CheckpointRow(cid, status, f"scheduled__{cid}", _at(cid), "checkpoint", None, ["orders:0[5,5)"],
                         0, 0, 0, 0, _at(cid), 1.0, None, None, empty)


def test_consecutive_empty_checkpoints_collapse_into_one_row():
    rows = [_row(20, False)] + [_row(i, True) for i in range(19, 4, -1)] + [_row(4, False), _row(3, True)]
    items = collapse_empty(rows)
    assert [type(i).__name__ for i in items] == ["CheckpointRow", "EmptyRun", "CheckpointRow", "CheckpointRow"]
    run = items[1]
    assert isinstance(run, EmptyRun) and (run.first, run.last, run.count) == (5, 19, 15)
    kept = collapse_empty(rows, keep=[10])  # the highlighted checkpoint stays visible
    assert [(i.first, i.last) for i in kept if isinstance(i, EmptyRun)] == [(11, 19), (5, 9)]
    assert any(isinstance(i, CheckpointRow) and i.checkpoint_id == 10 for i in kept)


# ---- the store side, with 500 checkpoints -------------------------------------------------------------------
def test_a_page_of_500_checkpoints_reads_only_what_it_shows(specs_dir):
    s3 = FakeS3(page_size=50)  # a listing answers 50 ids, so listing all 500 would take 10 calls
    seed(CheckpointStore(s3, "lockstep", "unit/orders", "orders"), 500, empty=range(470, 490))
    s3.calls.clear()
    overview = _gather(specs_dir, s3, PageQuery(limit=20), lag_for=_lag_store_reads)
    html = render_page(overview, Ctx(tz=AMSTERDAM, params=PageParams()))
    page = overview.pipelines[0].checkpoints
    assert [r.checkpoint_id for r in page.rows] == list(range(500, 480, -1))
    assert (page.oldest, page.newest, page.older_before, page.newer) == (1, 500, 481, False)
    # ids: the newest (pointer GET + LIST after it), the page's (1 LIST from 479), the oldest (1 LIST);
    # page: 20 views x 3 GETs; savepoints: 1 LIST; latest_completed, once for the lag and the "last
    # completed" line: pointer GET + LIST + 1 view; the lag's checkpoints after it: 1 LIST; the last dry
    # run: 1 GET; the last comparison: 1 GET. The count of calls, not a time, shows the page does not grow
    # with history.
    assert s3.calls["get_object"] <= 20 * 3 + 2 + 3 + 1 + 1, s3.calls
    assert s3.calls["list_objects_v2"] <= 7, s3.calls
    assert "checkpoints 481–500 of 1–500 stored" in html
    assert "checkpoints 481–489: 9 empty, completed" in html


def test_checkpoint_query_finds_an_old_checkpoint_and_before_pages(specs_dir):
    s3 = FakeS3()
    seed(CheckpointStore(s3, "lockstep", "unit/orders", "orders"), 500)
    page = _gather(specs_dir, s3, PageQuery(limit=20, checkpoint=42)).pipelines[0].checkpoints
    assert 42 in [r.checkpoint_id for r in page.rows] and page.highlight == 42
    page = _gather(specs_dir, s3, PageQuery(limit=10, before=100)).pipelines[0].checkpoints
    assert [r.checkpoint_id for r in page.rows] == list(range(99, 89, -1))


@pytest.mark.parametrize("query", [PageQuery(limit=20), PageQuery(limit=20, before=300), PageQuery(limit=20, before=25),
                                   PageQuery(limit=20, before=9), PageQuery(limit=20, before=10_000),
                                   PageQuery(limit=20, checkpoint=160), PageQuery(limit=20, checkpoint=3),
                                   PageQuery(limit=20, checkpoint=399), PageQuery(limit=20, checkpoint=150),
                                   PageQuery(limit=7, checkpoint=131), PageQuery(limit=20, checkpoint=5_000)])
def test_the_ids_around_a_page_place_it_as_every_id_would_gaps_included(query: PageQuery):
    """Stored ids with the gaps retention and savepoints leave: 1-4, 120-130, 140-400 (so 5-119 and
    131-139 are gone). The window and links from `window_ids` are those from the whole listing."""
    s3 = FakeS3(page_size=50)
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    stored = [*range(1, 5), *range(120, 131), *range(140, 401)]
    for cid in stored:
        s3.put_object(Bucket="lockstep", Key=f"unit/orders/checkpoints/{cid:012d}/claim.json", Body=b"{}")
    newest = max(stored)
    ids, missing = window_ids(store, query, newest)
    before = query.before if query.checkpoint is None else None
    asked = query.checkpoint if query.checkpoint in stored else None
    expected = select_window(stored, query.limit, before, asked)
    got = select_window(ids, query.limit, before, None if missing else query.checkpoint)
    assert got[0] == expected[0]
    assert (got[1].older_before, got[1].newer, got[1].newer_before, got[1].highlight) == \
        (expected[1].older_before, expected[1].newer, expected[1].newer_before, expected[1].highlight)
    assert missing == (query.checkpoint if query.checkpoint is not None and asked is None else None)
    assert len(ids) <= 3 * query.limit + 2


def test_a_before_far_past_the_newest_id_lists_from_the_newest_down():
    s3 = FakeS3()
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    for cid in range(1, 31):
        s3.put_object(Bucket="lockstep", Key=f"unit/orders/checkpoints/{cid:012d}/claim.json", Body=b"{}")
    s3.calls.clear()
    ids, missing = window_ids(store, PageQuery(limit=20, before=10**9), 30)
    assert ids == list(range(10, 31)) and missing is None
    assert s3.calls["list_objects_v2"] == 2, s3.calls  # the ids from the anchor up, then one listing down


def test_run_search_is_bounded_and_finds_the_run():
    s3 = FakeS3()
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    seed(store, 300, run_ids={290: "manual__2025-01-01T00:00:00+00:00", 50: "manual__old"})
    s3.calls.clear()
    rows, searched = find_run_checkpoints(store, "manual__2025-01-01T00:00:00+00:00")
    assert [r.checkpoint_id for r in rows] == [290] and searched == 200
    assert s3.calls["get_object"] <= 3 * 16, s3.calls  # two batches of 8 from the newest
    rows, searched = find_run_checkpoints(store, "manual__old")  # id 50 is past the newest 200
    assert rows == [] and searched == 200


# ---- rendering ---------------------------------------------------------------------------------------------
def test_times_are_in_airflows_zone_with_its_name_and_the_iso_value_kept():
    assert local_time("2025-01-01T00:02:00+00:00", AMSTERDAM) == "2025-01-01 01:02 CET"
    assert local_time("2025-07-01T00:02:00+00:00", AMSTERDAM) == "2025-07-01 02:02 CEST"
    assert local_time("2025-01-01T00:02:00+00:00", UTC) == "2025-01-01 00:02 UTC"
    assert local_time("not a time", AMSTERDAM) is None
    assert [relative_age(s) for s in (None, 1, 42, 180, 3 * 3600 + 300, 7200, 5 * 86400)] == [
        "", "just now", "42 s ago", "3 min ago", "3 h 5 min ago", "2 h ago", "5 d ago"]


def test_page_shows_legend_zone_collapsed_rows_paging_and_refresh(specs_dir):
    s3 = FakeS3()
    seed(CheckpointStore(s3, "lockstep", "unit/orders", "orders"), 40, empty=range(25, 38))
    overview = _gather(specs_dir, s3, PageQuery(limit=20))
    html = render_page(overview, Ctx(tz=AMSTERDAM, params=PageParams()))
    assert "<dt><code>orders:0[3750,3750)</code></dt>" in html and "Last stable offset" in html
    assert '<time datetime="2025-01-01T00:40:00+00:00" title="2025-01-01T00:40:00+00:00">2025-01-01 01:40 CET</time>' \
        in html and "20 min ago" in html and "times in Europe/Amsterdam" in html
    assert "checkpoints 25–37: 13 empty, completed" in html and "13 empty folded" in html
    assert 'href="?pipeline=orders&amp;empty=show">show all</a>' in html
    assert 'href="?pipeline=orders&amp;before=21" rel="next">older →</a>' in html and "← newer" not in html
    assert '<meta http-equiv="refresh" content="30">' in html
    assert 'refreshes every 30 s · <a href="?refresh=0">pause</a>' in html
    assert '<span id="checkpoint-30"></span>' in html  # deep links into a folded row still land on it
    assert "Last completed checkpoint: <a href=\"?pipeline=orders&amp;checkpoint=40#checkpoint-40\">40</a>" in html

    shown = render_page(overview, Ctx(tz=AMSTERDAM, params=PageParams(show_empty=True, refresh=0)))
    assert "empty, completed" not in shown and '<tr id="checkpoint-30">' in shown and "13 empty shown" in shown
    assert "http-equiv" not in shown and "auto-refresh paused" in shown


def test_highlighted_checkpoint_and_newer_link(specs_dir):
    s3 = FakeS3()
    seed(CheckpointStore(s3, "lockstep", "unit/orders", "orders"), 100)
    params = PageParams(PageQuery(limit=20, checkpoint=30, pipeline="orders"))
    html = render_page(_gather(specs_dir, s3, params.query), Ctx(tz=AMSTERDAM, params=params))
    assert '<tr id="checkpoint-30" class="highlight">' in html
    assert 'href="?pipeline=orders&amp;before=60" rel="prev">← newer</a>' in html
    missing = PageParams(PageQuery(limit=20, checkpoint=1000, pipeline="orders"))
    html = render_page(_gather(specs_dir, s3, missing.query), Ctx(tz=AMSTERDAM, params=missing))
    assert "Checkpoint 1000 is not in the store" in html


def test_savepoint_links_name_the_checkpoint_in_the_query(specs_dir):
    s3 = FakeS3()
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    seed(store, 3)
    store.create_savepoint("before-upgrade", 2, _at(10))
    html = render_page(_gather(specs_dir, s3, PageQuery()), Ctx(tz=AMSTERDAM))
    assert '<a href="?pipeline=orders&amp;checkpoint=2#checkpoint-2">2</a>' in html


def test_airflow_links_for_dag_runs_and_none_for_cli_runs():
    links = airflow_links("lockstep_orders", "manual__2025-01-01T00:00:00+00:00")
    assert links == {
        "run": "/dags/lockstep_orders/runs/manual__2025-01-01T00%3A00%3A00%2B00%3A00",
        "run_logs": "/dags/lockstep_orders/runs/manual__2025-01-01T00%3A00%3A00%2B00%3A00/tasks/run",
        "commit_logs": "/dags/lockstep_orders/runs/manual__2025-01-01T00%3A00%3A00%2B00%3A00/tasks/commit"}
    assert airflow_links("d", "scheduled__x", ui_base="/airflow")["run"] == "/airflow/dags/d/runs/scheduled__x"
    assert airflow_links("lockstep_orders", "cli-worker-1.example-4242-9f8e7d") is None
    assert airflow_links("d", "") is None


def test_rows_link_to_their_run_inside_and_outside_the_frame(specs_dir):
    s3 = FakeS3()
    seed(CheckpointStore(s3, "lockstep", "unit/orders", "orders"), 2,
         run_ids={1: "cli-host-77-abc", 2: "manual__2025-01-01T00:00:00+00:00"})
    html = render_page(_gather(specs_dir, s3, PageQuery()), Ctx(tz=AMSTERDAM))
    assert ('<a href="/dags/lockstep_orders/runs/manual__2025-01-01T00%3A00%3A00%2B00%3A00" target="_top" '
            'data-airflow title="DAG run manual__2025-01-01T00:00:00+00:00">DAG run</a>') in html
    row1 = re.search(r'<tr id="checkpoint-1">.*?</tr>', html).group(0)
    assert "CLI run: no DAG run" in row1 and "/dags/" not in row1
    # The routing script is a static file the page loads (it was inline).
    assert re.search(r'<script src="/lockstep/static/checkpoints\.js\?v=\w+"></script>', html)
    script = (_page_module().STATIC / "checkpoints.js").read_text()
    assert "top.history.pushState" in script and 'new PopStateEvent("popstate"' in script


def test_hostile_names_are_escaped(tmp_path):
    s3 = FakeS3()
    hostile = '<script>alert(1)</script>"'
    (tmp_path / "x.yaml").write_text(yaml.safe_dump({**SPEC, "description": hostile}))
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    store.claim(CheckpointClaim("orders", 1, f"manual__{hostile}", _at(1),
                                (OffsetRange("orders", 0, 0, 1),), f"auto.offset.reset:{hostile}"))
    overview = _gather(tmp_path, s3, PageQuery(pipeline="orders"),
                       lag=[PartitionLag(f"{hostile}:0", 1, 1, 0, 1, 2)])
    overview.spec_errors.append(hostile)
    html = render_page(overview, Ctx(tz=AMSTERDAM, params=PageParams(PageQuery(pipeline=hostile))))
    run_html = render_run_page(hostile, hostile, hostile, hostile, overview.pipelines[0].checkpoints.rows, 1, None,
                               Ctx(tz=AMSTERDAM))
    for doc in (html, run_html):
        assert "<script>alert" not in doc and 'alert(1)</script>"' not in doc
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in doc
    assert "manual__%3Cscript%3Ealert(1)%3C%2Fscript%3E%22" in html  # in the link, encoded
    json.dumps(overview.to_json())  # the API serialises the same data


def test_script_tags_and_quotes_in_topics_and_abort_reasons_are_escaped(specs_dir):
    """Ranges and abort reasons come from the store, not from a validated spec: the templates escape
    them in text and in attributes alike."""
    s3 = FakeS3()
    seed(CheckpointStore(s3, "lockstep", "unit/orders", "orders"), 3)
    hostile = '<script>alert(1)</script>"'
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;&#34;"
    overview = _gather(specs_dir, s3, PageQuery(), lag=[PartitionLag(f"{hostile}:0", 1, 1, 0, 1, 2)])
    row = CheckpointRow(4, "aborted", f"manual__{hostile}", _at(4), "checkpoint:3", None, [f"{hostile}:0[0,1)"],
                        1, 0, 0, 1, _at(5), 60.0, f"reason {hostile}", f"hint {hostile}")
    overview.pipelines[0].checkpoints.rows.insert(0, row)
    html = render_page(overview, Ctx(tz=AMSTERDAM))
    run_html = render_run_page("lockstep_orders", row.run_id, "orders", "/specs", [row], 1, None, Ctx(tz=AMSTERDAM))
    for doc in (html, run_html):
        assert re.findall(r"<script\b[^>]*>", doc) == [re.search(r'<script src="[^"]*">', doc).group(0)]
        assert f"<td>reason {escaped}<br><span class=\"meta\">hint {escaped}</span></td>" in doc
        assert f"<code>{escaped}:0[0,1)</code>" in doc
        assert f'title="DAG run manual__{escaped}"' in doc  # the quote does not end the attribute
    assert f"<td><code>{escaped}:0</code></td>" in html


def test_the_app_serves_its_css_and_js_without_a_session_and_nothing_else(specs_dir):
    from fastapi.testclient import TestClient

    page = _page_module()
    html = render_page(_gather(specs_dir, FakeS3(), PageQuery()), Ctx(tz=AMSTERDAM))
    css = re.search(r'<link rel="stylesheet" href="([^"]+)">', html).group(1)
    js = re.search(r'<script src="([^"]+)"></script>', html).group(1)
    client = TestClient(page.app)  # no credentials: the static files are public, the pages are not
    for url, name, kind in ((css, "checkpoints.css", "text/css"), (js, "checkpoints.js", "javascript")):
        assert url.startswith("/lockstep/static/")  # where lockstep_plugin mounts the app, as the browser asks
        resp = client.get(url.removeprefix("/lockstep"))
        assert resp.status_code == 200 and kind in resp.headers["content-type"]
        assert resp.content == (page.STATIC / name).read_bytes()
    assert client.get("/static/missing.css").status_code == 404
    assert client.get("/").status_code == 401 and client.get("/api/pipelines").status_code == 401
    signin = client.get("/", headers={"Accept": "text/html"})
    assert signin.status_code == 401 and "pipeline" not in signin.text
    assert 'Not authenticated. <a href="/auth/login?next=/lockstep/" target="_top">Sign in to Airflow</a>' in signin.text


def test_run_page_says_when_nothing_was_found():
    html = render_run_page("lockstep_orders", "manual__x", "orders", "/specs", [], 200, None, Ctx())
    assert "among its newest 200 checkpoint(s)" in html
    assert 'href="/plugin/lockstep-checkpoints/lockstep/?pipeline=orders"' in html
    html = render_run_page("other_dag", "manual__x", None, "/specs", [], 0, None, Ctx())
    assert "is not a Lockstep pipeline" in html


def test_the_latest_dry_run_is_shown_under_the_checkpoints_and_in_its_runs_tab(specs_dir):
    from lockstep_airflow.overview import dry_run_row

    s3 = FakeS3()
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    seed(store, 3)
    run_id = "manual__2025-01-01T01:00:00+00:00"
    # A dry run keeps the claim it did not make; nothing is written under checkpoints/.
    store.record_dry_run(CheckpointClaim("orders", 4, run_id, _at(60), (OffsetRange("orders", 0, 30, 45),
                                                                       OffsetRange("orders", 1, 5, 5)), "checkpoint:3"))
    assert list(store.checkpoint_ids()) == [1, 2, 3]
    html = render_page(_gather(specs_dir, s3, PageQuery(limit=20)), Ctx(tz=AMSTERDAM, params=PageParams()))
    line = re.search(r'<div class="meta dry-run">(.*?)</div>', html).group(1)
    assert "would take 15 records as checkpoint 4 from checkpoint:3: <code>orders:0[30,45)</code>; nothing was " \
           "claimed." in line
    assert 'href="/dags/lockstep_orders/runs/manual__2025-01-01T01%3A00%3A00%2B00%3A00"' in line  # its DAG run

    tab = render_run_page("lockstep_orders", run_id, "orders", "/specs", [], 3, None, Ctx(tz=AMSTERDAM),
                          dry_run=dry_run_row(store.last_dry_run())[0])
    assert "A dry run" in tab and "would take 15 records as checkpoint 4" in tab and "nothing was claimed" in tab
    assert "<li><code>orders:0[30,45)</code></li>" in tab and "orders:1[5,5)" not in tab


def test_the_json_link_downloads_instead_of_replacing_the_page_in_airflows_frame(specs_dir):
    html = render_page(_gather(specs_dir, FakeS3(), PageQuery(limit=20)), Ctx(tz=AMSTERDAM, params=PageParams()))
    assert '<a href="/lockstep/api/pipelines" download="lockstep-checkpoints.json">JSON</a>' in html


def test_lag_shows_records_in_flight_apart_from_unread_ones(specs_dir):
    s3 = FakeS3()
    rows = [PartitionLag("orders:0", 100, 140, 40, 20, 160, (5, 6)), PartitionLag("orders:1", 50, 50, 0, 0, 50)]
    overview = _gather(specs_dir, s3, PageQuery(pipeline="orders"), lag=rows)
    html = render_page(overview, Ctx(tz=AMSTERDAM))
    assert "Lag — 60 records not committed, 40 of them in flight" in html
    assert ('<tr><td><code>orders:0</code></td><td class="n">100</td>'
            '<td class="n" title="claimed by checkpoint 5, 6">40</td><td class="n">20</td>'
            '<td class="n">160</td>') in html
    assert overview.to_json()["pipelines"][0]["lag"]["rows"][0]["not_committed"] == 60


# ---- open transactions panel ---------------------------------------------------------------------------------
def _open(tid: str, foreign: bool = False, held: tuple[int, int] = (40, 70)) -> OpenTransaction:
    return OpenTransaction(tid, None, foreign, None if foreign else 3, None if foreign else 1,
                           None if foreign else "prepared", None if foreign else "cli-h-1-x", TransactionState.ONGOING, 7, 0,
                           125_000, 775_000, (PartitionHold("orders-out:0", *held),),
                           "none (foreign)" if foreign else "commit")


def test_open_transactions_panel_shows_checkpoint_time_left_and_held_back_records(specs_dir):
    s3 = FakeS3()
    seed(CheckpointStore(s3, "lockstep", "unit/orders", "orders"), 3)
    seen = []

    def transactions(spec, store, now):
        seen.append((spec.name, now))
        return [_open("orders-3-1"), _open("loader-7", foreign=True, held=(40, 41))]

    overview = _gather(specs_dir, s3, PageQuery(), transactions_for=transactions)
    assert seen == [("orders", NOW)]
    html = render_page(overview, Ctx(tz=AMSTERDAM))
    panel = html.split("<h3>Open transactions</h3>", 1)[1].split("<h3>Savepoints</h3>", 1)[0]
    mine, foreign = re.findall(r"<tr><td><code>.*?</tr>", panel)
    assert "orders-3-1" in mine and 'checkpoint=3' in mine and "prepared" in mine and "12 min 55 s" in mine
    assert "<code>orders-out:0</code> LSO 40" in mine and '<td class="n">30</td>' in mine and "commit" in mine
    assert "loader-7" in foreign and '<td class="n">foreign</td>' in foreign and '<td class="n">1</td>' in foreign
    doc = overview.to_json()["pipelines"][0]["transactions"]
    assert doc["error"] is None and [r["held_back"] for r in doc["rows"]] == [30, 1]
    json.dumps(overview.to_json())


def test_a_kafka_failure_shows_in_the_open_transactions_panel_not_a_broken_page(specs_dir):
    s3 = FakeS3()
    seed(CheckpointStore(s3, "lockstep", "unit/orders", "orders"), 2)

    def unreachable(spec, store, now):
        raise TransientError("gave up trying to list transactions with prefix '' after 60 s; retry the task")

    overview = _gather(specs_dir, s3, PageQuery(), transactions_for=unreachable)
    html = render_page(overview, Ctx(tz=AMSTERDAM))
    panel = html.split("<h3>Open transactions</h3>", 1)[1].split("<h3>Savepoints</h3>", 1)[0]
    assert '<div class="error">gave up trying to list transactions' in panel
    assert '<tr id="checkpoint-2">' in html  # the rest of the page is there


def test_a_checkpoint_completed_after_repair_says_so_with_what_was_lost_and_given_back(specs_dir):
    from dataclasses import replace

    from lockstep.model.checkpoint import CheckpointView, Repair
    from lockstep_airflow.overview import checkpoint_row

    claim = CheckpointClaim("orders", 4, "scheduled__4", _at(4), (OffsetRange("orders", 0, 0, 9),
                            OffsetRange("orders", 1, 3, 7)), "checkpoint:3")
    repair = Repair({"orders-4-1": "transaction orders-4-1 timed out"}, (OffsetRange("orders", 1, 3, 7),))
    done = CompletedCheckpoint("orders", 4, _at(5), {"orders:0": 9, "orders:1": 3}, ("orders-4-0",), repair=repair)
    row = checkpoint_row(CheckpointView(claim, completed=done))
    assert row.status == "completed" and row.repair == repair.summary
    overview = _gather(specs_dir, FakeS3(), PageQuery())
    overview.pipelines[0].checkpoints.rows.insert(0, row)
    html = render_page(overview, Ctx(tz=AMSTERDAM))
    assert '<span class="badge completed">completed after repair</span>' in html
    assert "transaction orders-4-1 lost; orders:1[3,7) given back to the next checkpoint" in html
    plain = replace(row, repair=None)
    overview.pipelines[0].checkpoints.rows[0] = plain
    assert "after repair" not in render_page(overview, Ctx(tz=AMSTERDAM))


def test_a_pipelined_checkpoint_s_row_names_the_checkpoint_it_was_planned_on_top_of(specs_dir):
    from dataclasses import replace

    from lockstep.model.checkpoint import CheckpointView
    from lockstep_airflow.overview import checkpoint_row

    claim = CheckpointClaim("orders", 5, "scheduled__5", _at(5), (OffsetRange("orders", 0, 9, 12),), "checkpoint:4",
                            after=4)
    row = checkpoint_row(CheckpointView(claim))
    assert row.after == 4
    overview = _gather(specs_dir, FakeS3(), PageQuery())
    overview.pipelines[0].checkpoints.rows.insert(0, row)
    cell = render_page(overview, Ctx(tz=AMSTERDAM)).split('<tr id="checkpoint-5">', 1)[1].split("</tr>", 1)[0]
    assert "planned on top of checkpoint 4" in cell
    overview.pipelines[0].checkpoints.rows[0] = replace(row, after=None)
    assert "planned on top of" not in render_page(overview, Ctx(tz=AMSTERDAM))


def test_a_checkpoint_that_read_no_records_but_wrote_is_not_collapsed_as_empty():
    from lockstep.model.checkpoint import (
        CheckpointClaim,
        CheckpointView,
        CompletedCheckpoint,
        PreparedCheckpoint,
        PreparedTransaction,
    )
    from lockstep.model.offsets import OffsetRange, TopicPartition
    from lockstep_airflow.overview import is_empty_view

    claim = CheckpointClaim("orders", 7, "r", "2026-11-27T00:00:00+00:00", (OffsetRange("orders", 0, 5, 5),),
                            "checkpoint", fires_timers=True)
    done = CompletedCheckpoint("orders", 7, "t", {"orders:0": 5}, ("p-7-0",))
    fired = PreparedTransaction("p-7-0", 1, 0, (TopicPartition("out", 0),), 3, 0, 0, 1)
    wrote = PreparedCheckpoint("orders", 7, "t", (fired,), 0, 3, 0, 1.0)
    assert not is_empty_view(CheckpointView(claim, wrote, done)), "windows fired while the source was quiet"
    nothing = PreparedCheckpoint("orders", 7, "t", (), 0, 0, 0, 0.0)
    assert is_empty_view(CheckpointView(claim, nothing, done))


# ---- charts ----------------------------------------------------------------------------------------------
def _figures(row: CheckpointRow, **changes) -> CheckpointRow:
    from dataclasses import replace

    return replace(row, **changes)


def test_rows_carry_their_claims_end_offsets_and_the_watermarks_delay_behind_its_clock():
    from lockstep.model.checkpoint import CheckpointView
    from lockstep.model.state_manifest import StateManifest
    from lockstep_airflow.overview import checkpoint_row

    claim = CheckpointClaim("orders", 9, "r", _at(9), (OffsetRange("orders", 0, 5, 25), OffsetRange("orders", 1, 7, 7)),
                            "checkpoint:8", clock_ms=1_735_690_000_000)
    state = StateManifest(operator="window", key_groups=4, written_by=9, files={}, columns={},
                          watermark_ms=1_735_690_000_000 - 95_500, partitions={}, keys=3)
    prepared = PreparedCheckpoint("orders", 9, _at(10), (), 20, 20, 0, 1.0, state=state)
    row = checkpoint_row(CheckpointView(claim, prepared))
    assert row.end_offsets == {"orders:0": 25, "orders:1": 7} and row.watermark_delay_s == 95.5
    stateless = checkpoint_row(CheckpointView(claim, PreparedCheckpoint("orders", 9, _at(10), (), 20, 20, 0, 1.0)))
    assert stateless.watermark_delay_s is None
    old_claim = CheckpointClaim("orders", 9, "r", "2025-01-01T00:00:00+00:00", claim.ranges, "checkpoint:8")
    older = checkpoint_row(CheckpointView(old_claim, prepared))  # no clock_ms: its claimed_at is the clock
    assert older.watermark_delay_s == round((1_735_689_600_000 - state.watermark_ms) / 1000, 3)


def test_records_behind_each_checkpoint_are_the_next_claims_ends_less_its_own():
    from lockstep_airflow.overview import records_behind

    def row(cid: int, ends: dict[str, int], status: str = "completed") -> CheckpointRow:
        return _figures(_row(cid, False, status), end_offsets=ends)

    rows = [row(1, {"o:0": 10, "o:1": 10}), row(2, {"o:0": 20, "o:1": 15}, "aborted"),
            row(3, {"o:0": 25, "o:1": 15}), row(4, {"o:0": 5, "o:1": 5}),  # 4 restored from an older savepoint
            row(5, {"o:0": 30, "o:1": 16}, "claimed")]
    now = {"o:0": 42, "o:1": 16}
    # 1: (20-10)+(15-10); 2 aborted: its end was never reached; 3: the next went back (a restore), no figure;
    # 4: (30-5)+(16-5); 5, the newest and in flight: what is unread past its end now.
    assert records_behind(rows, now) == [15, None, None, 36, 12]
    assert records_behind(rows) == [15, None, None, 36, None]  # no lag reading: nothing for the newest
    assert records_behind([row(1, {})], now) == [None]


def test_series_come_from_the_rows_and_lag_already_read_and_the_json_carries_them(specs_dir):
    from lockstep_airflow.overview import checkpoint_series

    s3 = FakeS3()
    seed(CheckpointStore(s3, "lockstep", "unit/orders", "orders"), 30, empty=range(27, 29))
    lag = [PartitionLag("orders:0", 280, 280, 0, 7, 287)]
    overview = _gather(specs_dir, s3, PageQuery(limit=5), lag=lag)
    p = overview.pipelines[0]
    s = p.series
    assert s is not None and s.checkpoint_ids == [26, 27, 28, 29, 30]  # oldest first, the page's five
    assert s.records_in == [10, 0, 0, 10, 10] and s.records_dead_lettered == [0] * 5 and s.duration_s == [0.0] * 5
    assert s.records_behind == [0, 0, 10, 10, 7]  # the newest against the lag section's last stable offsets
    assert s.watermark_delay_s is None  # stateless
    doc = overview.to_json()["pipelines"][0]["series"]
    assert doc["checkpoint_ids"] == s.checkpoint_ids and doc["records_behind"] == s.records_behind
    json.dumps(overview.to_json())
    # An older page: its newest checkpoint's next claim is off the page, and "now" is not its lag.
    older = _gather(specs_dir, s3, PageQuery(limit=5, before=20), lag=lag).pipelines[0]
    assert older.series.checkpoint_ids == [15, 16, 17, 18, 19] and older.series.records_behind == [10, 10, 10, 10, None]
    broken = _gather(specs_dir, s3, PageQuery(limit=5), lag_for=lambda *a: (_ for _ in ()).throw(OSError("down")))
    assert broken.pipelines[0].lag.error and broken.pipelines[0].series.records_behind[-1] is None
    assert checkpoint_series(_gather(specs_dir, FakeS3(), PageQuery()).pipelines[0].checkpoints, p.lag) is None


def test_charts_add_no_store_call_to_the_page(specs_dir):
    """The charts plot the rows the page reads anyway: gathering costs what it did (3 GETs per checkpoint
    shown, plus the constant reads of the 500-checkpoint test above) and rendering reads nothing."""
    s3 = FakeS3(page_size=50)
    seed(CheckpointStore(s3, "lockstep", "unit/orders", "orders"), 200)
    s3.calls.clear()
    overview = _gather(specs_dir, s3, PageQuery(limit=20), lag_for=_lag_store_reads)
    gathered = dict(s3.calls)
    assert gathered["get_object"] <= 20 * 3 + 2 + 3 + 1 + 1, gathered
    html = render_page(overview, Ctx(tz=AMSTERDAM, params=PageParams()))
    overview.to_json()
    assert s3.calls == gathered, "rendering the charts (or the JSON series) read the store"
    svg = re.search(r'<figure class="chart" id="chart-orders-records">.*?</figure>', html).group(0)
    assert svg.count("<circle ") == 3 * 20 and svg.count('class="slot"') == 20


def test_the_page_draws_records_duration_and_lag_charts_as_inline_svg(specs_dir):
    s3 = FakeS3()
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    seed(store, 3)
    store.claim(CheckpointClaim("orders", 4, "scheduled__4", _at(4), (OffsetRange("orders", 0, 30, 45),),
                                "checkpoint:3"))  # claimed: no figures yet, a gap
    overview = _gather(specs_dir, s3, PageQuery(), lag=[PartitionLag("orders:0", 30, 45, 15, 5, 50)])
    html = render_page(overview, Ctx(tz=AMSTERDAM))
    charts = re.search(r'<div class="charts">(.*?)</div>', html).group(1)
    assert re.findall(r'<figure class="chart" id="chart-orders-(\w+)">', charts) == ["records", "duration", "lag"]
    assert "<script" not in charts and "http" not in charts.replace("http://www.w3.org", "")  # nothing fetched
    records = re.search(r'id="chart-orders-records">(.*?)</figure>', charts).group(1)
    label = ("Records per checkpoint, checkpoints 1–4; latest: 10 records in (checkpoint 3), 10 records out "
             "(checkpoint 3), 0 records dead-lettered (checkpoint 3)")
    assert f'role="img" aria-label="{label}" data-checkpoints="1 2 3 4"><title>{label}</title>' in records
    assert re.findall(r'<g class="series s-in"><path d="(M[^"]*)"', records) == [
        re.search(r'<g class="series s-in"><path d="([^"]*)"', records).group(1)]
    assert [int(i) for i in re.findall(r'<circle [^>]*data-checkpoint="(\d+)"', records)] == [1, 2, 3] * 3
    assert "<title>checkpoint 2: 10 records in</title>" in records
    lag = re.search(r'id="chart-orders-lag">(.*?)</figure>', charts).group(1)
    # 1-3 each left the next claim's 10 records; 4 (claimed to 45) leaves 5 below the last stable offset 50.
    assert "latest: 5 records behind (checkpoint 4)" in lag
    assert [int(i) for i in re.findall(r'data-checkpoint="(\d+)"><title>', lag)] == [1, 2, 3, 4]
    css = (_page_module().STATIC / "checkpoints.css").read_text()
    for key in ("in", "out", "dead", "duration", "behind", "watermark"):
        assert f".s-{key}{{color:" in css  # every series key has its colour in the page's stylesheet


def test_a_stateful_pipeline_also_charts_its_watermarks_delay(specs_dir):
    overview = _gather(specs_dir, FakeS3(), PageQuery())
    rows = [_figures(_row(cid, False), state_keys=5, state_bytes=100, watermark=_at(cid - 2),
                     watermark_delay_s=120.0 + cid) for cid in (3, 2, 1)]
    overview.pipelines[0].checkpoints.rows.extend(rows)
    html = render_page(overview, Ctx(tz=AMSTERDAM))
    watermark = re.search(r'id="chart-orders-watermark">(.*?)</figure>', html).group(1)
    assert "Watermark behind the checkpoint&#39;s clock, checkpoints 1–3; latest: 2 min 3 s behind (checkpoint 3)" \
        in watermark
    assert overview.to_json()["pipelines"][0]["series"]["watermark_delay_s"] == [121.0, 122.0, 123.0]


def test_the_latest_comparison_is_shown_under_the_checkpoints(specs_dir):
    """`lockstep replay --compare` keeps its report in the store; the page says what it compared and found."""
    from dataclasses import replace

    from lockstep.ops.compare import Comparison
    from lockstep.rules.output_diff import OutputRecord, diff_checkpoint

    s3 = FakeS3()
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    seed(store, 3)
    html = render_page(_gather(specs_dir, s3, PageQuery(limit=20)), Ctx(tz=AMSTERDAM, params=PageParams()))
    assert 'class="meta comparison"' not in html  # none yet

    report = Comparison("orders", "/specs/orders-v2.yaml", "2025-01-01T00:30:00+00:00")
    for cid in (2, 3):
        record = OutputRecord(("orders", 0, cid), "sink", None, b'{"a": 1}')
        diff = diff_checkpoint(cid, [record], [replace(record, value=b'{"a": 2}')] if cid == 3 else [record])
        report.checkpoints.append(diff)
        report.total.add(diff, 5)
    report.not_compared[1] = "its input was deleted by retention"
    store.record_note(COMPARISON, report.to_json())
    assert list(store.checkpoint_ids()) == [1, 2, 3]  # kept beside the checkpoints, not as one

    overview = _gather(specs_dir, s3, PageQuery(limit=20))
    html = render_page(overview, Ctx(tz=AMSTERDAM, params=PageParams()))
    line = " ".join(re.search(r'<div class="meta comparison">(.*?)</div>', html, re.S).group(1).split())
    assert "2 completed checkpoints (2-3) computed again through <code>/specs/orders-v2.yaml</code>: the output " \
           "changes: 1 changed, 0 added, 0 removed (fields: value.a); 1 not compared." in line
    assert overview.to_json()["pipelines"][0]["last_comparison"]["rows"][0]["same"] is False


def test_the_latest_comparison_of_a_stateful_pipeline_says_whether_its_state_differs(specs_dir):
    """A comparison whose output is the same but whose state is not (a state function's field renamed) says so."""
    from lockstep.ops.compare import Comparison
    from lockstep.rules.output_diff import OutputRecord, diff_checkpoint
    from lockstep.rules.state_diff import diff_state

    s3 = FakeS3()
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    seed(store, 2)
    record = OutputRecord(("orders", 0, 1), "sink", None, b'{"a": 1}')

    def shown(renamed: bool) -> str:
        report = Comparison("orders", "/specs/orders-v2.yaml", "2025-01-01T00:30:00+00:00")
        for cid in (1, 2):
            diff = diff_checkpoint(cid, [record], [record])
            after = [{"__ls_key": f"c{cid}", ("cents" if renamed else "total_cents"): 5}]
            diff.state = diff_state([{"__ls_key": f"c{cid}", "total_cents": 5}, {"__ls_key": "x", "n": 1}],
                                    [*after, {"__ls_key": "x", "n": 1}])
            report.checkpoints.append(diff)
            report.total.add(diff, 5)
        store.record_note(COMPARISON, report.to_json())
        html = render_page(_gather(specs_dir, s3, PageQuery(limit=20)), Ctx(tz=AMSTERDAM, params=PageParams()))
        return " ".join(re.search(r'<div class="meta comparison">(.*?)</div>', html, re.S).group(1).split())

    assert shown(renamed=False).endswith(": the same output and state (4 keys).")
    assert shown(renamed=True).endswith(": the same output; the state of 2 of 4 keys differs.")


def test_a_checkpoint_with_an_iceberg_table_shows_its_rows_and_snapshot(specs_dir):
    from dataclasses import replace

    from lockstep.iceberg.staged_table import StagedTable, TableFile

    s3 = FakeS3()
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    seed(store, 2)
    staged = StagedTable("iceberg_default", "lake.orders", "lockstep-orders-3", 77,
                         (TableFile("s3://w/a.parquet", 6, ("orders:0",)), TableFile("s3://w/b.parquet", 4, ("orders:1",))))
    rng = (OffsetRange("orders", 0, 20, 30),)
    for cid, completed in ((3, True), (4, False)):
        store.claim(CheckpointClaim("orders", cid, f"scheduled__{_at(cid)}", _at(cid), rng, f"checkpoint:{cid - 1}"))
        txns = (PreparedTransaction(f"orders-{cid}-0", 1, 0, (), 10, 0, 0, 0),)
        store.write_prepared(PreparedCheckpoint("orders", cid, _at(cid), txns, 10, 10, 0, 1.0,
                                                iceberg=replace(staged, branch=f"lockstep-orders-{cid}")))
        if completed:
            store.mark_completed(CompletedCheckpoint("orders", cid, _at(cid), {"orders:0": 30}, ("orders-3-0",),
                                                     iceberg_snapshot=99))
    html = render_page(_gather(specs_dir, s3, PageQuery(limit=20)), Ctx(tz=AMSTERDAM, params=PageParams()))
    assert "iceberg lake.orders: 10 rows in 2 files, published as snapshot 99" in html
    assert "iceberg lake.orders: 10 rows in 2 files, staged on branch lockstep-orders-4" in html
    assert html.count("iceberg lake.orders") == 2, "checkpoints without a table show nothing"


def test_a_pipeline_with_a_table_shows_its_upkeeps_latest_figures(tmp_path):
    """`lockstep iceberg upkeep` (or the lockstep_iceberg_upkeep DAG) keeps each action's latest figures in the
    store; the page shows them in the order the actions run, and that the table was never looked after until then.
    A pipeline without a table shows no such line; an entry that does not read as one is left out."""
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump({**SPEC, "sink": {
        **SPEC["sink"], "iceberg": {"table": "lake.orders", "catalog_conn_id": "iceberg_default"}}}))
    s3 = FakeS3()
    store = CheckpointStore(s3, "lockstep", "unit/orders", "orders")
    seed(store, 2)

    def line() -> str:
        html = render_page(_gather(tmp_path, s3, PageQuery(limit=20)), Ctx(tz=AMSTERDAM, params=PageParams()))
        return " ".join(re.search(r'<div class="meta table-upkeep">(.*?)</div>', html, re.S).group(1).split())

    assert "Table upkeep of <code>lake.orders</code>: never run: <code>lockstep iceberg upkeep</code>" in line()
    entry = {"table": "lake.orders", "files_before": 80, "files_after": 9, "rows": 899_998, "before_checkpoint": 8,
             "snapshots_expired": 0, "orphans": 0, "orphan_bytes": 0, "dry_run": False, "by": "lockstep iceberg upkeep",
             "seconds": 3.6, "at": "2025-01-01T00:20:00+00:00",
             "line": "lake.orders: compacted the 899,998 rows of the checkpoints before 8; main reads 9 data files, was 80"}
    store.record_note(TABLE_UPKEEP, {
        "orphans": {**entry, "dry_run": True, "orphans": 3, "seconds": 0.4, "line": "lake.orders: would remove 3 "
                    "orphan files (1.2 MB); main reads 9 data files"},
        "compact": entry, "expire": {"at": "never"}})  # the expiry entry does not read as one
    shown = line()
    assert "never run" not in shown and "expire" not in shown
    assert shown.index("compact") < shown.index("orphans (dry run)")
    assert ("in 3.6 s, by lockstep iceberg upkeep: lake.orders: compacted the 899,998 rows of the checkpoints before "
            "8; main reads 9 data files, was 80") in shown
    assert "would remove 3 orphan files (1.2 MB)" in shown
    overview = _gather(tmp_path, s3, PageQuery(limit=20)).to_json()["pipelines"][0]
    assert [r["action"] for r in overview["table_upkeep"]["rows"]] == ["compact", "orphans"]

    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(SPEC))
    html = render_page(_gather(tmp_path, s3, PageQuery(limit=20)), Ctx(tz=AMSTERDAM, params=PageParams()))
    assert "table-upkeep" not in html, "no table, no upkeep line"
