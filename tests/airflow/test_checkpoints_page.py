"""The Checkpoints plugin page, served by a real ``airflow standalone`` started by the platform code.

Data is seeded directly: a topic with records and committed group offsets on the session's Kafka,
checkpoints (completed, aborted, claimed, then four empty completed ones) and a savepoint in the
session's S3 store, written with the same store the coordinator uses. Checkpoint 1 is owned by an
Airflow-style run id; that DAG run is created (on the paused DAG, so it never runs) for the links
into the Airflow UI. A second pipeline points at unreachable Kafka and S3 to check
that its section shows the errors while the page still renders. The browser test logs in through
Airflow's real login form in headless Chromium and keeps a screenshot under artifacts/.
"""
from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CompletedCheckpoint,
    PreparedCheckpoint,
    PreparedTransaction,
)
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.paths import project_root

from ..support.topics import create_topics
from .browser import Browser, chromium_binary

PAGE = "/lockstep/"
API = "/lockstep/api/pipelines"
SAVEPOINT = "before-upgrade"
ABORT_REASON = "transaction {prefix}-2-0 timed out after 900000 ms"
RUN_ID = "manual__2025-01-01T00:00:00+00:00"
EMPTY_IDS = (4, 5, 6, 7)


@dataclass(frozen=True)
class Seeded:
    name: str
    broken: str
    topic: str
    group: str
    dag_id: str


def _ranges(topic: str, p0: tuple[int, int], p1: tuple[int, int]) -> tuple[OffsetRange, ...]:
    return OffsetRange(topic, 0, *p0), OffsetRange(topic, 1, *p1)


def _prepared(name: str, checkpoint_id: int, out_topic: str, records_in: int, dead: int, tasks: int
              ) -> PreparedCheckpoint:
    txns = tuple(PreparedTransaction(transactional_id=f"{name}-{checkpoint_id}-{i}", producer_id=4000 + i, epoch=0,
                                     partitions=(TopicPartition(out_topic, i),), records=records_in // tasks,
                                     dead_letters=0, task_index=i, opened_at_ms=1_735_689_600_000)
                 for i in range(tasks))
    return PreparedCheckpoint(pipeline=name, checkpoint_id=checkpoint_id, prepared_at="2025-01-01T00:01:00+00:00",
                              transactions=txns, records_in=records_in, records_out=records_in - dead,
                              records_dead_lettered=dead, spark_seconds=12.5)


def _seed_kafka(bootstrap: str, topic: str, group: str) -> None:
    from confluent_kafka import Producer

    from lockstep.connections import kafka_config
    from lockstep.kafka import broker_offsets

    create_topics(bootstrap, {topic: 2})
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in ((0, 30), (1, 15)):
        for i in range(count):
            producer.produce(topic, f"record {i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    broker_offsets.publish_offsets(kafka_config("kafka_default"), group,
                           {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 10})


def _seed_store(spec, topic: str) -> None:
    from lockstep.steps.client_factory import checkpoint_store

    store = checkpoint_store(spec)
    name, out = spec.name, spec.sink.topic
    first = _ranges(topic, (0, 10), (0, 10))
    store.claim(CheckpointClaim(name, 1, RUN_ID, "2025-01-01T00:00:00+00:00", first, "auto.offset.reset:earliest"))
    store.write_prepared(_prepared(name, 1, out, 20, 2, 2))
    store.mark_completed(CompletedCheckpoint(name, 1, "2025-01-01T00:02:05+00:00",
                                             {r.tp.key: r.end for r in first}, (f"{name}-1-0", f"{name}-1-1")))
    second = _ranges(topic, (10, 20), (10, 15))
    store.claim(CheckpointClaim(name, 2, "scheduled__2", "2025-01-01T00:10:00+00:00", second, "checkpoint:1"))
    store.write_prepared(_prepared(name, 2, out, 15, 0, 1))
    store.mark_aborted(AbortedCheckpoint(name, 2, "2025-01-01T00:25:00+00:00", ABORT_REASON.format(prefix=name),
                                         "the next run replays partitions 0-1 from checkpoint 1"))
    store.claim(CheckpointClaim(name, 3, "scheduled__3", "2025-01-01T00:30:00+00:00", second, "checkpoint:1"))
    store.create_savepoint(SAVEPOINT, 1, "2025-01-01T00:05:00+00:00")
    idle = _ranges(topic, (20, 20), (15, 15))  # an idle source: completed checkpoints with nothing in them
    for cid in EMPTY_IDS:
        store.claim(CheckpointClaim(name, cid, f"scheduled__{cid}", f"2025-01-01T00:{30 + cid}:00+00:00", idle,
                                    f"checkpoint:{cid - 1}"))
        store.write_prepared(_prepared(name, cid, out, 0, 0, 0))
        store.mark_completed(CompletedCheckpoint(name, cid, f"2025-01-01T00:{30 + cid}:01+00:00",
                                                 {r.tp.key: r.end for r in idle}, ()))


