"""The lag watcher's looks (`lockstep_airflow.triggers.LockstepLagTrigger`), on the fake Kafka and S3: what a
look reads, so that hundreds of idle pipelines' watchers cost the triggerer little."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from lockstep.rules.lag_trigger import FULL_LOOK_EVERY_S
from lockstep.spec import load_spec
from lockstep_airflow import triggers
from tests.support.fake_pipeline import DEAD_LETTERS, PREFIX, SINK, SOURCE, FakeWorld, fake_world
from tests.unit.test_coordinator import complete

SPEC = {
    "name": "orders",
    "source": {"topics": [SOURCE]},
    "transform": "lockstep_examples.orders:enrich",
    "sink": {"topic": SINK, "dead_letter_topic": DEAD_LETTERS},
    "checkpoints": {"store": "s3://lockstep/tests", "max_records": 1000, "retain": 100, "schedule": None,
                    "trigger": {"lag_records": 1, "poll_interval": 1}},
    "transactions": {"id_prefix": PREFIX, "timeout_ms": 900_000, "commit_margin_ms": 60_000},
}


class _Clients:
    """The triggerer's shared clients, over the fakes; counts the looks that read the store."""

    def __init__(self, world: FakeWorld) -> None:
        self.world = world
        self.store_reads = 0
        self.forgotten = 0
        self.broken: Exception | None = None

    def admin(self, conn_id: str) -> Any:
        if self.broken is not None:
            raise self.broken
        return self.world.source.admin

    def store(self, spec: Any) -> Any:
        self.store_reads += 1
        return self.world.store

    def forget(self) -> None:
        self.forgotten += 1


@pytest.fixture
def watched(monkeypatch, tmp_path: Path) -> tuple[FakeWorld, _Clients, triggers.LockstepLagTrigger]:
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    world = fake_world(monkeypatch, load_spec(path))
    clients = _Clients(world)
    monkeypatch.setattr(triggers, "_CLIENTS", clients)
    complete(world, "first")  # the pipeline's first checkpoint: where to start is known
    return world, clients, triggers.LockstepLagTrigger(str(path), "orders", poll_s=1)


def test_a_quiet_source_is_looked_at_by_its_offsets_alone_until_a_record_arrives(watched):
    world, clients, watcher = watched
    assert watcher.look() is None and clients.store_reads == 1
    for _ in range(5):
        assert watcher.look() is None
    assert clients.store_reads == 1 and (watcher.looks, watcher.full_looks) == (6, 1)
    world.source.produce(SOURCE, 1, 1)
    fired = watcher.look()
    assert fired is not None and fired["unread"] == 1 and clients.store_reads == 2


def test_a_quiet_source_s_store_is_read_again_after_a_while(watched):
    # What changes only in the store (a checkpoint a hand-started run claimed, then lost) is seen within a minute.
    _, clients, watcher = watched
    watcher.look()
    assert watcher._quiet is not None
    watcher._quiet = dataclasses.replace(watcher._quiet, at_s=watcher._quiet.at_s - FULL_LOOK_EVERY_S)
    assert watcher.look() is None and clients.store_reads == 2


def test_records_unread_below_the_threshold_keep_every_look_at_the_store(watched, tmp_path):
    world, clients, watcher = watched
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(
        {**SPEC, "checkpoints": {**SPEC["checkpoints"], "trigger": {"lag_records": 10, "poll_interval": 1,
                                                                    "max_wait": "1h"}}}))
    world.source.produce(SOURCE, 0, 3)
    for _ in range(3):
        assert watcher.look() is None  # 3 unread, below 10: waiting for max_wait, which the store dates
    assert clients.store_reads == 3


def test_an_edited_spec_is_parsed_again_and_its_source_looked_at_in_full(watched, tmp_path):
    _, clients, watcher = watched
    watcher.look()
    watcher.look()
    assert clients.store_reads == 1
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(
        {**SPEC, "checkpoints": {**SPEC["checkpoints"], "trigger": {"lag_records": 5, "poll_interval": 1}}}))
    assert watcher.look() is None and clients.store_reads == 2
    spec = watcher._load_spec()
    assert spec.checkpoints.trigger is not None and spec.checkpoints.trigger.lag_records == 5


