"""The keyed-state benchmark's pure parts (``lockstep bench --state-only``): the input of each measured
checkpoint, the options, the stateful pipeline's spec, the arithmetic of what state adds and of bytes
per key, and the report rendered from a results dict. No Kafka, S3 or Spark here; no timings asserted."""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import pytest

from lockstep_bench import keyed_state, keyed_state_report, report, runner, workloads
from lockstep_bench.keyed_state_report import STATEFUL, STATELESS
from lockstep_bench.results import Results

ROOT = Path(__file__).resolve().parents[2]


# ---- the input -------------------------------------------------------------------------------------
def test_a_checkpoint_repeats_held_keys_evenly_and_adds_new_ones() -> None:
    indices = keyed_state.checkpoint_indices(keys=1000, records=10_000, new_keys=100, n=0)
    assert len(indices) == 10_000
    held, new = indices[:9_900], indices[9_900:]
    assert set(held) == set(range(1000))  # every held key is touched...
    counts = Counter(held)
    assert max(counts.values()) - min(counts.values()) <= 1  # ...about as often as any other
    assert new == list(range(1000, 1100))


def test_new_keys_are_new_to_every_later_checkpoint_and_held_ones_continue_in_turn() -> None:
    first, second = (keyed_state.checkpoint_indices(keys=10_000, records=1_000, new_keys=10, n=n) for n in (0, 1))
    assert first[:990] == list(range(990)) and second[:990] == list(range(990, 1980))
    assert first[990:] == list(range(10_000, 10_010)) and second[990:] == list(range(10_010, 10_020))
    assert all(i < 10_000 for i in first[:990] + second[:990])


def test_a_checkpoint_touches_its_share_of_the_held_keys_and_the_next_one_the_next_slice() -> None:
    first, second = (keyed_state.checkpoint_indices(keys=100_000, records=10_000, new_keys=100, n=n, touched=0.01)
                     for n in (0, 1))
    assert len(first) == 10_000 and set(first[:9_900]) == set(range(1_000))  # 1% of the keys, 9.9 times each
    assert set(second[:9_900]) == set(range(1_000, 2_000))
    assert keyed_state.touched_keys(keys=10, records=5, new_keys=0, touched=0.5) == 5
    assert keyed_state.touched_keys(keys=1_000, records=5, new_keys=1, touched=0.5) == 4  # at most one per repeat


def test_no_new_keys_only_repeats() -> None:
    assert keyed_state.checkpoint_indices(keys=3, records=5, new_keys=0, n=1) == [0, 1, 2, 0, 1]


def test_the_schedule_interleaves_the_sizes_and_alternates_who_goes_first() -> None:
    plan = keyed_state.schedule(sizes=3, checkpoints=3)
    assert [(n, i) for n, i, _ in plan] == [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (1, 0), (2, 2), (2, 0), (2, 1)]
    for size in range(3):  # each size: checkpoints 0, 1, 2 in order, the pipelines taking turns to go first
        mine = [(n, first) for n, i, first in plan if i == size]
        assert [n for n, _ in mine] == [0, 1, 2]
        assert [first for _, first in mine] in ([True, False, True], [False, True, False])
    two = keyed_state.schedule(sizes=2, checkpoints=2)
    assert [first for n, i, first in two if i == 0] == [True, False]


@pytest.mark.parametrize("bad", [dict(keys=()), dict(keys=(0,)), dict(new_keys=11, records=10),
                                 dict(new_keys=-1), dict(checkpoints=0), dict(restores=0)])
def test_settings_refuse_what_cannot_be_measured(bad: dict) -> None:
    with pytest.raises(ValueError):
        keyed_state.StateSettings(**bad)


# ---- the options -----------------------------------------------------------------------------------
def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_state_only_defaults_are_the_issues_sizes() -> None:
    args = _args("--state-only")
    assert args.state_only
    s = runner.state_settings_from_args(args)
    assert s.keys == (100_000, 1_000_000, 10_000_000) and s.records == 100_000 and s.checkpoints == 3
    assert s.touched == 0.01 and s.restores == 3
    assert s.report == Path("docs/BENCHMARKS-state.md") and s.partitions == 4 and s.key_groups == 32


def test_state_options_and_the_shared_ones_reach_the_settings(tmp_path: Path) -> None:
    s = runner.state_settings_from_args(_args(
        "--state-only", "--state-keys", "500,5000", "--state-records", "2000", "--state-checkpoints", "2",
        "--state-new-keys", "20", "--state-key-groups", "8", "--partitions", "2", "--report", str(tmp_path / "r.md"),
        "--results", str(tmp_path / "r.json"), "--state-restores", "5"))
    assert (s.keys, s.records, s.checkpoints, s.new_keys, s.key_groups, s.partitions, s.restores) == \
        ((500, 5000), 2000, 2, 20, 8, 2, 5)
    assert s.report == tmp_path / "r.md" and s.results == tmp_path / "r.json"
    assert s.to_json()["keys"] == [500, 5000] and s.to_json()["report"] == str(tmp_path / "r.md")


def test_flink_runs_unless_told_not_to() -> None:
    assert runner.state_settings_from_args(_args("--state-only")).flink
    assert not runner.state_settings_from_args(_args("--state-only", "--state-no-flink")).flink


def test_without_state_only_the_main_bench_runs() -> None:
    assert not _args().state_only


