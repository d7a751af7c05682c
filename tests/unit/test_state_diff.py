"""`lockstep replay --compare`'s state side without services: a checkpoint's state as committed against the state
the new code leaves, key by key, each key's rows a multiset (its key group left out), and how a state difference
makes a checkpoint's comparison not the same."""
from __future__ import annotations

import json

from lockstep.model.state_rows import EVENT, GROUP, KEY
from lockstep.ops.compare import Comparison, exit_code
from lockstep.rules.output_diff import diff_checkpoint
from lockstep.rules.state_diff import StateDiff, diff_state


def row(key: str, group: int = 0, **columns: object) -> dict[str, object]:
    return {KEY: key, GROUP: group, EVENT: 1000, **columns}


def test_the_same_rows_in_another_order_are_the_same_state():
    before = [row("a", orders=1), row("a", orders=2), row("b", orders=3)]
    diff = diff_state(before, list(reversed(before)))
    assert diff.empty and (diff.keys, diff.same) == (2, 2)
    assert diff.text() == "state: 2 keys compared, the same"


def test_a_key_whose_rows_differ_changed_and_keys_on_one_side_were_added_or_removed():
    before = [row("a", orders=1), row("b", orders=2), row("c", orders=3), row("c", orders=4)]
    after = [row("a", orders=1), row("b", orders=5), row("d", orders=6)]
    diff = diff_state(before, after, examples=10)
    assert (diff.keys, diff.same, diff.changed, diff.added, diff.removed) == (4, 1, 1, 1, 1)
    assert (diff.rows_added, diff.rows_removed) == (2, 3)  # b's new row and d's; b's old row and c's two
    kinds = {e.key: e.kind for e in diff.examples}
    assert kinds == {"b": "changed", "c": "removed", "d": "added"}
    changed = next(e for e in diff.examples if e.key == "b")
    # one row each side: only the columns that differ
    assert json.loads(changed.before) == {"orders": 2} and json.loads(changed.after) == {"orders": 5}
    removed = next(e for e in diff.examples if e.key == "c")
    assert removed.after is None and removed.before == "; ".join(sorted(json.dumps({EVENT: 1000, "orders": n})
                                                                         for n in (3, 4)))
    assert changed.line().startswith("state of key b changed: ")
    assert diff.text() == ("state: 4 keys compared: 1 the same, 1 changed, 1 added, 1 removed "
                           "(2 rows added, 3 removed)")


def test_a_renamed_field_changes_every_key_and_a_missing_column_reads_as_null():
    before = [row(k, total_cents=10 * i) for i, k in enumerate("abc")]
    after = [row(k, cents=10 * i) for i, k in enumerate("abc")]
    diff = diff_state(before, after, examples=1)
    assert (diff.changed, diff.same, len(diff.examples)) == (3, 0, 1)
    assert diff_state([row("a", x=None)], [row("a")]).empty  # null and absent are alike


def test_the_key_group_is_not_compared_and_bytes_show_as_text():
    assert diff_state([row("a", group=1, v=b"x")], [row("a", group=5, v=b"x")]).empty
    diff = diff_state([row("a", v=b"x")], [row("a", v=b"\xff\xfe")])
    assert (diff.examples[0].before, diff.examples[0].after) == ('{"v": "x"}', '{"v": "<2 bytes>"}')


def test_a_state_difference_alone_makes_the_checkpoint_not_the_same_and_sums_into_the_total():
    same_output = diff_checkpoint(1, [], [])
    same_output.state = diff_state([row("a", n=1)], [row("a", n=2)])
    other = diff_checkpoint(2, [], [])
    other.state = diff_state([row("b", n=1)], [row("b", n=1)])
    assert not same_output.empty and other.empty
    report = Comparison("p", "new.yaml", "now")
    for d in (same_output, other):
        report.checkpoints.append(d)
        report.total.add(d, examples=5)
    assert not report.same and exit_code(report) == 1
    assert isinstance(report.total.state, StateDiff) and (report.total.state.keys, report.total.state.changed) == (2, 1)
    assert report.to_json()["checkpoints"][0]["state"]["changed"] == 1
    lines = report.lines()
    assert "checkpoint 1: 0 records, the same; state: 1 keys compared: 0 the same, 1 changed, 0 added, 0 removed " \
           "(1 rows added, 1 removed)" in lines
    assert lines[0].endswith("the state changes")
    assert any(line.startswith("  state of key a changed: ") for line in lines)
    assert diff_checkpoint(3, [], []).to_json()["state"] is None  # a stateless checkpoint has none


def test_the_summary_for_xcom_keeps_the_figures_and_no_record_or_state_value():
    from lockstep.rules.output_diff import OutputRecord

    record = OutputRecord(("orders", 0, 1), "sink", b"secret-key", b'{"card": "secret-value"}')
    d = diff_checkpoint(1, [record], [OutputRecord(("orders", 0, 1), "sink", b"secret-key", b'{"card": "x"}')])
    d.state = diff_state([row("secret-key", card="secret-state")], [row("secret-key", card="other")])
    report = Comparison("p", "new.yaml", "now", [d])
    report.total.add(d, examples=5)
    summary = report.summary()
    assert "secret" not in json.dumps(summary) and "secret" in json.dumps(report.to_json())
    assert summary["total"]["changed"] == 1 and summary["total"]["state"]["changed"] == 1
    assert report.verdict() == "the output and the state change"
