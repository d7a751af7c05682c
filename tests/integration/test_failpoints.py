"""Crash at every named failpoint, run again, and the output is still exactly once
with no transaction left open on the broker (issue: failpoints at every step)."""
from __future__ import annotations

import pytest

from lockstep.model.checkpoint import CheckpointStatus
from lockstep.model.failpoints import CRASH_EXIT_CODE, FAILPOINTS, ICEBERG_FAILPOINTS, STATE_FAILPOINTS
from lockstep.model.output_contract import WRITER_FAILPOINTS

from ..support.data import produce_orders
from .engine_helpers import make_pipeline, open_transactions, run, store, verify


# A stateless pipeline never reaches the state's failpoints: test_state.py crashes a stateful one at them, and
# test_iceberg.py one with an Iceberg table at the table's.
@pytest.mark.parametrize("name", [f for f in FAILPOINTS if f not in STATE_FAILPOINTS and f not in ICEBERG_FAILPOINTS])
def test_crash_at_failpoint_then_recover_exactly_once(name, tmp_path, bootstrap, unique):
    # A writer's crash halts the JVM its task runs in, as a killed executor does: in submit mode
    # that is the checkpoint's own; in connect mode it would be the shared server. The others crash
    # the process that plans, drives or commits: connect mode, the default, runs them.
    mode = "submit" if name in WRITER_FAILPOINTS else None
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, mode=mode)
    produce_orders(pipeline, 100)

    crashed = run(pipeline, failpoints=f"{name}=crash")
    # The CLI itself dies with the failpoint's code, or reports the Spark job's death.
    assert crashed.returncode in (CRASH_EXIT_CODE, 2), crashed.stderr[-2000:]
    if crashed.returncode == 2:
        assert "checkpoint 1" in crashed.stderr and "Spark run failed" in crashed.stderr

    produce_orders(pipeline, 30, start=100)
    if mode == "submit":  # what recovers is the plan, in the CLI: the next run needs no JVM of its own
        pipeline.rewrite(spark={"mode": "connect"})
    recovered = run(pipeline)  # recovers checkpoint 1 (roll forward or fence+abort), then one more
    assert recovered.returncode == 0, recovered.stderr[-3000:]

    s = store(pipeline)
    statuses = {i: s.view(i).status for i in s.checkpoint_ids()}
    assert statuses[max(statuses)] is CheckpointStatus.COMPLETED
    assert CheckpointStatus.CLAIMED not in statuses.values() and CheckpointStatus.PREPARED not in statuses.values()
    if name == "plan.after_claim":  # the process died with nothing to say why: the reason says what is known
        assert "its run ended before the prepared metadata was written" in s.view(1).aborted.reason
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["covered_offsets"] == 130
    assert open_transactions(pipeline) == []


def test_raise_mode_fails_loudly_and_recovers(tmp_path, bootstrap, unique):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    produce_orders(pipeline, 50)
    failed = run(pipeline, failpoints="commit.between_commits=raise")
    assert failed.returncode != 0 and "failpoint commit.between_commits raised" in failed.stderr
    assert run(pipeline).returncode == 0
    assert verify(pipeline)["ok"]


def test_unknown_failpoint_is_refused(tmp_path, bootstrap, unique):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=1)
    result = run(pipeline, failpoints="no.such.point=crash")
    assert result.returncode != 0 and "unknown failpoint 'no.such.point'" in result.stderr
