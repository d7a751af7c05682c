"""``lockstep dev up | down | status | env``: the embedded local platform.

State (ports, pids) lives in ``<dev dir>/platform.json`` so that ``up`` is
idempotent, ``env`` prints stable addresses and ``down`` stops exactly the
processes ``up`` started. Tests use the same class with an isolated dev dir and
free ports, so the services they exercise are started by the same code.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lockstep.dev import airflow as airflow_svc
from lockstep.dev import kafka as kafka_svc
from lockstep.dev import procs
from lockstep.dev import s3 as s3_svc
from lockstep.paths import dev_state_dir

DEFAULT_PORTS = {"kafka": 19092, "controller": 19093, "s3": 19000, "airflow": 8080}
MARKERS = {"kafka": kafka_svc.MARKER, "s3": s3_svc.MARKER, "airflow": airflow_svc.MARKER}
STOP_ORDER = ("airflow", "kafka", "s3")


@dataclass
class PlatformState:
    ports: dict[str, int]
    bucket: str = "lockstep"
    pids: dict[str, int] = field(default_factory=dict)


class Platform:
    def __init__(self, state_dir: Path | None = None, ports: dict[str, int] | None = None, bucket: str = "lockstep"):
        self.state_dir = (state_dir or dev_state_dir()).resolve()
        self._state_file = self.state_dir / "platform.json"
        self.state = self._load(ports or {}, bucket)

    # ---- state -------------------------------------------------------------
    def _load(self, overrides: dict[str, int], bucket: str) -> PlatformState:
        if self._state_file.exists():
            saved = json.loads(self._state_file.read_text())
            state = PlatformState(ports=saved["ports"], bucket=saved.get("bucket", bucket), pids=saved.get("pids", {}))
        else:
            state = PlatformState(ports=dict(DEFAULT_PORTS), bucket=bucket)
        for name, port in overrides.items():
            if port is not None and not self._running_name(state, name):
                state.ports[name] = port or procs.free_port()
        return state

    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._state_file.write_text(json.dumps(asdict(self.state), indent=2))

    @staticmethod
    def _running_name(state: PlatformState, name: str) -> bool:
        service = "kafka" if name == "controller" else name
        return procs.is_running(state.pids.get(service), MARKERS[service])

    def running(self, name: str) -> bool:
        return self._running_name(self.state, name)

    # ---- configs -----------------------------------------------------------
    @property
    def kafka(self) -> kafka_svc.KafkaConfig:
        return kafka_svc.KafkaConfig(self.state.ports["kafka"], self.state.ports["controller"], self.state_dir / "kafka")

    @property
    def s3(self) -> s3_svc.S3Config:
        return s3_svc.S3Config(self.state.ports["s3"], self.state.bucket)

    @property
    def airflow(self) -> airflow_svc.AirflowConfig:
        return airflow_svc.AirflowConfig(self.state.ports["airflow"], self.state_dir / "airflow")

    def log_file(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    # ---- up / down ---------------------------------------------------------
    def up(self, with_airflow: bool = False, out=sys.stdout) -> None:
        self._up_s3(out)
        self._up_kafka(out)
        if with_airflow:
            self._up_airflow(out)

    def _claim_ports(self, name: str, *ports: int) -> None:
        for port in ports:
            if procs.port_in_use(port):
                raise procs.PlatformError(
                    f"cannot start {name}: port {port} is already in use by another process. "
                    f"Stop it, or choose another port (e.g. `lockstep dev up --{name}-port 0` picks a free one)."
                )

    def _start(self, name: str, pid: int) -> None:
        self.state.pids[name] = pid
        self._save()

    def _up_s3(self, out) -> None:
        config = self.s3
        if not self.running("s3"):
            self._claim_ports("s3", config.port)
            self._start("s3", s3_svc.start(config, self.log_file("s3")))
            procs.wait_until(lambda: s3_svc.is_ready(config), f"S3 server on {config.endpoint}", 60,
                             alive=lambda: self.running("s3"), log_file=self.log_file("s3"))
        s3_svc.ensure_bucket(config)
        print(f"s3       running  {config.endpoint} (bucket {config.bucket})", file=out)

    def _up_kafka(self, out) -> None:
        config = self.kafka
        if not self.running("kafka"):
            self._claim_ports("kafka", config.port, config.controller_port)
            self._start("kafka", kafka_svc.start(config, self.log_file("kafka")))
            procs.wait_until(lambda: kafka_svc.is_ready(config.bootstrap), f"Kafka broker on {config.bootstrap}", 120,
                             alive=lambda: self.running("kafka"), log_file=self.log_file("kafka"))
            kafka_svc.warm_up(config.bootstrap)
        print(f"kafka    running  {config.bootstrap} (KRaft, data in {config.data_dir})", file=out)

    def _up_airflow(self, out) -> None:
        config = self.airflow
        if not self.running("airflow"):
            self._claim_ports("airflow", config.port)
            airflow_bin = shutil.which("airflow", path=str(Path(sys.executable).parent)) or "airflow"
            env = {**os.environ, **config.environment(self.connection_env())}
            env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
            self._start("airflow", airflow_svc.start(config, self.log_file("airflow"), env, airflow_bin))
            procs.wait_until(lambda: airflow_svc.is_ready(config), f"Airflow on {config.url}", 300,
                             alive=lambda: self.running("airflow"), log_file=self.log_file("airflow"))
        print(f"airflow  running  {config.url} (login admin / {config.admin_password() or '?'})", file=out)

    def stop(self, name: str, out=sys.stdout) -> None:
        """Stop one service (and its whole process group) if ``up`` started it."""
        pid = self.state.pids.pop(name, None)
        if pid is None:
            return
        procs.stop_group(pid, MARKERS[name])
        print(f"{name:8} stopped (pid {pid})", file=out)
        self._save()

    def down(self, wipe: bool = False, out=sys.stdout) -> None:
        for name in STOP_ORDER:
            self.stop(name, out)
        if wipe and self.state_dir.exists():
            shutil.rmtree(self.state_dir)
            print(f"wiped {self.state_dir}", file=out)

    def status(self) -> dict[str, dict]:
        where = {
            "kafka": self.kafka.bootstrap,
            "s3": self.s3.endpoint,
            "airflow": self.airflow.url,
        }
        return {
            name: {"running": self.running(name), "pid": self.state.pids.get(name), "address": where[name],
                   "log": str(self.log_file(name))}
            for name in ("kafka", "s3", "airflow")
        }

    # ---- client environment -----------------------------------------------
    def connection_env(self) -> dict[str, str]:
        """Connections as Airflow reads them from the environment; the CLI and tests read the same ids."""
        kafka = {"conn_type": "kafka", "extra": {"bootstrap.servers": self.kafka.bootstrap}}
        aws = {
            "conn_type": "aws",
            "login": s3_svc.ACCESS_KEY,
            "password": s3_svc.SECRET_KEY,
            "extra": {"region_name": s3_svc.REGION, "endpoint_url": self.s3.endpoint},
        }
        spark = {"conn_type": "spark", "host": "local[*]"}
        return {
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(kafka),
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark),
        }

    def client_env(self) -> dict[str, str]:
        env = {
            "LOCKSTEP_KAFKA_BOOTSTRAP": self.kafka.bootstrap,
            "LOCKSTEP_S3_ENDPOINT": self.s3.endpoint,
            "LOCKSTEP_S3_BUCKET": self.s3.bucket,
            "AWS_ACCESS_KEY_ID": s3_svc.ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": s3_svc.SECRET_KEY,
            "AWS_DEFAULT_REGION": s3_svc.REGION,
            "AWS_ENDPOINT_URL_S3": self.s3.endpoint,
        }
        env.update(self.connection_env())
        return env
