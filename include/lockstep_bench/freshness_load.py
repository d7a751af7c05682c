"""The freshness benchmark's two helper processes: a producer at a fixed rate and a sink watcher.

    python -m lockstep_bench.freshness_load produce --bootstrap B --topic T --partitions 8 --rate 20000 \
        --seconds 120 --out ticks.json
    python -m lockstep_bench.freshness_load watch --bootstrap B --topic T-out --partitions 8 --folder DIR

Each runs in a process of its own, so neither shares a GIL with the other or with an engine's Python.

**produce** sends the benchmark's orders (``lockstep_dev.datagen.order`` with padding, from a pool of
`POOL` so no JSON is built while producing) at ``rate`` records/s for ``seconds``: every `TICK_S` it sends what
the clock says is due, round-robin over the partitions with an explicit partition, so the record at offset
``o`` of partition ``p`` is ``pool[(o * partitions + p) % POOL]`` (`pool_index`) and which records an engine
keeps is known without reading the input back. It is the topic's only, idempotent writer, so the offsets of
one partition follow the order of the sends; it writes a tick table (the time of each tick and how many records
each partition had been sent by its end) that dates every record (`lockstep_bench.freshness_figures`).

**watch** reads the sink with ``isolation.level=read_committed``, as a downstream consumer would, and records
when each output record became visible, by the source partition and offset every engine writes as headers
(``lockstep.model.output_contract``). A record seen twice is counted as a duplicate; a record whose source
offset should have been filtered out as unexpected. One record in `CHECK_EVERY` is parsed and compared with the
benchmark transform's output for its input. It stops when the harness creates ``<folder>/stop`` and leaves the
visibility times in ``<folder>/seen-<partition>.bin`` (native doubles, NaN for offsets not seen) and its
counts in ``<folder>/watch.json``; ``<folder>/progress.json`` says how many it has seen, every half second.

Both take ``--topic`` more than once (`lockstep_bench.lag_fleet`: many small pipelines): the producer sends
``rate`` records/s to each topic, the watcher reads them all with one consumer, and each topic's files go to a
folder of its own named after it.

The windowed pipeline (``lockstep_bench.freshness_windows``): ``produce --windowed`` sends the pool with each
partition's own customers (``window_pool``), the customer as the Kafka key and the tick's time as the record's
timestamp (the event time every engine windows by); ``watch-windows`` parses each window record the engines write
(``lockstep_bench.windowed.parse_window``) and appends (customer, start, count, visible) to
``<folder>/windows.bin`` (native doubles) as it sees them, so the harness can tell when every window it requires
has arrived.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from array import array
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message, Producer

#: Orders generated once per producer; a record's value is ``pool[pool_index(...)]``.
POOL = 60_000
#: How often the producer sends what is due.
TICK_S = 0.005
#: One visible record in this many is parsed and compared with what the transform makes of its input.
CHECK_EVERY = 97
#: The watcher's fetch wait: a read_committed consumer that waited librdkafka's default 500 ms for more data
#: would add up to half a second to every engine's figure.
FETCH_WAIT_MS = 5


def topic_folder(folder: Path, topic: str, topics: int) -> Path:
    """Where the files of ``topic`` go when ``topics`` topics are loaded or watched together: ``folder`` itself for
    one, a folder named after the topic for several."""
    return folder if topics == 1 else folder / topic


def pool_index(partition: int, offset: int, partitions: int) -> int:
    return (offset * partitions + partition) % POOL


def _pool(pad: int) -> list[bytes]:
    from lockstep_bench.workloads import PAD
    from lockstep_dev.datagen import order

    return [order(i, pad=pad or PAD) for i in range(POOL)]


def window_pool(pad: int, partitions: int) -> list[tuple[bytes, bytes]]:
    """(key, value) of each pool record for the windowed pipeline: the order with customer ``i % customers``
    (``freshness_windows.customers``), which is in partition ``i % partitions`` only, the customer as the key."""
    from lockstep_bench.freshness_windows import customers

    if POOL % partitions:
        raise ValueError(f"the windowed load needs partitions that divide {POOL}, not {partitions}")
    n = customers(partitions)
    out = []
    for i, value in enumerate(_pool(pad)):
        doc = json.loads(value)
        doc["customer"] = f"customer-{i % n}"
        out.append((doc["customer"].encode(), json.dumps(doc).encode()))
    return out


def kept_mask(pool: list[bytes]) -> bytes:
    """``mask[i]`` is 1 when the benchmark transform keeps ``pool[i]``: the watcher's check and the harness's count
    of what must arrive, one definition."""
    from lockstep_examples.bench import transform_value

    return bytes(1 if transform_value(v) is not None else 0 for v in pool)


def produce(bootstrap: str, topics: list[str], partitions: int, rate: float, seconds: float, out: Path, pad: int = 0,
            windowed: bool = False) -> int:
    """Send ``rate`` records/s to each of ``topics`` for ``seconds``. One topic: its tick table in ``out``; several:
    each topic's in ``<out's folder>/<topic>/<out's name>``. ``windowed``: keyed records of `window_pool`, each
    stamped with its tick's time (ms); one topic only."""
    if windowed and len(topics) != 1:
        raise ValueError("the windowed load goes to one topic")
    keyed = window_pool(pad, partitions) if windowed else None
    pool = [value for _, value in keyed] if keyed else _pool(pad)
    keys = [key for key, _ in keyed] if keyed else None
    producer = _load_producer(bootstrap)
    sent = {topic: [0] * partitions for topic in topics}
    next_p = dict.fromkeys(topics, 0)
    ticks: dict[str, list[list[float | int]]] = {topic: [] for topic in topics}
    total = 0
    started = time.time()
    end = started + seconds
    behind_s = 0.0
    while True:
        now = time.time()
        due = int(rate * seconds) if now >= end else int(rate * (now - started))
        if due > total:
            stamp = int(now * 1000)  # the event time of the windowed pipeline: what freshness_windows dates
            for topic in topics:
                counts = sent[topic]
                for _ in range(due - total):
                    p = next_p[topic]
                    index = (counts[p] * partitions + p) % POOL
                    _send(producer, topic, pool[index], p, keys[index] if keys is not None else None, stamp)
                    counts[p] += 1
                    next_p[topic] = (p + 1) % partitions
                ticks[topic].append([now, *counts])
            total = due
            behind_s = max(behind_s, time.time() - now)
        producer.poll(0)
        if now >= end:
            break
        time.sleep(max(0.0, TICK_S - (time.time() - now)))
    sent_s = time.time() - started
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records were not delivered to {', '.join(topics)}")
    for topic in topics:
        path = topic_folder(out.parent, topic, len(topics)) / out.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"started": started, "rate": rate, "seconds": seconds, "partitions": partitions,
                                    "records": total, "sent_s": round(sent_s, 3), "slowest_tick_s": round(behind_s, 4),
                                    "ends": sent[topic], "ticks": ticks[topic]}))
    return total * len(topics)


