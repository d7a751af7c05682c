"""Session fixtures: the real local platform, started by the same code as
``lockstep dev up`` but in an isolated folder on free ports, and torn down after."""
from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import pytest

# Airflow puts the plugins folder on sys.path; tests importing lockstep_airflow see it the same way.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: needs the cluster topology (3 brokers, Spark standalone)")
    # The local cache of decoded state files (lockstep.store.state_cache): one of the session's own, for
    # this process and every process it starts, never the user's ~/.cache.
    if "LOCKSTEP_STATE_CACHE" not in os.environ:
        import tempfile

        os.environ["LOCKSTEP_STATE_CACHE"] = tempfile.mkdtemp(prefix="lockstep-state-cache-")
    # The JVMs spark-submit starts (a checkpoint's driver, which runs a local[*] master's tasks too; the
    # Spark Connect server) with the client compiler only: a test's JVM lives seconds and C2's
    # compilations cost CPU it never earns back, on a suite that keeps both cores busy. Measured on the
    # three writer-failpoint tests (submit mode): CPU 61 s -> 39 s, wall 90 s -> 80 s. And with Spark's
    # classes mapped from a class-data-sharing archive when `make test` built one
    # (tests/support/spark_archive.py): a small job's JVM 10.2 s of CPU -> about 6 s. A user's
    # SPARK_SUBMIT_OPTS or SPARK_CONF_DIR is kept as it is. (Set here, before xdist starts its workers,
    # which inherit it.)
    if "SPARK_SUBMIT_OPTS" not in os.environ and "SPARK_CONF_DIR" not in os.environ:
        from tests.support import spark_archive

        os.environ.update(spark_archive.session_env())
    # The session's Kafka brokers (`lockstep_dev.kafka_nodes` takes KAFKA_OPTS as Kafka's scripts do) and
    # Kafka's tools with the client compiler only too: a broker's first 30 s, a start and a load of
    # 250k records, measured 6.2 s of CPU with C2 and 3.6 s without; each platform a session starts has its own.
    os.environ.setdefault("KAFKA_OPTS", "-XX:TieredStopAtLevel=1")


#: `make test` runs on three pytest-xdist workers (on two cores: much of a test is waiting), each with its
#: own session services. The cluster topology and Airflow are the heaviest of them, and each of their
#: groups of modules is one unit of work, on one worker, so that it is started once: the cluster's modules
#: (the short soak among them), then Airflow's DAG on the cluster while the cluster is still up (that
#: worker starts an Airflow for it, stopped after it); and the other Airflow modules, on another worker.
#: Together they were one unit until 2026-12-03, by then about 32 minutes of one worker while the other two
#: finished the rest and waited; apart, a second Airflow starts (about a minute) and the two halves run side
#: by side. Every other module is a unit of its own (its module-scoped fixtures are set up once), handed to
#: whichever worker is free, the longest first (`LONGEST`).
CLUSTER_GROUP = "cluster"
AIRFLOW_GROUP = "airflow"
SERVICES_GROUPS = (CLUSTER_GROUP, AIRFLOW_GROUP)

#: The other modules whose tests take the longest (several minutes each, in the durations of the suite's
#: runs), handed out first, so that none of them starts last and holds the session's end.
LONGEST = (
    "tests/integration/test_state.py",
    "tests/integration/test_engine.py",
    "tests/integration/test_tables.py",
    "tests/integration/test_interval_join.py",
    "tests/integration/test_formats.py",
    "tests/integration/test_state_repair.py",
    "tests/integration/test_dev_lifecycle.py",
)


def group_of(path: str) -> str:
    """The unit of work of a test module (its path from the root), from its path alone: the
    scheduler sees only node ids."""
    name = path.rsplit("/", 1)[-1]
    if name.startswith("test_cluster") or name == "test_soak.py":
        return CLUSTER_GROUP
    if path.startswith("tests/airflow/"):
        return AIRFLOW_GROUP
    return path


def order_of(path: str) -> int:
    """Where a module's tests run in the session: the cluster's modules, Airflow's DAG on the cluster, the
    other Airflow modules, then the rest, the longest first (so that none of them starts last)."""
    group = group_of(path)
    if group == CLUSTER_GROUP:
        return 1 if path.startswith("tests/airflow/") else 0
    if group == AIRFLOW_GROUP:
        return 2
    return 3 + LONGEST.index(path) if path in LONGEST else 3 + len(LONGEST)


