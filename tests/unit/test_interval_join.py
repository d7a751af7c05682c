"""Stream-stream interval joins (`lockstep.tables.interval_join`) without Spark: the pairs one call per key writes, what
waits in the key's state, what the watermark lets go (an outer join's unmatched records written then, once), the
timers it asks for; and that cutting the input into checkpoints differently writes the same pairs. The spec's
``state.interval_join`` section too."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lockstep.errors import SpecError
from lockstep.spec import load_spec
from lockstep.state_function import Context
from lockstep.tables.interval_join import PROCESS, STATE_FIELDS, process

OPTIONS = {"left": "orders", "right": "payments", "after_ms": 900_000, "before_ms": 0, "how": "left"}
MIN = 60_000


def records(*rows: tuple[str, int, dict]) -> pd.DataFrame:
    """(topic, event time ms, value) each, as the function gets them (oldest first)."""
    return pd.DataFrame([{"topic": t, "partition": 0, "offset": i, "value": json.dumps(v).encode(),
                          "event_time_ms": at} for i, (t, at, v) in enumerate(rows)])


def call(recs: pd.DataFrame, state: dict | None, watermark: int | None, **options: object):
    ctx = Context("k1", watermark, [], [], {**OPTIONS, **options})
    out, new = process("k1", recs, state, ctx)
    return [o["value"] for o in out], new, ctx.timers


def test_a_payment_within_the_interval_after_its_order_is_paired_once_and_both_wait_for_the_watermark():
    out, state, timers = call(records(("orders", 0, {"o": 1}), ("payments", 10 * MIN, {"p": 1})), None, 0)
    assert out == [{"key": "k1", "left": {"o": 1}, "right": {"p": 1}, "left_time_ms": 0, "right_time_ms": 10 * MIN}]
    assert state is not None and len(json.loads(state["left"])) == len(json.loads(state["right"])) == 1
    assert timers == [15 * MIN + 1, 10 * MIN + 1]  # the order waits out its 15 minutes, the payment its 0
    # a second payment later in the interval meets the waiting order too
    out, state, _ = call(records(("payments", 14 * MIN, {"p": 2})), state, 10 * MIN)
    assert [o["right"] for o in out] == [{"p": 2}]


def test_a_payment_outside_the_interval_meets_nothing_and_the_unmatched_order_is_written_alone_once():
    out, state, _ = call(records(("orders", 0, {"o": 1}), ("payments", 16 * MIN, {"p": 1}),
                                 ("payments", -1, {"p": 0})), None, 0)
    assert out == []  # 16 minutes after: too late; 1 ms before the order: before: 0
    out, state, timers = call(records(), state, 15 * MIN + 1)  # the watermark passes the order's interval
    assert out == [{"key": "k1", "left": {"o": 1}, "right": None, "left_time_ms": 0, "right_time_ms": None}]
    assert state is not None and json.loads(state["left"]) == [] and timers == [16 * MIN + 1]
    out, state, timers = call(records(), state, 16 * MIN + 1)
    assert out == [] and state is None and timers == []  # unmatched payments are not written by a left join


@pytest.mark.parametrize(("how", "alone"), [("inner", []), ("left", ["left"]), ("right", ["right"]),
                                             ("full", ["left", "right"])])
def test_which_unmatched_records_an_outer_join_writes(how, alone):
    out, _, _ = call(records(("orders", 0, {"o": 1}), ("payments", 20 * MIN, {"p": 1})), None, 40 * MIN, how=how)
    assert sorted("left" if o["left"] else "right" for o in out) == alone


def test_before_lets_a_right_record_come_first():
    out, _, _ = call(records(("payments", 0, {"p": 1}), ("orders", MIN, {"o": 1})), None, None, before_ms=2 * MIN)
    assert [(o["left"], o["right"]) for o in out] == [({"o": 1}, {"p": 1})]


def test_cutting_the_input_into_checkpoints_differently_writes_the_same_pairs():
    rows = [("orders" if i % 3 else "payments", i * 4 * MIN, {"n": i}) for i in range(12)]

    def run(cuts: list[int]) -> list:
        state, written, start = None, [], 0
        for end in [*cuts, len(rows)]:
            batch = rows[start:end]
            watermark = max(at for _, at, _ in rows[:end]) - 20 * MIN  # out_of_orderness beyond every interval
            out, state, _ = call(records(*batch), state, watermark, how="full")
            written += out
            start = end
        out, state, _ = call(records(), state, 10**12, how="full")  # the end: everything expires
        return sorted(json.dumps(o, sort_keys=True) for o in written + out)

    once = run([])
    assert once == run([3, 7]) == run([1, 2, 5, 11]) and any('"left": null' in o for o in once)


def test_the_spec_section_runs_lockstep_s_own_function(tmp_path: Path):
    def spec(join: dict, topics: list[str]) -> Path:
        path = tmp_path / "pay.yaml"
        path.write_text(yaml.safe_dump({
            "name": "pay", "source": {"topics": topics}, "transform": "m:f",
            "sink": {"topic": "out", "dead_letter_topic": "dlq"}, "checkpoints": {"store": "s3://bucket/p"},
            "state": {"event_time": {"column": "t"}, "interval_join": join}}))
        return path

    s = load_spec(spec({"key": "order_id", "left": "orders", "right": "payments", "after": "15m"},
                       ["orders", "payments"]))
    assert s.state is not None and s.state.operator == "interval_join"
    f = s.state.function
    assert f is not None and (f.process, f.fields) == (PROCESS, STATE_FIELDS)
    assert dict(f.options) == {"left": "orders", "right": "payments", "after_ms": 900_000, "before_ms": 0,
                               "how": "inner"}
    with pytest.raises(SpecError) as refused:
        load_spec(spec({"key": "k", "left": "orders", "right": "orders", "how": "outer"}, ["orders", "refunds"]))
    assert [(p.field, p.reason) for p in refused.value.problems] == [
        ("state.interval_join.how", "'outer' is invalid: must be inner, left, right or full"),
        ("state.interval_join.right", "must be another topic than left"),
        ("source.topics", "refunds: neither side of state.interval_join; its records would meet nothing")]