def _load_producer(bootstrap: str) -> Producer:
    """The load's producer: idempotent (the topic's only writer, so a partition's offsets follow the sends)."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                     "compression.type": "lz4", "queue.buffering.max.messages": 2_000_000, "log_level": 3})


def _send(producer: Producer, topic: str, value: bytes, partition: int, key: bytes | None, stamp_ms: int) -> None:
    """Send one record (a keyed one stamped ``stamp_ms``), waiting for room in the producer's queue."""
    while True:
        try:
            if key is None:
                producer.produce(topic, value, partition=partition)
            else:
                producer.produce(topic, value, key, partition=partition, timestamp=stamp_ms)
            return
        except BufferError:
            producer.poll(0.01)


def _downstream(bootstrap: str, topics: list[str]) -> Consumer:
    """A consumer of ``topic`` as a downstream reader has it: read_committed, from the start, a group of its own,
    the short fetch wait (`FETCH_WAIT_MS`)."""
    import uuid

    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"freshness-watch-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "fetch.wait.max.ms": FETCH_WAIT_MS, "log_level": 3})
    consumer.subscribe(topics)
    return consumer


class _Seen:
    """When each output record of one sink topic became visible, by its source partition and offset, and the
    checks on it (`watch`)."""

    def __init__(self, partitions: int, pool: list[bytes], mask: bytes) -> None:
        self.partitions, self.pool, self.mask = partitions, pool, mask
        self.rows = [array("d") for _ in range(partitions)]
        self.counts = {"seen": 0, "duplicates": 0, "unexpected": 0, "checked": 0, "wrong": 0, "no_headers": 0}

    def note(self, msg: Message, now: float) -> None:
        from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION
        from lockstep_examples.bench import transform_value

        counts = self.counts
        p = o = None
        for key, value in msg.headers() or []:  # type: ignore[str-unpack] # (name, bytes) pairs
            if key == SOURCE_PARTITION and value is not None:
                p = int(value)
            elif key == SOURCE_OFFSET and value is not None:
                o = int(value)
        if p is None or o is None or not 0 <= p < self.partitions:
            counts["no_headers"] += 1
            return
        row = self.rows[p]
        if o >= len(row):
            row.extend([math.nan] * (o + 1 - len(row) + 4096))
        if row[o] == row[o]:  # not NaN: seen before
            counts["duplicates"] += 1
            return
        row[o] = now
        counts["seen"] += 1
        index = (o * self.partitions + p) % POOL
        if not self.mask[index]:
            counts["unexpected"] += 1
        elif o % CHECK_EVERY == 0:
            counts["checked"] += 1
            want = transform_value(self.pool[index])
            if msg.value() != want and json.loads(msg.value() or b"null") != json.loads(want or b"null"):
                counts["wrong"] += 1

    def write(self, folder: Path) -> None:
        """``seen-<partition>.bin`` and ``watch.json`` in ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        for p, row in enumerate(self.rows):
            with (folder / f"seen-{p}.bin").open("wb") as f:
                row.tofile(f)
        (folder / "watch.json").write_text(json.dumps(self.counts))


def watch(bootstrap: str, topics: list[str], partitions: int, folder: Path, pad: int = 0) -> dict[str, int]:
    """Watch ``topics`` with one consumer. One topic: its figures in ``folder``; several: each in
    ``folder/<topic>`` (``progress.json`` in ``folder`` counts them all)."""
    pool = _pool(pad)
    mask = kept_mask(pool)
    consumer = _downstream(bootstrap, topics)
    seen = {topic: _Seen(partitions, pool, mask) for topic in topics}
    stop = folder / "stop"
    progress = folder / "progress.json"
    last_progress = 0.0

    def total() -> dict[str, int]:
        return {k: sum(s.counts[k] for s in seen.values()) for k in next(iter(seen.values())).counts}

    try:
        while True:
            batch = consumer.consume(num_messages=10_000, timeout=0.05)
            now = time.time()
            for msg in batch:
                if not msg.error():
                    seen[msg.topic() or ""].note(msg, now)
            if now - last_progress >= 0.5:
                progress.write_text(json.dumps(total()))
                last_progress = now
                if stop.exists():
                    break
    finally:
        consumer.close()
    for topic, one in seen.items():
        one.write(topic_folder(folder, topic, len(topics)))
    progress.write_text(json.dumps(total()))
    return total()


def watch_windows(bootstrap: str, topic: str, folder: Path) -> dict[str, int]:
    """Note each window record of ``topic`` as it becomes visible (read_committed): (customer index, start, count,
    visible) appended to ``<folder>/windows.bin`` every half second; a record that is no window is counted."""
    from lockstep_bench.windowed import parse_window

    consumer = _downstream(bootstrap, [topic])
    counts = {"seen": 0, "not_windows": 0}
    stop, progress, rows_path = folder / "stop", folder / "progress.json", folder / "windows.bin"
    rows_path.write_bytes(b"")
    pending = array("d")
    last_progress = 0.0
    try:
        while True:
            batch = consumer.consume(num_messages=10_000, timeout=0.05)
            now = time.time()
            for msg in batch:
                if msg.error():
                    continue
                try:
                    customer, start, count = parse_window(msg.key(), msg.value() or b"")
                    prefix, _, number = customer.rpartition("-")
                    index = int(number) if prefix == "customer" and number.isdigit() else -1
                except (ValueError, KeyError, TypeError):
                    counts["not_windows"] += 1
                    continue
                pending.extend((float(index), float(start), float(count), now))
                counts["seen"] += 1
            if now - last_progress >= 0.5:
                with rows_path.open("ab") as f:
                    pending.tofile(f)
                del pending[:]
                progress.write_text(json.dumps(counts))
                last_progress = now
                if stop.exists():
                    break
    finally:
        consumer.close()
    with rows_path.open("ab") as f:
        pending.tofile(f)
    (folder / "watch.json").write_text(json.dumps(counts))
    progress.write_text(json.dumps(counts))
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True, action="append", help="a topic to load (repeat for several)")
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--rate", type=float, required=True, help="records/s to each topic")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--windowed", action="store_true", help="keyed, timestamped orders of the windowed pipeline")
    ww = sub.add_parser("watch-windows")
    ww.add_argument("--bootstrap", required=True)
    ww.add_argument("--topic", required=True)
    ww.add_argument("--folder", type=Path, required=True)
    w = sub.add_parser("watch")
    w.add_argument("--bootstrap", required=True)
    w.add_argument("--topic", required=True, action="append", help="a sink topic to watch (repeat for several)")
    w.add_argument("--partitions", type=int, required=True)
    w.add_argument("--folder", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.what == "produce":
        produce(args.bootstrap, args.topic, args.partitions, args.rate, args.seconds, args.out, windowed=args.windowed)
    elif args.what == "watch-windows":
        watch_windows(args.bootstrap, args.topic, args.folder)
    else:
        watch(args.bootstrap, args.topic, args.partitions, args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
