"""A stateful checkpoint whose commit died after its first transaction, the broker then aborting the
rest, is repaired with no manual step (docs/semantics.md, *Keyed state*): completed with its state,
and the next checkpoint computes it again from its claim (ranges, base state, pinned clock) and writes
only the lost transactions' share. Windows, dedup and a state function, with both writers; `verify`
recomputes the outputs and the state from the whole input and finds nothing lost and nothing twice."""
from __future__ import annotations

import json
import time

import pytest

from lockstep.model.checkpoint import CheckpointStatus
from lockstep.model.offsets import TopicPartition

from ..support.data import read_committed
from .engine_helpers import make_pipeline, open_transactions, run, same_output, store, verify
from .test_state import DEDUP, SESSIONS, WINDOW, expected_windows, produce, stateful, window_outputs

OPERATORS = {"window": (WINDOW, "jvm"), "dedup": ({**DEDUP, "dedup": {**DEDUP["dedup"], "duplicates": "drop"}}, "python"),
             "function": (SESSIONS, "python")}


def test_a_stateful_partial_commit_is_repaired_for_every_operator_with_both_writers(tmp_path, bootstrap, unique,
                                                                                    monkeypatch, spark_connect):
    from lockstep.kafka.committer import TransactionCommitter
    from lockstep.model.failpoints import FailpointError
    from lockstep.model.transactions import TransactionState
    from lockstep.steps.coordinator import Pipeline, commit, plan
    from lockstep.steps.run import run_checkpoint

    produced = list(range(60))  # event times T0 .. T0+59 over both partitions (every tenth order is not JSON)
    pipelines, lost = {}, {}
    for name, (state, writer) in OPERATORS.items():
        (tmp_path / name).mkdir()
        # A transaction per source partition (sink.parallelism 2), and a 15 s timeout the broker soon applies.
        pipeline = make_pipeline(tmp_path / name, bootstrap, f"{unique}{name[0]}", partitions=2, timeout_ms=15_000,
                                 margin_ms=1000, writer=writer, parallelism=2)
        stateful(pipeline, state)
        produce(pipeline, produced)
        p = Pipeline.open(pipeline.spec())
        cid = plan(p, run_id=f"repair-{name}").claim.checkpoint_id
        run_checkpoint(p.spec, cid, p.store)
        prepared = p.store.view(cid).prepared
        assert prepared.output_tasks == 2 and len(prepared.transactions) == 2, (name, prepared)
        # Each record is in the transaction of its source partition's task (rules.output_tasks).
        assert [t.sources for t in prepared.transactions] == \
            [(TopicPartition(pipeline.source, 0),), (TopicPartition(pipeline.source, 1),)], name
        monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "commit.between_commits=raise")
        with pytest.raises(FailpointError):
            commit(p, cid)  # the first transaction is committed, then the commit dies
        monkeypatch.delenv("LOCKSTEP_FAILPOINTS")
        pipelines[name] = pipeline
        lost[name] = prepared.transactions[1]
    def timed_out(*transactions) -> None:
        deadline = time.monotonic() + 90
        with TransactionCommitter(bootstrap) as committer:
            for t in transactions:
                while committer.describe([t.transactional_id])[t.transactional_id].state != \
                        TransactionState.COMPLETE_ABORT:
                    assert time.monotonic() < deadline, f"the broker never timed {t.transactional_id} out"
                    time.sleep(0.5)

    timed_out(*lost.values())
    # The windowed pipeline goes one step further (what the soak found): the checkpoint that writes
    # checkpoint 1's lost share again, beside records of its own, is itself partially committed.
    windows = pipelines["window"]
    produce(windows, range(60, 80))
    p = Pipeline.open(windows.spec())
    second = plan(p, run_id="repair-window-2").claim  # its recovery repairs checkpoint 1
    assert store(windows).view(1).status_text == "completed after repair"
    assert second.checkpoint_id == 2 and second.rerun is not None and second.rerun.checkpoint == 1
    run_checkpoint(p.spec, 2, p.store)
    prepared = p.store.view(2).prepared
    assert len(prepared.transactions) == 2 and all(t.records for t in prepared.transactions), prepared
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "commit.between_commits=raise")
    with pytest.raises(FailpointError):
        commit(p, 2)
    monkeypatch.delenv("LOCKSTEP_FAILPOINTS")
    timed_out(prepared.transactions[1])  # it held checkpoint 1's share of task 1 too
    produced_by = {name: produced for name in pipelines}
    produced_by["window"] = list(range(80))

    for name, pipeline in pipelines.items():
        last = 2 if name == "window" else 1
        done = run(pipeline)  # the plan's recovery repairs the last checkpoint; the next writes its lost share
        assert done.returncode == 0, (name, done.stderr[-3000:])
        assert f"checkpoint {last}: completed after repair" in done.stderr, name
        s = store(pipeline)
        repaired, after = s.view(last), s.view(last + 1)
        assert repaired.status_text == "completed after repair" and repaired.completed.repair.rerun_tasks == (1,)
        assert repaired.completed.state == repaired.prepared.state, "the state stands"
        assert after.status is CheckpointStatus.COMPLETED and after.claim.rerun is not None
        assert after.claim.rerun.checkpoint == last and after.prepared.records_in == 0, "no input read as new"
        report = verify(pipeline)
        assert report["ok"] and report["complete"], (name, report)
        assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), (name, report)
        assert report["state_mismatched"] == 0, (name, report)
        assert open_transactions(pipeline) == [], name
        # Computed again, each checkpoint writes what its own transactions hold: the repaired one without
        # the lost share, the next one with it.
        assert same_output(pipeline)["compared"] == list(range(1, last + 2)), name

    state = store(windows).latest_completed().completed.state
    found = window_outputs(windows, produced_by["window"])
    assert sorted(found) == sorted(expected_windows(produced_by["window"], state.watermark_ms).items()), \
        "each window once, checkpoint 1's lost share too, which checkpoint 2 wrote again and lost"
    orders = [json.loads(m.value())["order_id"] for m in read_committed(bootstrap, pipelines["dedup"].sink)]
    assert sorted(orders) == sorted({f"o{i}" for i in produced if i % 10 != 7}), "each order once"
