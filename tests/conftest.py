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


#: `make test` runs on two pytest-xdist workers (`--dist loadgroup`), each with its own session
#: services. The cluster topology and Airflow are the heaviest of them, and Airflow's cluster DAG needs
#: both, so every test that uses either runs on one worker and they start once. Every other module
#: is a group of its own, so its module-scoped fixtures are set up once too.
HEAVY_GROUP = "cluster-and-airflow"


def pytest_collection_modifyitems(config, items):
    for item in items:
        heavy = {"cluster", "on_cluster", "airflow"} & set(getattr(item, "fixturenames", ()))
        group = HEAVY_GROUP if heavy else item.module.__name__
        item.add_marker(pytest.mark.xdist_group(group))


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