def test_a_failed_look_drops_the_shared_clients_and_the_next_look_is_a_full_one(watched, caplog):
    _, clients, watcher = watched
    watcher.look()
    clients.broken = RuntimeError("broker away")
    assert watcher.look() is None
    assert clients.forgotten == 1 and "broker away" in caplog.text
    clients.broken = None
    assert watcher.look() is None and clients.store_reads == 2


def test_the_triggerer_builds_one_admin_client_per_connection_and_builds_it_again_later(monkeypatch):
    from lockstep.steps import client_factory

    built: list[str] = []
    monkeypatch.setattr(client_factory, "kafka_admin", lambda conn_id: built.append(conn_id) or object())
    shared = triggers._SharedClients()
    first = shared.admin("kafka_default")
    assert shared.admin("kafka_default") is first and shared.admin("other") is not first
    assert built == ["kafka_default", "other"]
    monkeypatch.setattr(shared, "TTL_S", -1.0)
    assert shared.admin("kafka_default") is not first
    shared.forget()
    assert built == ["kafka_default", "other", "kafka_default"]


def _count_s3(world: FakeWorld, monkeypatch) -> list[str]:
    calls: list[str] = []
    listing, getting = world.s3.list_objects_v2, world.s3.get_object
    monkeypatch.setattr(world.s3, "list_objects_v2", lambda **kw: calls.append("list") or listing(**kw))
    monkeypatch.setattr(world.s3, "get_object", lambda **kw: calls.append("get") or getting(**kw))
    return calls


def test_after_a_fire_the_looks_list_only_newer_checkpoints_until_its_run_claims_one(watched, monkeypatch):
    from lockstep.steps import coordinator
    from tests.unit.test_coordinator import dead

    world, clients, watcher = watched
    world.source.produce(SOURCE, 0, 5)
    assert watcher.look() is not None  # fired; Airflow starts a run and a new watcher from its arguments
    again = triggers.LockstepLagTrigger(watcher.spec_path, "orders", poll_s=1)
    world.source.produce(SOURCE, 0, 5)
    assert again.look() is None  # the marker: its run has not claimed yet, whatever the lag
    calls = _count_s3(world, monkeypatch)
    for _ in range(3):
        assert again.look() is None
    assert calls == ["list"] * 3  # one listing a look, no lag read
    plan = coordinator.plan(world.pipeline, "the-run", run_alive=dead)  # its run claims checkpoint 2 (10 records)
    world.source.produce(SOURCE, 1, 5)
    calls.clear()
    fired = again.look()  # a full look again: 5 records beyond checkpoint 2, in flight: one run ahead
    assert fired is not None and fired["newest_checkpoint"] == plan.claim.checkpoint_id and len(calls) > 1


def test_min_interval_holds_the_fire_and_the_watcher_looks_again_as_it_ends(watched, tmp_path, monkeypatch):
    from datetime import UTC, datetime, timedelta

    from lockstep.steps import plan

    world, _, _ = watched  # checkpoint 1 was claimed just now
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(
        {**SPEC, "checkpoints": {**SPEC["checkpoints"], "trigger": {"lag_records": 1, "poll_interval": 60,
                                                                    "min_interval": "30s"}}}))
    watcher = triggers.LockstepLagTrigger(str(tmp_path / "orders.yaml"), "orders", poll_s=60)
    world.source.produce(SOURCE, 0, 5)
    assert watcher.look() is None  # 5 unread, but the last checkpoint started less than 30 s ago
    assert 25 < watcher.next_look_s <= 30.05  # not a whole poll_interval (60 s) later
    monkeypatch.setattr(plan, "now_iso", lambda: (datetime.now(UTC) - timedelta(seconds=40)).isoformat())
    complete(world, "second")  # checkpoint 2, claimed 40 s ago
    world.source.produce(SOURCE, 0, 5)
    fired = watcher.look()
    assert fired is not None and fired["unread"] == 5 and watcher.next_look_s == 60