def _spec(name: str, topic: str, kafka: str = "kafka_default", aws: str = "aws_default") -> dict:
    return {
        "name": name,
        "description": "Seeded by the Checkpoints page tests.",
        "source": {"topics": [topic], "kafka_conn_id": kafka},
        "transform": "lockstep_examples.orders:enrich",
        "sink": {"topic": f"{topic}-out", "dead_letter_topic": f"{topic}-dlq", "kafka_conn_id": "kafka_default"},
        "checkpoints": {"store": "s3://lockstep/page-tests", "aws_conn_id": aws, "schedule": None},
    }


@pytest.fixture(scope="module")
def seeded(airflow, platform) -> Seeded:
    from lockstep.spec import load_spec

    unique = uuid.uuid4().hex[:8]
    name, broken, topic = f"ui-{unique}", f"uidown-{unique}", f"ui-in-{unique}"
    path = airflow.write_spec(_spec(name, topic))
    spec = load_spec(path)
    _seed_kafka(platform.kafka.bootstrap, topic, spec.source.consumer_group)
    _seed_store(spec, topic)
    broken_path = airflow.write_spec(_spec(broken, f"uidown-in-{unique}", "kafka_unreachable", "aws_unreachable"))
    yield Seeded(name, broken, topic, spec.source.consumer_group, spec.dag_id)
    for file in (path, broken_path):  # the folder is shared with other Airflow tests of the session
        file.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def seeded_run(airflow, seeded) -> str:
    """The DAG run that owns checkpoint 1, created on the paused DAG (queued, never executed)."""
    airflow.wait_for_dag(seeded.dag_id)
    resp = airflow.patch(f"/api/v2/dags/{seeded.dag_id}", json={"is_paused": True})
    assert resp.status_code == 200, resp.text
    resp = airflow.post(f"/api/v2/dags/{seeded.dag_id}/dagRuns", json={"dag_run_id": RUN_ID, "logical_date": None})
    assert resp.status_code in (200, 409), resp.text
    return RUN_ID


def _section(html: str, name: str) -> str:
    match = re.search(rf'<section class="pipeline" id="pipeline-{re.escape(name)}">(.*?)</section>', html, re.S)
    assert match, f"no section for pipeline {name} in the page"
    return match.group(1)


def _lag_row(partition: str, committed: int, in_flight: int, unread: int, stable: int) -> str:
    return (f'<tr><td><code>{partition}</code></td><td class="n">{committed}</td><td class="n">{in_flight}</td>'
            f'<td class="n">{unread}</td><td class="n">{stable}</td><td class="t">'
            + ('<time datetime="' if unread else "–</td></tr>"))


# ---- registration and auth ----------------------------------------------------------------------------
def test_plugin_is_listed_by_airflow(airflow):
    resp = airflow.get("/api/v2/plugins")
    assert resp.status_code == 200, resp.text
    plugin = next((p for p in resp.json()["plugins"] if p["name"] == "lockstep"), None)
    assert plugin is not None, f"lockstep plugin not loaded; Airflow log:\n{airflow.log_tail()}"
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/lockstep"]
    view = next(v for v in plugin["external_views"] if v["name"] == "Checkpoints")
    assert view["href"] == PAGE and view["url_route"] == "lockstep-checkpoints" and view["destination"] == "nav"
    tab = next(v for v in plugin["external_views"] if v["name"] == "Checkpoint")
    assert (tab["href"], tab["destination"], tab["url_route"]) == (
        "/lockstep/runs/{DAG_ID}/{RUN_ID}", "dag_run", "lockstep-run-checkpoint")


@pytest.mark.parametrize("path", [PAGE, API, "/lockstep/runs/d/r"])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-a-jwt"}, {"Cookie": "_token=forged"}],
                         ids=["anonymous", "bad-bearer", "bad-cookie"])
