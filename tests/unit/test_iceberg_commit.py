"""The Iceberg sink's pure parts: what the commit does with a checkpoint's staged snapshot after the Kafka decision
(`lockstep.iceberg.table_commit`), the committable in the checkpoint documents, the spec section and the catalog
connection."""
from __future__ import annotations

import json
import re

import pytest

from lockstep.errors import MetadataError, SpecError, TerminalError
from lockstep.iceberg.staged_table import StagedTable, TableFile, branch_name
from lockstep.iceberg.table_commit import TableStepKind, decide_table, lost_sources
from lockstep.model.checkpoint import CompletedCheckpoint, PreparedCheckpoint
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.rules.commit_decision import CommitDecision, DecisionKind
from lockstep.rules.output_tasks import task_of_partition

FILES = (TableFile("s3://w/t/data/a.parquet", 4, ("in:0",)), TableFile("s3://w/t/data/b.parquet", 3, ("in:1",)),
         TableFile("s3://w/t/data/c.parquet", 5, ("in:2",)))
STAGED = StagedTable("lake", "db.orders", branch_name("p", 7), 1234, FILES)


def decision(kind: DecisionKind, **kw: object) -> CommitDecision:
    return CommitDecision(kind, 7, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [DecisionKind.COMMIT, DecisionKind.ALREADY_COMMITTED, DecisionKind.NOTHING_TO_COMMIT])
def test_a_committed_checkpoint_publishes_every_staged_file(kind: DecisionKind) -> None:
    step = decide_table(decision(kind), STAGED, None, True)
    assert step.kind is TableStepKind.PUBLISH and step.files == FILES


def test_a_checkpoint_main_holds_already_is_not_published_again() -> None:
    for still_staged in (True, False):  # the branch may be gone too: the publish ran, its drop as well
        step = decide_table(decision(DecisionKind.ALREADY_COMMITTED), STAGED, 99, still_staged)
        assert (step.kind, step.snapshot_id) == (TableStepKind.PUBLISHED, 99)


def test_an_aborted_checkpoint_drops_its_branch() -> None:
    assert decide_table(decision(DecisionKind.ABORT), STAGED, None, True).kind is TableStepKind.DROP


def test_an_abort_after_the_table_was_published_is_refused_not_half_undone() -> None:
    step = decide_table(decision(DecisionKind.ABORT), STAGED, 99, False)
    assert step.kind is TableStepKind.LOST and "published" in step.message


@pytest.mark.parametrize("kind", [DecisionKind.RETRY_LATER, DecisionKind.STUCK])
def test_the_table_waits_while_kafka_has_no_decision(kind: DecisionKind) -> None:
    assert decide_table(decision(kind), STAGED, None, True).kind is TableStepKind.NOTHING


def test_without_rows_there_is_nothing_to_do() -> None:
    empty = StagedTable("lake", "db.orders", branch_name("p", 7), None)
    assert decide_table(decision(DecisionKind.COMMIT), empty, None, False).kind is TableStepKind.NOTHING
    assert decide_table(decision(DecisionKind.COMMIT), None, None, False).kind is TableStepKind.NOTHING


def test_a_staged_snapshot_gone_before_anything_committed_aborts_the_checkpoint() -> None:
    step = decide_table(decision(DecisionKind.COMMIT, commit=("t-7-0",)), STAGED, None, False)
    assert step.kind is TableStepKind.ABORT_ALL and "lockstep-p-7" in step.message


def test_a_staged_snapshot_gone_after_kafka_committed_is_lost_with_the_way_out() -> None:
    rolled = decision(DecisionKind.COMMIT, commit=("t-7-1",), already_committed=("t-7-0",))
    for d in (rolled, decision(DecisionKind.ALREADY_COMMITTED, already_committed=("t-7-0",))):
        step = decide_table(d, STAGED, None, False)
        assert step.kind is TableStepKind.LOST and "lockstep verify" in step.message


def test_a_repair_publishes_all_but_the_files_of_the_partitions_given_back() -> None:
    repair = decision(DecisionKind.REPAIR, replay=(OffsetRange("in", 1, 10, 20),), abort=("t-7-1",))
    given = lost_sources(repair, (OffsetRange("in", 0, 0, 9), OffsetRange("in", 1, 10, 20), OffsetRange("in", 2, 3, 4)))
    assert given == {"in:1"}
    step = decide_table(repair, STAGED, None, True, given)
    assert step.kind is TableStepKind.PUBLISH and [f.sources for f in step.files] == [("in:0",), ("in:2",)]


def test_a_stateful_repair_leaves_out_the_partitions_of_the_tasks_computed_again() -> None:
    ranges = tuple(OffsetRange("in", p, 0, 10) for p in range(6))
    tasks = task_of_partition(ranges, 3)
    rerun = decision(DecisionKind.REPAIR, rerun=(1,), of_tasks=3)
    assert lost_sources(rerun, ranges) == {tp for tp, task in tasks.items() if task == 1} != set()


