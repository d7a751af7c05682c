"""The Python side of ``state.function`` (lockstep.spark.state_worker), without Spark: the per-key
function ``applyInPandas`` calls and the migration ``mapInPandas`` calls, fed pandas DataFrames shaped
like the cogroup's inputs, with the functions of tests/support/state_functions.py."""
from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest

from lockstep.model.state_rows import FUNCTION_COLUMNS
from lockstep.spark.state_worker import (
    EVENT,
    FROM_OFFSET,
    FROM_PARTITION,
    FROM_TOPIC,
    GROUP,
    KEY,
    KIND,
    OUT_HEADERS,
    OUT_KEY,
    TIMERS,
    FunctionSettings,
    apply_function,
    encode_headers,
    migrate_rows,
    result_columns,
    state_columns,
)
from tests.support.state_functions import GAP_MS

FIELDS = (("count", "bigint"), ("last_at", "bigint"))
DATA = ("customer", "amount", "topic", "partition", "offset")
RECORD_COLUMNS = (*DATA, "event_time_ms")


def settings(process: str = "running_count", watermark_ms: int | None = None) -> FunctionSettings:
    return FunctionSettings(f"tests.support.state_functions:{process}", FIELDS, watermark_ms, RECORD_COLUMNS)


def records(key: str, *rows: tuple[float, str, int, int, int], group: int = 3) -> pd.DataFrame:
    """A key's records as the cogroup gives them: (amount, topic, partition, offset, event ms) each."""
    return pd.DataFrame({
        "customer": [key] * len(rows), "amount": [r[0] for r in rows], "topic": [r[1] for r in rows],
        "partition": pd.Series([r[2] for r in rows], dtype="int32"), "offset": [r[3] for r in rows],
        KEY: [key] * len(rows), EVENT: [r[4] for r in rows], GROUP: pd.Series([group] * len(rows), dtype="int32"),
    }, columns=[*DATA, KEY, EVENT, GROUP])


def no_records() -> pd.DataFrame:
    return records("unused")


def state(key: str, count: int, last_at: int, timers: list[int], origin: tuple[str, int, int] = ("in", 1, 40),
          group: int = 3) -> pd.DataFrame:
    """A key's state row as loaded from the state files (numpy dtypes, as Arrow gives them)."""
    return pd.DataFrame({KEY: [key], GROUP: pd.Series([group], dtype="int32"), EVENT: [last_at],
                         TIMERS: [json.dumps(timers)], FROM_TOPIC: [origin[0]],
                         FROM_PARTITION: pd.Series([origin[1]], dtype="int32"), FROM_OFFSET: [origin[2]],
                         "count": [count], "last_at": [last_at]})


def no_state() -> pd.DataFrame:
    return pd.DataFrame(columns=[n for n, _ in state_columns(FIELDS)])


def split(result: pd.DataFrame) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    assert list(result.columns) == [n for n, _ in result_columns(FIELDS)], "one schema for every call"
    rows = result.to_dict("records")
    return [r for r in rows if r[KIND] == "out"], [r for r in rows if r[KIND] == "state"]


def test_a_new_keys_records_give_output_rows_with_the_provenance_of_its_last_record_and_a_new_state():
    given = records("alice", (1.5, "in", 0, 9, 1_000), (2.5, "in", 1, 8, 5_000), (4.0, "in", 0, 10, 3_000))
    out, new = split(apply_function(settings())(("alice",), given, no_state()))
    # the function sees the records oldest event first
    assert [r["value"] for r in out] == [b"alice:1:1.5", b"alice:2:4.0", b"alice:3:2.5"]
    assert {r[OUT_KEY] for r in out} == {b"alice"}, "the state key is the output key by default"
    assert {(r["topic"], r["partition"], r["offset"]) for r in out} == {("in", 1, 8)}, \
        "provenance: the key's last record by event time, not by offset"
    [row] = new
    assert (row[KEY], row[GROUP], row[EVENT]) == ("alice", 3, 5_000)
    assert (row[FROM_TOPIC], row[FROM_PARTITION], row[FROM_OFFSET]) == ("in", 1, 8)
    assert (row["count"], row["last_at"]) == (3, 5_000), "the declared fields as the function returned them"
    assert json.loads(row[TIMERS]) == [5_000 + GAP_MS]
    assert row["value"] is None and row[OUT_KEY] is None


def test_a_keys_state_is_given_to_the_function_as_plain_values():
    out, new = split(apply_function(settings())(("bob",), records("bob", (7.0, "in", 1, 50, 9_000)),
                                                state("bob", 41, 8_000, [8_000 + GAP_MS])))
    assert [r["value"] for r in out] == [b"bob:42:7.0"]
    [row] = new
    assert (row["count"], row["last_at"]) == (42, 9_000)
    assert json.loads(row[TIMERS]) == [9_000 + GAP_MS], "the function moved its timer"
    assert type(row["count"]) is int


def test_a_key_without_records_or_a_due_timer_keeps_its_state_unchanged():
    before = state("carol", 5, 2_000, [2_000 + GAP_MS], origin=("in", 0, 17), group=11)
    out, new = split(apply_function(settings(watermark_ms=2_000 + GAP_MS - 1))(("carol",), no_records(), before))
    assert out == []
    [row] = new
    assert {n: row[n] for n, _ in state_columns(FIELDS)} == before.iloc[0].to_dict()