def test_unauthenticated_requests_are_refused(airflow, seeded, path, headers):
    resp = httpx.get(f"{airflow.url}{path}", headers=headers, timeout=60)
    assert resp.status_code in (401, 403), resp.text
    assert seeded.name not in resp.text and "ui-in-" not in resp.text


def test_browser_without_session_gets_a_sign_in_link(airflow, seeded):
    resp = httpx.get(f"{airflow.url}{PAGE}", headers={"Accept": "text/html"}, timeout=60)
    assert resp.status_code == 401
    assert 'href="/auth/login?next=/lockstep/"' in resp.text and seeded.name not in resp.text


def test_ui_session_cookie_is_accepted(airflow, seeded):
    """The UI renders the page in an iframe, authenticated by the ``_token`` cookie."""
    resp = httpx.get(f"{airflow.url}{PAGE}", cookies={"_token": airflow.token()}, timeout=60)
    assert resp.status_code == 200 and seeded.name in resp.text


# ---- content -------------------------------------------------------------------------------------------
def test_page_lists_checkpoints_savepoints_and_lag(airflow, seeded):
    resp = airflow.get(PAGE)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/html")
    section = _section(resp.text, seeded.name)
    for status in ("completed", "aborted", "claimed"):
        assert f'<span class="badge {status}">{status}</span>' in section
    for checkpoint_id in (1, 2, 3):
        assert f'<tr id="checkpoint-{checkpoint_id}"><td class="n">{checkpoint_id}</td>' in section
    assert "Legend" in resp.text
    assert f"<code>{seeded.topic}:0[0,10)</code>" in section and f"<code>{seeded.topic}:1[10,15)</code>" in section
    assert ABORT_REASON.format(prefix=seeded.name) in section
    assert "2 min 5 s" in section and "15 min 0 s" in section  # claimed -> completed / aborted
    assert '<time datetime="2025-01-01T00:00:00+00:00" title="2025-01-01T00:00:00+00:00">2025-01-01 00:00 UTC' \
        in section  # Airflow's default_timezone (utc here), named
    assert "checkpoints 4–7: 4 empty, completed" in section and "4 empty folded" in section
    assert f'href="/dags/{seeded.dag_id}/runs/{quote(RUN_ID, safe="")}" target="_top" data-airflow' in section
    assert "Last completed checkpoint: <a " in section and ">7</a>" in section
    assert '<meta http-equiv="refresh" content="30">' in resp.text and resp.headers["cache-control"] == "no-store"
    assert f"<td>{SAVEPOINT}</td>" in section
    # Lag counts from the latest completed checkpoint (7: ends 20 and 15), not from the consumer
    # group's stale offsets (10 and 10, seeded by hand).
    assert _lag_row(f"{seeded.topic}:0", 20, 0, 10, 30) in section
    assert _lag_row(f"{seeded.topic}:1", 15, 0, 0, 15) in section
    assert "10 records not committed, 0 of them in flight" in section
    assert '<div class="error">' not in section


