"""A single-node Apache Kafka 4.x broker in KRaft mode, run from the official jars.

The jars come from Maven Central through ``kafka-pom.xml`` (``make setup``). The
broker is configured for transactions on one node: replication factor and min
ISR 1 for the transaction state log, and a transaction max timeout of one hour so
pipelines can use long checkpoint intervals.
"""
from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from lockstep.dev import procs
from lockstep.paths import kafka_jars_dir

MARKER = "kafka.Kafka"

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = STDOUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
logger.txn.name = kafka.coordinator.transaction
logger.txn.level = info
"""


@dataclass(frozen=True)
class KafkaConfig:
    port: int
    controller_port: int
    data_dir: Path
    heap: str = "768m"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def server_properties(self) -> str:
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                f"log.dirs={self.data_dir / 'logs'}",
                "num.partitions=1",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=4",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=4",
                # Long checkpoint intervals need long transactions (DESIGN: commit
                # must happen before transaction.timeout.ms, capped by this).
                "transaction.max.timeout.ms=3600000",
                # Abort timed-out transactions within a second rather than ten, so a
                # timed-out checkpoint is detected promptly (and tests stay quick).
                "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=true",
                "log.retention.check.interval.ms=5000",
                "",
            ]
        )


def classpath() -> str:
    jars = kafka_jars_dir()
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise procs.PlatformError(
            f"Kafka jars not found in {jars}. Run `make setup` (resolves them from Maven Central with Maven)."
        )
    return f"{jars}/*"


def java_binary() -> str:
    java = shutil.which("java")
    if java is None:
        raise procs.PlatformError("Java 17 is required to run Kafka but `java` is not on PATH (install openjdk-17-jre).")
    return java


def _cluster_id() -> str:
    """Kafka's base64url UUID; one starting with '-' would be parsed as an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def prepare(config: KafkaConfig) -> Path:
    """Write the config and format the storage on first start; return the config path."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    props = config.data_dir / "server.properties"
    props.write_text(config.server_properties())
    (config.data_dir / "log4j2.properties").write_text(LOG4J2)
    if not (config.data_dir / "logs" / "meta.properties").exists():
        result = subprocess.run(
            [java_binary(), "-cp", classpath(), *_jvm_log_flags(config), "kafka.tools.StorageTool",
             "format", "-t", _cluster_id(), "-c", str(props)],
            capture_output=True, text=True, timeout=120,
        )
        if result.returncode != 0:
            raise procs.PlatformError(f"formatting Kafka storage in {config.data_dir} failed:\n{result.stdout}{result.stderr}")
    return props


def _jvm_log_flags(config: KafkaConfig) -> list[str]:
    return [f"-Dlog4j2.configurationFile={config.data_dir / 'log4j2.properties'}"]


def start(config: KafkaConfig, log_file: Path) -> int:
    props = prepare(config)
    argv = [
        java_binary(), f"-Xmx{config.heap}", f"-Xms{config.heap}", "-XX:+UseG1GC",
        "-Djava.awt.headless=true", *_jvm_log_flags(config),
        "-cp", classpath(), MARKER, str(props),
    ]
    return procs.start_detached("kafka", argv, log_file, env=os.environ)


def is_ready(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient

    host, port = bootstrap.rsplit(":", 1)
    if not procs.port_in_use(int(port), host):
        return False  # not listening yet: skip the client and its connection-refused noise
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
    metadata = admin.list_topics(timeout=2)
    return bool(metadata.brokers)


def warm_up(bootstrap: str) -> None:
    """Load the transaction and group coordinators now rather than on a pipeline's first
    call, when a fresh broker would answer COORDINATOR_LOAD_IN_PROGRESS for a while."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as KTP

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "lockstep-dev-warm-up", "log_level": 0})
    producer.init_transactions(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lockstep-dev-warm-up", "log_level": 0})
    try:
        procs.wait_until(lambda: consumer.committed([KTP("__consumer_offsets", 0)], timeout=5) is not None,
                         f"Kafka group coordinator on {bootstrap}", 60)
    finally:
        consumer.close()
