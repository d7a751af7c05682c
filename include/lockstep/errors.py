"""The two exception families of Lockstep.

Airflow decides from the class alone whether a task is worth retrying: a `TransientError`
(network blip, broker busy, S3 throttling) may succeed on the next try, a `TerminalError` will
not, so its message must tell the user what happened and what to do.
"""

from __future__ import annotations

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

    def __init__(self, checkpoint_id: int, message: str) -> None:
        self.checkpoint_id = checkpoint_id
        super().__init__(f"checkpoint {checkpoint_id}: {message}")


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

    def __init__(self, deleted: Iterable[tuple[str, int, int]]) -> None:
        self.deleted: tuple[tuple[str, int, int], ...] = tuple(deleted)
        lines = [
            f"  {key}: next offset to read is {start} but the log now starts at {log_start} "
            f"({log_start - start} records deleted by retention)"
            for key, start, log_start in self.deleted
        ]
        super().__init__(
            "records to be read were deleted by Kafka retention on "
            f"{len(self.deleted)} partition(s):\n" + "\n".join(lines) + "\n"
            "Data was lost before Lockstep could read it. To accept the loss and continue from the "
            "log start, set checkpoints.skip_deleted_ranges: true (skipped counts are logged), "
            "or restore from a savepoint."
        )


class OffsetAheadError(TerminalError):
    """A start offset lies beyond the end of the log (the topic was probably deleted and recreated)."""

    def __init__(self, ahead: Iterable[tuple[str, int, int]]) -> None:
        self.ahead: tuple[tuple[str, int, int], ...] = tuple(ahead)
        lines = [
            f"  {key}: next offset to read is {start} but the log ends at {end}"
            for key, start, end in self.ahead
        ]
        super().__init__(
            f"start offsets are ahead of the log on {len(self.ahead)} partition(s):\n"
            + "\n".join(lines)
            + "\nWas the topic deleted and recreated? Restore from a savepoint or reset the "
            "pipeline's checkpoints to start over."
        )
