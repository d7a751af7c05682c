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


#: Credentials planted in an OTLP endpoint: none may reach a log line or the output.
PLANTED = ("pl4nted-s3cret", "pl4nted-t0ken")


def test_an_endpoints_credentials_are_never_logged_when_the_gauges_are_sent(collector, monkeypatch, caplog, capsys):
    """The "sent N gauges" line of every commit named the endpoint as given, password included."""
    import logging

    monkeypatch.delenv(metrics.ENV, raising=False)
    monkeypatch.setenv(metrics.OTLP_ENV, f"http://lockstep:{PLANTED[0]}@127.0.0.1:{collector}")
    with caplog.at_level(logging.DEBUG):
        target = metrics.metrics_target()
        assert metrics.send_commit_time_left("orders", 60_000, 15_000, target) == 1
        with_token = metrics.OtelTarget(f"{target.endpoint}?token={PLANTED[1]}")
        assert metrics.send_gauges("orders", {"records_unread": 7}, with_token) == 1
    # The credentials still go where they belong: to the endpoint.
    assert [path for path, _ in _Collector.received] == ["/v1/metrics", f"/v1/metrics?token={PLANTED[1]}"]
    assert f"sent 1 gauges of orders to OpenTelemetry at http://***@127.0.0.1:{collector}/v1/metrics" in caplog.text
    out = capsys.readouterr()
    assert not [p for p in PLANTED if p in caplog.text + out.out + out.err], caplog.text


def test_an_endpoints_credentials_are_never_logged_when_it_is_down_or_refused(monkeypatch, caplog, capsys):
    """The failure's lines (Lockstep's and the OpenTelemetry exporter's own, which log the request's error with
    its URL's query) and a refused value's message carry no credential either."""
    import logging

    monkeypatch.setattr(metrics, "OTLP_TIMEOUT_S", 1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    target = metrics.OtelTarget(f"http://lockstep:{PLANTED[0]}@127.0.0.1:{closed}/v1/metrics?token={PLANTED[1]}")
    with caplog.at_level(logging.DEBUG):
        assert metrics.send_gauges("orders", {"records_unread": 7}, target) == 0
    assert "metrics of orders not sent to OpenTelemetry at http://***@127.0.0.1:" in caplog.text
    monkeypatch.delenv(metrics.ENV, raising=False)
    monkeypatch.setenv(metrics.OTLP_ENV, f"ftp://lockstep:{PLANTED[0]}@collector:4318")
    with pytest.raises(TerminalError) as refused:
        metrics.metrics_target()
    assert "ftp://***@collector:4318" in str(refused.value)
    out = capsys.readouterr()
    assert not [p for p in PLANTED if p in caplog.text + out.out + out.err + str(refused.value)], caplog.text


@pytest.mark.parametrize("logged, shown", [
    ("https://user:pass@otel.example.com:4318/v1/metrics", "https://***@otel.example.com:4318/v1/metrics"),
    ("https://user:p@ss@h/x and http://a:b@c/d", "https://***@h/x and http://***@c/d"),
    ("http://h:1/v1/metrics?token=abc&x=1&api_key=zz", "http://h:1/v1/metrics?token=***&x=1&api_key=***"),
    ("s3://b/k?X-Amz-Signature=abc&X-Amz-Credential=AK%2F1", "s3://b/k?X-Amz-Signature=***&X-Amz-Credential=***"),
    ("sc://host:15002/;token=abc;user_id=me", "sc://host:15002/;token=***;user_id=me"),
    ("Max retries exceeded with url: /v1/metrics?access_token=abc (Caused by", "Max retries exceeded with url: "
                                                                              "/v1/metrics?access_token=*** (Caused by"),
    ("kafka://broker:9092/orders", "kafka://broker:9092/orders"),
    ("localhost:8125, http://h/p?sig=1&signal=2", "localhost:8125, http://h/p?sig=***&signal=2"),
])
def test_redact_urls_keeps_where_and_hides_credentials(logged, shown):
    from lockstep.connections import redact
    from lockstep.logs import redact_urls

    assert redact_urls(logged) == shown
    assert redact(logged) == shown  # what task logs and alerts pass through (connection secrets, and these)
