"""``kill -9`` of a whole process tree, as a machine that loses power or an OOM killer would do it.

The tree is found by parent pid in /proc, not by process group: spark-submit runs in a session of its
own and a standalone cluster's executors are children of the worker, not of the run. Every process
found is stopped (SIGSTOP) first so none can start a child the walk misses, then all are killed.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path


def processes() -> dict[int, tuple[str, int, int]]:
    """Every process in /proc: pid -> (state, parent pid, process group)."""
    found: dict[int, tuple[str, int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ')'
        fields = stat[stat.rfind(")") + 2:].split()
        found[int(entry.name)] = (fields[0], int(fields[1]), int(fields[2]))
    return found


def _parents() -> dict[int, int]:
    return {pid: ppid for pid, (_state, ppid, _group) in processes().items()}


def descendants(*roots: int) -> set[int]:
    """``roots`` (those still alive) and every process below them."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [r for r in roots if r in parents]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill_tree(*roots: int) -> list[int]:
    """SIGSTOP the trees under ``roots`` until no new process appears, then SIGKILL them all."""
    stopped: set[int] = set()
    for _ in range(20):
        tree = descendants(*roots) | descendants(*stopped)
        new = tree - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    return sorted(stopped)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_tree(*roots: int) -> set[int]:
    """SIGSTOP the trees under ``roots`` until no new process appears (a hung step, as far as anything
    outside can tell); `continue_all` lets them go on."""
    stopped: set[int] = set()
    for _ in range(20):
        new = (descendants(*roots) | descendants(*stopped)) - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    return stopped


def continue_all(pids: set[int]) -> None:
    """SIGCONT every one of ``pids`` (those still alive)."""
    for pid in pids:
        _signal(pid, signal.SIGCONT)
