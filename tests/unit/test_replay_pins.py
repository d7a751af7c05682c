"""What a replay of an aborted checkpoint reuses (`lockstep.rules.replay`, docs/semantics.md): every pin of
the aborted claim (clock, schema ids, table versions) while the spec they came from is the same, fresh pins
and one line naming what changed otherwise; and table ranges that retention deleted, refused like source
ranges. The plan runs over the in-memory fakes (tests/support/fake_pipeline.py); the registry's answers are
the plan's one patched call (`registry.schemas.pin`)."""
from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from lockstep.errors import TerminalError
from lockstep.model.checkpoint import CheckpointClaim, SpecFingerprint
from lockstep.model.offsets import OffsetRange
from lockstep.rules.replay import fingerprint
from lockstep.spec import FormatSpec, PipelineSpec
from lockstep.steps import coordinator
from lockstep.steps import plan as plan_step
from lockstep.tables.pins import TableVersion
from tests.support.fake_pipeline import SOURCE, FakeWorld, fake_world, spec

TABLE = "customers"
AVRO_V1 = '{"type":"record","name":"Out","fields":[{"name":"id","type":"long"}]}'
AVRO_V2 = ('{"type":"record","name":"Out","fields":[{"name":"id","type":"long"},'
           '{"name":"tier","type":"string","default":""}]}')


def dead(run_id: str) -> bool:
    return False


def table_spec(**sections: dict) -> PipelineSpec:
    return spec(tables={TABLE: {"topic": TABLE, "value": "json", "join": {"by": "data.customer"}}}, **sections)


def with_sink_value(s: PipelineSpec, schema: str, where: str) -> PipelineSpec:
    value = FormatSpec("avro-confluent", schema=schema, schema_from=where, auto_register=True)
    return replace(s, sink=replace(s.sink, value=value))


@pytest.fixture
def world(monkeypatch) -> FakeWorld:
    w = fake_world(monkeypatch, table_spec(), partitions=2)
    w.source.produce(SOURCE, 0, 30)
    w.source.produce(SOURCE, 1, 20)
    w.source.create_topic(TABLE, 2)
    w.source.produce(TABLE, 0, 6)
    w.source.produce(TABLE, 1, 12)
    return w


def registry(monkeypatch, ids: dict[str, int]) -> dict[str, int]:
    """The registry as the plan sees it: ``ids`` (changed in place by a test) are what it pins now."""
    monkeypatch.setattr(plan_step, "pin", lambda spec, dry_run=False, **_: dict(ids))
    return ids


def crashed(w: FakeWorld, run_id: str) -> CheckpointClaim:
    """A checkpoint planned, whose Spark run opened its transactions and died."""
    planned = coordinator.plan(w.pipeline, run_id, run_alive=dead)
    w.start(planned)
    return planned.claim


def ends(claim: CheckpointClaim, table: str = TABLE) -> dict[int, int]:
    return {r.partition: r.end for r in claim.tables[table].ranges}


# ---- the plan: a replay reuses its aborted checkpoint's pins ---------------------------------------------
def test_a_replay_joins_the_table_version_its_aborted_checkpoint_pinned_not_the_topic_now(world: FakeWorld, caplog):
    first = crashed(world, "run-1")
    assert ends(first) == {0: 6, 1: 12}
    world.source.produce(TABLE, 0, 3)  # table updates after the first plan (the issue: {0: 9, 1: 17})
    world.source.produce(TABLE, 1, 5)
    world.clock.advance(600_000)
    with caplog.at_level(logging.INFO, logger="lockstep.steps.plan"):
        replay = coordinator.plan(world.pipeline, "run-2", run_alive=dead).claim
    assert world.store.view(1).aborted is not None
    assert replay.ranges == first.ranges, "it replays the aborted checkpoint's ranges"
    assert replay.tables[TABLE].same_version(first.tables[TABLE]), replay.tables
    assert ends(replay) == {0: 6, 1: 12}
    assert replay.tables[TABLE].earlier == (1,)
    assert replay.clock_ms == first.clock_ms
    assert replay.replays == 1 and replay.fingerprint == first.fingerprint
    assert "checkpoint 2 replays aborted checkpoint 1's ranges with its pins" in caplog.text


def test_a_second_replay_still_pins_the_first_attempts_version_and_names_every_attempt(world: FakeWorld):
    first = crashed(world, "run-1")
    world.source.produce(TABLE, 0, 3)
    crashed(world, "run-2")
    world.source.produce(TABLE, 1, 4)
    third = coordinator.plan(world.pipeline, "run-3", run_alive=dead).claim
    assert third.checkpoint_id == 3 and ends(third) == ends(first)
    assert third.tables[TABLE].earlier == (1, 2), "the run looks for the first attempt's files first"


