"""Which transaction each output record of a stateful checkpoint goes to (lockstep.rules.output_tasks),
and the metadata a stateful partial commit's repair leaves (Repair, Rerun, the claim's rerun)."""
from __future__ import annotations

import pytest

from lockstep.errors import MetadataError
from lockstep.model.checkpoint import CheckpointClaim, CompletedCheckpoint, PreparedCheckpoint, Repair, Rerun
from lockstep.model.offsets import OffsetRange
from lockstep.rules.output_tasks import murmur3_int, slots, spark_partition_of, task_of_partition


def test_the_claims_partitions_are_dealt_to_the_tasks_in_turn_whatever_their_order_or_emptiness():
    ranges = [OffsetRange("b", 0, 0, 5), OffsetRange("a", 1, 3, 3), OffsetRange("a", 0, 0, 9), OffsetRange("a", 2, 0, 1)]
    assert task_of_partition(ranges, 2) == {"a:0": 0, "a:1": 1, "a:2": 0, "b:0": 1}
    assert task_of_partition(reversed(ranges), 2) == task_of_partition(ranges, 2)
    assert set(task_of_partition(ranges, 8).values()) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="at least one task"):
        task_of_partition(ranges, 0)


def test_murmur3_is_sparks_hash_of_an_int():
    # Reference values printed by Spark 4.0's `hash(CAST(v AS INT))` (Murmur3, seed 42), the hash its
    # `repartition(n, column)` places rows by.
    assert [murmur3_int(v) for v in (0, 1, 2, 42)] == [933211791, -559580957, 1765031574, 29417773]


@pytest.mark.parametrize("tasks", [1, 2, 3, 8, 13, 256])
def test_each_tasks_slot_lands_in_that_tasks_spark_partition(tasks):
    found = slots(tasks)
    assert len(found) == tasks and len(set(found)) == tasks
    assert [spark_partition_of(v, tasks) for v in found] == list(range(tasks))


def test_a_repair_that_reruns_tasks_round_trips_and_names_what_is_written_again():
    repair = Repair({"p-5-1": "timed out"}, (), None, rerun_tasks=(1,), of_tasks=2)
    assert "computes this one again" in repair.summary and "task 1 again" in repair.summary
    doc = CompletedCheckpoint("p", 5, "t", {"in:0": 9}, ("p-5-0",), repair=repair).to_json()
    back = CompletedCheckpoint.from_json(doc).repair
    assert back == repair and back.rerun(5) == Rerun(5, (1,), 2)
    assert Repair({"p-5-1": "x"}, (OffsetRange("in", 0, 0, 9),)).rerun(5) is None, "a stateless repair reruns nothing"
    with pytest.raises(MetadataError, match="rerun_tasks"):
        CompletedCheckpoint.from_json({**doc, "repair": {**doc["repair"], "rerun_tasks": ["one"]}})


def test_a_claim_carries_its_rerun_and_a_prepared_checkpoint_its_output_tasks():
    claim = CheckpointClaim("p", 6, "r", "2026-11-27T00:00:00+00:00", (OffsetRange("in", 0, 9, 9),), "checkpoint",
                            rerun=Rerun(5, (1,), 2))
    assert claim.needs_spark and claim.task_count == 1, "no records, but a share to write"
    assert CheckpointClaim.from_json(claim.to_json()).rerun == Rerun(5, (1,), 2)
    with pytest.raises(MetadataError):
        CheckpointClaim.from_json({**claim.to_json(), "rerun": {"checkpoint": 5, "tasks": [2], "of_tasks": 2}})
    prepared = PreparedCheckpoint("p", 6, "t", (), 0, 0, 0, 1.0, output_tasks=3)
    assert PreparedCheckpoint.from_json(prepared.to_json()).output_tasks == 3
    assert "output_tasks" not in PreparedCheckpoint("p", 6, "t", (), 0, 0, 0, 1.0).to_json()
