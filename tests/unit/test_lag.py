"""Transaction-aware lag (``lockstep.ops.lag``) and its StatsD form (``lockstep.ops.metrics``), without services."""
from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import pytest

from lockstep.errors import TerminalError
from lockstep.model.checkpoint import (
    AbortedCheckpoint,
    CheckpointClaim,
    CheckpointView,
    CompletedCheckpoint,
    PreparedCheckpoint,
)
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.ops import lag, metrics

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def _claim(cid: int, *ranges: tuple[int, int, int], at: datetime = NOW) -> CheckpointClaim:
    return CheckpointClaim("orders", cid, f"run-{cid}", at.isoformat(),
                           tuple(OffsetRange("orders", p, s, e) for p, s, e in ranges), "checkpoint")


def _completed(cid: int, ends: dict[str, int], minutes_ago: float) -> CheckpointView:
    at = (NOW - timedelta(minutes=minutes_ago)).isoformat()
    claim = _claim(cid, *[(TopicPartition.from_key(k).partition, 0, e) for k, e in ends.items()])
    return CheckpointView(claim, PreparedCheckpoint("orders", cid, at, (), 0, 0, 0, 1.0),
                          CompletedCheckpoint("orders", cid, at, ends, ()))


def test_claimed_and_prepared_records_are_in_flight_the_rest_unread():
    latest = _completed(4, {"orders:0": 100, "orders:1": 50}, minutes_ago=3)
    prepared = CheckpointView(_claim(5, (0, 100, 130), (1, 50, 50)),
                              PreparedCheckpoint("orders", 5, NOW.isoformat(), (), 30, 30, 0, 1.0))
    claimed = CheckpointView(_claim(6, (0, 130, 140), (1, 50, 55)))
    aborted = CheckpointView(_claim(3, (0, 90, 100)), aborted=AbortedCheckpoint("orders", 3, NOW.isoformat(), "x", "y"))
    result = lag.pipeline_lag("orders", [P1, P0], latest, [claimed, prepared, aborted], {P0: 160, P1: 55}, {}, "g",
                              NOW)
    rows = {r.partition: r for r in result.partitions}
    assert (rows["orders:0"].committed, rows["orders:0"].in_flight, rows["orders:0"].read_to,
            rows["orders:0"].unread) == (100, 40, 140, 20)
    assert rows["orders:0"].in_flight_checkpoints == (5, 6) and rows["orders:0"].not_committed == 60
    assert (rows["orders:1"].in_flight, rows["orders:1"].unread, rows["orders:1"].in_flight_checkpoints) == (5, 0, (6,))
    assert [(f.checkpoint_id, f.status, f.records) for f in result.in_flight] == [(5, "prepared", 30),
                                                                                  (6, "claimed", 15)]
    assert result.totals == {"in_flight": 45, "unread": 20}
    assert result.committed_from == "checkpoint 4" and result.last_completed_age_s == 180.0


def test_before_the_first_checkpoint_the_group_offsets_are_the_base_and_a_missing_one_is_not_guessed():
    result = lag.pipeline_lag("orders", [P0, P1], None, [], {P0: 10, P1: 7}, {P0: 4}, "orders-group", NOW)
    rows = {r.partition: r for r in result.partitions}
    assert (rows["orders:0"].committed, rows["orders:0"].unread) == (4, 6)
    assert (rows["orders:1"].committed, rows["orders:1"].unread, rows["orders:1"].not_committed) == (None, None, None)
    assert result.committed_from == "consumer group orders-group" and result.totals["unread"] is None
    assert "records_unread" not in result.gauges()  # unknown is not sent as 0


def test_a_restore_in_flight_reads_on_from_its_own_end_even_behind_the_committed_offset():
    latest = _completed(9, {"orders:0": 500}, minutes_ago=1)
    restore = CheckpointView(_claim(10, (0, 200, 300)))
    (row,) = lag.pipeline_lag("orders", [P0], latest, [restore], {P0: 520}, {}, "g", NOW).partitions
    assert (row.committed, row.in_flight, row.read_to, row.unread) == (500, 100, 300, 220)


