"""The Iceberg sink's adapter (`lockstep.iceberg.table_sink`) over pyiceberg's own SQL catalog on local files: a
real catalog and real table metadata, no server. The REST catalog on S3 is the integration tests'."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lockstep.errors import TerminalError
from lockstep.iceberg.staged_table import TableFile
from lockstep.iceberg.table_sink import IcebergTable, RowsOfSource

SCHEMA = pa.schema([("order_id", pa.string()), ("amount", pa.float64()), ("lockstep_source_topic", pa.string()),
                    ("lockstep_source_partition", pa.int32()), ("lockstep_source_offset", pa.int64()),
                    ("lockstep_checkpoint", pa.int64())])


@pytest.fixture
def table(tmp_path, monkeypatch) -> IcebergTable:
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({"conn_type": "iceberg", "extra": {
        "type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": f"file://{tmp_path / 'wh'}"}}))
    return IcebergTable("lake", "db.orders")


def rows(cid: int, source: str, offsets: range, schema: pa.Schema = SCHEMA) -> RowsOfSource:
    topic, partition = source.split(":")
    n = len(offsets)
    data = {"order_id": [f"o{o}" for o in offsets], "amount": [float(o) for o in offsets],
            "lockstep_source_topic": [topic] * n, "lockstep_source_partition": [int(partition)] * n,
            "lockstep_source_offset": list(offsets), "lockstep_checkpoint": [cid] * n}
    if schema.field("amount").type == pa.string():
        data["amount"] = [str(a) for a in data["amount"]]
    return RowsOfSource(source, pa.table({f.name: data.get(f.name, [None] * n) for f in schema}, schema=schema))


def main_rows(t: IcebergTable) -> list[tuple[str, int, int]]:
    return sorted(t.provenance().elements())


def test_a_staged_checkpoint_is_invisible_until_published_and_published_once(table: IcebergTable) -> None:
    staged = table.stage("p", 1, [rows(1, "in:0", range(0, 3)), rows(1, "in:1", range(10, 12))], SCHEMA)
    assert staged.branch == "lockstep-p-1" and staged.records == 5 and len(staged.files) == 2
    assert main_rows(table) == []
    assert table.observe("p", 1, staged).published is None and table.observe("p", 1, staged).staged
    snapshot = table.publish("p", 1, staged, staged.files)
    assert table.publish("p", 1, staged, staged.files) == snapshot, "a publish again adds nothing"
    assert main_rows(table) == [("in", 0, 0), ("in", 0, 1), ("in", 0, 2), ("in", 1, 10), ("in", 1, 11)]
    assert table.drop(staged.branch) and not table.drop(staged.branch)
    assert table.observe("p", 1, staged).published == snapshot
    assert table.published_checkpoints("p") == [1]


def test_pipelined_checkpoints_staged_on_the_same_main_are_both_kept(table: IcebergTable) -> None:
    first = table.stage("p", 1, [rows(1, "in:0", range(0, 2))], SCHEMA)
    second = table.stage("p", 2, [rows(2, "in:0", range(2, 4))], SCHEMA)  # staged before 1 is published
    table.publish("p", 1, first, first.files)
    table.publish("p", 2, second, second.files)
    assert main_rows(table) == [("in", 0, o) for o in range(4)]
    assert table.published_checkpoints("p") == [1, 2] and table.observe("p", 1, first).published is not None


def test_a_repair_publishes_the_files_it_is_given(table: IcebergTable) -> None:
    staged = table.stage("p", 1, [rows(1, "in:0", range(0, 2)), rows(1, "in:1", range(0, 3))], SCHEMA)
    table.publish("p", 1, staged, staged.without_sources(frozenset({"in:1"})))
    assert main_rows(table) == [("in", 0, 0), ("in", 0, 1)]


def test_a_run_again_replaces_an_earlier_attempts_staged_snapshot(table: IcebergTable) -> None:
    table.stage("p", 1, [rows(1, "in:0", range(0, 5))], SCHEMA)
    again = table.stage("p", 1, [rows(1, "in:0", range(0, 2))], SCHEMA)
    assert table.branches("p") == {1: "lockstep-p-1"}
    table.publish("p", 1, again, again.files)
    assert main_rows(table) == [("in", 0, 0), ("in", 0, 1)]


def test_the_schema_takes_a_new_column_and_a_widened_type_and_refuses_the_rest(table: IcebergTable) -> None:
    narrow = pa.schema([f.with_type(pa.float32()) if f.name == "amount" else f for f in SCHEMA])
    table.stage("p", 1, [rows(1, "in:0", range(0, 2), narrow)], narrow)
    wider = SCHEMA.append(pa.field("currency", pa.string()))
    staged = table.stage("p", 2, [rows(2, "in:0", range(2, 4), wider)], wider)
    table.publish("p", 2, staged, staged.files)
    table.drop(staged.branch)
    columns = {f.name: str(f.field_type) for f in table.load().schema().fields}
    assert columns["amount"] == "double" and columns["currency"] == "string"
    wrong = pa.schema([f.with_type(pa.string()) if f.name == "amount" else f for f in SCHEMA])
    with pytest.raises(TerminalError, match="does not fit the table's schema: ValidationError: Cannot change column "
                                            "type: amount: double -> string. Iceberg allows adding a column"):
        table.stage("p", 3, [rows(3, "in:0", range(4, 5), wrong)], wrong)
    assert table.branches("p") == {1: "lockstep-p-1"}, "a refused checkpoint stages nothing"


def test_a_staged_snapshot_whose_files_are_not_all_there_is_not_published(table: IcebergTable) -> None:
    staged = table.stage("p", 1, [rows(1, "in:0", range(0, 2))], SCHEMA)
    with pytest.raises(TerminalError, match="lacks 1 of its files"):
        table.publish("p", 1, staged, (*staged.files, TableFile("file:///nowhere.parquet", 1, ("in:9",))))
    assert main_rows(table) == []


def published(table: IcebergTable, *checkpoints: int) -> None:
    for cid in checkpoints:
        staged = table.stage("p", cid, [rows(cid, "in:0", range(cid * 10, cid * 10 + 2)),
                                        rows(cid, "in:1", range(cid * 10, cid * 10 + 3))], SCHEMA)
        table.publish("p", cid, staged, staged.files)
        table.drop(staged.branch)


def test_compaction_rewrites_older_checkpoints_into_one_file_and_keeps_every_row(table: IcebergTable) -> None:
    published(table, 1, 2, 3, 4)
    before = main_rows(table)
    assert table.data_files() == 8
    assert table.compact(4) == (6, 1, 15)
    assert table.data_files() == 3 and main_rows(table) == before
    assert table.compact(4) == (0, 0, 0), "one file left: nothing to merge"
    assert table.published_checkpoints("p") == [1, 2, 3, 4], "main's history still names every checkpoint"
    published(table, 5)
    assert len(main_rows(table)) == 25


def test_expiry_keeps_the_snapshots_of_checkpoints_not_completed_yet(table: IcebergTable) -> None:
    import time

    published(table, 1, 2, 3, 4)
    staged = table.stage("p", 5, [rows(5, "in:0", range(50, 51))], SCHEMA)  # prepared, on its branch
    expired = table.expire(int(time.time() * 1000) + 60_000, {"p": 2})
    assert expired >= 2  # the empty first snapshot, 1 and 2's, and the staged snapshots the branches left behind
    t = table.load()
    names = {int(s.summary.additional_properties["lockstep.checkpoint"]) for s in t.snapshots()
             if "lockstep.checkpoint" in s.summary.additional_properties}
    assert {3, 4, 5} <= names and not {1, 2} & names
    assert table.observe("p", 4, staged).published is not None, "a commit of 4 run again still finds it"
    assert table.observe("p", 5, staged).staged
    assert len(main_rows(table)) == 20, "expiry removes history, never a row of main"


def test_data_files_are_written_as_the_tables_write_properties_ask(table: IcebergTable) -> None:
    import pyarrow.parquet as pq

    def codec(staged) -> str:
        path = staged.files[0].path.removeprefix("file://")
        return pq.ParquetFile(path).metadata.row_group(0).column(0).compression

    assert codec(table.stage("p", 1, [rows(1, "in:0", range(0, 3))], SCHEMA)) == "ZSTD", "Iceberg's default"
    with table.load().transaction() as tx:
        tx.set_properties({"write.parquet.compression-codec": "snappy"})
    assert codec(table.stage("p", 2, [rows(2, "in:0", range(3, 6))], SCHEMA)) == "SNAPPY"


def test_a_data_file_that_cannot_be_written_names_the_table_and_the_source(tmp_path) -> None:
    from lockstep.errors import TransientError
    from lockstep.iceberg.table_sink import FileTarget, SourceFiles

    (tmp_path / "not-a-folder").write_text("")
    files = SourceFiles(FileTarget("db.orders", f"file://{tmp_path}/not-a-folder/data", SCHEMA, {}), "task-1")
    files.add("in:0", rows(1, "in:0", range(0, 3)).rows)
    with pytest.raises(TransientError, match=r"Iceberg table db\.orders: could not write the data file of in:0 .*"
                                             r"a retry may pass"):
        files.close()


# ---- partitioned tables (sink.iceberg.partitioning) ------------------------------------------------------------------
TIMED = SCHEMA.append(pa.field("ordered_at", pa.timestamp("us", tz="UTC")))


def timed_rows(cid: int, source: str, offsets: range, hours: int) -> RowsOfSource:
    """Rows whose ``ordered_at`` walks over ``hours`` hours from 2026-12-04 22:00 UTC (so over two days)."""
    import datetime as dt

    base = rows(cid, source, offsets).rows
    start = dt.datetime(2026, 12, 4, 22, tzinfo=dt.UTC)
    at = [start + dt.timedelta(hours=i % hours) for i in range(len(offsets))]
    field = TIMED.field("ordered_at")
    return RowsOfSource(source, base.append_column(field, pa.array(at, field.type)))


def partitions_of(t: IcebergTable) -> list[tuple]:
    return sorted(tuple(task.file.partition) for task in t.load().scan().plan_files())


def test_a_partitioned_table_gets_one_file_per_partition_and_source_with_iceberg_s_partition_values(
        table: IcebergTable) -> None:
    from pyiceberg.transforms import parse_transform
    from pyiceberg.types import StringType, TimestamptzType

    from lockstep.spec import TablePartition

    by = (TablePartition("ordered_at", "day"), TablePartition("order_id", "bucket[4]"))
    staged = table.stage("p", 1, [timed_rows(1, "in:0", range(0, 40), 4), timed_rows(1, "in:1", range(0, 10), 1)],
                         TIMED, partitioning=by)
    assert staged.records == 50 and {f.sources[0] for f in staged.files} == {"in:0", "in:1"}
    table.publish("p", 1, staged, staged.files)
    t = table.load()
    assert [str(f.transform) for f in t.spec().fields] == ["day", "bucket[4]"]
    day, bucket = (parse_transform("day").transform(TimestamptzType()),
                   parse_transform("bucket[4]").transform(StringType()))
    arrow = t.scan().to_arrow()
    expected = sorted({(day(int(r["ordered_at"].timestamp() * 1_000_000)), bucket(r["order_id"]))
                       for r in arrow.to_pylist()})
    assert len(expected) > 4, "the rows span both days and several buckets"
    found = partitions_of(table)
    assert sorted(set(found)) == expected, "each file's partition is what Iceberg computes for its rows"
    import pyarrow.parquet as pq

    for task in t.scan().plan_files():  # every row of a file in that file's partition
        held = pq.read_table(task.file.file_path.removeprefix("file://")).to_pylist()
        assert {(day(int(r["ordered_at"].timestamp() * 1_000_000)), bucket(r["order_id"])) for r in held} == {
            tuple(task.file.partition)}
    first_day = t.scan(row_filter="ordered_at < '2026-12-05T00:00:00+00:00'")
    assert 0 < len(list(first_day.plan_files())) < len(found), "a filter on the time column prunes whole files"
    assert main_rows(table) == sorted([("in", 0, o) for o in range(40)] + [("in", 1, o) for o in range(10)])
    assert table.publish("p", 1, staged, staged.files) is not None and len(main_rows(table)) == 50


def test_a_repair_of_a_partitioned_table_leaves_out_every_file_of_the_given_back_source(table: IcebergTable) -> None:
    from lockstep.spec import TablePartition

    by = (TablePartition("ordered_at", "hour"),)
    staged = table.stage("p", 1, [timed_rows(1, "in:0", range(0, 6), 3), timed_rows(1, "in:1", range(0, 6), 3)],
                         TIMED, partitioning=by)
    assert len(staged.files) == 6, "three hours of each source"
    table.publish("p", 1, staged, staged.without_sources(frozenset({"in:1"})))
    assert main_rows(table) == [("in", 0, o) for o in range(6)]


def test_partitioning_a_table_refuses_a_missing_column_a_wrong_type_and_a_different_existing_spec(
        table: IcebergTable) -> None:
    from lockstep.spec import TablePartition

    with pytest.raises(TerminalError, match=r"sink.iceberg.partitioning names day\(shipped_at\), but the transform's "
                                            r"output has no such column \(its columns: order_id, amount,"):
        table.stage("p", 1, [timed_rows(1, "in:0", range(0, 2), 1)], TIMED,
                    partitioning=(TablePartition("shipped_at", "day"),))
    with pytest.raises(TerminalError, match=r"cannot partition the output so: .*Time transforms take timestamps"):
        table.stage("p", 1, [timed_rows(1, "in:0", range(0, 2), 1)], TIMED,
                    partitioning=(TablePartition("order_id", "day"),))
    assert not table.exists(), "a refused partitioning creates no table"
    by_day = (TablePartition("ordered_at", "day"),)
    table.stage("p", 1, [timed_rows(1, "in:0", range(0, 2), 1)], TIMED, partitioning=by_day)
    with pytest.raises(TerminalError, match=r"is partitioned by \[day\(ordered_at\)\], but sink.iceberg.partitioning "
                                            r"says \[hour\(ordered_at\), bucket\(8, order_id\)\]: Lockstep does not "
                                            r"change a table's partitioning"):
        table.stage("p", 2, [timed_rows(2, "in:0", range(2, 4), 1)], TIMED,
                    partitioning=(TablePartition("ordered_at", "hour"), TablePartition("order_id", "bucket[8]")))
    undeclared = table.stage("p", 2, [timed_rows(2, "in:0", range(2, 6), 4)], TIMED)
    assert len(undeclared.files) == 2, "unset: the table's own partitioning, here by day"


def test_compaction_of_a_partitioned_table_keeps_its_rows_and_a_partition_per_file(table: IcebergTable) -> None:
    from lockstep.spec import TablePartition

    by = (TablePartition("ordered_at", "day"),)
    for cid in (1, 2, 3):
        staged = table.stage("p", cid, [timed_rows(cid, "in:0", range(cid * 10, cid * 10 + 4), 4),
                                        timed_rows(cid, "in:1", range(cid * 10, cid * 10 + 4), 4)], TIMED,
                             partitioning=by)
        table.publish("p", cid, staged, staged.files)
        table.drop(staged.branch)
    before = main_rows(table)
    assert table.data_files() == 12
    replaced, written, count = table.compact(3)
    assert (replaced, count) == (8, 16) and written == 2, "checkpoints 1 and 2 merged into a file per day"
    assert main_rows(table) == before and table.data_files() == 6
    assert sorted(set(partitions_of(table))) == [(20791,), (20792,)]


# ---- orphan files (lockstep iceberg orphans) -------------------------------------------------------------------------
def test_orphans_are_the_files_no_snapshot_reads_and_never_a_checkpoint_in_flight(table: IcebergTable) -> None:
    import time

    from lockstep.iceberg.table_sink import SourceFiles

    def attempt(cid: int) -> str:
        """A run attempt that wrote its file and died before staging it."""
        files = SourceFiles(table.target("p", cid, SCHEMA), "task-0")
        files.add("in:0", rows(cid, "in:0", range(cid * 10, cid * 10 + 2)).rows)
        return files.close()[0].file.path

    published(table, 1, 2, 3)
    aborted = table.stage("p", 4, [rows(4, "in:0", range(40, 42))], SCHEMA)
    assert table.drop(aborted.branch)
    dead, flying = attempt(5), attempt(6)
    prepared = table.stage("p", 7, [rows(7, "in:0", range(70, 71))], SCHEMA)  # staged on its branch
    before = main_rows(table)
    now = int(time.time() * 1000)
    found = table.orphans(now + 60_000, {"p": [6]})
    assert [o.path for o in found] == [dead], "the aborted checkpoint's snapshot still reads its file until expired"
    assert found[0].size > 0
    assert table.orphans(now - 3_600_000, {"p": [6]}) == [], "files younger than the age are left alone"
    assert flying not in {o.path for o in table.orphans(now + 60_000, {"p": [6, 7]})}
    assert table.remove(found) == 1
    assert main_rows(table) == before and table.observe("p", 7, prepared).staged
    table.publish("p", 7, prepared, prepared.files)
    assert len(main_rows(table)) == len(before) + 1, "the prepared checkpoint's files were kept for its publish"

    # Compaction and expiry leave the files they replaced to the orphans: removed, main reads the same rows.
    assert table.compact(8)[0] > 1
    table.expire(int(time.time() * 1000) + 60_000, {"p": 7})
    replaced = table.orphans(int(time.time() * 1000) + 60_000, {"p": [6]})
    assert aborted.files[0].path in {o.path for o in replaced}, "expired with its snapshot"
    assert len(replaced) >= 7, replaced
    table.remove(replaced)
    assert main_rows(table) == sorted([*before, ("in", 0, 70)])
    assert [o.path for o in table.orphans(int(time.time() * 1000) + 60_000, {"p": []})] == [flying], \
        "once checkpoint 6 is no longer in flight, its dead attempt's file is an orphan too"


def test_a_dead_letter_replays_checkpoints_in_flight_are_spared_as_the_pipelines_own(table: IcebergTable) -> None:
    """The replays of ``p``'s dead letters run as pipeline ``p-replay`` and write the same table: expiry keeps the
    snapshot of a replay checkpoint published but not completed, and orphan removal the files of one still running,
    once the upkeep names the replay pipeline beside the pipeline (`lockstep.ops.table_upkeep`)."""
    import time

    from lockstep.iceberg.table_sink import SourceFiles

    published(table, 1, 2)
    for cid in (1, 2):  # replay 1 completed; replay 2 published, its commit not finished (crashed after publishing)
        staged = table.stage("p-replay", cid, [rows(cid, "in:0", range(900 + cid, 901 + cid))], SCHEMA)
        table.publish("p-replay", cid, staged, staged.files)
        table.drop(staged.branch)
    published(table, 3)  # main moves on: the replay's snapshot is history, no longer main's head
    later = int(time.time() * 1000) + 60_000
    table.expire(later, {"p": 3, "p-replay": 1})
    assert table.observe("p-replay", 2, staged).published is not None, "its commit, run again, still finds it"
    files = SourceFiles(table.target("p-replay", 3, SCHEMA), "task-0")  # replay 3 is writing its files
    files.add("in:0", rows(3, "in:0", range(950, 952)).rows)
    running = files.close()[0].file.path
    assert running not in {o.path for o in table.orphans(later, {"p": [], "p-replay": [3]})}
    assert running in {o.path for o in table.orphans(later, {"p": []})}, "unnamed, it would be an orphan"
    table.expire(later, {"p": 3})
    assert table.observe("p-replay", 2, staged).published is None, "unnamed, its snapshot would be expired"
