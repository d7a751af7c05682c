"""Many generated pipelines in one Airflow (issue 28, "50 pipelines in one Airflow").

Four figures, taken around the scheduling-overhead measurement so that ``airflow standalone`` starts once:

- **DAG parse time**: ``dags/lockstep_pipelines.py`` parsed by Airflow's ``DagBag`` with the pipelines folder
  holding 1 spec, then all of them; each parse in a fresh Python process (as the dag-processor parses a file in
  a new process, Lockstep's modules imported again), Airflow itself imported before the clock starts; and the
  same parse as a task's process makes it, for one DAG (Airflow's parsing context set). Before Airflow starts,
  so that nothing else competes for the cores.
- **Scheduler loop time**: the scheduler's own ``Ran scheduling loop in %.2f ms`` (DEBUG, so the bench's
  Airflow gets ``[logging] namespace_levels`` for the scheduler's logger only), read from the platform's
  Airflow log: with 1 pipeline during the overhead runs, then with every generated pipeline unpaused on a
  one-minute cron for ``sample_s``. Their inputs are empty topics, so every DAG run is an empty checkpoint
  (plan, run, commit; no Spark): the load is Airflow's own.
- **S3 requests per plan**: one ``coordinator.plan(dry_run=True)`` per generated pipeline, its S3 API calls
  counted (``history.RequestCounter``), after the sample (the pipelines have their few real checkpoints).
- **The Checkpoints page at 10,000 checkpoints**: one extra (never scheduled) pipeline's store filled with
  ``page_checkpoints`` completed checkpoints (``history.fill``), another with one page's worth for contrast;
  the page and its JSON fetched through the api-server with the admin's token, newest page and a page deep in
  history, median of ``page_repeats`` after one uncounted load.
"""
from __future__ import annotations

import functools
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockstep.paths import project_root
from lockstep_bench import history, workloads

if TYPE_CHECKING:
    from lockstep.ops.airflow_client import AirflowClient
    from lockstep_dev.platform import Platform

#: Every generated pipeline's cron: the scheduler has them all due every minute.
SCHEDULE = "* * * * *"
#: The scheduler's line per loop (airflow/jobs/scheduler_job_runner.py, DEBUG).
LOOP_LINE = re.compile(r"Ran scheduling loop in ([0-9]+(?:\.[0-9]+)?) ms")
#: The api-server's line for a request that failed inside (with SQLite: mostly "database is locked").
API_ERROR = re.compile(r"^api-server\s*\|.*\[error\s*\] Error with id", re.MULTILINE)
#: DEBUG for the scheduler's logger alone (the rest of Airflow stays at INFO).
SCHEDULER_DEBUG = {"AIRFLOW__LOGGING__NAMESPACE_LEVELS": "airflow.jobs.scheduler_job_runner=DEBUG"}
#: The environment variables by which Airflow's task runner names the DAG and task a parse is for
#: (``get_parsing_context``).
PARSING_DAG_ID, PARSING_TASK_ID = "_AIRFLOW_PARSING_CONTEXT_DAG_ID", "_AIRFLOW_PARSING_CONTEXT_TASK_ID"
#: The dag-processor's default ``[core] dagbag_import_timeout``: a file that takes longer fails to import.
DAGBAG_IMPORT_TIMEOUT_S = 30.0
#: A page for 20 checkpoints (the page's default limit): the contrast of the same number of rows.
SMALL_HISTORY = 20
#: Where the api-server mounts the Checkpoints page (``lockstep_airflow.links.URL_PREFIX``, in plugins/).
PAGE_PREFIX = "/lockstep"

#: Run by ``python -c`` in a fresh process: Airflow imported first, then one DagBag over the file, timed.
_PARSE = """
import json, sys, time
from airflow.dag_processing.dagbag import DagBag
started = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1], safe_mode=False)
print(json.dumps({"seconds": time.perf_counter() - started, "dags": bag.size(),
                  "errors": {str(k): str(v)[-500:] for k, v in bag.import_errors.items()}}))
"""


