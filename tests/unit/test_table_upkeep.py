"""The upkeep of a pipeline's Iceberg table (`lockstep.ops.table_upkeep`) over pyiceberg's own SQL catalog on local
files and the checkpoint store over an in-memory S3: the three actions in order, each one's figures kept for the
Checkpoints page, and the ages the CLI and the ``lockstep_iceberg_upkeep`` DAG take."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from lockstep.errors import TerminalError
from lockstep.model.checkpoint import CheckpointClaim, CompletedCheckpoint, PreparedCheckpoint
from lockstep.model.offsets import OffsetRange
from lockstep.ops import table_upkeep
from lockstep.spec import PipelineSpec, load_spec
from lockstep.store.checkpoint_store import TABLE_UPKEEP, CheckpointStore

from ..support.fake_s3 import FakeS3
from .test_iceberg_table import published
from .test_iceberg_table import table as table  # the fixture: an IcebergTable on a SQL catalog


@pytest.fixture
def spec(tmp_path: Path) -> PipelineSpec:
    """Pipeline ``p`` (as the table's snapshots name it) writing table ``db.orders`` of catalog ``lake``."""
    doc = {"name": "p", "source": {"topics": ["in"]}, "transform": "lockstep_examples.orders:order_columns",
           "sink": {"dead_letter_topic": "p-dlq", "iceberg": {"table": "db.orders", "catalog_conn_id": "lake"}},
           "checkpoints": {"store": "s3://lockstep/unit"}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    return load_spec(tmp_path / "p.yaml")


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> CheckpointStore:
    """The pipeline's store, with checkpoints 1-4 completed, as `table_upkeep` opens it."""
    from lockstep.steps import client_factory

    s = CheckpointStore(FakeS3(), "lockstep", "unit/p", "p")
    for cid in range(1, 5):
        s.claim(CheckpointClaim("p", cid, f"r{cid}", "2026-12-05T00:00:00+00:00", (OffsetRange("in", 0, cid, cid + 1),),
                                f"checkpoint:{cid - 1}"))
        s.write_prepared(PreparedCheckpoint("p", cid, "2026-12-05T00:00:00+00:00", (), 1, 1, 0, 1.0))
        s.mark_completed(CompletedCheckpoint("p", cid, "2026-12-05T00:00:00+00:00", {"in:0": cid + 1}, ()))
    monkeypatch.setattr(client_factory, "checkpoint_store", lambda spec, **kw: s)
    return s


def test_ages_are_seconds_or_a_number_with_a_unit_and_a_bad_one_names_its_option() -> None:
    assert [table_upkeep.parse_age(a) for a in ("7d", "1.5h", "30m", "90s", "120", 0)] == [
        604800, 5400, 1800, 90, 120, 0]
    with pytest.raises(TerminalError, match=r"^expire_older_than 'soon': seconds, or a number with s, m, h or d"):
        table_upkeep.parse_age("soon", "expire_older_than")
    with pytest.raises(TerminalError, match="cannot be negative"):
        table_upkeep.parse_age("-1d")


def test_upkeep_compacts_expires_then_removes_orphans_and_keeps_each_actions_figures(table, spec, store) -> None:
    published(table, 1, 2, 3, 4)
    files = table.data_files()
    lines: list[str] = []
    done = table_upkeep.upkeep(spec, keep=1, expire_older_than_s=0, orphans_older_than_s=0, by="the test",
                               report=lines.append)
    assert [d.action for d in done] == ["compact", "expire", "orphans"]
    compacted, expired, orphans = done
    assert compacted.files_before == files and compacted.files_after < files and compacted.rows == 15
    assert expired.snapshots_expired > 0, "the snapshots compaction replaced are old enough at age 0"
    assert orphans.orphans > 0 and orphans.files_after == compacted.files_after, "the replaced files, no longer read"
    assert lines == [d.line() for d in done]

    kept = store.note(TABLE_UPKEEP)
    assert kept is not None and list(kept) == ["compact", "expire", "orphans"]
    assert all(kept[d.action]["by"] == "the test" and kept[d.action]["line"] == d.line() for d in done)
    assert kept["orphans"]["orphan_bytes"] == orphans.orphan_bytes and kept["compact"]["seconds"] >= 0
    assert list(store.checkpoint_ids()) == [1, 2, 3, 4], "kept beside the checkpoints, not as one"

    # One action run alone (the CLI's `compact`) replaces its own figures and leaves the others'.
    again = table_upkeep.compact(spec, keep=1)
    after = store.note(TABLE_UPKEEP)
    assert after["compact"]["by"] == "lockstep iceberg compact" and after["compact"]["rows"] == again.rows == 0
    assert after["orphans"] == kept["orphans"] and after["expire"] == kept["expire"]


def test_figures_that_cannot_be_kept_do_not_fail_the_upkeep_they_describe(table, spec, store, monkeypatch,
                                                                            caplog) -> None:
    published(table, 1, 2)

    def refuse(name: str, doc: object) -> None:
        raise OSError("S3 said no")

    monkeypatch.setattr(store, "record_note", refuse)
    with caplog.at_level(logging.WARNING, logger="lockstep.ops.table_upkeep"):
        done = table_upkeep.compact(spec, keep=1)
    assert done.rows == 10 and done.files_after < done.files_before  # checkpoints 1 and 2, 5 rows each
    assert "p: compact done, but its figures could not be kept for the Checkpoints page: S3 said no" in caplog.text


def test_compaction_keeps_at_least_the_newest_checkpoint(spec) -> None:
    with pytest.raises(TerminalError, match="keep 0: keep at least the newest checkpoint's files"):
        table_upkeep.compact(spec, keep=0)


def test_the_figures_read_back_as_json(table, spec, store) -> None:
    published(table, 1)
    table_upkeep.remove_orphans(spec, 0, dry_run=True, by="x")
    doc = json.loads(json.dumps(store.note(TABLE_UPKEEP)))
    assert doc["orphans"]["dry_run"] is True and doc["orphans"]["by"] == "x"
