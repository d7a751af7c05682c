"""Apache Kafka 4.x in KRaft mode, run from the official jars: one node, or a cluster of three.

The jars come from Maven Central through ``kafka-pom.xml`` (``make setup``). Each node is a
separate JVM acting as broker and controller. One node runs internal topics with replication
factor 1; a cluster of three runs every topic with replication factor 3 and min ISR 2, like a
production cluster. The transaction max timeout is one hour so pipelines can use long
checkpoint intervals.

The cluster's nodes also have a SASL_SSL listener (SCRAM-SHA-512 over TLS, see
``lockstep_dev.security``) for clients; brokers and controllers talk PLAINTEXT on loopback.
"""
from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockstep.paths import kafka_jars_dir
from lockstep_dev import procs
from lockstep_dev.security import SecureListener

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
# "Failed authentication with /127.0.0.1 (... invalid credentials with SASL mechanism ...)"
logger.auth.name = org.apache.kafka.common.network.Selector
logger.auth.level = info
"""


@dataclass(frozen=True)
class KafkaNode:
    """One broker+controller JVM of the local Kafka: its ports and its data folder."""

    node_id: int
    port: int
    controller_port: int
    data_dir: Path
    #: The SASL_SSL listener's port (cluster only).
    secure_port: int | None = None


@dataclass(frozen=True)
class KafkaConfig:
    """The local Kafka: one node (the default) or a cluster of several combined broker+controller nodes.

    With three or more nodes every internal topic and every new topic is replicated three times
    with ``min.insync.replicas=2``, as production clusters run, so a pipeline keeps working with
    one broker down and a transaction coordinator can move to another broker.
    """

    nodes: tuple[KafkaNode, ...]
    heap: str = "768m"
    #: TLS files and SCRAM user of the nodes' SASL_SSL listeners (cluster only).
    secure: SecureListener | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def secure_listener(self) -> SecureListener | None:
        """``secure`` when every node serves a SASL_SSL listener with it, else None (one check that
        also narrows the type for the callers that read the listener's files)."""
        return self.secure if self.secure is not None and all(n.secure_port for n in self.nodes) else None

    @property
    def has_secure_listener(self) -> bool:
        return self.secure_listener is not None

    @property
    def secure_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.secure_port}" for n in self.nodes)

    def secure_client_config(self, bootstrap: str | None = None) -> dict[str, str]:
        """The SASL_SSL listener as a connection's extras (librdkafka names; reads the password file)."""
        assert self.secure is not None
        return {
            "bootstrap.servers": bootstrap or self.secure_bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": self.secure.mechanism,
            "sasl.username": self.secure.user,
            "sasl.password": self.secure.password(),
            "ssl.ca.location": str(self.secure.ca_file),
        }

    def _listener_properties(self, node: KafkaNode) -> list[str]:
        plain = f"PLAINTEXT://127.0.0.1:{node.port}"
        listener = self.secure_listener
        if listener is None or not node.secure_port:
            return [
                f"listeners={plain},CONTROLLER://127.0.0.1:{node.controller_port}",
                f"advertised.listeners={plain}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            ]
        secure, mechanism = f"SASL_SSL://127.0.0.1:{node.secure_port}", listener.mechanism
        prefix = "listener.name.sasl_ssl"
        return [
            f"listeners={plain},CONTROLLER://127.0.0.1:{node.controller_port},{secure}",
            f"advertised.listeners={plain},{secure}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
            # Clients only: SCRAM over TLS, credentials in the cluster metadata (no password here).
            f"sasl.enabled.mechanisms={mechanism}",
            f"{prefix}.sasl.enabled.mechanisms={mechanism}",
            f"{prefix}.{mechanism.lower()}.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
            f"{prefix}.ssl.keystore.type=PEM",
            f"{prefix}.ssl.keystore.location={listener.keystore_file}",
            f"{prefix}.ssl.truststore.type=PEM",
            f"{prefix}.ssl.truststore.location={listener.ca_file}",
            f"{prefix}.ssl.client.auth=none",
        ]

    @property
    def replication_factor(self) -> int:
        return 3 if len(self.nodes) >= 3 else 1

    @property
    def min_insync_replicas(self) -> int:
        return 2 if self.replication_factor >= 3 else 1

    def server_properties(self, node: KafkaNode) -> str:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        rf, isr = self.replication_factor, self.min_insync_replicas
        return "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={node.node_id}",
                f"controller.quorum.voters={voters}",
                *self._listener_properties(node),
                f"log.dirs={node.data_dir / 'logs'}",
                "num.partitions=1",
                f"default.replication.factor={rf}",
                f"min.insync.replicas={isr}",
                f"offsets.topic.replication.factor={rf}",
                "offsets.topic.num.partitions=4",
                f"transaction.state.log.replication.factor={rf}",
                f"transaction.state.log.min.isr={isr}",
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
                # A stopped broker's partitions move to the others within seconds, not 18 s.
                "broker.session.timeout.ms=6000",
                "broker.heartbeat.interval.ms=1000",
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


def _new_cluster_id() -> str:
    """Kafka's base64url UUID; one starting with '-' would be parsed as an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _formatted_cluster_id(node: KafkaNode) -> str | None:
    meta = node.data_dir / "logs" / "meta.properties"
    if not meta.exists():
        return None
    for line in meta.read_text().splitlines():
        if line.startswith("cluster.id="):
            return line.split("=", 1)[1].strip()
    return None


def cluster_id(config: KafkaConfig) -> str:
    """The id every node is formatted with: the one already on disk, or a new one."""
    for node in config.nodes:
        found = _formatted_cluster_id(node)
        if found:
            return found
    return _new_cluster_id()


def prepare(config: KafkaConfig, node: KafkaNode, cluster: str) -> Path:
    """Write the node's config and format its storage on first start; return the config path."""
    node.data_dir.mkdir(parents=True, exist_ok=True)
    props = node.data_dir / "server.properties"
    props.write_text(config.server_properties(node))
    (node.data_dir / "log4j2.properties").write_text(LOG4J2)
    if _formatted_cluster_id(node) is None:
        result = subprocess.run(
            [java_binary(), "-cp", classpath(), *_jvm_log_flags(node), "kafka.tools.StorageTool",
             "format", "-t", cluster, "-c", str(props)],
            capture_output=True, text=True, timeout=120,
        )
        if result.returncode != 0:
            raise procs.PlatformError(f"formatting Kafka storage in {node.data_dir} failed:\n{result.stdout}{result.stderr}")
    return props


def _jvm_log_flags(node: KafkaNode) -> list[str]:
    return [f"-Dlog4j2.configurationFile={node.data_dir / 'log4j2.properties'}"]


def start(config: KafkaConfig, node: KafkaNode, log_file: Path, cluster: str) -> int:
    props = prepare(config, node, cluster)
    argv = [
        java_binary(), f"-Xmx{config.heap}", f"-Xms{config.heap}", "-XX:+UseG1GC",
        "-Djava.awt.headless=true", *_jvm_log_flags(node),
        # More JVM options, as Kafka's own scripts take them (the test session's: the client compiler only).
        *os.environ.get("KAFKA_OPTS", "").split(),
        "-cp", classpath(), MARKER, str(props),
    ]
    return procs.start_detached(f"kafka-{node.node_id}", argv, log_file, env=os.environ)


def wait_for_leaders(admin: Any, topics: list[str], partitions: int, timeout_s: float = 60) -> None:
    """Until every partition of ``topics`` (just created, ``partitions`` each) has a leader in the broker's
    metadata: created is not yet led, and a producer that starts writing before gets NOT_LEADER_OR_FOLLOWER
    on part of its first batches (at 1,024 partitions a transactional producer's retries then went out
    of sequence until the batches expired). ``admin``: a confluent-kafka AdminClient."""
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(topics[0] if len(topics) == 1 else None, timeout=30).topics
        if all(t in meta and meta[t].error is None and len(meta[t].partitions) == partitions
               and all(p.leader >= 0 and p.error is None for p in meta[t].partitions.values()) for t in topics):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not every one of the {partitions} partitions of {', '.join(topics)} has a leader "
                               f"after {timeout_s:.0f} s")
        time.sleep(0.2)


