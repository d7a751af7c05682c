"""The benchmark's Quix Streams peer: an exactly-once Quix Application, stopped at the end offsets.

    <quix venv>/bin/python include/lockstep_bench/jobs/quix_job.py --bootstrap HOST:PORT --source in --sink out \
        --ends '{"0": 1000}'

Run with the Quix venv's Python (``lockstep_bench.peers`` installs it) and ``include/`` on
PYTHONPATH for the header names and the threshold. ``processing_guarantee="exactly-once"``
(transactions committed at each Quix checkpoint, read_committed input), a fresh consumer group,
``auto_offset_reset="earliest"``; Quix's JSON deserializer and serializer, the filter and
``amount_cents`` in its StreamingDataFrame. Quix has no bounded mode: the first step counts every
input record and asks the application to stop once every partition reached its end offset; Quix
finishes the message in hand and commits its last checkpoint on the way out. Prints one
``BENCH_RESULT {json}`` line: records in/out and the time from ``run()`` to its return.

Without ``--ends`` (the freshness race, ``lockstep_bench.freshness``) it reads as records arrive, prints
``BENCH_READY`` before ``run()`` and runs until stopped (SIGTERM, which Quix handles by finishing the message
in hand and committing its checkpoint). ``--commit-seconds``: Quix's ``commit_interval`` (its default, 5 s).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--ends", help='{"partition": end offset} JSON; none: run until stopped')
    parser.add_argument("--commit-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    until_stopped = args.ends is None
    ends = {int(p): int(e) for p, e in json.loads(args.ends or "{}").items()}

    from quixstreams import Application, message_context

    from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
    from lockstep_examples.bench import MIN_AMOUNT

    started = time.monotonic()
    state_dir = tempfile.mkdtemp(prefix="bench-quix-state-")  # Quix's default is ./state in the cwd
    app = Application(
        broker_address=args.bootstrap, consumer_group=f"bench-quix-{uuid.uuid4().hex[:8]}", state_dir=state_dir,
        auto_offset_reset="earliest", processing_guarantee="exactly-once", auto_create_topics=False,
        use_changelog_topics=False, loglevel="WARNING", commit_interval=args.commit_seconds,
        producer_extra_config={"linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4", "acks": "all"})
    source = app.topic(args.source, value_deserializer="json")
    sink = app.topic(args.sink, value_serializer="json")
    remaining = {p: e for p, e in ends.items() if e > 0}
    counts = {"in": 0, "out": 0}
    topic_bytes = args.source.encode()

    def count_in(_value: dict[str, Any]) -> None:
        counts["in"] += 1
        if until_stopped:
            return
        ctx = message_context()
        if ctx.offset + 1 >= remaining.get(ctx.partition, 0):
            remaining.pop(ctx.partition, None)
            if not remaining:
                app.stop()

    def with_cents(order: dict[str, Any]) -> dict[str, Any]:
        counts["out"] += 1
        order["amount_cents"] = round(order["amount"] * 100)
        return order

    def headers(_value: dict[str, Any], _key: object, _timestamp: int, _headers: object) -> list[tuple[str, bytes]]:
        ctx = message_context()
        return [(SOURCE_TOPIC, topic_bytes), (SOURCE_PARTITION, str(ctx.partition).encode()),
                (SOURCE_OFFSET, str(ctx.offset).encode())]

    sdf = app.dataframe(source)
    sdf = sdf.update(count_in)
    sdf = sdf.filter(lambda order: order.get("amount") is not None and order["amount"] >= MIN_AMOUNT)
    sdf = sdf.apply(with_cents)
    sdf = sdf.set_headers(headers)
    sdf.to_topic(sink)
    run_started = time.monotonic()
    if until_stopped:
        print("BENCH_READY " + json.dumps({"session_seconds": round(run_started - started, 3)}), flush=True)
        app.run()
    elif remaining:
        app.run()
    job_seconds = time.monotonic() - run_started
    shutil.rmtree(state_dir, ignore_errors=True)
    if remaining:
        raise RuntimeError(f"Quix stopped before the end offsets of partitions {sorted(remaining)}")
    print("BENCH_RESULT " + json.dumps({"records_in": counts["in"], "records_out": counts["out"],
                                         "job_seconds": round(job_seconds, 3),
                                         "session_seconds": round(run_started - started, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
