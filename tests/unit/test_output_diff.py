"""`lockstep replay --compare`'s decisions without services: records matched by provenance, the fields a
changed record differs in, dead letters gained and lost, and the committed records a checkpoint owns."""
from __future__ import annotations

import json

from lockstep.kafka.reader import CommittedRecord
from lockstep.model.output_contract import (
    CHECKPOINT_HEADER,
    ERROR_HEADER,
    PIPELINE_HEADER,
    REPLAY_HEADER,
    ROUTE_COLUMN,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)
from lockstep.ops.compare import Comparison, committed_records, exit_code, output_records
from lockstep.rules.output_diff import DEAD_LETTERS, SINK, OutputRecord, diff_checkpoint
from lockstep.spec import PipelineSpec


def rec(offset: int, value: object, role: str = SINK, key: bytes | None = None, error: str | None = None,
        headers: tuple = ()) -> OutputRecord:
    body = json.dumps(value).encode() if isinstance(value, dict) else value
    return OutputRecord(("orders", 0, offset), role, key, body, headers, error)


def test_the_same_records_in_another_order_are_the_same_output():
    before = [rec(1, {"a": 1}), rec(2, {"a": 2}), rec(2, {"a": 3})]
    diff = diff_checkpoint(7, before, list(reversed(before)))
    assert diff.empty and diff.same == 3 and (diff.before, diff.after) == (3, 3)
    assert diff.line() == "checkpoint 7: 3 records, the same"


def test_a_changed_json_value_names_its_fields_and_keeps_an_example():
    diff = diff_checkpoint(3, [rec(1, {"a": 1, "b": 2}), rec(2, {"a": 1})],
                           [rec(1, {"a": 1, "b": 5, "c": 0}), rec(2, {"a": 1})])
    assert (diff.same, diff.changed, diff.added, diff.removed) == (1, 1, 0, 0)
    assert dict(diff.fields) == {"value.b": 1, "value.c": 1}
    [example] = diff.examples
    assert example.kind == "changed" and example.source == ("orders", 0, 1)
    assert example.before == '[sink] value={"a": 1, "b": 2}' and example.after == '[sink] value={"a": 1, "b": 5, "c": 0}'


def test_a_dead_letter_that_becomes_a_sink_record_is_a_dead_letter_lost():
    diff = diff_checkpoint(1, [rec(4, b"not json 4", DEAD_LETTERS, error="not a JSON order")],
                           [rec(4, {"raw": "not json 4"})])
    assert diff.changed == 1 and diff.dead_letters_lost == 1 and diff.dead_letters_gained == 0
    assert dict(diff.fields) == {"role": 1, "value": 1, "error": 1}


def test_records_a_new_filter_drops_are_removed_and_those_it_lets_through_are_added():
    diff = diff_checkpoint(2, [rec(1, {"a": 1}), rec(2, {"a": 2})], [rec(2, {"a": 2}), rec(3, {"a": 3})], examples=1)
    assert (diff.same, diff.removed, diff.added, diff.changed) == (1, 1, 1, 0)
    assert len(diff.examples) == 1 and diff.examples[0].kind == "removed"
    assert diff.line() == "checkpoint 2: 2 records before, 2 after: 1 the same, 0 changed, 1 added, 1 removed"


def test_records_of_one_input_pair_by_role_and_key_first():
    """A transform that writes two records per input (here to two routes): each pairs with its own."""
    before = [rec(1, b"x", "big", key=b"k1"), rec(1, b"y", SINK, key=b"k2")]
    after = [rec(1, b"y2", SINK, key=b"k2"), rec(1, b"x", "big", key=b"k1")]
    diff = diff_checkpoint(1, before, after)
    assert (diff.same, diff.changed) == (1, 1) and dict(diff.fields) == {"value": 1}
    # a header added by the new code, a key changed
    diff = diff_checkpoint(1, [rec(1, b"x", key=b"a")], [rec(1, b"x", key=b"b", headers=(("h", b"1"),))])
    assert dict(diff.fields) == {"key": 1, "headers": 1}


