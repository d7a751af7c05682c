"""The checkpoint coordinator (Flink's ``CheckpointCoordinator`` for scheduled batch runs): the
entry points of the recover, plan, run and commit steps, and the CLI's whole cycle, in one namespace:
the public face of ``lockstep.steps`` for the DAG's tasks (``lockstep_airflow.operators``), the CLI and
the tools. Each is defined in its step's module (``plan``, ``run``, ``commit``, ``recover``, ``cycle``,
and ``pipeline`` for what they share); this module defines nothing.
"""
from __future__ import annotations

from lockstep.steps.commit import CommitOutcome, commit
from lockstep.steps.cycle import Cycle, checkpoint_cycle
from lockstep.steps.pipeline import Pipeline
from lockstep.steps.plan import Plan, RestorePlan, plan, restore_plan
from lockstep.steps.recover import CheckpointInFlight, RecoveryFacts, carry_out, check_in_flight, recover, recovery_facts
from lockstep.steps.run import Stoppable, run_checkpoint
from lockstep.store.checkpoint_store import CheckpointAlreadyClaimed

__all__ = [
    "CheckpointAlreadyClaimed",
    "CheckpointInFlight",
    "CommitOutcome",
    "Cycle",
    "Pipeline",
    "Plan",
    "RecoveryFacts",
    "RestorePlan",
    "Stoppable",
    "carry_out",
    "check_in_flight",
    "checkpoint_cycle",
    "commit",
    "plan",
    "recover",
    "recovery_facts",
    "restore_plan",
    "run_checkpoint",
]