#: Set to a file's path, each test's worker, start and end (seconds since the epoch) are appended to it, one
#: JSON line a test: what a session's units of work did side by side (`make test` prints only durations).
TIMELINE_ENV = "LOCKSTEP_TEST_TIMELINE"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    path = os.environ.get(TIMELINE_ENV)
    started = time.time()
    yield
    if path:
        import json

        line = json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid,
                           "start": round(started, 2), "end": round(time.time(), 2)})
        with open(path, "a") as out:  # one short append a line: the workers' lines do not interleave
            out.write(line + "\n")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Units by module, with the cluster's and Airflow's groups, in collection order (they come first:
    `pytest_collection_modifyitems`). xdist's own loadgroup cannot do this under pytest 9: it marks a
    group by rewriting the item's node id, which pytest 9 no longer reads."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid.split("::", 1)[0])

    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """The cluster's and Airflow's groups first, then the rest in `order_of`'s order; and a test that uses the
    cluster outside its group, or Airflow outside the two, is refused: another worker would start it again."""
    def path(item) -> str:
        return item.nodeid.split("::", 1)[0]

    def uses(item, *fixtures: str) -> bool:
        return bool(set(fixtures) & set(getattr(item, "fixturenames", ())))

    stray = sorted({path(i) for i in items
                    if (uses(i, "cluster", "on_cluster") and group_of(path(i)) != CLUSTER_GROUP)
                    or (uses(i, "airflow") and group_of(path(i)) not in SERVICES_GROUPS)})
    if stray:
        raise pytest.UsageError(f"{', '.join(stray)} use the cluster or Airflow outside their groups: put "
                                "the test in a test_cluster_*.py module (the cluster) or tests/airflow/ (Airflow), or extend group_of in "
                                "tests/conftest.py")
    items.sort(key=lambda item: order_of(path(item)))  # stable: each module's tests keep their order


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory):
    from lockstep_dev.platform import Platform

    state_dir = tmp_path_factory.mktemp("platform")
    plat = Platform(state_dir=state_dir, ports={"kafka": 0, "controller": 0, "s3": 0, "airflow": 0,
                                                "spark-connect": 0, "registry": 0, "registry-management": 0,
                                                "iceberg": 0})
    plat.up(with_connect=True)  # connect is the default run mode: most pipelines run there
    saved = {k: os.environ.get(k) for k in plat.client_env()}
    os.environ.update(plat.client_env())  # the library resolves connections like Airflow does
    try:
        yield plat
    finally:
        plat.down(wipe=False, kill=True)  # its data is thrown away: no graceful shutdown
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


#: The session's cluster topology once a test started it, and whether it is up. It is stopped as soon as
#: the next test of the worker does not use it (`pytest_runtest_teardown`): its tests are one unit of work,
#: and idle it still took 0.23 of a core (3 brokers, a Spark master and 2 workers, S3 and the registry,
#: measured over 60 s) from the rest of the session: a ninth of this two-core machine.
_CLUSTER: dict[str, object] = {}


def uses_cluster(item: pytest.Item | None) -> bool:
    """Whether a test needs the cluster topology (``cluster`` in its fixtures' closure)."""
    return item is not None and "cluster" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A cluster stopped after the tests before this one is started again (a test that asks for it after
    its row of tests ended: the group's order keeps them in one row, a selection of tests may not)."""
    plat = _CLUSTER.get("platform")
    if plat is not None and not _CLUSTER["up"] and uses_cluster(item):
        plat.up(with_registry=False, with_iceberg=False)  # type: ignore[attr-defined]
        _CLUSTER["up"] = True


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the cluster after the last of a run of tests that use it (after the test's own fixtures are
    torn down: trylast)."""
    plat = _CLUSTER.get("platform")
    if plat is not None and _CLUSTER["up"] and uses_cluster(item) and not uses_cluster(nextitem):
        plat.down(wipe=False, kill=True)  # type: ignore[attr-defined]
        _CLUSTER["up"] = False


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """The cluster topology (``lockstep dev up --cluster``): 3 Kafka brokers, a Spark standalone
    master with 2 workers, S3 (no Schema Registry). One per test session, started by the first test that asks for it and
    stopped after the last of the tests in a row that use it (`pytest_runtest_teardown`).

    It does not touch ``os.environ`` (the single-node ``platform`` owns it); tests point clients
    at the cluster with the ``on_cluster`` fixture."""
    from lockstep_dev.platform import Platform

    plat = Platform(state_dir=tmp_path_factory.mktemp("cluster"), cluster=True, free_ports=True)
    try:
        # No Schema Registry: no test on the cluster reads a schema, and its JVM's start costs about 10 s of CPU.
        plat.up(with_registry=False, with_iceberg=False)
        _CLUSTER.update(platform=plat, up=True)
        yield plat
    finally:
        _CLUSTER.clear()
        plat.down(wipe=False, kill=True)  # its data is thrown away: no graceful shutdown


@pytest.fixture
def on_cluster(cluster, monkeypatch):
    """Clients in this test (the library, the CLI it starts) use the cluster's connections."""
    for key, value in cluster.client_env().items():
        monkeypatch.setenv(key, value)
    return cluster


@pytest.fixture(scope="session")
def spark_connect(platform) -> str:
    """The platform's Spark Connect server (``lockstep dev up`` starts it), shared by the session;
    its ``sc://`` URL. Started again if a test stopped it."""
    platform.start("spark-connect")
    return platform.spark_connect.url


@pytest.fixture(scope="session")
def bootstrap(platform) -> str:
    return platform.kafka.bootstrap


@pytest.fixture
def unique() -> str:
    """A short unique suffix so tests sharing the session broker never collide."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def s3_client(platform):
    from lockstep_dev import s3

    return s3.client(platform.s3)
