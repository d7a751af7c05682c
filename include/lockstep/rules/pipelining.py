"""Pipelined checkpoints (pure): when the next checkpoint may be planned on top of one still in flight, and
what a pipelined checkpoint's commit does once that one has settled.

Flink starts checkpoint N+1 before N is confirmed, and a higher checkpoint subsumes a lower one: its state
covers everything before it. A Lockstep checkpoint's output covers only its own ranges, so N+1 cannot
subsume N. Instead, with ``checkpoints.pipelined``, it is planned *on top of* N once N is prepared, while
another run still carries N: its ranges start where N's end, its keyed state and tables are N's prepared
ones, and its claim names N (``after``). It runs and prepares while N commits. It commits only once N has
completed exactly as prepared (`verdict`); if N was aborted, or completed after a repair that gave ranges
back, N+1 is aborted too, and the next run replays both from the latest completed checkpoint, with N's pins
as any replay of an aborted checkpoint. Completed checkpoints keep tiling every partition, in order.

Measured through the scheduler on this 2-core machine (docs/benchmarks-making-faster.md, section 6):
- Not while N still runs. A stateless N+1 planned on top of a running N (at 100,000 records/s, a lag trigger
  of 1 record) took the few records since N's plan, ran beside N on the same cores, and the next large
  checkpoint waited for both: p50 24.7 s, against 12.2 s in the committed page's run without it. The runs of
  a pipeline do not overlap; only a run and the commit before it do.
- Off by default. Overlapping a run with the commit before it measured no gain where a run is CPU-bound:
  20,000 records/s alternated on, off, off, on: stateless p99 4.50, 4.66, 4.33, 4.31 s; windowed 10.2, 9.1,
  9.7, 9.0 s; at 100,000 records/s one pair, on then off: 27.7 and 23.7 s. It is for runs whose commit and
  next plan do not take their cores.
"""
from __future__ import annotations

__all__ = [
    "ABORT", "COMMIT", "WAIT", "Verdict", "plan_on_top", "verdict",
]

from collections.abc import Sequence
from dataclasses import dataclass

from lockstep.model.checkpoint import CheckpointClaim, CheckpointStatus, CheckpointView

_UNSETTLED = (CheckpointStatus.CLAIMED, CheckpointStatus.PREPARED)


def plan_on_top(after: Sequence[CheckpointView], restore: str | None, enabled: bool) -> CheckpointView | str | None:
    """What the next plan does about the checkpoints still in flight once recovery settled the rest.

    ``after``: the checkpoints after the latest completed one, as recovery left them (those still in
    flight belong to other live runs, or wait for one). Returns None when none is in flight (plan as
    usual), the prepared checkpoint to plan on top of, or why the plan must wait for the one in flight."""
    unsettled = [v for v in after if v.status in _UNSETTLED]
    if not unsettled:
        return None
    ids = ", ".join(str(v.checkpoint_id) for v in unsettled)
    if not enabled:
        return f"checkpoint {ids} is in flight and checkpoints.pipelined is off"
    if restore is not None:
        return (f"checkpoint {ids} is in flight, and a restore starts from its own checkpoint or savepoint, "
                "not on top of one in flight")
    if len(unsettled) > 1:
        return f"checkpoints {ids} are in flight: a checkpoint is planned on top of one at most"
    pred = unsettled[0]
    if pred.status is CheckpointStatus.CLAIMED:
        return (f"checkpoint {pred.checkpoint_id} is still running: the next checkpoint is planned on top of it once "
                "it is prepared")
    before = next((v for v in after if v.checkpoint_id == pred.claim.after), None)
    if before is not None and before.status is CheckpointStatus.ABORTED:
        return (f"checkpoint {pred.checkpoint_id} will be aborted: checkpoint {before.checkpoint_id}, which it was "
                "planned on top of, was aborted")
    return pred


#: `Verdict.kind`: commit the pipelined checkpoint now, wait for the one it was planned on top of, or abort it.
COMMIT, WAIT, ABORT = "commit", "wait", "abort"


@dataclass(frozen=True)
class Verdict:
    """What a pipelined checkpoint's commit does about the checkpoint it was planned on top of."""

    kind: str
    reason: str = ""


def verdict(claim: CheckpointClaim, pred: CheckpointView | None) -> Verdict:
    """Commit only when checkpoint ``claim.after`` (``pred``, None if the store has lost it) completed as the
    claim assumed: its end offsets where the claim's ranges start, its state and tables the claim's bases.
    Wait while it is in flight; abort when it was aborted or completed otherwise (after a repair that gave
    ranges back, or with the state it started from when a user accepted duplicates)."""
    if claim.after is None:
        return Verdict(COMMIT)
    before = f"checkpoint {claim.after}, which it was planned on top of while in flight,"
    if pred is None:
        return Verdict(ABORT, f"{before} is not in the store any more")
    if pred.status in _UNSETTLED:
        return Verdict(WAIT, f"{before} is {pred.status.value}")
    if pred.aborted is not None:
        return Verdict(ABORT, f"{before} was aborted ({pred.aborted.reason})")
    completed = pred.completed
    assert completed is not None  # settled and not aborted
    moved = sorted(r.tp.key for r in claim.ranges
                   if r.tp.key in completed.end_offsets and completed.end_offsets[r.tp.key] != r.start)
    if moved:
        return Verdict(ABORT, f"{before} completed with other end offsets than it prepared "
                              f"({', '.join(moved)}{': after a repair' if completed.repair else ''})")
    if claim.state_base != completed.state:
        return Verdict(ABORT, f"{before} completed with another state than the one it prepared")
    other = sorted(name for name, pin in claim.tables.items() if pin.base != completed.tables.get(name))
    if other:
        return Verdict(ABORT, f"{before} completed with other versions of tables {', '.join(other)}")
    return Verdict(COMMIT)
