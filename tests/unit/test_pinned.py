"""A spec edited while a checkpoint is in flight: the claim pins what the checkpoint was planned
with, and its Spark run, commit and recovery use that, or refuse when they cannot."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest

from lockstep.errors import CheckpointError, MetadataError, TerminalError
from lockstep.kafka import broker_offsets
from lockstep.model.checkpoint import (
    CLAIM_SCHEMA,
    AbortedCheckpoint,
    CheckpointClaim,
    CheckpointStatus,
    CheckpointView,
    CompletedCheckpoint,
    PlannedWith,
    PreparedCheckpoint,
    PreparedTransaction,
)
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.model.transactions import TransactionObservation, TransactionState
from lockstep.rules.commit_decision import DecisionKind
from lockstep.rules.pinned import (
    Step,
    planned_with,
    prefix_changes,
    refusal,
    resolve_pinned,
    spec_changes,
    transactions_deadline_ms,
)
from lockstep.rules.recovery import listing_scopes, recovery_plan
from lockstep.spec import parse_spec
from lockstep.steps import coordinator
from tests.support.fake_store import FakeStore

KEY = "s3://lockstep/p/checkpoints/000000000007/claim.json"
NOW = 1_700_000_000_000


def spec(**changes: dict[str, Any]):
    doc: dict[str, Any] = {
        "name": "orders",
        "source": {"topics": ["in"], "kafka_conn_id": "kafka_src"},
        "transform": "lockstep_examples.orders:enrich",
        "sink": {"topic": "out", "dead_letter_topic": "dlq", "kafka_conn_id": "kafka_a", "writer": "jvm"},
        "checkpoints": {"store": "s3://lockstep/p"},
        "transactions": {"id_prefix": "old", "timeout_ms": 900_000},
    }
    for section, values in changes.items():
        doc[section] = {**doc[section], **values}
    return parse_spec(doc, "orders.yaml")


PLANNED = planned_with(spec())


def claim(cid: int = 7, tasks: int = 2, pinned: PlannedWith | None = PLANNED) -> CheckpointClaim:
    ranges = tuple(OffsetRange("in", p, 0, 10) for p in range(tasks))
    return CheckpointClaim("orders", cid, f"run-{cid}", "2025-01-01T00:00:00+00:00", ranges, "checkpoint:6",
                           planned_with=pinned)


def prepared(cid: int = 7, prefix: str = "old", tasks: int = 2) -> PreparedCheckpoint:
    txns = tuple(PreparedTransaction(f"{prefix}-{cid}-{i}", 100 + i, 0, (TopicPartition("out", i),), 9, 1, i,
                                     NOW - 1000) for i in range(tasks))
    return PreparedCheckpoint("orders", cid, "t", txns, 20, 18, 2, 1.0)


# --- the claim document ---


def test_the_claim_pins_what_it_was_planned_with_nested_like_the_spec() -> None:
    doc = json.loads(json.dumps(claim().to_json()))
    assert doc["schema"] == CLAIM_SCHEMA == "lockstep.checkpoint.claim/1"  # an added field, not a new schema
    assert doc["planned_with"] == {
        "source": {"topics": ["in"], "kafka_conn_id": "kafka_src"},
        "sink": {"topic": "out", "dead_letter_topic": "dlq", "writer": "jvm", "kafka_conn_id": "kafka_a",
                 "parallelism": "auto"},
        "transactions": {"id_prefix": "old", "timeout_ms": 900_000},
    }
    assert CheckpointClaim.from_json(doc, KEY) == claim()


def test_the_claim_bounds_its_transactional_ids_by_the_planned_sink_parallelism() -> None:
    """Recovery fences ids 0 .. task_count-1 of a checkpoint that did not finish: as many as its run
    could have used, which is at most sink.parallelism, however many partitions it read."""
    from dataclasses import replace

    from lockstep.model.transactional_ids import MAX_AUTO_PARALLELISM

    assert claim(tasks=5, pinned=replace(PLANNED, sink_parallelism=3)).task_count == 3
    assert claim(tasks=2, pinned=replace(PLANNED, sink_parallelism=3)).task_count == 2
    assert claim(tasks=300, pinned=replace(PLANNED, sink_parallelism="auto")).task_count == MAX_AUTO_PARALLELISM
    # Claims of earlier versions, whose runs wrote a transaction per non-empty range:
    assert claim(tasks=300, pinned=None).task_count == 300
    doc = claim(tasks=300).to_json()
    doc["planned_with"]["sink"].pop("parallelism")
    before = CheckpointClaim.from_json(doc, KEY)
    assert before.planned_with.sink_parallelism is None and before.task_count == 300
    assert before.to_json() == doc  # written back unchanged


def test_a_claim_of_the_previous_version_is_still_read_with_its_values_unknown() -> None:
    written_before = {  # exactly what the previous version wrote: claim/1 without planned_with
        "schema": "lockstep.checkpoint.claim/1", "pipeline": "orders", "checkpoint_id": 7, "run_id": "r",
        "claimed_at": "2025-01-01T00:00:00+00:00", "ranges": [{"topic": "in", "partition": 0, "start": 0, "end": 10}],
        "start_source": "checkpoint:6", "restored_from": None, "skipped": {},
    }
    old = CheckpointClaim.from_json(written_before, KEY)
    assert old.planned_with is None
    assert old.to_json() == written_before  # unchanged when written back, e.g. compared by a racing claim


@pytest.mark.parametrize(("mutate", "named"), [
    (lambda d: d["planned_with"]["sink"].pop("topic"), "missing field 'planned_with.sink.topic'"),
    (lambda d: d["planned_with"]["transactions"].update(timeout_ms="900000"), "'planned_with.transactions.timeout_ms'"),
    (lambda d: d["planned_with"].update(source=["in"]), "'planned_with.source'"),
    (lambda d: d["planned_with"]["source"].update(topics=[]), "source.topics"),
    (lambda d: d["planned_with"]["transactions"].update(id_prefix=""), "transactions.id_prefix"),
    (lambda d: d["planned_with"]["sink"].update(parallelism=0), "sink.parallelism"),
    (lambda d: d["planned_with"]["sink"].update(parallelism=[2]), "'planned_with.sink.parallelism'"),
    (lambda d: d.update(planned_with="old"), "planned_with"),
])
def test_a_damaged_planned_with_is_a_metadata_error_naming_the_field(mutate, named: str) -> None:
    doc = claim().to_json()
    mutate(doc)
    with pytest.raises(MetadataError) as info:
        CheckpointClaim.from_json(doc, KEY)
    assert KEY in str(info.value) and named in str(info.value)


# --- resolving and refusing ---


def test_every_pinned_field_is_compared_by_its_spec_name() -> None:
    now = planned_with(spec(source={"topics": ["in", "in2"], "kafka_conn_id": "kafka_src2"},
                            sink={"topic": "out2", "dead_letter_topic": "dlq2", "writer": "python",
                                  "kafka_conn_id": "kafka_b", "parallelism": 4},
                            transactions={"id_prefix": "new", "timeout_ms": 120_000}))
    changes = spec_changes(PLANNED, now)
    assert [c.field for c in changes] == [name for name, _ in PlannedWith.FIELDS] == [
        "source.topics", "source.kafka_conn_id", "sink.topic", "sink.dead_letter_topic", "sink.writer",
        "sink.kafka_conn_id", "transactions.id_prefix", "transactions.timeout_ms", "sink.parallelism"]
    assert str(changes[0]) == "source.topics ['in'] -> ['in', 'in2']"
    assert str(changes[-3]) == "transactions.id_prefix 'old' -> 'new'"
    assert str(changes[-1]) == "sink.parallelism 'auto' -> 4"


def test_a_later_step_uses_the_claims_values_and_says_what_changed() -> None:
    resolved = resolve_pinned(claim(), spec(transactions={"id_prefix": "new"}, sink={"topic": "out2"}))
    assert resolved.values == PLANNED and resolved.recorded
    notice = resolved.notice(Step.RUN)
    assert "checkpoint 7" in notice and "transactions.id_prefix 'old' -> 'new'" in notice
    assert "sink.topic 'out' -> 'out2'" in notice and "takes effect from the next checkpoint" in notice
    assert resolve_pinned(claim(), spec()).notice(Step.COMMIT) is None  # nothing changed: nothing to say


def test_a_claim_without_pinned_values_falls_back_to_the_spec_and_says_so() -> None:
    now = spec(transactions={"id_prefix": "new"})
    resolved = resolve_pinned(claim(pinned=None), now)
    assert not resolved.recorded and resolved.values == planned_with(now) and resolved.changes == ()
    notice = resolved.notice(Step.RECOVERY)
    assert "checkpoint 7" in notice and "does not record" in notice and "'new'" in notice and "recovery" in notice
    assert refusal(resolved, Step.RUN) is None


@pytest.mark.parametrize("edit", [
    {"transactions": {"id_prefix": "new"}}, {"transactions": {"timeout_ms": 120_000}},
    {"sink": {"topic": "out2", "dead_letter_topic": "dlq2"}}, {"sink": {"writer": "python"}},
    {"source": {"topics": ["in", "in2"]}},
])
def test_edits_the_claim_can_cover_are_honoured_not_refused(edit) -> None:
    resolved = resolve_pinned(claim(), spec(**edit))
    assert resolved.changes and resolved.values == PLANNED
    for step in Step:
        assert refusal(resolved, step, DecisionKind.COMMIT) is None


def test_the_spark_run_refuses_another_sink_cluster_naming_checkpoint_field_values_and_way_out() -> None:
    message = refusal(resolve_pinned(claim(), spec(sink={"kafka_conn_id": "kafka_b"})), Step.RUN)
    assert "sink.kafka_conn_id changed from 'kafka_a' to 'kafka_b' since checkpoint 7 was planned" in message
    assert "Restore sink.kafka_conn_id: kafka_a until checkpoint 7 is settled, or let it abort" in message


def test_the_spark_run_refuses_another_source_cluster() -> None:
    message = refusal(resolve_pinned(claim(), spec(source={"kafka_conn_id": "kafka_src2"})), Step.RUN)
    assert "source.kafka_conn_id changed from 'kafka_src' to 'kafka_src2'" in message
    assert "would read other records" in message and "until checkpoint 7 is settled, or let it abort" in message


def test_a_commit_on_another_sink_cluster_is_refused_only_when_it_would_commit() -> None:
    resolved = resolve_pinned(claim(), spec(sink={"kafka_conn_id": "kafka_b"}))
    deadline = transactions_deadline_ms(prepared(), PLANNED.timeout_ms)
    message = refusal(resolved, Step.COMMIT, DecisionKind.COMMIT, deadline)
    assert "checkpoint 7" in message and "'kafka_a' to 'kafka_b'" in message
    assert "let it abort: its transactions time out on the old cluster" in message and "UTC" in message
    for settles in (DecisionKind.ABORT, DecisionKind.ALREADY_COMMITTED, DecisionKind.NOTHING_TO_COMMIT):
        assert refusal(resolved, Step.COMMIT, settles) is None


def test_the_deadline_is_the_latest_opened_transaction_plus_its_timeout() -> None:
    assert transactions_deadline_ms(prepared(), 1000) == NOW - 1000 + 1000
    empty = PreparedCheckpoint("orders", 7, "t", (), 0, 0, 0, 0.0)
    assert transactions_deadline_ms(empty, 1000) is None


def test_a_prefix_change_is_one_line_per_earlier_prefix_for_checkpoints_in_flight() -> None:
    views = [CheckpointView(claim(7)), CheckpointView(claim(8), prepared(8)),
             CheckpointView(claim(6), aborted=AbortedCheckpoint("orders", 6, "t", "r", "h")),
             CheckpointView(claim(9, pinned=None))]
    lines = prefix_changes(views, "new")
    assert list(lines) == ["old"]
    assert lines["old"].startswith("transactions.id_prefix changed from 'old' to 'new' while checkpoints 7, 8 were")
    assert "under 'old'" in lines["old"] and "under 'new' too" in lines["old"]
    assert prefix_changes(views, "old") == {}


# --- which prefixes recovery fences ---


def test_a_claimed_checkpoint_is_fenced_under_its_planned_prefix_and_lingering_ids_under_the_new_one() -> None:
    views = [CheckpointView(claim(7))]
    assert listing_scopes(views, "new", "kafka_a") == {None: ("new", "old")}
    open_ids = ["old-7-0", "old-7-5", "old-3-0", "new-2-0", "other-7-0"]
    plan = recovery_plan(views, "new", open_ids, 6, sink_conn_id="kafka_a")
    assert plan.mark_aborted == (7,)
    # Never new-7-*: the transactions were written under 'old'. old-3-0 belongs to no checkpoint in
    # flight: a prefix given up may have been reused, so only the current prefix is swept.
    assert plan.fence == {2: ("new-2-0",), 7: ("old-7-0", "old-7-1", "old-7-5")}
    assert plan.fence_elsewhere == {}


def test_a_prepared_checkpoint_under_its_old_prefix_keeps_its_committables() -> None:
    views = [CheckpointView(claim(7), prepared(7, "old"))]
    plan = recovery_plan(views, "new", ["old-7-0", "old-7-1", "old-7-4"], 6, sink_conn_id="kafka_a")
    assert plan.roll_forward == (7,) and plan.fence == {7: ("old-7-4",)}


def test_a_checkpoint_planned_on_another_sink_cluster_is_fenced_there() -> None:
    views = [CheckpointView(claim(7)),
             CheckpointView(claim(5), aborted=AbortedCheckpoint("orders", 5, "t", "r", "h")),
             CheckpointView(claim(4), prepared(4), CompletedCheckpoint("orders", 4, "t", {}, ()))]
    assert listing_scopes(views, "old", "kafka_b") == {None: ("old",), "kafka_a": ("old",)}
    plan = recovery_plan(views, "old", ["old-1-0"], 4, sink_conn_id="kafka_b",
                         open_elsewhere={"kafka_a": ["old-7-3", "old-1-1"]})
    assert plan.fence == {1: ("old-1-0",)}
    assert plan.fence_elsewhere == {"kafka_a": {5: ("old-5-0", "old-5-1"), 7: ("old-7-0", "old-7-1", "old-7-3")}}
    assert not plan.is_clean


def test_a_claim_without_pinned_values_is_recovered_under_the_current_prefix() -> None:
    plan = recovery_plan([CheckpointView(claim(7, pinned=None))], "new", ["new-7-3"], 6, sink_conn_id="kafka_b")
    assert plan.fence == {7: ("new-7-0", "new-7-1", "new-7-3")} and plan.fence_elsewhere == {}


# --- the Spark run's settings ---


def test_the_writer_settings_come_from_the_claim(monkeypatch) -> None:
    from lockstep.spark.job import values_for_run
    from lockstep.spark.writer_settings import writer_settings

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_A", json.dumps({"conn_type": "kafka",
                                                            "extra": {"bootstrap.servers": "a:9092"}}))
    now = spec(transactions={"id_prefix": "new", "timeout_ms": 120_000}, sink={"topic": "out2", "writer": "python"})
    view = CheckpointView(claim())
    settings = writer_settings(values_for_run(now, view).values, 7, {"linger.ms": 5}, pipeline="p")
    assert (settings.bootstrap, settings.id_prefix, settings.timeout_ms) == ("a:9092", "old", 900_000)
    assert (settings.sink_topic, settings.dead_letter_topic) == ("out", "dlq")
    assert settings.producer_config["linger.ms"] == 5 and "bootstrap.servers" not in settings.producer_config
    with pytest.raises(CheckpointError, match="checkpoint 7: sink.kafka_conn_id changed from 'kafka_a'"):
        values_for_run(spec(sink={"kafka_conn_id": "kafka_b"}), view)


# --- the coordinator, with an in-memory store and clusters ---


class FakeCluster:
    """The transaction side of one Kafka cluster: open ids, what DescribeTransactions reports."""

    def __init__(self, open_ids: list[str] = (), observed: dict[str, TransactionObservation] | None = None) -> None:
        self.open, self.observed = set(open_ids), dict(observed or {})
        self.fenced: list[str] = []
        self.committed: list[str] = []

    def __enter__(self) -> FakeCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def list_open(self, prefix: str) -> list[str]:
        return sorted(t for t in self.open if t.startswith(prefix))

    def fence(self, transactional_id: str) -> None:
        self.fenced.append(transactional_id)
        self.open.discard(transactional_id)

    def describe(self, transactional_ids: Iterable[str]) -> dict[str, TransactionObservation]:
        return {t: self.observed[t] for t in transactional_ids if t in self.observed}

    def commit(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        self.committed.append(transactional_id)
        self.observed[transactional_id] = replace(self.observed[transactional_id], state=TransactionState.COMPLETE_COMMIT)

    def abort(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        self.open.discard(transactional_id)
        self.observed[transactional_id] = replace(self.observed[transactional_id], state=TransactionState.COMPLETE_ABORT)


def ongoing(p: PreparedCheckpoint, started_ms: int = NOW - 1000) -> dict[str, TransactionObservation]:
    return {t.transactional_id: TransactionObservation(t.transactional_id, TransactionState.ONGOING, t.producer_id, t.epoch,
                                                       started_ms, PLANNED.timeout_ms) for t in p.transactions}


def pipeline(now_spec, store: FakeStore, clusters: dict[str, FakeCluster]) -> coordinator.Pipeline:
    def other(conn: str) -> FakeCluster:
        if conn not in clusters:
            raise TerminalError(f"connection {conn!r} is not defined")
        return clusters[conn]

    return coordinator.Pipeline(now_spec, store, None, {}, lambda: clusters[now_spec.sink.kafka_conn_id],
                                wall_ms=lambda: NOW, committer_for=other)


@pytest.fixture
def no_group_offsets(monkeypatch):
    monkeypatch.setattr(broker_offsets, "group_offsets", lambda *a: {})
    monkeypatch.setattr(broker_offsets, "publish_offsets", lambda *a: None)


def test_recovery_after_a_prefix_change_fences_under_the_old_prefix_and_logs_it_once(caplog) -> None:
    store = FakeStore(CheckpointView(claim(7)))
    here = FakeCluster(["old-7-0", "old-7-1", "new-3-0", "old-2-0"])
    p = pipeline(spec(transactions={"id_prefix": "new"}), store, {"kafka_a": here})
    with caplog.at_level(logging.WARNING, "lockstep.steps.recover"):
        coordinator.recover(p)
    assert sorted(here.fenced) == ["new-3-0", "old-7-0", "old-7-1"]
    assert here.list_open("old-7") == [] and here.list_open("new") == []
    assert store.view(7).status is CheckpointStatus.ABORTED
    changed = [r.message for r in caplog.records if "transactions.id_prefix changed from 'old' to 'new'" in r.message]
    assert len(changed) == 1 and "checkpoint 7" in changed[0]


def test_recovery_fences_a_checkpoint_on_the_cluster_it_was_planned_for() -> None:
    store = FakeStore(CheckpointView(claim(7)))
    old, new = FakeCluster(["old-7-0"]), FakeCluster(["old-1-0"])
    coordinator.recover(pipeline(spec(sink={"kafka_conn_id": "kafka_b"}), store, {"kafka_a": old, "kafka_b": new}))
    assert old.fenced == ["old-7-0", "old-7-1"] and new.fenced == ["old-1-0"]
    assert store.view(7).status is CheckpointStatus.ABORTED


def test_recovery_refuses_when_the_planned_sink_connection_is_gone() -> None:
    store = FakeStore(CheckpointView(claim(7)))
    new = FakeCluster()
    with pytest.raises(CheckpointError) as info:
        coordinator.recover(pipeline(spec(sink={"kafka_conn_id": "kafka_b"}), store, {"kafka_b": new}))
    message = str(info.value)
    assert message.startswith("checkpoint 7: it was planned with sink.kafka_conn_id 'kafka_a'")
    assert "Define connection 'kafka_a' again" in message and "until checkpoint 7 is settled" in message
    assert new.fenced == [] and store.view(7).status is CheckpointStatus.CLAIMED


def test_an_aborted_checkpoint_on_a_cluster_that_is_gone_is_not_fenced_again() -> None:
    aborted = CheckpointView(claim(7), aborted=AbortedCheckpoint("orders", 7, "t", "r", "h"))
    new = FakeCluster(["old-7-9"])  # the same id on the new cluster is not checkpoint 7's
    coordinator.recover(pipeline(spec(sink={"kafka_conn_id": "kafka_b"}), FakeStore(aborted), {"kafka_b": new}))
    assert new.fenced == ["old-7-9"]  # lingering under the current prefix, on the current cluster


def test_a_roll_forward_after_a_prefix_change_commits_the_recorded_transactions(no_group_offsets) -> None:
    ready = prepared(7, "old")
    here = FakeCluster(["old-7-0", "old-7-1"], ongoing(ready))
    store = FakeStore(CheckpointView(claim(7), ready))
    coordinator.recover(pipeline(spec(transactions={"id_prefix": "new"}), store, {"kafka_a": here}))
    assert here.committed == ["old-7-0", "old-7-1"] and here.fenced == []
    assert store.view(7).status is CheckpointStatus.COMPLETED


def test_a_commit_refuses_to_commit_on_the_sink_cluster_the_pipeline_left(no_group_offsets) -> None:
    ready = prepared(7, "old")
    old = FakeCluster(["old-7-0", "old-7-1"], ongoing(ready))
    store = FakeStore(CheckpointView(claim(7), ready))
    p = pipeline(spec(sink={"kafka_conn_id": "kafka_b"}), store, {"kafka_a": old, "kafka_b": FakeCluster()})
    with pytest.raises(CheckpointError, match="checkpoint 7: sink.kafka_conn_id changed from 'kafka_a' to 'kafka_b'"):
        coordinator.commit(p, 7)
    assert old.committed == [] and old.fenced == [] and store.view(7).status is CheckpointStatus.PREPARED

    # Let it abort: once its transactions timed out on the old cluster, the commit aborts it there.
    old.observed = ongoing(ready, started_ms=NOW - PLANNED.timeout_ms - 1)
    with pytest.raises(CheckpointError, match="aborted"):
        coordinator.commit(p, 7)
    assert old.fenced == ["old-7-0", "old-7-1"] and store.view(7).status is CheckpointStatus.ABORTED


# ---- the clock a claim pins (rules.pinned.pinned_clock) ---------------------------------------------------
def _attempt(cid: int, starts: dict[int, int], clock_ms: int | None, base: int | None = None) -> CheckpointView:
    from lockstep.model.state_manifest import StateManifest

    state = None if base is None else StateManifest(operator="window", key_groups=8, written_by=base, files={},
                                                    columns={}, watermark_ms=None, partitions={})
    ranges = tuple(OffsetRange("in", p, s, s + 10) for p, s in sorted(starts.items()))
    claim = CheckpointClaim("orders", cid, f"run-{cid}", "2026-11-27T00:00:00+00:00", ranges, "checkpoint",
                            state_base=state, clock_ms=clock_ms)
    return CheckpointView(claim)


def test_a_replay_of_an_aborted_checkpoint_takes_its_clock_the_newest_first():
    from lockstep.rules.pinned import pinned_clock

    starts = {"in:0": 5, "in:1": 7}
    earlier = [_attempt(4, {0: 5, 1: 7}, 111, base=3), _attempt(5, {0: 5, 1: 7}, 222, base=3)]
    assert pinned_clock(starts, 3, earlier, NOW) == (222, 5)
    assert pinned_clock(starts, 3, list(reversed(earlier)), NOW) == (222, 5), "by checkpoint id, not listing order"


@pytest.mark.parametrize("starts, base, why", [
    ({"in:0": 5, "in:1": 8}, 3, "another start offset"),
    ({"in:0": 5}, 3, "another set of partitions"),
    ({"in:0": 5, "in:1": 7}, 2, "another base state (a restore)"),
    ({"in:0": 5, "in:1": 7}, None, "no base state"),
])
def test_a_checkpoint_that_replays_no_aborted_one_reads_the_clock_now(starts, base, why):
    from lockstep.rules.pinned import pinned_clock

    assert pinned_clock(starts, base, [_attempt(4, {0: 5, 1: 7}, 111, base=3)], NOW) == (NOW, None), why


def test_an_aborted_claim_of_an_earlier_version_pins_nothing_to_inherit():
    from lockstep.rules.pinned import pinned_clock

    assert pinned_clock({"in:0": 5}, None, [_attempt(4, {0: 5}, None)], NOW) == (NOW, None)


def test_a_claim_round_trips_its_clock_and_reads_claimed_at_without_one():
    claim = _attempt(4, {0: 5}, 1_234).claim
    doc = claim.to_json()
    assert doc["clock_ms"] == 1_234 and CheckpointClaim.from_json(doc).clock == 1_234
    older = {k: v for k, v in doc.items() if k != "clock_ms"}
    assert CheckpointClaim.from_json(older).clock_ms is None
    assert CheckpointClaim.from_json(older).clock == 1_795_737_600_000, "claimed_at, 2026-11-27T00:00:00Z"
    with pytest.raises(MetadataError, match="clock_ms"):
        CheckpointClaim.from_json({**doc, "clock_ms": "soon"})


def test_a_claim_that_fires_timers_round_trips_and_counts_one_task_without_records():
    from dataclasses import replace as copy

    quiet = _attempt(4, {0: 5}, 1_234).claim
    quiet = copy(quiet, ranges=tuple(OffsetRange(r.topic, r.partition, r.start, r.start) for r in quiet.ranges))
    assert quiet.task_count == 0 and "fires_timers" not in quiet.to_json()
    firing = copy(quiet, fires_timers=True)
    assert firing.task_count == 1
    assert CheckpointClaim.from_json(firing.to_json()).fires_timers is True
    with pytest.raises(MetadataError, match="fires_timers"):
        CheckpointClaim.from_json({**firing.to_json(), "fires_timers": "yes"})