def test_age_of_the_oldest_unread_record_only_where_something_is_unread():
    rows = lag.partition_lag([P0, P1], {P0: 10, P1: 5}, [], {P0: 30, P1: 5})
    ms = int((NOW - timedelta(minutes=3)).timestamp() * 1000)
    aged = lag.with_ages(rows, {"orders:0": ms, "orders:1": ms}, NOW)
    assert aged[0].oldest_unread_age_s == 180.0 and aged[0].oldest_unread_at.startswith("2026-11-23T11:57")
    assert aged[1].oldest_unread_at is None  # nothing unread


def test_status_text_names_checkpoints_in_flight_and_totals():
    latest = _completed(4, {"orders:0": 100}, minutes_ago=2)
    text = lag.describe(lag.pipeline_lag("orders", [P0], latest, [CheckpointView(_claim(5, (0, 100, 110)))],
                                         {P0: 125}, {}, "g", NOW))
    assert "committed through checkpoint 4" in text and "2.0 min ago" in text
    assert "in flight: checkpoint 5 claimed (10 records" in text
    assert text.splitlines()[-1] == "total: 10 in flight, 15 unread"  # the age was not read: not shown


def test_gauge_lines_are_statsd_and_packed_under_the_datagram_limit():
    latest = _completed(4, {"orders:0": 100}, minutes_ago=2)
    gauges = lag.pipeline_lag("orders", [P0], latest, [], {P0: 125}, {}, "g", NOW).gauges()
    lines = metrics.lines("airflow", "orders enrich", gauges)
    assert "airflow.lockstep.orders_enrich.records_unread:25|g" in lines
    assert "airflow.lockstep.orders_enrich.last_completed_age_s:120|g" in lines
    assert "airflow.lockstep.orders_enrich.partition.orders.0.records_in_flight:0|g" in lines
    packets = metrics.datagrams(lines * 40, limit=200)
    assert all(len(p) <= 200 for p in packets) and b"\n".join(packets).split(b"\n") == [x.encode() for x in lines * 40]


def test_gauges_reach_a_udp_listener_and_a_bad_target_is_refused(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.settimeout(5)
        monkeypatch.setenv(metrics.ENV, f"127.0.0.1:{server.getsockname()[1]}")
        target = metrics.metrics_target()
        assert metrics.send_gauges("orders", {"records_unread": 7}, target) == 1
        assert server.recv(2048) == b"airflow.lockstep.orders.records_unread:7|g"
    with pytest.raises(TerminalError, match="--statsd='nohost': expected host:port"):
        metrics.metrics_target("nohost")


def test_inside_airflow_the_gauges_follow_airflows_statsd_settings(monkeypatch):
    pytest.importorskip("airflow.configuration")  # imported: the settings are read only where Airflow runs
    monkeypatch.delenv(metrics.ENV, raising=False)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "False")
    assert metrics.metrics_target() is None
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "statsd.internal")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", "9125")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "prod")
    assert metrics.metrics_target() == metrics.StatsdTarget("statsd.internal", 9125, "prod")
    monkeypatch.setenv(metrics.ENV, "127.0.0.1:8125")  # the CLI's setting wins
    assert metrics.metrics_target() == metrics.StatsdTarget("127.0.0.1", 8125, "airflow")


def test_a_checkpoint_completed_after_the_latest_was_read_is_the_base_not_unread_records():
    # The store's latest was read, then a newer checkpoint completed before the views after it were read.
    latest = _completed(4, {"orders:0": 100}, minutes_ago=3)
    newer = _completed(5, {"orders:0": 130}, minutes_ago=0)
    claimed = CheckpointView(_claim(6, (0, 130, 140)))
    result = lag.pipeline_lag("orders", [P0], latest, [newer, claimed], {P0: 160}, {}, "g", NOW)
    (row,) = result.partitions
    assert (row.committed, row.in_flight, row.read_to, row.unread) == (130, 10, 140, 20)
    assert result.last_completed == 5 and [f.checkpoint_id for f in result.in_flight] == [6]