def test_a_replay_reuses_the_aborted_claims_schema_ids_while_the_spec_is_the_same(monkeypatch):
    w = fake_world(monkeypatch, with_sink_value(spec(), AVRO_V1, "out_v1.avsc"), partitions=1)
    w.source.produce(SOURCE, 0, 10)
    ids = registry(monkeypatch, {"sink.value": 7})
    first = crashed(w, "run-1")
    ids["sink.value"] = 9  # another version registered since: the subject's latest is not the claim's
    replay = coordinator.plan(w.pipeline, "run-2", run_alive=dead).claim
    assert first.schema_ids == {"sink.value": 7} and replay.schema_ids == {"sink.value": 7}


def test_a_replay_after_the_sink_schema_changed_takes_fresh_pins_and_says_what_changed_in_one_line(monkeypatch,
                                                                                                   caplog):
    w = fake_world(monkeypatch, with_sink_value(table_spec(), AVRO_V1, "out_v1.avsc"), partitions=2)
    w.source.produce(SOURCE, 0, 10)
    w.source.create_topic(TABLE, 1)
    w.source.produce(TABLE, 0, 4)
    ids = registry(monkeypatch, {"sink.value": 7})
    first = crashed(w, "run-1")
    w.source.produce(TABLE, 0, 2)
    w.clock.advance(60_000)
    # the transform adds a field, and the spec's sink schema with it
    w.pipeline = replace(w.pipeline, spec=with_sink_value(w.pipeline.spec, AVRO_V2, "out_v2.avsc"))
    ids["sink.value"] = 8
    with caplog.at_level(logging.INFO, logger="lockstep.steps.plan"):
        replay = coordinator.plan(w.pipeline, "run-2", run_alive=dead).claim
    assert replay.ranges == first.ranges
    assert replay.schema_ids == {"sink.value": 8}, "the new schema, not the aborted claim's"
    assert ends(replay) == {0: 6} and replay.tables[TABLE].earlier == (), "the table as the topic stands now"
    assert replay.clock_ms == w.clock() != first.clock_ms
    assert replay.replays is None and replay.fingerprint == fingerprint(w.pipeline.spec) != first.fingerprint
    lines = [r.getMessage() for r in caplog.records if "replays aborted checkpoint" in r.getMessage()]
    assert lines == ["checkpoint 2 replays aborted checkpoint 1's ranges with fresh pins: the spec changed since "
                     "(sink.value.schema (now out_v2.avsc)); its output follows the spec as it is now"], lines


def test_an_aborted_claim_of_an_earlier_version_gives_its_replay_its_clock_and_fresh_schemas(monkeypatch):
    w = fake_world(monkeypatch, with_sink_value(spec(), AVRO_V1, "out_v1.avsc"), partitions=1)
    w.source.produce(SOURCE, 0, 10)
    ids = registry(monkeypatch, {"sink.value": 7})
    first = crashed(w, "run-1")
    # as an earlier Lockstep version wrote it: no fingerprint (the fake S3 lets the test rewrite it)
    key = (w.store.bucket, w.store._key(1, "claim"))
    doc = first.to_json()
    del doc["fingerprint"]
    w.s3.objects[key] = (json.dumps(doc).encode(), w.s3.objects[key][1])
    ids["sink.value"] = 9
    w.clock.advance(60_000)
    replay = coordinator.plan(w.pipeline, "run-2", run_alive=dead).claim
    assert replay.clock_ms == first.clock_ms and replay.schema_ids == {"sink.value": 9}


# ---- the fingerprint ---------------------------------------------------------------------------------------
def test_the_fingerprint_names_the_fields_pins_come_from_and_ignores_the_others():
    base = with_sink_value(table_spec(), AVRO_V1, "out_v1.avsc")
    now = fingerprint(base)
    assert {"source.topics", "sink.value.schema", "sink.value.subject", "sink.registry_conn_id", "sink.topic",
            "tables.customers.topic", "tables.customers.key", "tables.customers.versions"} <= set(now.fields)
    unrelated = replace(base, transform="other:f", checkpoints=replace(base.checkpoints, max_records=5))
    assert fingerprint(unrelated) == now, "the transform and the record budget pin nothing"
    moved = replace(base, tables=(replace(base.tables[0], topic="customers-v2"),))
    assert now.changed(fingerprint(moved)) == ("tables.customers.topic",)
    other_registry = replace(base, sink=replace(base.sink, registry_conn_id="other"))
    assert now.changed(fingerprint(other_registry)) == ("sink.registry_conn_id",)
    no_table = replace(base, tables=())
    assert set(now.changed(fingerprint(no_table))) == {f"tables.customers.{f}" for f in ("topic", "key", "value",
                                                                                         "versions")}