# ---- the pipelines ---------------------------------------------------------------------------------
def test_the_stateful_spec_is_a_dedup_on_order_id_and_the_baseline_has_no_state(tmp_path: Path) -> None:
    from lockstep.spec import load_spec

    stateful = load_spec(str(workloads.write_spec(
        tmp_path, "s", "in", "out", 10_000, remote="sc://h:1", transform=keyed_state.STATEFUL_TRANSFORM,
        state=keyed_state.dedup_state(32))))
    assert stateful.state is not None and stateful.state.dedup is not None
    assert stateful.state.key_groups == 32 and stateful.state.dedup.duplicates == "dead_letter"
    assert stateful.state.dedup.ttl_ms == 400 * 86_400_000 and stateful.transform == "lockstep_examples.orders:parse"
    stateless = load_spec(str(workloads.write_spec(tmp_path, "b", "in", "out2", 10_000, remote="sc://h:1",
                                                   transform=keyed_state.STATELESS_TRANSFORM)))
    assert stateless.state is None and stateless.transform == "lockstep_examples.orders:enrich"


# ---- arithmetic ------------------------------------------------------------------------------------
def test_bytes_per_key() -> None:
    assert keyed_state_report.bytes_per_key(40_000, 1_000) == 40.0
    assert keyed_state_report.bytes_per_key(1_234, 0) is None and keyed_state_report.bytes_per_key(None, 5) is None


def test_what_state_adds_is_a_difference_and_a_ratio() -> None:
    assert keyed_state_report.added(6.0, 4.0) == (2.0, 1.5)
    assert keyed_state_report.added(3.0, 4.0) == (-1.0, 0.75)
    assert keyed_state_report.added(3.0, 0.0) == (3.0, None)
    assert keyed_state_report.added(None, 4.0) == (None, None)
    assert keyed_state_report.added(float("nan"), 4.0) == (None, None)


def _run(kind: str, total: float, spark: float, state: dict | None = None, wall: float | None = None,
         cpu: float = 1.0) -> dict:
    inner = {"plan_s": 0.2, "run_s": total - 0.5, "commit_s": 0.3, "total_s": total, "spark_seconds": spark,
             "records_in": 10_000}
    if state is not None:
        inner["state"] = state
    return {"pipeline": kind, "records": 10_000, "partitions": 4, "wall_s": wall or total + 2.0, "peak_rss_mb": 1.0,
            "cpu_s": cpu, "inner": inner, "repeat": 0}


def _state(keys: int, size: int, load: float, apply: float, write: float, watermark: float = 1.0) -> dict:
    return {"keys": keys, "rows": keys, "bytes": size, "files": 32, "deltas": 0,
            "metrics": {"watermark_seconds": watermark, "load_seconds": load, "apply_seconds": apply,
                        "write_seconds": write, "rows": 10_000, "groups_read": 32, "rows_loaded": 100,
                        "files_written": 32, "bytes_written": size / 10, "compactions": 0,
                        "delta_bytes": size / 20, "compaction_bytes": size / 20}}


def _round(keys: int, size: int, load: float, total: float, base_total: float) -> dict:
    return {STATEFUL: _run(STATEFUL, total, total - 1.0, _state(keys, size, load, 2 * load, load), cpu=2 * total),
            STATELESS: _run(STATELESS, base_total, base_total - 1.0, cpu=base_total)}


def test_one_checkpoints_figures() -> None:
    f = keyed_state_report.checkpoint_figures(_round(1_000, 50_000, 0.5, total=6.0, base_total=4.0))
    assert f["bytes_per_key"] == 50.0 and f["state_s"] == 2.0  # load 0.5 + apply 1.0 + write 0.5
    assert f["spark_s"] == 5.0 and f["spark_rest_s"] == 5.0 - (1.0 + 0.5 + 1.0 + 0.5)
    assert (f["added_s"], f["ratio"]) == (2.0, 1.5)
    assert (f["spark_added_s"], f["spark_ratio"]) == (2.0, 5.0 / 3.0)
    assert f["process_s"] == 8.0 and f["base_process_s"] == 6.0
    assert (f["cpu_s"], f["base_cpu_s"], f["cpu_added_s"], f["cpu_ratio"]) == (12.0, 4.0, 8.0, 3.0)


def test_a_sizes_summary_takes_medians_and_compares_the_medians() -> None:
    size = {"keys": 1_000, "checkpoints": [_round(1_000, 50_000, 0.5, 6.0, 4.0), _round(1_100, 55_000, 0.7, 9.0, 4.5),
                                           _round(1_200, 60_000, 0.6, 7.0, 5.0)]}
    m = keyed_state_report.size_summary(size)
    assert m["checkpoints"] == 3 and m["keys"] == 1_100 and m["bytes"] == 55_000 and m["load_s"] == 0.6
    assert m["total_s"] == 7.0 and m["base_total_s"] == 4.5
    assert m["added_s"] == 2.5 and m["ratio"] == pytest.approx(7.0 / 4.5)
    assert (m["cpu_s"], m["base_cpu_s"], m["cpu_added_s"]) == (14.0, 4.5, 9.5)


def test_growth_between_sizes() -> None:
    assert keyed_state_report.growth({"state_s": 0.5}, {"state_s": 5.0}, "state_s") == 10.0
    assert keyed_state_report.growth({"state_s": 0.0}, {"state_s": 5.0}, "state_s") is None
    assert keyed_state_report.growth({}, {"state_s": 5.0}, "state_s") is None


