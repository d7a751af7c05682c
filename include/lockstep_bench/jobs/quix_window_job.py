"""The windowed race's Quix Streams peer: a tumbling window count per key, exactly-once, stopped at
the end offsets.

    <quix venv>/bin/python include/lockstep_bench/jobs/quix_window_job.py --bootstrap HOST:PORT --source in \
        --sink out --ends '{"0": 1000}' --window-seconds 3600 --out-of-orderness-seconds 10

Run with the Quix venv's Python (``lockstep_bench.peers`` installs it). ``processing_guarantee=
"exactly-once"``, state in RocksDB with its changelog topics (Quix's recovery, on by default), a fresh
consumer group. The event time is the order's ``created_at`` (a timestamp extractor); the window is
keyed by the Kafka key (the customer), with ``grace`` = the out-of-orderness, and
``final(closing_strategy="partition")``: a window closes when its partition's event time passes its
end plus the grace, as a watermark would. Quix has no bounded mode: the first step counts the input
and stops the application once every partition reached its end offset; Quix commits its last
checkpoint on the way out. Prints one ``BENCH_RESULT {json}`` line.

Without ``--ends`` (the freshness race's windowed pipeline, ``lockstep_bench.freshness_windows``) it reads as
records arrive, prints ``BENCH_READY`` before ``run()`` and runs until stopped, committing every
``--commit-seconds``; ``--record-timestamps`` windows by the Kafka records' timestamps (Quix's default) instead
of ``created_at``.
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
    parser.add_argument("--window-seconds", type=int, required=True)
    parser.add_argument("--out-of-orderness-seconds", type=int, required=True)
    parser.add_argument("--commit-seconds", type=float, default=5.0)
    parser.add_argument("--record-timestamps", action="store_true",
                        help="the event time is the Kafka record's timestamp, not the order's created_at")
    args = parser.parse_args(argv)
    until_stopped = args.ends is None
    ends = {int(p): int(e) for p, e in json.loads(args.ends or "{}").items()}

    from quixstreams import Application, message_context

    started = time.monotonic()
    state_dir = tempfile.mkdtemp(prefix="bench-quix-windows-state-")
    app = Application(
        broker_address=args.bootstrap, consumer_group=f"bench-quix-windows-{uuid.uuid4().hex[:8]}",
        state_dir=state_dir, auto_offset_reset="earliest", processing_guarantee="exactly-once",
        loglevel="WARNING", commit_interval=args.commit_seconds,
        producer_extra_config={"linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4", "acks": "all"})
    if args.record_timestamps:
        source = app.topic(args.source, key_deserializer="str", value_deserializer="json")
    else:
        source = app.topic(args.source, key_deserializer="str", value_deserializer="json",
                           timestamp_extractor=lambda value, _headers, _ts, _type: int(value["created_at"]) * 1000)
    sink = app.topic(args.sink, key_serializer="str", value_serializer="json")
    remaining = {p: e for p, e in ends.items() if e > 0}
    counts = {"in": 0}

    def count_in(_value: dict[str, Any]) -> None:
        counts["in"] += 1
        if until_stopped:
            return
        ctx = message_context()
        if ctx.offset + 1 >= remaining.get(ctx.partition, 0):
            remaining.pop(ctx.partition, None)
            if not remaining:
                app.stop()

    sdf = app.dataframe(source)
    sdf = sdf.update(count_in)
    sdf = (sdf.tumbling_window(duration_ms=args.window_seconds * 1000, grace_ms=args.out_of_orderness_seconds * 1000)
           .count().final(closing_strategy="partition"))
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
    print("BENCH_RESULT " + json.dumps({"records_in": counts["in"], "job_seconds": round(job_seconds, 3),
                                         "session_seconds": round(run_started - started, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
