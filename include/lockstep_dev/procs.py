"""Background processes the platform owns: start detached, find again, stop.

Each service runs in its own session (process group), so stopping it also stops
whatever it forked (``airflow standalone`` starts a scheduler, api-server, ...).
A pid is only trusted while its command line still carries the marker we started
it with, so a recycled pid never gets a signal from us.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lockstep.errors import LockstepError


class PlatformError(LockstepError, RuntimeError):
    """A service could not be started or reached; the message says what to do. A LockstepError,
    so the CLI reports it as it reports the engine's errors (exit 2, message only)."""


#: Ports this process has handed out, never handed out twice.
_HANDED_OUT: set[int] = set()


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The ports the kernel gives outgoing connections (Linux's default where it cannot be read)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port_range(ephemeral: tuple[int, int]) -> range:
    """Where `free_port` looks: below the ephemeral range (above it when that leaves too few)."""
    low, high = ephemeral
    return range(10_000, low) if low - 10_000 >= 5_000 else range(high + 1, 65_536)


def free_port() -> int:
    """A port nothing listens on now, outside the kernel's ephemeral range. A port the kernel picked
    (``bind`` to 0) is an ephemeral one: an outgoing connection (one Kafka node dialing another while it
    starts) may take it as its local port before the service that was given it binds, and that service
    then fails with "Address already in use" (seen starting the three-node cluster)."""
    import random

    ports = free_port_range(ephemeral_range())
    for _ in range(200):
        port = random.choice(ports)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise PlatformError(f"no free port found in {ports.start}-{ports.stop - 1} after 200 tries")


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def start_detached(
    name: str, argv: Sequence[str], log_file: Path, env: Mapping[str, str], cwd: Path | None = None
) -> int:
    """Start ``argv`` in a new session with output to ``log_file``; return its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
        )
    return proc.pid


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def is_running(pid: int | None, marker: str) -> bool:
    """True if ``pid`` is alive (not a zombie) and still the process we started."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state != "Z" and marker in cmdline(pid)


def stop_group(pid: int, marker: str, grace_seconds: float = 20.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after the grace period
    (no grace: SIGKILL at once, like a host that loses power)."""
    if not is_running(pid, marker):
        _kill_group(pid, signal.SIGKILL)  # stragglers of a leader that already died
        return
    _kill_group(pid, signal.SIGTERM if grace_seconds > 0 else signal.SIGKILL)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if not is_running(pid, marker) and not _group_alive(pid):
            return
        time.sleep(0.2)
    _kill_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (is_running(pid, marker) or _group_alive(pid)):
        time.sleep(0.1)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        # fields: state ppid pgrp ...
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def wait_until(
    check: Callable[[], bool],
    what: str,
    timeout: float,
    alive: Callable[[], bool] | None = None,
    log_file: Path | None = None,
) -> None:
    """Poll ``check`` until true; fail with ``what`` and the log tail on timeout or death."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not ready yet is any error
            pass
        if alive is not None and not alive():
            # Confirm once more a moment later: on a loaded machine a process starting up (a JVM, a
            # Python program re-reading its command line) has been seen as gone for one check.
            time.sleep(1.0)
            if not alive():
                raise PlatformError(f"{what}: the process exited.{_tail(log_file)}")
        if time.monotonic() > deadline:
            raise PlatformError(f"{what}: not ready after {timeout:.0f} s.{_tail(log_file)}")
        time.sleep(0.25)


def _tail(log_file: Path | None, lines: int = 25) -> str:
    if log_file is None or not log_file.exists():
        return ""
    text = log_file.read_text(errors="replace").splitlines()[-lines:]
    return f"\nLast lines of {log_file}:\n" + "\n".join(text)
