"""The two exception families of Lockstep.

Airflow decides from the class alone whether a task is worth retrying: a `TransientError`
(network blip, broker busy, S3 throttling) may succeed on the next try, a `TerminalError` will
not, so its message must tell the user what happened and what to do.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError", "DeletedRangesError", "JOB_CAUSE_PREFIX", "JOB_EXIT_TERMINAL", "JOB_EXIT_TRANSIENT",
    "LockstepError", "MetadataError", "OffsetAheadError", "SpecError", "SpecProblem", "TerminalError",
    "TopicRecreatedError", "TransientCheckpointError", "TransientError", "root_cause",
]

import re
from collections.abc import Iterable
from dataclasses import dataclass


class LockstepError(Exception):
    """Base of every error Lockstep raises on purpose."""


class TransientError(LockstepError):
    """A failure that may go away on its own; the task may be retried as is."""


class TerminalError(LockstepError):
    """A failure that a retry cannot fix; the message is what the user needs to act."""


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a pipeline spec, located precisely so it can be fixed without guessing."""

    file: str
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.reason}"


class SpecError(TerminalError):
    """A spec (or a set of specs) is invalid; carries every problem found, not just the first.

    Reporting everything at once spares the user a fix-one-rerun-find-the-next loop.
    """

    def __init__(self, problems: Iterable[SpecProblem]) -> None:
        self.problems: tuple[SpecProblem, ...] = tuple(problems)
        count = len(self.problems)
        header = f"{count} problem{'s' if count != 1 else ''} in pipeline spec{'s' if count != 1 else ''}:"
        super().__init__("\n".join([header, *(str(p) for p in self.problems)]))


class CheckpointError(TerminalError):
    """A checkpoint cannot proceed; the id is kept so every log line can name it."""

    #: The failed Spark run's own cause, on the run step's errors (``steps.run.run_failure``).
    cause: str | None = None

    def __init__(self, checkpoint_id: int, message: str) -> None:
        self.checkpoint_id = checkpoint_id
        super().__init__(f"checkpoint {checkpoint_id}: {message}")


class TransientCheckpointError(TransientError):
    """A checkpoint step failed in a way a retry may fix (a lost executor, a broker or S3 away)."""

    #: The failed Spark run's own cause, on the run step's errors (``steps.run.run_failure``).
    cause: str | None = None

    def __init__(self, checkpoint_id: int, message: str) -> None:
        self.checkpoint_id = checkpoint_id
        super().__init__(f"checkpoint {checkpoint_id}: {message}")


# ---- the Spark job's report to the run step ------------------------------------------------------
#: Exit codes of ``jobs/lockstep_checkpoint.py``: the run step retries on ``JOB_EXIT_TRANSIENT`` (and on
#: anything unknown: a killed JVM, a spark-submit that could not start) and fails at once on terminal.
JOB_EXIT_TERMINAL = 3
JOB_EXIT_TRANSIENT = 4
#: The job prints the failure's cause on one line after this prefix; the run step quotes it.
JOB_CAUSE_PREFIX = "lockstep-cause: "

_LOST_TASK = re.compile(r"most recent failure: Lost task [^:]*?\)(?: \([^)]*\))?: (.+)")


def root_cause(exc: BaseException, limit: int = 400) -> str:
    """One line that says why ``exc`` happened, for a summary a user reads first.

    A Python exception raised in a Spark task reaches the driver wrapped in Java text with the
    Python traceback inside: its last line (``ValueError: ...``) is the cause. A Java failure of a
    task is named after "most recent failure: Lost task ...:", else the last "Caused by:".
    """
    text = str(exc).strip()
    cause = None
    if "Traceback (most recent call last):" in text:
        after = text.split("Traceback (most recent call last):", 1)[1].splitlines()
        cause = next((line for line in after[1:] if line and not line[0].isspace()), None)
    if cause is None:
        lost = _LOST_TASK.search(text)
        if lost:
            cause = lost.group(1)
    if cause is None:
        caused = [line.split("Caused by: ", 1)[1] for line in text.splitlines() if "Caused by: " in line]
        cause = caused[-1] if caused else None
    if cause is None:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        cause = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    cause = " ".join(cause.split())
    return cause if len(cause) <= limit else cause[: limit - 1] + "…"