def is_ready(bootstrap: str, brokers: int = 1) -> bool:
    """True once ``brokers`` brokers are registered (the first address must listen)."""
    from confluent_kafka.admin import AdminClient

    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    if not procs.port_in_use(int(port), host):
        return False  # not listening yet: skip the client and its connection-refused noise
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
    metadata = admin.list_topics(timeout=2)
    return len(metadata.brokers) >= brokers


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


def add_scram_user(bootstrap: str, secure: SecureListener) -> None:
    """Create (or reset) the SCRAM credential of the secure listener's user, over the PLAINTEXT
    listener: the password goes to the controller in a request, never on a command line."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    mechanism = getattr(ScramMechanism, secure.mechanism.replace("-", "_"))
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    upsert = UserScramCredentialUpsertion(secure.user, ScramCredentialInfo(mechanism, 8192),
                                          secure.password().encode())
    for future in admin.alter_user_scram_credentials([upsert], request_timeout=30).values():
        future.result()


def is_secure_ready(config: KafkaConfig) -> bool:
    """True once every node's SASL_SSL listener authenticates the SCRAM user (the credential
    reaches each broker through the metadata log, so not all at the same moment)."""
    from confluent_kafka.admin import AdminClient

    for node in config.nodes:
        extras = config.secure_client_config(f"127.0.0.1:{node.secure_port}")
        admin = AdminClient({**extras, "socket.timeout.ms": 2000, "log_level": 0})
        # A fresh client knows only this node: any answer means the node authenticated the user.
        admin.list_topics(timeout=3)
    return True
