"""The checkpoint store: checkpoint metadata as immutable JSON objects on S3.

Layout under ``s3://bucket/<prefix>/<pipeline>/``::

    checkpoints/000000000042/claim.json      conditional create = owning id 42
    checkpoints/000000000042/prepared.json   written by the Spark driver: decision "commit"
    checkpoints/000000000042/outcome.json    completed or aborted: one key, so never both
    latest-completed.json                    pointer, moved forward with If-Match
    savepoints/<name>.json                   retained copies, never touched by retention
    state/000000000042/kg-00007.parquet      a stateful pipeline's state files (`lockstep.store.state_files`)

Every object except the pointer is created with ``If-None-Match: *`` and never
rewritten, so status only moves forward and two runs can never both own an id.
Ids are zero-padded so S3's lexicographic listing is numeric order, which lets
"what happened after the latest completed checkpoint" be listed with
``StartAfter`` instead of walking the whole history.
"""
from __future__ import annotations

__all__ = [
    "COMPARISON", "TABLE_UPKEEP", "CheckpointAlreadyClaimed", "CheckpointStore", "PipelineStore", "S3Client", "stage_of",
]

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from lockstep.errors import CheckpointError, MetadataError, TerminalError, TransientError
from lockstep.model import failpoints
from lockstep.model.checkpoint import (
    ABORTED_SCHEMA,
    AbortedCheckpoint,
    CheckpointClaim,
    CheckpointStage,
    CheckpointView,
    CompletedCheckpoint,
    History,
    PreparedCheckpoint,
    RunFailure,
)
from lockstep.model.savepoint import Savepoint, validate_savepoint_name
from lockstep.model.state_manifest import StateManifest
from lockstep.store.keys import checkpoint_folder
from lockstep.store.s3 import ListObjectsArgs, S3Client
from lockstep.store.state_files import READ_THREADS, StateFiles, unreferenced
from lockstep.tables.pins import TableVersion

# Any in this module is a document as ``json.loads`` read it from S3: whatever the object holds, until
# its parser checks it (``lockstep.model.checkpoint``'s from_json; a sidecar's, e.g. ``spark.replay``'s).

T = TypeVar("T")
POINTER_SCHEMA = "lockstep.latest-completed/1"
#: A checkpoint's record of how many tasks its run writes with (`record_write_tasks`).
WRITE_TASKS_PART = "write-tasks"
#: completed.json / aborted.json would let a racing commit and abort both succeed;
#: one outcome object per checkpoint makes the conditional create decide.
OUTCOME = "outcome"


def stage_of(parts: Iterable[str]) -> CheckpointStage | None:
    """A checkpoint's stage from the names in its folder (`CheckpointStore.stage`); None without a claim."""
    names = set(parts)
    if f"{OUTCOME}.json" in names:
        return CheckpointStage.SETTLED
    if "prepared.json" in names:
        return CheckpointStage.PREPARED
    return CheckpointStage.CLAIMED if "claim.json" in names else None


class CheckpointAlreadyClaimed(CheckpointError):
    """Another run owns this checkpoint id (lost the conditional create)."""


# ---- the store ---------------------------------------------------------------------------------------
class PipelineStore(Protocol):
    """One pipeline's checkpoints as the engine's steps read and write them: through
    `lockstep.steps.pipeline.Pipeline.store` (plan, recover, commit), the run step and its Spark job
    (`lockstep.spark.job`, the replay's bookkeeping) and the lag. `CheckpointStore` on S3, or an
    in-memory one in tests of the steps. Savepoint management and the history pages of the CLI and
    the Airflow plugin use `CheckpointStore` itself."""

    @property
    def pipeline(self) -> str: ...

    # reading
    def history(self) -> History: ...

    def latest_completed(self) -> CheckpointView | None: ...

    def views_after(self, checkpoint_id: int | None) -> list[CheckpointView]: ...

    def view(self, checkpoint_id: int) -> CheckpointView | None: ...

    def checkpoint_ids(self, after: int | None = None) -> Iterator[int]: ...

    def stage(self, checkpoint_id: int) -> CheckpointStage | None: ...

    def newest_checkpoint_id(self) -> int | None: ...

    def run_failure(self, checkpoint_id: int) -> RunFailure | None: ...

    def sidecar(self, checkpoint_id: int, part: str) -> dict[str, Any] | None: ...

    def get_savepoint(self, name: str) -> Savepoint: ...

    # writing, in the order of a checkpoint's steps
    def record_dry_run(self, plan: CheckpointClaim) -> None: ...

    def claim(self, claim: CheckpointClaim) -> None: ...

    def write_sidecar(self, checkpoint_id: int, part: str, doc: Mapping[str, object], once: bool = True) -> None: ...

    def record_write_tasks(self, checkpoint_id: int, tasks: int) -> int: ...

    def write_tasks(self, checkpoint_id: int) -> int | None: ...

    def record_run_failure(self, failure: RunFailure) -> None: ...

    def write_prepared(self, prepared: PreparedCheckpoint) -> None: ...

    def mark_completed(self, completed: CompletedCheckpoint) -> None: ...

    def mark_aborted(self, aborted: AbortedCheckpoint) -> None: ...

    def apply_retention(self, retain: int) -> list[int]: ...

    def state_files(self) -> StateFiles: ...

    def collect_state_garbage(self) -> list[str]: ...


