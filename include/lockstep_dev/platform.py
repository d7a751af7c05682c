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
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO, TypedDict

from lockstep.paths import dev_state_dir
from lockstep_dev import airflow as airflow_svc
from lockstep_dev import iceberg_catalog as iceberg_svc
from lockstep_dev import kafka_nodes as kafka_svc
from lockstep_dev import postgres as postgres_svc
from lockstep_dev import procs
from lockstep_dev import registry as registry_svc
from lockstep_dev import s3 as s3_svc
from lockstep_dev import security as security_svc
from lockstep_dev import spark_cluster as spark_svc
from lockstep_dev import spark_connect as connect_svc

SINGLE, CLUSTER = "single", "cluster"
#: Airflow's metadata database: SQLite in Airflow's home (Airflow's default), or the platform's PostgreSQL.
SQLITE, POSTGRES = "sqlite", "postgres"
AIRFLOW_DATABASES = (SQLITE, POSTGRES)
CLUSTER_BROKERS = 3
CLUSTER_WORKERS = 2
DEFAULT_PORTS = {"kafka": 19092, "controller": 19093, "s3": 19000, "airflow": 8080, "spark-connect": 15002,
                 "registry": 18090, "registry-management": 18091, "postgres": 15432, "iceberg": 18181}
CLUSTER_PORTS = {
    "s3": 19000, "airflow": 8080, "spark-connect": 15002, "registry": 18090, "registry-management": 18091,
    "postgres": 15432, "iceberg": 18181,
    "kafka-1": 19092, "controller-1": 19093, "kafka-2": 19094, "controller-2": 19095,
    "kafka-3": 19096, "controller-3": 19097,
    "kafka-secure-1": 19192, "kafka-secure-2": 19194, "kafka-secure-3": 19196,
    "spark-master": 17077, "spark-master-ui": 18080, "spark-worker-1-ui": 18081, "spark-worker-2-ui": 18082,
}
#: Which service a port belongs to, when it is not the service's own name.
PORT_OWNER = {"controller": "kafka", **{f"controller-{i}": f"kafka-{i}" for i in range(1, CLUSTER_BROKERS + 1)},
              **{f"kafka-secure-{i}": f"kafka-{i}" for i in range(1, CLUSTER_BROKERS + 1)},
              "spark-master-ui": "spark-master", "registry-management": "registry",
              **{f"spark-worker-{i}-ui": f"spark-worker-{i}" for i in range(1, CLUSTER_WORKERS + 1)}}


def marker(service: str) -> str:
    """What the command line of a service we started contains (see ``procs.is_running``)."""
    if service.startswith("kafka"):
        return kafka_svc.MARKER
    if service.startswith("spark-worker"):
        return spark_svc.WORKER_MARKER
    return {"s3": s3_svc.MARKER, "airflow": airflow_svc.MARKER, "spark-master": spark_svc.MASTER_MARKER,
            "spark-connect": connect_svc.MARKER, "registry": registry_svc.MARKER, "postgres": postgres_svc.MARKER,
            "iceberg": iceberg_svc.MARKER}[service]


class ServiceStatus(TypedDict):
    """One service in ``status()`` (and ``lockstep dev status --json``)."""

    running: bool
    pid: int | None
    address: str
    log: str


@dataclass
class PlatformState:
    ports: dict[str, int]
    bucket: str = "lockstep"
    pids: dict[str, int] = field(default_factory=dict)
    topology: str = SINGLE
    airflow_db: str = SQLITE


