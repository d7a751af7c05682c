"""The protocol module's contract without a broker: transaction states print and serialise as the
wire values, and no other module reaches into the Kafka clients' internals."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lockstep.model.transactions import TransactionState
from lockstep.ops.open_transactions import OpenTransaction

ROOT = Path(__file__).resolve().parents[2]
WIRE = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
        "PrepareEpochFence", "Unknown"]


def test_the_states_are_the_wire_values():
    assert [s.value for s in TransactionState] == WIRE
    assert all(TransactionState(w) is s for w, s in zip(WIRE, TransactionState))


@pytest.mark.parametrize("state", list(TransactionState))
def test_a_state_prints_and_serialises_as_its_wire_value(state):
    assert state == state.value and str(state) == state.value
    assert f"{state}|{state:15}|%s" % state == f"{state.value}|{state.value:15}|{state.value}"
    assert json.dumps({"state": state}) == json.dumps({"state": state.value})


def test_the_console_json_is_unchanged():
    row = OpenTransaction("t-1-0", None, False, 1, 0, "prepared", "r", TransactionState.ONGOING, 5, 0, 10, 20, (), "commit")
    assert '"state": "Ongoing"' in json.dumps(row.to_json())


def test_a_state_a_newer_broker_reports_is_kept_as_it_came():
    state = TransactionState("PrepareSomething")
    assert isinstance(state, TransactionState) and state == "PrepareSomething" and f"{state}" == "PrepareSomething"
    assert json.dumps(state) == '"PrepareSomething"'


#: kafka-python itself, its connection manager, coordinator cache and raw transaction requests.
_INTERNALS = re.compile(r"^\s*(from kafka[ .]|import kafka\b)|\._manager\b|add_coordinator\(|EndTxnRequest|"
                        r"DescribeTransactionsRequest|FindCoordinatorRequest", re.M)


def test_only_the_protocol_module_touches_kafka_client_internals():
    found = []
    for path in sorted([*(ROOT / "include").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel != "include/lockstep/kafka/internals.py" and _INTERNALS.search(path.read_text()):
            found.append(rel)
    assert found == [], f"Kafka client internals outside lockstep.kafka.internals: {found}"
