"""Tables (docs/joins.md) without services: the versions checkpoints record and their documents, what a claim
pins of a table's topic (`lockstep.rules.tables`), the spec's ``tables`` section, and garbage collection of
table files over tests/support/fake_s3.FakeS3 with real checkpoint documents."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lockstep.errors import MetadataError, SpecError, TerminalError
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CompletedCheckpoint,
    PreparedCheckpoint,
    Savepoint,
)
from lockstep.model.offsets import OffsetRange
from lockstep.model.tables import TablePin, TableVersion
from lockstep.rules.tables import compact_table, table_pin
from lockstep.spec import load_spec
from lockstep.store.checkpoint_store import CheckpointStore
from tests.support.fake_s3 import FakeS3

AT = "2026-01-01T00:00:00+00:00"
V1 = TableVersion("customers", "customers", 1, {0: 5, 1: 3}, ("s/1/table-customers.parquet",), ("d1",), (120,), 7)


# ---- documents ---------------------------------------------------------------------------------------------
def test_every_document_carries_its_table_versions_and_reads_them_back() -> None:
    pin = TablePin("customers", V1, (OffsetRange("customers", 0, 5, 9), OffsetRange("customers", 1, 3, 3)))
    c = CheckpointClaim("p", 2, "run", AT, (OffsetRange("in", 0, 0, 10),), "checkpoint:1", tables={"customers": pin})
    assert CheckpointClaim.from_json(c.to_json()).tables == {"customers": pin}
    assert pin.records == 4
    v2 = TableVersion("customers", "customers", 2, {0: 9, 1: 3}, (*V1.files, "s/2/table-customers.delta.parquet"),
                      ("d1", "d2"), (120, 40), 8)
    p = PreparedCheckpoint("p", 2, AT, (), 10, 10, 0, 1.0, tables={"customers": v2})
    assert PreparedCheckpoint.from_json(p.to_json()).tables == {"customers": v2}
    done = CompletedCheckpoint("p", 2, AT, {"in:0": 10}, (), tables={"customers": v2})
    assert CompletedCheckpoint.from_json(done.to_json()).tables == {"customers": v2}
    sp = Savepoint("sp", "p", 2, AT, {"in:0": 10}, (), tables={"customers": v2})
    assert Savepoint.from_json(sp.to_json()).tables == {"customers": v2}
    assert v2.bytes == 160
    # documents without tables (and of earlier versions) say nothing of them
    assert "tables" not in CompletedCheckpoint("p", 1, AT, {}, ()).to_json()
    assert CompletedCheckpoint.from_json(CompletedCheckpoint("p", 1, AT, {}, ()).to_json()).tables == {}


def test_a_table_version_that_is_not_one_is_refused_naming_the_document() -> None:
    doc = CompletedCheckpoint("p", 2, AT, {}, (), tables={"customers": V1}).to_json()
    doc["tables"]["customers"]["schema"] = "something else"  # type: ignore[index]
    with pytest.raises(MetadataError, match="tables.customers"):
        CompletedCheckpoint.from_json(doc, "s3://b/p/2/outcome.json")
    doc["tables"]["customers"] = {**V1.to_json(), "digests": ["only one", "and two"]}  # type: ignore[index]
    with pytest.raises(MetadataError, match="2 digests"):
        CompletedCheckpoint.from_json(doc, "s3://b/p/2/outcome.json")


# ---- what a claim pins (pure) -------------------------------------------------------------------------------
def test_the_first_version_reads_the_topic_from_its_log_start_to_its_last_stable_offsets() -> None:
    pin = table_pin("customers", "customers", None, {0: 2, 1: 0}, {0: 10, 1: 4}, reads=True, checkpoint_id=1)
    assert pin.base is None
    assert pin.ranges == (OffsetRange("customers", 0, 2, 10), OffsetRange("customers", 1, 0, 4))


def test_a_later_version_reads_on_from_where_its_base_ends() -> None:
    pin = table_pin("customers", "customers", V1, {0: 0, 1: 0}, {0: 8, 1: 3, 2: 1}, reads=True, checkpoint_id=2)
    assert pin.base == V1
    # partition 2 is new since (the base does not know it): from its log start
    assert pin.ranges == (OffsetRange("customers", 0, 5, 8), OffsetRange("customers", 1, 3, 3),
                          OffsetRange("customers", 2, 0, 1))


def test_a_checkpoint_without_source_records_reads_nothing_of_the_table() -> None:
    pin = table_pin("customers", "customers", V1, {0: 0, 1: 0}, {0: 8, 1: 9}, reads=False, checkpoint_id=2)
    assert pin.records == 0 and pin.base == V1


def test_retention_past_the_bases_end_starts_at_the_log_start() -> None:
    pin = table_pin("customers", "customers", V1, {0: 7, 1: 0}, {0: 9, 1: 3}, reads=True, checkpoint_id=2)
    assert pin.ranges[0] == OffsetRange("customers", 0, 7, 9)


def test_a_base_of_another_topic_starts_the_table_over() -> None:
    pin = table_pin("customers", "customers-v2", V1, {0: 0}, {0: 4}, reads=True, checkpoint_id=2)
    assert pin.base is None and pin.ranges == (OffsetRange("customers-v2", 0, 0, 4),)


def test_a_topic_that_ends_before_its_bases_offsets_was_recreated_and_is_refused() -> None:
    with pytest.raises(TerminalError, match="table customers: .* customers:0 up to offset 5, but the topic now ends "
                                            "at 2: it was deleted and created again"):
        table_pin("customers", "customers", V1, {0: 0, 1: 0}, {0: 2, 1: 3}, reads=True, checkpoint_id=2)


def test_a_table_is_rewritten_as_one_base_when_its_deltas_have_grown() -> None:
    assert compact_table([], 100, 1), "a table without files starts with a base"
    assert not compact_table([1000], 10, 1)
    assert compact_table([1000, 600], 500, 1), "deltas past the base's size"
    assert compact_table([1000, *[1] * 16], 1, 3), "more deltas than the chain may hold"


# ---- the spec --------------------------------------------------------------------------------------------------
def spec_with(tmp_path: Path, tables: object, **more: object) -> Path:
    doc = {"name": "enrich", "source": {"topics": ["orders"], "value": "json"}, "transform": "m:f",
           "sink": {"topic": "out", "dead_letter_topic": "dlq"}, "checkpoints": {"store": "s3://bucket/p"},
           "tables": tables, **more}
    path = tmp_path / "enrich.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_table_section_is_read_with_its_defaults(tmp_path: Path) -> None:
    spec = load_spec(spec_with(tmp_path, {"customers": {"topic": "customers", "value": "json",
                                                        "join": {"by": "data.customer"}}}))
    (table,) = spec.tables
    assert (table.name, table.topic, table.key.format, table.value.format) == ("customers", "customers", "string",
                                                                                "json")
    assert table.join is not None and (table.join.by, table.join.how, table.join.missing) == ("data.customer", "left",
                                                                                               "drop")


@pytest.mark.parametrize(("tables", "more", "field", "reason"), [
    ({"input": {"topic": "x"}}, {}, "tables.input", "is the view of the input"),
    ({"c": {"topic": "orders"}}, {}, "tables.c.topic", "is a source topic"),
    ({"c": {"topic": "out"}}, {}, "tables.c.topic", "a pipeline must not feed itself"),
    ({"c": {"topic": "x", "value": "avro-confluent"}}, {}, "tables.c.value.format", "must be one of bytes, string"),
    ({"c": {"topic": "x", "join": {"how": "inner"}}}, {}, "tables.c.join.by", "is required"),
    ({"c": {"topic": "x", "join": {"by": "k", "missing": "dead_letter"}}}, {}, "tables.c.join.missing",
     "is for an inner join"),
    ({"c": {"topic": "x", "join": {"by": "k", "how": "outer"}}}, {}, "tables.c.join.how", "must be left or inner"),
    ({"c": {"topic": "x"}, "d": {"topic": "x"}}, {}, "tables", "topic 'x' is read by more than one table"),
    ({"c": {"topic": "x", "sink": 1}}, {}, "tables.c.sink", "unknown key"),
    ({"c": {"topic": "x"}}, {"state": {"event_time": {"column": "t"}, "dedup": {"key": "k", "ttl": "1h"}}}, "tables",
     "not supported with state yet"),
])
def test_a_bad_table_is_refused_naming_its_field(tmp_path: Path, tables: object, more: dict, field: str,
                                                 reason: str) -> None:
    with pytest.raises(SpecError) as refused:
        load_spec(spec_with(tmp_path, tables, **more))
    assert any(p.field == field and reason in p.reason for p in refused.value.problems), refused.value.problems


# ---- garbage collection of table files -------------------------------------------------------------------------
def test_garbage_collection_keeps_every_version_a_checkpoint_or_savepoint_names_and_deletes_aborted_ones() -> None:
    s3 = FakeS3()
    store = CheckpointStore(s3, "lockstep", "tests/enrich", "enrich")
    files = store.state_files()

    def version(cid: int, base: TableVersion | None) -> TableVersion:
        key = files.table_key(cid, "customers", delta=base is not None)
        files.put(key, f"table {cid}".encode())
        return TableVersion("customers", "customers", cid, {0: cid}, (*(base.files if base else ()), key))

    def checkpoint(cid: int, base: TableVersion | None, written: TableVersion, complete: bool = True) -> None:
        store.claim(CheckpointClaim("enrich", cid, "run", AT, (OffsetRange("in", 0, cid - 1, cid),), "x",
                                    tables={"customers": TablePin("customers", base)}))
        store.write_prepared(PreparedCheckpoint("enrich", cid, AT, (), 1, 1, 0, 1.0, tables={"customers": written}))
        if complete:
            store.mark_completed(CompletedCheckpoint("enrich", cid, AT, {"in:0": cid}, (),
                                                     tables={"customers": written}))
        else:
            store.mark_aborted(AbortedCheckpoint("enrich", cid, AT, "its transactions timed out", "replayed"))

    v1 = version(1, None)
    checkpoint(1, None, v1)
    checkpoint(2, v1, version(2, v1), complete=False)  # aborted: its delta is garbage
    v3 = version(3, v1)
    checkpoint(3, v1, v3)
    store.create_savepoint("keep", 3, AT)
    v4 = version(4, None)  # compacted: a new base, so v3's files are named only by checkpoint 3 and the savepoint
    checkpoint(4, v3, v4)
    deleted = store.collect_state_garbage()
    assert deleted == [files.table_key(2, "customers", delta=True)]
    assert s3.keys("lockstep", files.prefix) == sorted({*v1.files, *v3.files, *v4.files})
    assert store.get_savepoint("keep").tables == {"customers": v3}
