"""Failpoint arming: what the driver hands to the JVM writer, and what it refuses."""
from __future__ import annotations

import pytest

from lockstep.model import failpoints


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


def test_a_task_fires_the_failpoints_its_driver_handed_it_without_the_variable(monkeypatch):
    """A Spark Connect server's Python workers do not see the driving process's environment: the
    writer failpoints reach them in the writer settings, armed where the job is driven."""
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "job.mid_produce=raise,commit.after_verify=crash")
    handed = failpoints.armed(prefix="job.")
    monkeypatch.delenv("LOCKSTEP_FAILPOINTS")  # the task's own environment
    with pytest.raises(failpoints.FailpointError, match="failpoint job.mid_produce raised at record 5"):
        failpoints.hit("job.mid_produce", " at record 5", armed_here=handed)
    failpoints.hit("job.after_flush", armed_here=handed)  # not armed
    failpoints.hit("job.after_flush", armed_here={})


def test_writer_settings_carry_the_armed_writer_failpoints_only(monkeypatch):
    from lockstep.spark import writer_settings
    from lockstep.spark.jvm_writer import jvm_settings

    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "job.after_flush=raise,commit.after_verify=crash")
    monkeypatch.setattr(writer_settings, "kafka_config", lambda conn_id, dialect: {"bootstrap.servers": "b:9092"})

    class Planned:
        sink_kafka_conn_id, sink_writer, id_prefix, timeout_ms = "kafka_default", "python", "tx", 60_000
        sink_topic, dead_letter_topic = "out", "dlq"

    settings = writer_settings.writer_settings(Planned(), 3, {}, pipeline="p")
    assert settings.failpoints == {"job.after_flush": "raise"}
    assert jvm_settings(settings)["failpoints"] == {"job.after_flush": "raise"}