def test_a_due_timer_fires_and_a_deleted_key_leaves_no_state_row():
    before = state("dave", 5, 2_000, [2_000 + GAP_MS], origin=("in", 0, 17))
    out, new = split(apply_function(settings(watermark_ms=2_000 + GAP_MS))(("dave",), no_records(), before))
    assert new == [], "the function returned None: the key is deleted"
    [row] = out
    assert json.loads(row["value"]) == {"closed": "dave", "count": 5, "fired": [2_000 + GAP_MS]}
    assert row[OUT_KEY] == b"closed-dave"
    assert (row["topic"], row["partition"], row["offset"]) == ("in", 0, 17), "provenance: the state's last record"


def test_no_timer_fires_before_the_first_watermark():
    before = state("erin", 1, 0, [5])
    out, new = split(apply_function(settings(watermark_ms=None))(("erin",), no_records(), before))
    assert out == [] and len(new) == 1


def test_an_undeclared_state_field_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"state fields \['surprise'\] are not declared"):
        apply_function(settings("undeclared"))(("frank",), records("frank", (1.0, "in", 0, 1, 1)), no_state())


def test_migrate_rows_maps_old_state_through_the_migration_and_drops_what_it_deletes():
    old = pd.concat([state("gina", 0, 0, []), state("hugo", 3, 4_000, [14_000], origin=("in", 1, 99))],
                    ignore_index=True).rename(columns={"count": "n"}).drop(columns=["last_at"])
    migration = FunctionSettings("tests.support.state_functions:running_count", FIELDS, None, (),
                                 "tests.support.state_functions:from_v1", 1)
    [batch] = list(migrate_rows(migration, ("n",))(iter([old])))
    assert list(batch.columns) == [n for n, _ in state_columns(FIELDS)]
    [row] = batch.to_dict("records")
    assert {c: row[c] for c, _ in FUNCTION_COLUMNS} == old.iloc[1][[c for c, _ in FUNCTION_COLUMNS]].to_dict(), \
        "Lockstep's own columns pass through unchanged"
    assert (row["count"], row["last_at"]) == (3, None)


def test_a_state_function_that_raised_fails_the_run_for_good_and_a_lost_executor_does_not() -> None:
    from lockstep.spark.job import job_outcome

    raised = Exception("org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
                       '  File "worker.py", line 3, in per_key\n'
                       "RuntimeError: state function lockstep_examples.sessions:process failed for key 'c1': "
                       "ZeroDivisionError('division by zero')\n")
    cause, terminal = job_outcome(raised)
    assert terminal and cause.startswith("RuntimeError: state function lockstep_examples.sessions:process failed")
    wrong = Exception("Traceback (most recent call last):\n  x\nValueError: state function m.n:f, key 'k': state "
                      "fields ['x'] are not declared in state.function.state (['y'])\n")
    assert job_outcome(wrong)[1]
    lost = Exception("Job aborted due to stage failure: most recent failure: Lost task 0.3 in stage 2.0: "
                     "ExecutorLostFailure (executor 1 exited caused by one of the running tasks)")
    assert not job_outcome(lost)[1]


def decoded(text: str | None) -> list[tuple[str, bytes | None]] | None:
    """`OUT_HEADERS` as the Spark side reads it back (from_json, unbase64)."""
    import base64

    if text is None:
        return None
    return [(h["key"], None if h["value"] is None else base64.b64decode(h["value"])) for h in json.loads(text)]


def test_an_output_rows_headers_travel_with_it_in_order_and_rows_without_have_none():
    out, new = split(apply_function(settings("with_headers"))(
        ("ivy",), records("ivy", (1.0, "in", 0, 7, 1_000), (2.0, "in", 1, 3, 2_000)), no_state()))
    assert [decoded(r[OUT_HEADERS]) for r in out] == [
        [("offset", b"7")], [("offset", b"3")], [("tag", b"a"), ("tag", b"\xff\x00"), ("empty", None)]], \
        "each row its own headers: a dict, or pairs (a name may repeat, bytes pass as they are, None has no value)"
    assert not new
    plain, state_rows = split(apply_function(settings())(("jo",), records("jo", (1.0, "in", 0, 1, 1_000)), no_state()))
    assert [r[OUT_HEADERS] for r in plain] == [None] and [r[OUT_HEADERS] for r in state_rows] == [None]


@pytest.mark.parametrize("headers,message", [
    ({"n": 1}, "header 'n'.s value must be str, bytes or None, got int"),
    ("a=b", "must be a dict of name -> value or a list of .name, value. pairs, got str"),
    ([("a", "b", "c")], r"header 0 must be a \(name, value\) pair with a str name"),
    ([(1, "b")], r"header 0 must be a \(name, value\) pair with a str name"),
])
def test_headers_the_writers_cannot_write_are_refused_naming_the_row(headers, message):
    with pytest.raises(TypeError, match=message):
        encode_headers(headers, "row 3's headers")
    assert encode_headers({}, "row") is None and encode_headers([], "row") is None, "no headers: none written"


def test_a_function_returning_bad_headers_fails_naming_the_function_key_and_row():
    with pytest.raises(TypeError, match=r"state function tests.support.state_functions:bad_headers, key 'kim': "
                                        r"output row 0's headers: header 'n'"):
        apply_function(settings("bad_headers"))(("kim",), records("kim", (1.0, "in", 0, 1, 1_000)), no_state())