def _count_list_offsets(world: FakeWorld, monkeypatch, fail: int = 0) -> list[int]:
    """The fake admin's ListOffsets requests, each as the number of partitions it asked for; the first ``fail``
    of them raise, as a broker away would."""
    admin = world.source.admin
    real = admin.list_offsets
    asked: list[int] = []

    def list_offsets(request: dict, *args: Any, **kwargs: Any) -> Any:
        asked.append(len(request))
        if len(asked) <= fail:
            raise RuntimeError("broker away")
        return real(request, *args, **kwargs)

    monkeypatch.setattr(admin, "list_offsets", list_offsets)
    return asked


def test_quiet_watchers_looking_in_the_same_moment_read_their_offsets_in_one_request(watched, monkeypatch):
    import asyncio

    world, _, first = watched
    watchers = [first] + [triggers.LockstepLagTrigger(first.spec_path, f"orders-{i}", poll_s=1) for i in range(4)]
    for w in watchers:
        assert w.look() is None and w._quiet is not None  # a full look each: the source is quiet
    asked = _count_list_offsets(world, monkeypatch)

    async def together() -> list[Any]:
        return await asyncio.gather(*(w.read_with_others() for w in watchers))

    answers = asyncio.run(together())
    assert asked == [len(first._partitions)]  # one request for the five watchers, not five
    assert all(a == first._quiet.stable for a in answers) and all(w._still_quiet(a) for w, a in zip(watchers, answers))
    world.source.produce(SOURCE, 1, 2)
    answers = asyncio.run(together())
    assert len(asked) == 2 and not first._still_quiet(answers[0])
    fired = first.look(answers[0])  # the full look starts from what the shared read saw: no read of its own
    assert fired is not None and fired["unread"] == 2 and len(asked) == 2


def test_a_shared_read_that_fails_lets_each_watcher_read_its_own(watched, monkeypatch):
    import asyncio

    world, _, first = watched
    other = triggers.LockstepLagTrigger(first.spec_path, "orders-2", poll_s=1)
    for w in (first, other):
        w.look()
    asked = _count_list_offsets(world, monkeypatch, fail=1)

    async def together() -> list[Any]:
        return await asyncio.gather(first.read_with_others(), other.read_with_others())

    assert asyncio.run(together()) == [None, None] and len(asked) == 1
    assert first.look(None) is None and other.look(None) is None and len(asked) == 3  # each read alone, quiet
    assert first._last_problem is None


def test_a_quiet_watchers_run_fires_when_a_record_arrives(watched, monkeypatch):
    import asyncio

    world, _, watcher = watched
    watcher.poll_s = 0.2
    asked = _count_list_offsets(world, monkeypatch)

    async def watch() -> Any:
        events = watcher.run()
        first = asyncio.ensure_future(anext(events))
        for _ in range(300):  # a full look, then looks at the offsets alone (up to 30 s on a loaded machine)
            if watcher.looks >= 3:
                break
            await asyncio.sleep(0.1)
        assert not first.done() and watcher.looks >= 3 and watcher.full_looks == 1
        world.source.produce(SOURCE, 0, 1)
        return await asyncio.wait_for(first, 5)

    event = asyncio.run(watch())
    assert event.payload["unread"] == 1 and watcher.full_looks == 2 and len(asked) >= 3


def test_quiet_watchers_look_on_their_poll_intervals_ticks_of_the_clock():
    assert triggers.until_tick_s(1.0, 100.25) == pytest.approx(0.75)
    assert triggers.until_tick_s(5.0, 1003.0) == pytest.approx(2.0)
    assert triggers.until_tick_s(1.0, 100.95) == pytest.approx(1.05)  # not a look right after the last


def test_a_shared_read_cancelled_mid_request_leaves_no_watcher_waiting(watched, monkeypatch):
    import asyncio
    import time as clock

    _, _, watcher = watched
    watcher.look()
    monkeypatch.setattr(triggers, "_read_stable", lambda conn_id, tps: clock.sleep(0.5) or {})

    async def cancelled() -> Any:
        asking = asyncio.ensure_future(watcher.read_with_others())
        await asyncio.sleep(0.2)  # the shared request is under way
        for task in list(triggers._reads()._reading):
            task.cancel()
        return await asyncio.wait_for(asking, 5)

    assert asyncio.run(cancelled()) is None  # answered "read it yourself", not left hanging