@dataclass
class FleetSettings:
    pipelines: int = 50
    sample_s: float = 100.0
    page_checkpoints: int = 10_000
    parse_repeats: int = 3
    page_repeats: int = 5
    #: How long the paused pipelines' last runs get to finish before the page is timed.
    drain_s: float = 60.0
    #: Each generated pipeline's ``checkpoints.tasks``.
    tasks: str = "one"

    @classmethod
    def for_bench(cls, pipelines: int, quick: bool, tasks: str = "one") -> FleetSettings:
        if quick:
            return cls(pipelines=pipelines, sample_s=20.0, page_checkpoints=100, page_repeats=2, drain_s=20.0,
                       tasks=tasks)
        return cls(pipelines=pipelines, tasks=tasks)


def loop_stats(text: str) -> dict[str, Any]:
    """Median, p95 (nearest rank) and max of the scheduler loop times found in ``text``, and how many."""
    ms = [float(m.group(1)) for m in LOOP_LINE.finditer(text)]
    if not ms:
        return {"loops": 0}
    ordered = sorted(ms)
    p95 = ordered[max(0, -(-95 * len(ordered) // 100) - 1)]
    return {"loops": len(ms), "median_ms": round(statistics.median(ms), 2), "p95_ms": round(p95, 2),
            "max_ms": round(ordered[-1], 2), "mean_ms": round(statistics.fmean(ms), 2)}


def within_minute(runs: list[dict[str, Any]], since: datetime, until: datetime,
                  minute_s: float = 60.0) -> dict[str, Any]:
    """Of the DAG runs due (``run_after``) from ``since`` on whose outcome is known by ``until`` (they ended, or
    their minute is over), how many succeeded within ``minute_s`` of being due; and the seconds from due to end
    of those that ended (median, p95 nearest rank, max). A run still going inside its minute is left out."""
    due, took, within = 0, [], 0
    for r in runs:
        after = _when(r.get("run_after"))
        end = _when(r.get("end_date"))
        if after is None or after < since or (end is None and (until - after).total_seconds() < minute_s):
            continue
        due += 1
        if end is None:
            continue
        seconds = (end - after).total_seconds()
        took.append(seconds)
        within += r.get("state") == "success" and seconds <= minute_s
    ordered = sorted(took)
    return {"due": due, "within": within, "ended": len(took),
            "median_s": round(statistics.median(ordered), 1) if ordered else None,
            "p95_s": round(ordered[max(0, -(-95 * len(ordered) // 100) - 1)], 1) if ordered else None,
            "max_s": round(ordered[-1], 1) if ordered else None}


def _when(text: object) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if isinstance(text, str) and text else None


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4) if values else float("nan")


@dataclass
class Fleet:
    """The generated pipelines and what is measured with them; ``results`` is what the report reads."""

    platform: Platform
    work_dir: Path
    settings: FleetSettings
    log: Callable[[str], None]
    results: dict[str, Any] = field(default_factory=dict)
    specs: list[Path] = field(default_factory=list)
    page_specs: dict[int, Path] = field(default_factory=dict)
    _log_offset: int = 0

    @property
    def bootstrap(self) -> str:
        return str(self.platform.kafka.bootstrap)

    # ---- before Airflow ----------------------------------------------------------------------------
    def prepare(self) -> None:
        """Topics and specs of the generated pipelines (in a folder of their own until Airflow has done the
        overhead runs), the page's two filled stores, and the parse times."""
        s = self.settings
        tag = uuid.uuid4().hex[:4]
        folder = self.work_dir / "fleet-specs"
        topics = []
        for i in range(s.pipelines):
            name = f"bench-fleet-{tag}-{i:03d}"
            topics += [f"{name}-in", f"{name}-out"]
            self.specs.append(workloads.write_spec(folder, name, f"{name}-in", f"{name}-out", 1000,
                                                   schedule=SCHEDULE, tasks=s.tasks))
        page_topic = f"bench-page-{tag}-in"
        topics += [page_topic, f"{page_topic}-out"]
        workloads.create_topics(self.bootstrap, topics)
        started = time.monotonic()
        for count in (SMALL_HISTORY, s.page_checkpoints):
            spec = workloads.write_spec(self.work_dir / "page-specs", f"bench-page-{tag}-{count}", page_topic,
                                        f"{page_topic}-out", 1000)
            self.page_specs[count] = spec
            self._fill(spec, count, page_topic)
        self.results = {"pipelines": s.pipelines, "schedule": SCHEDULE, "sample_s": s.sample_s, "tasks": s.tasks,
                        "airflow_db": self.platform.state.airflow_db,
                        "page_fill_s": round(time.monotonic() - started, 1)}
        self.log(f"fleet: {s.pipelines} pipelines written; {s.page_checkpoints:,} + {SMALL_HISTORY} checkpoints "
                 f"filled for the page in {self.results['page_fill_s']:.0f} s")
        self.results["parse"] = self.parse_times()

    def _fill(self, spec_path: Path, count: int, topic: str) -> None:
        from lockstep.spec import load_spec
        from lockstep.steps.coordinator import Pipeline

        p = Pipeline.open(load_spec(spec_path))
        history.fill(*history.s3_store(p), 1, count, topic, _end_offsets(self.bootstrap, topic))

    def parse_times(self) -> dict[str, Any]:
        from lockstep.spec import load_spec

        one = self.work_dir / "parse-one"
        one.mkdir(parents=True, exist_ok=True)
        (one / self.specs[0].name).write_text(self.specs[0].read_text())
        points = []
        task_dag = load_spec(self.specs[0]).dag_id
        for folder, count in ((one, 1), (self.specs[0].parent, len(self.specs))):
            runs = [self._parse_once(folder) for _ in range(self.settings.parse_repeats)]
            errors: dict[str, Any] = next((r["errors"] for r in runs if r["errors"]), {})
            seconds = [r["seconds"] for r in runs]
            # A task's process parses the same file for its one DAG (Airflow's parsing context names it).
            tasks = [self._parse_once(folder, task_dag) for _ in range(self.settings.parse_repeats)]
            task_seconds = [r["seconds"] for r in tasks]
            point = {"specs": count, "dags": runs[-1]["dags"], "seconds": [round(x, 3) for x in seconds],
                     "median_s": _median(seconds), "per_dag_s": _median(seconds) / max(1, runs[-1]["dags"]),
                     "errors": errors, "task_dags": tasks[-1]["dags"],
                     "task_seconds": [round(x, 3) for x in task_seconds], "task_median_s": _median(task_seconds)}
            points.append(point)
            self.log(f"fleet: DagBag over {count} spec(s): {point['dags']} DAGs in {point['median_s']:.2f} s "
                     f"(median of {len(seconds)}), {point['per_dag_s'] * 1000:.0f} ms per DAG; a task's parse "
                     f"{point['task_dags']} DAG in {point['task_median_s']:.2f} s"
                     + (f"; import errors {errors}" if errors else ""))
        return {"timeout_s": DAGBAG_IMPORT_TIMEOUT_S, "points": points}

    def _parse_once(self, specs: Path, task_dag: str | None = None) -> dict[str, Any]:
        """One parse of the pipelines' file in a fresh process: the dag-processor's, or with ``task_dag`` the
        parse of a task's process of that DAG (Airflow's parsing context set, as the task runner sets it)."""
        home = self.work_dir / "parse-airflow-home"  # not the platform's: its standalone owns that one
        home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.platform.airflow.environment(self.platform.connection_env()),
               "AIRFLOW_HOME": str(home), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
               "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"), "LOCKSTEP_PIPELINES_DIR": str(specs),
               **({PARSING_DAG_ID: task_dag, PARSING_TASK_ID: "plan"} if task_dag else {})}
        if not task_dag:
            for name in (PARSING_DAG_ID, PARSING_TASK_ID):
                env.pop(name, None)
        dag_file = project_root() / "dags" / "lockstep_pipelines.py"
        done = subprocess.run([sys.executable, "-c", _PARSE, str(dag_file)], env=env, capture_output=True,
                              text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"DagBag parse failed ({done.returncode}): {done.stderr[-2000:]}")
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    # ---- with Airflow up -----------------------------------------------------------------------------
    def airflow_ready(self) -> None:
        """Airflow answers; its overhead runs (1 pipeline) are next: their scheduler loops start here."""
        self._log_offset = self._log_size()

    def with_airflow(self, client: AirflowClient) -> None:
        """After the overhead runs: the 1-pipeline loop sample, then every generated pipeline unpaused."""
        one = loop_stats(self._log_since(self._log_offset))
        self.results["loops_one"] = {**one, "during": "the scheduling-overhead runs of 1 pipeline"}
        self.log(f"fleet: scheduler loops with 1 pipeline: {one}")
        airflow_dir = Path(os.environ["LOCKSTEP_PIPELINES_DIR"])
        for spec in [*self.specs, *self.page_specs.values()]:
            (airflow_dir / spec.name).write_text(spec.read_text())
        from lockstep.spec import load_spec

        dag_ids = [load_spec(spec).dag_id for spec in self.specs]
        started = time.monotonic()
        for dag_id in [*dag_ids, *(load_spec(p).dag_id for p in self.page_specs.values())]:
            client.wait_for_dag(dag_id, timeout=300)
        self.log(f"fleet: {len(dag_ids)} DAGs parsed by the dag-processor after {time.monotonic() - started:.0f} s")
        try:
            self._sample(client, dag_ids)
        finally:
            set_paused(client, dag_ids, True)
        self._drain(client)
        self.results["page"] = self.page_times(client)
        self.results["plans"] = self.plan_requests()

    def _sample(self, client: AirflowClient, dag_ids: list[str]) -> None:
        since = datetime.now(UTC).isoformat()
        offset = self._log_size()
        started = time.monotonic()
        set_paused(client, dag_ids, False)
        self.log(f"fleet: {len(dag_ids)} pipelines unpaused; sampling the scheduler for {self.settings.sample_s:.0f} s")
        time.sleep(max(0.0, self.settings.sample_s - (time.monotonic() - started)))
        text = self._log_since(offset)
        stats = loop_stats(text)
        window = round(time.monotonic() - started, 1)
        load = os.getloadavg()
        # By state: Airflow's end_date filter also matches rows without an end date (nullable range).
        finished = {state: count_runs(client, f"/api/v2/dags/~/dagRuns?end_date_gte={quoted(since)}&state={state}")
                    for state in ("success", "failed")}
        self.results["loops_many"] = {**stats, "window_s": window, "dag_runs_finished": finished,
                                      "runs_open_at_end": open_runs(client),
                                      "api_server_errors": len(API_ERROR.findall(text)),
                                      "load_average": [round(x, 1) for x in load]}
        self.log(f"fleet: scheduler loops with {len(dag_ids)} pipelines: {self.results['loops_many']}")
        self.results["minute"] = within_minute([r for dag_id in dag_ids for r in client.dag_runs(dag_id)],
                                               datetime.fromisoformat(since), datetime.now(UTC))
        self.log(f"fleet: runs due in the sample: {self.results['minute']}")

    def _drain(self, client: AirflowClient) -> None:
        """Up to ``drain_s`` for the paused pipelines' last runs to end; what is still open is recorded."""
        started = time.monotonic()
        while True:
            still = open_runs(client)
            if not sum(still.values()) or time.monotonic() - started > self.settings.drain_s:
                break
            time.sleep(3)
        self.results["drain"] = {"seconds": round(time.monotonic() - started, 1), "runs_open_after": still}
        self.log(f"fleet: paused; after {self.results['drain']['seconds']:.0f} s still open: {still}")

    def page_times(self, client: AirflowClient) -> dict[str, Any]:
        """The Checkpoints page (HTML and JSON) of the filled pipelines, newest page and one deep in history."""
        from lockstep.spec import load_spec

        big = self.settings.page_checkpoints
        name = {count: load_spec(path).name for count, path in self.page_specs.items()}
        deep = big // 2
        urls = [("HTML, newest page", big, f"/?pipeline={name[big]}"),
                (f"HTML, before={deep:,}", big, f"/?pipeline={name[big]}&before={deep}"),
                ("JSON, newest page", big, f"/api/pipelines?pipeline={name[big]}"),
                (f"JSON, before={deep:,}", big, f"/api/pipelines?pipeline={name[big]}&before={deep}"),
                ("HTML, newest page", SMALL_HISTORY, f"/?pipeline={name[SMALL_HISTORY]}"),
                ("JSON, newest page", SMALL_HISTORY, f"/api/pipelines?pipeline={name[SMALL_HISTORY]}")]
        rows = []
        for label, count, path in urls:
            url = f"{self.platform.airflow.url}{PAGE_PREFIX}{path}"
            _get(url, client.token)  # not counted: the api-server's first view imports and connects
            times, size = [], 0
            for _ in range(self.settings.page_repeats):
                started = time.perf_counter()
                size = len(_get(url, client.token))
                times.append((time.perf_counter() - started) * 1000)
            row = {"page": label, "checkpoints": count, "path": f"{PAGE_PREFIX}{path}", "median_ms": _median(times),
                   "ms": [round(t, 1) for t in times], "bytes": size}
            rows.append(row)
            self.log(f"fleet: page {label} at {count:,} checkpoints: {row['median_ms']:.0f} ms, {size:,} bytes")
        return {"rows": rows, "deep_before": deep}

    def plan_requests(self) -> dict[str, Any]:
        from lockstep.spec import load_spec
        from lockstep.steps.coordinator import Pipeline, plan

        calls, keys, errors = [], [], []
        started = time.monotonic()
        for spec_path in self.specs:
            try:
                p = Pipeline.open(load_spec(spec_path))
                counter = history.RequestCounter(history.s3_store(p)[1])
                c, k = counter.count(functools.partial(plan, p, run_id="bench-fleet-plan", dry_run=True))
                calls.append(c)
                keys.append(k)
            except Exception as exc:  # noqa: BLE001 - one pipeline's failure is reported, not fatal
                errors.append(f"{spec_path.stem}: {exc}"[:300])
        doc = {"plans": len(calls), "total_calls": sum(calls), "per_plan": _median([float(c) for c in calls]),
               "min": min(calls, default=0), "max": max(calls, default=0), "keys_listed": sum(keys),
               "seconds": round(time.monotonic() - started, 2), "errors": errors,
               # How many plans made how many calls listing how many keys: "calls/keys" -> plans.
               "by_calls": {f"{c}/{k}": n for (c, k), n in sorted(Counter(zip(calls, keys)).items())}}
        self.log(f"fleet: {doc['plans']} dry-run plans: {doc['total_calls']} S3 calls ({doc['per_plan']} per plan), "
                 f"{doc['seconds']:.1f} s" + (f"; {len(errors)} failed: {errors[0]}" if errors else ""))
        return doc

    # ---- the platform's Airflow log ------------------------------------------------------------------
    def _log_size(self) -> int:
        return log_size(self.platform)

    def _log_since(self, offset: int) -> str:
        return log_since(self.platform, offset)


def log_size(platform: Platform) -> int:
    """The size of the platform's Airflow log so far: where `log_since` reads from."""
    path = platform.log_file("airflow")
    return path.stat().st_size if path.exists() else 0


def log_since(platform: Platform, offset: int) -> str:
    with open(platform.log_file("airflow"), "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def _get(url: str, token: str) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}", "Accept": "text/html"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        return bytes(resp.read())


def set_paused(client: AirflowClient, dag_ids: list[str], paused: bool, attempts: int = 6) -> None:
    """Each of ``dag_ids`` paused or unpaused, retried: under 50 active DAGs, standalone's SQLite answers a
    write with "database is locked" now and then (HTTP 500)."""
    from lockstep.ops.airflow_client import AirflowError

    for dag_id in dag_ids:
        for attempt in range(attempts):
            try:
                client._call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})
                break
            except AirflowError:
                if attempt == attempts - 1:
                    raise
                time.sleep(2 * (attempt + 1))


def quoted(text: str) -> str:
    import urllib.parse

    return urllib.parse.quote(text, safe="")


def open_runs(client: AirflowClient) -> dict[str, int]:
    return {state: count_runs(client, f"/api/v2/dags/~/dagRuns?state={state}") for state in ("queued", "running")}


def count_runs(client: AirflowClient, path: str) -> int:
    return int(client._call("GET", path + ("&" if "?" in path else "?") + "limit=1")["total_entries"])


def _end_offsets(bootstrap: str, topic: str, timeout_s: float = 60) -> dict[int, int]:
    """``workloads.end_offsets`` once the new topic has a leader (right after 100 topics are created, a
    partition can still answer "not leader")."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return workloads.end_offsets(bootstrap, topic)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