def test_the_total_sums_the_checkpoints_and_keeps_few_examples():
    report = Comparison("p", "new.yaml", "now")
    for cid in (1, 2):
        d = diff_checkpoint(cid, [rec(cid, {"a": 1})], [rec(cid, {"a": 2})], examples=5)
        report.checkpoints.append(d)
        report.total.add(d, examples=1)
    assert (report.total.changed, report.total.before, len(report.total.examples)) == (2, 2, 1)
    assert not report.same and exit_code(report) == 1
    assert report.to_json()["total"]["fields"] == {"value.a": 2}
    assert report.lines()[0] == "p: 2 completed checkpoints (1-2) computed again through new.yaml: the output changes"


def test_the_same_output_exits_0_unless_some_checkpoint_could_not_be_compared():
    report = Comparison("p", "p.yaml", "now", [diff_checkpoint(1, [rec(1, b"v")], [rec(1, b"v")])])
    assert report.same and exit_code(report) == 0
    report.not_compared[2] = "its input was deleted by retention"
    assert exit_code(report) == 2
    assert exit_code(Comparison("p", "p.yaml", "now")) == 2  # nothing compared is not "the same"


def spec(tmp_path) -> PipelineSpec:
    from lockstep.spec import load_spec

    path = tmp_path / "p.yaml"
    path.write_text(json.dumps({
        "name": "p", "source": {"topics": ["orders"]}, "transform": "lockstep_examples.orders:enrich",
        "sink": {"topic": "out", "dead_letter_topic": "dlq", "routes": {"big": "data.amount > 100"}},
        "checkpoints": {"store": "s3://bucket/p"}, "transactions": {"id_prefix": "p"}}))
    return load_spec(path)


def committed(topic: str, offset: int, checkpoint: int, pipeline: str = "p", extra: tuple = (),
              value: bytes = b"v") -> CommittedRecord:
    headers = [(SOURCE_TOPIC, b"orders"), (SOURCE_PARTITION, b"0"), (SOURCE_OFFSET, str(offset).encode()),
               (CHECKPOINT_HEADER, str(checkpoint).encode()), (PIPELINE_HEADER, pipeline.encode()), *extra]
    return CommittedRecord(topic, 0, offset, None, value, headers, 0)


def test_a_checkpoint_owns_the_records_its_headers_name_in_each_role(tmp_path):
    s = spec(tmp_path)
    records = [
        committed("out", 1, 4, extra=(("user", b"u"),)),
        committed("big", 2, 4),
        committed("dlq", 3, 4, extra=((ERROR_HEADER, b"bad"),)),
        committed("out", 4, 5),  # another checkpoint, not compared
        committed("out", 5, 4, pipeline="other"),  # another pipeline's
        committed("out", 6, 4, pipeline="p-replay", extra=((REPLAY_HEADER, b"9"),)),  # a dead-letter replay's
    ]
    found = committed_records(s, records, {4})
    assert found == {4: [OutputRecord(("orders", 0, 1), SINK, None, b"v", (("user", b"u"),)),
                         OutputRecord(("orders", 0, 2), "big", None, b"v"),
                         OutputRecord(("orders", 0, 3), DEAD_LETTERS, None, b"v", (), "bad")]}


def test_the_computed_rows_become_the_records_a_write_produces():
    rows = [{"topic": "orders", "partition": 0, "offset": 1, "value": "text", "key": None, "error": None,
             ROUTE_COLUMN: None, "headers": [{"key": "h", "value": bytearray(b"1")}]},
            {"topic": "orders", "partition": 0, "offset": 2, "value": b"x", "error": None, ROUTE_COLUMN: "big"},
            {"topic": "orders", "partition": 0, "offset": 3, "value": b"raw", "error": "bad", ROUTE_COLUMN: "big"}]
    assert output_records(rows) == [OutputRecord(("orders", 0, 1), SINK, None, b"text", (("h", b"1"),)),
                                    OutputRecord(("orders", 0, 2), "big", None, b"x"),
                                    OutputRecord(("orders", 0, 3), DEAD_LETTERS, None, b"raw", (), "bad")]
