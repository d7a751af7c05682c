"""Session fixtures: the real local platform, started by the same code as
``lockstep dev up`` but in an isolated folder on free ports, and torn down after."""
from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

# Airflow puts the plugins folder on sys.path; tests importing lockstep_airflow see it the same way.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: needs the cluster topology (3 brokers, Spark standalone)")


#: `make test` runs on two pytest-xdist workers, each with its own session services. The cluster
#: topology and Airflow are the heaviest of them, and Airflow's cluster DAG needs both, so every test
#: module that uses either runs on one worker and they start once there; every other module is a
#: unit of its own (its module-scoped fixtures are set up once), handed to whichever worker is free.
HEAVY_GROUP = "cluster-and-airflow"
HEAVY_SERVICES = {"cluster", "on_cluster", "airflow"}


def heavy_module(path: str) -> bool:
    """Whether a test module (its path from the root) is in the cluster-and-Airflow group: decided
    from its path alone, as the scheduler sees only node ids."""
    name = path.rsplit("/", 1)[-1]
    return path.startswith("tests/airflow/") or name.startswith("test_cluster") or name == "test_soak.py"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Scopes by module, with the heavy modules as one scope, in collection order (tests/airflow first,
    so that scope starts at once). xdist's own loadgroup cannot do this under pytest 9: it marks a
    group by rewriting the item's node id, which pytest 9 no longer reads."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return HEAVY_GROUP if heavy_module(path) else path

    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """A test that uses the cluster or Airflow must live in a module of the heavy group, else a
    second worker would start them again."""
    stray = sorted({item.nodeid.split("::", 1)[0] for item in items
                    if HEAVY_SERVICES & set(getattr(item, "fixturenames", ()))
                    and not heavy_module(item.nodeid.split("::", 1)[0])})
    if stray:
        raise pytest.UsageError(f"{', '.join(stray)} use the cluster or Airflow: name the module test_cluster_*.py, "
                                "or extend heavy_module in tests/conftest.py")


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory):
    from lockstep_dev.platform import Platform

    state_dir = tmp_path_factory.mktemp("platform")
    plat = Platform(state_dir=state_dir, ports={"kafka": 0, "controller": 0, "s3": 0, "airflow": 0,
                                                "spark-connect": 0})
    plat.up(with_connect=True)  # connect is the default run mode: most pipelines run there
    saved = {k: os.environ.get(k) for k in plat.client_env()}
    os.environ.update(plat.client_env())  # the library resolves connections like Airflow does
    try:
        yield plat
    finally:
        plat.down(wipe=False)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """The cluster topology (``lockstep dev up --cluster``): 3 Kafka brokers, a Spark standalone
    master with 2 workers, S3. One per test session, started by the first test that asks for it.

    It does not touch ``os.environ`` (the single-node ``platform`` owns it); tests point clients
    at the cluster with the ``on_cluster`` fixture."""
    from lockstep_dev.platform import Platform

    plat = Platform(state_dir=tmp_path_factory.mktemp("cluster"), cluster=True, free_ports=True)
    try:
        plat.up()
        yield plat
    finally:
        plat.down(wipe=False)


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
