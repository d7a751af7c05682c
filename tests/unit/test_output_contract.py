"""The output contract is defined once (`lockstep.model.output_contract`): the Python writer reads it, the
JVM writer receives it in its settings and hard-codes none of it, and a committable that is not the
contract's is refused. (tests/integration/test_writers.py checks what both writers really emit.)"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lockstep.model import output_contract as contract
from lockstep.model.checkpoint import PreparedTransaction
from lockstep.model.failpoints import FAILPOINTS, FailpointError
from lockstep.model.offsets import TopicPartition

JAVA_SOURCES = Path(__file__).resolve().parents[2] / "jvm" / "jvm-writer"

PREPARED = PreparedTransaction(transactional_id="p-1-0", producer_id=7, epoch=2,
                               partitions=(TopicPartition("out", 0), TopicPartition("dlq", 1)), records=3,
                               dead_letters=1, task_index=0, opened_at_ms=1_700_000_000_000)


def java_text() -> str:
    sources = sorted(JAVA_SOURCES.rglob("*.java"))
    assert sources, f"no Java sources under {JAVA_SOURCES}"
    return "\n".join(p.read_text() for p in sources)


def test_the_java_writer_hard_codes_no_header_name_or_schema_id():
    """Header names and the committable's schema id reach the JVM writer in its settings only."""
    literals = re.findall(r'"(lockstep\.[^"]*)"', java_text())
    assert literals == [], f"the JVM writer hard-codes contract values: {literals}"
    assert contract.COMMITTABLE_SCHEMA not in java_text()


def test_the_java_writer_hard_codes_no_record_size_constant():
    text = java_text()
    for name in ("BATCH_OVERHEAD", "RECORD_OVERHEAD", "HEADER_OVERHEAD", "COMPRESSION_SLACK"):
        assert not re.search(rf"\b{name}\s*=", text), name
    assert "key, value and headers dropped" not in text  # the too-large reason is the contract's template


def test_the_jvm_settings_carry_every_contract_value():
    doc = json.loads(json.dumps(contract.jvm_contract()))  # what the JVM writer receives in its settings
    assert doc["headers"] == {
        "source_topic": contract.SOURCE_TOPIC, "source_partition": contract.SOURCE_PARTITION,
        "source_offset": contract.SOURCE_OFFSET, "checkpoint": contract.CHECKPOINT_HEADER,
        "pipeline": contract.PIPELINE_HEADER, "error": contract.ERROR_HEADER,
        "original_size": contract.ORIGINAL_SIZE_HEADER,
    }
    assert tuple(doc["leading_headers"]) == contract.LEADING_HEADERS
    assert tuple(doc["required_columns"]) == contract.REQUIRED_COLUMNS
    assert tuple(doc["optional_columns"]) == contract.OPTIONAL_COLUMNS
    assert {k: tuple(v) for k, v in doc["accepted_types"].items()} == dict(contract.ACCEPTED_TYPES)
    assert set(contract.ACCEPTED_TYPES) == set(contract.REQUIRED_COLUMNS + contract.OPTIONAL_COLUMNS)
    assert doc["record_size"] == {"batch_overhead": contract.BATCH_OVERHEAD, "record_overhead": contract.RECORD_OVERHEAD,
                                  "header_overhead": contract.HEADER_OVERHEAD,
                                  "compression_slack": contract.COMPRESSION_SLACK}
    assert doc["too_large_reason"] == contract.TOO_LARGE_REASON
    assert doc["committable_schema"] == contract.COMMITTABLE_SCHEMA
    assert doc["mid_produce_after_records"] == contract.MID_PRODUCE_AFTER_RECORDS


def test_the_too_large_reason_fills_the_template_the_jvm_writer_fills():
    assert contract.too_large(1200, 1000, "sink", "the producer's default") == (
        "record of 1200 bytes exceeds the sink's limit of 1000 bytes (the producer's default); "
        "key, value and headers dropped")
    assert set(re.findall(r"{(\w+)}", contract.TOO_LARGE_REASON)) == {"size", "where", "limit", "source"}


