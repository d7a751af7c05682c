"""The checkpoint coordinator (Flink's ``CheckpointCoordinator`` for scheduled batch runs): the
entry points of the recover, plan and commit steps in one namespace, for the DAG's tasks, the CLI
and the tools. Each is defined in its step's module (``plan``, ``commit``, ``recover``, and
``pipeline`` for what they share); this module defines nothing.
"""
from __future__ import annotations

from lockstep.steps.commit import CommitOutcome, commit
from lockstep.steps.pipeline import Pipeline
from lockstep.steps.plan import Plan, RestorePlan, plan, restore_plan
from lockstep.steps.recover import CheckpointInFlight, RecoveryFacts, carry_out, check_in_flight, recover, recovery_facts

__all__ = [
    "CheckpointInFlight",
    "CommitOutcome",
    "Pipeline",
    "Plan",
    "RecoveryFacts",
    "RestorePlan",
    "carry_out",
    "check_in_flight",
    "commit",
    "plan",
    "recover",
    "recovery_facts",
    "restore_plan",
]
