"""Lockstep's gauges, over StatsD or OpenTelemetry: the protocols Airflow already speaks.

Where they go, first found wins:

1. an explicit ``host:port`` (``lockstep status --statsd``): StatsD;
2. ``LOCKSTEP_STATSD=host:port`` in the environment: StatsD;
3. ``LOCKSTEP_OTLP=http(s)://host:port`` in the environment: OpenTelemetry (OTLP over HTTP, to
   ``<url>/v1/metrics``);
4. inside Airflow, Airflow's own ``[metrics]`` settings, so the gauges land beside Airflow's metrics:
   with ``otel_on``, OpenTelemetry to ``otel_host``/``otel_port`` (``otel_ssl_active``, ``otel_prefix``),
   as Airflow sends its own; else with ``statsd_on``, StatsD to ``statsd_host``/``statsd_port``
   (``statsd_prefix``).

Names are ``<prefix>.lockstep.<pipeline>.<gauge>`` either way (prefix ``airflow`` unless Airflow's
says otherwise); an OpenTelemetry gauge also carries the attribute ``pipeline``. Sending never fails a
checkpoint: StatsD is fire-and-forget UDP, and an OTLP export that fails is logged.
"""
from __future__ import annotations

__all__ = [
    "DEFAULT_PREFIX", "ENV", "EXPORTER_LOGGERS", "MAX_DATAGRAM", "OTLP_ENV", "OTLP_TIMEOUT_S", "OtelTarget",
    "StatsdTarget", "Target", "datagrams", "lines", "metrics_target", "names", "parse_otlp", "parse_target",
    "send_commit_time_left", "send_gauges",
]

import logging
import os
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.errors import TerminalError
from lockstep.logs import RedactingFilter, redact_urls

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

    @property
    def where(self) -> str:
        return f"StatsD at {self.host}:{self.port}"


@dataclass(frozen=True)
class OtelTarget:
    """An OTLP/HTTP metrics endpoint (``http(s)://host:port/v1/metrics``)."""

    endpoint: str
    prefix: str = DEFAULT_PREFIX

    @property
    def where(self) -> str:
        """Where the gauges go, for logs: the endpoint without the credentials it may carry (`redact_urls`)."""
        return f"OpenTelemetry at {redact_urls(self.endpoint)}"


Target = StatsdTarget | OtelTarget
OTLP_ENV = "LOCKSTEP_OTLP"
OTLP_TIMEOUT_S = 10


def parse_target(value: str, prefix: str = DEFAULT_PREFIX, where: str = ENV) -> StatsdTarget:
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TerminalError(f"{where}={value!r}: expected host:port, e.g. localhost:8125")
    return StatsdTarget(host.strip("[]"), int(port), prefix)


def parse_otlp(value: str, prefix: str = DEFAULT_PREFIX, where: str = OTLP_ENV) -> OtelTarget:
    url = value.strip().rstrip("/")
    if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
        raise TerminalError(f"{where}={redact_urls(value)!r}: expected an OTLP/HTTP URL, e.g. http://localhost:4318")
    return OtelTarget(url if url.endswith("/v1/metrics") else f"{url}/v1/metrics", prefix)


def _airflow_target() -> Target | None:
    """Airflow's metrics settings, only in a process that already runs Airflow (never imported for it)."""
    if "airflow" not in sys.modules:
        return None
    try:
        from airflow.configuration import conf

        if conf.getboolean("metrics", "otel_on", fallback=False):
            scheme = "https" if conf.getboolean("metrics", "otel_ssl_active", fallback=False) else "http"
            return OtelTarget(f"{scheme}://{conf.get('metrics', 'otel_host', fallback='localhost')}:"
                              f"{conf.getint('metrics', 'otel_port', fallback=8889)}/v1/metrics",
                              conf.get("metrics", "otel_prefix", fallback=DEFAULT_PREFIX) or DEFAULT_PREFIX)
        if not conf.getboolean("metrics", "statsd_on", fallback=False):
            return None
        return StatsdTarget(conf.get("metrics", "statsd_host", fallback="localhost"),
                            conf.getint("metrics", "statsd_port", fallback=8125),
                            conf.get("metrics", "statsd_prefix", fallback=DEFAULT_PREFIX) or DEFAULT_PREFIX)
    except Exception as exc:  # noqa: BLE001 - a config problem must not fail a task over metrics
        log.info("Airflow's [metrics] settings not usable: %s", exc)
        return None