def test_the_staged_table_travels_in_prepared_and_completed_documents() -> None:
    prepared = PreparedCheckpoint("p", 7, "2026-12-05T00:00:00+00:00", (), 10, 7, 3, 1.0, iceberg=STAGED)
    again = PreparedCheckpoint.from_json(json.loads(json.dumps(prepared.to_json())))
    assert again.iceberg == STAGED and again.iceberg.records == 12
    assert "iceberg" not in PreparedCheckpoint("p", 7, "t", (), 0, 0, 0, 0.0).to_json()
    completed = CompletedCheckpoint("p", 7, "t", {"in:0": 9}, (), iceberg_snapshot=99)
    assert CompletedCheckpoint.from_json(json.loads(json.dumps(completed.to_json()))).iceberg_snapshot == 99
    assert CompletedCheckpoint.from_json(CompletedCheckpoint("p", 7, "t", {}, ()).to_json()).iceberg_snapshot is None


def test_a_malformed_staged_table_names_its_document() -> None:
    doc = PreparedCheckpoint("p", 7, "t", (), 0, 0, 0, 0.0, iceberg=STAGED).to_json()
    doc["iceberg"]["files"][0].pop("path")  # type: ignore[index]
    with pytest.raises(MetadataError, match="prepared.json.*iceberg"):
        PreparedCheckpoint.from_json(doc, "p/7/prepared.json")


def test_the_source_partitions_of_a_file_decide_whether_a_repair_keeps_it() -> None:
    assert STAGED.without_sources(frozenset({"in:0", "in:2"})) == (FILES[1],)
    assert STAGED.without_sources(frozenset({"other:0"})) == FILES
    assert TableFile("x", 1, ("in:0",)) == TableFile("x", 1, ("in:0",))
    assert TopicPartition("in", 0).key == "in:0"  # the sources' spelling


def spec_with(tmp_path, sink_extra: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nsource: {topics: [a]}\ntransform: m:f\n"
                    f"sink: {{topic: b, dead_letter_topic: c{sink_extra}}}\ncheckpoints: {{store: s3://bucket/x}}\n")
    return str(path)


def test_the_spec_names_the_table_and_its_catalog(tmp_path) -> None:
    from lockstep.spec import load_spec

    spec = load_spec(spec_with(tmp_path, ", iceberg: {table: lake.sales.orders}"))
    assert spec.sink.iceberg is not None
    assert (spec.sink.iceberg.table, spec.sink.iceberg.catalog_conn_id) == ("lake.sales.orders", "iceberg_default")
    assert load_spec(spec_with(tmp_path, "")).sink.iceberg is None


def spec_alone(tmp_path, sink: str, extra: str = "") -> str:
    path = tmp_path / "alone.yaml"
    path.write_text(f"name: p\nsource: {{topics: [a]}}\ntransform: m:f\nsink: {{{sink}}}\n"
                    f"checkpoints: {{store: s3://bucket/x}}\n{extra}")
    return str(path)


def test_a_table_without_a_topic_takes_the_records_alone_and_is_pinned_so(tmp_path) -> None:
    from lockstep.model.checkpoint import PlannedWith
    from lockstep.rules.pinned import planned_with
    from lockstep.spec import load_spec

    spec = load_spec(spec_alone(tmp_path, "dead_letter_topic: c, iceberg: {table: lake.orders}"))
    assert spec.sink.topic is None and spec.sink.table_only and spec.sink.topics == ()
    with_topic = load_spec(spec_with(tmp_path, ", iceberg: {table: lake.orders}")).sink
    assert not with_topic.table_only and with_topic.topics == ("b",)
    pinned = planned_with(spec)
    assert pinned.sink_topic is None and pinned.to_json()["sink"]["topic"] is None
    assert PlannedWith.from_json(json.loads(json.dumps(pinned.to_json()))) == pinned, "claim.json keeps it"


@pytest.mark.parametrize("sink, extra, problem", [
    ("dead_letter_topic: c", "", "sink.topic: is required"),
    ("dead_letter_topic: c, iceberg: {table: lake.orders}, routes: {big: 'amount > 1'}", "",
     "sink.routes: needs sink.topic: without it the records land in the Iceberg table alone"),
    ("dead_letter_topic: c, iceberg: {table: lake.orders}, value: json", "", "sink.value: needs sink.topic"),
    ("dead_letter_topic: c, iceberg: {table: lake.orders}", "state: {key_groups: 8, event_time: {column: t}, "
     "dedup: {key: k, ttl: 1h}}\n", "sink.topic: is required with state yet"),
])
def test_a_table_without_a_topic_refuses_what_needs_one(tmp_path, sink: str, extra: str, problem: str) -> None:
    from lockstep.spec import load_spec

    with pytest.raises(SpecError, match=re.escape(problem)):
        load_spec(spec_alone(tmp_path, sink, extra))