# ---- the report ------------------------------------------------------------------------------------
def _results() -> dict:
    small = [_round(1_000 + 100 * n, 40_000 + 4_000 * n, 0.2, 5.0 + n, 4.0) for n in range(3)]
    large = [_round(100_000 + 100 * n, 1_500_000, 2.0, 12.0, 4.0 + n) for n in range(3)]
    settings = keyed_state.StateSettings(keys=(1_000, 100_000), results=Path("var/bench/state-results.json"))
    return {"settings": settings.to_json(), "started_at": "2026-11-26 02:00:00 UTC", "commit": "abc1234",
            "seconds": 600.0, "load": {"start": [2.0, 2.5, 2.2], "end": [3.0, 2.8, 2.4]},
            "environment": {"cpus": 2, "cpu_model": "Test CPU", "spark": "4.0.0"},
            "sizes": [{"keys": 1_000, "buildup": [_run(STATELESS, 3.0, 2.0), _run(STATEFUL, 4.0, 3.0, _state(
                1_000, 40_000, 0.0, 0.5, 0.3))], "checkpoints": small},
                {"keys": 100_000, "buildup": [], "checkpoints": large}],
            "notes": ["a note of the run"]}


def test_report_names_the_command_the_commit_the_machine_and_the_date() -> None:
    text = keyed_state_report.render(_results())
    head = text.split("## Machine", 1)[0]
    assert text.startswith("# Benchmarks: what keyed state costs")
    assert "`make bench-state`" in head and "lockstep bench --state-only" in head
    assert "2026-11-26 02:00:00 UTC" in head and "`abc1234`" in head and "10.0 minutes" in head
    assert "| CPUs (nproc) | 2 |" in text and "| CPU | Test CPU |" in text and "2.0/2.5/2.2 / 3.0/2.8/2.4" in text
    assert "- a note of the run" in text and "`var/bench/state-results.json`" in text


def test_report_has_a_summary_row_and_a_table_per_size() -> None:
    text = keyed_state_report.render(_results())
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    # 1,000 keys: medians 1,100 keys, 44,000 bytes (40.0 B/key), 6.00 s against 4.00 s.
    assert "| 1,000 | 1,100 | 43.0 KiB | 40.0 | 32 | 100 | 4.3 KiB | 2.1 KiB | 2.1 KiB | 0.20 | 0.40 | 0.20 | 6.00 | 4.00 | " \
        "+2.00 | 1.50× | " \
        "5.00 / 3.00 | 12.0 / 4.0 | +8.00 |" in summary
    assert "| 100,000 | 100,100 | 1.4 MiB | 15.0 |" in summary
    section = text.split("## 1,000 keys", 1)[1].split("\n## ", 1)[0]
    assert "Build-up, not counted: 1,000 records in one checkpoint, stateful 4.00 s" in section
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| 1", "| 2", "| 3", "| median"]
    assert rows[1].startswith("| 2 | 1,100 | 1,100 | 32 | 0 | 44,000 | 40.0 | 32 | 100 | 32 | 4400 | 0 | 1.00 | 0.20 | "
                              "0.40 | 0.20 | 3.20 | 5.00 | 6.00 | 8.00 | 12.0 | 3.00 | 4.00 | 4.0 | +2.00 | 1.50× |")
    assert "## 100,000 keys" in text and "Build-up" not in text.split("## 100,000 keys", 1)[1].split("\n## ", 1)[0]


def test_report_reads_where_the_time_goes_and_how_it_grows() -> None:
    reading = keyed_state_report.render(_results()).split("## Reading the numbers", 1)[1].split("\n## ", 1)[0]
    assert "at 100,100 keys" in reading and "load + apply + write, take 8.00 s (67% of the checkpoint)" in reading
    assert "from 1,100 to 100,100 keys (91.00× the state), load + apply + write went 0.80 → 8.00 s (10.00×)" in reading
    assert "+2.00 → +7.00 s" in reading and "went 4.00 → 5.00 s" in reading
    assert "the stateful checkpoint went 12.0 → 24.0 s (2.00×) and the stateless one 4.0 → 5.0 s" in reading
    assert "By step: load 0.20 → 2.00 s, apply 0.40 → 4.00 s, write 0.20 → 2.00 s, the rest of Spark" in reading
    assert "already at 1,000 keys state adds +2.00 s" in reading and "+5.00 s at 100,000 keys" in reading
    assert "In CPU seconds state adds +8.00 s at 1,000 keys and +19.00 s at 100,000." in reading
    assert "a checkpoint wrote 2.1 KiB of deltas at 1,100 keys and 73.2 KiB at 100,100" in reading
    assert "The checkpoint at 100,000 keys took 2.00× its time at 1,000." in reading


def test_a_larger_state_adding_less_than_a_smaller_one_is_called_noise() -> None:
    results = _results()
    for r in results["sizes"][1]["checkpoints"]:
        r[STATEFUL]["inner"]["total_s"] = 5.0  # the 100,000-key checkpoints: +0.00 s against the baseline
    reading = keyed_state_report.render(results).split("## Reading the numbers", 1)[1]
    assert "At 100,000 keys the addition is no larger (-2.00 s)" in reading and "on top" not in reading


def test_report_of_one_size_has_no_growth_sentence(tmp_path: Path) -> None:
    results = _results()
    results["sizes"] = results["sizes"][:1]
    keyed_state_report.write(results, tmp_path / "docs" / "S.md")
    text = (tmp_path / "docs" / "S.md").read_text()
    assert "How it grows" not in text and "Fixed and growing" not in text and "Where the time goes" in text


