"""A local Schema Registry: Apicurio Registry (a Quarkus application) and its Confluent-compatible API.

Confluent's own registry is not served by the package registries this project installs from;
Apicurio Registry is, on Maven Central, and serves the Confluent API at ``/apis/ccompat/v7``, which
``confluent_kafka.schema_registry`` and Lockstep's registry client speak. ``make setup`` unpacks it
under ``.cache/apicurio-registry-<version>/`` (``lockstep.paths.registry_app_dir``).

Three of its defaults are overridden here: it would listen on every address (both its API and the
management port that serves ``/health``), so both are bound to 127.0.0.1; its storage would be an
in-memory H2 database, so schemas live in an H2 file under ``<dev dir>/registry/`` and survive
``lockstep dev down``/``up`` (``down --wipe`` deletes them); and it needs Java 21 or newer while the
rest of the platform runs on the machine's Java 17, so its ``java`` is chosen by
``lockstep.paths.registry_java``. Its default compatibility is NONE (Confluent's is BACKWARD):
clients set each subject's compatibility themselves.
"""
from __future__ import annotations

import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from lockstep.paths import registry_app_dir, registry_java
from lockstep_dev import procs

#: In the registry's command line (``.../.cache/apicurio-registry-3.3.3/quarkus-run.jar``).
MARKER = "apicurio-registry"
#: The Confluent-compatible API under the registry's HTTP root.
CCOMPAT_PATH = "/apis/ccompat/v7"
HEAP = "256m"


@dataclass(frozen=True)
class RegistryConfig:
    #: The HTTP API (the Confluent-compatible one among them).
    port: int
    #: Quarkus' management interface: ``/health/ready``, ``/health/live``, metrics.
    management_port: int
    #: ``<dev dir>/registry``: the H2 database file ``registry.mv.db`` is in here.
    data_dir: Path

    @property
    def url(self) -> str:
        """What Schema Registry clients are given: the Confluent-compatible API's root."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    @property
    def datasource_url(self) -> str:
        # H2 appends .mv.db to the path; the file is created on the first start.
        return f"jdbc:h2:file:{self.data_dir / 'registry'}"


def command(config: RegistryConfig, java: Path, app_dir: Path) -> list[str]:
    """The registry's JVM command line; system properties win over any QUARKUS_*/APICURIO_* environment."""
    return [
        str(java), f"-Xmx{HEAP}",
        "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={config.port}",
        "-Dquarkus.management.host=127.0.0.1", f"-Dquarkus.management.port={config.management_port}",
        f"-Dapicurio.datasource.url={config.datasource_url}",
        "-jar", str(app_dir / "quarkus-run.jar"),
    ]


def start(config: RegistryConfig, log_file: Path) -> int:
    """Start the registry detached, without waiting for it (``is_ready`` says when it serves)."""
    try:
        app_dir = registry_app_dir()
        java = registry_java()
    except FileNotFoundError as exc:
        raise procs.PlatformError(f"{exc} (or start the platform without it: `lockstep dev up --no-registry`)") \
            from None
    config.data_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "JAVA_HOME": str(java.parent.parent)}
    return procs.start_detached("registry", command(config, java, app_dir), log_file, env=env, cwd=config.data_dir)


def is_ready(config: RegistryConfig) -> bool:
    """The Confluent API lists subjects: the HTTP server is up and the storage is open."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    with opener.open(f"{config.url}/subjects", timeout=2) as response:
        return cast(int, response.status) == 200