def test_a_claim_round_trips_its_fingerprint_and_one_of_an_earlier_version_still_loads():
    claim = CheckpointClaim("p", 2, "run", "2026-01-01T00:00:00+00:00", (OffsetRange("in", 0, 0, 10),), "checkpoint:1",
                            fingerprint=SpecFingerprint.of({"sink.value.schema": AVRO_V1}), replays=1)
    doc = claim.to_json()
    assert doc["fingerprint"]["digest"] == claim.fingerprint.digest  # type: ignore[index,union-attr]
    assert CheckpointClaim.from_json(doc) == claim
    older = {k: v for k, v in doc.items() if k not in ("fingerprint", "replays")}
    assert CheckpointClaim.from_json(older).fingerprint is None and CheckpointClaim.from_json(older).replays is None


# ---- retention gaps in a table's topic -------------------------------------------------------------------
def completed_with_table(w: FakeWorld, run_id: str) -> CheckpointClaim:
    """A checkpoint planned, run (its table version: the pinned offsets, as a Spark run records them) and committed."""
    planned = coordinator.plan(w.pipeline, run_id, run_alive=dead)
    pin = planned.claim.tables[TABLE]
    version = TableVersion(TABLE, TABLE, planned.claim.checkpoint_id, {r.partition: r.end for r in pin.ranges},
                           (f"state/{planned.claim.checkpoint_id}/table-{TABLE}.parquet",), ("d",), (10,), 3)
    w.prepare(planned, tables={TABLE: version})
    coordinator.commit(w.pipeline, planned.claim.checkpoint_id)
    return planned.claim


def test_a_table_range_retention_deleted_before_any_checkpoint_read_it_is_refused(world: FakeWorld):
    completed_with_table(world, "run-1")
    world.source.produce(SOURCE, 0, 5)
    world.source.produce(TABLE, 0, 10)  # offsets 6..15, of which retention deletes 6..8 before checkpoint 2 reads
    world.source.delete_records(TABLE, 0, 9)
    with pytest.raises(TerminalError) as refused:
        coordinator.plan(world.pipeline, "run-2", run_alive=dead)
    text = str(refused.value)
    assert "checkpoint 2: table customers: retention deleted records" in text
    assert "customers:0 offsets [6, 9) (3 records, the log now starts at 9)" in text
    assert "checkpoints.skip_deleted_ranges: true" in text and "Nothing was claimed" in text
    assert world.store.view(2) is None


def test_with_skip_deleted_ranges_a_table_gap_is_skipped_logged_and_recorded_in_the_claim(monkeypatch, caplog):
    w = fake_world(monkeypatch, table_spec(checkpoints={"skip_deleted_ranges": True}), partitions=1)
    w.source.produce(SOURCE, 0, 10)
    w.source.create_topic(TABLE, 1)
    w.source.produce(TABLE, 0, 6)
    completed_with_table(w, "run-1")
    w.source.produce(SOURCE, 0, 5)
    w.source.produce(TABLE, 0, 10)
    w.source.delete_records(TABLE, 0, 9)
    with caplog.at_level(logging.WARNING, logger="lockstep.steps.plan"):
        second = coordinator.plan(w.pipeline, "run-2", run_alive=dead).claim
    pin = second.tables[TABLE]
    assert pin.ranges == (OffsetRange(TABLE, 0, 9, 16),) and pin.skipped == {0: 3}
    assert CheckpointClaim.from_json(second.to_json()).tables[TABLE].skipped == {0: 3}
    assert "checkpoint 2: table customers: skipping 3 records of customers:0 deleted by retention" in caplog.text


def test_a_replays_table_pin_that_retention_cut_into_since_is_refused(world: FakeWorld):
    crashed(world, "run-1")  # pins customers:0 [0, 6)
    world.source.produce(TABLE, 0, 4)
    world.source.delete_records(TABLE, 0, 2)
    with pytest.raises(TerminalError, match=r"checkpoint 2: table customers: .*customers:0 offsets \[0, 2\)"):
        coordinator.plan(world.pipeline, "run-2", run_alive=dead)