def test_json_api_returns_the_same_data(airflow, seeded):
    resp = airflow.get(API)
    assert resp.status_code == 200, resp.text
    pipelines = {p["name"]: p for p in resp.json()["pipelines"]}
    p = pipelines[seeded.name]
    assert p["dag_id"] == "lockstep_" + seeded.name.replace("-", "_")
    assert p["consumer_group"] == seeded.group and p["total_lag"] == 10 and p["in_flight"] == 0
    assert [(r["partition"], r["committed"], r["in_flight"], r["unread"], r["last_stable"], r["not_committed"])
            for r in p["lag"]["rows"]] == [(f"{seeded.topic}:0", 20, 0, 10, 30, 10), (f"{seeded.topic}:1", 15, 0, 0, 15, 0)]
    rows = {r["checkpoint_id"]: r for r in p["checkpoints"]["rows"]}
    assert [r["checkpoint_id"] for r in p["checkpoints"]["rows"]] == [7, 6, 5, 4, 3, 2, 1]  # newest first
    assert [r["empty"] for r in p["checkpoints"]["rows"]] == [True] * 4 + [False] * 3
    assert (p["checkpoints"]["oldest"], p["checkpoints"]["newest"], p["checkpoints"]["older_before"]) == (1, 7, None)
    assert p["last_completed"]["rows"][0]["checkpoint_id"] == 7 and p["last_completed"]["rows"][0]["age_s"] > 0
    lag0 = p["lag"]["rows"][0]
    assert lag0["oldest_unread_at"] and lag0["oldest_unread_age_s"] >= 0  # the record at offset 20
    assert (rows[1]["status"], rows[1]["records_in"], rows[1]["records_out"], rows[1]["records_dead_lettered"],
            rows[1]["transactions"], rows[1]["duration_s"]) == ("completed", 20, 18, 2, 2, 125.0)
    assert rows[2]["status"] == "aborted" and rows[2]["abort_reason"] == ABORT_REASON.format(prefix=seeded.name)
    assert rows[3]["status"] == "claimed" and rows[3]["records_in"] is None and rows[3]["duration_s"] is None
    # The charts' figures, oldest first: 3 is claimed (no counts, no duration); 2 aborted has no lag figure;
    # 1 left 15 records to checkpoint 2's claim; 7, the newest, leaves the 10 unread records of the lag.
    series = p["series"]
    assert series["checkpoint_ids"] == [1, 2, 3, 4, 5, 6, 7]
    assert series["records_in"] == [20, 15, None, 0, 0, 0, 0] and series["records_dead_lettered"] == [2, 0, None, 0, 0, 0, 0]
    assert series["duration_s"] == [125.0, 900.0, None, 1.0, 1.0, 1.0, 1.0]
    assert series["records_behind"] == [15, None, 0, 0, 0, 0, 10] and series["watermark_delay_s"] is None
    assert p["savepoints"] == {"rows": [{"name": SAVEPOINT, "checkpoint_id": 1,
                                         "created_at": "2025-01-01T00:05:00+00:00"}], "error": None}
    assert resp.json()["spec_errors"] == []


def test_query_selects_pipeline_highlights_pages_and_pauses(airflow, seeded):
    html = airflow.get(PAGE, params={"pipeline": seeded.name, "checkpoint": 5, "limit": 3, "refresh": 0}).text
    assert f'id="pipeline-{seeded.broken}"' not in html  # only the asked pipeline
    section = _section(html, seeded.name)
    assert '<tr id="checkpoint-5" class="highlight">' in section and 'id="checkpoint-1"' not in section
    assert "older →" in section and "← newer" in section
    assert "http-equiv" not in html and "auto-refresh paused" in html
    shown = _section(airflow.get(PAGE, params={"pipeline": seeded.name, "empty": "show"}).text, seeded.name)
    assert "empty, completed" not in shown and '<tr id="checkpoint-6">' in shown
    older = _section(airflow.get(PAGE, params={"pipeline": seeded.name, "before": 3}).text, seeded.name)
    assert '<tr id="checkpoint-2">' in older and 'id="checkpoint-3"' not in older


def test_run_view_shows_the_checkpoint_its_run_claimed(airflow, seeded):
    resp = airflow.get(f"/lockstep/runs/{seeded.dag_id}/{quote(RUN_ID, safe='')}")
    assert resp.status_code == 200, resp.text
    assert f"Checkpoint of run {RUN_ID}" in resp.text and '<tr id="checkpoint-1">' in resp.text
    assert (f"/plugin/lockstep-checkpoints/lockstep/?pipeline={seeded.name}&amp;checkpoint=1#checkpoint-1"
            in resp.text)
    missing = airflow.get(f"/lockstep/runs/{seeded.dag_id}/manual__never").text
    assert "No checkpoint of pipeline" in missing and "newest 7 checkpoint(s)" in missing
    assert "is not a Lockstep pipeline" in airflow.get("/lockstep/runs/some_other_dag/manual__x").text


def test_unreachable_kafka_and_s3_show_in_their_pipeline_only(airflow, seeded):
    started = time.monotonic()
    resp = airflow.get(API)
    elapsed = time.monotonic() - started
    assert resp.status_code == 200, resp.text
    pipelines = {p["name"]: p for p in resp.json()["pipelines"]}
    down = pipelines[seeded.broken]
    assert "did not answer" in down["lag"]["error"] and down["lag"]["rows"] == []
    assert down["checkpoints"]["error"] and down["savepoints"]["error"]
    assert pipelines[seeded.name]["checkpoints"]["error"] is None
    assert elapsed < 45, f"the page took {elapsed:.0f} s with one pipeline unreachable"

    html = airflow.get(PAGE).text
    assert html.count('<div class="error">') >= 3  # lag, checkpoints, savepoints of the broken pipeline
    assert '<div class="error">' in _section(html, seeded.broken)
    assert '<div class="error">' not in _section(html, seeded.name)


