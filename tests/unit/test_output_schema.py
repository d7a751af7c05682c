"""The transform's output is checked against what the writers can write, before any task starts."""
from __future__ import annotations

import pytest

from lockstep.errors import TerminalError
from lockstep.spark.output_stages import check_output_schema
from lockstep.spec import parse_spec

SPEC = parse_spec({
    "name": "orders", "source": {"topics": ["in"]}, "transform": "lockstep_examples.orders:enrich",
    "sink": {"topic": "out", "dead_letter_topic": "dlq"},
    "checkpoints": {"store": "s3://lockstep/checkpoints"},
}, "pipelines/orders.yaml")

KAFKA = {"key": "binary", "value": "binary", "topic": "string", "partition": "int", "offset": "bigint",
         "timestamp": "timestamp", "timestampType": "int"}


def test_kafka_source_columns_pass_and_only_writer_columns_are_selected():
    assert check_output_schema(SPEC, KAFKA) == ("value", "topic", "partition", "offset", "key")


def test_strings_headers_and_error_are_accepted():
    fields = {**KAFKA, "value": "string", "key": "string", "error": "string",
              "headers": "array<struct<key:string,value:binary>>"}
    assert check_output_schema(SPEC, fields) == ("value", "topic", "partition", "offset", "key", "headers", "error")


def test_missing_provenance_column_names_the_file_and_column():
    fields = {k: v for k, v in KAFKA.items() if k != "offset"}
    with pytest.raises(TerminalError, match=r"pipelines/orders.yaml: transform .* missing \['offset'\]"):
        check_output_schema(SPEC, fields)


def test_wrong_types_are_all_named_with_what_is_expected():
    fields = {**KAFKA, "value": "struct<a:int>", "error": "int", "headers": "map<string,string>"}
    with pytest.raises(TerminalError) as info:
        check_output_schema(SPEC, fields)
    message = str(info.value)
    assert message.startswith("pipelines/orders.yaml: transform lockstep_examples.orders:enrich")
    assert "`value` is struct<a:int> (expected binary or string)" in message
    assert "`error` is int (expected string)" in message
    assert "`headers` is map<string,string>" in message
