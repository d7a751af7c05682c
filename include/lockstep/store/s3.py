"""The S3 client of the store's modules: the calls they make (`S3Client`, a Protocol), and the one
place a real one is made (`s3_client`, boto3). Nothing outside ``lockstep.store`` imports boto3; the
client's arguments come from an AWS connection (``lockstep.connections.s3_client_kwargs``)."""
from __future__ import annotations

__all__ = [
    "S3Client", "warm_models",
]

from collections.abc import Iterable, Mapping
from typing import Any, NotRequired, Protocol, Required, TypedDict


class Body(Protocol):
    def read(self) -> bytes: ...


class GetObjectOutput(TypedDict):
    Body: Body
    ETag: str


class ObjectSummary(TypedDict):
    Key: str
    Size: NotRequired[int]


class CommonPrefix(TypedDict):
    Prefix: str


class ListObjectsOutput(TypedDict, total=False):
    """A page of ``list_objects_v2``: S3 leaves out the lists that would be empty."""

    Contents: list[ObjectSummary]
    CommonPrefixes: list[CommonPrefix]


class ListObjectsArgs(TypedDict, total=False):
    Bucket: Required[str]
    Prefix: Required[str]
    Delimiter: str
    StartAfter: str


class S3Paginator(Protocol):
    def paginate(self, *, Bucket: str, Prefix: str, Delimiter: str = ...,
                 StartAfter: str = ...) -> Iterable[ListObjectsOutput]: ...


class CopySource(TypedDict):
    Bucket: str
    Key: str


class S3Client(Protocol):
    """The S3 calls the store makes (`lockstep.store.checkpoint_store`, `lockstep.store.state_files`), with the
    arguments they pass and the fields they read: a boto3 S3 client (`s3_client`), or an in-memory S3 in
    tests (``tests/support/fake_s3.FakeS3``). Failures are botocore's ``ClientError`` / ``BotoCoreError``
    either way."""

    def get_object(self, *, Bucket: str, Key: str) -> GetObjectOutput: ...

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, IfNoneMatch: str = ..., IfMatch: str = ...,
                   ContentType: str = ...) -> object: ...

    def head_object(self, *, Bucket: str, Key: str) -> object: ...

    def delete_object(self, *, Bucket: str, Key: str) -> object: ...

    def copy_object(self, *, Bucket: str, Key: str, CopySource: CopySource) -> object: ...

    def list_objects_v2(self, *, Bucket: str, Prefix: str) -> ListObjectsOutput: ...

    def get_paginator(self, operation_name: str, /) -> S3Paginator: ...


def s3_client(client_kwargs: Mapping[str, Any], timeout_s: float | None = None,
              max_pool_connections: int | None = None) -> S3Client:
    """A boto3 S3 client (``client_kwargs``: endpoint, credentials, region): patient by default (DAG
    tasks), or one that gives up after about ``timeout_s`` seconds per call (a page view, a DAG file
    being parsed). ``max_pool_connections``: the connections it keeps to S3, for a caller whose threads
    share it (the Checkpoints page reads a pipeline's checkpoints in parallel); botocore's default
    otherwise."""
    import boto3
    from botocore.config import Config

    pool = {} if max_pool_connections is None else {"max_pool_connections": max_pool_connections}
    # Path-style addressing works against MinIO, moto and AWS alike.
    if timeout_s is None:
        config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5, "mode": "standard"}, **pool)
    else:
        config = Config(s3={"addressing_style": "path"}, connect_timeout=timeout_s, read_timeout=timeout_s,
                        retries={"max_attempts": 2, "mode": "standard"}, **pool)
    client: S3Client = boto3.client("s3", config=config, **client_kwargs)
    return client


def warm_models() -> None:
    """boto3's default session with the S3 models botocore reads from its JSON files loaded (the service, its
    endpoint rules, the listing's paginator), so that an `s3_client` built later in this process, or in one
    forked from it, reuses them: about 0.08 s of CPU a client otherwise. The client built for it, with
    placeholder credentials and endpoint, makes no call and is dropped: no connection is opened."""
    import boto3

    client = boto3.client("s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
                          aws_access_key_id="preload", aws_secret_access_key="preload")
    client.get_paginator("list_objects_v2")