def test_a_committable_is_the_schema_id_then_the_contract_fields_in_order():
    doc = PREPARED.to_json()
    assert list(doc) == ["schema", *contract.COMMITTABLE_FIELDS]
    assert doc["schema"] == contract.COMMITTABLE_SCHEMA
    assert PreparedTransaction.from_json(doc) == PREPARED


def test_a_task_result_is_parsed_once_into_the_committable():
    line = contract.task_result(3, 4, PREPARED.to_json())
    assert contract.parse_task_result(line) == (3, 4, PREPARED.to_json())
    assert contract.parse_task_result(contract.task_result(1, 0, None)) == (1, 0, None)


@pytest.mark.parametrize("drift, message", [
    (lambda d: d.pop("schema"), "schema is None"),
    (lambda d: d.update(schema="lockstep.committable/2"), "schema is 'lockstep.committable/2'"),
    (lambda d: d.pop("epoch"), r"missing \['epoch'\]"),
    (lambda d: d.update(producerId=7), r"unexpected \['producerId'\]"),
])
def test_a_writer_whose_committable_drifts_fails_the_run(drift, message):
    doc = PREPARED.to_json()
    drift(doc)
    with pytest.raises(contract.CommittableError, match=message):
        contract.parse_task_result(json.dumps({"task": 0, "rows": 4, "committable": doc}))


def test_committable_doc_refuses_fields_outside_the_contract():
    fields = {k: v for k, v in PREPARED.to_json().items() if k != "schema"}
    with pytest.raises(contract.CommittableError, match="unexpected"):
        contract.committable_doc(**fields, extra=1)


def test_the_writers_failpoints_are_the_contracts():
    for name, where in contract.WRITER_FAILPOINTS.items():
        assert FAILPOINTS[name] == where
    names = list(FAILPOINTS)
    assert names.index("job.before_produce") < names.index("job.mid_produce") < names.index("job.after_flush")


