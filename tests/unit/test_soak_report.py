"""docs/RELIABILITY.md is rendered from a soak result; the figures in it are the result's."""
from __future__ import annotations

from lockstep_soak.report import render


def result(ok: bool = True, lost: int = 0) -> dict:
    return {
        "ok": ok, "seed": 1234, "topology": "cluster", "started": "2026-11-23 08:00:00 UTC", "seconds": 600.0,
        "stuck": None, "lso_longest_s": 21.4, "lso_after_last_fault_s": 3.0, "lso_open_at_end": [],
        "config": {"cycles": 3, "records_per_cycle": 10, "bad_per_cycle": 4, "timeout_ms": 40000, "writer": "jvm",
                   "kinds": ["kill_run", "s3_errors"], "spark_master": "spark://127.0.0.1:7077"},
        "audit": {"produced": 30, "covered": 30, "uncovered": 0, "outputs": 30, "lost": lost, "duplicated": 0,
                  "unexpected": 0, "mismatched": 0,
                  "cases": {"valid": {"records": 26, "to_sink": 26, "dead_lettered": 0, "reasons": {}},
                            "poison": {"records": 4, "to_sink": 0, "dead_lettered": 4,
                                       "reasons": {"order_in_cents raised ValueError": 4}}}},
        "cycles": [{"cycle": 0, "checkpoint": 1, "ok": False, "seconds": 9.0, "failed_step": "run",
                    "reason": "TransientError: S3 is unreachable for key 000000000001", "faults": ["kill_run"]},
                   {"cycle": 1, "checkpoint": 2, "ok": True, "seconds": 20.0, "failed_step": None, "reason": "",
                    "faults": ["s3_errors"]},
                   {"cycle": 2, "checkpoint": 3, "ok": True, "seconds": 15.0, "failed_step": None, "reason": "",
                    "faults": []}],
        "faults": [{"cycle": 0, "kind": "kill_run", "at": 0.5, "hold_s": 0.0, "target": "run (7 processes)",
                    "injected": True, "recovery_s": 31.0, "held_s": 0.0, "recovery_after_hold_s": 31.0, "note": "",
                    "failed_checkpoint": True},
                   {"cycle": 1, "kind": "s3_errors", "at": 0.9, "hold_s": 4.0, "target": "", "injected": False,
                    "recovery_s": None, "note": "missed: the cycle ended first"}],
    }


def test_the_report_carries_the_seed_the_command_and_the_figures():
    text = render(result(), "lockstep soak --seed 1234 --cycles 3", commit="abc1234")
    assert "lockstep soak --seed 1234 --cycles 3" in text and "at commit `abc1234`" in text
    assert "## Result: PASSED" in text
    assert "| **lost** | **0** |" in text and "| **duplicated** | **0** |" in text
    assert "| faults injected | 1 (1 planned but missed" in text
    assert "| median recovery, the fault's own hold time excluded | **31.0 s**" in text
    assert "| median recovery, from the fault | 31.0 s" in text
    assert "| the same, of the 1 faults that failed their cycle's checkpoint | 31.0 s" in text
    assert "limit: one transaction timeout, 40 s" in text
    assert "| `kill_run` |" in text and "| 1 | 0 | 1 (1 of 1) | 0.0 s | 31.0 s | 31.0 s | 31.0 s |" in text
    assert "submit mode" in text  # a result from before connect mode says what it ran
    connect = result()
    connect["config"] = {**connect["config"], "mode": "connect"}
    assert "| topology | cluster (connect mode: every run a session on a Spark Connect server" in render(connect, "x")


def test_bad_input_rows_show_where_each_case_went_and_why():
    text = render(result(), "x")
    assert "| poison | a JSON order whose amount makes the transform's row function raise | 4 | 0 | 4 | " \
           "`order_in_cents raised ValueError` (4) |" in text


def test_failed_cycles_are_grouped_by_their_last_line_with_numbers_generalised():
    text = render(result(), "x")
    assert "| 1 | `run: TransientError: S3 is unreachable for key N` |" in text


def test_a_failed_soak_says_so():
    assert "## Result: FAILED" in render(result(ok=False, lost=2), "x")
    assert "| **lost** | **2** |" in render(result(ok=False, lost=2), "x")


