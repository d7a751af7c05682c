"""A stateful pipeline's state files in S3: immutable Parquet objects the state manifests name.

Layout under ``s3://bucket/<prefix>/<pipeline>/``, beside the checkpoints::

    state/000000000042/kg-00007.parquet        key group 7's state after checkpoint 42 (a base)
    state/000000000043/kg-00007.delta.parquet  the keys of group 7 that checkpoint 43 touched (a delta)
    state/000000000044/deltas.parquet          the deltas of every group checkpoint 44 changed (its pack)

A checkpoint that changes several groups without rewriting their bases writes their deltas as one
pack, which each of those groups' chains names (`lockstep.store.state_chain.of_group` takes a group's
rows of it): a restore on a new host then reads a file per checkpoint, not one per group and
checkpoint (at 10M keys of dedup state, 32 groups with 13 deltas each were 448 files, most of them a
few rows; each file read costs a request and a decode).

A checkpoint's run writes its files before ``prepared.json``; nothing ever rewrites one. Which files
are the pipeline's state is decided by the completed checkpoint's manifest
(`lockstep.model.state_manifest.StateManifest`), never by listing: files of a checkpoint that did not complete
are not read, and :func:`unreferenced` picks them for deletion.

Two attempts of one checkpoint's run (the run task's retry, and a slow first attempt still going) may
both upload a group's file. Each state file is created only if its name is free
(:meth:`StateFiles.create`, S3 ``If-None-Match: *``, as claims are), so no attempt replaces a file a
manifest may already name: when the name is taken by the same bytes (a deterministic retry) the file
is reused; when by other bytes, this attempt's file goes under a name of its content beside it::

    state/000000000043/kg-00007.delta.3f9a…(32 hex).parquet   (`content_key`)
"""
from __future__ import annotations

__all__ = [
    "StateFiles",
]

import json
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from lockstep.errors import MetadataError, TransientError
from lockstep.store.keys import checkpoint_folder
from lockstep.store.state_cache import StateCache, digest

if TYPE_CHECKING:
    import pyarrow as pa

    from lockstep.model.state_manifest import StateManifest
    from lockstep.store.s3 import S3Client
    from lockstep.tables.pins import TableVersion

#: The way out of state files changed or deleted outside Lockstep (the last words of those errors).
RESTORE_WAY_OUT = ("restore the pipeline from a savepoint or an earlier completed checkpoint whose state is intact "
                   "(lockstep run --restore-from <savepoint> or checkpoint:<id>)")
REKEY_SCHEMA = "lockstep.state.rekey/1"
#: State files read at once (`StateFiles.chains`): S3 round trips and Parquet decoding overlap.
READ_THREADS = 8
#: ... and written: a checkpoint's deltas, one per touched group (31 of 32 at 10M keys of dedup state),
#: took 0.46 s one after another, most of it each request's round trip.
WRITE_THREADS = 8