# ---- in a real browser ---------------------------------------------------------------------------------
@pytest.fixture
def browser(tmp_path: Path):
    if chromium_binary() is None:
        pytest.fail("Chromium is missing: run scripts/install-chromium.sh (make wires it in)")
    with Browser(tmp_path / "profile", tmp_path / "chromium.log") as b:
        yield b


def _login(browser: Browser, airflow, next_path: str = PAGE) -> None:
    """Log in the way a user does: Airflow's simple auth manager form, which sets the _token cookie."""
    browser.navigate(f"{airflow.url}/auth/login?next={next_path}")
    browser.type_into("input[name=username]", airflow.username)
    browser.type_into("input[name=password]", airflow.password)
    browser.evaluate("document.querySelector('button[type=submit]').click()")
    browser.wait_for(f"location.pathname === {next_path!r} && document.readyState === 'complete'",
                     "the login form to redirect to the Checkpoints page")


#: The document of the UI's iframe showing one of this plugin's pages (same origin, so readable).
FRAME = ("(Array.from(document.querySelectorAll('iframe')).map(f => { try { return f.contentDocument; } "
         "catch (e) { return null; } }).find(d => d && d.body && d.body.innerText.includes('Lockstep') "
         "|| d && d.body && d.body.innerText.includes('Checkpoint of run')))")


#: Checkpoint 1's link to the DAG run that claimed it.
RUN_LINK = '#checkpoint-1 a[data-airflow][title^="DAG run"]'


#: The seeded pipeline's charts as the browser lays them out: size, slots, visible points, label, colour.
CHARTS = """Array.from(document.getElementById('pipeline-NAME').querySelectorAll('figure.chart')).map(f => {
  const svg = f.querySelector('svg'), box = svg.getBoundingClientRect();
  const visible = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  return {id: f.id, width: box.width, height: box.height, label: svg.getAttribute('aria-label'),
          title: svg.querySelector('title').textContent.split(',')[0],
          slots: Array.from(svg.querySelectorAll('line.slot')).map(l => Number(l.dataset.checkpoint)),
          points: Array.from(svg.querySelectorAll('circle')).filter(visible).map(c => Number(c.dataset.checkpoint)),
          stroke: getComputedStyle(svg.querySelector('g.series path')).stroke};
})"""


def test_page_in_headless_chromium(airflow, seeded, browser):
    artifacts = project_root() / "artifacts"

    browser.navigate(f"{airflow.url}{PAGE}")
    anonymous = browser.text()
    assert "Sign in" in anonymous and seeded.name not in anonymous and "Legend" not in anonymous

    _login(browser, airflow)
    text = browser.text()
    for expected in (seeded.name, "Legend", "completed", "aborted", "claimed", SAVEPOINT,
                     ABORT_REASON.format(prefix=seeded.name), f"{seeded.topic}:0", "10 records not committed",
                     "2 min 5 s", "checkpoints 4–7: 4 empty, completed", "refreshes every 30 s",
                     "2025-01-01 00:00 UTC"):
        assert expected in text, f"{expected!r} not shown; page text:\n{text[:3000]}"
    assert "did not answer" in text  # the unreachable pipeline's section
    charts = browser.evaluate(CHARTS.replace("NAME", seeded.name))
    assert [c["id"] for c in charts] == [f"chart-{seeded.name}-{k}" for k in ("records", "duration", "lag")], charts
    for c in charts:
        assert c["width"] > 200 and c["height"] > 60, c  # laid out and visible, not collapsed
        assert c["slots"] == [1, 2, 3, 4, 5, 6, 7], c  # one slot per checkpoint shown, oldest first
        assert c["label"].startswith(c["title"]) and "checkpoints 1–7; latest: " in c["label"], c
    # A point per figure: checkpoint 3 (claimed) has no counts or duration, aborted 2 no lag figure.
    assert [c["points"] for c in charts] == [[1, 2, 4, 5, 6, 7] * 3, [1, 2, 4, 5, 6, 7], [1, 3, 4, 5, 6, 7]], charts
    assert charts[0]["stroke"] == "rgb(9, 105, 218)"  # the series colour from checkpoints.css
    assert "latest: 10 records behind (checkpoint 7)" in charts[2]["label"]
    shot = browser.screenshot(artifacts / "checkpoints-page.png")
    assert shot.stat().st_size > 10_000
    browser.screenshot(artifacts / "page-legend.png")

    # Inside the Airflow UI: the nav entry renders the page in an iframe at /plugin/<url_route>.
    browser.navigate(f"{airflow.url}/plugin/lockstep-checkpoints")
    browser.wait_for(
        "Array.from(document.querySelectorAll('iframe')).some(f => f.contentDocument && "
        f"f.contentDocument.body && f.contentDocument.body.innerText.includes({seeded.name!r}))",
        "the Checkpoints page inside the Airflow UI's iframe", timeout=60)
    browser.wait_for("document.body.innerText.includes('Checkpoints')", "the nav entry 'Checkpoints'")
    browser.wait_for(f"{FRAME}.querySelectorAll('figure.chart svg circle').length > 0",
                     "the charts drawn inside the UI's iframe")
    browser.screenshot(artifacts / "checkpoints-in-airflow-ui.png")


