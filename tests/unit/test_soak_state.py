"""The stateful soak's pure parts: its input, the state rows its input implies, the figures it
takes from `lockstep verify` and the state manifest, and their verdict."""
from __future__ import annotations

import json

from lockstep_soak.audit import StateFigures, expected_state_rows, state_figures, window_end_ms
from lockstep_soak.driver import CUSTOMERS, EVENTS_PER_SECOND, LATE_BY_S, T0, WINDOW_S, timed_order
from lockstep_soak.schedule import BadCase

S = 10_000  # a window of 10 s: the figures take the size as given, whatever the soak's


def verified(**changes) -> dict:
    doc = {"ok": True, "stateful": True, "expected_outputs": 40, "actual_outputs": 40, "lost": 0, "duplicated": 0,
           "unexpected": 0, "wrong": 0, "late": 3, "complete": True, "unchecked": [], "lost_sample": [],
           "duplicated_sample": [], "unexpected_sample": [], "wrong_sample": []}
    return {**doc, **changes}


def test_a_window_ends_at_the_next_multiple_of_its_size():
    assert window_end_ms(0, S) == S
    assert window_end_ms(S - 1, S) == S
    assert window_end_ms(S, S) == 2 * S  # an event at a window's end belongs to the next one


def test_the_state_holds_the_orders_whose_window_the_watermark_has_not_passed():
    events = [1_000, 9_999, 10_000, 19_000, 20_000, 25_000, None]
    assert expected_state_rows(events, S, None) == 6  # no watermark yet: nothing fired; None never counts
    assert expected_state_rows(events, S, 9_999) == 6
    assert expected_state_rows(events, S, 10_000) == 4  # [0, 10 s) fired at 10 s exactly
    assert expected_state_rows(events, S, 20_000) == 2
    assert expected_state_rows(events, S, 29_999) == 2
    assert expected_state_rows(events, S, 30_000) == 0
    assert expected_state_rows(events, S, 20_000, allowed_lateness_ms=1) == 4  # lateness keeps windows open


def test_figures_equal_when_the_manifest_holds_exactly_the_open_windows_rows():
    events = [i * 500 for i in range(100)]  # 0 .. 49.5 s
    manifest = {"checkpoint": 7, "watermark_ms": 40_000, "rows": 20, "keys": 5}
    f = state_figures(verified(), manifest, events, S)
    assert (f.state_rows, f.state_rows_expected, f.state_equal, f.ok) == (20, 20, True, True)
    assert (f.windows_expected, f.windows_found, f.late, f.checkpoint) == (40, 40, 3, 7)
    assert f.to_json()["state_equal"] is True and f.to_json()["ok"] is True


def test_a_state_row_too_many_or_too_few_fails_the_soak():
    events = [i * 500 for i in range(100)]
    for rows in (19, 21):
        f = state_figures(verified(), {"checkpoint": 7, "watermark_ms": 40_000, "rows": rows, "keys": 5}, events, S)
        assert not f.state_equal and not f.ok


def test_every_window_finding_fails_the_soak():
    manifest = {"checkpoint": 1, "watermark_ms": 0, "rows": 0, "keys": 0}
    for finding in ({"lost": 1, "lost_sample": ["c1@x"]}, {"duplicated": 1}, {"unexpected": 2}, {"wrong": 1},
                    {"complete": False, "unchecked": ["no checkpoint has completed yet"]}):
        f = state_figures(verified(**finding), manifest, [], S)
        assert not f.ok, finding
    assert state_figures(verified(lost=1, lost_sample=["c1@x"]), manifest, [], S).samples == {"lost": ["c1@x"]}
    assert not state_figures(verified(), manifest, [], S, late_unplanned=1).ok  # in-order input judged late


def test_without_a_manifest_or_with_an_error_the_soak_fails():
    f = state_figures(verified(), None, [1_000], S)
    assert f.error and not f.ok and not f.state_equal
    assert not StateFigures(complete=True, state_rows=0, state_rows_expected=0, error="verify exited 1").ok


def test_the_stateful_input_moves_event_time_on_and_its_bad_cases_are_what_the_transform_rejects():
    value, rec = timed_order(10, None)
    doc = json.loads(value)
    assert doc["created_at"] == T0 + 10 // EVENTS_PER_SECOND and rec.event_ms == doc["created_at"] * 1000
    assert doc["customer"] == f"c{10 % CUSTOMERS}" and rec.case == "valid" and rec.order_id == "o10"
    assert json.loads(timed_order(11, None)[0])["created_at"] >= doc["created_at"]
    late, rec = timed_order(12, BadCase.LATE)
    assert json.loads(late)["created_at"] <= T0 - LATE_BY_S + WINDOW_S and rec.case == "late" and rec.event_ms
    assert timed_order(13, BadCase.NULL_VALUE)[0] is None
    assert timed_order(14, BadCase.NOT_UTF8)[1].event_ms is None
    assert json.loads(timed_order(15, BadCase.POISON)[0])["amount"] == "twelve"


class _Msg:
    def __init__(self, partition: int, offset: int, error: str | None):
        from lockstep.model.output_contract import ERROR_HEADER, SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC

        self._headers = [(SOURCE_TOPIC, b"in"), (SOURCE_PARTITION, str(partition).encode()),
                         (SOURCE_OFFSET, str(offset).encode())] + ([(ERROR_HEADER, error.encode())] if error else [])

    def headers(self):
        return self._headers

    def partition(self):
        return 0

    def offset(self):
        return 0


def test_dead_letters_are_audited_per_order_and_late_ones_only_for_orders_produced_late(monkeypatch):
    from lockstep_soak import audit
    from lockstep_soak.audit import VALID, Produced, audit_dead_letters

    produced = {(0, 0): Produced(VALID, "o0", 1), (0, 1): Produced("poison", "o1", 1),
                (0, 2): Produced("late", "o2", 1), (0, 3): Produced("late", "o3", 1),
                (0, 4): Produced("null_value", None, 0), (0, 5): Produced(VALID, "o5", 1)}
    dead = [_Msg(0, 1, "amount missing or not a number"), _Msg(0, 2, "late"), _Msg(0, 5, "late")]
    monkeypatch.setattr(audit, "committed_offsets", lambda *a: {0: 6})
    monkeypatch.setattr(audit, "read_committed", lambda *a: [("dlq", m) for m in dead] + [("out", object())])
    result, late_unplanned = audit_dead_letters({}, "in", "out", "dlq", "g", produced)
    # o3 (late, counted in its window) is fine; null_value never dead-lettered is lost; o5 is in-order but late
    assert result.lost == [(0, 4)] and result.duplicated == [] and result.unexpected == []
    assert late_unplanned == 1 and result.outputs == 4 and result.cases["late"].dead_lettered == 1
    dead.append(_Msg(0, 0, "customer missing"))
    dead.append(_Msg(0, 1, "amount missing or not a number"))
    result, _ = audit_dead_letters({}, "in", "out", "dlq", "g", produced)
    assert result.duplicated == [(0, 1)] and len(result.unexpected) == 1 and "a valid order 0@0" in result.unexpected[0]
