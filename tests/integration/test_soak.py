"""The short soak of `make test`: the soak driver on the session's cluster (3 brokers, Spark
standalone with a Spark Connect server on it, MinIO behind the fault proxy), in connect mode, the
default path, every fault kind once, then the independent audit. The long one (>= 200 faults) is
`make soak`, which writes docs/RELIABILITY.md."""
from __future__ import annotations

import sys

import pytest

from lockstep_soak.driver import Soak, SoakConfig
from lockstep_soak.schedule import FaultKind

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

#: Every kind but commit_late (a commit after the transaction timeout: test_engine.py's
#: test_transaction_timeout_aborts_the_whole_checkpoint_and_the_next_run_replays; in a soak it waits the
#: timeout out): 10 kinds.
KINDS = tuple(k for k in FaultKind if k is not FaultKind.COMMIT_LATE)
#: 13 cycles: 10 with faults (every 4th is clean), the first round of the schedule, so each kind once; a
#: partial commit waits out the 30 s transaction timeout. Services stay down 1-4 s (`make soak`: 2-12 s).
CYCLES = 13
#: The kinds the default path added (issue 43): each must land, not only be planned.
NEW_KINDS = {FaultKind.KILL_CONNECT, FaultKind.BROKER_COMMIT, FaultKind.PARTIAL_COMMIT, FaultKind.DUPLICATE_RUN}


def test_short_soak_with_every_fault_kind_loses_and_duplicates_nothing(cluster, tmp_path):
    # `make soak` runs hundreds of faults, `make soak-state` a stateful pipeline under them.
    config = SoakConfig(work_dir=tmp_path, cycles=CYCLES, records_per_cycle=60, bad_per_cycle=4,
                        timeout_ms=30_000, commit_margin_ms=8_000, faults_per_cycle=1, kinds=KINDS, hold_s=(1.0, 4.0))
    server_was_running = cluster.running("spark-connect")
    result = Soak(cluster, config, out=sys.stderr).run()
    doc = result.to_json()
    replay = (f"replay: lockstep soak --seed {result.seed} --cycles {CYCLES} --records 60 --timeout-ms 30000 "
              f"--faults-per-cycle 1 --hold 1,4 --faults {','.join(k.value for k in KINDS)}")
    audit = result.audit
    assert result.stuck is None, f"{result.stuck} ({replay})"
    assert audit.lost == [] and audit.duplicated == [], f"{doc['audit']} ({replay})"
    assert audit.unexpected == [] and audit.mismatched == [], f"{doc['audit']} ({replay})"
    assert audit.uncovered == 0 and audit.produced == CYCLES * 60
    assert not result.lso_open_at_end and result.lso_after_last_fault_s <= 40, doc
    # The faults really happened: the schedule plans a different kind for each of the 10 fault cycles.
    assert doc["config"]["mode"] == "connect" and {i.fault.kind for i in result.injected} == set(KINDS)
    injected = {i.fault.kind for i in result.injected if i.injected_at is not None}
    assert len(injected) >= 7, doc["faults"]  # a fault whose moment the cycle passed is missed
    assert NEW_KINDS <= injected, doc["faults"]
    # Each landed fault was recovered from: a later checkpoint completed.
    assert all(i.recovery_s is not None for i in result.injected if i.injected_at is not None), doc["faults"]
    # A partial commit, when the seed plans one, is repaired by the next cycles.
    for inj in result.injected:
        if inj.fault.kind is FaultKind.PARTIAL_COMMIT and inj.checkpoint is not None:
            assert inj.status == "completed after repair" and inj.checkpoint in result.repaired, doc["faults"]
    assert sum(1 for c in result.cycles if not c.ok) >= 1, "no fault made a checkpoint fail"
    # Every bad record is accounted for in the dead-letter topic, with its reason.
    for case in ("oversize", "not_utf8", "null_value", "poison"):
        outcome = audit.cases[case]
        assert outcome.records > 0 and outcome.dead_lettered == outcome.records and outcome.to_sink == 0, (case, doc)
        assert outcome.reasons, case
    # The faults healed: every service of the shared cluster runs again for the tests after this one.
    assert all(cluster.running(s) for s in cluster.services() if s not in ("airflow", "spark-connect"))
    # A Connect server the soak started is stopped again: on the cluster it holds the workers' cores.
    assert cluster.running("spark-connect") == server_was_running
