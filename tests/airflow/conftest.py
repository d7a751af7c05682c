"""A real Airflow (``airflow standalone`` over this repo's dags/ and plugins/) for tests/airflow.

Started by the platform's own code on the session's Kafka + S3 (the ``platform`` fixture), so
what these tests exercise is what ``lockstep dev up --with airflow`` runs. The fixture stops
Airflow when the tests of this package are done.

Pipeline specs: Airflow reads them from ``airflow.pipelines_dir`` (``LOCKSTEP_PIPELINES_DIR`` is
set before Airflow starts), so a test drops its own spec file there with ``airflow.write_spec``.
Two connections point at a closed port, for failure paths: ``kafka_unreachable`` and
``aws_unreachable``.
"""
from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from ..support.pipelines import PipelineUnderTest

T = TypeVar("T")
USERNAME = "admin"


def pytest_collection_modifyitems(items):
    for item in items:
        if "/airflow/" in str(item.fspath):
            item.add_marker(pytest.mark.airflow)


def wait_for(predicate: Callable[[], T], what: str, timeout: float = 60.0, interval: float = 0.5) -> T:
    """Poll until ``predicate`` returns something truthy; on timeout, say what was awaited."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - reported if the deadline expires
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        time.sleep(interval)


@dataclass
class AirflowServer:
    """Handle on the session's Airflow: base url, admin credentials, REST helpers."""

    url: str
    username: str
    password: str
    home: Path
    log_file: Path
    pipelines_dir: Path
    _token: str | None = field(default=None, repr=False)
    #: The spec files the tests wrote, removed when their module is done (`_module_specs_removed`).
    written: list[Path] = field(default_factory=list, repr=False)

    def rest(self) -> Any:
        """Lockstep's own REST client (``lockstep.ops.airflow_client``), logged in as the admin."""
        from lockstep.ops.airflow_client import AirflowClient

        return AirflowClient(self.url, self.username, self.password)

    def token(self, refresh: bool = False) -> str:
        """A JWT for the admin user from ``POST /auth/token`` (valid 24 h; cached)."""
        if self._token is None or refresh:
            self._token = self.rest().token
        return self._token

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}"}

    def client(self, authenticated: bool = True, timeout: float = 60.0) -> httpx.Client:
        """An httpx client on the base url; with the admin's bearer token unless ``authenticated=False``.
        For tests that assert on raw responses (status codes, pages); API calls go through ``rest()``."""
        return httpx.Client(base_url=self.url, headers=self.headers() if authenticated else {}, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with self.client() as client:
            return client.request(method, path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", path, **kwargs)

    def write_spec(self, doc: dict[str, Any]) -> Path:
        """Drop a pipeline spec where Airflow (DAG files, the Checkpoints page) reads specs."""
        path = self.pipelines_dir / f"{doc['name']}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.written.append(path)
        return path

    def new_pipeline(self, bootstrap: str, kind: str, partitions: int = 2, replication: int = 1,
                     kafka_conn_id: str = "kafka_default", aws_conn_id: str = "aws_default",
                     master: str | None = None, spark: dict | None = None) -> Any:
        """A manual-only pipeline of fresh topics, its spec where Airflow reads specs from. Its
        checkpoints run in connect mode (the default) on the session's server, the
        spark_connect_default connection; ``master`` makes them spark-submits on that master;
        ``spark`` replaces the spec's spark section."""
        unique = uuid.uuid4().hex[:8]
        name = f"{kind}-{unique}"
        p = PipelineUnderTest.create(self.pipelines_dir, bootstrap, name, unique, partitions, replication)
        self.write_spec({
            "name": name,
            "source": {"topics": [p.source], "kafka_conn_id": kafka_conn_id},
            "transform": "lockstep_examples.orders:enrich",
            "sink": {"topic": p.sink, "dead_letter_topic": p.dead_letters, "kafka_conn_id": kafka_conn_id},
            "checkpoints": {"store": f"s3://lockstep/airflow-tests/{unique}", "aws_conn_id": aws_conn_id,
                            "schedule": None},
            "transactions": {"id_prefix": p.prefix},
            "spark": spark if spark is not None else {"master": master} if master else {},
        })
        return p

    def client_for(self, *dag_ids: str) -> Any:
        """A REST client, once these DAGs are parsed, with them unpaused."""
        client = self.rest()
        for dag_id in dag_ids:
            client.wait_for_dag(dag_id)
            client.unpause(dag_id)
        return client

    def client_for_watched(self, request: pytest.FixtureRequest, dag_id: str) -> Any:
        """``client_for`` a lag-triggered DAG, paused again when the test is done. Airflow keeps an asset's
        watcher running while a DAG scheduled on it is unpaused (`_find_active_assets` in its dag-processor),
        so a finished test's trigger would go on reading S3 and Kafka every poll_interval in the triggerer
        for the rest of the session's Airflow tests."""
        client = self.client_for(dag_id)
        request.addfinalizer(lambda: client.pause(dag_id))
        return client

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0) -> None:
        """Wait until the dag-processor has parsed ``dag_id`` (refresh interval is 10 s)."""
        self.rest().wait_for_dag(dag_id, timeout)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no log: {exc})"