# ---- BENCHMARKS.md links to it ---------------------------------------------------------------------
def test_the_main_report_links_to_the_state_report_and_the_committed_page_has_the_same_section(tmp_path: Path) -> None:
    res = Results(settings={"records": 1000, "partitions": 4, "repeats": 1, "partition_records": 1000},
                  environment={"cpus": 2}, seconds=60.0)
    path = tmp_path / "BENCH.md"
    report.write(res, path)
    generated = path.read_text()
    section = report.KEYED_STATE + "\n\n## Joins\n"  # the join race's section follows it
    assert section in generated and "(BENCHMARKS-state.md)" in report.KEYED_STATE
    assert generated.index("## Plan time and metadata") < generated.index("## Keyed state")
    # Added by hand to the committed page: exactly what the next `make bench` writes there.
    assert section in (ROOT / "docs" / "BENCHMARKS.md").read_text()


def test_state_docs_link_to_the_state_report() -> None:
    assert "(BENCHMARKS-state.md)" in (ROOT / "docs" / "state.md").read_text()
    assert "BENCHMARKS.md#keyed-state" not in (ROOT / "docs" / "state.md").read_text()


def _cold_warm(server_start: float | None = 20.0, warmed: bool = False, restarted: bool = False) -> dict:
    """A restore's runs: cold and warm (results before the warmed-up server), with ``warmed`` the
    warmed-up server's cold checkpoint between them, with ``restarted`` the same host's restore after it."""
    cold, warm = _round(100_000, 1_500_000, 3.0, 14.0, 4.0), _round(100_000, 1_500_000, 0.5, 11.0, 4.0)
    restart = {"server_start_s": server_start, "server_restarted": True} if server_start is not None else {}
    runs = {"cold": {**cold[STATEFUL], **restart}}
    if warmed:
        run = _round(100_000, 1_500_000, 1.5, 13.0, 4.0)[STATEFUL]
        runs["warmed"] = {**run, "server_start_s": 35.0, "server_restarted": True}
    if restarted:
        run = _round(100_000, 1_500_000, 0.4, 12.0, 4.0)[STATEFUL]
        runs["restarted"] = {**run, "server_start_s": 34.0, "server_restarted": True}
    return {**runs, "warm": {**warm[STATEFUL], "server_restarted": False}}


def _flink(exact: bool = True) -> dict:
    check = {"emitted": 100, "expected": 100, "missing": 0, "duplicated": 0, "repeats_emitted": 0, "unknown": 0,
             "exact": True} if exact else \
        {"emitted": 10_000, "expected": 100, "missing": 0, "duplicated": 0, "repeats_emitted": 9_900, "unknown": 0,
         "exact": False}
    return {"checkpoint_s": 1.0, "claim_mode": "CLAIM", "sink": "s", "group": "g",
            "buildup": {"seconds": 100.0, "from_job_started_s": 90.0, "job_started_s": 10.0, "cpu_s": 150.0,
                        "peak_rss_mb": 900.0, "records_in": 130_000, "output_records": 100_300,
                        "expected_output": 100_300, "lockstep_state_keys": 100_300,
                        "result": {"parallelism": 2, "checkpoint": "/f/checkpoints/j1/chk-9", "checkpoint_bytes": 2_000_000,
                                   "checkpoints": {"latest_completed": {"state_size": 2_100_000}}}},
            "restore": {"seconds": 25.0, "from_job_started_s": 12.5, "job_started_s": 12.0, "cpu_s": 30.0,
                        "offsets_seconds": 33.0, "clock": "outputs committed",
                        "peak_rss_mb": 800.0, "records_in": 10_000, "checkpoint_bytes": 2_200_000, "check": check,
                        "result": {"checkpoints": {"restored": {"id": 9}}}}}


def _section(results: dict, title: str = "## Cold and warm, at 100,000 keys") -> str:
    return keyed_state_report.render(results).split(title, 1)[1].split("\n## ", 1)[0]


def test_report_shows_the_cold_and_the_warm_checkpoint_of_the_largest_state() -> None:
    results = _results()
    results["sizes"][1]["cold_warm"] = _cold_warm()
    section = _section(results)
    rows = [line for line in section.splitlines() if line.startswith("| cold") or line.startswith("| warm")]
    assert rows[0] == "| cold | 20.00 | 32 | 100 | 3.00 | 6.00 | 3.00 | 13.00 | 14.00 | 16.00 | 28.0 | 14.00 |", rows
    assert rows[1] == "| warm | – | 32 | 100 | 0.50 | 1.00 | 0.50 | 10.00 | 11.00 | 13.00 | 22.0 | 11.00 |", rows
    assert "the Spark Connect server restarted (a new JVM" in section
    assert "### Against Flink" not in section  # --state-no-flink
    assert "## Cold and warm" not in keyed_state_report.render(_results())


def test_an_earlier_runs_cold_checkpoint_without_a_restart_still_renders() -> None:
    results = _results()
    results["sizes"][1]["cold_warm"] = _cold_warm(server_start=None)
    section = _section(results)
    assert "| cold | – | 32 | 100 |" in section and "the Spark Connect server stays up" in section


