"""Named failpoints at every step boundary of a checkpoint, for crash testing.

``LOCKSTEP_FAILPOINTS="commit.between_commits=crash,job.after_flush=raise"`` arms failpoints, each
with one of the `ACTIONS`, taken when the process reaches the point. Without the variable ``hit()``
is a dictionary lookup and nothing else.
"""
from __future__ import annotations

__all__ = [
    "ACTIONS", "FAILPOINTS", "FailpointError", "ICEBERG_FAILPOINTS", "PAUSE_SIGNALS", "STATE_FAILPOINTS",
]

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
    "state.mid_upload": "Spark driver: the checkpoint's first state file uploaded (a compaction's new base or "
                        "merged delta when it compacts a key group, else a delta or a base), the others not yet",
    "iceberg.after_files": "Spark driver (sink.iceberg): the checkpoint's data files written under the table's "
                           "location, no snapshot staged",
    "iceberg.after_staged": "Spark driver (sink.iceberg): the snapshot staged on the checkpoint's branch, prepared "
                            "metadata not written",
    "job.before_prepared": "Spark driver: all committables collected, prepared metadata not written",
    "job.after_prepared": "Spark driver: prepared metadata written (decision: commit), job not finished",
    "commit.after_verify": "commit: every transaction verified open, nothing committed yet",
    "commit.between_commits": "commit: first transaction committed, the others not yet",
    "commit.after_kafka_commit": "commit: all transactions committed, checkpoint not marked completed",
    "commit.after_iceberg_publish": "commit (sink.iceberg): the table's snapshot published on main, checkpoint not "
                                    "marked completed",
    "commit.after_completed": "commit: checkpoint marked completed, offsets not published",
    "commit.after_offsets": "commit: offsets published to the consumer group, retention not applied",
    "commit.mid_state_gc": "commit: the state files no checkpoint or savepoint names listed, the first deleted (none "
                           "when there is only one), the others not yet",
}

#: Failpoints only a stateful pipeline reaches (the second only when there is state to collect).
STATE_FAILPOINTS = ("state.mid_upload", "commit.mid_state_gc")
#: Failpoints only a pipeline with ``sink.iceberg`` reaches.
ICEBERG_FAILPOINTS = ("iceberg.after_files", "iceberg.after_staged", "commit.after_iceberg_publish")

_ENV = "LOCKSTEP_FAILPOINTS"

CRASH, RAISE, RAISE_FIRST_ATTEMPT, PAUSE = "crash", "raise", "raise-first-attempt", "pause"
#: ``pause``'s folder: the paused process writes a file named after the failpoint there and waits until it is gone.
PAUSE_SIGNALS = "LOCKSTEP_FAILPOINT_SIGNALS"
#: How long ``pause`` waits at most before it goes on by itself.
PAUSE_MAX_S = 120.0

#: What an armed failpoint does; the JVM writer knows the same ones (`PartitionTransaction`).
ACTIONS: dict[str, str] = {
    CRASH: f"die at once with exit code {CRASH_EXIT_CODE}, no cleanup (os._exit; in a JVM writer's task: halt "
           "the JVM), like a killed worker",
    RAISE: "raise an ordinary exception, like a bug",
    RAISE_FIRST_ATTEMPT: "a Spark task's failpoints only: raise in the task's first attempt; a retry of the task "
                         "passes (a local[N] master retries no task; local[N,F] with F > 1 does)",
    PAUSE: f"write a file named after the failpoint into ${PAUSE_SIGNALS} and wait until it is removed (at most "
           f"{PAUSE_MAX_S:.0f} s), then go on: the soak lands a fault at that exact moment (not in a Spark task)",
}

#: Actions that need the Spark task's attempt number, so only the writers' failpoints take them.
TASK_ACTIONS = frozenset({RAISE_FIRST_ATTEMPT})
#: Actions of Lockstep's own processes only: a Spark task's writer does not know them.
PROCESS_ACTIONS = frozenset({PAUSE})


class FailpointError(RuntimeError):
    """Raised by a failpoint armed with ``raise`` (or ``raise-first-attempt``, in a task's first attempt)."""