class _MovingStore:
    """A pipeline's store whose next checkpoint is claimed and completed between the watcher's read of the
    latest completed one and its read of the checkpoints after it, as a loaded machine lets happen."""

    def __init__(self) -> None:
        self.first = _completed(1, {"orders-in:0": 0}, minutes_ago=1)
        self.second = _completed(2, {"orders-in:0": 60}, minutes_ago=0)
        self.reads = 0

    def latest_completed(self) -> CheckpointView:
        self.reads += 1
        return self.first if self.reads == 1 else self.second

    def views_after(self, checkpoint_id: int | None) -> list[CheckpointView]:
        return [self.second] if checkpoint_id == 1 else []


def test_the_watcher_does_not_fire_again_for_records_a_checkpoint_completed_while_it_looked(monkeypatch):
    from lockstep.kafka import broker_offsets, topics
    from lockstep.rules.lag_trigger import Fired, start_reason
    from tests.support.fake_pipeline import spec

    tp = TopicPartition("orders-in", 0)
    monkeypatch.setattr(topics, "partitions", lambda admin, names: [tp])
    monkeypatch.setattr(broker_offsets, "last_stable_offsets", lambda admin, tps: {tp: 60})
    pipeline = spec(checkpoints={"schedule": None, "trigger": {"lag_records": 50, "poll_interval": 1}})
    look = lag.trigger_look(pipeline, _MovingStore(), admin=object(), now=NOW)  # type: ignore[arg-type]
    assert (look.unread, look.newest_checkpoint, look.in_flight_age_s) == (0, 2, None)
    # The watcher fired for checkpoint 2's records when checkpoint 1 was the newest: no second run.
    fired = Fired(NOW.timestamp() - 20, newest_checkpoint=1)
    assert start_reason(look, pipeline.checkpoints.trigger, fired, NOW.timestamp(), in_flight_lease_s=900) is None


class _Store:
    def __init__(self, latest: CheckpointView | None, after: list[CheckpointView]) -> None:
        self.latest, self.after = latest, after

    def latest_completed(self) -> CheckpointView | None:
        return self.latest

    def views_after(self, checkpoint_id: int | None) -> list[CheckpointView]:
        return self.after


def test_the_look_says_how_long_ago_the_newest_checkpoint_was_claimed_for_min_interval(monkeypatch):
    from lockstep.kafka import broker_offsets, topics
    from tests.support.fake_pipeline import spec

    tp = TopicPartition("orders-in", 0)
    monkeypatch.setattr(topics, "partitions", lambda admin, names: [tp])
    monkeypatch.setattr(broker_offsets, "last_stable_offsets", lambda admin, tps: {tp: 90})
    monkeypatch.setattr(broker_offsets, "group_offsets", lambda config, group, tps: {})
    monkeypatch.setattr("lockstep.connections.kafka_config", lambda conn_id: {})
    pipeline = spec(checkpoints={"schedule": None, "trigger": {"lag_records": 1, "min_interval": "5s"}})
    assert pipeline.checkpoints.trigger.min_interval_s == 5
    completed = CheckpointView(_claim(1, (0, 0, 60), at=NOW - timedelta(seconds=7)),
                               PreparedCheckpoint("orders", 1, NOW.isoformat(), (), 0, 0, 0, 1.0),
                               CompletedCheckpoint("orders", 1, NOW.isoformat(), {"orders-in:0": 60}, ()))
    look = lag.trigger_look(pipeline, _Store(completed, []), admin=object(), now=NOW)  # type: ignore[arg-type]
    assert look.since_started_s == 7.0
    flying = CheckpointView(_claim(2, (0, 60, 80), at=NOW - timedelta(seconds=2)))
    look = lag.trigger_look(pipeline, _Store(completed, [flying]), admin=object(), now=NOW)  # type: ignore[arg-type]
    assert (look.since_started_s, look.in_flight_age_s) == (2.0, 2.0)
    assert lag.trigger_look(pipeline, _Store(None, []), admin=object(), now=NOW).since_started_s is None  # type: ignore[arg-type]