#: The notes a store keeps for the Checkpoints page (`CheckpointStore.record_note`).
COMPARISON, DRY_RUN, TABLE_UPKEEP = "last-comparison", "last-dry-run", "last-table-upkeep"


class CheckpointStore:
    """A pipeline's checkpoints and savepoints under ``s3://bucket/root/`` (see the module's doc)."""

    def __init__(self, s3: S3Client, bucket: str, root: str, pipeline: str) -> None:
        self._s3 = s3
        self.bucket = bucket
        self.root = root.strip("/")
        self.pipeline = pipeline

    # ---- keys ----------------------------------------------------------------
    def _ckpt_prefix(self) -> str:
        return f"{self.root}/checkpoints/"

    def _key(self, checkpoint_id: int, part: str) -> str:
        return f"{checkpoint_folder(self._ckpt_prefix(), checkpoint_id)}{part}.json"

    def _pointer_key(self) -> str:
        return f"{self.root}/latest-completed.json"

    def _trigger_key(self) -> str:
        return f"{self.root}/trigger-fired.json"

    def _savepoint_key(self, name: str) -> str:
        return f"{self.root}/savepoints/{validate_savepoint_name(name)}.json"

    def state_files(self) -> StateFiles:
        return StateFiles(self._s3, self.bucket, self.root)

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    # ---- raw object access -----------------------------------------------------
    def _get(self, key: str) -> tuple[Any, str] | None:  # the document as json.loads read it, and its ETag
        try:
            obj = self._s3.get_object(Bucket=self.bucket, Key=key)
            body = obj["Body"].read()
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
                return None
            raise _classify(exc, key) from exc
        except BotoCoreError as exc:
            raise _unreachable(exc, key) from exc
        try:
            doc = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise MetadataError(self.url(key), f"not JSON ({exc}); it was not written by Lockstep or is damaged") from exc
        return doc, obj["ETag"]

    def _read(self, key: str, parse: Callable[[object, str], T]) -> T | None:
        found = self._get(key)
        if found is None:
            return None
        value = parse(found[0], self.url(key))
        owner = getattr(value, "pipeline", self.pipeline)
        if owner != self.pipeline:
            raise MetadataError(self.url(key), f"belongs to pipeline {owner!r}, not {self.pipeline!r}")
        return value

    def _create(self, key: str, doc: Mapping[str, object]) -> bool:
        """Create ``key`` only if absent. True if we created it, False if an identical one exists.

        A different existing document is never overwritten: that is a conflict the
        caller must surface.
        """
        body = json.dumps(doc, sort_keys=True, indent=1).encode()
        if self._put_if(key, body, replacing=None):
            return True
        existing = self._get(key)
        if existing is not None and existing[0] == json.loads(body):
            return False
        raise _Conflict(key)

    # ---- checkpoints -----------------------------------------------------------
    def claim(self, claim: CheckpointClaim) -> None:
        """Own ``claim.checkpoint_id`` or raise: only the conditional create decides, never the content."""
        key = self._key(claim.checkpoint_id, "claim")
        try:
            if self._create(key, claim.to_json()):
                return
        except _Conflict:
            pass
        # Lost. Read the winner's claim so a damaged or foreign object is reported as such (MetadataError)
        # rather than as a concurrent run, and so the message can name the owner.
        owner = self._read_claim(claim.checkpoint_id)
        who = f"run {owner.run_id!r} at {owner.claimed_at}" if owner else "another run"
        raise CheckpointAlreadyClaimed(
            claim.checkpoint_id,
            f"already claimed by {who} ({self.url(key)} exists); "
            "only one checkpoint may run at a time - check for a concurrent DAG run or backfill",
        )

    def write_prepared(self, prepared: PreparedCheckpoint) -> None:
        view = self._require(prepared.checkpoint_id)
        if view.aborted is not None:
            raise CheckpointError(prepared.checkpoint_id, "was aborted; its prepared metadata may not be written")
        self._create_or_conflict(prepared.checkpoint_id, "prepared", prepared.to_json())

    def mark_completed(self, completed: CompletedCheckpoint) -> None:
        view = self._require(completed.checkpoint_id)
        if view.aborted is not None:
            raise CheckpointError(completed.checkpoint_id, f"was aborted ({view.aborted.reason}); it cannot complete")
        if view.prepared is None:
            raise CheckpointError(completed.checkpoint_id, "is not prepared; nothing was decided to commit")
        self._settle(completed.checkpoint_id, completed.to_json())
        self._advance_pointer(completed.checkpoint_id)

    def mark_aborted(self, aborted: AbortedCheckpoint) -> None:
        view = self._require(aborted.checkpoint_id)
        if view.completed is not None:
            raise CheckpointError(aborted.checkpoint_id, "is completed; status never moves backward to aborted")
        if view.aborted is not None:
            return  # aborting twice is harmless; keep the first reason
        self._settle(aborted.checkpoint_id, aborted.to_json())

    def record_run_failure(self, failure: RunFailure) -> None:
        """Note why a run attempt failed. Informational and overwritten by a later attempt's failure
        (the only object besides the latest-completed pointer that is not create-once): it decides
        nothing, it only becomes the reason of the abort that follows."""
        self._overwrite(self._key(failure.checkpoint_id, "run-failure"), failure.to_json())

    def run_failure(self, checkpoint_id: int) -> RunFailure | None:
        return self._read(self._key(checkpoint_id, "run-failure"), RunFailure.from_json)

    def write_sidecar(self, checkpoint_id: int, part: str, doc: Mapping[str, object], once: bool = True) -> None:
        """A document of a checkpoint besides its claim/prepared/completed ones (a replay's selection,
        its replayed offsets). ``once``: create-only, an identical one is fine, a different one a conflict."""
        if not once:
            self._overwrite(self._key(checkpoint_id, part), doc)
            return
        try:
            self._create(self._key(checkpoint_id, part), doc)
        except _Conflict as exc:
            raise CheckpointError(checkpoint_id, f"{self.url(exc.key)} exists with other content; it is "
                                                 "written once per checkpoint") from exc

    def sidecar(self, checkpoint_id: int, part: str) -> dict[str, Any] | None:
        found = self._get(self._key(checkpoint_id, part))
        return found[0] if found is not None else None

    def record_write_tasks(self, checkpoint_id: int, tasks: int) -> int:
        """Record, before a run writes, how many tasks (transactional ids ``0 .. tasks-1``) it writes with, so
        that recovery fences those and not every id the claim's ``sink.parallelism: auto`` allows. Written
        once: a later attempt gets the first attempt's number back and writes with it (its ids then fence
        the earlier attempt's, whatever the cluster's cores are now)."""
        doc = {"tasks": tasks}
        try:
            self._create(self._key(checkpoint_id, WRITE_TASKS_PART), doc)
        except _Conflict:
            recorded = self.write_tasks(checkpoint_id)
            if recorded is None:
                raise
            return recorded
        return tasks

    def write_tasks(self, checkpoint_id: int) -> int | None:
        """The tasks a run of the checkpoint recorded before writing (`record_write_tasks`); None when no
        run did (it never reached its write, or it was a version that did not record it)."""
        doc = self.sidecar(checkpoint_id, WRITE_TASKS_PART)
        tasks = doc.get("tasks") if isinstance(doc, dict) else None
        if doc is not None and (isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1):
            raise MetadataError(self.url(self._key(checkpoint_id, WRITE_TASKS_PART)),
                                f"tasks must be a positive integer, got {tasks!r}; delete the file to have recovery "
                                "fence every id the claim allows")
        return tasks if doc is not None else None

    def record_dry_run(self, plan: CheckpointClaim) -> None:
        """Keep the latest dry run's plan, the claim it did not make, as a note (`record_note`)."""
        self.record_note(DRY_RUN, plan.to_json())

    def last_dry_run(self) -> CheckpointClaim | None:
        return self._read(f"{self.root}/{DRY_RUN}.json", CheckpointClaim.from_json)

    def record_note(self, name: str, doc: Mapping[str, object]) -> None:
        """Keep an informational document for the Checkpoints page beside the checkpoints (not under checkpoints/),
        overwritten by the next: `COMPARISON` (the latest ``lockstep replay --compare`` report), `TABLE_UPKEEP`
        (each Iceberg upkeep action's latest figures, ``lockstep.ops.table_upkeep``)."""
        self._overwrite(f"{self.root}/{name}.json", doc)

    def note(self, name: str) -> dict[str, Any] | None:
        """`record_note`'s document; None when absent or not a JSON object."""
        got = self._get(f"{self.root}/{name}.json")
        return got[0] if got is not None and isinstance(got[0], dict) else None

    def record_trigger_fired(self, doc: Mapping[str, object], replacing: str | None) -> bool:
        """Write the lag watcher's marker of its event (``lockstep.rules.lag_trigger.Fired``), kept here since
        Airflow restarts a watcher from its arguments after every event, only if the marker is still the
        one the watcher decided on: ``replacing`` is that marker's version (`trigger_fired`), None if there
        was none. False when another watcher wrote one in between (two instances of the same trigger run
        while the triggerer hands it over): that one fires, this one must not."""
        return self._put_if(self._trigger_key(), json.dumps(doc, sort_keys=True, indent=1).encode(), replacing)

    def trigger_fired(self) -> tuple[object, str] | None:
        """The lag watcher's last marker as read, and its version for `record_trigger_fired`."""
        return self._get(self._trigger_key())

    def _put_if(self, key: str, body: bytes, replacing: str | None) -> bool:
        """Write ``key`` only if it is still the version ``replacing`` (an ETag read with `_get`), or, with
        None, only if it does not exist: S3's conditional write. False when that condition failed."""
        condition = {"IfMatch": replacing} if replacing is not None else {"IfNoneMatch": "*"}
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json", **condition)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise _classify(exc, key) from exc
        except BotoCoreError as exc:
            raise _unreachable(exc, key) from exc
        return True

    def _overwrite(self, key: str, doc: Mapping[str, object]) -> None:
        body = json.dumps(doc, sort_keys=True, indent=1).encode()
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json")
        except ClientError as exc:
            raise _classify(exc, key) from exc
        except BotoCoreError as exc:
            raise _unreachable(exc, key) from exc

    def _settle(self, checkpoint_id: int, doc: Mapping[str, object]) -> None:
        """Create the checkpoint's one outcome object: completed or aborted, never both.

        Both outcomes share one key, so a commit and an abort racing on the same
        checkpoint are decided by S3's conditional create: exactly one wins.
        """
        key = self._key(checkpoint_id, OUTCOME)
        try:
            self._create(key, doc)
            return
        except _Conflict:
            pass
        existing = self._outcome(checkpoint_id)
        assert existing is not None  # the create conflicted, so the outcome object is there
        if isinstance(existing, AbortedCheckpoint):
            if doc["schema"] == existing.to_json()["schema"]:
                return  # another process aborted it first: keep its reason
            raise CheckpointError(checkpoint_id, f"was aborted ({existing.reason}) while we committed it; "
                                                 "it cannot complete")
        if doc["schema"] != existing.to_json()["schema"]:
            raise CheckpointError(checkpoint_id, "is completed; status never moves backward to aborted")
        raise CheckpointError(
            checkpoint_id, f"{self.url(key)} already exists with different content; metadata is immutable "
            "and is never overwritten (is another run writing this pipeline's checkpoints?)",
        )

    def _outcome(self, checkpoint_id: int) -> CompletedCheckpoint | AbortedCheckpoint | None:
        key = self._key(checkpoint_id, OUTCOME)
        found = self._get(key)
        if found is None:
            return None
        doc, url = found[0], self.url(key)
        parse = AbortedCheckpoint.from_json if isinstance(doc, dict) and doc.get("schema") == ABORTED_SCHEMA \
            else CompletedCheckpoint.from_json
        value = parse(doc, url)
        if value.pipeline != self.pipeline:
            raise MetadataError(url, f"belongs to pipeline {value.pipeline!r}, not {self.pipeline!r}")
        return value

    def _create_or_conflict(self, checkpoint_id: int, part: str, doc: Mapping[str, object]) -> None:
        try:
            self._create(self._key(checkpoint_id, part), doc)
        except _Conflict as exc:
            raise CheckpointError(
                checkpoint_id, f"{self.url(exc.key)} already exists with different content; metadata is immutable "
                "and is never overwritten (is another run writing this pipeline's checkpoints?)",
            ) from None

    def _require(self, checkpoint_id: int) -> CheckpointView:
        view = self.view(checkpoint_id)
        if view is None:
            raise CheckpointError(checkpoint_id, f"has no claim at {self.url(self._key(checkpoint_id, 'claim'))}")
        return view

    def _read_claim(self, checkpoint_id: int) -> CheckpointClaim | None:
        key = self._key(checkpoint_id, "claim")
        claim = self._read(key, CheckpointClaim.from_json)
        if claim is not None and claim.checkpoint_id != checkpoint_id:
            raise MetadataError(self.url(key), f"is the claim of checkpoint {claim.checkpoint_id}, "
                                               f"stored under checkpoint {checkpoint_id}")
        return claim

    def view(self, checkpoint_id: int) -> CheckpointView | None:
        claim = self._read_claim(checkpoint_id)
        if claim is None:
            return None
        outcome = self._outcome(checkpoint_id)
        return CheckpointView(
            claim=claim,
            prepared=self._read(self._key(checkpoint_id, "prepared"), PreparedCheckpoint.from_json),
            completed=outcome if isinstance(outcome, CompletedCheckpoint) else None,
            aborted=outcome if isinstance(outcome, AbortedCheckpoint) else None,
        )

    def views(self, checkpoint_ids: Iterable[int]) -> list[CheckpointView | None]:
        """:meth:`view` of each id, in their order, `READ_THREADS` at a time (:func:`_each`): a commit's garbage
        collection reads every retained checkpoint (three objects each), and one after the other that was
        0.26 s of a 0.5 s commit at 13 checkpoints (2026-12-02)."""
        return _each(self.view, checkpoint_ids)

    # ---- listing ---------------------------------------------------------------
    def checkpoint_ids(self, after: int | None = None) -> Iterator[int]:
        """Ids in ascending order, optionally only those after ``after`` (S3 StartAfter)."""
        kwargs = ListObjectsArgs(Bucket=self.bucket, Prefix=self._ckpt_prefix(), Delimiter="/")
        if after is not None:
            kwargs["StartAfter"] = f"{checkpoint_folder(self._ckpt_prefix(), after)}~"
        paginator = self._s3.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(**kwargs):
                for common in page.get("CommonPrefixes", []):
                    name = common["Prefix"][len(self._ckpt_prefix()):].rstrip("/")
                    if name.isdigit():
                        yield int(name)
        except ClientError as exc:
            raise _classify(exc, self._ckpt_prefix()) from exc

        except BotoCoreError as exc:
            raise _unreachable(exc, self._ckpt_prefix()) from exc

    def stage(self, checkpoint_id: int) -> CheckpointStage | None:
        """How far ``checkpoint_id`` has got, from one listing of its folder, nothing read: for a waiter that
        needs no more (the plan of the run one ahead, waiting for the checkpoint in flight). None: no claim."""
        prefix = checkpoint_folder(self._ckpt_prefix(), checkpoint_id)
        try:
            page = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=prefix)
        except ClientError as exc:
            raise _classify(exc, prefix) from exc
        except BotoCoreError as exc:
            raise _unreachable(exc, prefix) from exc
        return stage_of(obj["Key"][len(prefix):] for obj in page.get("Contents", []))

    def _pointer_checkpoint_id(self) -> int | None:
        """The checkpoint the latest-completed pointer names (None: no pointer yet)."""
        pointer = self._get(self._pointer_key())
        return _pointer_id(pointer[0], self.url(self._pointer_key()), self.pipeline) if pointer else None

    def newest_checkpoint_id(self) -> int | None:
        """The highest checkpoint id stored (claimed, whatever its status), without listing the whole
        history: the ids after the latest-completed pointer, else the pointer's own."""
        start = self._pointer_checkpoint_id()
        newest = start
        for checkpoint_id in self.checkpoint_ids(after=start):
            newest = checkpoint_id
        return newest

    def latest_completed(self) -> CheckpointView | None:
        """The newest completed checkpoint, without listing the whole history."""
        return self.history().latest

    def history(self) -> History:
        """The newest completed checkpoint and the checkpoints after it, in one listing.

        The pointer may lag by a checkpoint if a commit died between marking the
        checkpoint completed and moving the pointer, so what follows it is checked too.
        A pointer to a missing or unfinished checkpoint is a MetadataError, never a
        silent fall back to older offsets.
        """
        pointer_url = self.url(self._pointer_key())
        start = self._pointer_checkpoint_id()
        # Listing the ids after the pointer is cheap (1000 per page); views cost 4 GETs each, so read
        # them newest first and stop at the first completed one: the ones read before it are the
        # checkpoints after it.
        newer: list[CheckpointView] = []
        for checkpoint_id in reversed(list(self.checkpoint_ids(after=start))):
            view = self.view(checkpoint_id)
            if view is not None and view.completed is not None:
                return History(view, tuple(reversed(newer)))
            if view is not None:
                newer.append(view)
        if start is None:
            return History(None, tuple(reversed(newer)))
        pointed = self.view(start)
        if pointed is None or pointed.completed is None:
            # Never fall back to older offsets or to auto.offset.reset silently: that replays or skips data.
            what = "does not exist" if pointed is None else f"is {pointed.status.value}"
            raise MetadataError(pointer_url, f"points at checkpoint {start}, which {what}; restore from a savepoint, "
                                             "or delete the pointer if the checkpoints were reset on purpose")
        return History(pointed, tuple(reversed(newer)))

    def views_after(self, checkpoint_id: int | None) -> list[CheckpointView]:
        return [v for v in self.views(self.checkpoint_ids(after=checkpoint_id)) if v is not None]

    def recent(self, limit: int = 20) -> list[CheckpointView]:
        """The newest ``limit`` checkpoints, newest first (history is bounded by retention)."""
        ids = list(self.checkpoint_ids())[-limit:]
        return [v for v in self.views(reversed(ids)) if v is not None]

    def _advance_pointer(self, checkpoint_id: int) -> None:
        """Move the pointer forward only; concurrent movers are resolved with If-Match."""
        for _ in range(10):
            current = self._get(self._pointer_key())
            doc = {"schema": POINTER_SCHEMA, "pipeline": self.pipeline, "checkpoint_id": checkpoint_id}
            if current is not None and \
                    _pointer_id(current[0], self.url(self._pointer_key()), self.pipeline) >= checkpoint_id:
                return
            if self._put_if(self._pointer_key(), json.dumps(doc).encode(), current[1] if current else None):
                return
        raise TransientError(f"could not move {self.url(self._pointer_key())} to checkpoint {checkpoint_id}: "
                             "it kept changing under us")

    # ---- retention -------------------------------------------------------------
    def apply_retention(self, retain: int) -> list[int]:
        """Delete checkpoints older than the ``retain`` newest completed ones.

        Savepoints are separate objects and are never touched. Nothing at or after
        the oldest retained completed checkpoint is deleted.
        """
        if isinstance(retain, bool) or not isinstance(retain, int) or retain < 1:
            raise TerminalError(f"checkpoints.retain must be at least 1, got {retain!r}: the newest completed "
                                "checkpoint is where the next run starts")
        ids = list(self.checkpoint_ids())
        completed = [i for i, outcome in zip(ids, _each(self._outcome, ids), strict=True)
                     if isinstance(outcome, CompletedCheckpoint)] if len(ids) > retain else []
        if len(completed) <= retain:
            return []
        keep_from = completed[-retain]
        doomed = [i for i in ids if i < keep_from]
        for checkpoint_id in doomed:
            prefix = checkpoint_folder(self._ckpt_prefix(), checkpoint_id)
            try:
                listing = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=prefix)
                keys = [{"Key": o["Key"]} for o in listing.get("Contents", [])]
                # Claim last: a half-deleted checkpoint must still not look unclaimed.
                keys.sort(key=lambda k: k["Key"].endswith("claim.json"))
                for key in keys:
                    self._s3.delete_object(Bucket=self.bucket, Key=key["Key"])
            except ClientError as exc:
                raise _classify(exc, prefix) from exc
            except BotoCoreError as exc:
                raise _unreachable(exc, prefix) from exc
        return doomed

    def collect_state_garbage(self) -> list[str]:
        """Delete the state files no retained checkpoint and no savepoint names (`state_files.unreferenced`):
        those of aborted checkpoints, of checkpoints retention removed, and of superseded states.
        Returns the keys deleted."""
        files = self.state_files()
        keys = files.listing()
        if not keys:
            return []
        latest = self.latest_completed()
        if latest is None:
            return []
        referenced: set[str] = set()
        aborted: set[int] = set()
        ids = list(self.checkpoint_ids())
        for cid, view in zip(ids, self.views(ids), strict=True):
            if view is None:
                continue
            if view.aborted is not None:
                aborted.add(cid)
            # A prepared manifest is the state only until the checkpoint settles: an aborted checkpoint's
            # never becomes the pipeline's, and a completed one's is what its outcome.json names (the
            # claim's base instead, when a user accepted duplicates).
            in_flight = view.prepared.state if view.prepared and view.completed is None and view.aborted is None \
                else None
            for manifest in (view.claim.state_base, in_flight, view.completed.state if view.completed else None):
                if manifest is not None:
                    referenced.update(manifest.all_files)
            # Tables alike: the versions a claim starts from, an unsettled prepared one's, the completed ones.
            tables = [pin.base for pin in view.claim.tables.values() if pin.base is not None]
            if view.prepared and view.completed is None and view.aborted is None:
                tables += view.prepared.tables.values()
            if view.completed is not None:
                tables += view.completed.tables.values()
            for table in tables:
                referenced.update(table.files)
        for savepoint in self.list_savepoints():
            if savepoint.state is not None:
                referenced.update(savepoint.state.all_files)
            for table in savepoint.tables.values():
                referenced.update(table.files)
        doomed = unreferenced(keys, referenced, {k: files.checkpoint_of(k) for k in keys}, latest.checkpoint_id,
                              aborted)
        # Half-way: the first file deleted and the rest not yet; with a single file, before it, so that
        # whatever lands at the failpoint (a crash, an S3 fault in the soak) meets a delete still to do.
        first = doomed[:1] if len(doomed) > 1 else []
        files.delete(first)
        if doomed:
            failpoints.hit("commit.mid_state_gc", f" ({len(first)} deleted, {len(doomed) - len(first)} more to delete: "
                                                  f"{doomed[len(first)]}, ...)")
        files.delete(doomed[len(first):])
        return doomed

    def _exists(self, key: str) -> bool:
        try:
            self._s3.head_object(Bucket=self.bucket, Key=key)
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return False
            raise _classify(exc, key) from exc

        except BotoCoreError as exc:
            raise _unreachable(exc, key) from exc
    # ---- savepoints ------------------------------------------------------------
    def create_savepoint(self, name: str, checkpoint_id: int | None, created_at: str) -> Savepoint:
        """A savepoint of a completed checkpoint (the latest one without ``checkpoint_id``).

        Its state files must not be collected between reading the checkpoint's manifest and writing
        the savepoint that names them: a commit's retention may delete the checkpoint meanwhile and its
        garbage collection (`collect_state_garbage`) then the files. So the savepoint object is written
        first, which pins the files for every collection that lists savepoints after it, and then the
        checkpoint's outcome is read again (`savepoint_pinned`). Still completed: no collection can
        have deleted a file it names, whatever the interleaving. A collection reads every retained
        checkpoint's view before it lists the savepoints; one that read this checkpoint before the
        re-read found it completed (an outcome, once deleted, never comes back) and kept its manifest's
        files, one that read it after lists the savepoint. Gone: a collection may have deleted them
        between its listing of the savepoints and its deletes, so the savepoint is removed and the error
        says to take one of a retained checkpoint. Checking that each file still exists would not do:
        such a collection may delete them after the check. (A crash between the write and the re-read
        leaves the savepoint unconfirmed; if it lost that race, a restore from it fails on its first
        missing file, naming it.)"""
        self._savepoint_key(name)  # validates the name before any S3 call
        view = self.latest_completed() if checkpoint_id is None else self.view(checkpoint_id)
        if view is None or view.completed is None:
            what = "no checkpoint has completed yet" if checkpoint_id is None else \
                f"checkpoint {checkpoint_id} is {view.status.value if view else 'unknown'}, not completed"
            raise TerminalError(f"cannot take savepoint {name!r}: {what}")
        savepoint = Savepoint(name=name, pipeline=self.pipeline, checkpoint_id=view.checkpoint_id,
                              created_at=created_at, end_offsets=dict(view.completed.end_offsets),
                              ranges=view.claim.ranges, topic_ids=dict(view.claim.topic_ids),
                              state=view.completed.state, tables=dict(view.completed.tables))
        self._store_savepoint(savepoint)
        refused = savepoint_pinned(savepoint, self._outcome(view.checkpoint_id))
        if refused:
            self._delete(self._savepoint_key(name))
            raise TerminalError(refused)
        return savepoint

    def adopt_savepoint(self, savepoint: Savepoint, created_at: str, source_bucket: str | None = None) -> Savepoint:
        """Keep another pipeline's savepoint here, e.g. to replay its offsets into another topic. Its state
        files are copied under this pipeline's prefix: the other pipeline's garbage collection never
        reaches them."""
        adopted = Savepoint(name=savepoint.name, pipeline=self.pipeline, checkpoint_id=savepoint.checkpoint_id,
                            created_at=created_at, end_offsets=dict(savepoint.end_offsets), ranges=savepoint.ranges,
                            topic_ids=dict(savepoint.topic_ids),
                            state=self._adopt_state(savepoint.state, savepoint.name, source_bucket or self.bucket),
                            tables=self._adopt_tables(savepoint.tables, savepoint.name, source_bucket or self.bucket))
        return self._store_savepoint(adopted)

    def _adopt_tables(self, tables: Mapping[str, TableVersion], savepoint_name: str,
                      source_bucket: str) -> dict[str, TableVersion]:
        """Another pipeline's table versions, their files copied under this pipeline's prefix (as state's)."""
        from dataclasses import replace

        files = self.state_files()
        adopted = {}
        for name, table in tables.items():
            mine = []
            for key in table.files:
                target = files.adopted_key(savepoint_name, key)
                if target != key or source_bucket != self.bucket:
                    files.copy(key, target, source_bucket)
                mine.append(target)
            adopted[name] = replace(table, files=tuple(mine))
        return adopted

    def _adopt_state(self, state: StateManifest | None, savepoint_name: str,
                     source_bucket: str) -> StateManifest | None:
        if state is None:
            return None
        from dataclasses import replace

        files = self.state_files()
        targets: dict[str, str] = {}  # each file copied once (a pack of deltas is named by several groups)
        for key in state.all_files:
            targets[key] = files.adopted_key(savepoint_name, key)
            if targets[key] != key or source_bucket != self.bucket:
                files.copy(key, targets[key], source_bucket)
        return replace(state, files={group: tuple(targets[k] for k in keys) for group, keys in state.files.items()})

    def _store_savepoint(self, savepoint: Savepoint) -> Savepoint:
        key = self._savepoint_key(savepoint.name)
        try:
            self._create(key, savepoint.to_json())
        except _Conflict:
            raise TerminalError(f"savepoint {savepoint.name!r} already exists ({self.url(key)}); "
                                "savepoints are never overwritten: delete it first or pick another name") from None
        return savepoint

    def get_savepoint(self, name: str) -> Savepoint:
        savepoint = self._read(self._savepoint_key(name), Savepoint.from_json)
        if savepoint is None:
            names = ", ".join(s.name for s in self.list_savepoints()) or "none"
            raise TerminalError(f"savepoint {name!r} not found for pipeline {self.pipeline} (existing: {names})")
        return savepoint

    def list_savepoints(self) -> list[Savepoint]:
        prefix = f"{self.root}/savepoints/"
        try:
            keys = [o["Key"] for page in self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix) for o in page.get("Contents", [])]
        except ClientError as exc:
            raise _classify(exc, prefix) from exc
        except BotoCoreError as exc:
            raise _unreachable(exc, prefix) from exc
        found = [self._read(k, Savepoint.from_json) for k in keys if k.endswith(".json")]
        return sorted((s for s in found if s is not None), key=lambda s: s.created_at)

    def delete_savepoint(self, name: str) -> None:
        self.get_savepoint(name)
        self._delete(self._savepoint_key(name))

    def _delete(self, key: str) -> None:
        try:
            self._s3.delete_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            raise _classify(exc, key) from exc
        except BotoCoreError as exc:
            raise _unreachable(exc, key) from exc