class MetadataError(TerminalError):
    """A stored metadata document is corrupt or was not written by this version of Lockstep.

    Never guess around such a document: it decides what gets committed.
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"metadata {key} is unusable: {reason}")


class DeletedRangesError(TerminalError):
    """Records a checkpoint must read were already deleted by Kafka retention.

    Carries (partition key, start offset, log start offset) for every affected partition.
    """

    def __init__(self, deleted: Iterable[tuple[str, int, int]], checkpoint_id: int | None = None,
                 start_source: str | None = None, restoring: bool = False) -> None:
        self.deleted: tuple[tuple[str, int, int], ...] = tuple(deleted)
        lines = [
            f"  {key}: offsets {start} to {log_start - 1} ({log_start - start} records) were deleted; "
            f"the next offset to read is {start}, the log now starts at {log_start}"
            for key, start, log_start in self.deleted
        ]
        what = f"checkpoint {checkpoint_id}" if checkpoint_id is not None else "the next checkpoint"
        source = f" (its start offsets come from {start_source})" if start_source else ""
        later = ("or restore from a later point instead" if restoring else
                 "or restore from a savepoint, a checkpoint or a time (--restore-from ...)")
        super().__init__(
            f"{what} cannot be planned: Kafka retention deleted records it must read{source}, on "
            f"{len(self.deleted)} partition(s):\n" + "\n".join(lines) + "\n"
            "To skip exactly these records and go on from the log start, set checkpoints.skip_deleted_ranges: "
            f"true (each skip is logged and recorded in the claim); {later}."
        )


class TopicRecreatedError(TerminalError):
    """A source topic has another topic id than when the last completed checkpoint was planned: it was
    deleted and created again, so the stored offsets point into a different log."""

    def __init__(self, checkpoint_id: int, recreated: Iterable[tuple[str, str, str]],
                 restore: str | None = None) -> None:
        self.recreated: tuple[tuple[str, str, str], ...] = tuple(recreated)
        if restore is not None:
            lines = [f"  {topic}: topic id {old} in {restore}, {new} now" for topic, old, new in self.recreated]
            super().__init__(
                f"cannot restore from {restore}: source topic{'s' if len(self.recreated) > 1 else ''} deleted and "
                "created again since it was taken:\n" + "\n".join(lines) + "\n"
                f"Its offsets belong to the old topic; nothing was claimed for checkpoint {checkpoint_id}. Restore "
                "from a time instead (--restore-from time:<ISO time>), or from a savepoint taken since."
            )
            return
        lines = [f"  {topic}: topic id {old} at checkpoint {checkpoint_id}, {new} now" for topic, old, new in self.recreated]
        super().__init__(
            f"source topic{'s' if len(self.recreated) > 1 else ''} deleted and created again since checkpoint "
            f"{checkpoint_id}:\n" + "\n".join(lines) + "\n"
            "Its stored offsets belong to the old topic: reading the new one from them would skip or misread "
            "records. Choose where to read the new topic from: set source.on_topic_recreated: earliest (all of "
            "it) or latest (only what comes next), or restore from a time (--restore-from time:<ISO time>)."
        )


class OffsetAheadError(TerminalError):
    """A start offset lies beyond the end of the log (truncated, or the topic deleted and recreated)."""

    def __init__(self, ahead: Iterable[tuple[str, int, int]], checkpoint_id: int | None = None) -> None:
        self.ahead: tuple[tuple[str, int, int], ...] = tuple(ahead)
        lines = [
            f"  {key}: next offset to read is {start} but the log ends at {end}"
            for key, start, end in self.ahead
        ]
        what = f"checkpoint {checkpoint_id}" if checkpoint_id is not None else "the next checkpoint"
        super().__init__(
            f"{what} cannot be planned: its start offsets are ahead of the log on {len(self.ahead)} partition(s):\n"
            + "\n".join(lines)
            + "\nThe log was truncated, or the topic deleted and created again. Restore from a savepoint, a "
            "checkpoint or a time (--restore-from ...) that names offsets of the log as it is now."
        )
