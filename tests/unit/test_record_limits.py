"""Pure rules for bad input: the record size estimate both writers use, the limit each topic gets,
and ``lockstep.rows.guarded`` turning a row function's exception into its error."""
from __future__ import annotations

import json

import pytest

from lockstep.model.checkpoint import PlannedWith
from lockstep.model.output_contract import DEFAULT_PRODUCER_LIMIT, record_size, too_large
from lockstep.spark.writer_settings import writer_settings


def test_the_size_estimate_covers_batch_record_and_header_framing_and_lz4_growth() -> None:
    assert record_size(0, 0, 0, 0) == 61 + 36 + 64
    assert record_size(10, 1000, 90, 5) == 61 + 36 + 5 * 10 + 1100 + 1100 // 255 + 64


def test_the_reason_names_the_size_the_limit_and_where_it_comes_from() -> None:
    assert too_large(2345, 2000, "sink", "max.message.bytes of topic out") == (
        "record of 2345 bytes exceeds the sink's limit of 2000 bytes (max.message.bytes of topic out); "
        "key, value and headers dropped")


def planned() -> PlannedWith:
    return PlannedWith(source_topics=("in",), source_kafka_conn_id="kafka_a", sink_topic="out",
                       dead_letter_topic="dlq", sink_writer="jvm", sink_kafka_conn_id="kafka_a", id_prefix="p",
                       timeout_ms=900_000)


@pytest.fixture(autouse=True)
def connection(monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_A", json.dumps({"conn_type": "kafka",
                                                            "extra": {"bootstrap.servers": "a:9092"}}))


def test_each_topic_gets_the_smaller_of_its_max_message_bytes_and_the_producers_limit() -> None:
    settings = writer_settings(planned(), 1, {}, {"out": 2000, "dlq": 5_000_000}, pipeline="p")
    assert (settings.sink_max_bytes, settings.sink_limit) == (2000, "max.message.bytes of topic out")
    assert (settings.dead_letter_max_bytes, settings.dead_letter_limit) == (DEFAULT_PRODUCER_LIMIT,
                                                                            "the producer's default")
    # A batch of small records must not outgrow the smaller topic limit either.
    assert settings.producer_config["batch.size"] == 2000

    settings = writer_settings(planned(), 1, {"max.request.size": 500_000}, {"out": 1_048_588, "dlq": 1_048_588},
                               pipeline="p")
    assert (settings.sink_max_bytes, settings.sink_limit) == (500_000, "the producer's max.request.size")
    assert settings.producer_config["batch.size"] == 500_000


def test_without_topic_limits_the_producer_default_applies_and_batch_size_is_left_alone() -> None:
    settings = writer_settings(planned(), 1, {"batch.size": 16384}, pipeline="p")
    assert settings.sink_max_bytes == settings.dead_letter_max_bytes == DEFAULT_PRODUCER_LIMIT
    assert settings.producer_config["batch.size"] == 16384


def test_a_guarded_row_function_returns_its_exception_as_the_error() -> None:
    pytest.importorskip("pyspark")
    from lockstep.rows import guarded

    @guarded(returns="string")
    def half(value: str) -> str:
        return str(int(value) // 2)

    assert half.safe("10") == ("5", None)
    assert half.safe("ten") == (None, "half raised ValueError: invalid literal for int() with base 10: 'ten'")
    assert half.returns == "string" and guarded(int).returns == "binary"


def test_a_topic_whose_config_cannot_be_read_falls_back_to_the_producers_limit(caplog) -> None:
    pytest.importorskip("confluent_kafka")
    from confluent_kafka import KafkaError, KafkaException

    from lockstep.spark.writer_settings import topic_limits

    class Entry:
        value = "2000"

    class Done:
        def __init__(self, result):
            self._result = result

        def result(self, timeout=None):
            if isinstance(self._result, Exception):
                raise self._result
            return self._result

    class Admin:
        def describe_configs(self, resources):
            (resource,) = resources
            if resource.name == "dlq":
                return {resource: Done(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))}
            return {resource: Done({"max.message.bytes": Entry()})}

    assert topic_limits("kafka_a", ("out", "dlq", "out"), admin=Admin()) == {"out": 2000}
    assert "could not read max.message.bytes of topic dlq" in caplog.text


class _Done:
    def __init__(self, result: object) -> None:
        self._result = result

    def result(self, timeout: float | None = None) -> object:
        if isinstance(self._result, Exception):
            raise self._result
        return self._result


class _BrokerAdmin:
    """An admin of two brokers whose config holds ``cap`` (or refuses DescribeConfigs)."""

    def __init__(self, cap: str | Exception) -> None:
        self.cap, self.asked = cap, []

    def list_topics(self, timeout: float = -1) -> object:
        from types import SimpleNamespace

        return SimpleNamespace(brokers={3: object(), 1: object()})

    def describe_configs(self, resources: list) -> dict:
        from types import SimpleNamespace

        (resource,) = resources
        self.asked.append(resource.name)
        if isinstance(self.cap, Exception):
            return {resource: _Done(self.cap)}
        return {resource: _Done({"transaction.max.timeout.ms": SimpleNamespace(value=self.cap)})}


def test_the_sink_brokers_transaction_timeout_cap_is_read_from_a_broker_config() -> None:
    from lockstep.spark.writer_settings import transaction_timeout_cap

    admin = _BrokerAdmin("900000")
    assert transaction_timeout_cap("kafka_a", admin=admin) == 900_000
    assert admin.asked == ["1"]  # one broker's config: the cap is cluster-wide in practice


def test_an_unreadable_cap_lets_the_run_go_on_with_a_warning(caplog) -> None:
    from confluent_kafka import KafkaError, KafkaException

    from lockstep.spark.writer_settings import transaction_timeout_cap

    denied = KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED))
    assert transaction_timeout_cap("kafka_a", admin=_BrokerAdmin(denied)) is None
    assert "could not read transaction.max.timeout.ms of the sink cluster" in caplog.text


def test_a_timeout_above_the_cap_is_terminal_and_names_both_and_the_fix() -> None:
    from lockstep.errors import CheckpointError
    from lockstep.spark.writer_settings import check_transaction_timeout

    check_transaction_timeout(7, 900_000, 900_000)
    check_transaction_timeout(7, 3_600_000, None)  # unknown cap: left to the brokers
    with pytest.raises(CheckpointError) as refused:
        check_transaction_timeout(7, 3_600_000, 900_000)
    message = str(refused.value)
    assert message.startswith("checkpoint 7: transactions.timeout_ms is 3600000 ms, above the sink cluster's "
                              "transaction.max.timeout.ms of 900000 ms")
    assert "Lower transactions.timeout_ms to at most 900000" in message


def test_each_route_gets_its_own_limit_and_batch_size_fits_the_smallest_topic() -> None:
    settings = writer_settings(planned(), 1, {}, {"out": 5_000_000, "dlq": 5_000_000, "out.big": 3000}, pipeline="p",
                               routes=("out.big", "out.eu"))
    assert settings.routes == (("out.big", 3000, "max.message.bytes of topic out.big"),
                               ("out.eu", DEFAULT_PRODUCER_LIMIT, "the producer's default"))
    assert settings.producer_config["batch.size"] == 3000