def metrics_target(explicit: str | None = None) -> Target | None:
    if explicit:
        return parse_target(explicit, where="--statsd")
    if os.environ.get(ENV):
        return parse_target(os.environ[ENV])
    if os.environ.get(OTLP_ENV):
        return parse_otlp(os.environ[OTLP_ENV])
    return _airflow_target()


def names(prefix: str, pipeline: str, gauges: Mapping[str, float]) -> dict[str, float]:
    """Each gauge's full name, ``<prefix>.lockstep.<pipeline>.<gauge>``, made of safe characters."""
    base = ".".join(_UNSAFE.sub("_", part) for part in (prefix, "lockstep", pipeline) if part)
    return {f"{base}.{_UNSAFE.sub('_', name)}": value for name, value in sorted(gauges.items())}


def lines(prefix: str, pipeline: str, gauges: Mapping[str, float]) -> list[str]:
    """StatsD gauge lines, ``name:value|g``, names made of StatsD-safe characters."""
    out = []
    for name, value in names(prefix, pipeline, gauges).items():
        number = f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(int(value))
        out.append(f"{name}:{number}|g")
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


def send_gauges(pipeline: str, gauges: Mapping[str, float], target: Target | None) -> int:
    """Send; returns the number of gauges sent (0 with no target). Never raises."""
    if target is None or not gauges:
        return 0
    if isinstance(target, OtelTarget):
        return _export(pipeline, gauges, target)
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


def _export(pipeline: str, gauges: Mapping[str, float], target: OtelTarget) -> int:
    """One OTLP/HTTP export of the gauges, through the OpenTelemetry SDK: recorded by a meter provider of
    its own, collected once and handed to the exporter, whose answer says whether they arrived (a task
    sends its gauges once; no export thread is left behind)."""
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
        from opentelemetry.sdk.resources import Resource

        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "lockstep"}))
        meter = provider.get_meter("lockstep")
        for name, value in names(target.prefix, pipeline, gauges).items():
            meter.create_gauge(name).set(value, {"pipeline": pipeline})
        data = reader.get_metrics_data()
        provider.shutdown()
        _redact_exporter_logs()
        exporter = OTLPMetricExporter(endpoint=target.endpoint, timeout=OTLP_TIMEOUT_S)
        try:
            result = exporter.export(data, timeout_millis=OTLP_TIMEOUT_S * 1000) if data is not None else None
        finally:
            exporter.shutdown()
    except Exception as exc:  # noqa: BLE001 - metrics never fail a checkpoint
        log.warning("metrics of %s not sent to %s: %s", pipeline, target.where, redact_urls(str(exc)))
        return 0
    if result is not MetricExportResult.SUCCESS:
        log.warning("metrics of %s not sent to %s: the export failed", pipeline, target.where)
        return 0
    log.info("sent %d gauges of %s to %s", len(gauges), pipeline, target.where)
    return len(gauges)


#: The loggers of OpenTelemetry's OTLP/HTTP exporter, which log a failed request's error (its URL's query in it),
#: and of the HTTP client below it, whose DEBUG lines name each request's path and query.
EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "opentelemetry.exporter.otlp.common.http",
                    "urllib3.connectionpool")


def _redact_exporter_logs() -> None:
    for name in EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())


def send_commit_time_left(pipeline: str, timeout_ms: int, left_ms: int | None,
                          target: Target | None = None) -> int:
    """The share of the transaction timeout left when a commit began, as the gauge
    ``commit_time_left_percent`` (to the resolved target unless one is given): an alert on it warns
    before commits start to miss the timeout. Never raises; returns the gauges sent."""
    if left_ms is None:
        return 0
    try:
        target = target or metrics_target()
    except TerminalError as exc:  # a malformed LOCKSTEP_STATSD: metrics never fail a checkpoint
        log.warning("commit metrics of %s not sent: %s", pipeline, exc)
        return 0
    return send_gauges(pipeline, {"commit_time_left_percent": round(max(left_ms, 0) * 100 / timeout_ms, 1)}, target)