def test_report_compares_locksteps_cold_and_warm_checkpoints_with_flinks_restore() -> None:
    results = _results()
    results["sizes"][1]["cold_warm"] = _cold_warm()
    results["sizes"][1]["flink"] = _flink()
    section = _section(results)
    flink = section.split("### Against Flink's RocksDB restore of the same state", 1)[1]
    rows = [line for line in flink.splitlines() if line.startswith(("| Lockstep", "| Flink"))]
    # Lockstep: plan + run + commit, then the process plus (cold) the server's restart: 16 + 20 s.
    # Each beside its ratio to Flink's.
    assert rows == ["| Lockstep, cold | 10,000 | 14.00 | 1.12× | 36.00 | 1.44× | 1.4 MiB | 28.0 | 14.00 |",
                    "| Lockstep, warm | 10,000 | 11.00 | 0.88× | 13.00 | 0.52× | 1.4 MiB | 22.0 | 11.00 |",
                    "| Flink, restore | 10,000 | 12.50 | 1.00× | 25.00 | 1.00× | 2.1 MiB | 30.0 | 12.50 |"], rows
    assert "median" not in flink  # one run each: nothing to take the median of
    # The target's verdict counts restores only: the warm checkpoint's 0.88x is no restore.
    assert "Lockstep, cold, against Flink's restore from its local disk, 1.12× to the first completed checkpoint: **not met**" in flink
    assert "claim mode CLAIM" in flink and "every 1 s" in flink and "parallelism 2" in flink
    assert "130,000 records to a completed checkpoint in 100.0 s from the process start (90.0 s" in flink
    assert "emitted 100,300 orders, one per distinct order id: as many as Lockstep's state holds keys (100,300)" in flink
    assert "1.9 MiB on disk (Flink's REST API: state size 2.0 MiB)" in flink
    assert "submitted 12.0 s after its process started and restored checkpoint 9 (Flink's REST API); its group's " \
        "committed offsets reached the end offsets 33.00 s after the process start" in flink
    assert "100 orders for 100 new keys, exactly the new keys" in flink
    assert keyed_state_report.restore_rows(results["sizes"][1])[2]["with_start_s"] == 25.0


def test_report_shows_the_warmed_up_servers_restore_beside_the_cold_one_and_judges_the_best() -> None:
    results = _results()
    results["sizes"][1]["cold_warm"] = _cold_warm(warmed=True)
    results["sizes"][1]["flink"] = _flink()
    section = _section(results)
    assert [line.split(" |")[0] for line in section.splitlines() if line.startswith(("| cold", "| warm"))] == \
        ["| cold", "| cold, server warmed up", "| warm"]
    assert "| cold, server warmed up | 35.00 | 32 | 100 | 1.50 |" in section
    assert "ran the platform's warm-up checkpoints" in section
    flink = section.split("### Against Flink", 1)[1]
    # 10 s against Flink's 12.5 s; with the server's start (35 s, its warm-up included) and the process: 47 s.
    assert "| Lockstep, cold, server warmed up | 10,000 | 13.00 | 1.04× | 50.00 | 2.00× |" in flink
    assert "on a new host (the cache empty), Lockstep, cold, server warmed up, against Flink's restore from its local disk, 1.04× to the first " \
        "completed checkpoint: **not met**" in flink
    assert "on the same host" not in flink  # not measured


def test_report_judges_the_same_hosts_restore_apart_from_the_new_hosts() -> None:
    results = _results()
    results["sizes"][1]["cold_warm"] = _cold_warm(warmed=True, restarted=True)
    results["sizes"][1]["flink"] = _flink()
    section = _section(results)
    assert [line.split(" |")[0] for line in section.splitlines() if line.startswith(("| cold", "| warm", "| same"))] \
        == ["| cold", "| cold, server warmed up", "| same host, server restarted", "| warm"]
    assert "| same host, server restarted | 34.00 | 32 | 100 | 0.40 |" in section
    assert "the cache as the checkpoint before it left it" in section
    flink = section.split("### Against Flink", 1)[1]
    assert "| Lockstep, same host, server restarted | 10,000 | 12.00 | 0.96× | 48.00 | 1.92× |" in flink
    # The faster same-host restore does not stand for the new host's: each is judged on its own.
    assert "on a new host (the cache empty), Lockstep, cold, server warmed up, against Flink's restore from its local disk, 1.04× to the first " \
        "completed checkpoint: **not met**; on the same host (the server restarted, the cache kept), Lockstep, " \
        "same host, server restarted, against Flink's restore from its local disk, 0.96× to the first completed checkpoint: **met**." in flink


def test_report_says_when_flinks_restore_emitted_held_keys_again() -> None:
    results = _results()
    results["sizes"][1]["cold_warm"] = _cold_warm()
    results["sizes"][1]["flink"] = _flink(exact=False)
    results["sizes"][1]["flink"]["buildup"]["lockstep_state_keys"] = 100_200
    flink = _section(results).split("### Against Flink", 1)[1]
    assert "NOT exact" in flink and "9,900 held keys emitted again" in flink
    assert "Lockstep's state holds 100,200 keys and 100,300 distinct orders were produced" in flink


