"""Lockstep's gauges over OpenTelemetry: with Airflow's ``[metrics] otel_on`` (or ``LOCKSTEP_OTLP``) they are
exported over OTLP/HTTP, with the StatsD names, and a real receiver on this host decodes them."""
from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from lockstep.errors import TerminalError
from lockstep.ops import metrics


class _Collector(BaseHTTPRequestHandler):
    """The receiving end of OTLP/HTTP metrics: each request decoded as ExportMetricsServiceRequest."""

    received: list[tuple[str, dict[str, tuple[float, dict[str, str]]]]] = []

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        request = ExportMetricsServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
        gauges = {}
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    [point] = metric.gauge.data_points
                    value = point.as_double if point.HasField("as_double") else point.as_int
                    gauges[metric.name] = (value, {a.key: a.value.string_value for a in point.attributes})
        _Collector.received.append((self.path, gauges))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector():
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    _Collector.received = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_with_airflows_otel_on_the_gauges_are_exported_over_otlp_with_the_statsd_names(collector, monkeypatch):
    import airflow.configuration  # noqa: F401 - the settings are read only in a process that runs Airflow

    for env in (metrics.ENV, metrics.OTLP_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")  # OpenTelemetry wins, as in Airflow
    monkeypatch.setenv("AIRFLOW__METRICS__OTEL_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__OTEL_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__OTEL_PORT", str(collector))
    monkeypatch.setenv("AIRFLOW__METRICS__OTEL_PREFIX", "prod")
    target = metrics.metrics_target()
    assert target == metrics.OtelTarget(f"http://127.0.0.1:{collector}/v1/metrics", "prod")
    assert metrics.send_gauges("orders", {"records_unread": 7, "oldest_unread_age_s": 1.5}, target) == 2
    [(path, gauges)] = _Collector.received
    assert path == "/v1/metrics"
    assert gauges == {"prod.lockstep.orders.records_unread": (7, {"pipeline": "orders"}),
                      "prod.lockstep.orders.oldest_unread_age_s": (1.5, {"pipeline": "orders"})}
    assert set(gauges) == {line.split(":")[0] for line in metrics.lines("prod", "orders", {
        "records_unread": 7, "oldest_unread_age_s": 1.5})}


def test_the_cli_env_names_an_otlp_endpoint_and_a_bad_one_is_refused(collector, monkeypatch):
    monkeypatch.delenv(metrics.ENV, raising=False)
    monkeypatch.setenv(metrics.OTLP_ENV, f"http://127.0.0.1:{collector}")
    target = metrics.metrics_target()
    assert metrics.send_commit_time_left("orders", 60_000, 15_000, target) == 1
    assert _Collector.received[0][1] == {"airflow.lockstep.orders.commit_time_left_percent": (25.0, {"pipeline": "orders"})}
    monkeypatch.setenv(metrics.OTLP_ENV, "collector:4318")
    with pytest.raises(TerminalError, match="LOCKSTEP_OTLP='collector:4318': expected an OTLP/HTTP URL"):
        metrics.metrics_target()


def test_an_otlp_endpoint_that_is_down_never_fails_the_caller(monkeypatch, caplog):
    monkeypatch.setattr(metrics, "OTLP_TIMEOUT_S", 1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    target = metrics.OtelTarget(f"http://127.0.0.1:{closed}/v1/metrics")
    assert metrics.send_gauges("orders", {"records_unread": 7}, target) == 0
    assert "metrics of orders not sent to OpenTelemetry at" in caplog.text
