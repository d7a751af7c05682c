"""Tables (docs/joins.md) without services: the versions checkpoints record and their documents, what a claim
pins of a table's topic (`lockstep.tables.pinning`), the spec's ``tables`` section, and garbage collection of
table files over tests/support/fake_s3.FakeS3 with real checkpoint documents."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from lockstep.errors import MetadataError, SpecError, TerminalError
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CompletedCheckpoint,
    PreparedCheckpoint,
)
from lockstep.model.offsets import OffsetRange
from lockstep.model.savepoint import Savepoint
from lockstep.spec import load_spec
from lockstep.store.checkpoint_store import CheckpointStore
from lockstep.tables.pinning import compact_table, table_pin
from lockstep.tables.pins import TablePin, TableVersion
from tests.support.fake_s3 import FakeS3

if TYPE_CHECKING:
    import pyarrow as pa

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


def test_retention_past_the_bases_end_is_refused_like_a_source_gap_naming_what_was_lost() -> None:
    with pytest.raises(TerminalError) as refused:
        table_pin("customers", "customers", V1, {0: 7, 1: 0}, {0: 9, 1: 3}, reads=True, checkpoint_id=2)
    assert str(refused.value).startswith(
        "checkpoint 2: table customers: retention deleted records of its topic before any checkpoint read them: "
        "customers:0 offsets [5, 7) (2 records, the log now starts at 7); its version of checkpoint 1 ends before them")
    assert "set checkpoints.skip_deleted_ranges: true" in str(refused.value)


def test_with_skip_deleted_ranges_retention_past_the_bases_end_starts_at_the_log_start_and_is_recorded() -> None:
    pin = table_pin("customers", "customers", V1, {0: 7, 1: 0}, {0: 9, 1: 3}, reads=True, checkpoint_id=2,
                    skip_deleted=True)
    assert pin.ranges[0] == OffsetRange("customers", 0, 7, 9) and pin.skipped == {0: 2}


def test_a_checkpoint_without_source_records_is_not_refused_for_a_gap_it_does_not_read() -> None:
    pin = table_pin("customers", "customers", V1, {0: 7, 1: 0}, {0: 9, 1: 3}, reads=False, checkpoint_id=2)
    assert pin.records == 0 and pin.skipped == {}


def test_a_reused_pin_keeps_its_version_and_adds_the_attempt_it_comes_from() -> None:
    from lockstep.tables.pinning import reused_table_pin

    pin = TablePin("customers", V1, (OffsetRange("customers", 0, 5, 9),))
    again = reused_table_pin(pin, {0: 5}, {0: 12}, False, 5, replays=4)
    assert again.same_version(pin) and again.earlier == (4,)
    assert reused_table_pin(again, {0: 0}, {0: 9}, False, 6, replays=5).earlier == (4, 5)
    with pytest.raises(TerminalError, match=r"checkpoint 6: table customers: .*customers:0 offsets \[5, 6\)"):
        reused_table_pin(again, {0: 6}, {0: 12}, False, 6, replays=5)
    with pytest.raises(TerminalError, match="aborted checkpoint 5 pinned customers:0 up to offset 9, but the topic "
                                            "now ends at 2: it was deleted and created again"):
        reused_table_pin(again, {0: 0}, {0: 2}, False, 6, replays=5)


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
    assert table.on_error == "dead_letter", "a record that does not decode is a dead letter unless the spec says fail"
    strict = load_spec(spec_with(tmp_path, {"customers": {"topic": "customers", "on_error": "fail"}}))
    assert strict.tables[0].on_error == "fail"


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
    ({"c": {"topic": "x", "on_error": "drop"}}, {}, "tables.c.on_error", "dead_letter or fail"),
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


# ---- a versioned table's rows (pure pyarrow) ---------------------------------------------------------------------
def rows(*versions: tuple[str, int, str | None, int]) -> pa.Table:
    """(key, timestamp ms, value or None: a deletion, offset) each, in partition 0."""
    import pyarrow as pa

    from lockstep.model.state_rows import KEY

    return pa.table({KEY: [v[0] for v in versions], "key": [v[0].encode() for v in versions],
                     "value": pa.array([None if v[2] is None else v[2].encode() for v in versions], pa.binary()),
                     "partition": pa.array([0] * len(versions), pa.int32()),
                     "offset": pa.array([v[3] for v in versions], pa.int64()),
                     "timestamp_ms": pa.array([v[1] for v in versions], pa.int64())})


def listed(table: pa.Table | None) -> list[tuple]:
    from lockstep.model.state_rows import KEY, TOMBSTONE

    if table is None:
        return []
    out = []
    for r in table.to_pylist():
        value = r["value"].decode() if r["value"] is not None else None
        out.append((r[KEY], r["timestamp_ms"], value, bool(r.get(TOMBSTONE))))
    return sorted(out, key=lambda t: (t[0], t[1] or 0))


def test_a_versioned_delta_keeps_each_touched_keys_versions_within_retention_and_the_value_at_the_cutoff() -> None:
    from lockstep.tables.chain import versioned_delta

    base = rows(("a", 100, "a1", 0), ("a", 200, "a2", 1), ("b", 100, "b1", 2), ("c", 50, "c1", 3))
    new = rows(("a", 1000, "a3", 4), ("c", 990, None, 5))
    delta = versioned_delta(base, new, retention_ms=750)  # newest 1000: cutoff 250
    assert listed(delta) == [
        ("a", 200, "a2", False),   # at the cutoff, a's value was a2 (a1 is older than that: dropped)
        ("a", 1000, "a3", False),
        ("c", 50, "c1", False),    # c's value at the cutoff, then its deletion: both kept
        ("c", 990, None, False),
    ], "b is untouched: no row of it in the delta"


def test_a_key_whose_last_version_before_the_cutoff_is_a_deletion_and_nothing_after_is_tombstoned() -> None:
    from lockstep.tables.chain import versioned_delta

    base = rows(("a", 100, "a1", 0))
    delta = versioned_delta(base, rows(("a", 200, None, 1), ("z", 5000, "z1", 2)), retention_ms=1000)
    assert listed(delta) == [("a", None, None, True), ("z", 5000, "z1", False)]


def test_the_latest_rows_are_each_keys_last_version_by_time_then_offset_and_leave_out_deletions() -> None:
    from lockstep.tables.chain import latest_rows

    table = rows(("a", 100, "a1", 0), ("a", 300, "a3", 1), ("a", 200, "a2", 2),  # a2 came later, older in time
                 ("b", 100, "b1", 3), ("b", 100, None, 4),                       # same time: the later offset wins
                 ("c", 10, "c1", 5))
    assert listed(latest_rows(table)) == [("a", 300, "a3", False), ("c", 10, "c1", False)]
    assert latest_rows(None) is None


def test_versions_need_a_join_as_of_and_as_of_needs_versions(tmp_path: Path) -> None:
    spec = load_spec(spec_with(tmp_path, {"prices": {"topic": "prices", "versions": "7d", "join": {
        "by": "data.product", "as_of": "data.created_at"}}}))
    (table,) = spec.tables
    assert table.versions_ms == 7 * 86_400_000 and table.join is not None and table.join.as_of == "data.created_at"
    with pytest.raises(SpecError) as refused:
        load_spec(spec_with(tmp_path, {"prices": {"topic": "prices", "join": {"by": "k", "as_of": "t"}}}))
    assert [(p.field, p.reason.split(":")[0]) for p in refused.value.problems] == [
        ("tables.prices.versions", "is required for a join as_of an event time")]
    with pytest.raises(SpecError, match="tables.prices.versions: must be a duration"):
        load_spec(spec_with(tmp_path, {"prices": {"topic": "prices", "versions": "forever"}}))


def test_a_missing_table_topic_is_refused_naming_the_tables_field() -> None:
    from types import SimpleNamespace

    from lockstep.kafka import topics

    class Admin:
        def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
            return SimpleNamespace(topics={})

    with pytest.raises(TerminalError, match=r"topic \(tables.customers.topic\) 'customers' does not exist .*; create "
                                            r"it or fix tables.customers.topic"):
        topics.partitions(Admin(), ["customers"], "tables.customers.topic")  # type: ignore[arg-type]
    with pytest.raises(TerminalError, match="source topic 'orders' does not exist .*; create it or fix source.topics"):
        topics.partitions(Admin(), ["orders"])  # type: ignore[arg-type]
