"""The benchmark's exactly-once peers end to end on the real broker: Flink SQL and Quix Streams each
read exactly the input's end offsets and commit exactly the records the shared transform keeps,
with the provenance headers, visible to a read_committed consumer.

Opt-in (``LOCKSTEP_BENCH_PEERS=1``): the peers need their own venvs (PyFlink is ~850 MB, set up in
``.cache/bench/`` on first use), and ``make test`` stays offline of them."""
from __future__ import annotations

import json
import os
import time

import pytest

from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC

pytestmark = pytest.mark.skipif(os.environ.get("LOCKSTEP_BENCH_PEERS") != "1",
                                reason="set LOCKSTEP_BENCH_PEERS=1 to set up and run the benchmark's peers")

RECORDS, PARTITIONS = 3_000, 3


def committed(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list:
    """Every record of ``topic`` a read_committed consumer sees (up to the high watermarks)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    try:
        highs = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in highs])
        records, todo = [], {p for p, high in highs.items() if high > 0}
        deadline = time.monotonic() + timeout_s
        while todo:
            assert time.monotonic() < deadline, f"did not reach the high watermarks {highs} of {topic}"
            for msg in consumer.consume(1000, timeout=0.1):
                if msg.error():
                    continue
                records.append(msg)
                if msg.offset() + 1 >= highs[msg.partition()]:
                    todo.discard(msg.partition())
            # Past the last record a partition may end in a commit marker, which is never delivered.
            for p in list(todo):
                position = consumer.position([TopicPartition(topic, p)])[0].offset
                if position >= highs[p]:
                    todo.discard(p)
        return records
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def source(bootstrap: str) -> tuple[str, dict[int, int], dict[tuple[int, int], dict]]:
    """An input topic and what the shared transform makes of it: (partition, offset) -> output doc."""
    from confluent_kafka import Consumer, TopicPartition

    from lockstep_bench import workloads
    from lockstep_examples.bench import transform_value

    w = workloads.make_input(bootstrap, RECORDS, PARTITIONS, name=f"peers-in-{os.getpid()}")
    ends = workloads.end_offsets(bootstrap, w.topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "peers-expected", "enable.auto.commit": False})
    consumer.assign([TopicPartition(w.topic, p, 0) for p in ends])
    expected, seen = {}, 0
    while seen < RECORDS:
        for msg in consumer.consume(1000, timeout=0.1):
            if not msg.error():
                seen += 1
                out = transform_value(msg.value())
                if out is not None:
                    expected[(msg.partition(), msg.offset())] = json.loads(out)
    consumer.close()
    return w.topic, ends, expected


@pytest.mark.parametrize("peer", ["flink", "quix"])
def test_peer_commits_exactly_the_transformed_input(peer: str, bootstrap: str, source, unique: str) -> None:
    from lockstep.paths import cache_dir, project_root
    from lockstep_bench import peers, workloads
    from lockstep_bench.measure import execute

    peers.ensure(peers.FLINK if peer == "flink" else peers.QUIX, cache_dir())
    topic, ends, expected = source
    sink = f"peers-out-{peer}-{unique}"
    workloads.create_topic(bootstrap, sink, PARTITIONS)
    build = peers.flink_command if peer == "flink" else peers.quix_command
    run = execute(peer, build(cache_dir(), project_root(), bootstrap, topic, sink, ends), RECORDS, PARTITIONS)
    assert (run.inner["records_in"], run.inner["records_out"]) == (RECORDS, len(expected))
    out = committed(bootstrap, sink)
    by_source = {}
    for msg in out:
        headers = {k: v.decode() for k, v in msg.headers()}
        assert headers[SOURCE_TOPIC] == topic
        by_source[(int(headers[SOURCE_PARTITION]), int(headers[SOURCE_OFFSET]))] = json.loads(msg.value())
    assert len(out) == len(by_source) == len(expected)  # no duplicate, none missing
    assert by_source == expected  # the same records as the shared transform, field for field
