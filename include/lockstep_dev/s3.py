"""A local S3 API server (MinIO, single drive) with the project's bucket.

MinIO honours conditional writes (``If-None-Match: *`` and ``If-Match``), which
the checkpoint store relies on for atomic claims, and keeps objects on disk under
``<dev dir>/s3/data``: checkpoints and savepoints survive ``lockstep dev down``;
``down --wipe`` deletes them with the rest of the dev dir. The binary is built
from MinIO's Go module by ``make setup`` (see docs/platform.md).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict, cast

from lockstep.paths import minio_binary
from lockstep_dev import procs

if TYPE_CHECKING:
    from lockstep.store.checkpoint_store import S3Client

#: In MinIO's command line (``<repo>/.cache/bin/minio server <data> ...``).
MARKER = "/bin/minio server"
#: MinIO's root user and password (it refuses passwords under 8 characters); the same in docker-compose.yaml.
ACCESS_KEY = "lockstep"
SECRET_KEY = "lockstep-secret"
REGION = "us-east-1"


class _Bucket(TypedDict):
    Name: str


class _ListBucketsOutput(TypedDict, total=False):
    Buckets: list[_Bucket]


if TYPE_CHECKING:  # the store's module imports botocore, which `lockstep dev` commands need not load
    class DevS3Client(S3Client, Protocol):
        """A boto3 S3 client of the local server: the store's calls, and the bucket calls the platform
        makes to find out whether the server is up and to create the bucket."""

        def list_buckets(self) -> _ListBucketsOutput: ...

        def create_bucket(self, *, Bucket: str) -> object: ...


@dataclass(frozen=True)
class S3Config:
    port: int
    bucket: str = "lockstep"
    #: ``<dev dir>/s3``: MinIO's drive is ``data/`` in here, its (unused) TLS certs folder ``certs/``.
    data_dir: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def server_dir(self) -> Path:
        """``data_dir``, which only starting the server needs (a client knows the port only)."""
        if self.data_dir is None:
            raise ValueError("S3Config.data_dir is needed to start the S3 server")
        return self.data_dir

    @property
    def drive_dir(self) -> Path:
        return self.server_dir / "data"


def start(config: S3Config, log_file: Path) -> int:
    try:
        binary = minio_binary()
    except FileNotFoundError as exc:
        raise procs.PlatformError(str(exc)) from None
    config.drive_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        str(binary), "server", str(config.drive_dir),
        "--address", f"127.0.0.1:{config.port}",
        # Without these MinIO creates ~/.minio and ~/.minio/certs (nothing is kept there: no TLS, and
        # the configuration lives on the drive).
        "--config-dir", str(config.server_dir / "config"), "--certs-dir", str(config.server_dir / "certs"),
        # No banner and no update check against dl.min.io; errors are still logged.
        "--quiet", "--anonymous",
    ]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MINIO_")},  # a user's MinIO settings stay theirs
        "MINIO_ROOT_USER": ACCESS_KEY,
        "MINIO_ROOT_PASSWORD": SECRET_KEY,
        # No web console: no second listener to place on a free port.
        "MINIO_BROWSER": "off",
    }
    return procs.start_detached("s3", argv, log_file, env=env)


def client(config: S3Config, max_attempts: int | None = None) -> DevS3Client:
    import boto3
    from botocore.config import Config

    return cast("DevS3Client", boto3.client(
        "s3", endpoint_url=config.endpoint, aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, region_name=REGION,
        config=Config(retries={"max_attempts": max_attempts}) if max_attempts else None,
    ))


def is_ready(config: S3Config) -> bool:
    # An authenticated call, not /minio/health/live: that answers 200 before MinIO has loaded its
    # drive. One attempt per poll; the caller's loop does the waiting.
    client(config, max_attempts=1).list_buckets()
    return True


def ensure_bucket(config: S3Config) -> None:
    s3 = client(config)
    names = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if config.bucket not in names:
        s3.create_bucket(Bucket=config.bucket)