def savepoint_pinned(savepoint: Savepoint, outcome: CompletedCheckpoint | AbortedCheckpoint | None) -> str | None:
    """Whether a savepoint just written names state files no garbage collection can have deleted
    (pure): None when its checkpoint, read again after the savepoint was written, is still completed
    (`CheckpointStore.create_savepoint` says why that is enough), else why the savepoint is refused
    and the way out. A savepoint without state names no files: nothing can be collected under it."""
    if savepoint.state is None or isinstance(outcome, CompletedCheckpoint):
        return None
    cid = savepoint.checkpoint_id
    return (f"cannot take savepoint {savepoint.name!r} of checkpoint {cid}: retention deleted checkpoint {cid} while "
            "the savepoint was being written, so garbage collection may have deleted state files it names; the "
            f"savepoint was removed. Take it of a retained checkpoint (`lockstep savepoint create {savepoint.name}` "
            "takes the latest completed one), or raise checkpoints.retain to keep older checkpoints longer")


def _each(read: Callable[[int], T], checkpoint_ids: Iterable[int]) -> list[T]:
    """``read`` of each id, in their order, `READ_THREADS` at a time (S3 reads wait on the network, not the
    interpreter lock). An error raises once the reads under way have ended."""
    ids = list(checkpoint_ids)
    if len(ids) <= 1:
        return [read(i) for i in ids]
    with ThreadPoolExecutor(min(READ_THREADS, len(ids)), thread_name_prefix="lockstep-views") as pool:
        return list(pool.map(read, ids))


class _Conflict(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _pointer_id(doc: object, url: str, pipeline: str) -> int:
    checkpoint_id = doc.get("checkpoint_id") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("schema") != POINTER_SCHEMA or isinstance(checkpoint_id, bool) \
            or not isinstance(checkpoint_id, int):
        raise MetadataError(url, f"expected schema {POINTER_SCHEMA!r} with an integer checkpoint_id")
    if doc.get("pipeline") != pipeline:
        raise MetadataError(url, f"belongs to pipeline {doc.get('pipeline')!r}, not {pipeline!r}")
    return checkpoint_id


def _classify(exc: ClientError, key: str) -> Exception:
    code = exc.response["Error"]["Code"]
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if status >= 500 or code in ("SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable"):
        return TransientError(f"S3 is unavailable for {key}: {code}; the task can be retried")
    return TerminalError(f"S3 refused access to {key}: {code} ({exc.response['Error'].get('Message', '')})")


def _unreachable(exc: BotoCoreError, key: str) -> Exception:
    """No answer from S3 at all (refused, reset, timed out): transient, whatever was being done."""
    return TransientError(f"S3 is unreachable for {key}: {exc}; the task can be retried (checkpoint metadata is "
                          "only ever created whole, so nothing half-written is left)")