def stateful_result(state: dict | None) -> dict:
    doc = result()
    doc["config"] = {**doc["config"], "stateful": True, "window_s": 10, "customers": 5}
    doc["audit"] = {**doc["audit"], **({"state": state} if state is not None else {})}
    return doc


STATE = {"ok": True, "windows_expected": 120, "windows_found": 120, "lost": 0, "duplicated": 0, "unexpected": 0,
         "wrong": 0, "late": 6, "late_unplanned": 0, "complete": True, "unchecked": [], "samples": {},
         "checkpoint": 9, "watermark_ms": 1_700_000_498_000, "state_rows": 17, "state_rows_expected": 17,
         "state_keys": 5, "state_equal": True, "error": None}


def test_a_stateful_report_has_the_keyed_state_table():
    text = render(stateful_result(STATE), "lockstep soak --stateful")
    assert text.startswith("# Reliability: what exactly-once survived with keyed state")
    assert "## Keyed state" in text and "tumbling event-time windows of 10 s" in text
    assert "| windows expected (recomputed) / found in the sink | 120 / 120 |" in text
    assert "| **windows lost** | **0** |" in text and "| **windows duplicated** | **0** |" in text
    assert "| late records (dead-lettered as `late`) | 6 (0 of them" in text
    assert "| final watermark | 2023-11-14T22:21:38Z (checkpoint 9) |" in text
    assert "| state rows: manifest / expected from the input | 17 / 17 (5 keys) |" in text
    assert "| **state equal to recomputation** | **yes** |" in text
    assert "`lockstep_examples.orders:parse`" in text


def test_a_state_mismatch_and_an_incomplete_recompute_are_shown():
    text = render(stateful_result({**STATE, "state_rows": 18, "state_equal": False, "complete": False,
                                   "unchecked": ["no checkpoint has completed yet"], "lost": 2,
                                   "samples": {"lost": ["c1@2023-11-14T22:13:20Z"]}}), "x")
    assert "| **state equal to recomputation** | **NO** |" in text and "| 18 / 17 (5 keys) |" in text
    assert "| recomputation complete | **NO** (no checkpoint has completed yet) |" in text
    assert "| **windows lost** | **2** |" in text and "lost: c1@2023-11-14T22:13:20Z" in text


def test_a_stateful_report_without_state_figures_says_so_and_a_stateless_one_has_no_table():
    assert "the stateful audit did not run" in render(stateful_result(None), "x")
    assert "## Keyed state" not in render(result(), "x")


def test_a_stateful_report_says_what_each_case_is_to_the_stateful_transform():
    text = render(stateful_result(STATE), "x")
    assert "| poison | a JSON order whose amount is not a number: the transform gives it an error | 4 |" in text
    assert "| valid | a valid JSON order (counted in its window, not written itself) | 26 |" in text
    assert "row function raise" in render(result(), "x")


