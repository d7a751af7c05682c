"""The drift audit's decisions (``lockstep.ops.drift``) on in-memory checkpoints."""
from __future__ import annotations

from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CheckpointView,
    CompletedCheckpoint,
    PreparedCheckpoint,
)
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.ops.drift import asset_drift, group_drift, summary

AT = "2026-11-23T12:00:00+00:00"
P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def _view(cid: int, ends: dict[str, int], records: int = 10, restored_from: str | None = None,
          completed: bool = True) -> CheckpointView:
    claim = CheckpointClaim("orders", cid, f"run-{cid}", AT, tuple(OffsetRange("orders", TopicPartition.from_key(k)
                                                                               .partition, 0, e) for k, e in ends.items()),
                            "checkpoint", restored_from=restored_from)
    prepared = PreparedCheckpoint("orders", cid, AT, (), records, records, 0, 1.0)
    if not completed:
        return CheckpointView(claim, prepared, aborted=AbortedCheckpoint("orders", cid, AT, "timed out", "replay"))
    return CheckpointView(claim, prepared, CompletedCheckpoint("orders", cid, AT, ends, ()))


def test_a_group_at_the_checkpoints_ends_has_no_drift():
    assert group_drift(_view(3, {"orders:0": 10, "orders:1": 5}), "g", {P0: 10, P1: 5}) == []
    assert group_drift(None, "g", {P0: 1}) == []  # nothing completed: nothing to compare
    assert summary([]).startswith("drift: none")


def test_ahead_behind_and_missing_are_flagged_with_the_way_out():
    findings = group_drift(_view(3, {"orders:0": 10, "orders:1": 5, "orders:2": 7}), "g", {P0: 15, P1: 2})
    by = {f.subject: f for f in findings}
    assert not any(f.explained for f in findings)
    assert "5 ahead of checkpoint 3's end 10: moved by hand" in by["orders:0"].message
    assert "--to-offset 10" in by["orders:0"].message
    assert "3 behind checkpoint 3's end 5: its publish failed" in by["orders:1"].message
    assert "has no offset" in by["orders:2"].message and "re-run the commit of checkpoint 3" in by["orders:2"].message
    assert summary(findings).splitlines()[0] == "drift: 3 to act on, 0 explained"


def test_a_restore_explains_a_group_ahead_and_a_moved_source_is_not_compared():
    (after_restore,) = group_drift(_view(4, {"orders:0": 10}, restored_from="sp1"), "g", {P0: 30})
    assert "restored from sp1" in after_restore.message
    (moved,) = group_drift(_view(4, {"orders:0": 10}), "g", {P0: 99}, moved_from="kafka_old")
    assert moved.explained and "'kafka_old'" in moved.message


def test_asset_events_must_name_completed_checkpoints_with_their_records():
    views = {1: _view(1, {"orders:0": 10}), 2: _view(2, {"orders:0": 20}, completed=False),
             3: _view(3, {"orders:0": 30}, records=7), 4: _view(4, {"orders:0": 40}, records=5)}
    events = [{"checkpoint_id": 1, "records": 10, "end_offsets": {"orders:0": 10}},
              {"checkpoint_id": 2, "records": 10},
              {"checkpoint_id": 3, "records": 8, "end_offsets": {"orders:0": 30}}]
    by = {f.subject: f for f in asset_drift(events, views)}
    assert "is aborted: downstream DAGs ran for output that was never committed" in by["checkpoint 2"].message
    assert "says 8 records, the checkpoint wrote 7" in by["checkpoint 3"].message
    assert by["checkpoint 4"].explained and "rolled forward" in by["checkpoint 4"].message  # no event of its own
    assert "checkpoint 1" not in by
    kept = asset_drift([{"checkpoint_id": 1, "records": 3}], views, first_retained=2)
    assert "checkpoint 1" not in {f.subject for f in kept}  # deleted by retention: not judged
