"""The pure parts of dead-letter replay: the derived pipeline, the selection, a dead letter's
provenance, what completed replays count for dedup, and verify's accounting."""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from lockstep.errors import CheckpointError, TerminalError
from lockstep.model.checkpoint import PreparedCheckpoint, PreparedTransaction, Repair
from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.model.output_contract import (
    CHECKPOINT_HEADER,
    ERROR_HEADER,
    ORIGINAL_SIZE_HEADER,
    REPLAY_HEADER,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)
from lockstep.model.transactional_ids import parse_transactional_id, transactional_id
from lockstep.model.transactions import TransactionObservation, TransactionState
from lockstep.ops.verify import account
from lockstep.rules.commit_decision import DecisionKind, decide_commit
from lockstep.spark.conf import submit_command
from lockstep.spark.dead_letter_replay import (
    FROM_START,
    REPLAYED_PART,
    SELECTION_PART,
    Replayed,
    Selection,
    already_in_sink,
    completed_replays,
    fed_counter,
    last_unselective,
    parse_dead_letter,
    replay_spec,
)
from lockstep.spec import parse_spec


def spec():
    return parse_spec({
        "name": "orders",
        "source": {"topics": ["in"], "kafka_conn_id": "kafka_src", "consumer_group": "g"},
        "transform": "lockstep_examples.orders:enrich",
        "sink": {"topic": "out", "dead_letter_topic": "dlq", "kafka_conn_id": "kafka_sink", "writer": "python"},
        "checkpoints": {"store": "s3://lockstep/p", "max_records": 500},
        "transactions": {"id_prefix": "tx", "timeout_ms": 900_000},
    }, "orders.yaml")


def test_replay_spec_reads_the_dead_letters_and_writes_where_the_pipeline_writes():
    original = spec()
    r = replay_spec(original)
    assert (r.name, r.replay_of, r.path) == ("orders-replay", "orders", "orders.yaml")
    assert r.source.topics == ("dlq",) and r.source.kafka_conn_id == "kafka_sink"
    assert (r.source.consumer_group, r.source.auto_offset_reset) == ("g-replay", "earliest")
    assert r.sink == original.sink and r.transform == original.transform
    assert r.checkpoint_location == ("lockstep", "p/orders-replay")
    assert r.transactions.id_prefix == "tx-replay" and r.checkpoints.max_records == 500
    assert r.checkpoints.retain > 10**12  # retention would drop the dedup set of old replays
    # Neither recovery takes the other's transactions for its own.
    assert parse_transactional_id("tx", transactional_id("tx-replay", 3, 0)) is None
    with pytest.raises(TerminalError, match="already the replay pipeline"):
        replay_spec(r)


def test_a_replay_checkpoint_is_submitted_as_one(built_jars):
    assert submit_command("o.yaml", 4, "local[2]", {}, True)[-3:] == ["--checkpoint-id", "4", "--replay"]
    assert "--replay" not in submit_command("o.yaml", 4, "local[2]", {})


def test_selection_start_and_refusals():
    assert Selection(checkpoint=3).restore(None, None) == FROM_START
    assert Selection(since="2026-11-20T10:00:00Z").restore(5, 5) == "time:2026-11-20T10:00:00Z"
    assert Selection().restore(None, None) is None  # first replay: the topic's start (earliest)
    assert Selection().restore(4, 4) is None  # after the latest completed one
    # After a selective replay, an unselective one goes on from the last unselective one...
    assert Selection().restore(4, 6) == "checkpoint:4"
    # ...or from the start when there was none: what the selective one passed over stays due.
    assert Selection().restore(None, 6) == FROM_START
    with pytest.raises(TerminalError, match="no zone"):
        Selection(since="2026-11-20T10:00:00")
    with pytest.raises(TerminalError, match="not both"):
        Selection(checkpoint=1, since="2026-11-20T10:00:00Z")
    with pytest.raises(TerminalError, match="start at 1"):
        Selection(checkpoint=0)
    assert Selection.from_json(Selection(checkpoint=2).to_json()) == Selection(checkpoint=2)


def letter(**extra: bytes):
    headers = [(SOURCE_TOPIC, b"in"), (SOURCE_PARTITION, b"1"), (SOURCE_OFFSET, b"42"), (CHECKPOINT_HEADER, b"7"),
               (ERROR_HEADER, b"negative amount"), *extra.items()]
    return parse_dead_letter(headers, 1_795_168_800_000, "dlq:0@9")


