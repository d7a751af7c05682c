"""The short soak of `make test`: the soak driver on the session's cluster (3 brokers, Spark
standalone with a Spark Connect server on it, MinIO behind the fault proxy), in connect mode, the
default path, against the stateful pipeline (windows per customer, keyed state in S3), then the
independent audit. A stateful checkpoint passes every moment a stateless one does, and its state's
too: the faults of issue 43 each land once, the state's upload (a compaction's file first), and its
garbage collection included. The long ones (>= 200 faults) are `make soak` (stateless, writes
docs/RELIABILITY.md) and `make soak-state` (docs/RELIABILITY-state.md)."""
from __future__ import annotations

import sys

import pytest

from lockstep_soak.driver import Soak, SoakConfig
from lockstep_soak.schedule import GC_ANCHOR, UPLOAD_ANCHOR, FaultKind

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

#: The kinds of the default path's faults: a kill of the run, of the Connect server, of the broker the
#: commit's EndTxns go to, a commit killed between its transactions (the rest then timed out by the
#: broker and repaired), a duplicate attempt of the run, and S3 gone, slow or failing. Not here: a broker
#: lost while a run produces (test_cluster.py kills the coordinator and the sink leader), and a commit
#: after the transaction timeout (test_engine.py; in a soak it waits the timeout out).
KINDS = (FaultKind.KILL_RUN, FaultKind.KILL_CONNECT, FaultKind.BROKER_COMMIT, FaultKind.PARTIAL_COMMIT,
         FaultKind.DUPLICATE_RUN, FaultKind.S3_RESTART, FaultKind.S3_SLOW, FaultKind.S3_ERRORS)
#: 10 cycles, 8 with a fault (every 4th is clean): each kind once. 60 orders a cycle move event time on
#: by 30 s; with windows of 240 s (T0 is 80 s into one) the first window fires in cycle 5, the next not
#: before cycle 13. Seed 33's schedule (`schedule.anchor_faults`) then has: S3 restarted at the state's
#: upload in cycle 1 and failing in cycle 4; the partial commit in cycle 5, whose checkpoint writes the
#: fired windows into both its transactions, so one is lost to the broker's timeout and repaired; a
#: kill at the upload in cycle 8, and S3 slow at the next commit's garbage collection of that killed
#: checkpoint's file. A tiny max_delta_ratio compacts every key group that gets a delta, so the
#: uploads of cycles 1 and 4 begin with a compaction's file.
SEED = 33
CYCLES = 10
RECORDS = 60
WINDOW_S = 240
MAX_DELTA_RATIO = 0.001
#: The kinds the default path added (issue 43): each must land, not only be planned.
NEW_KINDS = {FaultKind.KILL_CONNECT, FaultKind.BROKER_COMMIT, FaultKind.PARTIAL_COMMIT, FaultKind.DUPLICATE_RUN}


def test_short_stateful_soak_with_every_fault_kind_loses_and_duplicates_nothing(cluster, tmp_path):
    config = SoakConfig(work_dir=tmp_path, seed=SEED, cycles=CYCLES, records_per_cycle=RECORDS, bad_per_cycle=4,
                        timeout_ms=30_000, commit_margin_ms=8_000, faults_per_cycle=1, kinds=KINDS,
                        hold_s=(1.0, 4.0), stateful=True, window_s=WINDOW_S, max_delta_ratio=MAX_DELTA_RATIO)
    server_was_running = cluster.running("spark-connect")
    # What the session's cluster runs before the faults (brokers, Spark, S3; no Schema Registry: tests/conftest.py).
    services = [s for s in cluster.services() if s not in ("airflow", "spark-connect") and cluster.running(s)]
    result = Soak(cluster, config, out=sys.stderr).run()
    doc = result.to_json()
    replay = (f"replay: lockstep soak --stateful --seed {SEED} --cycles {CYCLES} --records {RECORDS} --timeout-ms 30000 "
              f"--faults-per-cycle 1 --hold 1,4 --window-s {WINDOW_S} --max-delta-ratio {MAX_DELTA_RATIO} "
              f"--faults {','.join(k.value for k in KINDS)}")
    audit = result.audit
    assert result.stuck is None, f"{result.stuck} ({replay})"
    assert audit is not None and audit.state is not None, doc
    # Exactly once: every input record accounted for, every window once with its value, the state as recomputed.
    assert audit.lost == [] and audit.duplicated == [], f"{doc['audit']} ({replay})"
    assert audit.unexpected == [] and audit.mismatched == [], f"{doc['audit']} ({replay})"
    assert audit.uncovered == 0 and audit.produced == CYCLES * RECORDS
    state = audit.state
    assert state.complete and state.windows_expected > 0 and state.windows_found == state.windows_expected, doc["audit"]
    assert (state.lost, state.duplicated, state.unexpected, state.wrong, state.late_unplanned) == (0, 0, 0, 0, 0), doc
    assert state.state_equal and state.state_rows, doc["audit"]
    assert not result.lso_open_at_end and result.lso_after_last_fault_s <= 40, doc
    # The faults really happened.
    assert doc["config"]["mode"] == "connect" and {i.fault.kind for i in result.injected} == set(KINDS)
    landed = [i for i in result.injected if i.injected_at is not None]
    assert NEW_KINDS <= {i.fault.kind for i in landed}, doc["faults"]
    # The state's moments: S3 faults while the state's files were uploaded, and while the commit collected
    # the files of the checkpoint the kill before it failed.
    at_upload = [i for i in landed if i.fault.anchor == UPLOAD_ANCHOR]
    assert any(i.fault.kind in (FaultKind.S3_RESTART, FaultKind.S3_SLOW, FaultKind.S3_ERRORS) for i in at_upload), doc
    assert any(i.fault.kind is FaultKind.KILL_RUN for i in at_upload), doc["faults"]
    assert [i.fault.kind for i in landed if i.fault.anchor == GC_ANCHOR] == [FaultKind.S3_SLOW], doc["faults"]
    # Past the first window's fire every checkpoint compacts: an upload interrupted there meets a compaction.
    assert any(f"{UPLOAD_ANCHOR} (compaction)" in i.target for i in at_upload), [i.target for i in at_upload]
    # Each landed fault was recovered from: a later checkpoint completed.
    assert all(i.recovery_s is not None for i in landed), doc["faults"]
    # The partial commit's lost transaction is repaired by the next cycles.
    partial = [i for i in landed if i.fault.kind is FaultKind.PARTIAL_COMMIT]
    assert partial and all(i.checkpoint is not None and i.status == "completed after repair"
                           and i.checkpoint in result.repaired for i in partial), doc["faults"]
    assert sum(1 for c in result.cycles if not c.ok) >= 1, "no fault made a checkpoint fail"
    # Every bad record is accounted for in the dead-letter topic, with its reason; an order produced late
    # is dead-lettered as late once a watermark has passed its window (before, its window counts it).
    for case in ("not_utf8", "null_value", "poison", "late"):
        outcome = audit.cases[case]
        assert outcome.records > 0 and outcome.to_sink == 0 and outcome.reasons, (case, doc)
        assert outcome.dead_lettered == outcome.records or (case == "late" and outcome.dead_lettered > 0), (case, doc)
    # The faults healed: every service of the shared cluster runs again for the tests after this one.
    assert "kafka-1" in services and all(cluster.running(s) for s in services), services
    # A Connect server the soak started is stopped again: on the cluster it holds the workers' cores.
    assert cluster.running("spark-connect") == server_was_running
