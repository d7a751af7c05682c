"""A table's version is the first attempt's (docs/joins.md, "Retries, replays and compaction"): a retry, or a
replay that reuses an aborted checkpoint's pins, builds the version from the file that attempt wrote, never
from the table's topic again (compaction may have removed records of the pinned offsets since). Over
tests/support/fake_s3.FakeS3, without Spark: a run that had to read the topic here would fail."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from lockstep.model.offsets import OffsetRange
from lockstep.spec import TableSpec
from lockstep.store import state_chain
from lockstep.store.state_files import StateFiles
from lockstep.tables.pins import TablePin, TableVersion
from tests.support.fake_s3 import FakeS3

if TYPE_CHECKING:
    import pyarrow as pa

TABLE = TableSpec("customers", "customers")


def rows(*items: tuple[str, str | None, int], tombstones: bool = False) -> pa.Table:
    """(key, value or None, offset) each, in partition 0; with ``tombstones``, a delta's column."""
    import pyarrow as pa

    from lockstep.model.state_rows import KEY, TOMBSTONE

    columns = {KEY: [k.encode().hex() for k, _, _ in items], "key": pa.array([k.encode() for k, _, _ in items]),
               "value": pa.array([None if v is None else v.encode() for _, v, _ in items], pa.binary()),
               "partition": pa.array([0] * len(items), pa.int32()),
               "offset": pa.array([o for _, _, o in items], pa.int64()),
               "timestamp_ms": pa.array([o for _, _, o in items], pa.int64())}
    if tombstones:
        columns[TOMBSTONE] = pa.array([v is None for _, v, _ in items])
    return pa.table(columns)


def values(table: pa.Table | None) -> dict[str, str]:
    assert table is not None
    return {r["key"].decode(): r["value"].decode() for r in table.to_pylist() if r["value"] is not None}


def files() -> StateFiles:
    return StateFiles(FakeS3(), "lockstep", "unit/enrich", cache=None)


@pytest.fixture(autouse=True)
def no_spark(monkeypatch):
    """The run's other reads of the table's topic (its records that do not decode, as dead letters) are not what
    these tests look at: nothing to read."""
    from lockstep.tables import materialize as tables

    monkeypatch.setattr(tables, "_undecodable", lambda *args: None, raising=False)


def update(f: StateFiles, checkpoint_id: int, pin: TablePin) -> tuple[pa.Table | None, TableVersion]:
    """The table at ``checkpoint_id`` and its version, as the run builds them (without Spark: a run that had to read
    the table's topic here would fail)."""
    from lockstep.tables.materialize import _update

    found = _update(None, TABLE, checkpoint_id, pin, f, {})  # type: ignore[arg-type]
    return found[0], found[1]


def test_a_replay_builds_its_first_version_from_the_file_the_aborted_checkpoint_wrote():
    f = files()
    first = rows(("alice", "gold", 3), ("bob", "silver", 5))
    f.put_table(f.table_key(4, "customers"), state_chain.parquet(first))
    pin = TablePin("customers", None, (OffsetRange("customers", 0, 0, 6),), earlier=(4,))
    table, version = update(f, 5, pin)
    assert values(table) == {"alice": "gold", "bob": "silver"}
    assert version.files == (f.table_key(4, "customers"),) and version.written_by == 5 and version.ends == {0: 6}
    assert version.keys == 2 and len(version.digests) == 1


def test_a_retry_applies_its_earlier_attempts_delta_on_the_pinned_base():
    f = files()
    where, digest = f.put_table(f.table_key(2, "customers"), state_chain.parquet(rows(("alice", "silver", 1))))
    base = TableVersion("customers", "customers", 2, {0: 2}, (where,), (digest,), (100,), 1)
    delta = rows(("alice", "gold", 7), ("carol", "bronze", 8), tombstones=True)
    f.put_table(f.table_key(3, "customers", delta=True), state_chain.parquet(delta))
    pin = TablePin("customers", base, (OffsetRange("customers", 0, 2, 9),))
    table, version = update(f, 3, pin)
    assert values(table) == {"alice": "gold", "carol": "bronze"}
    assert version.files == (where, f.table_key(3, "customers", delta=True)) and version.ends == {0: 9}


def test_the_first_of_the_attempts_that_wrote_a_file_wins():
    f = files()
    f.put_table(f.table_key(4, "customers"), state_chain.parquet(rows(("alice", "gold", 3))))
    f.put_table(f.table_key(6, "customers"), state_chain.parquet(rows(("alice", "platinum", 9))))
    pin = TablePin("customers", None, (OffsetRange("customers", 0, 0, 6),), earlier=(4, 5))
    table, version = update(f, 6, pin)
    assert values(table) == {"alice": "gold"} and version.files == (f.table_key(4, "customers"),)
