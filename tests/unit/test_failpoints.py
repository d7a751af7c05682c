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


@pytest.mark.parametrize("value, message", [
    ("no.such=crash", "unknown failpoint 'no.such'"),
    ("job.mid_produce=bogus", "failpoint job.mid_produce has no action 'bogus'; the actions are crash, raise, "
                              "raise-first-attempt"),
    ("job.after_flush", "failpoint job.after_flush has no action ''"),
    ("commit.after_verify=raise-first-attempt", r"commit.after_verify=raise-first-attempt: only a Spark task's "
                                                r"failpoints know their attempt \(job.before_produce, job.mid_produce, "
                                                r"job.after_flush\); commit.after_verify takes crash or raise"),
    ("job.before_prepared=raise-first-attempt", "only a Spark task's failpoints"),
])
def test_bad_arming_is_refused_with_the_reason(monkeypatch, value, message):
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", value)
    with pytest.raises(ValueError, match=message):
        failpoints.armed()


def test_raise_first_attempt_raises_in_a_tasks_first_attempt_only(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "job.before_produce=raise-first-attempt")
    handed = failpoints.armed(prefix="job.")
    monkeypatch.delenv("LOCKSTEP_FAILPOINTS")
    with pytest.raises(failpoints.FailpointError,
                       match="^failpoint job.before_produce raised in the task's first attempt$"):
        failpoints.hit("job.before_produce", armed_here=handed, attempt=0)
    failpoints.hit("job.before_produce", armed_here=handed, attempt=1)  # the retry passes
    failpoints.hit("job.before_produce", armed_here=handed, attempt=3)
    with pytest.raises(ValueError, match="needs the Spark task's attempt number"):
        failpoints.hit("job.before_produce", armed_here=handed)


def test_every_action_fires_in_a_first_attempt_and_only_raise_first_attempt_spares_a_retry():
    assert {a: (failpoints.fires(a, 0), failpoints.fires(a, 1)) for a in failpoints.ACTIONS} == {
        "crash": (True, True), "raise": (True, True), "raise-first-attempt": (True, False), "pause": (True, True)}


def test_pause_signals_with_a_file_and_goes_on_once_it_is_removed(monkeypatch, tmp_path):
    import threading
    import time

    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "state.mid_upload=pause")
    monkeypatch.setenv(failpoints.PAUSE_SIGNALS, str(tmp_path))
    signal = tmp_path / "state.mid_upload"
    seen: list[bool] = []

    def release() -> None:  # what the soak does: see the signal, land a fault, remove it
        deadline = time.monotonic() + 30
        while not signal.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(signal.exists())
        signal.unlink()

    thread = threading.Thread(target=release)
    thread.start()
    failpoints.hit("state.mid_upload", " (checkpoint 3)")  # returns only once the file is gone
    thread.join()
    assert seen == [True] and not signal.exists()
    failpoints.hit("commit.mid_state_gc")  # not armed: no pause


def test_pause_without_its_folder_is_an_error_and_no_writer_failpoint_pauses(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "commit.mid_state_gc=pause")
    monkeypatch.delenv(failpoints.PAUSE_SIGNALS, raising=False)
    with pytest.raises(failpoints.FailpointError, match="LOCKSTEP_FAILPOINT_SIGNALS"):
        failpoints.hit("commit.mid_state_gc")
    with pytest.raises(ValueError, match="cannot pause"):
        failpoints.parse("job.mid_produce=pause")


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


def test_a_driver_failpoint_armed_to_pause_never_reaches_the_writers(monkeypatch):
    """``job.before_prepared`` and ``job.after_prepared`` are hit by the Spark driver (Lockstep's process), which
    may pause there; they used to be handed to the writers with the other ``job.*`` ones, and the JVM writer
    refuses a settings document with an action it does not know (pause), failing every task of the run."""
    from lockstep.model.output_contract import WRITER_FAILPOINTS
    from lockstep.spark import writer_settings
    from lockstep.spark.jvm_writer import jvm_settings

    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "job.before_prepared=pause,job.after_prepared=crash,job.after_flush=raise")
    monkeypatch.setattr(writer_settings, "kafka_config", lambda conn_id, dialect: {"bootstrap.servers": "b:9092"})

    class Planned:
        sink_kafka_conn_id, sink_writer, id_prefix, timeout_ms = "kafka_default", "jvm", "tx", 60_000
        sink_topic, dead_letter_topic = "out", "dlq"

    settings = writer_settings.writer_settings(Planned(), 3, {}, pipeline="p")
    assert settings.failpoints == jvm_settings(settings)["failpoints"] == {"job.after_flush": "raise"}
    assert set(WRITER_FAILPOINTS) < {n for n in failpoints.FAILPOINTS if n.startswith("job.")}


def test_lockstep_failpoints_lists_the_points_and_the_actions(capsys):
    import json

    from lockstep.cli import main

    assert main(["failpoints", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == {"failpoints": failpoints.FAILPOINTS, "actions": failpoints.ACTIONS}
    assert main(["failpoints"]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in failpoints.FAILPOINTS)
    assert all(f"\n{action} " in text for action in failpoints.ACTIONS)
