"""Records that raise a Spark data error (`lockstep.spark.raised`, ``sink.on_error``): Spark's error read from its
message, what raised named, and the bisection that finds exactly the records that raise, with a fake probe in
place of Spark's jobs (the real ones: tests/integration/test_routes.py, test_sql.py)."""
from __future__ import annotations

import pytest

from lockstep.errors import SpecError, TerminalError
from lockstep.model.offsets import OffsetRange
from lockstep.spark.raised import (
    MAX_RECORDS,
    DataError,
    Unisolated,
    data_error,
    halves,
    isolate,
    strict_failure,
    where_raised,
)
from tests.support.fake_pipeline import spec

CONDITION = "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS INT) > 100"
#: What Spark Connect raises for the issue's condition (Spark 4.0, ANSI mode), its stack trace cut.
CAST_ERROR = (
    "[CAST_INVALID_INPUT] The value 'abc' of the type \"STRING\" cannot be cast to \"INT\" because it is malformed. "
    "Correct the value as per the syntax, or change its target type. Use `try_cast` to tolerate malformed input and "
    "return NULL instead. SQLSTATE: 22018\n== SQL (line 1, position 1) ==\n"
    "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS INT) > 100\n^^^^^^^^^^^^^^^^^^^^^^^^^^\n\n"
    "JVM stacktrace:\norg.apache.spark.SparkNumberFormatException: ...")


def test_a_data_error_is_read_from_sparks_message_or_its_cause_and_nothing_else_is() -> None:
    error = data_error(RuntimeError(CAST_ERROR))
    assert error is not None and error.error_class == "CAST_INVALID_INPUT"
    assert error.message.startswith("The value 'abc' of the type \"STRING\" cannot be cast to \"INT\"")
    assert error.message.endswith("SQLSTATE: 22018") and "\n" not in error.message
    assert error.fragment == CONDITION
    wrapped = RuntimeError("Job aborted due to stage failure")
    wrapped.__cause__ = RuntimeError("[DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012")
    assert data_error(wrapped) == DataError("DIVIDE_BY_ZERO", "Division by zero. SQLSTATE: 22012", None)
    # not a data error: an analysis error (42xxx), a lost executor
    assert data_error(RuntimeError("[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column ... SQLSTATE: 42703")) is None
    assert data_error(RuntimeError("Lost executor 1: heartbeat timed out")) is None


def test_what_raised_is_the_route_whose_condition_holds_sparks_fragment_else_the_query_or_the_transform() -> None:
    import dataclasses

    routed = spec(sink={"routes": {"orders-big": CONDITION.replace(" > ", "  >  "), "orders-eu": "data.eu"}})
    routed = dataclasses.replace(routed, transform_sql="SELECT * FROM input")
    error = data_error(RuntimeError(CAST_ERROR))
    assert error is not None
    condition = CONDITION.replace(" > ", "  >  ")  # spacing apart, the fragment is the condition's
    assert where_raised(routed, error) == f"sink.routes.orders-big (the condition {condition!r})"
    assert where_raised(routed, DataError("DIVIDE_BY_ZERO", "m", "amount / 0")) == "transform.sql (the query)"
    assert where_raised(spec(), DataError("DIVIDE_BY_ZERO", "m", None)) == "transform lockstep_examples.orders:enrich"
    strict = strict_failure(routed, error)
    assert isinstance(strict, TerminalError)
    assert "orders.yaml: sink.routes.orders-big (the condition" in str(strict) and "try_cast" in str(strict)
    assert "sink.on_error: dead_letter" in str(strict)


def test_sink_on_error_is_dead_letter_by_default_or_fail() -> None:
    assert spec().sink.on_error == "dead_letter"
    assert spec(sink={"on_error": "fail"}).sink.on_error == "fail"
    with pytest.raises(SpecError, match="sink.on_error: must be one of dead_letter, fail, got 'skip'"):
        spec(sink={"on_error": "skip"})


def test_halves_cut_the_ranges_by_count_in_order() -> None:
    ranges = (OffsetRange("t", 0, 10, 13), OffsetRange("t", 1, 0, 0), OffsetRange("t", 2, 5, 10))
    left, right = halves(ranges)
    assert left == (OffsetRange("t", 0, 10, 13), OffsetRange("t", 2, 5, 6))
    assert right == (OffsetRange("t", 2, 6, 10),)
    assert halves((OffsetRange("t", 0, 7, 9),)) == ((OffsetRange("t", 0, 7, 8),), (OffsetRange("t", 0, 8, 9),))


def probe_of(bad: set[tuple[int, int]], calls: list[tuple[OffsetRange, ...]]):
    """A probe that raises for the records ``bad`` ((partition, offset)), as Spark would for those rows."""
    def probe(part: tuple[OffsetRange, ...]) -> DataError | None:
        calls.append(part)
        hit = sorted((r.partition, o) for r in part for o in range(r.start, r.end) if (r.partition, o) in bad)
        return DataError("CAST_INVALID_INPUT", f"at {hit[0]}", None) if hit else None
    return probe


@pytest.mark.parametrize("bad", [{(0, 2)}, {(0, 0), (1, 17)}, {(1, o) for o in range(3, 12)}])
def test_isolate_finds_exactly_the_records_that_raise_the_same_way_every_time(bad) -> None:
    ranges = (OffsetRange("t", 0, 0, 6), OffsetRange("t", 1, 3, 20))
    first = DataError("CAST_INVALID_INPUT", "whole", None)
    runs = []
    for _ in range(2):
        calls: list[tuple[OffsetRange, ...]] = []
        found = isolate(probe_of(bad, calls), ranges, first, 7, spec())
        runs.append((found, calls))
        assert {(p, o) for _, p, o in found} == bad
        assert all(why.startswith("transform lockstep_examples.orders:enrich raised [CAST_INVALID_INPUT] at ")
                   for why in found.values())
        assert list(found) == sorted(found), "in offset order"
    assert runs[0] == runs[1], "a function of the ranges: the same probes, the same records"


def test_one_record_is_what_raised_and_too_many_or_none_alone_fail_for_good() -> None:
    first = DataError("CAST_INVALID_INPUT", "whole", None)
    calls: list[tuple[OffsetRange, ...]] = []
    assert list(isolate(probe_of(set(), calls), (OffsetRange("t", 0, 4, 5),), first, 1, spec())) == [("t", 0, 4)]
    assert calls == []
    with pytest.raises(Unisolated, match="no record raises it alone"):
        isolate(probe_of(set(), []), (OffsetRange("t", 0, 0, 50),), first, 1, spec())
    many = {(0, o) for o in range(0, 200, 2)}
    with pytest.raises(Unisolated, match=f"at most {MAX_RECORDS}"):
        isolate(probe_of(many, []), (OffsetRange("t", 0, 0, 200),), first, 1, spec())
