"""Lockstep's gauges over StatsD, the protocol Airflow already speaks.

Where they go, first found wins:

1. an explicit ``host:port`` (``lockstep status --statsd``);
2. ``LOCKSTEP_STATSD=host:port`` in the environment;
3. inside Airflow, Airflow's own ``[metrics]`` settings (``statsd_on``, ``statsd_host``,
   ``statsd_port``, ``statsd_prefix``), so the gauges land beside Airflow's metrics.

Names are ``<prefix>.lockstep.<pipeline>.<gauge>`` (prefix ``airflow`` unless Airflow's says
otherwise). Sending is fire-and-forget UDP: a metrics outage never fails a checkpoint.
"""
from __future__ import annotations

import logging
import os
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.errors import TerminalError

log = logging.getLogger(__name__)

ENV = "LOCKSTEP_STATSD"
DEFAULT_PREFIX = "airflow"
#: StatsD over UDP: stay under a typical MTU per datagram.
MAX_DATAGRAM = 1400
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class StatsdTarget:
    host: str
    port: int
    prefix: str = DEFAULT_PREFIX


def parse_target(value: str, prefix: str = DEFAULT_PREFIX, where: str = ENV) -> StatsdTarget:
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TerminalError(f"{where}={value!r}: expected host:port, e.g. localhost:8125")
    return StatsdTarget(host.strip("[]"), int(port), prefix)


def _airflow_target() -> StatsdTarget | None:
    """Airflow's StatsD settings, only in a process that already runs Airflow (never imported for it)."""
    if "airflow" not in sys.modules:
        return None
    try:
        from airflow.configuration import conf

        if not conf.getboolean("metrics", "statsd_on", fallback=False):
            return None
        return StatsdTarget(conf.get("metrics", "statsd_host", fallback="localhost"),
                            conf.getint("metrics", "statsd_port", fallback=8125),
                            conf.get("metrics", "statsd_prefix", fallback=DEFAULT_PREFIX) or DEFAULT_PREFIX)
    except Exception as exc:  # noqa: BLE001 - a config problem must not fail a task over metrics
        log.info("Airflow's [metrics] settings not usable: %s", exc)
        return None


def resolve_target(explicit: str | None = None) -> StatsdTarget | None:
    if explicit:
        return parse_target(explicit, where="--statsd")
    if os.environ.get(ENV):
        return parse_target(os.environ[ENV])
    return _airflow_target()


def lines(prefix: str, pipeline: str, gauges: Mapping[str, float]) -> list[str]:
    """StatsD gauge lines, ``name:value|g``, names made of StatsD-safe characters."""
    base = ".".join(_UNSAFE.sub("_", part) for part in (prefix, "lockstep", pipeline) if part)
    out = []
    for name, value in sorted(gauges.items()):
        number = f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(int(value))
        out.append(f"{base}.{_UNSAFE.sub('_', name)}:{number}|g")
    return out


def datagrams(gauge_lines: list[str], limit: int = MAX_DATAGRAM) -> list[bytes]:
    """Lines packed into datagrams of at most ``limit`` bytes, newline-separated (StatsD's multi-metric form)."""
    packets: list[bytes] = []
    current = b""
    for line in gauge_lines:
        data = line.encode()
        if current and len(current) + 1 + len(data) > limit:
            packets.append(current)
            current = b""
        current = data if not current else current + b"\n" + data
    if current:
        packets.append(current)
    return packets


def send_gauges(pipeline: str, gauges: Mapping[str, float], target: StatsdTarget | None) -> int:
    """Send; returns the number of gauges sent (0 with no target). Never raises."""
    if target is None or not gauges:
        return 0
    payload = lines(target.prefix, pipeline, gauges)
    try:
        family = socket.AF_INET6 if ":" in target.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            for packet in datagrams(payload):
                sock.sendto(packet, (target.host, target.port))
    except OSError as exc:
        log.warning("metrics of %s not sent to StatsD at %s:%d: %s", pipeline, target.host, target.port, exc)
        return 0
    log.info("sent %d gauges of %s to StatsD at %s:%d", len(payload), pipeline, target.host, target.port)
    return len(payload)


def send_commit_time_left(pipeline: str, timeout_ms: int, left_ms: int | None,
                          target: StatsdTarget | None = None) -> int:
    """The share of the transaction timeout left when a commit began, as the gauge
    ``commit_time_left_percent`` (to the resolved target unless one is given): an alert on it warns
    before commits start to miss the timeout. Never raises; returns the gauges sent."""
    if left_ms is None:
        return 0
    try:
        target = target or resolve_target()
    except TerminalError as exc:  # a malformed LOCKSTEP_STATSD: metrics never fail a checkpoint
        log.warning("commit metrics of %s not sent: %s", pipeline, exc)
        return 0
    return send_gauges(pipeline, {"commit_time_left_percent": round(max(left_ms, 0) * 100 / timeout_ms, 1)}, target)

