"""Checkpoint metadata: forward-only status, JSON round trips, loud failures on foreign documents."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from lockstep.errors import CheckpointError, MetadataError, TerminalError
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CheckpointStatus,
    CheckpointView,
    CompletedCheckpoint,
    PreparedCheckpoint,
    PreparedTransaction,
    Repair,
    can_transition,
)
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.model.savepoint import Savepoint, validate_savepoint_name
from lockstep.model.state_manifest import PartitionTime, StateManifest

S = CheckpointStatus
KEY = "checkpoints/orders-enrich/42/claim.json"


def claim(cid: int = 42, ranges: tuple[OffsetRange, ...] | None = None) -> CheckpointClaim:
    return CheckpointClaim(
        pipeline="orders-enrich", checkpoint_id=cid, run_id="scheduled__2025-01-01", claimed_at="2025-01-01T00:00:00Z",
        ranges=ranges if ranges is not None else (OffsetRange("orders", 0, 10, 20), OffsetRange("orders", 1, 5, 5)),
        start_source="checkpoint:41", restored_from=None, skipped={"orders:0": 3},
    )


def txn(task: int = 0, cid: int = 42) -> PreparedTransaction:
    return PreparedTransaction(
        transactional_id=f"orders-enrich-{cid}-{task}", producer_id=1000 + task, epoch=3,
        partitions=(TopicPartition("orders-enriched", task), TopicPartition("orders-enriched-dlq", 0)),
        records=10, dead_letters=1, task_index=task, opened_at_ms=1_700_000_000_000,
        sources=(TopicPartition("orders", task),),
    )


def prepared(cid: int = 42) -> PreparedCheckpoint:
    return PreparedCheckpoint(
        pipeline="orders-enrich", checkpoint_id=cid, prepared_at="2025-01-01T00:01:00Z",
        transactions=(txn(0, cid), txn(1, cid)), records_in=20, records_out=18, records_dead_lettered=2,
        spark_seconds=12.5,
    )


def completed(cid: int = 42) -> CompletedCheckpoint:
    return CompletedCheckpoint(pipeline="orders-enrich", checkpoint_id=cid, completed_at="2025-01-01T00:02:00Z",
                               end_offsets={"orders:0": 20, "orders:1": 5}, committed=("orders-enrich-42-0",))


def aborted(cid: int = 42) -> AbortedCheckpoint:
    return AbortedCheckpoint(pipeline="orders-enrich", checkpoint_id=cid, aborted_at="2025-01-01T00:02:00Z",
                             reason="transaction orders-enrich-42-0 timed out after 900000 ms",
                             replay_hint="the next run replays orders partition 0 from checkpoint 41")


def savepoint(name: str = "nightly") -> Savepoint:
    return Savepoint(name=name, pipeline="orders-enrich", checkpoint_id=42, created_at="2025-01-02T00:00:00Z",
                     end_offsets={"orders:0": 20}, ranges=(OffsetRange("orders", 0, 10, 20),))


VALUES = [claim(), txn(), prepared(), completed(), aborted(), savepoint()]
#: Fields added after the schema's first version: documents of earlier versions lack them.
OPTIONAL_FIELDS = {("sources", PreparedTransaction)}


# --- status ---


@pytest.mark.parametrize(("old", "new"), [(S.CLAIMED, S.PREPARED), (S.CLAIMED, S.ABORTED),
                                          (S.PREPARED, S.COMPLETED), (S.PREPARED, S.ABORTED)])
def test_forward_transitions_are_allowed(old: S, new: S) -> None:
    assert can_transition(old, new)


def test_nothing_else_is_allowed() -> None:
    allowed = {(S.CLAIMED, S.PREPARED), (S.CLAIMED, S.ABORTED), (S.PREPARED, S.COMPLETED), (S.PREPARED, S.ABORTED)}
    for old in S:
        for new in S:
            assert can_transition(old, new) == ((old, new) in allowed), (old, new)


# --- JSON round trips ---


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_json_round_trip_through_text(value: Any) -> None:
    doc = json.loads(json.dumps(value.to_json()))
    assert type(value).from_json(doc, KEY) == value
    assert doc["schema"].startswith("lockstep.") and doc["schema"].endswith("/1")


def test_schemas_differ_per_document_type() -> None:
    schemas = [v.to_json()["schema"] for v in VALUES]
    assert len(set(schemas)) == len(schemas)


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_foreign_schema_is_rejected_naming_the_key(value: Any) -> None:
    doc = value.to_json()
    doc["schema"] = "lockstep.checkpoint/99"
    with pytest.raises(MetadataError) as info:
        type(value).from_json(doc, KEY)
    assert info.value.key == KEY
    assert KEY in str(info.value) and "lockstep.checkpoint/99" in str(info.value)


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_missing_schema_is_rejected(value: Any) -> None:
    doc = value.to_json()
    del doc["schema"]
    with pytest.raises(MetadataError, match="schema is None"):
        type(value).from_json(doc, KEY)


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_every_missing_field_is_named(value: Any) -> None:
    for name in value.to_json():
        if name == "schema" or (name, type(value)) in OPTIONAL_FIELDS:
            continue
        doc = value.to_json()
        del doc[name]
        with pytest.raises(MetadataError) as info:
            type(value).from_json(doc, KEY)
        assert f"missing field {name!r}" in str(info.value) and KEY in str(info.value)


@pytest.mark.parametrize(
    ("field", "bad"),
    [("checkpoint_id", "42"), ("checkpoint_id", True), ("ranges", [{"topic": "t"}]),
     ("ranges", [{"topic": "t", "partition": 0, "start": 5, "end": 1}]), ("skipped", {"nokey": 1}),
     ("skipped", {"orders:0": -1}), ("pipeline", None)],
)
def test_wrong_field_values_are_metadata_errors(field: str, bad: Any) -> None:
    doc = claim().to_json()
    doc[field] = bad
    with pytest.raises(MetadataError) as info:
        CheckpointClaim.from_json(doc, KEY)
    assert field in str(info.value) or "range" in str(info.value)


def test_non_object_document_is_rejected() -> None:
    with pytest.raises(MetadataError, match="expected a JSON object"):
        PreparedCheckpoint.from_json([1, 2], KEY)


def test_broken_nested_committable_names_its_position() -> None:
    doc = prepared().to_json()
    del doc["transactions"][1]["epoch"]
    with pytest.raises(MetadataError) as info:
        PreparedCheckpoint.from_json(doc, KEY)
    assert "transactions[1]" in str(info.value) and "'epoch'" in str(info.value)


def test_prepared_checkpoint_rejects_duplicate_transactional_ids() -> None:
    with pytest.raises(CheckpointError):
        PreparedCheckpoint("p", 1, "t", (txn(0), txn(0)), 0, 0, 0, 0.0)
    doc = prepared().to_json()
    doc["transactions"][1] = doc["transactions"][0]
    with pytest.raises(MetadataError, match="duplicate"):
        PreparedCheckpoint.from_json(doc, KEY)


def test_claim_derived_values() -> None:
    c = claim()
    assert c.end_offsets == {"orders:0": 20, "orders:1": 5}
    assert c.task_count == 1  # the empty range needs no task


def test_empty_committable() -> None:
    assert not txn().is_empty
    empty = PreparedTransaction("orders-enrich-42-9", 1, 0, (), 0, 0, 9, 0)
    assert empty.is_empty


# --- savepoint names ---


@pytest.mark.parametrize("name", ["nightly", "2025-01-01", "before.v2_migration", "a" * 100])
def test_valid_savepoint_names(name: str) -> None:
    assert validate_savepoint_name(name) == name


@pytest.mark.parametrize("name", ["", "-x", ".hidden", "a/b", "a..b", "a" * 101, "with space", "ü"])
def test_invalid_savepoint_names_say_what_is_allowed(name: str) -> None:
    with pytest.raises(TerminalError) as info:
        validate_savepoint_name(name)
    assert "letters, digits" in str(info.value)
    with pytest.raises(TerminalError):
        savepoint(name)


def test_savepoint_with_bad_name_in_store_is_metadata_error() -> None:
    doc = savepoint().to_json()
    doc["name"] = "../escape"
    with pytest.raises(MetadataError, match="invalid savepoint name"):
        Savepoint.from_json(doc, KEY)


# --- the assembled view ---


def test_view_status_is_derived_from_parts() -> None:
    assert CheckpointView(claim()).status is S.CLAIMED
    assert CheckpointView(claim(), prepared()).status is S.PREPARED
    assert CheckpointView(claim(), prepared(), completed()).status is S.COMPLETED
    assert CheckpointView(claim(), prepared(), aborted=aborted()).status is S.ABORTED
    assert CheckpointView(claim(), aborted=aborted()).status is S.ABORTED
    assert CheckpointView(claim()).checkpoint_id == 42


def test_view_rejects_inconsistent_parts() -> None:
    with pytest.raises(CheckpointError, match="both completed and aborted"):
        CheckpointView(claim(), prepared(), completed(), aborted())
    with pytest.raises(CheckpointError, match="checkpoint 43"):
        CheckpointView(claim(42), prepared(43))


def test_a_run_failure_round_trips_and_names_its_schema():
    from lockstep.model.checkpoint import RUN_FAILURE_SCHEMA, RunFailure

    failure = RunFailure("orders", 42, "2026-11-23T08:00:00+00:00", "ValueError: cannot parse amount")
    assert failure.to_json()["schema"] == RUN_FAILURE_SCHEMA
    assert RunFailure.from_json(failure.to_json()) == failure



def test_topic_ids_round_trip_and_documents_without_them_still_read():
    recorded = replace(claim(), topic_ids={"orders": "AAAAAAAAAHsAAAAAAAAByA"})
    assert CheckpointClaim.from_json(json.loads(json.dumps(recorded.to_json()))) == recorded
    assert "topic_ids" not in claim().to_json()  # as claims of earlier versions: absent, read as {}
    assert CheckpointClaim.from_json(claim().to_json()).topic_ids == {}
    done = CompletedCheckpoint("orders", 42, "2026-01-01T00:00:00+00:00", {"orders:0": 5}, ("t-42-0",),
                               {"orders": "AAAAAAAAAHsAAAAAAAAByA"})
    assert CompletedCheckpoint.from_json(done.to_json()) == done
    with pytest.raises(MetadataError, match="topic_ids"):
        CheckpointClaim.from_json({**recorded.to_json(), "topic_ids": {"orders": 7}})


def test_a_committables_sources_round_trip_and_committables_without_them_read_as_unknown():
    assert PreparedTransaction.from_json(json.loads(json.dumps(txn(1).to_json()))).sources == (
        TopicPartition("orders", 1),)
    earlier = {k: v for k, v in txn().to_json().items() if k != "sources"}  # as written before sources existed
    assert PreparedTransaction.from_json(earlier).sources is None
    with pytest.raises(MetadataError, match="sources"):
        PreparedTransaction.from_json({**txn().to_json(), "sources": ["orders"]}, KEY)


def test_a_repaired_checkpoint_records_what_was_lost_and_delivers_the_rest():
    repair = Repair(lost={"orders-enrich-42-1": "transaction orders-enrich-42-1 timed out after 60000 ms"},
                    replayed=(OffsetRange("orders", 0, 10, 20),))
    done = replace(completed(), end_offsets={"orders:0": 10, "orders:1": 5}, repair=repair)
    assert CompletedCheckpoint.from_json(json.loads(json.dumps(done.to_json())), KEY) == done
    assert "repair" not in completed().to_json()  # as completed checkpoints of earlier versions
    assert CompletedCheckpoint.from_json(completed().to_json()).repair is None
    ranges = (OffsetRange("orders", 0, 10, 20), OffsetRange("orders", 1, 5, 9), OffsetRange("orders", 2, 3, 3))
    view = CheckpointView(claim(ranges=ranges), prepared(), done)
    assert view.delivered_ranges == (OffsetRange("orders", 1, 5, 9),)
    assert CheckpointView(claim(ranges=ranges), prepared(), completed()).delivered_ranges == ranges[:2]
    assert repair.summary == "transaction orders-enrich-42-1 lost; orders:0[10,20) given back to the next checkpoint"
    chosen = replace(done, repair=replace(repair, accepted="duplicates"))
    assert CompletedCheckpoint.from_json(chosen.to_json(), KEY) == chosen
    assert chosen.repair.summary.endswith("(duplicates accepted)")
    with pytest.raises(MetadataError, match="repair.lost"):
        CompletedCheckpoint.from_json({**done.to_json(), "repair": {"lost": {"t": 1}, "replayed": []}}, KEY)


def test_source_partitions_carried_by_several_transactions_are_named_with_their_tasks():
    one, two, three = txn(0), replace(txn(1), sources=(TopicPartition("orders", 0), TopicPartition("orders", 1))), txn(2)
    shared = replace(prepared(), transactions=(one, two, replace(three, sources=None)))
    assert shared.shared_sources == {"orders:0": (0, 1)}
    assert prepared().shared_sources == {}


# --- keyed state: the manifest the documents carry ---


def manifest(written_by: int = 41) -> StateManifest:
    return StateManifest(
        operator="window", key_groups=8, written_by=written_by,
        files={3: (f"p/orders-enrich/state/{written_by:012d}/kg-00003.parquet",),
               0: (f"p/orders-enrich/state/{written_by:012d}/kg-00000.parquet",)},
        columns={"__ls_key": "string", "amount": "double"}, watermark_ms=1_700_000_000_000,
        partitions={"orders:1": PartitionTime(None, 5), "orders:0": PartitionTime(1_700_000_000_100, 6)},
        keys=12, rows=30, bytes=4096, timers=2, next_timer_ms=1_700_000_060_000, schema_version=3,
        metrics={"load_seconds": 0.5, "rows_in": 20.0},
    )


STATEFUL = [replace(claim(), state_base=manifest(41)), replace(prepared(), state=manifest(42)),
            replace(completed(), state=manifest(42)), replace(savepoint(), state=manifest(42))]
MANIFEST_FIELD = {CheckpointClaim: "state_base", PreparedCheckpoint: "state", CompletedCheckpoint: "state",
                  Savepoint: "state"}


@pytest.mark.parametrize("value", STATEFUL, ids=lambda v: type(v).__name__)
def test_a_state_manifest_round_trips_through_each_documents_json(value: Any) -> None:
    doc = json.loads(json.dumps(value.to_json()))
    read = type(value).from_json(doc, KEY)
    assert read == value
    assert getattr(read, MANIFEST_FIELD[type(value)]).partitions["orders:1"] == PartitionTime(None, 5)
    assert getattr(read, MANIFEST_FIELD[type(value)]).files[3] == (
        f"p/orders-enrich/state/{getattr(value, MANIFEST_FIELD[type(value)]).written_by:012d}/kg-00003.parquet",)


@pytest.mark.parametrize("value", [claim(), prepared(), completed(), savepoint()], ids=lambda v: type(v).__name__)
def test_a_document_without_a_manifest_reads_as_no_state(value: Any) -> None:
    doc = value.to_json()
    assert MANIFEST_FIELD[type(value)] not in doc, "stateless documents stay as earlier versions wrote them"
    assert getattr(type(value).from_json(doc, KEY), MANIFEST_FIELD[type(value)]) is None


@pytest.mark.parametrize("value", STATEFUL, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize(("broken", "says"), [
    (lambda m: {**m, "schema": "lockstep.state.manifest/9"}, "is not a state manifest"),
    (lambda m: {k: v for k, v in m.items() if k != "files"}, "'files'"),
    (lambda m: {**m, "key_groups": "eight"}, "is invalid"),
    (lambda m: {**m, "partitions": {"orders:0": {"max_event_ms": 1}}}, "'active_at_ms'"),
    (lambda m: "a manifest", "is not a state manifest"),
], ids=["schema", "files", "key_groups", "partition", "not-an-object"])
def test_a_malformed_manifest_is_a_metadata_error_naming_the_field(value: Any, broken: Any, says: str) -> None:
    name = MANIFEST_FIELD[type(value)]
    doc = value.to_json()
    doc[name] = broken(doc[name])
    with pytest.raises(MetadataError) as info:
        type(value).from_json(doc, KEY)
    assert info.value.key == KEY
    assert f"field '{name}'" in info.value.reason and says in info.value.reason


# --- the run's stage seconds (optional: documents of earlier versions have none) ---


def test_a_prepared_checkpoints_stage_seconds_round_trip_in_their_order() -> None:
    timed = replace(prepared(), stage_seconds={"open": 0.012, "read": 0.41, "decode": 0.05, "write": 3.0})
    doc = json.loads(json.dumps(timed.to_json()))
    assert doc["stage_seconds"] == {"open": 0.012, "read": 0.41, "decode": 0.05, "write": 3.0}
    read = PreparedCheckpoint.from_json(doc, KEY)
    assert read == timed and list(read.stage_seconds) == ["open", "read", "decode", "write"]


def test_a_prepared_checkpoint_without_stage_seconds_reads_as_none_and_writes_none() -> None:
    doc = prepared().to_json()
    assert "stage_seconds" not in doc, "documents without them stay as earlier versions wrote them"
    assert PreparedCheckpoint.from_json(doc, KEY).stage_seconds == {}
    doc["stage_seconds"] = {"read": 1}  # whole seconds are seconds too
    assert PreparedCheckpoint.from_json(doc, KEY).stage_seconds == {"read": 1.0}


@pytest.mark.parametrize("broken", [["read", 0.4], {"read": "0.4"}, {"read": True}])
def test_malformed_stage_seconds_are_a_metadata_error_naming_the_field(broken: object) -> None:
    doc = {**prepared().to_json(), "stage_seconds": broken}
    with pytest.raises(MetadataError) as info:
        PreparedCheckpoint.from_json(doc, KEY)
    assert info.value.key == KEY and "stage_seconds" in info.value.reason