# ---- job.mid_produce in the Python writer: the contract's record, whatever the Arrow batches ----------
class FakeWriter:
    """Records what `python_writer.produce_batch` hands the producer (no Kafka: pure counting)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, list]] = []
        self.sources: set[tuple[str, int]] = set()

    def produce(self, topic, value, key=None, headers=None, dead_letter=False):
        self.records.append((topic, headers))

    def carries(self, sources):
        self.sources.update(sources)


def batches(*sizes: int) -> list:
    import pyarrow as pa

    out, offset = [], 0
    for n in sizes:
        out.append(pa.RecordBatch.from_pydict({
            "value": [b"v"] * n, "topic": ["in"] * n, "partition": [0] * n,
            "offset": list(range(offset, offset + n)),
        }))
        offset += n
    return out


def produce_task(sizes: tuple[int, ...], writer: FakeWriter, task: int = 5, attempt: int = 0) -> FakeWriter:
    """One attempt of a Spark task's rows, in Arrow batches of ``sizes``, through the Python writer's produce loop."""
    from lockstep.spark.python_writer import produce_batch
    from lockstep.spark.writer_settings import WriterSettings

    settings = WriterSettings(bootstrap="unused", producer_config={}, id_prefix="p", pipeline="orders", checkpoint_id=9,
                              timeout_ms=60_000, sink_topic="out", dead_letter_topic="dlq")
    produced = 0
    for batch in batches(*sizes):
        produced += produce_batch(writer, settings, batch, produced=produced, task=task, attempt=attempt)
    return writer


@pytest.mark.parametrize("sizes", [(5,), (1, 4), (0, 1, 1, 3), (1, 1), (0, 0, 2)])
def test_mid_produce_fires_after_the_contracts_record_whatever_the_batches(monkeypatch, sizes):
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "job.mid_produce=raise")
    writer = FakeWriter()
    with pytest.raises(FailpointError) as info:
        produce_task(sizes, writer)
    assert len(writer.records) == contract.MID_PRODUCE_AFTER_RECORDS
    assert str(info.value) == "failpoint job.mid_produce raised" + contract.mid_produce_message(
        5, contract.MID_PRODUCE_AFTER_RECORDS)


def test_mid_produce_raise_first_attempt_fires_in_the_first_attempt_only(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "job.mid_produce=raise-first-attempt")
    with pytest.raises(FailpointError) as info:
        produce_task((3,), FakeWriter(), attempt=0)
    assert str(info.value) == "failpoint job.mid_produce raised" + contract.mid_produce_message(
        5, contract.MID_PRODUCE_AFTER_RECORDS) + " in the task's first attempt"
    retry = produce_task((3,), FakeWriter(), attempt=1)
    assert len(retry.records) == 3, "the retry produces all of the task's records"


@pytest.mark.parametrize("sizes", [(1,), (0, 1), ()])
def test_mid_produce_is_never_reached_by_a_task_with_no_more_records(monkeypatch, sizes):
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "job.mid_produce=raise")
    writer = produce_task(sizes, FakeWriter())
    assert len(writer.records) == sum(sizes) <= contract.MID_PRODUCE_AFTER_RECORDS


def test_the_python_writer_tells_its_transaction_every_source_partition_it_produced_from():
    import pyarrow as pa

    from lockstep.spark.python_writer import produce_batch
    from lockstep.spark.writer_settings import WriterSettings

    settings = WriterSettings(bootstrap="unused", producer_config={}, id_prefix="p", pipeline="orders", checkpoint_id=9,
                              timeout_ms=60_000, sink_topic="out", dead_letter_topic="dlq")
    writer = FakeWriter()
    batch = pa.RecordBatch.from_pydict({"value": [b"v"] * 4, "topic": ["a", "b", "a", "a"], "partition": [0, 0, 3, 0],
                                        "offset": [1, 1, 7, 2], "error": [None, None, "bad", None]})
    produce_batch(writer, settings, batch, produced=0, task=0, attempt=0)
    assert writer.sources == {("a", 0), ("b", 0), ("a", 3)}, "a dead letter's source partition counts too"


def test_every_record_leads_with_the_contracts_headers():
    writer = produce_task((3,), FakeWriter())
    for topic, headers in writer.records:
        assert topic == "out"
        assert tuple(name for name, _ in headers) == contract.LEADING_HEADERS



def test_the_jvm_sink_names_are_the_ones_the_driver_uses():
    """The data source's short name, its write id option and the session conf key of its settings are
    spelled in Java and in `lockstep.spark.jvm_writer`; a mismatch would only show when a run starts."""
    from lockstep.spark import jvm_writer

    text = java_text()
    assert f'SHORT_NAME = "{jvm_writer.JVM_SINK_FORMAT}"' in text
    assert f'WRITE_ID_OPTION = "{jvm_writer.JVM_WRITE_ID_OPTION}"' in text
    assert f'SETTINGS_CONF_PREFIX = "{jvm_writer.JVM_SETTINGS_CONF_PREFIX}"' in text
    # Not propagated to the jobs' properties (only spark.* keys are), and redacted where Spark lists it.
    assert not jvm_writer.JVM_SETTINGS_CONF_PREFIX.startswith("spark.") and "secret" in jvm_writer.JVM_SETTINGS_CONF_PREFIX


def test_source_partitions_are_the_distinct_pairs_with_one_topic_or_several():
    import pyarrow as pa

    from lockstep.spark.python_writer import source_partitions

    one = pa.array(["a"] * 4), pa.array([0, 3, 0, 3])
    assert source_partitions(*one, one[0].to_pylist()) == {("a", 0), ("a", 3)}
    two = pa.array(["a", "b", "a"]), pa.array([0, 0, 3])
    assert source_partitions(*two, two[0].to_pylist()) == {("a", 0), ("b", 0), ("a", 3)}
