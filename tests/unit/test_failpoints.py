"""Failpoint arming: what the driver hands to the JVM writer, and what it refuses."""
from __future__ import annotations

import pytest

from lockstep import failpoints


def test_armed_is_empty_without_the_variable(monkeypatch):
    monkeypatch.delenv("LOCKSTEP_FAILPOINTS", raising=False)
    assert failpoints.armed() == {}
    failpoints.hit("job.after_flush")  # a no-op


def test_armed_filters_by_prefix(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "job.after_flush=crash, commit.between_commits=raise")
    assert failpoints.armed(prefix="job.") == {"job.after_flush": "crash"}
    assert failpoints.armed() == {"job.after_flush": "crash", "commit.between_commits": "raise"}


def test_raise_mode_raises_with_the_name(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "plan.after_claim=raise")
    with pytest.raises(failpoints.FailpointError, match="failpoint plan.after_claim raised"):
        failpoints.hit("plan.after_claim")
    failpoints.hit("plan.after_recovery")  # not armed


@pytest.mark.parametrize("value, message", [("no.such=crash", "unknown failpoint 'no.such'"),
                                            ("job.after_flush=explode", "needs =crash or =raise")])
def test_bad_arming_is_refused_with_the_reason(monkeypatch, value, message):
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", value)
    with pytest.raises(ValueError, match=message):
        failpoints.armed()