def test_a_dead_letter_names_its_original_record():
    dl = letter()
    assert (dl.original, dl.checkpoint, dl.error, dl.too_large, dl.replayed_by) == \
        (("in", 1, 42), 7, "negative amount", False, None)
    again = letter(**{REPLAY_HEADER: b"2"})
    assert again.replayed_by == 2
    assert letter(**{ORIGINAL_SIZE_HEADER: b"5000"}).too_large
    with pytest.raises(TerminalError, match="dlq:0@9 has no valid provenance"):
        parse_dead_letter([(SOURCE_TOPIC, b"in")], 0, "dlq:0@9")
    # --checkpoint 7 takes the pipeline's own dead letters of checkpoint 7, not one a replay wrote again
    assert Selection(checkpoint=7).takes(dl) and not Selection(checkpoint=7).takes(again)
    assert not Selection(checkpoint=8).takes(dl)
    assert Selection(since="2026-11-20T10:00:00Z").takes(dl)  # 1_795_168_800_000 is that moment
    assert not Selection(since="2026-11-20T10:00:00.001Z").takes(dl)


@dataclass
class Txn:
    transactional_id: str
    task_index: int


@dataclass
class Prepared:
    transactions: tuple[Txn, ...]


@dataclass
class Completed:
    repair: Repair | None = None


@dataclass
class View:
    claim: Any
    completed: Completed | None
    prepared: Prepared | None = None


@dataclass
class Claim:
    ranges: tuple


class FakeStore:
    """Only what the replay bookkeeping reads: ids, views and sidecars."""

    pipeline = "orders-replay"

    def __init__(self) -> None:
        self.views: dict[int, View] = {}
        self.parts: dict[tuple[int, str], dict] = {}

    def add(self, cid: int, completed: bool, replayed: Replayed | None, selection: Selection = Selection(),
            records: int = 5, tasks: int = 1, lost: tuple[int, ...] = ()) -> None:
        """Replay checkpoint ``cid``, written by ``tasks`` transactions (``r-<cid>-<task>``), of which a
        repair lost those of the tasks ``lost``."""
        ranges = (OffsetRange("dlq", 0, 0, records),)
        txns = tuple(Txn(f"r-{cid}-{t}", t) for t in range(tasks))
        repair = Repair({f"r-{cid}-{t}": "timed out" for t in lost}, ranges) if lost else None
        self.views[cid] = View(Claim(ranges), Completed(repair) if completed else None, Prepared(txns))
        self.parts[(cid, SELECTION_PART)] = selection.to_json()
        if replayed is not None:
            self.parts[(cid, REPLAYED_PART)] = replayed.to_json()

    def checkpoint_ids(self):
        return iter(sorted(self.views))

    def view(self, cid):
        return self.views.get(cid)

    def sidecar(self, cid, part):
        return self.parts.get((cid, part))


A, B, C = ("in", 0, 1), ("in", 0, 2), ("in", 1, 5)


def test_only_completed_replays_count_for_dedup():
    store = FakeStore()
    store.add(1, True, Replayed(fed=(A, B), to_sink=(A,)))  # B rejected again: still due
    store.add(2, False, Replayed(fed=(B, C), to_sink=(B, C)))  # prepared or aborted: decides nothing
    store.add(3, True, None, Selection(checkpoint=1), records=0)  # empty: nothing to account for
    replays = completed_replays(store)
    assert sorted(replays) == [1] and already_in_sink(replays) == {A}
    assert fed_counter(replays) == Counter({A: 1, B: 1})
    assert last_unselective(store) == 1
    store.add(4, True, None)  # completed with records but no replayed.json: refuse, do not guess
    with pytest.raises(CheckpointError, match="replayed.json is missing"):
        completed_replays(store)


def test_replayed_round_trips():
    r = Replayed(fed=(A, B), to_sink=(A,), skipped_duplicates=2, skipped_too_large=1, not_selected=3,
                 warnings=("w",), read=9, skipped_tables=4)
    assert Replayed.from_json(r.to_json()) == r
    by_task = dataclasses.replace(r, tasks={0: (A,), 3: (B,)})
    assert Replayed.from_json(json.loads(json.dumps(by_task.to_json()))) == by_task


D = ("in", 1, 6)


