"""Static checks of docker-compose.yaml, Dockerfile and .dockerignore.

There is no Docker engine where the tests run, so the compose stack is checked as
data: images pinned, health checks and start order, the broker configured like
``lockstep dev up``'s, and Airflow given the same connection ids, types and keys
as ``lockstep dev env`` (lockstep_dev.platform.Platform.connection_env).
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
LOCK = ROOT / "requirements.lock"
MAVEN = ROOT / "jvm" / "maven"

INFRA = ("kafka", "minio", "postgres", "registry")
AIRFLOW_COMMANDS = {"db migrate", "api-server", "scheduler", "dag-processor", "triggerer"}
# Broker properties that name addresses or paths differ between the two setups on purpose.
KAFKA_ADDRESS_KEYS = {"controller.quorum.voters", "listeners", "advertised.listeners",
                      "listener.security.protocol.map", "log.dirs"}


# ---- helpers ---------------------------------------------------------------
@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict]:
    return compose["services"]


@pytest.fixture(scope="module")
def lock_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$", line.strip())
        if m:
            pins[_normalize(m.group(1))] = m.group(2)
    return pins


@pytest.fixture(scope="module")
def dockerfile() -> str:
    # Join continuation lines so one instruction is one line.
    return re.sub(r"\\\n", " ", DOCKERFILE.read_text())


@pytest.fixture
def platform(tmp_path):
    from lockstep_dev.platform import Platform

    return Platform(state_dir=tmp_path / "dev")  # reads/writes nothing until up()


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _command(service: dict) -> str:
    cmd = service.get("command")
    return " ".join(cmd) if isinstance(cmd, list) else str(cmd or "")


def _conditions(service: dict) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: "service_started" for name in deps}
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def _one_shot(services: dict) -> set[str]:
    """Services something waits on with service_completed_successfully."""
    return {dep for svc in services.values() for dep, cond in _conditions(svc).items()
            if cond == "service_completed_successfully"}


def _airflow_services(services: dict) -> dict[str, dict]:
    """The services of the Airflow image that run Airflow (the spark-connect service runs the
    same image with an entrypoint of its own)."""
    return {name: svc for name, svc in services.items() if "build" in svc and "entrypoint" not in svc}


def _image_tag(image: str) -> tuple[str, str | None]:
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:  # "host:port/repo" without a tag
        return image, None
    return name, tag


def _assert_pinned(image: str, where: str) -> None:
    name, tag = _image_tag(image)
    assert tag, f"{where}: image {image!r} has no tag"
    assert tag not in {"latest", "stable", "edge", "main"}, f"{where}: image {image!r} floats"
    assert re.search(r"\d", tag) and not re.fullmatch(r"\d+", tag), (
        f"{where}: image {image!r} is not pinned to a release (a bare major version floats)")


# ---- images ----------------------------------------------------------------
def test_every_service_image_is_pinned_or_built(services):
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, f"service {name} has neither image nor build"
        if "image" in svc:
            _assert_pinned(svc["image"], f"service {name}")


def test_kafka_image_is_the_version_the_local_platform_runs(services):
    pom = ET.parse(MAVEN / "kafka-pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    version = pom.find("m:properties/m:kafka.version", ns).text
    assert services["kafka"]["image"] == f"apache/kafka:{version}"


def test_dockerfile_base_images_are_pinned(dockerfile, lock_pins):
    froms = re.findall(r"^FROM\s+(\S+)", dockerfile, flags=re.M)
    assert froms, "Dockerfile has no FROM"
    for image in froms:
        _assert_pinned(image, "Dockerfile")
    airflow = [image for image in froms if image.startswith("apache/airflow:")]
    assert airflow == [f"apache/airflow:{lock_pins['apache-airflow']}-python3.11"], froms
    assert froms[-1] == airflow[0], "the final stage must be the Airflow image"


def test_dockerfile_python_pins_match_the_lock(dockerfile, lock_pins):
    pins = re.findall(r"[\"' ]([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.+!-]*)", dockerfile)
    assert pins, "Dockerfile pins nothing"
    for name, version in pins:
        assert lock_pins.get(_normalize(name)) == version, (
            f"Dockerfile pins {name}=={version}, requirements.lock has {lock_pins.get(_normalize(name))}")
    pinned = {_normalize(n) for n, _ in pins}
    for required in ("pyspark", "apache-airflow", "apache-airflow-providers-apache-spark",
                     "apache-airflow-providers-apache-kafka", "apache-airflow-providers-amazon",
                     "confluent-kafka", "kafka-python"):
        assert required in pinned, f"Dockerfile does not pin {required}"


def test_dockerfile_reinstalls_full_pyspark_last(dockerfile, lock_pins):
    runs = [line for line in dockerfile.splitlines() if "pip install" in line]
    reinstall = [i for i, line in enumerate(runs)
                 if "--no-deps" in line and "--force-reinstall" in line
                 and f"pyspark=={lock_pins['pyspark']}" in line]
    assert reinstall, "full pyspark is not reinstalled with --force-reinstall --no-deps"
    for line in runs[reinstall[-1] + 1:]:
        assert "pyspark" not in line and "--no-deps" in line, (
            f"a later pip install may overwrite pyspark's Python files: {line.strip()}")


def test_dockerfile_resolves_spark_kafka_jars_where_the_library_looks(dockerfile, monkeypatch):
    home = re.search(r"^ENV\s.*\bLOCKSTEP_HOME=(\S+)", dockerfile, flags=re.M)
    assert home, "Dockerfile does not set LOCKSTEP_HOME"
    mvn = re.search(r"mvn .*-s (\S+).*-f (\S+spark-kafka-pom\.xml).*dependency:copy-dependencies"
                    r".*-DoutputDirectory=(\S+)", dockerfile)
    assert mvn, "Dockerfile does not resolve the Spark Kafka connector with Maven"
    assert mvn.group(1).endswith("settings.xml")
    from lockstep import paths

    monkeypatch.setenv("LOCKSTEP_HOME", home.group(1))
    expected = paths.cache_dir() / "jars" / "spark-kafka"
    assert Path(mvn.group(3)) == expected
    copied = re.search(r"^COPY --from=\S+ (?:--chown=\S+ )?(\S+) (\S+)", dockerfile, flags=re.M)
    assert copied and Path(copied.group(2)) == expected
    assert re.search(r"^RUN .*openjdk-17", dockerfile, flags=re.M), "Spark needs Java 17 in the image"
    assert re.search(r"pip install .*--no-deps -e /opt/lockstep", dockerfile), "project not installed"


def test_dockerfile_builds_the_jvm_writer_where_the_library_looks(dockerfile, monkeypatch):
    home = re.search(r"^ENV\s.*\bLOCKSTEP_HOME=(\S+)", dockerfile, flags=re.M).group(1)
    build = re.search(r"bash (\S+/build-jvm-writer\.sh) python (\S+) \\?\s*(\S+\.jar)", dockerfile)
    assert build, "Dockerfile does not build Lockstep's JVM writer with jvm/build-jvm-writer.sh"
    assert build.group(1) == f"{home}/jvm/build-jvm-writer.sh"
    # The script finds the Java sources beside it (jvm/jvm-writer): the whole folder is copied.
    assert re.search(rf"^COPY .*\bjvm/ {home}/jvm/", dockerfile, flags=re.M)
    from lockstep import paths

    monkeypatch.setenv("LOCKSTEP_HOME", home)
    expected = paths.cache_dir() / "jars" / "lockstep" / "lockstep-jvm-writer.jar"
    assert Path(build.group(3)) == expected
    assert Path(build.group(2)) == paths.cache_dir() / "jars" / "spark-kafka"  # where Maven copied kafka-clients
    assert re.search(r"^RUN .*openjdk-17-jdk", dockerfile, flags=re.M), "javac is needed to build the writer"


def test_dockerignore_keeps_local_state_out_of_the_context():
    patterns = {line.strip().lstrip("/") for line in DOCKERIGNORE.read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    for required in (".venv", ".cache", "var"):
        assert required in patterns, f".dockerignore lacks {required}"
    assert {"__pycache__", "**/__pycache__"} & patterns


# ---- health and start order -----------------------------------------------
def test_long_running_services_have_healthchecks(services):
    one_shot = _one_shot(services)
    assert {"minio-init", "airflow-init", "registry-init"} <= one_shot
    for name, svc in services.items():
        if name in one_shot:
            assert str(svc.get("restart", "no")) == "no", f"one-shot {name} must not restart"
            continue
        check = svc.get("healthcheck")
        assert check and check.get("test") and not check.get("disable"), f"{name} has no healthcheck"


def test_kafka_healthcheck_talks_to_the_broker(services):
    test = services["kafka"]["healthcheck"]["test"]
    assert "kafka-broker-api-versions.sh --bootstrap-server localhost:9092" in " ".join(test)


def test_airflow_services_wait_for_healthy_infrastructure(services):
    airflow = _airflow_services(services)
    assert {_command(svc) for svc in airflow.values()} == AIRFLOW_COMMANDS
    init = next(name for name, svc in airflow.items() if _command(svc) == "db migrate")
    for name, svc in airflow.items():
        conditions = _conditions(svc)
        for infra in INFRA:
            assert conditions.get(infra) == "service_healthy", f"{name} does not wait for healthy {infra}"
        assert conditions.get("minio-init") == "service_completed_successfully", f"{name}: bucket first"
        if name != init:
            assert conditions.get(init) == "service_completed_successfully", f"{name} starts before migration"


def test_airflow_services_share_one_image_and_configuration(services):
    airflow = list(_airflow_services(services).values())
    first = airflow[0]
    for svc in airflow[1:]:
        assert svc["build"] == first["build"] and svc.get("image") == first.get("image")
        assert _env(svc) == _env(first)
        assert svc["volumes"] == first["volumes"]
    assert first["build"]["dockerfile"] == "Dockerfile"


def test_apiserver_health_and_port(services):
    api = next(svc for svc in services.values() if _command(svc) == "api-server")
    assert "/api/v2/monitor/health" in " ".join(api["healthcheck"]["test"])
    assert any(str(p).endswith(":8080") for p in api["ports"])


# ---- configuration ---------------------------------------------------------
def test_kafka_is_configured_for_transactions_on_one_node(services):
    env = _env(services["kafka"])
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_MAX_TIMEOUT_MS"] == "3600000"
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    # A second advertised listener for clients on the host, published on that port.
    host = [x for x in env["KAFKA_ADVERTISED_LISTENERS"].split(",") if x != "PLAINTEXT://kafka:9092"]
    assert len(host) == 1
    host_port = host[0].rsplit(":", 1)[1]
    assert any(str(p).endswith(f"{host_port}:{host_port}") for p in services["kafka"]["ports"])
    assert any(v.endswith(":/var/lib/kafka/data") for v in services["kafka"]["volumes"])
    assert env["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"


def test_kafka_broker_settings_match_the_local_platform(services, tmp_path):
    from lockstep_dev.kafka_nodes import KafkaConfig, KafkaNode

    node = KafkaNode(1, 1, 2, tmp_path)
    props = dict(line.split("=", 1) for line in KafkaConfig((node,)).server_properties(node).splitlines() if line)
    env = _env(services["kafka"])
    for key, value in props.items():
        if key in KAFKA_ADDRESS_KEYS:
            continue
        var = "KAFKA_" + key.upper().replace(".", "_")
        assert env.get(var) == value, f"{var}={env.get(var)!r}, `lockstep dev up` uses {key}={value}"


def test_airflow_environment(services):
    env = _env(next(iter(_airflow_services(services).values())))
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    db = urlparse(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert db.scheme.startswith("postgresql") and db.hostname == "postgres"
    assert db.path.lstrip("/") == _env(services["postgres"])["POSTGRES_DB"]
    assert env["AIRFLOW__CORE__AUTH_MANAGER"].endswith("simple_auth_manager.SimpleAuthManager")
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "admin:admin"
    api = next(name for name, svc in services.items() if _command(svc) == "api-server")
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == f"http://{api}:8080/execution/"
    assert env.get("AIRFLOW__API_AUTH__JWT_SECRET"), "components must share one JWT secret"


def test_repo_folders_are_mounted_where_airflow_and_lockstep_look(services):
    svc = next(iter(_airflow_services(services).values()))
    env = _env(svc)
    mounts = {}
    for volume in svc["volumes"]:
        source, target = str(volume).split(":")[:2]
        mounts[target] = source
    home = env["LOCKSTEP_HOME"]
    assert mounts[env["AIRFLOW__CORE__DAGS_FOLDER"]] == "./dags"
    assert mounts[env["AIRFLOW__CORE__PLUGINS_FOLDER"]] == "./plugins"
    assert mounts[f"{home}/include"] == "./include"
    # Airflow imports airflow_local_settings from $AIRFLOW_HOME/config (/opt/airflow in the official image).
    assert mounts["/opt/airflow/config"] == "./config"
    password_dir = str(Path(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]).parent)
    assert password_dir in mounts, "the generated admin password would not survive a container restart"


def test_named_volumes_are_declared(compose, services):
    declared = set(compose.get("volumes") or {})
    for name, svc in services.items():
        for volume in svc.get("volumes") or []:
            source = str(volume).split(":")[0]
            if not source.startswith((".", "/", "~")):
                assert source in declared, f"{name} mounts undeclared volume {source}"
    for infra in INFRA:
        assert services[infra].get("volumes"), f"{infra} keeps its data in no volume"


def test_connections_match_lockstep_dev_env(services, platform):
    expected = platform.connection_env()
    assert set(expected) == {"AIRFLOW_CONN_KAFKA_DEFAULT", "AIRFLOW_CONN_AWS_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT",
                             "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", "AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT",
                             "AIRFLOW_CONN_ICEBERG_DEFAULT"}
    for name, svc in _airflow_services(services).items():
        env = _env(svc)
        for var, raw in expected.items():
            assert var in env, f"{name} lacks {var}"
            want, got = json.loads(raw), json.loads(env[var])  # must be JSON, as lockstep.connections requires
            assert got["conn_type"] == want["conn_type"], var
            assert set(got) == set(want), f"{var}: keys {sorted(got)} != {sorted(want)}"
            assert set(got.get("extra") or {}) == set(want.get("extra") or {}), f"{var}: extra keys differ"
        spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert spark["host"] == json.loads(expected["AIRFLOW_CONN_SPARK_DEFAULT"])["host"]


def test_connection_addresses_point_at_compose_services(services):
    env = _env(next(iter(_airflow_services(services).values())))
    kafka = json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"]["bootstrap.servers"]
    host, port = kafka.rsplit(":", 1)
    assert host in services
    assert f"PLAINTEXT://{host}:{port}" in _env(services[host])["KAFKA_ADVERTISED_LISTENERS"].split(",")

    aws = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
    endpoint = urlparse(aws["extra"]["endpoint_url"])
    assert endpoint.hostname == "minio" and endpoint.port == 9000
    minio = _env(services["minio"])
    assert (aws["login"], aws["password"]) == (minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"])
    assert len(minio["MINIO_ROOT_PASSWORD"]) >= 8, "MinIO refuses root passwords under 8 characters"


def test_client_env_is_complete_and_uses_the_platform_bucket(services, platform):
    env = _env(next(iter(_airflow_services(services).values())))
    missing = set(platform.client_env()) - set(env)
    assert not missing, f"`lockstep dev env` exports {sorted(missing)} that the compose stack does not set"
    assert env["LOCKSTEP_S3_BUCKET"] == platform.s3.bucket
    init = _command(services["minio-init"])
    assert f"mb --ignore-existing lockstep/{platform.s3.bucket}" in init


def test_the_spark_connect_service_runs_locksteps_server_and_airflow_is_pointed_at_it(services):
    """The same server as `lockstep dev up` (lockstep_dev.spark_connect), reachable in the network,
    and the connection connect-mode pipelines read (spark_target.SPARK_CONNECT_CONN_ID)."""
    import json

    from lockstep.spark.target import SPARK_CONNECT_CONN_ID, connect_url

    connect = services["spark-connect"]
    entry = connect["entrypoint"]
    assert entry[:3] == ["python", "-m", "lockstep_dev.spark_connect"]
    port = entry[entry.index("--port") + 1]
    assert entry[entry.index("--host") + 1] == "0.0.0.0"
    conn = json.loads(_env(next(iter(_airflow_services(services).values())))[f"AIRFLOW_CONN_{SPARK_CONNECT_CONN_ID.upper()}"])
    assert connect_url(conn["host"], conn["port"]) == f"sc://spark-connect:{port}"


def test_the_registry_service_is_the_local_platforms_and_airflow_is_pointed_at_it(services):
    """The Apicurio version `lockstep dev up` runs, its data in a file on its volume (not in memory), and
    the schema_registry_default connection naming its Confluent-compatible API inside the network."""
    from lockstep.paths import REGISTRY_VERSION
    from lockstep_dev.registry import CCOMPAT_PATH

    registry = services["registry"]
    assert registry["image"] == f"apicurio/apicurio-registry:{REGISTRY_VERSION}"
    datasource = _env(registry)["APICURIO_DATASOURCE_URL"]
    assert datasource.startswith("jdbc:h2:file:")
    mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in registry["volumes"]}
    assert any(datasource.removeprefix("jdbc:h2:file:").startswith(target + "/") for target in mounts), mounts
    assert services["registry-init"]["volumes"] == registry["volumes"], "the init service prepares that volume"
    conn = json.loads(_env(next(iter(_airflow_services(services).values())))["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"])
    assert conn["extra"]["url"] == f"http://registry:{conn['port']}{CCOMPAT_PATH}" and conn["host"] == "registry"
    assert any(str(p).endswith(f":{conn['port']}") for p in registry["ports"]), "the API's container port"
