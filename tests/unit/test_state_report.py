"""`lockstep state` (stats, show, rekey) over state manifests made by hand and real Parquet files in
an in-memory S3, and the state figures of the Checkpoints page's rows."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lockstep.errors import TerminalError
from lockstep.model.checkpoint import AbortedCheckpoint, CheckpointClaim, CheckpointView, CompletedCheckpoint
from lockstep.model.offsets import OffsetRange
from lockstep.model.state_manifest import PartitionTime, StateManifest
from lockstep.model.state_rows import EVENT, GROUP, KEY
from lockstep.ops import state_report as sr
from lockstep.rules.state_base import key_group_refusal
from lockstep.store.state_files import StateFiles
from tests.support.fake_store import FakeStore

ROOT = Path(__file__).resolve().parents[2]
STATEFUL_SPEC = ROOT / "include" / "pipelines" / "orders_per_customer.yaml"
STATELESS_SPEC = ROOT / "include" / "pipelines" / "orders.yaml"
T0 = 1_795_000_000_000  # 2026-11-18T11:06:40Z, epoch ms
MINUTE = 60_000


def _table(rows: list[tuple[str, int, int, int]]) -> pa.Table:
    """State rows (key, event ms, key group, amount) as the Spark run writes them."""
    return pa.table({KEY: [r[0] for r in rows], EVENT: pa.array([r[1] for r in rows], pa.int64()),
                     GROUP: pa.array([r[2] for r in rows], pa.int32()),
                     "amount": pa.array([r[3] for r in rows], pa.int64())})


def write_state(files: StateFiles, cid: int, rows: list[tuple[str, int, int, int]], key_groups: int = 4,
                **fields: object) -> StateManifest:
    """One Parquet file per key group under checkpoint ``cid``'s folder, and the manifest naming them."""
    written: dict[int, tuple[str, ...]] = {}
    size = 0
    for group in sorted({r[2] for r in rows}):
        sink = io.BytesIO()
        pq.write_table(_table([r for r in rows if r[2] == group]), sink)
        files.put(files.key(cid, group), sink.getvalue())
        written[group] = (files.key(cid, group),)
        size += len(sink.getvalue())
    base: dict[str, object] = dict(
        operator="window", key_groups=key_groups, written_by=cid, files=written,
        columns={KEY: "string", EVENT: "bigint", GROUP: "int", "amount": "bigint"},
        watermark_ms=T0 + 5 * MINUTE,
        partitions={"orders:0": PartitionTime(T0 + 6 * MINUTE, T0 + 10 * MINUTE),
                    "orders:1": PartitionTime(T0 + 2 * MINUTE, T0)},
        keys=len({r[0] for r in rows}), rows=len(rows), bytes=size, timers=3, next_timer_ms=T0 + 6 * MINUTE,
        metrics={"load_seconds": 0.5, "apply_seconds": 1.25, "write_seconds": 0.75, "rows": float(len(rows))})
    base.update(fields)
    return StateManifest(**base)  # type: ignore[arg-type]


def completed(cid: int, state: StateManifest | None) -> CheckpointView:
    claim = CheckpointClaim("orders-per-customer", cid, f"scheduled__{cid}", "2026-11-17T10:00:00+00:00",
                            (OffsetRange("orders", 0, 0, 10),), f"checkpoint:{cid - 1}")
    done = CompletedCheckpoint("orders-per-customer", cid, "2026-11-17T10:01:00+00:00", {"orders:0": 10}, (),
                               state=state)
    return CheckpointView(claim, completed=done)


ROWS = [("alice", T0 + MINUTE, 1, 100), ("alice", T0 + 2 * MINUTE, 1, 250), ("bob", T0 + 3 * MINUTE, 2, 5),
        ("carol", T0 + 4 * MINUTE, 1, 7)]


@pytest.fixture
def store() -> FakeStore:
    s = FakeStore(pipeline="orders-per-customer")
    s.views[7] = completed(7, write_state(s.state_files(), 7, ROWS))
    return s


