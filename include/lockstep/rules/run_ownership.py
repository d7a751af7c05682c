"""Who owns an unsettled checkpoint, and whether that run may still be going (pure).

Run ids of CLI runs name their host and pid, so a run on the same host can tell whether the
owner is alive; any other owner is presumed alive for its transactions' timeout.
"""
from __future__ import annotations

__all__ = [
    "claim_in_flight", "cli_run_id", "parse_cli_run_id",
]

from collections.abc import Callable


def cli_run_id(host: str, pid: int, nonce: str) -> str:
    """Run ids of CLI runs say where the run lives, so another run can tell if it is still alive."""
    return f"cli-{host}-{pid}-{nonce}"


def parse_cli_run_id(run_id: str) -> tuple[str, int] | None:
    """(host, pid) of a CLI run id, or None for other runs (Airflow's, tests')."""
    if not run_id.startswith("cli-"):
        return None
    head, _, _nonce = run_id[4:].rpartition("-")
    host, _, pid = head.rpartition("-")
    return (host, int(pid)) if host and pid.isdigit() else None


def claim_in_flight(run_id: str, claimed_at_ms: int, now_ms: int, lease_ms: int, my_host: str,
                    pid_alive: Callable[[int], bool]) -> str | None:
    """Why an unsettled checkpoint claimed by another run must be left alone, or None.

    Recovering a checkpoint whose run is still going would fence its transactions under
    it (and, mid-commit, leave it half committed). A CLI run on this host is alive
    exactly while its process is; any other owner is presumed alive for ``lease_ms``
    after its claim (the transaction timeout: by then its transactions are void anyway).
    """
    cli = parse_cli_run_id(run_id)
    if cli is not None and cli[0] == my_host:
        return f"its run {run_id} (pid {cli[1]}) is still running" if pid_alive(cli[1]) else None
    left = claimed_at_ms + lease_ms - now_ms
    if left > 0:
        return (f"its run {run_id} claimed it {max(0, now_ms - claimed_at_ms) // 1000} s ago and may still be "
                f"running; it is presumed alive for {left // 1000} s more (transactions.timeout_ms)")
    return None
