"""Which transaction each output record of a stateful checkpoint goes to (lockstep.rules.output_tasks),
and the metadata a stateful partial commit's repair leaves (Repair, Rerun, the claim's rerun)."""
from __future__ import annotations

import pytest

from lockstep.errors import MetadataError
from lockstep.model.checkpoint import CheckpointClaim, CompletedCheckpoint, PreparedCheckpoint, Repair, Rerun
from lockstep.model.offsets import OffsetRange
from lockstep.rules.output_tasks import murmur3_int, slots, spark_partition_of, task_groups, task_of_partition


def test_the_claims_partitions_are_dealt_to_the_tasks_in_turn_whatever_their_order_or_emptiness():
    ranges = [OffsetRange("b", 0, 0, 5), OffsetRange("a", 1, 3, 3), OffsetRange("a", 0, 0, 9), OffsetRange("a", 2, 0, 1)]
    assert task_of_partition(ranges, 2) == {"a:0": 0, "a:1": 1, "a:2": 0, "b:0": 1}
    assert task_of_partition(reversed(ranges), 2) == task_of_partition(ranges, 2)
    assert set(task_of_partition(ranges, 8).values()) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="at least one task"):
        task_of_partition(ranges, 0)


def test_each_task_reads_the_source_partitions_dealt_to_it_in_its_own_spark_partition():
    ranges = [OffsetRange("b", 0, 0, 5), OffsetRange("a", 1, 3, 3), OffsetRange("a", 0, 0, 9), OffsetRange("a", 2, 0, 1)]
    assert task_groups(ranges, 2) == [["a:0", "a:2"], ["a:1", "b:0"]]
    # More tasks than partitions: the tasks past them read nothing, and are still there (one Spark partition each).
    assert task_groups(ranges, 6) == [["a:0"], ["a:1"], ["a:2"], ["b:0"], [], []]
    assert {n: t for t, names in enumerate(task_groups(ranges, 3)) for n in names} == task_of_partition(ranges, 3)


def test_the_readers_settings_name_each_tasks_group_and_refuse_a_count_that_differs():
    from lockstep.spark.kafka_reader import reader_settings

    ranges = (OffsetRange("a", 0, 0, 9), OffsetRange("a", 1, 3, 3))
    assert "groups" not in reader_settings({}, ranges, 2)  # the reader spreads the ranges by their counts
    assert reader_settings({}, ranges, 2, [["a:0"], ["a:1"]])["groups"] == [["a:0"], ["a:1"]]
    with pytest.raises(ValueError, match="3 tasks needs 3 groups, got 2"):
        reader_settings({}, ranges, 3, [["a:0"], ["a:1"]])


@pytest.mark.parametrize(("rows", "in_place"), [
    # (topic, partition, offset, spark partition) in the order Spark held them; a:0 and a:2 are task 0's, a:1 task 1's
    ([("a", 0, 5, 0), ("a", 2, 1, 0), ("a", 0, 7, 0), ("a", 1, 3, 1), ("a", 1, 4, 1)], True),
    ([], False),  # nothing to tell by (every record an error): placed by the shuffle
    ([("a", 0, 5, 0), ("a", 1, 3, 0)], False),  # a:1's record in task 0's partition: the transform moved it
    ([("a", 0, 7, 0), ("a", 0, 5, 0)], False),  # out of offset order within its partition (a sort)
    ([("a", 0, 5, 0), ("a", 0, 5, 0)], False),  # an offset twice (the transform doubled a record)
    ([("z", 0, 5, 0)], False),  # a partition the claim does not name
])
def test_the_output_stays_where_it_was_read_only_when_each_record_is_in_its_tasks_partition_in_order(rows, in_place):
    import pyarrow as pa

    from lockstep.spark.dedup_run import SPARK_PARTITION, _read_in_place

    records = pa.table({"topic": pa.array([r[0] for r in rows], pa.string()),
                        "partition": pa.array([r[1] for r in rows], pa.int32()),
                        "offset": pa.array([r[2] for r in rows], pa.int64()),
                        SPARK_PARTITION: pa.array([r[3] for r in rows], pa.int32())})
    assert _read_in_place(records, {"a:0": 0, "a:1": 1, "a:2": 0}) is in_place


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