def test_a_repaired_replay_counts_only_what_its_kept_transactions_wrote():
    """Checkpoint 1's transaction of task 1 (C, D to the sink; B dead-lettered again) was lost: those
    records never reached the sink, so they are due again and nothing expects their outputs."""
    store = FakeStore()
    written = Replayed(fed=(A, B, C, D), to_sink=(A, C, D), tasks={0: (A,), 1: (B, C, D)})
    store.add(1, True, written, tasks=2, lost=(1,))
    replays = completed_replays(store)
    assert already_in_sink(replays) == {A}, "the next replay writes C and D, which the sink does not hold"
    assert fed_counter(replays) == Counter({A: 1}), "no output of B, C, D is expected of checkpoint 1"
    store.add(2, True, Replayed(fed=(B, C, D), to_sink=(C, D), tasks={0: (B, C), 1: (D,)}), tasks=2)
    replays = completed_replays(store)
    assert already_in_sink(replays) == {A, C, D} and fed_counter(replays) == Counter({A: 1, B: 1, C: 1, D: 1})


def test_without_tasks_leaves_out_the_lost_tasks_records_only():
    r = Replayed(fed=(A, B, C), to_sink=(A, C), tasks={0: (A, B), 2: (C,)})
    assert r.without_tasks(set()) == r
    kept = r.without_tasks({0})
    assert (kept.fed, kept.to_sink, kept.tasks) == ((C,), (C,), {2: (C,)})
    with pytest.raises(ValueError, match="not recorded"):
        Replayed(fed=(A,), to_sink=(A,)).without_tasks({0})


def test_a_repaired_replay_of_an_earlier_version_is_taken_as_written_with_a_warning(caplog):
    store = FakeStore()
    store.add(1, True, Replayed(fed=(A, B), to_sink=(A, B)), tasks=2, lost=(1,))
    assert already_in_sink(completed_replays(store)) == {A, B}
    assert "did not record which transaction wrote which record" in caplog.text


def test_a_partial_commit_of_a_replay_is_repaired_by_giving_back_its_whole_range():
    """A replay's transactions carry the ORIGINAL partitions, not the dead-letter ranges it read: the
    general rule finds them outside the claim and gets stuck; the replay's dedup makes re-reading
    everything exact."""
    txn = lambda task, tp: PreparedTransaction(f"r-7-{task}", 100 + task, 0, (TopicPartition("out", 0),), 2, 0,
                                               task, 1_000, (TopicPartition(*tp),))
    prepared = PreparedCheckpoint("orders-replay", 7, "t", (txn(0, ("in", 0)), txn(1, ("in", 1))), 4, 4, 0, 1.0)
    ranges = (OffsetRange("dlq", 0, 10, 14), OffsetRange("dlq", 1, 3, 3))
    observed = {"r-7-0": TransactionObservation("r-7-0", TransactionState.COMPLETE_COMMIT, 100, 0, 60_000, 0, ()),
                "r-7-1": TransactionObservation("r-7-1", TransactionState.COMPLETE_ABORT, 101, 0, 60_000, 0, ())}
    stuck = decide_commit(prepared, observed, 2_000, 0, ranges)
    assert stuck.kind is DecisionKind.STUCK and "does not cover" in stuck.message
    repaired = decide_commit(prepared, observed, 2_000, 0, ranges, deduplicated=True)
    assert repaired.kind is DecisionKind.REPAIR and repaired.abort == ("r-7-1",)
    assert repaired.replay == (OffsetRange("dlq", 0, 10, 14),), "every non-empty range of the claim goes back"


def test_accounting_of_replayed_outputs():
    expected = Counter({A: 2, B: 1})  # A fed by two replay checkpoints (rejected, then fixed), B by one
    ok = account(expected, Counter({A: 2, B: 1}), Counter({A: 1, B: 1}))
    assert (ok.checked, ok.expected, ok.lost, ok.duplicated, ok.unexpected, ok.sink_twice) == (3, 3, [], [], [], [])
    bad = account(expected, Counter({A: 1, B: 2, C: 1}), Counter({A: 1, B: 2}))
    assert (bad.lost, bad.duplicated, bad.unexpected, bad.sink_twice) == ([A], [B], [C], [B])


def test_dead_letter_replay_of_a_stateful_pipeline_is_refused_with_the_way_out():
    import argparse
    import dataclasses

    from lockstep.cli.commands import _deadletters_replay
    from lockstep.spec import DedupSpec, EventTime, StateSpec

    stateful = dataclasses.replace(spec(), state=StateSpec(
        key_groups=4, event_time=EventTime("created_at", 0, 60_000), dedup=DedupSpec("order_id", 60_000, "drop")))
    with pytest.raises(TerminalError, match="is stateful.*restore from a savepoint"):
        _deadletters_replay(stateful, Selection(), argparse.Namespace(json=False))
