"""The two-phase commit across processes, on the real Kafka broker.

A writer process prepares (flushes, does not commit) and exits; this process then commits, aborts
or fences by transactional id. `read_committed` consumers are the judge of what became visible.
"""
from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from lockstep.kafka.committer import TransactionCommitter, TransactionFencedError, TransactionStateError
from lockstep.kafka.internals import KafkaTransactionAdmin
from lockstep.model.checkpoint import PreparedTransaction
from lockstep.model.transactions import TransactionState
from lockstep.spark.python_writer import RecordRejectedError, TransactionalWriter

from ..support.topics import create_topics

T = TypeVar("T")

# A writer process: prepares one transaction and prints its committable, then exits without
# committing (the Spark task's life, minus Spark).
WRITER_SCRIPT = """
import json, sys
from lockstep.spark.python_writer import TransactionalWriter
bootstrap, tid, topic, count, timeout_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
with TransactionalWriter(bootstrap, tid, task_index=7, transaction_timeout_ms=timeout_ms) as writer:
    for i in range(count):
        writer.produce(topic, f"{tid}-{i}".encode(), key=str(i).encode())
    prepared = writer.prepare()
print(json.dumps(prepared.to_json() if prepared else None))
"""


# ---- helpers -------------------------------------------------------------------------------------
def create_topic(bootstrap: str, name: str, partitions: int = 2, config: dict[str, str] | None = None) -> str:
    return create_topics(bootstrap, {name: partitions}, config=config)[0]