def test_run_links_work_inside_the_airflow_ui_and_on_the_page_alone(airflow, seeded, seeded_run, browser):
    artifacts = project_root() / "artifacts"
    run_path = f"/dags/{seeded.dag_id}/runs/{RUN_ID}"
    _login(browser, airflow)

    # On its own (no frame), the links are plain target=_top links, as with JavaScript off.
    browser.navigate(f"{airflow.url}{PAGE}?pipeline={seeded.name}")
    browser.screenshot(artifacts / "page-collapsed.png")
    browser.evaluate(f"document.querySelector({RUN_LINK!r}).click()")
    browser.wait_for(f"decodeURIComponent(location.pathname) === {run_path!r}", "the DAG run page (page alone)")

    # Inside the UI's sandboxed frame, opened the way task extra links and savepoints link to a checkpoint.
    browser.navigate(f"{airflow.url}/plugin/lockstep-checkpoints{PAGE}?pipeline={seeded.name}&checkpoint=1"
                     "#checkpoint-1")
    browser.wait_for(f"!!({FRAME} && {FRAME}.querySelector('tr.highlight#checkpoint-1'))",
                     "checkpoint 1 highlighted in the UI's iframe", timeout=60)
    browser.evaluate(f"{FRAME}.querySelector({RUN_LINK!r}).click()")
    browser.wait_for(f"decodeURIComponent(location.pathname) === {run_path!r}",
                     "the top window to route to the DAG run")
    browser.wait_for(f"document.body.innerText.includes({RUN_ID!r})", "the UI to render the DAG run", timeout=60)
    browser.screenshot(artifacts / "page-run-link.png")

    # The run's "Checkpoint" tab (dag_run external view) shows the checkpoint that run claimed.
    browser.navigate(f"{airflow.url}/dags/{seeded.dag_id}/runs/{quote(RUN_ID, safe='')}/plugin/lockstep-run-checkpoint")
    browser.wait_for(f"!!({FRAME} && {FRAME}.querySelector('tr#checkpoint-1'))",
                     "the run's checkpoint in the Checkpoint tab", timeout=60)
    assert "Checkpoint" in browser.text()  # the tab
    browser.screenshot(artifacts / "page-run-tab.png")


#: The stylesheet applied to a document: its pipeline sections have the rounded border of checkpoints.css.
STYLED = ("(d => !!(d && d.querySelector('section.pipeline') && "
          "d.defaultView.getComputedStyle(d.querySelector('section.pipeline')).borderTopLeftRadius === '8px'))")


def test_stylesheet_applies_on_the_page_alone_and_inside_the_airflow_ui(airflow, seeded, browser):
    """The CSS is a file the page links (``/lockstep/static/``), no longer inline: it must load in both places.
    (The script is a file too; the run-link test above shows it routing inside the frame.)"""
    _login(browser, airflow)
    browser.navigate(f"{airflow.url}{PAGE}?pipeline={seeded.name}")
    browser.wait_for(f"{STYLED}(document)", "the page styled on its own")
    browser.navigate(f"{airflow.url}/plugin/lockstep-checkpoints{PAGE}?pipeline={seeded.name}")
    browser.wait_for(f"{STYLED}({FRAME})", "the page styled inside the UI's iframe", timeout=60)
