"""Smoke tests proving each part of the local platform is the real thing."""
from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from confluent_kafka import Consumer, Producer, TopicPartition

from ..support.topics import create_topics


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    create_topics(bootstrap, {name: partitions})


def read_all(bootstrap: str, topic: str, isolation: str, expected_end_wait: float = 10.0) -> list[bytes]:
    """Read a one-partition topic from the start up to its current end for this isolation level."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"smoke-{isolation}", "isolation.level": isolation,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        import time

        deadline = time.monotonic() + expected_end_wait
        position = 0
        while time.monotonic() < deadline and position < high:
            msg = consumer.poll(0.5)
            if msg is None:
                position = consumer.position([TopicPartition(topic, 0)])[0].offset
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
            position = msg.offset() + 1
        return values
    finally:
        consumer.close()


def test_kafka_read_committed_hides_aborted_transactions(bootstrap, unique):
    topic = f"smoke-txn-{unique}"
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"smoke-{unique}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"committed-{i}".encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, f"aborted-{i}".encode())
    producer.flush(30)
    producer.abort_transaction(30)

    committed = read_all(bootstrap, topic, "read_committed")
    uncommitted = read_all(bootstrap, topic, "read_uncommitted")
    assert committed == [b"committed-0", b"committed-1", b"committed-2"]
    assert uncommitted == committed + [b"aborted-0", b"aborted-1"]


def test_s3_conditional_create_and_stale_if_match_are_rejected(s3_client, platform, unique):
    bucket, key = platform.s3.bucket, f"smoke/{unique}.json"
    first = s3_client.put_object(Bucket=bucket, Key=key, Body=b"one", IfNoneMatch="*")
    with pytest.raises(ClientError) as second:
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"two", IfNoneMatch="*")
    assert second.value.response["Error"]["Code"] == "PreconditionFailed"

    updated = s3_client.put_object(Bucket=bucket, Key=key, Body=b"three", IfMatch=first["ETag"])
    with pytest.raises(ClientError) as stale:
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"four", IfMatch=first["ETag"])
    assert stale.value.response["Error"]["Code"] == "PreconditionFailed"
    assert updated["ETag"] != first["ETag"]
    assert s3_client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"three"


def test_spark_reads_exact_committed_offset_range(bootstrap, unique):
    from lockstep.spark.conf import local_session

    topic = f"smoke-spark-{unique}"
    create_topic(bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"smoke-spark-{unique}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"after-abort", partition=0)
    producer.commit_transaction(30)

    # Partition 0 holds v0,v2,..,v18 at offsets 0-9, a commit marker at 10, the aborted
    # record at 11, its abort marker at 12, then after-abort at 13. Read [3, 14) of
    # partition 0 and [5, 8) of partition 1.
    spark = local_session("lockstep-smoke")
    import json

    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed")
        .option("startingOffsets", json.dumps({topic: {"0": 3, "1": 5}}))
        .option("endingOffsets", json.dumps({topic: {"0": 14, "1": 8}}))
        .load()
    )
    try:
        rows = sorted((r.partition, r.offset, bytes(r.value))
                      for r in df.select("partition", "offset", "value").collect())
    finally:
        spark.stop()  # else py4j logs to a closed stream at interpreter exit
    expected = [(0, o, f"v{2 * o}".encode()) for o in range(3, 10)] + [(0, 13, b"after-abort")]
    expected += [(1, o, f"v{2 * o + 1}".encode()) for o in range(5, 8)]
    assert rows == expected