def test_flinks_restore_from_s3_is_a_row_of_its_own_and_judges_the_new_hosts_restore_like_for_like() -> None:
    results = _results()
    results["sizes"][1]["cold_warm"] = _cold_warm(warmed=True, restarted=True)
    results["sizes"][1]["flink"] = _flink()  # from its local disk: 12.5 s
    on_s3 = _flink()
    on_s3["restore"] = {**on_s3["restore"], "from_job_started_s": 14.0, "seconds": 27.0, "checkpoint_bytes": 3_000_000}
    on_s3["storage"] = "s3"
    results["sizes"][1]["flink_s3"] = on_s3
    against = _section(results).split("### Against Flink", 1)[1]
    rows = {line.split(" | ")[0]: line for line in against.splitlines() if line.startswith(("| Lockstep", "| Flink"))}
    # Ratios in the table stay against the local restore; the S3 restore has its own row.
    assert rows["| Flink, restore from S3"].startswith("| Flink, restore from S3 | 10,000 | 14.00 | 1.12× | 27.00 |")
    assert "Then all of it again with Flink's checkpoints on the benchmark's S3 server" in against
    # The new host (13 s, warmed up) against the restore that downloads its state too (14 s): met; against the
    # local one (12.5 s): not met; each verdict is stated.
    assert "on a new host (the cache empty), Lockstep, cold, server warmed up, against Flink's restore from its " \
        "local disk, 1.04× to the first completed checkpoint: **not met**" in against
    assert "on a new host (the cache empty), Lockstep, cold, server warmed up, against Flink's restore from S3 " \
        "(like for like: both download the state), 0.93× to the first completed checkpoint: **met**" in against
    del results["sizes"][1]["flink_s3"]  # results of runs before it: no such row, no such verdict
    assert "from S3" not in _section(results).split("### Against Flink", 1)[1]


def test_repeated_restores_are_judged_median_against_median_with_every_run_shown() -> None:
    results = _results()
    rounds = [_cold_warm(warmed=True, restarted=True) for _ in range(3)]
    # The warmed-up restore's three runs: 13, 9 and 20 s; the same host's: 12, 15 and 11 s.
    for r, (warmed, same) in enumerate(((13.0, 12.0), (9.0, 15.0), (20.0, 11.0))):
        rounds[r]["warmed"]["inner"]["total_s"] = warmed
        rounds[r]["restarted"]["inner"]["total_s"] = same
        rounds[r]["restarted"]["server_start_s"] = 30.0 + r
    results["sizes"][1]["cold_warm"] = {t: [{**rounds[r][t], "round": r + 1} for r in range(3)] for t in rounds[0]}
    flink = _flink()
    first = flink.pop("restore")
    # Flink's three restores: 12.5, 9.0 and 15.0 s from the job's submission; the median is 12.5 s.
    flink["restores"] = [first, {**first, "from_job_started_s": 9.0, "seconds": 20.0},
                         {**first, "from_job_started_s": 15.0, "seconds": 30.0,
                          "result": {"checkpoints": {"restored": {"id": 14}}}}]
    flink["restores"][1]["result"] = {"checkpoints": {"restored": {"id": 12}}}
    results["sizes"][1]["flink"] = flink
    section = _section(results)
    # The cold-and-warm table: each temperature's median run, every run beside it in order.
    assert "Each of these 4 ran 3 times, in rounds (cold; cold, server warmed up; same host, server restarted; " \
        "warm; then again)" in section
    same_row = next(line for line in section.splitlines() if line.startswith("| same host, server restarted"))
    assert same_row.startswith("| same host, server restarted | 30.00 |") and same_row.endswith("| 12.00, 15.00, 11.00 |")
    against = section.split("### Against Flink", 1)[1]
    rows = {line.split(" | ")[0]: line for line in against.splitlines() if line.startswith(("| Lockstep", "| Flink"))}
    assert rows["| Lockstep, cold, server warmed up"].startswith("| Lockstep, cold, server warmed up | 10,000 | 13.00 | 1.04× |")
    assert rows["| Lockstep, cold, server warmed up"].endswith("| 13.00, 9.00, 20.00 |")
    assert rows["| Flink, restore"].startswith("| Flink, restore | 10,000 | 12.50 | 1.00× | 25.00 | 1.00× |")
    assert rows["| Flink, restore"].endswith("| 12.50, 9.00, 15.00 |")
    # Median against median: not the best run against Flink's slowest (9 s against 15 s would say 0.60x).
    assert "1.0×, median against median): on a new host (the cache empty), Lockstep, cold, server warmed up" \
        ", against Flink's restore from its local disk, 1.04×" in against
    assert "same host, server restarted, against Flink's restore from its local disk, 0.96× to the first completed checkpoint: **met**" in against
    assert "3 times, each restore a new process from the checkpoint the one before it retained" in against
    assert "Flink's 3 restores:** 12.50, 9.00, 15.00 s from the job's submission to the new keys' output committed, " \
        "restoring checkpoints 9, 12, 14 (Flink's REST API); each one's output exactly the new keys: 3 of 3" in against
    assert "- **Flink's median restore:** the job was submitted 12.0 s after its process started and restored " \
        "checkpoint 9" in against
    # Every run of the restore counted among the outputs read back.
    assert keyed_state_report.read_back(results["sizes"])[0] == 2 + 2 * 6 + 4 * 3  # build-ups, rounds, restores


def test_the_median_run_is_a_real_run_the_faster_middle_one_of_an_even_number() -> None:
    runs = [{"inner": {"total_s": t}, "i": i} for i, t in enumerate((5.0, 3.0, None, 4.0, 6.0))]
    assert keyed_state_report.median_run(runs)["i"] == 3  # 3, 4, 5, 6 timed: the faster of 4 and 5
    assert keyed_state_report.median_run(runs[:2] + runs[3:4])["i"] == 3  # 3, 4, 5
    assert keyed_state_report.median_run([runs[2]])["i"] == 2  # nothing timed: the run itself