def test_the_spec_names_the_tables_partitioning_in_iceberg_s_transforms(tmp_path) -> None:
    from lockstep.spec import TablePartition, load_spec

    spec = load_spec(spec_with(tmp_path, ", iceberg: {table: lake.orders, partitioning: [region, 'day(ordered_at)', "
                                         "'bucket( 16 , customer)', 'truncate(4,sku)', 'identity(shop)']}"))
    assert spec.sink.iceberg is not None and spec.sink.iceberg.partitioning == (
        TablePartition("region", "identity"), TablePartition("ordered_at", "day"),
        TablePartition("customer", "bucket[16]"), TablePartition("sku", "truncate[4]"),
        TablePartition("shop", "identity"))
    assert [str(p) for p in spec.sink.iceberg.partitioning] == [
        "region", "day(ordered_at)", "bucket(16, customer)", "truncate(4, sku)", "shop"]
    assert load_spec(spec_with(tmp_path, ", iceberg: {table: lake.orders}")).sink.iceberg.partitioning is None
    empty = load_spec(spec_with(tmp_path, ", iceberg: {table: lake.orders, partitioning: []}")).sink.iceberg
    assert empty is not None and empty.partitioning == (), "declared unpartitioned"


@pytest.mark.parametrize("iceberg, problem", [
    ("{table: orders}", "sink.iceberg.table: 'orders' is invalid: expected namespace.table"),
    ("{catalog_conn_id: lake}", "sink.iceberg.table: is required"),
    ("{table: lake.orders, branch: x}", "sink.iceberg.branch: unknown key"),
    ("{table: lake.orders, partitioning: 'day(ts)'}", "sink.iceberg.partitioning: must be a list of partition fields"),
    ("{table: lake.orders, partitioning: [ts, 'days(ts)']}",
     "sink.iceberg.partitioning[1]: 'days(ts)' is not a partition field: expected a column, or year, month, day"),
    ("{table: lake.orders, partitioning: ['bucket(0, k)']}", "sink.iceberg.partitioning[0]: 'bucket(0, k)' is not"),
    ("{table: lake.orders, partitioning: ['bucket(k)']}", "sink.iceberg.partitioning[0]: 'bucket(k)' is not"),
    ("{table: lake.orders, partitioning: [k, k]}", "sink.iceberg.partitioning[1]: 'k' is there already"),
    ("{table: lake.orders, partitioning: ['day(ts)', 'hour(ts)']}",
     "sink.iceberg.partitioning[1]: 'hour(ts)': ts is partitioned by time already"),
])
def test_a_bad_iceberg_section_is_refused_by_field(tmp_path, iceberg: str, problem: str) -> None:
    from lockstep.spec import load_spec

    with pytest.raises(SpecError, match=re.escape(problem).replace("'", ".")):
        load_spec(spec_with(tmp_path, f", iceberg: {iceberg}"))


def test_the_catalog_connection_gives_the_clients_properties_and_hides_its_secrets(monkeypatch) -> None:
    from lockstep.connections import iceberg_catalog, redact

    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({
        "conn_type": "iceberg", "host": "catalog.example", "port": 8181, "password": "tok-sekret-123",
        "extra": {"warehouse": "s3://w", "s3.secret-access-key": "s3-sekret-456", "s3.access-key-id": "AKIA"}}))
    props = iceberg_catalog("lake")
    assert props["uri"] == "http://catalog.example:8181" and props["warehouse"] == "s3://w"
    assert props["token"] == "tok-sekret-123"
    said = redact(f"could not reach {props}")
    assert "tok-sekret-123" not in said and "s3-sekret-456" not in said and "AKIA" in said
    monkeypatch.setenv("AIRFLOW_CONN_BARE", json.dumps({"conn_type": "iceberg"}))
    with pytest.raises(TerminalError, match="connection 'bare'.*URI"):
        iceberg_catalog("bare")


def test_verify_finds_a_lost_a_duplicated_and_an_unexpected_row() -> None:
    from collections import Counter

    from lockstep.ops.table_check import check_table

    records = Counter({("in", 0, 1): 1, ("in", 0, 2): 1, ("in", 1, 5): 1})
    assert check_table("db.t", Counter(records), records).ok
    found = check_table("db.t", Counter({("in", 0, 1): 1, ("in", 0, 2): 2, ("in", 2, 9): 1}), records)
    assert (found.lost, found.duplicated, found.unexpected) == ([("in", 1, 5)], [("in", 0, 2)], [("in", 2, 9)])
    assert not found.ok and "1 lost, 1 duplicated, 1 unexpected" in found.summary()
    assert found.to_json()["lost_sample"] == ["in:1@5"]


def test_a_dead_letter_replay_writes_the_topic_and_the_same_table(tmp_path) -> None:
    from lockstep.spark.dead_letter_replay import replay_spec
    from lockstep.spec import load_spec

    spec = load_spec(spec_with(tmp_path, ", iceberg: {table: lake.orders}"))
    replay = replay_spec(spec)
    assert replay.sink.iceberg == spec.sink.iceberg and replay.sink.topic == spec.sink.topic
    assert replay.name == spec.name + "-replay", "its snapshots and data folders are named after it"
