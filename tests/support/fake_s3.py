"""An in-memory S3 client with the calls ``CheckpointStore`` makes (``lockstep.store.checkpoint_store.S3Client``),
for unit tests of pure logic.

Only what the store relies on is modelled, with S3's own semantics: ``put_object`` with
``IfNoneMatch="*"`` creates only if absent and ``IfMatch=<etag>`` replaces only that version (both
fail with ``PreconditionFailed``, as S3 and MinIO answer), ``get_object`` / ``head_object`` of a
missing key fail with ``NoSuchKey`` / ``404``, and ``list_objects_v2`` pages in key order with
``Prefix``, ``Delimiter``, ``StartAfter`` and continuation tokens. Errors are botocore's
``ClientError`` so the store classifies them exactly as it does a real server's. Integration tests
use the real S3 server; this fake never stands in for it there.
"""
from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError


def _error(code: str, status: int, operation: str, message: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message or code},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


class FakeS3:
    """Buckets of bytes keyed by name; ``page_size`` is S3's MaxKeys default (1000) unless a test
    lowers it to make the store page through listings."""

    def __init__(self, page_size: int = 1000) -> None:
        self.objects: dict[tuple[str, str], tuple[bytes, str]] = {}
        self.page_size = page_size

    # ---- what tests look at ---------------------------------------------------------------
    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        return sorted(k for b, k in self.objects if b == bucket and k.startswith(prefix))

    def body(self, bucket: str, key: str) -> bytes:
        return self.objects[(bucket, key)][0]

    # ---- the client surface -----------------------------------------------------------------
    def put_object(self, *, Bucket: str, Key: str, Body: bytes, IfNoneMatch: str | None = None,
                   IfMatch: str | None = None, **_: Any) -> dict[str, Any]:
        existing = self.objects.get((Bucket, Key))
        if IfNoneMatch is not None:
            if IfNoneMatch != "*":
                raise _error("NotImplemented", 501, "PutObject", "only If-None-Match: * is supported")
            if existing is not None:
                raise _error("PreconditionFailed", 412, "PutObject", "At least one of the pre-conditions failed")
        if IfMatch is not None and (existing is None or existing[1] != IfMatch):
            code = "NoSuchKey" if existing is None else "PreconditionFailed"
            raise _error(code, 404 if existing is None else 412, "PutObject")
        body = bytes(Body)
        etag = '"' + hashlib.md5(body).hexdigest() + '"'
        self.objects[(Bucket, Key)] = (body, etag)
        return {"ETag": etag}

    def copy_object(self, *, Bucket: str, Key: str, CopySource: dict[str, str], **_: Any) -> dict[str, Any]:
        found = self.objects.get((CopySource["Bucket"], CopySource["Key"]))
        if found is None:
            raise _error("NoSuchKey", 404, "CopyObject")
        self.objects[(Bucket, Key)] = found
        return {"CopyObjectResult": {"ETag": found[1]}}

    def get_object(self, *, Bucket: str, Key: str, **_: Any) -> dict[str, Any]:
        found = self.objects.get((Bucket, Key))
        if found is None:
            raise _error("NoSuchKey", 404, "GetObject", "The specified key does not exist.")
        return {"Body": io.BytesIO(found[0]), "ETag": found[1], "ContentLength": len(found[0])}

    def head_object(self, *, Bucket: str, Key: str, **_: Any) -> dict[str, Any]:
        found = self.objects.get((Bucket, Key))
        if found is None:
            raise _error("404", 404, "HeadObject", "Not Found")
        return {"ETag": found[1], "ContentLength": len(found[0])}

    def delete_object(self, *, Bucket: str, Key: str, **_: Any) -> dict[str, Any]:
        self.objects.pop((Bucket, Key), None)  # S3 answers 204 whether or not the key existed
        return {}

    def list_objects_v2(self, *, Bucket: str, Prefix: str = "", Delimiter: str | None = None,
                        StartAfter: str | None = None, ContinuationToken: str | None = None,
                        MaxKeys: int | None = None, **_: Any) -> dict[str, Any]:
        """One page: keys (and common prefixes, with a delimiter) after ``StartAfter`` or the token,
        in byte order, at most ``MaxKeys`` entries between them."""
        after = ContinuationToken if ContinuationToken is not None else StartAfter
        limit = self.page_size if MaxKeys is None else MaxKeys
        entries: list[tuple[str, bool]] = []  # (key or common prefix, is a common prefix)
        for key in self.keys(Bucket, Prefix):
            if Delimiter and Delimiter in key[len(Prefix):]:
                rolled = key[:len(Prefix) + key[len(Prefix):].index(Delimiter) + len(Delimiter)]
                if entries and entries[-1] == (rolled, True):
                    continue
                if after is not None and rolled <= after:
                    continue
                entries.append((rolled, True))
            elif after is None or key > after:
                entries.append((key, False))
        page, more = entries[:limit], len(entries) > limit
        result: dict[str, Any] = {"KeyCount": len(page), "IsTruncated": more, "Prefix": Prefix}
        contents = [{"Key": k, "ETag": self.objects[(Bucket, k)][1], "Size": len(self.objects[(Bucket, k)][0])}
                    for k, common in page if not common]
        prefixes = [{"Prefix": k} for k, common in page if common]
        if contents:
            result["Contents"] = contents
        if prefixes:
            result["CommonPrefixes"] = prefixes
        if more:
            result["NextContinuationToken"] = page[-1][0]
        return result

    def get_paginator(self, operation: str) -> _Paginator:
        if operation != "list_objects_v2":
            raise NotImplementedError(f"FakeS3 pages only list_objects_v2, not {operation}")
        return _Paginator(self)


class _Paginator:
    def __init__(self, s3: FakeS3) -> None:
        self._s3 = s3

    def paginate(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            page = self._s3.list_objects_v2(**kwargs, **({"ContinuationToken": token} if token else {}))
            yield page
            if not page["IsTruncated"]:
                return
            token = page["NextContinuationToken"]