def prepare_in_subprocess(bootstrap: str, tid: str, topic: str, count: int,
                          timeout_ms: int = 600_000) -> PreparedTransaction | None:
    done = subprocess.run([sys.executable, "-c", WRITER_SCRIPT, bootstrap, tid, topic, str(count), str(timeout_ms)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    return None if doc is None else PreparedTransaction.from_json(doc)


def prepare_here(bootstrap: str, tid: str, topic: str, count: int) -> PreparedTransaction:
    writer = TransactionalWriter(bootstrap, tid, transaction_timeout_ms=600_000)
    for i in range(count):
        writer.produce(topic, f"{tid}-{i}".encode())
    prepared = writer.prepare()
    assert prepared is not None
    return prepared


def read_visible(bootstrap: str, topic: str, isolation: str = "read_committed", timeout_s: float = 20) -> list[bytes]:
    """Every value visible at this isolation level, read up to the end each partition reports now.

    For read_committed the end is the last stable offset, so an open transaction ends the read early.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        at_end: set[int] = set()
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"awaited the end of {topic} partitions {set(partitions) - at_end}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            elif msg.error():
                raise AssertionError(msg.error())
            else:
                values.append(msg.value())
        return values
    finally:
        consumer.close()


def stable_end(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(last stable offset, high watermark): they differ while a transaction is open on the partition."""
    consumers = []
    try:
        ends = []
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t-ends", "isolation.level": isolation})
            consumers.append(consumer)
            ends.append(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1])
        return ends[0], ends[1]
    finally:
        for consumer in consumers:
            consumer.close()


def poll_until(what: str, probe: Callable[[], T], done: Callable[[T], bool], timeout_s: float = 30) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s awaiting {what}; last seen {value}"
        time.sleep(0.2)  # spacing between probes of broker state


def await_visible(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The committed values once `count` are visible: EndTxn returns at PrepareCommit, markers follow."""
    return sorted(poll_until(f"{count} committed records in {topic}", lambda: read_visible(bootstrap, topic),
                             lambda values: len(values) >= count))


def await_markers(bootstrap: str, topic: str, partition: int = 0) -> None:
    """Wait until no transaction holds the partition's last stable offset back (markers written)."""
    poll_until(f"the transaction markers on {topic}[{partition}]", lambda: stable_end(bootstrap, topic, partition),
               lambda ends: ends[0] == ends[1])


def expected(tid: str, count: int) -> list[bytes]:
    return [f"{tid}-{i}".encode() for i in range(count)]


@pytest.fixture
def committer(bootstrap: str):
    with TransactionCommitter(bootstrap, retry_deadline_s=30) as c:
        yield c


# ---- tests ---------------------------------------------------------------------------------------
def test_prepared_in_another_process_commits_once(bootstrap, unique, committer):
    topic = create_topic(bootstrap, f"txn-commit-{unique}")
    tid = f"lockstep-test-{unique}-0"

    prepared = prepare_in_subprocess(bootstrap, tid, topic, 50)

    assert prepared is not None and prepared.records == 50 and prepared.task_index == 7
    assert {p.topic for p in prepared.partitions} == {topic}
    seen = committer.describe([tid])[tid]
    assert seen.holds(prepared.producer_id, prepared.epoch), seen  # the writer's exit did not abort it
    assert set(seen.partitions) == set(prepared.partitions)
    assert read_visible(bootstrap, topic) == []

    committer.commit(tid, prepared.producer_id, prepared.epoch)

    assert await_visible(bootstrap, topic, 50) == sorted(expected(tid, 50))


def test_recommit_is_a_no_op(bootstrap, unique, committer):
    topic = create_topic(bootstrap, f"txn-recommit-{unique}")
    tid = f"lockstep-test-{unique}-0"
    prepared = prepare_in_subprocess(bootstrap, tid, topic, 10)
    committer.commit(tid, prepared.producer_id, prepared.epoch)

    committer.commit(tid, prepared.producer_id, prepared.epoch)  # e.g. the commit task retried

    assert await_visible(bootstrap, topic, 10) == sorted(expected(tid, 10))
    assert committer.describe([tid])[tid].state == TransactionState.COMPLETE_COMMIT


def test_abort_hides_records(bootstrap, unique, committer):
    topic = create_topic(bootstrap, f"txn-abort-{unique}")
    tid = f"lockstep-test-{unique}-0"
    prepared = prepare_in_subprocess(bootstrap, tid, topic, 10)

    committer.abort(tid, prepared.producer_id, prepared.epoch)
    committer.abort(tid, prepared.producer_id, prepared.epoch)  # idempotent as well

    for partition in prepared.partitions:
        await_markers(bootstrap, topic, partition.partition)
    assert read_visible(bootstrap, topic) == []
    assert len(read_visible(bootstrap, topic, "read_uncommitted")) == 10  # written, then hidden
    with pytest.raises(TransactionStateError, match=f"{tid}.*CompleteAbort"):
        committer.commit(tid, prepared.producer_id, prepared.epoch)


def test_timed_out_transaction_cannot_be_committed(bootstrap, unique, committer):
    topic = create_topic(bootstrap, f"txn-timeout-{unique}")
    tid = f"lockstep-test-{unique}-0"
    prepared = prepare_in_subprocess(bootstrap, tid, topic, 10, timeout_ms=3000)

    poll_until(f"the broker to time out transaction {tid}",
               lambda: committer.describe([tid])[tid], lambda seen: not seen.is_open)

    with pytest.raises(TransactionFencedError, match=f"{tid}.*timed out.*3000 ms"):
        committer.commit(tid, prepared.producer_id, prepared.epoch)
    assert read_visible(bootstrap, topic) == []


def test_fence_aborts_a_dead_writers_transaction_and_unblocks_readers(bootstrap, unique, committer):
    topic = create_topic(bootstrap, f"txn-fence-{unique}", partitions=1)
    dead_tid, live_tid = f"lockstep-test-{unique}-0", f"lockstep-test-{unique}-1"
    dead = prepare_in_subprocess(bootstrap, dead_tid, topic, 5)  # its process is gone, its transaction is not
    live = prepare_here(bootstrap, live_tid, topic, 3)
    committer.commit(live_tid, live.producer_id, live.epoch)
    stable, high = stable_end(bootstrap, topic)
    assert stable < high and read_visible(bootstrap, topic) == []  # the open transaction holds readers back

    seen = committer.fence(dead_tid)

    assert seen.state == TransactionState.EMPTY and seen.epoch > dead.epoch
    await_markers(bootstrap, topic)
    assert sorted(read_visible(bootstrap, topic)) == sorted(expected(live_tid, 3))
    with pytest.raises(TransactionFencedError, match=f"{dead_tid}.*re-initialised"):
        committer.commit(dead_tid, dead.producer_id, dead.epoch)


def test_list_open_finds_open_ids_by_prefix(bootstrap, unique, committer):
    topic = create_topic(bootstrap, f"txn-list-{unique}")
    prefix = f"lockstep-list-{unique}-"
    open_ids = [f"{prefix}{i}" for i in range(2)]
    prepared = [prepare_here(bootstrap, tid, topic, 2) for tid in open_ids]
    other = prepare_here(bootstrap, f"lockstep-other-{unique}-0", topic, 1)

    assert committer.list_open(prefix) == open_ids
    # The adapter's own rows: the protocol's states (not kafka-python's enum) and the producer ids.
    admin = KafkaTransactionAdmin(bootstrap)
    try:
        rows = {r.transactional_id: r for r in admin.list_transactions([TransactionState.ONGOING])}
        coordinator = admin.find_coordinator(open_ids[0])
    finally:
        admin.close()
    assert [(rows[t].state, rows[t].producer_id) for t in open_ids] == [(TransactionState.ONGOING, p.producer_id)
                                                                        for p in prepared]
    assert all(rows[t].state is TransactionState.ONGOING for t in open_ids)
    assert coordinator.error == "NoError" and coordinator.node_id >= 0

    committer.commit(open_ids[0], prepared[0].producer_id, prepared[0].epoch)
    committer.abort(open_ids[1], prepared[1].producer_id, prepared[1].epoch)
    committer.abort(other.transactional_id, other.producer_id, other.epoch)
    poll_until(f"no open transactions under {prefix}", lambda: committer.list_open(prefix), lambda ids: ids == [])


def test_empty_writer_yields_no_committable(bootstrap, unique, committer):
    topic = create_topic(bootstrap, f"txn-empty-{unique}")
    tid = f"lockstep-test-{unique}-0"

    assert prepare_in_subprocess(bootstrap, tid, topic, 0) is None

    seen = committer.describe([tid, f"lockstep-never-{unique}"])
    assert seen[tid].state == TransactionState.EMPTY and not seen[tid].is_open  # initialised, never began on the broker
    assert seen[f"lockstep-never-{unique}"].state == TransactionState.UNKNOWN
    assert committer.list_open(f"lockstep-test-{unique}") == []


def test_rejected_records_fail_prepare_and_abort(bootstrap, unique, committer):
    topic = create_topic(bootstrap, f"txn-reject-{unique}", partitions=1, config={"max.message.bytes": "2000"})
    tid = f"lockstep-test-{unique}-0"
    writer = TransactionalWriter(bootstrap, tid, extra_config={"compression.type": "none"})
    writer.produce(topic, b"x" * 10_000)

    with pytest.raises(RecordRejectedError, match=f"{tid}.*MSG_SIZE_TOO_LARGE"):
        writer.prepare()

    # Aborted right away (EndTxn sent), not left open to stall readers until it times out.
    assert committer.describe([tid])[tid].state in (TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT)


def test_librdkafka_destroy_keeps_the_transaction_open_but_close_aborts(bootstrap, unique, committer):
    """Why the writer never calls close() after prepare (a canary for librdkafka upgrades)."""
    topic = create_topic(bootstrap, f"txn-destroy-{unique}", partitions=1)
    destroyed, closed = f"lockstep-test-{unique}-destroyed", f"lockstep-test-{unique}-closed"
    for tid in (destroyed, closed):
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"x")
        assert producer.flush(30) == 0
        if tid == closed:
            producer.close()
        del producer
        gc.collect()

    seen = committer.describe([destroyed, closed])
    assert seen[destroyed].state == TransactionState.ONGOING
    assert seen[closed].state == TransactionState.COMPLETE_ABORT
    committer.fence(destroyed)  # do not leave it open for other tests' readers


def test_the_transaction_timeout_cap_is_read_from_the_real_broker(bootstrap):
    """The cap the run step checks ``transactions.timeout_ms`` against is the broker's own setting
    (the local platform starts Kafka with transaction.max.timeout.ms=3600000)."""
    from confluent_kafka.admin import AdminClient

    from lockstep.spark.writer_settings import transaction_timeout_cap

    assert transaction_timeout_cap("unused", admin=AdminClient({"bootstrap.servers": bootstrap})) == 3_600_000