class Platform:
    """The local platform: S3, a Schema Registry, Kafka (one node, or three with ``cluster=True``), a
    Spark standalone master with two workers (cluster only), and optionally a Spark Connect server (on
    the cluster's master, else ``local[*]``) and Airflow."""

    def __init__(self, state_dir: Path | None = None, ports: dict[str, int] | None = None, bucket: str = "lockstep",
                 cluster: bool | None = None, free_ports: bool = False, warm_checkpoints: bool = False,
                 airflow_db: str | None = None):
        """``warm_checkpoints``: a Spark Connect server this platform starts is warmed up with tiny real
        checkpoints (`lockstep_dev.warm_checkpoints`) before it is reported running. ``airflow_db``: Airflow's
        metadata database (`AIRFLOW_DATABASES`); None keeps the one the platform was last started with."""
        self.warm_checkpoints = warm_checkpoints
        self.state_dir = (state_dir or dev_state_dir()).resolve()
        self._state_file = self.state_dir / "platform.json"
        self.state = self._load(ports or {}, bucket, cluster, free_ports)
        if airflow_db is not None and airflow_db != self.state.airflow_db:
            if airflow_db not in AIRFLOW_DATABASES:
                raise ValueError(f"airflow_db {airflow_db!r}: one of {', '.join(AIRFLOW_DATABASES)}")
            if self.running("airflow"):
                raise procs.PlatformError(
                    f"Airflow in {self.state_dir} runs on {self.state.airflow_db}; stop it first (`lockstep dev down`) "
                    f"to start it on {airflow_db}. Each database keeps its own DAG runs and history.")
            self.state.airflow_db = airflow_db

    # ---- state -------------------------------------------------------------
    def _load(self, overrides: dict[str, int], bucket: str, cluster: bool | None, free_ports: bool) -> PlatformState:
        if self._state_file.exists():
            saved = json.loads(self._state_file.read_text())
            state = PlatformState(ports=saved["ports"], bucket=saved.get("bucket", bucket), pids=saved.get("pids", {}),
                                  topology=saved.get("topology", SINGLE), airflow_db=saved.get("airflow_db", SQLITE))
        else:
            state = PlatformState(ports=dict(CLUSTER_PORTS if cluster else DEFAULT_PORTS), bucket=bucket,
                                  topology=CLUSTER if cluster else SINGLE)
        wanted = state.topology if cluster is None else (CLUSTER if cluster else SINGLE)
        if wanted != state.topology:
            running = [name for name in state.pids if self._running_name(state, name)]
            if running:
                raise procs.PlatformError(
                    f"the platform in {self.state_dir} runs the {state.topology} topology ({', '.join(sorted(running))}); "
                    f"stop it first (`lockstep dev down`) to start the {wanted} one. Data of both stays unless --wipe."
                )
            state.topology = wanted
            defaults = CLUSTER_PORTS if wanted == CLUSTER else DEFAULT_PORTS
            state.ports = {**defaults, **{k: v for k, v in state.ports.items()
                                          if k in ("s3", "airflow", "registry", "registry-management", "postgres",
                                                   "iceberg")}}
        for name, port in (CLUSTER_PORTS if state.topology == CLUSTER else DEFAULT_PORTS).items():
            state.ports.setdefault(name, port)  # a port added since this platform.json was written
        if free_ports:
            overrides = {**{name: 0 for name in state.ports}, **overrides}
        for name, port in overrides.items():
            if port is not None and not self._running_name(state, name):
                state.ports[name] = port or procs.free_port()
        return state

    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._state_file.write_text(json.dumps(asdict(self.state), indent=2))

    @staticmethod
    def _running_name(state: PlatformState, name: str) -> bool:
        service = PORT_OWNER.get(name, name)
        return procs.is_running(state.pids.get(service), marker(service))

    def running(self, name: str) -> bool:
        return self._running_name(self.state, name)

    @property
    def is_cluster(self) -> bool:
        return self.state.topology == CLUSTER

    def services(self) -> tuple[str, ...]:
        """Every service of this topology, in start order (Airflow last, its PostgreSQL just before it)."""
        # PostgreSQL while Airflow uses it, or while one started for it still runs (stopped by `down` all the same).
        with_postgres = self.state.airflow_db == POSTGRES or "postgres" in self.state.pids
        airflow = ("postgres", "airflow") if with_postgres else ("airflow",)
        if not self.is_cluster:
            return ("s3", "registry", "iceberg", "kafka", "spark-connect", *airflow)
        return ("s3", "registry", "iceberg", *(f"kafka-{n.node_id}" for n in self.kafka.nodes), "spark-master",
                *(f"spark-worker-{i}" for i in range(1, CLUSTER_WORKERS + 1)), "spark-connect", *airflow)

    # ---- configs -----------------------------------------------------------
    @property
    def kafka(self) -> kafka_svc.KafkaConfig:
        ports = self.state.ports
        if not self.is_cluster:
            return kafka_svc.KafkaConfig((kafka_svc.KafkaNode(1, ports["kafka"], ports["controller"],
                                                              self.state_dir / "kafka"),))
        nodes = tuple(kafka_svc.KafkaNode(i, ports[f"kafka-{i}"], ports[f"controller-{i}"], self.state_dir / f"kafka-{i}",
                                          secure_port=ports[f"kafka-secure-{i}"])
                      for i in range(1, CLUSTER_BROKERS + 1))
        return kafka_svc.KafkaConfig(nodes, heap="512m", secure=self.security)

    @property
    def security(self) -> security_svc.SecureListener | None:
        """The cluster's SASL_SSL material: ``tls/`` (CA, broker key store) and ``secrets/`` (SCRAM password)."""
        if not self.is_cluster:
            return None
        return security_svc.SecureListener(self.state_dir / "tls", self.state_dir / "secrets")

    def kafka_node(self, service: str) -> kafka_svc.KafkaNode:
        return next(n for n in self.kafka.nodes if self._kafka_service(n) == service)

    def _kafka_service(self, node: kafka_svc.KafkaNode) -> str:
        return f"kafka-{node.node_id}" if self.is_cluster else "kafka"

    @property
    def spark(self) -> spark_svc.SparkClusterConfig | None:
        if not self.is_cluster:
            return None
        ports = self.state.ports
        return spark_svc.SparkClusterConfig(
            ports["spark-master"], ports["spark-master-ui"],
            tuple(ports[f"spark-worker-{i}-ui"] for i in range(1, CLUSTER_WORKERS + 1)), self.state_dir / "spark")

    def _spark_cluster(self) -> spark_svc.SparkClusterConfig:
        """The standalone Spark cluster, which only the cluster topology runs."""
        spark = self.spark
        if spark is None:
            raise procs.PlatformError(f"the platform in {self.state_dir} runs the {self.state.topology} topology: "
                                      "it has no Spark standalone master (`lockstep dev up --cluster` starts one)")
        return spark

    @property
    def spark_master(self) -> str:
        return self.spark.master_url if self.spark is not None else "local[*]"

    @property
    def s3(self) -> s3_svc.S3Config:
        return s3_svc.S3Config(self.state.ports["s3"], self.state.bucket, self.state_dir / "s3")

    @property
    def spark_connect(self) -> connect_svc.ConnectConfig:
        return connect_svc.ConnectConfig(self.state.ports["spark-connect"], self.state_dir / "spark-connect",
                                         self.spark_master)

    @property
    def registry(self) -> registry_svc.RegistryConfig:
        return registry_svc.RegistryConfig(self.state.ports["registry"], self.state.ports["registry-management"],
                                           self.state_dir / "registry")

    @property
    def iceberg(self) -> iceberg_svc.CatalogConfig:
        return iceberg_svc.CatalogConfig(self.state.ports["iceberg"], self.state_dir / "iceberg", self.s3)

    @property
    def airflow(self) -> airflow_svc.AirflowConfig:
        url = self.postgres.url if self.state.airflow_db == POSTGRES else None
        return airflow_svc.AirflowConfig(self.state.ports["airflow"], self.state_dir / "airflow", database_url=url)

    @property
    def postgres(self) -> postgres_svc.PostgresConfig:
        return postgres_svc.PostgresConfig(self.state.ports["postgres"], self.state_dir / "postgres")

    def log_file(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    # ---- up / down ---------------------------------------------------------
    def up(self, with_airflow: bool = False, with_connect: bool = False, with_registry: bool = True,
           out: TextIO = sys.stdout, with_iceberg: bool = True) -> None:
        self._up_s3(out)
        # The registry's and the catalog's JVMs are waited for after Kafka's: their start-ups overlap theirs.
        if with_registry:
            self._launch_registry()
        if with_iceberg:
            self._launch_iceberg()
        self._up_kafka(out)
        if with_registry:
            self._up_registry(out, launch=False)
        if with_iceberg:
            self._up_iceberg(out, launch=False)
        if self.is_cluster:
            self._up_spark(out)
        if with_connect:
            self._up_connect(out)
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

    def _up_s3(self, out: TextIO) -> None:
        config = self.s3
        if not self.running("s3"):
            self._claim_ports("s3", config.port)
            self._start("s3", s3_svc.start(config, self.log_file("s3")))
            procs.wait_until(lambda: s3_svc.is_ready(config), f"S3 server on {config.endpoint}", 60,
                             alive=lambda: self.running("s3"), log_file=self.log_file("s3"))
        s3_svc.ensure_bucket(config)
        print(f"s3       running  {config.endpoint} (bucket {config.bucket})", file=out)

    def _launch_registry(self) -> None:
        config = self.registry
        if not self.running("registry"):
            self._claim_ports("registry", config.port, config.management_port)
            self._start("registry", registry_svc.start(config, self.log_file("registry")))

    def _up_registry(self, out: TextIO, launch: bool = True) -> None:
        if launch:  # else launched already: one that died since is reported below, not started twice
            self._launch_registry()
        config = self.registry
        procs.wait_until(lambda: registry_svc.is_ready(config), f"Schema Registry on {config.url}", 120,
                         alive=lambda: self.running("registry"), log_file=self.log_file("registry"))
        print(f"registry running  {config.url} (Apicurio, Confluent API; health on 127.0.0.1:"
              f"{config.management_port}, data in {config.data_dir})", file=out)

    def _launch_iceberg(self) -> None:
        config = self.iceberg
        if not self.running("iceberg"):
            self._claim_ports("iceberg", config.port)
            self._start("iceberg", iceberg_svc.start(config, self.log_file("iceberg")))

    def _up_iceberg(self, out: TextIO, launch: bool = True) -> None:
        if launch:
            self._launch_iceberg()
        config = self.iceberg
        procs.wait_until(lambda: iceberg_svc.is_ready(config), f"Iceberg REST catalog on {config.url}", 60,
                         alive=lambda: self.running("iceberg"), log_file=self.log_file("iceberg"))
        print(f"iceberg  running  {config.url} (Iceberg REST catalog, warehouse {config.warehouse}, catalog in "
              f"{config.data_dir}; connection iceberg_default)", file=out)

    def _up_kafka(self, out: TextIO) -> None:
        config = self.kafka
        stopped = [n for n in config.nodes if not self.running(self._kafka_service(n))]
        if stopped:
            cluster_id = kafka_svc.cluster_id(config)
            for node in stopped:
                self.start_kafka_node(node, cluster_id)
            first = self._kafka_service(stopped[0])
            procs.wait_until(lambda: kafka_svc.is_ready(config.bootstrap, len(config.nodes)),
                             f"Kafka on {config.bootstrap} ({len(config.nodes)} brokers)", 120,
                             alive=lambda: all(self.running(self._kafka_service(n)) for n in stopped),
                             log_file=self.log_file(first))
            kafka_svc.warm_up(config.bootstrap)
            if (listener := config.secure_listener) is not None:
                # The SCRAM user, then every node's SASL_SSL listener authenticating it.
                kafka_svc.add_scram_user(config.bootstrap, listener)
                procs.wait_until(lambda: kafka_svc.is_secure_ready(config),
                                 f"Kafka SASL_SSL listeners on {config.secure_bootstrap}", 60,
                                 alive=lambda: all(self.running(self._kafka_service(n)) for n in stopped),
                                 log_file=self.log_file(first))
        for node in config.nodes:
            secure = f", SASL_SSL 127.0.0.1:{node.secure_port}" if config.has_secure_listener else ""
            print(f"{self._kafka_service(node):8} running  127.0.0.1:{node.port}{secure} (KRaft, data in {node.data_dir})",
                  file=out)
        if self.is_cluster:
            print(f"         {len(config.nodes)} brokers, replication factor {config.replication_factor}, "
                  f"min.insync.replicas {config.min_insync_replicas}", file=out)
        if (listener := config.secure_listener) is not None:
            print(f"         SASL_SSL: {listener.mechanism} user {listener.user} (password in "
                  f"{listener.password_file}), CA {listener.ca_file}; connection kafka_secure", file=out)

    def start_kafka_node(self, node: kafka_svc.KafkaNode, cluster_id: str | None = None) -> None:
        """Start one Kafka node (``up``, or a test restarting a broker it stopped) without waiting."""
        service = self._kafka_service(node)
        self._claim_ports(service, node.port, node.controller_port, *([node.secure_port] if node.secure_port else []))
        if self.security is not None:
            self.security.ensure()  # TLS files and the SCRAM password, on the first start
        self._start(service, kafka_svc.start(self.kafka, node, self.log_file(service),
                                             cluster_id or kafka_svc.cluster_id(self.kafka)))

    def start(self, name: str, out: TextIO = sys.stdout) -> None:
        """Start one stopped S3, Schema Registry, Spark Connect or Kafka service again and wait until it serves
        (a test or the soak bringing back what it killed), leaving every other stopped service down."""
        if name == "s3":
            self._up_s3(out)
            return
        if name == "registry":
            self._up_registry(out)
            return
        if name == "spark-connect":
            self._up_connect(out)
            return
        if name == "iceberg":
            self._up_iceberg(out)
            return
        if not name.startswith("kafka"):
            raise ValueError(f"start({name!r}): only s3, registry, spark-connect and the Kafka nodes are restarted "
                             "one by one")
        if not self.running(name):
            self.start_kafka_node(self.kafka_node(name))
        config = self.kafka
        procs.wait_until(lambda: kafka_svc.is_ready(config.bootstrap, len(config.nodes)),
                         f"{name} back in {config.bootstrap}", 120, alive=lambda: self.running(name),
                         log_file=self.log_file(name))
        print(f"{name:8} running again (pid {self.state.pids[name]})", file=out)

    def _up_spark(self, out: TextIO) -> None:
        config = self._spark_cluster()
        if not self.running("spark-master"):
            self._claim_ports("spark-master", config.master_port, config.master_ui_port)
            self._start("spark-master", spark_svc.start_master(config, self.log_file("spark-master")))
            procs.wait_until(lambda: bool(spark_svc.master_state(config)), f"Spark master on {config.master_url}", 60,
                             alive=lambda: self.running("spark-master"), log_file=self.log_file("spark-master"))
        for i in range(1, CLUSTER_WORKERS + 1):
            name = f"spark-worker-{i}"
            if not self.running(name):
                self._claim_ports(name, config.worker_ui_ports[i - 1])
                self._start(name, spark_svc.start_worker(config, i, self.log_file(name)))
        procs.wait_until(lambda: spark_svc.alive_workers(config) >= CLUSTER_WORKERS,
                         f"{CLUSTER_WORKERS} Spark workers registered with {config.master_url}", 90,
                         alive=lambda: all(self.running(f"spark-worker-{i}") for i in range(1, CLUSTER_WORKERS + 1)),
                         log_file=self.log_file("spark-worker-1"))
        print(f"spark    running  {config.master_url} (standalone: master + {CLUSTER_WORKERS} workers, "
              f"{config.worker_cores} core / {config.worker_memory} each; UI {config.ui_url})", file=out)

    def _up_connect(self, out: TextIO) -> None:
        config = self.spark_connect
        if not self.running("spark-connect"):
            # A server just killed (a test, the soak) may hold its port for a moment longer.
            procs.wait_until(lambda: not procs.port_in_use(config.port), f"port {config.port} released", 20,
                             alive=lambda: True)
            self._claim_ports("spark-connect", config.port)
            self._start("spark-connect", connect_svc.start(config, self.log_file("spark-connect"), os.environ))
            procs.wait_until(lambda: connect_svc.is_ready(config), f"Spark Connect server on {config.url}", 120,
                             alive=lambda: self.running("spark-connect"), log_file=self.log_file("spark-connect"))
            connect_svc.warm_up(config)
            if self.warm_checkpoints:
                from lockstep.spark.conf import job_environment
                from lockstep_dev import warm_checkpoints

                began = time.monotonic()
                done = warm_checkpoints.run(config.url, self.state.bucket,
                                            job_environment({**os.environ, **self.client_env()}))
                print(f"spark-connect warmed up by {len(done)} checkpoints in {time.monotonic() - began:.1f} s "
                      "(" + ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in done.items()) + ")", file=out)
        print(f"spark-connect running  {config.url} (master {config.master}; checkpoints in connect mode, the "
              f"default, use it through the spark_connect_default connection)", file=out)

    def _up_postgres(self, out: TextIO) -> None:
        config = self.postgres
        if not self.running("postgres"):
            self._claim_ports("postgres", config.port)
            self._start("postgres", postgres_svc.start(config, self.log_file("postgres")))
            procs.wait_until(lambda: postgres_svc.is_ready(config), f"PostgreSQL on 127.0.0.1:{config.port}", 60,
                             alive=lambda: self.running("postgres"), log_file=self.log_file("postgres"))
        postgres_svc.ensure_database(config)
        print(f"postgres running  127.0.0.1:{config.port} (Airflow's database, data in {config.data_dir})", file=out)

    def _up_airflow(self, out: TextIO) -> None:
        if self.state.airflow_db == POSTGRES:
            self._up_postgres(out)
        config = self.airflow
        if not self.running("airflow"):
            self._claim_ports("airflow", config.port)
            airflow_bin = shutil.which("airflow", path=str(Path(sys.executable).parent)) or "airflow"
            env = {**os.environ, **config.environment(self.connection_env())}
            env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
            self._start("airflow", airflow_svc.start(config, self.log_file("airflow"), env, airflow_bin))
            procs.wait_until(lambda: airflow_svc.is_ready(config), f"Airflow on {config.url}", 300,
                             alive=lambda: self.running("airflow"), log_file=self.log_file("airflow"))
        on = "" if self.state.airflow_db == SQLITE else f", its database on {self.state.airflow_db}"
        print(f"airflow  running  {config.url} (login admin / {config.admin_password() or '?'}{on})", file=out)

    def stop(self, name: str, out: TextIO = sys.stdout, kill: bool = False) -> None:
        """Stop one service (and its whole process group) if ``up`` started it; ``kill``: SIGKILL at once."""
        pid = self.state.pids.pop(name, None)
        if pid is None:
            return
        procs.stop_group(pid, marker(name), grace_seconds=0.0 if kill else 20.0)
        print(f"{name:8} {'killed' if kill else 'stopped'} (pid {pid})", file=out)
        self._save()

    def down(self, wipe: bool = False, out: TextIO = sys.stdout, kill: bool = False) -> None:
        """Stop every service, the last started first; ``kill``: SIGKILL at once (a test session's
        platform, whose data is thrown away: a broker that flushes hundreds of topics takes seconds)."""
        for name in reversed(self.services()):
            self.stop(name, out, kill=kill)
        if wipe and self.state_dir.exists():
            shutil.rmtree(self.state_dir)
            print(f"wiped {self.state_dir}", file=out)

    def address(self, service: str) -> str:
        if service.startswith("kafka"):
            return f"127.0.0.1:{self.kafka_node(service).port}"
        if service == "spark-master":
            return self._spark_cluster().master_url
        if service == "spark-connect":
            return self.spark_connect.url
        if service.startswith("spark-worker"):
            return f"http://127.0.0.1:{self.state.ports[service + '-ui']}"
        if service == "postgres":
            return f"127.0.0.1:{self.postgres.port}"
        return {"s3": self.s3.endpoint, "airflow": self.airflow.url, "registry": self.registry.url,
                "iceberg": self.iceberg.url}[service]

    def status(self) -> dict[str, ServiceStatus]:
        return {
            name: {"running": self.running(name), "pid": self.state.pids.get(name), "address": self.address(name),
                   "log": str(self.log_file(name))}
            for name in self.services()
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
        spark = {"conn_type": "spark", "host": self.spark_master}
        env = {
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(kafka),
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark),
        }
        config = self.kafka
        listener = config.secure_listener
        if listener is not None and listener.password_file.exists():
            # The same cluster through its SASL_SSL listeners (SCRAM-SHA-512 over TLS).
            secure = {"conn_type": "kafka", "extra": config.secure_client_config()}
            env["AIRFLOW_CONN_KAFKA_SECURE"] = json.dumps(secure)
        # Always named, running or not: connect is the default run mode, and a run against a server
        # that is down says which address and connection it tried (`lockstep dev up` starts it).
        connect = {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": self.spark_connect.port}
        env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"] = json.dumps(connect)
        # The Schema Registry, named the same way, running or not (lockstep.schema_registry reads extra.url).
        # No login: like Kafka's PLAINTEXT listener, it listens on 127.0.0.1 only.
        registry = {"conn_type": "http", "host": "127.0.0.1", "port": self.registry.port, "login": None,
                    "password": None, "extra": {"url": self.registry.url}}
        env["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"] = json.dumps(registry)
        # The Iceberg REST catalog: its extra is the catalog client's properties (lockstep.connections.iceberg_catalog).
        iceberg = {"conn_type": "iceberg", "host": self.iceberg.url, "extra": self.iceberg.client_properties()}
        env["AIRFLOW_CONN_ICEBERG_DEFAULT"] = json.dumps(iceberg)
        return env

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
