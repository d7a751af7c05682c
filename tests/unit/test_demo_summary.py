"""The demo's summary: its checkpoint lines and verify's line count the same checkpoints."""
from __future__ import annotations

from lockstep.model.checkpoint import CheckpointClaim, CheckpointView, PreparedCheckpoint
from lockstep_dev.demo import summary_lines


def view(cid: int, records_in: int) -> CheckpointView:
    claim = CheckpointClaim("orders", cid, "run", "2026-11-25T00:00:00+00:00", (), "checkpoint")
    return CheckpointView(claim, PreparedCheckpoint("orders", cid, "t", (), records_in, records_in - records_in // 50,
                                                    records_in // 50, 1.0))


def test_checkpoints_made_by_the_schedule_are_named_not_left_to_disagree_with_verify():
    views = [view(1, 5000), view(2, 5000), view(3, 0), view(4, 5000), view(5, 0)]
    lines = summary_lines(views, first_new=1, triggered=3)
    assert lines[0] == ("checkpoints completed by this demo: 1..5 (3 triggered runs; 2 more by the DAG's schedule; "
                        "2 without new records)")
    assert lines[1] == "input offsets: 15000  out: 14700  dead-lettered: 300"


def test_a_second_demo_counts_its_own_checkpoints_and_says_how_many_came_before():
    lines = summary_lines([view(1, 5000), view(2, 5000), view(3, 5000)], first_new=3, triggered=1)
    assert lines[0].startswith("checkpoints completed by this demo: 3 (1 triggered runs; 0 more")
    assert lines[1] == "checkpoints completed before this demo: 2"
    assert lines[2] == "input offsets: 5000  out: 4900  dead-lettered: 100"


def test_a_joined_pipelines_summary_names_its_tables_last_version_and_how_many_versions_it_met():
    from lockstep.model.checkpoint import CompletedCheckpoint
    from lockstep.tables.pins import TableVersion
    from lockstep_dev.demo import table_lines

    def done(cid: int, written_by: int) -> CheckpointView:
        v = view(cid, 5000)
        table = TableVersion("customers", "customers", written_by, {0: cid}, ("a", "b"), ("x", "y"), (1000, 234), 972)
        return CheckpointView(v.claim, v.prepared, CompletedCheckpoint("orders", cid, "t", {}, (),
                                                                       tables={"customers": table}))

    assert table_lines([view(1, 5000)]) == []  # a pipeline without tables
    assert table_lines([done(1, 1), done(2, 2), done(3, 2)]) == [
        "table customers: 972 keys as of checkpoint 2 (2 files, 1,234 bytes); 2 versions joined by these checkpoints"]


def test_the_demos_compare_line_says_the_same_output_or_what_changed_and_what_was_not_compared():
    from lockstep.ops.compare import Comparison
    from lockstep.rules.output_diff import OutputRecord, diff_checkpoint
    from lockstep.rules.state_diff import diff_state
    from lockstep_dev.demo import compare_line

    record = OutputRecord(("orders", 0, 1), "sink", None, b"v")
    same = Comparison("orders", "orders.yaml", "now")
    for cid in (4, 5):
        d = diff_checkpoint(cid, [record] * 3, [record] * 3)
        same.checkpoints.append(d)
        same.total.add(d, 5)
    assert compare_line(same) == "2 checkpoints computed again through its own spec, 6 records: the same output"
    stateful = Comparison("windows", "windows.yaml", "now")
    d = diff_checkpoint(4, [record], [record])
    d.state = diff_state([{"__ls_key": "c1", "n": 1}], [{"__ls_key": "c1", "n": 1}])
    stateful.checkpoints.append(d)
    stateful.total.add(d, 5)
    assert compare_line(stateful) == ("1 checkpoint computed again through its own spec, 1 records: the same output; "
                                      "state: 1 keys compared, the same")
    same.not_compared[6] = "its input was deleted by retention"
    assert compare_line(same).endswith("; not compared: checkpoint 6: its input was deleted by retention")
