"""A local S3 API server (moto's server) with the project's bucket.

moto's server honours conditional writes (``If-None-Match: *`` and ``If-Match``),
which the checkpoint store relies on for atomic claims. It keeps objects in
memory: stopping it discards the checkpoints (see docs/platform.md).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from lockstep.dev import procs

MARKER = "moto.server"
ACCESS_KEY = "lockstep"
SECRET_KEY = "lockstep-secret"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Config:
    port: int
    bucket: str = "lockstep"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start(config: S3Config, log_file: Path) -> int:
    argv = [sys.executable, "-m", MARKER, "-H", "127.0.0.1", "-p", str(config.port)]
    return procs.start_detached("s3", argv, log_file, env=os.environ)


def client(config: S3Config):
    import boto3

    return boto3.client(
        "s3", endpoint_url=config.endpoint, aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, region_name=REGION,
    )


def is_ready(config: S3Config) -> bool:
    client(config).list_buckets()
    return True


def ensure_bucket(config: S3Config) -> None:
    s3 = client(config)
    names = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if config.bucket not in names:
        s3.create_bucket(Bucket=config.bucket)
