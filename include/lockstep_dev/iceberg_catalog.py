"""A local Iceberg REST catalog: Iceberg's own REST catalog server over a SQLite catalog, its warehouse on
the platform's S3 server.

Iceberg publishes its REST catalog server (``org.apache.iceberg.rest.RESTCatalogServer``) among the test
fixtures of ``iceberg-open-api``; ``make setup`` resolves it and what it needs from Maven Central into
``.cache/jars/iceberg-rest`` (``jvm/maven/iceberg-rest-pom.xml``). It is configured by ``CATALOG_*``
variables: a ``CATALOG_`` prefix, ``_`` for ``.`` and ``__`` for ``-`` (``CATALOG_S3_PATH__STYLE__ACCESS`` is
``s3.path-style-access``). The catalog's tables live in ``<dev dir>/iceberg/catalog.db`` and their files in
``s3://<bucket>/iceberg/``: both survive ``lockstep dev down``/``up`` (``down --wipe`` deletes them).

The server listens on every address (it takes no host setting); like the Schema Registry it has no login.
"""
from __future__ import annotations

import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from lockstep.paths import iceberg_rest_jars
from lockstep_dev import procs
from lockstep_dev.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Config

#: In the server's command line.
MARKER = "org.apache.iceberg.rest.RESTCatalogServer"
HEAP = "192m"
#: The warehouse's folder in the platform's bucket.
WAREHOUSE_FOLDER = "iceberg"


@dataclass(frozen=True)
class CatalogConfig:
    port: int
    #: ``<dev dir>/iceberg``: the SQLite catalog ``catalog.db`` is in here.
    data_dir: Path
    s3: S3Config

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.s3.bucket}/{WAREHOUSE_FOLDER}"

    def client_properties(self) -> dict[str, str]:
        """What a pyiceberg client of this catalog is given (the ``iceberg_default`` connection's extra): the
        catalog's address and the S3 server its files are on."""
        return {"uri": self.url, "s3.endpoint": self.s3.endpoint, "s3.access-key-id": ACCESS_KEY,
                "s3.secret-access-key": SECRET_KEY, "s3.region": REGION, "s3.path-style-access": "true"}


def environment(config: CatalogConfig) -> dict[str, str]:
    """The server's settings (``CATALOG_*``): the SQLite catalog, the warehouse, S3FileIO on the S3 server, the port."""
    return {
        "CATALOG_URI": f"jdbc:sqlite:{config.data_dir / 'catalog.db'}",
        "CATALOG_WAREHOUSE": config.warehouse,
        "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
        "CATALOG_S3_ENDPOINT": config.s3.endpoint,
        "CATALOG_S3_PATH__STYLE__ACCESS": "true",
        "CATALOG_CLIENT_REGION": REGION,
        "CATALOG_REST_PORT": str(config.port),
        # The S3 server's keys through the AWS SDK's own variables, not as catalog properties: the server logs
        # its properties when it starts.
        "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION,
    }


def start(config: CatalogConfig, log_file: Path) -> int:
    """Start the catalog server detached, without waiting for it (``is_ready`` says when it serves)."""
    try:
        jars = iceberg_rest_jars()
    except FileNotFoundError as exc:
        raise procs.PlatformError(f"{exc} (or start the platform without it: `lockstep dev up --no-iceberg`)") \
            from None
    config.data_dir.mkdir(parents=True, exist_ok=True)
    argv = ["java", f"-Xmx{HEAP}", "-cp", f"{jars}/*", MARKER]
    return procs.start_detached("iceberg", argv, log_file, env={**os.environ, **environment(config)},
                                cwd=config.data_dir)


def is_ready(config: CatalogConfig) -> bool:
    """The catalog answers its configuration endpoint."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    with opener.open(f"{config.url}/v1/config", timeout=2) as response:
        return cast(int, response.status) == 200