#: Connection ids under which Airflow (and this test process) reach the session's cluster topology.
CLUSTER_KAFKA, CLUSTER_AWS = "kafka_cluster", "aws_cluster"


def cluster_connections(cluster) -> dict[str, str]:
    conns = cluster.connection_env()
    return {f"AIRFLOW_CONN_{CLUSTER_KAFKA.upper()}": conns["AIRFLOW_CONN_KAFKA_DEFAULT"],
            f"AIRFLOW_CONN_{CLUSTER_AWS.upper()}": conns["AIRFLOW_CONN_AWS_DEFAULT"]}


def add_connections(server: AirflowServer, env: dict[str, str]) -> None:
    """Create connections in a running Airflow through its REST API, as a user adds them in the UI
    (``env``: ``AIRFLOW_CONN_<ID>`` names and their JSON, as `cluster_connections` gives them)."""
    for name, raw in env.items():
        conn = json.loads(raw)
        body = {"connection_id": name[len("AIRFLOW_CONN_"):].lower(), "conn_type": conn["conn_type"],
                **{k: conn[k] for k in ("host", "port", "login", "password") if conn.get(k) is not None},
                **({"extra": json.dumps(conn["extra"])} if conn.get("extra") else {})}
        response = server.post("/api/v2/connections", json=body)
        assert response.status_code in (200, 201), response.text


class StatsdListener:
    """A UDP socket the Airflow tasks send their StatsD gauges to (``LOCKSTEP_STATSD``): the
    receiving end of the protocol, keeping every line it got."""

    def __init__(self) -> None:
        import socket
        import threading

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="statsd-listener", daemon=True)
        self._thread.start()

    def _listen(self) -> None:

        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            self.lines.extend(data.decode(errors="replace").splitlines())

    def gauges(self, prefix: str) -> dict[str, float]:
        """The latest value of each gauge whose name starts with ``prefix``."""
        found: dict[str, float] = {}
        for line in list(self.lines):
            name, _, rest = line.partition(":")
            if name.startswith(prefix) and rest.endswith("|g"):
                found[name[len(prefix):]] = float(rest[:-2])
        return found

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(timeout=5)


@pytest.fixture(scope="package")
def statsd() -> Iterator[StatsdListener]:
    listener = StatsdListener()
    try:
        yield listener
    finally:
        listener.close()


#: The session's Airflow while it runs (the ``airflow`` fixture), for `_module_specs_removed`.
_SERVERS: list[AirflowServer] = []


@pytest.fixture(scope="module", autouse=True)
def _module_specs_removed() -> Iterator[None]:
    """The pipeline specs a module's tests wrote are removed when the module is done (after its own
    fixtures: autouse fixtures are set up first). Airflow's dag-processor parses the pipelines' file every
    10 s and reads every pipeline's store for its trigger form, and the Checkpoints page reads every
    store: kept for the session, the finished modules' pipelines (14 by the last module) made each parse
    and page cost more as the tests went on."""
    yield
    for server in _SERVERS:
        for path in server.written:
            path.unlink(missing_ok=True)
        server.written.clear()


@pytest.fixture(scope="package")
def airflow(platform, statsd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowServer]:
    """Airflow over the single-node platform's connections. The cluster topology is not started for
    it: the test that runs a DAG there adds ``kafka_cluster`` / ``aws_cluster`` itself."""
    from lockstep.paths import PIPELINES_DIR_ENV
    from lockstep_dev import procs

    pipelines = tmp_path_factory.mktemp("pipelines")
    dead = f"127.0.0.1:{procs.free_port()}"
    env = {
        PIPELINES_DIR_ENV: str(pipelines),
        "LOCKSTEP_STATSD": statsd.address,
        "AIRFLOW_CONN_KAFKA_UNREACHABLE": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": dead}}),
        "AIRFLOW_CONN_AWS_UNREACHABLE": json.dumps({
            "conn_type": "aws", "login": "x", "password": "x",
            "extra": {"region_name": "us-east-1", "endpoint_url": f"http://{dead}"},
        }),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the platform passes os.environ through to Airflow
    try:
        platform._up_airflow(sys.stdout)
        config = platform.airflow
        password = wait_for(config.admin_password, f"the admin password in {config.home}", 60)
        server = AirflowServer(url=config.url, username=USERNAME, password=password, home=config.home,
                               log_file=platform.log_file("airflow"), pipelines_dir=pipelines)
        wait_for(server.token, f"a token from {config.url}/auth/token", 60)
        _SERVERS.append(server)
        yield server
    finally:
        _SERVERS.clear()
        # Airflow's scheduler and dag-processor would keep a core busy through the rest of
        # the session's tests; the Kafka and S3 it used stay up for them. Its home is thrown away:
        # SIGKILL, no graceful shutdown to wait for.
        platform.stop("airflow", kill=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