class StateFiles:
    def __init__(self, s3: S3Client, bucket: str, root: str, cache: StateCache | None | bool = True) -> None:
        self._s3 = s3
        self.bucket = bucket
        self.root = root.strip("/")
        #: decoded files by content digest (`lockstep.store.state_cache`); True: as the environment says
        self.cache = StateCache.from_env() if cache is True else cache or None
        #: the cache's writes held back (:meth:`caching_later`), and those under way (:meth:`settle_cache`)
        self._later: list[tuple[str, pa.Table]] | None = None
        self._caching = ThreadPoolExecutor(1, thread_name_prefix="lockstep-state-cache")
        self._cached: list[Future[object]] = []

    @property
    def prefix(self) -> str:
        return f"{self.root}/state/"

    def key(self, checkpoint_id: int, group: int, delta: bool = False) -> str:
        """A base (``kg-00007.parquet``) or a delta (``kg-00007.delta.parquet``, `lockstep.store.state_chain`)."""
        return f"{checkpoint_folder(self.prefix, checkpoint_id)}kg-{group:05d}{'.delta' if delta else ''}.parquet"

    def pack_key(self, checkpoint_id: int) -> str:
        """The deltas of every group a checkpoint changed, in one file (``deltas.parquet``)."""
        return f"{checkpoint_folder(self.prefix, checkpoint_id)}deltas.parquet"

    def table_key(self, checkpoint_id: int, name: str, delta: bool = False) -> str:
        """A table's base (``table-customers.parquet``) or delta (``table-customers.delta.parquet``) written by
        checkpoint ``checkpoint_id`` (`lockstep.tables.materialize`)."""
        return f"{checkpoint_folder(self.prefix, checkpoint_id)}table-{name}{'.delta' if delta else ''}.parquet"

    def adopted_key(self, savepoint: str, source_key: str) -> str:
        """Where an adopted savepoint's state file is kept: ``state/adopted/<savepoint>/<its folder>/<its
        name>``, apart from this pipeline's own checkpoints' folders (the same checkpoint id is another
        checkpoint here). Garbage collection never deletes these: it cannot tell a copy in progress."""
        return f"{self.prefix}adopted/{savepoint}/" + "/".join(source_key.rsplit("/", 2)[-2:])

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def put(self, key: str, body: bytes) -> None:
        """Write ``key`` whatever is there: for records meant to be replaced (``rekey.json``). A state
        file a manifest may name is written with :meth:`create` instead."""
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=body,
                                ContentType="application/vnd.apache.parquet")
        except (ClientError, BotoCoreError) as exc:
            raise TransientError(f"could not write state file {self.url(key)}: {exc}") from exc

    def get(self, key: str, checkpoint: int) -> bytes:
        try:
            return bytes(self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
                raise MetadataError(self.url(key), f"is named by the state manifest of checkpoint {checkpoint} but "
                                                   "does not exist: the state was deleted outside Lockstep; "
                                                   + RESTORE_WAY_OUT) from exc
            raise TransientError(f"could not read state file {self.url(key)}: {exc}") from exc
        except BotoCoreError as exc:
            raise TransientError(f"could not read state file {self.url(key)}: {exc}") from exc

    def written(self, key: str) -> tuple[pa.Table, str, int] | None:
        """A state file an earlier attempt may have written under ``key``: decoded, with its digest and size;
        None when there is none. (A table's version is taken from its first attempt's file, `lockstep.tables.materialize`.)"""
        from lockstep.store import state_chain

        body = self._optional(key, "state file ")
        if body is None:
            return None
        return state_chain.read(body), digest(body), len(body)

    def _optional(self, key: str, what: str = "") -> bytes | None:
        """The object ``key``'s bytes, or None when there is none (a read that fails otherwise is transient)."""
        try:
            return bytes(self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
                return None
            raise TransientError(f"could not read {what}{self.url(key)}: {exc}") from exc
        except BotoCoreError as exc:
            raise TransientError(f"could not read {what}{self.url(key)}: {exc}") from exc

    def copy(self, source_key: str, key: str, source_bucket: str | None = None) -> None:
        """Copy a state file (of another pipeline, possibly in another bucket of the same S3) to ``key``."""
        try:
            self._s3.copy_object(Bucket=self.bucket, Key=key,
                                 CopySource={"Bucket": source_bucket or self.bucket, "Key": source_key})
        except (ClientError, BotoCoreError) as exc:
            raise TransientError(f"could not copy state file {self.url(source_key)} to {self.url(key)}: {exc}") from exc

    def listing(self) -> list[str]:
        try:
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix)
            return [o["Key"] for page in pages for o in page.get("Contents", [])]
        except (ClientError, BotoCoreError) as exc:
            raise TransientError(f"could not list state files under {self.url(self.prefix)}: {exc}") from exc

    def create(self, key: str, body: bytes) -> str:
        """Write a state file under ``key`` unless that name is taken; the key that holds ``body``.

        Why a conditional create and not a name unique to each attempt: an attempt has no identity the
        claim pins (a run reads no clock and no random), and a deterministic retry, the common case,
        then writes nothing new and keeps the layout's plain names. What matters is that a name, once
        created, always holds the same bytes, so the digest a manifest records for it stays true: a
        taken name is reused only when it holds our bytes (`placement`); other bytes go under their
        content's name (`content_key`), again only if free. Two names of one checkpoint's folder can
        then exist; garbage collection deletes whichever no retained manifest names."""
        ours = digest(body)
        target = key
        while True:  # at most twice: the layout's name, then the content's
            theirs = self._create_if_absent(target, body)
            if theirs is None:
                return target
            placed = placement(key, ours, target, theirs)
            if placed == target:
                return target
            if placed is None:
                raise MetadataError(self.url(target), f"holds other bytes (digest {theirs}) than its name says "
                                                      f"({ours}), so checkpoint {self.checkpoint_of(key)} cannot "
                                                      "write its state file: it was changed outside Lockstep; "
                                                      "delete it (no manifest can use it: its digest is wrong) "
                                                      "and run again")
            target = placed

    def _create_if_absent(self, key: str, body: bytes) -> str | None:
        """Create ``key`` with ``body`` only if absent: None when we created it, else the digest of
        what is there."""
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*",
                                ContentType="application/vnd.apache.parquet")
            return None
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise TransientError(f"could not write state file {self.url(key)}: {exc}") from exc
        except BotoCoreError as exc:
            raise TransientError(f"could not write state file {self.url(key)}: {exc}") from exc
        try:
            existing = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            # Another upload of the name is still under way (S3's 409), or the file went again: a retry
            # of the run finds the name settled.
            raise TransientError(f"state file {self.url(key)} is taken by another attempt of the checkpoint's "
                                 f"run but could not be read ({exc}): a retry of the run decides where this "
                                 "attempt's file goes") from exc
        except BotoCoreError as exc:
            raise TransientError(f"could not read state file {self.url(key)}: {exc}") from exc
        return digest(bytes(existing))

    def put_table(self, key: str, body: bytes) -> tuple[str, str]:
        """Create a state file (under ``key``, or where :meth:`create` puts it); the key that holds it
        and its digest, for the manifest. The decoded file goes to the local cache, so that the next
        checkpoint on this host reads it without S3 or Parquet."""
        from lockstep.store import state_chain

        where = self.create(key, body)
        name = digest(body)
        if self.cache is not None:
            self._keep(name, state_chain.read(body))
        return where, name

    def _keep(self, name: str, table: pa.Table) -> None:
        """Put a decoded file in the local cache: now, or, inside :meth:`caching_later`, once it ends."""
        assert self.cache is not None
        if self._later is None:
            self.cache.put(name, table)
        else:
            self._later.append((name, table))

    @contextmanager
    def caching_later(self) -> Iterator[None]:
        """The decoded files read or written inside go to the local cache after it, from a thread of their
        own, until :meth:`settle_cache`. A restore's load on a new host downloads and decodes its touched
        groups' files (at 10M keys of dedup state 48 MiB, 240 MB decoded), and needs the tables, not the
        cache, until its next checkpoint: 465 files (80 MiB, before the keys were prefix-encoded) read in
        3.6 s with the cache written as they came, in 2.1-2.4 s with it written after them (in 0.8-1.0 s,
        while Spark writes the output)."""
        if self._later is not None:  # inside one already: that one's end writes them
            yield
            return
        self._later = []
        try:
            yield
        finally:
            held, self._later = self._later, None
            if held and self.cache is not None:
                self._cached.append(self._caching.submit(self.cache.put_all, held))

    def settle_cache(self) -> None:
        """Wait until what :meth:`caching_later` held is in the local cache (a run waits once its state is
        written, so that the next checkpoint on this host finds it). A cache that cannot be written is no
        error (:meth:`StateCache.put`)."""
        pending, self._cached = self._cached, []
        for future in pending:
            future.result()

    def put_tables(self, items: Sequence[tuple[str, bytes]]) -> list[tuple[str, str]]:
        """:meth:`put_table` of each (key, body), `WRITE_THREADS` at a time; the results in the items' order.
        An upload that fails raises once those under way have ended."""
        if len(items) <= 1:
            return [self.put_table(key, body) for key, body in items]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(WRITE_THREADS, len(items)), thread_name_prefix="lockstep-state-write") as pool:
            return list(pool.map(lambda item: self.put_table(*item), items))

    def table(self, key: str, checkpoint: int, expected: str | None) -> pa.Table:
        """A state file, decoded: from the local cache when its digest is there, else from S3, checked
        against the digest the manifest of ``checkpoint`` records (None: a state without digests)."""
        from lockstep.store import state_chain

        if expected is not None and self.cache is not None:
            cached = self.cache.get(expected)
            if cached is not None:
                return cached
        body = self.get(key, checkpoint)
        if expected is not None and digest(body) != expected:
            raise MetadataError(self.url(key), f"does not match the digest {expected} that the state manifest of "
                                               f"checkpoint {checkpoint} records: it was changed outside Lockstep; "
                                               + RESTORE_WAY_OUT)
        table = state_chain.read(body)
        if expected is not None and self.cache is not None:
            self._keep(expected, table)
        return table

    def chain(self, manifest: StateManifest, group: int) -> list[pa.Table]:
        """Key group ``group``'s files of ``manifest``, decoded, base first (of a pack, the group's rows)."""
        from lockstep.store import state_chain

        return [state_chain.of_group(self.table(k, manifest.written_by, d), group) for k, d in _files(manifest, group)]

    def chains(self, manifest: StateManifest, groups: Iterable[int]) -> dict[int, list[pa.Table]]:
        """The chains of ``groups`` (each as :meth:`chain` reads it), each file read once (a pack serves
        every group it holds), `READ_THREADS` at a time: a restore on a new host downloads and decodes
        every touched group's files (48 MiB at 10M keys of dedup state), and one at a time that was a
        request's round trip and a decode each."""
        from lockstep.store import state_chain

        wanted = sorted(set(groups))
        files = [(group, key, expected) for group in wanted for key, expected in _files(manifest, group)]
        distinct = list(dict.fromkeys((key, expected) for _, key, expected in files))
        if len(distinct) <= 1:
            tables = [self.table(key, manifest.written_by, expected) for key, expected in distinct]
        else:
            with ThreadPoolExecutor(min(READ_THREADS, len(distinct)), thread_name_prefix="lockstep-state-read") as pool:
                tables = list(pool.map(lambda f: self.table(f[0], manifest.written_by, f[1]), distinct))
        read = dict(zip(distinct, tables, strict=True))
        out: dict[int, list[pa.Table]] = {group: [] for group in wanted}
        for group, key, expected in files:  # in the manifest's order: base first
            out[group].append(state_chain.of_group(read[(key, expected)], group))
        return out

    def read_state(self, manifest: StateManifest, groups: Iterable[int] | None = None) -> pa.Table | None:
        """The state a manifest names, each group's chain merged (every group, or only ``groups``); None
        when it holds no rows."""
        import pyarrow as pa

        from lockstep.store import state_chain

        tables = []
        wanted = manifest.files if groups is None else set(groups) & set(manifest.files)
        for _, chain in sorted(self.chains(manifest, wanted).items()):
            merged = state_chain.merge(chain)
            if merged is not None and merged.num_rows:
                tables.append(merged)
        return pa.concat_tables(tables, promote_options="default") if tables else None

    def read_table(self, version: TableVersion | None) -> pa.Table | None:
        """A table version's rows (`lockstep.tables.pins`), its chain merged; None without rows. A versioned
        table's rows hold each key's kept versions (`lockstep.tables.chain.latest_rows` takes the latest)."""
        from lockstep.store import state_chain

        if version is None or not version.files:
            return None
        digests = version.digests if len(version.digests) == len(version.files) else (None,) * len(version.files)
        return state_chain.merge([self.table(k, version.written_by, d)
                                  for k, d in zip(version.files, digests, strict=True)])

    def sizes(self, checkpoint_id: int) -> dict[str, int]:
        """Key -> size in bytes of the files in checkpoint ``checkpoint_id``'s folder (one listing)."""
        folder = checkpoint_folder(self.prefix, checkpoint_id)
        try:
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=folder)
            return {o["Key"]: int(o["Size"]) for page in pages for o in page.get("Contents", []) if "Size" in o}
        except (ClientError, BotoCoreError) as exc:
            raise TransientError(f"could not list state files under {self.url(folder)}: {exc}") from exc

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            try:
                self._s3.delete_object(Bucket=self.bucket, Key=key)
            except (ClientError, BotoCoreError) as exc:
                raise TransientError(f"could not delete state file {self.url(key)}: {exc}") from exc

    @property
    def rekey_key(self) -> str:
        return f"{self.prefix}rekey.json"

    def record_rekey(self, key_groups: int, previous: int | None, at: str) -> None:
        """``lockstep state rekey``: the next checkpoint may write the state in ``key_groups`` groups."""
        body = json.dumps({"schema": REKEY_SCHEMA, "key_groups": key_groups, "previous": previous, "at": at}).encode()
        self.put(self.rekey_key, body)

    def rekey_to(self) -> int | None:
        """The key groups a user accepted with ``lockstep state rekey``, or None."""
        raw = self._optional(self.rekey_key)
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
            assert doc["schema"] == REKEY_SCHEMA
            return int(doc["key_groups"])
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            raise MetadataError(self.url(self.rekey_key), f"is not a re-keying record ({REKEY_SCHEMA})") from exc

    def checkpoint_of(self, key: str) -> int | None:
        """The checkpoint whose run wrote ``key`` (from its folder), or None for a key not of this layout."""
        rest = key[len(self.prefix):] if key.startswith(self.prefix) else ""
        folder = rest.split("/", 1)[0]
        return int(folder) if folder.isdigit() else None


