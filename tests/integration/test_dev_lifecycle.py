"""`lockstep dev up | status | env | down` as a user runs them, in an isolated dev dir."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LOCKSTEP = str(Path(sys.executable).parent / "lockstep")


def _run(args: list[str], env: dict[str, str], timeout: int = 400) -> subprocess.CompletedProcess:
    return subprocess.run([LOCKSTEP, *args], env=env, capture_output=True, text=True, timeout=timeout)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def test_up_status_env_down_leaves_no_process(tmp_path):
    """The whole platform as a user starts it, Airflow's database on the platform's PostgreSQL (every other
    Airflow of the suite runs on SQLite, Airflow's default): up, up again, status, env, down."""
    env = {**os.environ, "LOCKSTEP_DEV_DIR": str(tmp_path / "dev")}
    up = _run(["dev", "up", "--with", "airflow", "--airflow-db", "postgres", "--kafka-port", "0",
               "--controller-port", "0", "--s3-port", "0", "--airflow-port", "0", "--spark-connect-port", "0",
               "--registry-port", "0", "--registry-management-port", "0", "--postgres-port", "0",
               "--iceberg-port", "0"], env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "login admin / " in up.stdout and "its database on postgres" in up.stdout

        again = _run(["dev", "up", "--with", "airflow"], env)  # idempotent: nothing new started
        assert again.returncode == 0, again.stderr

        status = json.loads(_run(["dev", "status", "--json"], env).stdout)
        assert {name for name, s in status.items() if s["running"]} == {"kafka", "s3", "registry", "iceberg",
                                                                         "spark-connect", "postgres", "airflow"}
        pids = {name: s["pid"] for name, s in status.items()}
        # Airflow migrated its schema into the platform's PostgreSQL, and its scheduler writes there.
        import psycopg2

        host, port = status["postgres"]["address"].split(":")
        with psycopg2.connect(host=host, port=int(port), user="airflow", dbname="airflow") as conn:
            cur = conn.cursor()
            cur.execute("SELECT count(*) FROM job WHERE job_type = 'SchedulerJob'")
            assert cur.fetchone()[0] >= 1

        exports = _run(["dev", "env"], env).stdout
        assert f"bootstrap.servers\": \"{status['kafka']['address']}" in exports
        assert "AIRFLOW_CONN_SPARK_DEFAULT" in exports and "local[*]" in exports
        assert status["s3"]["address"] in exports
        connect_port = status["spark-connect"]["address"].rsplit(":", 1)[1]
        assert "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT" in exports and f'"port": {connect_port}' in exports
        assert 'AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT=\'{"conn_type": "http", "host": "127.0.0.1", "port": ' in exports
        assert f'"url": "{status["registry"]["address"]}"' in exports
        assert f'AIRFLOW_CONN_ICEBERG_DEFAULT=\'{{"conn_type": "iceberg", "host": "{status["iceberg"]["address"]}"' \
            in exports
        # Airflow's children (scheduler, api-server, ...) share its process group.
        assert len(_group_members(pids["airflow"])) > 1
    finally:
        down = _run(["dev", "down"], env)
    assert down.returncode == 0, down.stderr
    for name, pid in pids.items():
        assert _group_members(pid) == [], f"{name} left processes behind"
    status_after = json.loads(_run(["dev", "status", "--json"], env).stdout)
    assert not any(s["running"] for s in status_after.values())
    assert (tmp_path / "dev" / "kafka" / "server.properties").exists(), "down without --wipe keeps data"


def test_port_in_use_gives_clear_error_without_hanging(tmp_path, platform):
    env = {**os.environ, "LOCKSTEP_DEV_DIR": str(tmp_path / "dev")}
    taken = platform.state.ports["s3"]
    result = _run(["dev", "up", "--s3-port", str(taken), "--no-iceberg"], env, timeout=60)
    assert result.returncode == 2
    assert f"port {taken} is already in use" in result.stderr
    _run(["dev", "down", "--wipe"], env)


def test_checkpoints_survive_down_and_go_with_wipe(tmp_path):
    """S3 keeps objects on disk (MinIO under <dev dir>/s3): a claim written before `down` still owns
    its checkpoint id after `up`; `down --wipe` deletes it."""
    from lockstep.model.checkpoint import CheckpointClaim
    from lockstep.model.offsets import OffsetRange
    from lockstep.store.checkpoint_store import CheckpointAlreadyClaimed, CheckpointStore
    from lockstep_dev import s3
    from lockstep_dev.platform import Platform

    env = {**os.environ, "LOCKSTEP_DEV_DIR": str(tmp_path / "dev")}
    free_ports = ["--kafka-port", "0", "--controller-port", "0", "--s3-port", "0", "--no-spark-connect",
                  "--no-registry", "--no-iceberg"]
    claim = CheckpointClaim(pipeline="orders", checkpoint_id=1, run_id="before-down", claimed_at="2025-01-01T00:00:00Z",
                            ranges=(OffsetRange("orders-in", 0, 0, 10),), start_source="auto.offset.reset")

    def up_and_store() -> CheckpointStore:
        up = _run(["dev", "up", *free_ports], env)
        assert up.returncode == 0, up.stdout + up.stderr
        config = Platform(state_dir=tmp_path / "dev").s3  # the ports and bucket `up` saved
        return CheckpointStore(s3.client(config), config.bucket, "lockstep/orders", "orders")

    try:
        up_and_store().claim(claim)
        assert _run(["dev", "down"], env).returncode == 0
        assert (tmp_path / "dev" / "s3" / "data").is_dir()

        store = up_and_store()
        assert store.view(1).claim == claim
        with pytest.raises(CheckpointAlreadyClaimed, match="before-down"):  # still decides the conditional create
            store.claim(dataclasses.replace(claim, run_id="after-up"))

        wipe = _run(["dev", "down", "--wipe"], env)
        assert wipe.returncode == 0, wipe.stderr
        assert not (tmp_path / "dev").exists()
        assert up_and_store().view(1) is None
    finally:
        _run(["dev", "down", "--wipe"], env)