def parse(raw: str) -> dict[str, str]:
    """``name=action,name=action`` as failpoint name -> action; refuses what no failpoint could do."""
    armed: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, _, action = item.partition("=")
        check(name, action)
        armed[name] = action
    return armed


def check(name: str, action: str) -> None:
    """Refuse an unknown failpoint, an unknown action, or an action the failpoint cannot take."""
    if name not in FAILPOINTS:
        raise ValueError(f"{_ENV}: unknown failpoint {name!r}; `lockstep failpoints` lists them")
    if action not in ACTIONS:
        raise ValueError(f"{_ENV}: failpoint {name} has no action {action!r}; the actions are "
                         + ", ".join(ACTIONS))
    if action in TASK_ACTIONS and name not in WRITER_FAILPOINTS:
        raise ValueError(f"{_ENV}: {name}={action}: only a Spark task's failpoints know their attempt "
                         f"({', '.join(WRITER_FAILPOINTS)}); {name} takes " + " or ".join(
                             a for a in ACTIONS if a not in TASK_ACTIONS))
    if action in PROCESS_ACTIONS and name in WRITER_FAILPOINTS:
        raise ValueError(f"{_ENV}: {name}={action}: a Spark task's failpoints cannot {action}; {name} takes "
                         + " or ".join(a for a in ACTIONS if a not in PROCESS_ACTIONS))


def _armed() -> dict[str, str]:
    return parse(os.environ.get(_ENV, ""))


def armed(prefix: str = "") -> dict[str, str]:
    """The armed failpoints whose names start with ``prefix`` (handed to the JVM writer)."""
    if _ENV not in os.environ:
        return {}
    return {name: action for name, action in _armed().items() if name.startswith(prefix)}


def raised_message(name: str, where: str, action: str) -> str:
    """The message of a failpoint that raised; the JVM writer writes the same words."""
    return f"failpoint {name} raised{where}" + (" in the task's first attempt" if action == RAISE_FIRST_ATTEMPT else "")


def fires(action: str, attempt: int | None) -> bool:
    """Whether an armed ``action`` fires in a Spark task's ``attempt`` (0 for its first; None outside a task)."""
    if action == RAISE_FIRST_ATTEMPT:
        if attempt is None:
            raise ValueError(f"failpoint action {action} needs the Spark task's attempt number")
        return attempt == 0
    return True


def hit(name: str, where: str = "", armed_here: Mapping[str, str] | None = None, attempt: int | None = None) -> None:
    """Fail here if ``name`` is armed; a no-op otherwise. ``where`` is appended to the message.
    ``armed_here``: failpoints armed by the process that drives a Spark task (`armed`), for a task
    whose process does not share that one's environment (a Spark Connect server's workers).
    ``attempt``: the Spark task's attempt number (0 for its first), which the writers pass."""
    if not armed_here and _ENV not in os.environ:
        return
    assert name in FAILPOINTS, name
    action = (armed_here or {}).get(name) or (_armed().get(name) if _ENV in os.environ else None)
    if action is None or not fires(action, attempt):
        return
    if action == CRASH:
        print(f"lockstep failpoint {name}{where}: crashing the process", file=sys.stderr, flush=True)
        os._exit(CRASH_EXIT_CODE)
    if action == PAUSE:
        pause(name, where)
        return
    raise FailpointError(raised_message(name, where, action))


def pause(name: str, where: str = "") -> None:
    """``pause``: signal the failpoint with a file in ``$LOCKSTEP_FAILPOINT_SIGNALS``, wait until it is gone."""
    import time
    from pathlib import Path

    folder = os.environ.get(PAUSE_SIGNALS)
    if not folder:
        raise FailpointError(f"failpoint {name}=pause needs ${PAUSE_SIGNALS}, the folder of its signal file")
    signal = Path(folder) / name
    signal.write_text(str(os.getpid()))
    print(f"lockstep failpoint {name}{where}: paused until {signal} is removed", file=sys.stderr, flush=True)
    deadline = time.monotonic() + PAUSE_MAX_S
    while signal.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    signal.unlink(missing_ok=True)
