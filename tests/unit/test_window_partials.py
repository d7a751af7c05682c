"""Which window aggregates the state keeps as partials (`lockstep.rules.window_partials`), and the spec's
``keep_rows``: read from the SQL text, conservatively."""
from __future__ import annotations

import pytest

from lockstep.rules.window_partials import Partial, kept_partials, partial, partials
from lockstep.spec import parse_spec


@pytest.mark.parametrize("expr,expected", [
    ("count(*)", ("count", "*")),
    ("COUNT( * )", ("count", "*")),
    ("count(amount)", ("count", "amount")),
    ("sum(CAST(round(amount * 100) AS BIGINT))", ("sum", "CAST(round(amount * 100) AS BIGINT)")),
    ("  Sum (amount)  ", ("sum", "amount")),
    ("min(created_at)", ("min", "created_at")),
    ("max(coalesce(a, b))", ("max", "coalesce(a, b)")),
])
def test_a_count_sum_min_or_max_of_one_argument_merges(expr: str, expected: tuple[str, str]) -> None:
    found = partial("n", expr)
    assert found is not None and (found.function, found.argument) == expected
    assert found.merged_by == ("sum" if found.function in ("count", "sum") else found.function)


@pytest.mark.parametrize("expr", [
    "avg(amount)",                      # not one of the four
    "sum(a) + sum(b)",                  # the call's parenthesis closes before the end
    "sum(a) / count(*)",
    "count(DISTINCT customer)",         # a distinct count does not merge
    "sum(ALL amount)",
    "count(a, b)",                      # a second argument
    "sum(amount) FILTER (WHERE amount > 0)",
    "sum(CASE WHEN note = ')' THEN 1 END)",  # quoted text: not read
    "min(*)",
    "sum()",
    "max_by(a, b)",
    "percentile(amount, 0.5)",
])
def test_anything_else_keeps_the_rows(expr: str) -> None:
    assert partial("n", expr) is None


def test_the_state_keeps_partials_only_when_every_aggregate_merges() -> None:
    assert partials([("n", "count(*)"), ("total", "sum(x)")]) == (Partial("n", "count", "*"),
                                                                  Partial("total", "sum", "x"))
    assert partials([("n", "count(*)"), ("mean", "avg(x)")]) is None
    assert partials([]) is None


def _window(**extra: object) -> dict:
    return {"name": "p", "source": {"topics": ["in"]}, "transform": "lockstep_examples.orders:parse",
            "sink": {"topic": "out", "dead_letter_topic": "dlq"}, "checkpoints": {"store": "s3://lockstep/checkpoints"},
            "state": {"key_groups": 4, "event_time": {"column": "t"},
                      "window": {"key": "k", "size": "1m", "aggregates": {"n": "count(*)"}, **extra}}}


def test_keep_rows_makes_the_state_keep_the_windows_rows() -> None:
    assert kept_partials(parse_spec(_window(), "p.yaml").state.window) == (Partial("n", "count", "*"),)
    kept = parse_spec(_window(keep_rows=True), "p.yaml").state.window
    assert kept.keep_rows and kept_partials(kept) is None


def test_keep_rows_must_be_a_boolean() -> None:
    from lockstep.errors import SpecError

    with pytest.raises(SpecError, match="state.window.keep_rows"):
        parse_spec(_window(keep_rows="yes"), "p.yaml")


def test_a_partials_column_changes_with_its_aggregate_not_with_its_spelling() -> None:
    one, other, spelled = partial("n", "count(*)"), partial("n", "count(x)"), partial("n", "COUNT(*)")
    assert one is not None and other is not None and spelled is not None
    assert one.column.startswith("__ls_agg_n_") and one.column != other.column
    assert one.column == spelled.column


def test_a_partials_column_names_its_aggregate_and_the_state_shows_it_so() -> None:
    import pyarrow as pa

    from lockstep.model.state_rows import EVENT, FROM_OFFSET, GROUP, KEY, WINDOW_START
    from lockstep.ops.state_report import user_rows
    from lockstep.rules.window_partials import aggregate_of

    column = Partial("amount_cents", "sum", "amount").column
    assert aggregate_of(column) == "amount_cents" and aggregate_of("customer") is None
    table = pa.table({KEY: ["c1"], EVENT: [61_000], GROUP: [3], WINDOW_START: [60_000], FROM_OFFSET: [41],
                      column: [1250]})
    assert user_rows(table) == [{"key": "c1", "event_time": "1970-01-01T00:01:01.000Z", "key_group": 3,
                                 "window_start": "1970-01-01T00:01:00.000Z", "latest_offset": 41,
                                 "amount_cents": 1250}]


def test_verify_compares_a_windows_floating_aggregates_to_nine_digits() -> None:
    """A floating sum of partial sums adds in another order than verify's one batch: the last digits may differ,
    a real difference may not hide."""
    from lockstep.ops.verify_state import _same

    run, recomputed = {"customer": "c1", "total": 0.1 + 0.2, "orders": 2}, {"customer": "c1", "total": 0.3, "orders": 2}
    assert run["total"] != recomputed["total"] and _same(run) == _same(recomputed)
    assert _same({"total": 0.3001}) != _same({"total": 0.3})