def test_the_report_counts_the_repaired_checkpoints_and_each_kinds_outcomes():
    doc = result()
    doc["repaired"], doc["statuses"] = [4, 9], {"completed": 7, "completed after repair": 1, "aborted": 2}
    doc["faults"] += [
        {"cycle": 3, "kind": "partial_commit", "at": 0.1, "hold_s": 0.0, "anchor": "commit.between_commits",
         "target": "commit (3 processes) at commit.between_commits, checkpoint 4", "injected": True,
         "recovery_s": 70.0, "held_s": 50.0, "recovery_after_hold_s": 20.0, "note": "", "checkpoint": 4,
         "status": "completed after repair"},
        {"cycle": 8, "kind": "partial_commit", "at": 0.1, "hold_s": 0.0, "anchor": "commit.between_commits",
         "target": "commit at commit.between_commits, checkpoint 9", "injected": True, "recovery_s": 65.0,
         "held_s": 45.0, "recovery_after_hold_s": 20.0, "note": "", "checkpoint": 9, "status": "completed after repair"},
        {"cycle": 5, "kind": "duplicate_run", "at": 0.3, "hold_s": 5.0, "target": "checkpoint 6: retry 3.0 s",
         "injected": True, "recovery_s": 40.0, "held_s": 5.0, "recovery_after_hold_s": 35.0, "note": "",
         "status": "retry ok, first attempt failed", "failed_checkpoint": True},
        {"cycle": 5, "kind": "kill_connect", "at": 0.5, "hold_s": 5.0, "target": "spark-connect", "injected": True,
         "recovery_s": 30.0, "held_s": 5.0, "recovery_after_hold_s": 25.0, "note": "", "failed_checkpoint": True}]
    text = render(doc, "x")
    assert "| checkpoints completed after repair | 2 (checkpoints 4, 9); every checkpoint left in the store: " \
           "2 aborted, 7 completed, 1 completed after repair |" in text
    assert "| `partial_commit` | kill -9 of the commit after its first transaction" in text
    assert "| 2 | 0 | 0 (0 of 2) | 47.5 s | 20.0 s | 20.0 s | 67.5 s | completed after repair: 2 |" in text
    assert "| `duplicate_run` | a second run step of the same checkpoint" in text
    # The duplicate's checkpoint failed, but a kill of the Connect server landed in its cycle too: not alone.
    assert "| 1 | 0 | 1 (0 of 0) | 5.0 s | 35.0 s | 35.0 s | 40.0 s | retry ok, first attempt failed: 1 |" in text
    assert "| `kill_run` |" in text and "| 1 | 0 | 1 (1 of 1) | 0.0 s | 31.0 s | 31.0 s | 31.0 s | - |" in text
    # the median over every fault, the hold excluded: 20, 20, 25, 31, 35
    assert "| median recovery, the fault's own hold time excluded | **25.0 s**" in text


def test_a_report_of_a_soak_without_repairs_says_none():
    assert "| checkpoints completed after repair | 0 |" in render(result(), "x")


def test_faults_at_a_chosen_moment_are_counted_by_failpoint_and_by_the_state_file_just_uploaded():
    doc = stateful_result(STATE)
    doc["faults"] += [
        {"cycle": 4, "kind": "s3_restart", "at": 0.2, "hold_s": 5.0, "anchor": "state.mid_upload", "injected": True,
         "target": "s3 at state.mid_upload (compaction)", "recovery_s": 20.0, "note": ""},
        {"cycle": 6, "kind": "s3_restart", "at": 0.2, "hold_s": 5.0, "anchor": "state.mid_upload", "injected": True,
         "target": "s3 at state.mid_upload (compaction)", "recovery_s": 22.0, "note": ""},
        {"cycle": 8, "kind": "s3_errors", "at": 0.2, "hold_s": 5.0, "anchor": "state.mid_upload", "injected": True,
         "target": "s3 proxy at state.mid_upload (delta)", "recovery_s": 12.0, "note": ""},
        {"cycle": 9, "kind": "s3_slow", "at": 0.2, "hold_s": 5.0, "anchor": "commit.mid_state_gc", "injected": False,
         "target": "", "recovery_s": None, "note": "missed: the cycle never reached commit.mid_state_gc"}]
    text = render(doc, "x")
    assert "| `state.mid_upload` | the checkpoint's state files half uploaded | `s3_restart` | compaction | 2 |" in text
    assert "| `state.mid_upload` | the checkpoint's state files half uploaded | `s3_errors` | delta | 1 |" in text
    assert "| `commit.mid_state_gc` | the commit's garbage collection of state files half done | `s3_slow` | " \
           "missed: the cycle never got there | 1 planned |" in text
    assert "## Faults at a chosen moment" not in render(result(), "x")


def test_a_soak_with_an_iceberg_table_reports_it_read_back():
    doc = result()
    doc["audit"]["table"] = {"table": "soak.s1", "ok": True, "rows": 1960, "sink_records": 1960, "lost": 0,
                             "duplicated": 0, "unexpected": 0}
    text = render(doc, "lockstep soak --iceberg")
    assert ("| Iceberg table `soak.s1` (sink.iceberg) read back | 1960 rows for 1960 sink records: **0 lost, "
            "0 duplicated**, 0 unexpected |") in text
    assert "Iceberg table" not in render(result(), "x")