# ---- pure pieces ---------------------------------------------------------------------------------
def test_times_are_iso_in_utc_with_a_z_and_none_is_said():
    assert sr.iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert sr.iso_ms(1_795_000_000_123) == "2026-11-18T11:06:40.123Z"
    assert sr.iso_ms(None) == "none"


def test_sizes_read_as_people_read_them():
    assert [sr.size_text(n) for n in (None, 0, 812, 3_500, 5 * 1024**2, 3 * 1024**4)] == \
        ["?", "0 B", "812 B", "3.4 KiB", "5.0 MiB", "3072.0 GiB"]


# ---- stats ---------------------------------------------------------------------------------------
def test_stats_report_the_manifest_the_files_sizes_partitions_and_timers(store):
    found = sr.committed_state(store)
    assert found.checkpoint_id == 7 and found.manifest is not None
    m = found.manifest
    sizes = sr.file_sizes(store.state_files(), m)
    assert set(sizes) == set(m.all_files) and sum(sizes.values()) == m.bytes
    doc = sr.stats(7, m, sizes, idle_timeout_ms=5 * MINUTE, now_ms=T0 + 11 * MINUTE)
    assert doc["operator"] == "window" and doc["key_groups"] == 4 and doc["groups_with_keys"] == 2
    assert (doc["keys"], doc["rows"], doc["files"], doc["bytes"]) == (3, 4, 2, m.bytes)
    assert doc["watermark"] == sr.iso_ms(T0 + 5 * MINUTE) and doc["watermark"].endswith("Z")
    assert (doc["oldest_partition_event_ms"], doc["oldest_partition"]) == (T0 + 2 * MINUTE, "orders:1")
    # orders:1 has not been read for 11 minutes (> 5): idle; orders:0 read 1 minute ago
    assert [(p["partition"], p["idle"]) for p in doc["partitions"]] == [("orders:0", False), ("orders:1", True)]
    assert doc["timers"] == {"pending": 3, "next": sr.iso_ms(T0 + 6 * MINUTE), "next_ms": T0 + 6 * MINUTE}
    assert [(g["key_group"], g["files"]) for g in doc["per_key_group"]] == [(1, 1), (2, 1)]
    assert sum(g["bytes"] for g in doc["per_key_group"]) == m.bytes
    json.dumps(doc)  # the --json output

    text = sr.describe_stats("orders-per-customer", doc)
    assert "window state after checkpoint 7" in text and "key groups   4 (2 hold keys)" in text
    assert f"watermark    {doc['watermark']}" in text
    assert "3 windows pending, next fires at " + sr.iso_ms(T0 + 6 * MINUTE) in text
    assert "load 0.50 s, apply 1.25 s, write 0.75 s" in text
    assert [line.endswith("idle") for line in text.splitlines() if line.startswith("    orders:")] == [False, True]


def test_stats_of_a_carried_forward_state_name_the_writer_and_unknown_sizes_and_nothing_measured():
    files = FakeStore().state_files()
    m = write_state(files, 3, ROWS).carried_forward()
    doc = sr.stats(5, m, {}, 300_000, T0)
    assert all(g["bytes"] is None for g in doc["per_key_group"])
    text = sr.describe_stats("p", doc)
    assert "after checkpoint 5, written by checkpoint 3" in text and "nothing measured" in text
    assert "1: 1 file, ?" in text


def test_a_state_without_event_time_yet_says_none():
    files = FakeStore().state_files()
    m = write_state(files, 1, [], watermark_ms=None, partitions={"orders:0": PartitionTime(None, T0)},
                    timers=0, next_timer_ms=None)
    doc = sr.stats(1, m, {}, 300_000, T0)
    assert (doc["watermark"], doc["oldest_partition_event_time"], doc["timers"]["next"]) == ("none", "none", "none")
    assert "(no group holds keys)" in sr.describe_stats("p", doc)