# ---- the cold checkpoint restarts the server; Flink's restore comes last -----------------------------
def _bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flink: bool = True,
           restart: object = None, restores: int = 1) -> keyed_state.StateBench:
    settings = keyed_state.StateSettings(keys=(10, 20), records=5, new_keys=1, checkpoints=1, flink=flink,
                                         restores=restores)
    bench = keyed_state.StateBench(settings, "h:1", "sc://h:2", 111, tmp_path, lambda _m: None,
                                   restart_connect=restart)  # type: ignore[arg-type]
    monkeypatch.setattr(keyed_state, "produce", lambda *a, **k: None)
    monkeypatch.setattr(workloads, "end_offsets", lambda *a, **k: {})
    return bench


def test_the_cold_checkpoints_find_an_empty_cache_and_the_same_hosts_restore_the_one_its_checkpoint_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    (cache / "g").mkdir(parents=True)
    monkeypatch.setenv("LOCKSTEP_STATE_CACHE", str(cache))
    seen: list[tuple[str, int, list[str]]] = []
    restarts: list[bool] = []

    def restart(warm_checkpoints: bool) -> int:
        restarts.append(warm_checkpoints)
        (cache / f"warm-up-{len(restarts)}").mkdir(parents=True)  # the warm-up's checkpoints fill the cache
        return 221 + len(restarts)

    bench = _bench(tmp_path, monkeypatch, restart=restart, restores=2)
    produced: list[int] = []
    real_produce = bench.produce
    monkeypatch.setattr(bench, "produce", lambda size, n: produced.append(n) or real_produce(size, n))

    def checkpoint(kind: str, spec: Path, records: int, label: str, repeat: int = 0, want: object = None) -> dict:
        assert want is not None  # every checkpoint's outputs are read back
        seen.append((kind, bench.connect_pid, sorted(p.name for p in cache.iterdir()) if cache.exists() else []))
        if kind == STATEFUL:  # a checkpoint leaves the files it read and wrote in the cache
            (cache / f"by-{label.split(', ')[-1].replace(' ', '-')}").mkdir(parents=True)
        return {"pipeline": kind, "inner": {}}

    monkeypatch.setattr(bench, "checkpoint", checkpoint)
    size = {"keys": 20, "topic": "t", "specs": {STATEFUL: Path("a"), STATELESS: Path("b")}}
    # Two rounds of the four, each over the next checkpoint's records; the next index is returned.
    assert bench.cold_and_warm(size, 1) == 9
    assert produced == list(range(1, 9))
    # Each round: a restart with the server's one query, then two with its warm-up checkpoints.
    assert restarts == [False, True, True] * 2
    stateful = [(pid, files) for kind, pid, files in seen if kind == STATEFUL]
    assert stateful == [
        (222, []),  # cold: emptied after the restart
        (223, []),  # warmed up: emptied after the warm-up
        (224, ["by-warmed-1", "warm-up-3"]),  # the same host's restore: what the warmed-up checkpoint left is kept
        (224, ["by-restarted-1", "by-warmed-1", "warm-up-3"]),  # warm: as the one before left it
        (225, []),  # the second round's cold checkpoint finds the cache empty again
        (226, []),
        (227, ["by-warmed-2", "warm-up-6"]),
        (227, ["by-restarted-2", "by-warmed-2", "warm-up-6"]),
    ]
    assert [pid for kind, pid, _ in seen if kind == STATELESS] == [222, 223, 224, 224, 225, 226, 227, 227]
    assert list(size["cold_warm"]) == ["cold", "warmed", "restarted", "warm"]
    for temperature, runs in size["cold_warm"].items():
        assert [run["round"] for run in runs] == [1, 2], temperature
        for run in runs:
            if temperature == "warm":
                assert not run["server_restarted"] and "server_start_s" not in run
            else:
                assert run["server_restarted"] and run["server_start_s"] >= 0


def test_without_a_server_to_restart_there_is_no_same_host_restore(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_STATE_CACHE", str(tmp_path / "cache"))
    bench = _bench(tmp_path, monkeypatch)
    monkeypatch.setattr(bench, "checkpoint", lambda *a, **k: {"inner": {}})
    size = {"keys": 20, "topic": "t", "specs": {STATEFUL: Path("a"), STATELESS: Path("b")}}
    assert bench.cold_and_warm(size, 1) == 4  # three checkpoints' records, not four
    assert list(size["cold_warm"]) == ["cold", "warmed", "warm"]
    assert not any(run["server_restarted"] for runs in size["cold_warm"].values() for run in runs)


@pytest.mark.parametrize("flink", [True, False])
def test_flinks_restore_runs_after_lockstep_at_the_largest_size_unless_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flink: bool) -> None:
    bench = _bench(tmp_path, monkeypatch, flink=flink)
    calls: list[tuple] = []
    monkeypatch.setattr(bench, "build", lambda keys: {"keys": keys, "topic": f"t{keys}", "specs": {}, "checkpoints": []})
    monkeypatch.setattr(bench, "round", lambda size, n, first: calls.append(("round", size["keys"], n)))
    monkeypatch.setattr(bench, "cold_and_warm", lambda size, n: calls.append(("cold_and_warm", size["keys"], n)) or n + 7)
    monkeypatch.setattr(bench, "flink_restore", lambda size, n, bucket: calls.append(("flink", size["keys"], n, bucket)))
    monkeypatch.setattr(workloads, "delete_topic", lambda *a: None)
    bench.measure()
    # The topic then holds the measured checkpoint's records and the restores': 1 + 7, as cold_and_warm says.
    assert calls[-2:] == [("cold_and_warm", 20, 1), ("flink", 20, 8, None)] if flink else \
        calls[-1] == ("cold_and_warm", 20, 1)


