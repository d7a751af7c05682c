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
    expired = table.expire(int(time.time() * 1000) + 60_000, "p", completed=2)
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