def test_which_state_latest_a_given_checkpoint_none_yet_and_refusals(store):
    assert sr.committed_state(FakeStore()) == sr.CommittedState(None, None)
    assert "no completed checkpoint yet" in sr.no_state_text("p", sr.CommittedState(None, None))
    store.views[8] = completed(8, store.views[7].completed.state)
    assert sr.committed_state(store, 7).checkpoint_id == 7
    with pytest.raises(TerminalError, match="checkpoint 99 of orders-per-customer is not in the store"):
        sr.committed_state(store, 99)
    claim = CheckpointClaim("orders-per-customer", 9, "r", "2026-11-17T10:00:00+00:00", (), "checkpoint:8")
    store.views[9] = CheckpointView(claim, aborted=AbortedCheckpoint("orders-per-customer", 9, "t", "boom", None))
    with pytest.raises(TerminalError, match="checkpoint 9 is aborted, not completed"):
        sr.committed_state(store, 9)


# ---- show ----------------------------------------------------------------------------------------
def test_show_renames_the_internal_columns_and_reads_rows_in_key_group_order(store):
    m = store.views[7].completed.state
    shown = sr.read_rows(store.state_files(), m, limit=20)
    assert not shown.more and shown.files_read == 2
    assert shown.rows[0] == {"key": "alice", "event_time": sr.iso_ms(T0 + MINUTE), "key_group": 1, "amount": 100}
    assert [r["key"] for r in shown.rows] == ["alice", "alice", "carol", "bob"]  # group 1, then group 2
    text = sr.describe_rows("orders-per-customer", 7, m, shown, None)
    assert "4 rows, 3 keys" in text and "kg=1  amount=250" in text and "__ls_" not in text


def test_show_one_key_and_the_limit_stops_reading(store):
    files = store.state_files()
    m = store.views[7].completed.state
    bob = sr.read_rows(files, m, key="bob")
    assert [(r["key"], r["amount"]) for r in bob.rows] == [("bob", 5)]
    assert sr.read_rows(files, m, key="nobody").rows == []
    assert "no rows for key 'nobody'" in sr.describe_rows("p", 7, m, sr.read_rows(files, m, key="nobody"), "nobody")
    first = sr.read_rows(files, m, limit=1)
    assert len(first.rows) == 1 and first.more and first.files_read == 1  # group 2's file never read
    assert "more rows (showing the first 1" in sr.describe_rows("p", 7, m, first, None)


def test_show_names_a_state_file_deleted_outside_lockstep(store):
    from lockstep.errors import MetadataError

    m = store.views[7].completed.state
    store.state_files().delete(m.all_files[:1])
    with pytest.raises(MetadataError, match="deleted outside Lockstep"):
        sr.read_rows(store.state_files(), m)


# ---- rekey ---------------------------------------------------------------------------------------
def test_rekey_is_refused_without_state_for_the_same_groups_and_out_of_range(store):
    assert "nothing to re-key" in sr.rekey_refusal(sr.CommittedState(None, None), 8)
    assert "nothing to re-key" in sr.rekey_refusal(sr.CommittedState(3, None), 8)
    found = sr.committed_state(store)
    assert "already has 4 key groups" in sr.rekey_refusal(found, 4)
    assert "between 1 and 32768" in sr.rekey_refusal(found, 0)
    assert sr.rekey_refusal(found, 16) is None


def test_a_recorded_rekey_lets_the_plan_take_the_new_groups(store):
    from lockstep.spec import load_spec

    spec = load_spec(str(STATEFUL_SPEC))
    found = sr.committed_state(store)
    base = found.manifest
    assert key_group_refusal(base, 16, store.state_files().rekey_to()) is not None
    store.state_files().record_rekey(16, base.key_groups, "2026-11-17T10:00:00+00:00")
    assert key_group_refusal(base, 16, store.state_files().rekey_to()) is None
    text = sr.rekey_text(spec, found, 16)
    assert "re-keying from 4 to 16 key groups recorded" in text and "each as a new base" in text
    assert f"set state.key_groups: 16 in {spec.path} (it says 32)" in text


# ---- the CLI -------------------------------------------------------------------------------------
def _cli(monkeypatch, store: FakeStore, *argv: str) -> int:
    from lockstep.cli import main
    from lockstep.steps import client_factory

    monkeypatch.setattr(client_factory, "checkpoint_store", lambda spec, timeout_s=None: store)
    return main(["state", *argv])