def test_flinks_restores_read_the_checkpoints_after_locksteps_each_restores_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lockstep_bench import flink_restore

    bench = _bench(tmp_path, monkeypatch, restores=3)
    got: dict = {}
    monkeypatch.setattr(flink_restore, "measure", lambda *a, **k: got.update(args=a, kwargs=k) or {"restores": []})
    size = {"keys": 20, "topic": "t", "cold_warm": {"warm": [{"inner": {"state": {"keys": 27}}},
                                                            {"inner": {"state": {"keys": 29}}}]}}
    bench.flink_restore(size, 9)
    _, _, keys, checkpoints, new_keys, indices = got["args"][:6]
    assert (keys, checkpoints, new_keys) == (20, 9, 1)
    s = bench.s
    assert indices == [keyed_state.checkpoint_indices(20, s.records, s.new_keys, n, s.touched) for n in (9, 10, 11)]
    assert got["kwargs"]["state_keys"] == 29  # what Lockstep's state held after its last checkpoint


def test_flinks_second_chain_keeps_its_checkpoints_on_s3_and_reads_the_checkpoints_after_the_first_chains(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lockstep_bench import flink_restore

    bench = _bench(tmp_path, monkeypatch, restores=2)
    calls: list[tuple] = []
    monkeypatch.setattr(flink_restore, "measure", lambda *a, **k: calls.append((a, k)) or {"restores": [len(calls)]})
    size = {"keys": 20, "topic": "t", "cold_warm": {"warm": [{"inner": {"state": {"keys": 29}}}]}}
    bench.flink_restore(size, 9, bucket="lockstep")
    (local_args, local_kw), (s3_args, s3_kw) = calls
    assert local_kw["on_s3"] is None and s3_kw["on_s3"] == "s3://lockstep/bench-flink-checkpoints"
    s = bench.s
    assert local_args[3] == 9 and local_args[5] == [keyed_state.checkpoint_indices(20, s.records, s.new_keys, n,
                                                                                   s.touched) for n in (9, 10)]
    # The second chain's build-up reads the first chain's two restores' records too; its restores, the next two.
    assert s3_args[3] == 11 and s3_args[5] == [keyed_state.checkpoint_indices(20, s.records, s.new_keys, n, s.touched)
                                               for n in (11, 12)]
    assert s3_kw["state_keys"] == 29 + 2 * s.new_keys
    assert size["flink"] == {"restores": [1]} and size["flink_s3"] == {"restores": [2]}
    bench.flink_restore(size, 9)  # no bucket: no second chain
    assert len(calls) == 3


def test_what_each_pipeline_must_output_names_every_input_offset_once() -> None:
    # Orders n = 0..4 appended round-robin to 2 partitions that ended at 3 and 5: partition 0 gets n = 0, 2, 4 at
    # offsets 3, 4, 5, partition 1 n = 1, 3 at offsets 5, 6; the last 2 orders (n = 3, 4) are the new keys.
    want = keyed_state.wanted_outputs({0: 3, 1: 5}, records=5, new_keys=2, partitions=2)
    as_lists = {kind: tuple([m.nonzero()[0].tolist() for m in masks] for masks in pair) for kind, pair in want.items()}
    assert as_lists[STATEFUL] == ([[5], [6]], [[3, 4], [5]])  # the new keys to the sink, the repeats dead-lettered
    assert as_lists[STATELESS] == ([[3, 4, 5], [5, 6]], [[], []])  # every order to the sink
    assert [len(m) for m in want[STATEFUL][0]] == [6, 7]  # up to the partitions' new ends


def test_the_report_counts_the_checkpoints_whose_outputs_were_read_back_and_exact() -> None:
    exact, wrong = {"exact": True}, {"exact": False}
    sizes = [{"keys": 10, "checkpoints": [{STATEFUL: {"sink": exact}, STATELESS: {"sink": exact}}],
              "buildup": [{"sink": exact}, {"sink": exact}]},
             {"keys": 20, "checkpoints": [{STATEFUL: {"sink": wrong}, STATELESS: {"sink": None}}],
              "cold_warm": {"cold": {"sink": exact}, "warm": {}}, "buildup": [{}, {"sink": wrong}]}]
    assert keyed_state_report.read_back(sizes) == (10, 7, 5)
    assert keyed_state_report.read_back([]) == (0, 0, 0)


def test_a_build_ups_outputs_are_read_back_every_order_to_each_pipelines_sink(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench(tmp_path, monkeypatch)
    monkeypatch.setattr(workloads, "create_topic", lambda *a, **k: None)
    monkeypatch.setattr(bench, "_specs", lambda keys, topic: {STATEFUL: Path("a"), STATELESS: Path("b")})
    wanted: dict[str, tuple] = {}

    def checkpoint(kind: str, spec: Path, records: int, label: str, repeat: int = 0, want: object = None) -> dict:
        wanted[kind] = want  # type: ignore[assignment]
        return {"inner": {"state": {"keys": records}}}

    monkeypatch.setattr(bench, "checkpoint", checkpoint)
    bench.build(10)
    for kind in (STATEFUL, STATELESS):  # 10 new orders over 4 partitions (3, 3, 2, 2): all to the sink, none dead
        sink, dead = wanted[kind]
        assert [m.tolist() for m in sink] == [[True] * 3, [True] * 3, [True] * 2, [True] * 2], kind
        assert [m.tolist() for m in dead] == [[False] * 3, [False] * 3, [False] * 2, [False] * 2], kind
