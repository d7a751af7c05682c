"""What the commit does with a checkpoint's Iceberg snapshot, from what the table says (pure).

The table is the second participant of the checkpoint's two-phase commit, beside its Kafka transactions. Its
staged snapshot never times out (a branch keeps it), so the Kafka transactions are decided first
(`lockstep.rules.commit_decision`) and the table follows that decision, after them: a crash between the two
leaves Kafka committed and the table staged, which the commit completes again (roll-forward), never loses.

- Kafka commits (or committed already, or had nothing to commit): publish the staged snapshot's files, unless
  main holds the checkpoint's snapshot already (`PUBLISHED`).
- A repair: publish all files but those of the source partitions whose rows go back to the next checkpoint,
  which writes them again to both (`lost_sources`).
- Kafka aborts: drop the staged branch; nothing reached main.
- The staged snapshot is gone and was never published (someone removed the branch): when nothing of the
  checkpoint was committed yet, abort it all; otherwise it cannot be completed exactly (`LOST`).
"""
from __future__ import annotations

__all__ = [
    "TableStep", "TableStepKind", "decide_table", "lost_sources",
]

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from lockstep.iceberg.staged_table import StagedTable, TableFile
from lockstep.model.offsets import OffsetRange
from lockstep.rules.commit_decision import CommitDecision, DecisionKind
from lockstep.rules.output_tasks import task_of_partition

_COMMITTING = (DecisionKind.COMMIT, DecisionKind.ALREADY_COMMITTED, DecisionKind.NOTHING_TO_COMMIT,
               DecisionKind.REPAIR)


class TableStepKind(str, Enum):
    NOTHING = "nothing"
    PUBLISH = "publish"
    PUBLISHED = "published"
    DROP = "drop"
    ABORT_ALL = "abort_all"
    LOST = "lost"


@dataclass(frozen=True)
class TableStep:
    kind: TableStepKind
    files: tuple[TableFile, ...] = ()
    snapshot_id: int | None = None
    message: str = ""


def lost_sources(decision: CommitDecision, ranges: Sequence[OffsetRange]) -> frozenset[str]:
    """The source partitions (``topic:partition``) whose rows a repair gives back to the next checkpoint: the
    ranges it reads again, or the source partitions of the tasks a stateful checkpoint's next one computes
    again (`lockstep.rules.output_tasks`)."""
    given = {r.tp.key for r in decision.replay}
    if decision.rerun:
        tasks = task_of_partition(ranges, decision.of_tasks)
        given.update(tp for tp, task in tasks.items() if task in decision.rerun)
    return frozenset(given)


def decide_table(decision: CommitDecision, staged: StagedTable | None, published: int | None, still_staged: bool,
                 given_back: Iterable[str] = ()) -> TableStep:
    """What to do with the table after (or, for `ABORT_ALL` and `LOST`, instead of) the Kafka ``decision``.
    ``published``: main's snapshot of the checkpoint, if any; ``still_staged``: its branch still holds the staged
    snapshot; ``given_back``: `lost_sources` of a repair."""
    cid = decision.checkpoint_id
    if staged is None or staged.snapshot_id is None:
        return TableStep(TableStepKind.NOTHING, message=f"checkpoint {cid} has no rows for the table")
    if decision.kind is DecisionKind.ABORT:
        if published is not None:  # the table's decision came first once: keep to it, never half-undo a commit
            return TableStep(TableStepKind.LOST, snapshot_id=published, message=(
                f"checkpoint {cid}'s snapshot {published} is published on {staged.table}'s main branch, but its Kafka "
                "transactions must be aborted"))
        return TableStep(TableStepKind.DROP, message=f"checkpoint {cid}: drop the snapshot staged on {staged.branch}")
    if decision.kind not in _COMMITTING:
        return TableStep(TableStepKind.NOTHING, message=f"checkpoint {cid}: the table waits for the Kafka decision")
    if published is not None:
        return TableStep(TableStepKind.PUBLISHED, snapshot_id=published,
                         message=f"checkpoint {cid}: snapshot {published} on {staged.table}'s main branch already")
    if not still_staged:
        gone = (f"checkpoint {cid}'s snapshot staged on branch {staged.branch} of {staged.table} is gone and was "
                "never published (was the branch removed?)")
        if decision.kind is DecisionKind.COMMIT and not decision.already_committed:
            return TableStep(TableStepKind.ABORT_ALL, message=f"{gone}: the checkpoint is aborted, and its input "
                                                              "read again by the next checkpoint")
        return TableStep(TableStepKind.LOST, message=(
            f"{gone}, and its Kafka transactions are committed: its rows are missing from the table. Run `lockstep "
            "verify` to see which, and write them again with a savepoint's backfill (docs/iceberg.md)"))
    lost = frozenset(given_back)
    files = staged.without_sources(lost) if lost else staged.files
    left = f" (without the {len(staged.files) - len(files)} files of the partitions given back)" if lost else ""
    return TableStep(TableStepKind.PUBLISH, files=files,
                     message=f"checkpoint {cid}: publish {len(files)} files{left} on {staged.table}'s main branch")
