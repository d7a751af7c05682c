"""Pipelined checkpoints on real services (lockstep.rules.pipelining): a checkpoint planned on top of one still
in flight starts from its ends and its prepared state; when that one aborts, it is aborted too, and the replay
over both ranges writes the same output and leaves the same state as the two attempts did."""
from __future__ import annotations

from collections import Counter

import pytest
import yaml
from confluent_kafka import Producer

from lockstep.errors import CheckpointError
from lockstep.model.checkpoint import CheckpointStatus
from lockstep.steps.coordinator import Pipeline, commit, plan
from lockstep.steps.run import run_checkpoint

from .engine_helpers import make_pipeline, open_transactions, store, verify
from .test_state import WINDOW, expected_windows, produce, stateful, window_outputs
from .test_state_clock import outputs


def test_a_pipelined_checkpoint_whose_predecessor_aborts_is_replayed_with_the_same_output_and_state(
        tmp_path, bootstrap, unique, spark_connect):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, mode="connect")
    stateful(pipeline, WINDOW)
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["checkpoints"]["pipelined"] = True
    pipeline.spec_path.write_text(yaml.safe_dump(doc))
    s = store(pipeline)
    produce(pipeline, range(0, 60))
    run_1 = Pipeline.open(pipeline.spec())
    first = plan(run_1, run_id="run-1").claim
    run_checkpoint(run_1.spec, first.checkpoint_id, run_1.store)
    assert s.view(first.checkpoint_id).status is CheckpointStatus.PREPARED

    # Run-2 starts while run-1 still carries checkpoint 1 (prepared, not committed): it plans on top of it.
    produce(pipeline, range(60, 120))
    run_2 = Pipeline.open(pipeline.spec())
    second = plan(run_2, run_id="run-2", run_alive=lambda run_id: run_id == "run-1").claim
    assert second.after == first.checkpoint_id
    assert {r.tp.key: r.start for r in second.ranges} == first.end_offsets
    assert second.state_base == s.view(first.checkpoint_id).prepared.state
    run_checkpoint(run_2.spec, second.checkpoint_id, run_2.store)
    on_top = s.view(second.checkpoint_id)
    assert on_top.status is CheckpointStatus.PREPARED

    # Another attempt fences checkpoint 1's transactions: its commit aborts it, and checkpoint 2's with it.
    for t in s.view(first.checkpoint_id).prepared.transactions:
        Producer({"bootstrap.servers": pipeline.bootstrap, "transactional.id": t.transactional_id}).init_transactions(30)
    with pytest.raises(CheckpointError, match=f"checkpoint {first.checkpoint_id}: aborted"):
        commit(run_1, first.checkpoint_id)
    with pytest.raises(CheckpointError, match=f"checkpoint {second.checkpoint_id}: aborted: checkpoint "
                                              f"{first.checkpoint_id}, which it was planned on top of while in "
                                              "flight, was aborted"):
        commit(run_2, second.checkpoint_id)
    assert s.view(second.checkpoint_id).status is CheckpointStatus.ABORTED
    assert open_transactions(pipeline) == []

    # The replay reads both ranges in one checkpoint, with checkpoint 1's pins.
    run_3 = Pipeline.open(pipeline.spec())
    replay = plan(run_3, run_id="run-3", run_alive=lambda run_id: False).claim
    assert replay.after is None and replay.replays == first.checkpoint_id and replay.clock_ms == first.clock_ms
    assert [(r.tp.key, r.start) for r in replay.ranges] == [(r.tp.key, r.start) for r in first.ranges]
    assert replay.end_offsets == second.end_offsets
    run_checkpoint(run_3.spec, replay.checkpoint_id, run_3.store)
    commit(run_3, replay.checkpoint_id)
    again = s.view(replay.checkpoint_id)
    assert again.status is CheckpointStatus.COMPLETED

    # The same output: what the two aborted attempts wrote, the replay wrote once (read_uncommitted sees all).
    for topic in (pipeline.sink, pipeline.dead_letters):
        attempts = outputs(pipeline.bootstrap, topic, first.checkpoint_id) + \
            outputs(pipeline.bootstrap, topic, second.checkpoint_id)
        assert outputs(pipeline.bootstrap, topic, replay.checkpoint_id) == attempts and attempts, topic
    # The same state: the replay's committed state is what checkpoint 2 had prepared on top of checkpoint 1's.
    # Only when each partition last had records differs: it is the pinned clock of the checkpoint that read
    # them, checkpoint 2's there and checkpoint 1's (reused by the replay) here.
    mine, theirs = again.completed.state, on_top.prepared.state
    assert (mine.watermark_ms, mine.keys, mine.rows) == (theirs.watermark_ms, theirs.keys, theirs.rows)
    assert {k: t.max_event_ms for k, t in mine.partitions.items()} == \
        {k: t.max_event_ms for k, t in theirs.partitions.items()}
    assert {t.active_at_ms for t in mine.partitions.values()} == {first.clock_ms}
    assert {t.active_at_ms for t in theirs.partitions.values()} == {second.clock_ms}
    files = s.state_files()
    assert sorted(map(str, files.read_state(mine).to_pylist())) == sorted(map(str, files.read_state(theirs).to_pylist()))
    # And both right: every window exactly once with its exact count, the state verify recomputes.
    produced = list(range(120))
    found = window_outputs(pipeline, produced)
    assert [k for k, n in Counter(key for key, _ in found).items() if n > 1] == []
    assert dict(found) == expected_windows(produced, mine.watermark_ms)
    report = verify(pipeline)
    assert report["ok"] and (report["lost"], report["duplicated"], report["state_mismatched"]) == (0, 0, 0), report
