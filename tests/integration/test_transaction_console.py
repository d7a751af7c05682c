"""The transaction console on the real platform: a crashed run leaves a prepared checkpoint's
transactions open; ``lockstep transactions`` maps them to the checkpoint and its tasks and shows
what they hold back; ``resolve --dry-run`` changes nothing; ``resolve`` settles them as recovery
would; a foreign transaction on the sink is reported, never touched."""
from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime

from confluent_kafka import Producer

from lockstep.kafka.committer import TransactionCommitter
from lockstep.model.checkpoint import CheckpointClaim, CheckpointStatus
from lockstep.model.failpoints import CRASH_EXIT_CODE
from lockstep.model.transactions import TransactionState
from lockstep.rules.run_ownership import cli_run_id

from ..support.data import produce_orders
from .engine_helpers import lockstep, make_pipeline, open_transactions, run, store, verify


def _console(pipeline, *args: str) -> dict:
    result = lockstep("transactions", *args, "--spec", str(pipeline.spec_path), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _statuses(pipeline) -> dict[int, CheckpointStatus]:
    s = store(pipeline)
    return {i: s.view(i).status for i in s.checkpoint_ids()}


def test_console_lists_maps_and_resolves_a_crashed_checkpoint(tmp_path, bootstrap, unique):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    produce_orders(pipeline, 100)
    crashed = run(pipeline, failpoints="job.after_prepared=crash")
    assert crashed.returncode in (CRASH_EXIT_CODE, 2), crashed.stderr[-2000:]
    assert _statuses(pipeline) == {1: CheckpointStatus.PREPARED}
    ours = open_transactions(pipeline)
    assert ours, "the crashed run left no transaction open"

    foreign_id = f"foreign-{unique}"
    foreign = Producer({"bootstrap.servers": bootstrap, "transactional.id": foreign_id})
    foreign.init_transactions(30)
    foreign.begin_transaction()
    foreign.produce(pipeline.sink, b"not the pipeline's", partition=0)
    foreign.flush(30)
    try:
        listed = _console(pipeline)["transactions"]
        mine = [r for r in listed if not r["foreign"]]
        assert sorted(r["transactional_id"] for r in mine) == ours
        for r in mine:
            assert (r["checkpoint_id"], r["checkpoint_status"], r["state"], r["action"]) == (1, "prepared", "Ongoing",
                                                                                            "commit")
            assert r["transactional_id"] == f"{pipeline.prefix}-1-{r['task_index']}"
            assert r["run_id"].startswith("cli-") and 0 < r["time_left_ms"] <= 900_000
            assert {h["partition"].rsplit(":", 1)[0] for h in r["partitions"]} <= {pipeline.sink, pipeline.dead_letters}
        sink_holds = [h for r in mine for h in r["partitions"] if h["partition"].startswith(f"{pipeline.sink}:")]
        assert sink_holds and all(h["pinned"] and h["held_back"] > 0 for h in sink_holds)
        [other] = [r for r in listed if r["foreign"]]
        assert (other["transactional_id"], other["state"], other["checkpoint_id"]) == (foreign_id, "Ongoing", None)
        assert [h["partition"] for h in other["partitions"]] == [f"{pipeline.sink}:0"]
        assert other["partitions"][0]["pinned"]
        # The Checkpoints page's panel reads the same rows (with its own store and short timeouts).
        from lockstep_airflow.overview import page_store, read_open_transactions

        spec = pipeline.spec()
        page = read_open_transactions(spec, page_store(spec), datetime.now(UTC))
        assert sorted(r.transactional_id for r in page) == sorted([*ours, foreign_id])

        text = lockstep("transactions", "resolve", "--dry-run", "--spec", str(pipeline.spec_path))
        assert text.returncode == 0, text.stderr[-3000:]
        assert "dry run, nothing changed" in text.stdout
        assert "checkpoint 1 (prepared, run cli-" in text.stdout and "roll forward: commit" in text.stdout
        assert f"foreign transaction {foreign_id}: left alone" in text.stdout
        assert open_transactions(pipeline) == ours and _statuses(pipeline) == {1: CheckpointStatus.PREPARED}

        resolved = lockstep("transactions", "resolve", "--spec", str(pipeline.spec_path))
        assert resolved.returncode == 0, resolved.stderr[-3000:]
        assert "checkpoint 1: now completed" in resolved.stdout
        assert open_transactions(pipeline) == [] and _statuses(pipeline) == {1: CheckpointStatus.COMPLETED}
        with TransactionCommitter(bootstrap) as committer:
            assert committer.describe([foreign_id])[foreign_id].state == TransactionState.ONGOING
        assert [r["transactional_id"] for r in _console(pipeline)["transactions"]] == [foreign_id]
    finally:
        foreign.abort_transaction(30)

    produce_orders(pipeline, 30, start=100)
    assert run(pipeline).returncode == 0
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["covered_offsets"]) == (0, 0, 130), report


def test_resolve_fences_a_claimed_checkpoint_and_marks_it_aborted(tmp_path, bootstrap, unique):
    # The writer's crash halts its JVM: the checkpoint's own spark-submit, not a shared Connect server.
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, mode="submit")
    produce_orders(pipeline, 100)
    crashed = run(pipeline, failpoints="job.after_flush=crash")  # flushed, the committable never returned
    assert crashed.returncode in (CRASH_EXIT_CODE, 2), crashed.stderr[-2000:]
    assert _statuses(pipeline) == {1: CheckpointStatus.CLAIMED}
    ours = open_transactions(pipeline)
    assert ours, "the crashed run left no transaction open"

    listed = _console(pipeline)["transactions"]
    assert sorted(r["transactional_id"] for r in listed) == ours
    assert {(r["checkpoint_id"], r["checkpoint_status"], r["action"], r["foreign"]) for r in listed} == {
        (1, "claimed", "fence", False)}
    assert all(r["held_back"] > 0 for r in listed)

    dry = lockstep("transactions", "resolve", "--dry-run", "--spec", str(pipeline.spec_path))
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "checkpoint 1 (claimed, run cli-" in dry.stdout and f"fence {pipeline.prefix}-1-0, {pipeline.prefix}-1-1" \
        in dry.stdout and "mark it aborted" in dry.stdout
    assert open_transactions(pipeline) == ours and _statuses(pipeline) == {1: CheckpointStatus.CLAIMED}

    resolved = lockstep("transactions", "resolve", "--spec", str(pipeline.spec_path))
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    assert "checkpoint 1: fenced 2 transactional ids; now aborted" in resolved.stdout
    assert open_transactions(pipeline) == [] and _statuses(pipeline) == {1: CheckpointStatus.ABORTED}
    # The next run replays checkpoint 1's ranges: test_failpoints checks that after job.after_flush.


def test_resolve_refuses_while_a_run_is_in_flight(tmp_path, bootstrap, unique):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=1)
    alive = cli_run_id(socket.gethostname(), os.getpid(), "inflight")  # this test's own process: alive
    store(pipeline).claim(CheckpointClaim(pipeline.name, 1, alive, datetime.now(UTC).isoformat(), (),
                                          "earliest"))
    refused = lockstep("transactions", "resolve", "--spec", str(pipeline.spec_path))
    assert refused.returncode == 2
    last = refused.stderr.strip().splitlines()[-1]
    assert "checkpoint 1 is still in flight" in last and "nothing was resolved" in last
    assert _statuses(pipeline) == {1: CheckpointStatus.CLAIMED}
    listed = lockstep("transactions", "--spec", str(pipeline.spec_path))
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert "resolve is refused now: checkpoint 1 is still in flight" in listed.stdout
