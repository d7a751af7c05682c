"""The local platform's topologies as configuration: no process is started here."""
from __future__ import annotations

import json

import pytest

from lockstep_dev.platform import Platform
from lockstep_dev.procs import PlatformError


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_single_node_replicates_nothing_and_runs_spark_locally(tmp_path):
    plat = Platform(state_dir=tmp_path)
    assert plat.services() == ("s3", "registry", "iceberg", "kafka", "spark-connect", "airflow")
    node = plat.kafka.nodes[0]
    p = props(plat.kafka.server_properties(node))
    assert p["transaction.state.log.replication.factor"] == p["default.replication.factor"] == "1"
    assert plat.spark is None
    assert json.loads(plat.connection_env()["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "local[*]"


def test_cluster_is_three_voting_brokers_with_rf3_isr2_and_a_spark_master_with_two_workers(tmp_path):
    plat = Platform(state_dir=tmp_path, cluster=True)
    assert plat.services() == ("s3", "registry", "iceberg", "kafka-1", "kafka-2", "kafka-3", "spark-master", "spark-worker-1",
                               "spark-worker-2", "spark-connect", "airflow")
    nodes = plat.kafka.nodes
    assert len({n.data_dir for n in nodes}) == len({n.port for n in nodes}) == 3
    for node in nodes:
        p = props(plat.kafka.server_properties(node))
        assert p["node.id"] == str(node.node_id)
        assert p["controller.quorum.voters"] == ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
        assert (p["default.replication.factor"], p["min.insync.replicas"]) == ("3", "2")
        assert (p["transaction.state.log.replication.factor"], p["transaction.state.log.min.isr"]) == ("3", "2")
        assert p["offsets.topic.replication.factor"] == "3"
    env = plat.connection_env()
    bootstrap = json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"]["bootstrap.servers"]
    assert bootstrap.split(",") == [f"127.0.0.1:{n.port}" for n in nodes]
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == plat.spark.master_url == "spark://127.0.0.1:17077"


def test_the_saved_topology_is_kept_until_asked_to_switch(tmp_path):
    Platform(state_dir=tmp_path, cluster=True, free_ports=True)._save()
    again = Platform(state_dir=tmp_path)  # `dev up` without a flag
    assert again.is_cluster
    s3_port = again.state.ports["s3"]
    single = Platform(state_dir=tmp_path, cluster=False)  # nothing runs: switching is allowed
    assert not single.is_cluster and single.services() == ("s3", "registry", "iceberg", "kafka", "spark-connect", "airflow")
    assert single.state.ports["s3"] == s3_port and single.state.ports["kafka"] == 19092
    assert single.state.ports["registry"] == again.state.ports["registry"], "the registry's ports stay too"


def test_switching_topology_while_the_other_runs_is_refused(tmp_path, monkeypatch):
    Platform(state_dir=tmp_path)._save()
    monkeypatch.setattr("lockstep_dev.procs.is_running", lambda pid, marker: True)
    saved = json.loads((tmp_path / "platform.json").read_text())
    saved["pids"] = {"kafka": 4242}
    (tmp_path / "platform.json").write_text(json.dumps(saved))
    with pytest.raises(PlatformError, match="stop it first"):
        Platform(state_dir=tmp_path, cluster=True)


def test_the_schema_registry_connection_names_its_confluent_api_on_loopback(tmp_path):
    """The lead's registry client reads this JSON; every field and its shape are part of the contract."""
    plat = Platform(state_dir=tmp_path, ports={"registry": 18123, "registry-management": 18124})
    conn = json.loads(plat.connection_env()["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"])
    assert conn == {"conn_type": "http", "host": "127.0.0.1", "port": 18123, "login": None, "password": None,
                    "extra": {"url": "http://127.0.0.1:18123/apis/ccompat/v7"}}
    assert plat.address("registry") == conn["extra"]["url"]
    assert Platform(state_dir=tmp_path / "c", cluster=True).registry.port == 18090  # both topologies run it


def test_airflow_runs_on_sqlite_unless_asked_for_the_platforms_postgres_which_is_kept(tmp_path):
    plat = Platform(state_dir=tmp_path, free_ports=True)
    sqlite = plat.airflow.environment({})["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert sqlite == f"sqlite:///{tmp_path / 'airflow' / 'airflow.db'}" and "postgres" not in plat.services()
    pg = Platform(state_dir=tmp_path, airflow_db="postgres")
    assert pg.services()[-2:] == ("postgres", "airflow"), "PostgreSQL starts just before Airflow, stops after it"
    port = pg.state.ports["postgres"]
    assert pg.airflow.environment({})["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == \
        f"postgresql+psycopg2://airflow@127.0.0.1:{port}/airflow"
    assert pg.address("postgres") == f"127.0.0.1:{port}"
    pg._save()
    assert Platform(state_dir=tmp_path).state.airflow_db == "postgres", "a later `up` without the flag keeps it"
    with pytest.raises(ValueError, match="one of sqlite, postgres"):
        Platform(state_dir=tmp_path, airflow_db="mysql")


def test_switching_airflows_database_while_airflow_runs_is_refused(tmp_path, monkeypatch):
    Platform(state_dir=tmp_path)._save()
    monkeypatch.setattr("lockstep_dev.procs.is_running", lambda pid, marker: pid == 4242)
    saved = json.loads((tmp_path / "platform.json").read_text())
    saved["pids"] = {"airflow": 4242}
    (tmp_path / "platform.json").write_text(json.dumps(saved))
    with pytest.raises(PlatformError, match="runs on sqlite; stop it first"):
        Platform(state_dir=tmp_path, airflow_db="postgres")


def test_airflows_task_workers_are_forked_from_a_forkserver_that_preloaded_lockstep(tmp_path):
    env = Platform(state_dir=tmp_path, free_ports=True).airflow.environment({})
    assert env["AIRFLOW__SCHEDULER__MP_START_METHOD"] == "forkserver"
    assert env["AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD"].split(",")[-1] == "lockstep_airflow.task_preload"


def test_airflows_home_gets_the_local_settings_that_preload_the_dag_processors_parses(tmp_path):
    from lockstep.paths import project_root
    from lockstep_dev.airflow import write_local_settings

    written = write_local_settings(tmp_path / "airflow")
    assert written == tmp_path / "airflow" / "config" / "airflow_local_settings.py"
    assert written.read_text() == (project_root() / "config" / "airflow_local_settings.py").read_text()
    assert "preload_in_dag_processor()" in written.read_text()
