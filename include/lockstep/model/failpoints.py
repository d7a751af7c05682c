"""Named failpoints at every step boundary of a checkpoint, for crash testing.

``LOCKSTEP_FAILPOINTS="commit.between_commits=crash,job.after_flush=raise"`` makes
the process die (``crash``: ``os._exit``, no cleanup, like a killed worker) or
raise (``raise``: an ordinary exception, like a bug) when it reaches the point.
Without the variable ``hit()`` is a dictionary lookup and nothing else.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from lockstep.model.output_contract import WRITER_FAILPOINTS

CRASH_EXIT_CODE = 86

#: name -> where it sits. Ordered as a checkpoint passes them.
FAILPOINTS: dict[str, str] = {
    "plan.after_recovery": "plan: recovery (roll-forward, fencing) done, before claiming the new checkpoint",
    "plan.after_claim": "plan: checkpoint id claimed in S3, before the Spark run",
    # Hit by both writers, in each Spark task; where exactly is part of the output contract.
    **WRITER_FAILPOINTS,
    "job.before_prepared": "Spark driver: all committables collected, prepared metadata not written",
    "job.after_prepared": "Spark driver: prepared metadata written (decision: commit), job not finished",
    "commit.after_verify": "commit: every transaction verified open, nothing committed yet",
    "commit.between_commits": "commit: first transaction committed, the others not yet",
    "commit.after_kafka_commit": "commit: all transactions committed, checkpoint not marked completed",
    "commit.after_completed": "commit: checkpoint marked completed, offsets not published",
    "commit.after_offsets": "commit: offsets published to the consumer group, retention not applied",
}

_ENV = "LOCKSTEP_FAILPOINTS"


class FailpointError(RuntimeError):
    """Raised by a failpoint in ``raise`` mode."""


def _armed() -> dict[str, str]:
    raw = os.environ.get(_ENV, "")
    armed: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, _, action = item.partition("=")
        if name not in FAILPOINTS:
            raise ValueError(f"{_ENV}: unknown failpoint {name!r}; `lockstep failpoints` lists them")
        if action not in ("crash", "raise"):
            raise ValueError(f"{_ENV}: failpoint {name} needs =crash or =raise, got {action!r}")
        armed[name] = action
    return armed


def armed(prefix: str = "") -> dict[str, str]:
    """The armed failpoints whose names start with ``prefix`` (handed to the JVM writer)."""
    if _ENV not in os.environ:
        return {}
    return {name: action for name, action in _armed().items() if name.startswith(prefix)}


def hit(name: str, where: str = "", armed_here: Mapping[str, str] | None = None) -> None:
    """Fail here if ``name`` is armed; a no-op otherwise. ``where`` is appended to the message.
    ``armed_here``: failpoints armed by the process that drives a Spark task (`armed`), for a task
    whose process does not share that one's environment (a Spark Connect server's workers)."""
    if not armed_here and _ENV not in os.environ:
        return
    assert name in FAILPOINTS, name
    action = (armed_here or {}).get(name) or (_armed().get(name) if _ENV in os.environ else None)
    if action == "crash":
        print(f"lockstep failpoint {name}{where}: crashing the process", file=sys.stderr, flush=True)
        os._exit(CRASH_EXIT_CODE)
    if action == "raise":
        raise FailpointError(f"failpoint {name} raised{where}")