def test_lockstep_state_help_lists_its_three_subcommands(capsys):
    from lockstep.cli import main

    with pytest.raises(SystemExit) as done:
        main(["state", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert all(verb in out for verb in ("stats", "show", "rekey"))
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "state" in capsys.readouterr().out


def test_cli_stats_show_and_rekey(monkeypatch, capsys, store):
    spec = str(STATEFUL_SPEC)
    assert _cli(monkeypatch, store, "stats", "--spec", spec) == 0
    out = capsys.readouterr().out
    assert "window state after checkpoint 7" in out and "keys         3" in out
    assert _cli(monkeypatch, store, "stats", "--spec", spec, "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pipeline"] == "orders-per-customer" and doc["checkpoint"] == 7 and doc["keys"] == 3
    # the spec's idle_timeout (5m) against now: both partitions were last read in the past
    assert all(p["idle"] for p in doc["partitions"])

    assert _cli(monkeypatch, store, "show", "--spec", spec, "--key", "alice", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["amount"] for r in doc["rows"]] == [100, 250] and doc["more"] is False
    assert _cli(monkeypatch, store, "show", "--spec", spec, "--limit", "2") == 0
    assert "more rows" in capsys.readouterr().out

    assert _cli(monkeypatch, store, "rekey", "--spec", spec, "--key-groups", "4") == 2
    assert "already has 4 key groups" in capsys.readouterr().err
    assert store.state_files().rekey_to() is None
    assert _cli(monkeypatch, store, "rekey", "--spec", spec, "--key-groups", "32") == 0
    assert "the next checkpoint re-keys" in capsys.readouterr().out
    assert store.state_files().rekey_to() == 32
    record = json.loads(store.state_files()._s3.body("lockstep", store.state_files().rekey_key))
    assert (record["key_groups"], record["previous"]) == (32, 4)


def test_cli_without_state_says_so_and_a_stateless_pipeline_is_refused(monkeypatch, capsys):
    empty = FakeStore(pipeline="orders-per-customer")
    assert _cli(monkeypatch, empty, "stats", "--spec", str(STATEFUL_SPEC)) == 0
    assert "no state yet" in capsys.readouterr().out
    assert _cli(monkeypatch, empty, "show", "--spec", str(STATEFUL_SPEC), "--json") == 0
    assert json.loads(capsys.readouterr().out)["state"] is None
    assert _cli(monkeypatch, empty, "rekey", "--spec", str(STATEFUL_SPEC), "--key-groups", "8") == 2
    assert "nothing to re-key" in capsys.readouterr().err
    assert _cli(monkeypatch, FakeStore(), "stats", "--spec", str(STATELESS_SPEC)) == 2
    assert "is stateless" in capsys.readouterr().err


# ---- the Checkpoints page ------------------------------------------------------------------------
def _run_page(rows) -> str:
    from lockstep_airflow.checkpoints_page import Ctx, render_run_page

    return render_run_page("lockstep_orders_per_customer", "r", "orders-per-customer", "x", rows, 1, None, Ctx())


def test_checkpoint_rows_carry_the_state_size_and_watermark_and_the_page_shows_them(store):
    from dataclasses import replace

    from lockstep_airflow.overview import checkpoint_row

    m = store.views[7].completed.state
    row = checkpoint_row(store.views[7])
    assert (row.state_keys, row.state_bytes, row.watermark) == (3, m.bytes, sr.iso_ms(T0 + 5 * MINUTE))
    html = _run_page([row])
    assert f"state: 3 keys, {sr.size_text(m.bytes)} · watermark <time datetime=\"{row.watermark}\"" in html
    assert "state:" not in _run_page([replace(row, state_keys=None, state_bytes=None, watermark=None)])
    assert "state: 3 keys" in (html := _run_page([replace(row, watermark=None)])) and "watermark none" in html

    plain = checkpoint_row(completed(8, None))
    assert (plain.state_keys, plain.state_bytes, plain.watermark) == (None, None, None)
    assert "state:" not in _run_page([plain]) and "watermark" not in _run_page([plain])