def content_key(key: str, content_digest: str) -> str:
    """The name of a state file by its content, beside the layout's name ``key`` (pure):
    ``…/kg-00007.delta.parquet`` -> ``…/kg-00007.delta.<digest>.parquet``. Unique to the bytes, so
    two attempts that computed different files never share it, and one that computed the same reuses it."""
    stem = key[:-len(".parquet")] if key.endswith(".parquet") else key
    return f"{stem}.{content_digest}.parquet"


def placement(key: str, ours: str, taken: str, theirs: str) -> str | None:
    """Where a state file of digest ``ours`` goes when the name ``taken`` holds a file of digest
    ``theirs`` (pure). ``key`` is the layout's name for it. ``taken`` itself when the bytes are the same
    (a deterministic retry reuses the file); the content's name when ``taken`` is the layout's name
    and holds other bytes (another attempt's file, which a manifest may name: never replaced); None
    when the content's name holds other bytes, which only a change outside Lockstep can cause."""
    if ours == theirs:
        return taken
    if taken == key:
        return content_key(key, ours)
    return None


def unreferenced(keys: Iterable[str], referenced: set[str], checkpoint_of: dict[str, int | None],
                 settled_below: int, aborted: set[int]) -> list[str]:
    """The state files garbage collection may delete (pure): named by no retained checkpoint and no
    savepoint, and written by a checkpoint that is settled: older than ``settled_below`` (the latest
    completed one) or aborted. A checkpoint in flight (newer, not aborted) keeps its files even
    before its manifest names them."""
    doomed = []
    for key in keys:
        cid = checkpoint_of.get(key)
        if key in referenced or cid is None:
            continue
        if cid < settled_below or cid in aborted:
            doomed.append(key)
    return sorted(doomed)


def _files(manifest: StateManifest, group: int) -> list[tuple[str, str | None]]:
    """Key group ``group``'s files of ``manifest``, base first, each with the digest the manifest records
    (None in a state written before digests)."""
    keys = manifest.files[group]
    figures = manifest.groups.get(group)
    digests = figures.digests if figures is not None and len(figures.digests) == len(keys) else (None,) * len(keys)
    return list(zip(keys, digests, strict=True))
