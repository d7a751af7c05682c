"""The join race's Flink SQL peer: each order enriched with its customer's name and tier by an event-time
temporal join (``FOR SYSTEM_TIME AS OF``) against an ``upsert-kafka`` table over the customers topic,
bounded Kafka sources in streaming mode, RocksDB state with incremental checkpoints, exactly-once Kafka sink.

    <flink venv>/bin/python include/lockstep_bench/jobs/flink_join_job.py --bootstrap HOST:PORT --orders in \
        --orders-ends '{"0": 1000}' --customers c --customers-ends '{"0": 100}' --sink out \
        --connector-jar flink-sql-connector-kafka.jar --parallelism 2 --checkpoint-seconds 5

Run with the Flink venv's Python (``lockstep_bench.peers`` installs it) and ``include/`` on PYTHONPATH;
the statements come from ``lockstep_bench.flink_sql.join_statements`` (``--join regular``: the regular join
on the upsert table instead). Checkpoints every ``--checkpoint-seconds`` commit the sink's transactions;
the temporal join emits an order once the watermarks of both sides pass its ``created_at`` (the customers'
source ends first, then its watermark is final), and the last transactions commit in a final checkpoint
when both bounded sources end. Prints one ``BENCH_RESULT {json}`` line.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--orders", required=True)
    parser.add_argument("--orders-ends", required=True, help='{"partition": end offset} JSON')
    parser.add_argument("--customers", required=True)
    parser.add_argument("--customers-ends", required=True, help='{"partition": end offset} JSON')
    parser.add_argument("--sink", required=True)
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--parallelism", type=int, required=True)
    parser.add_argument("--checkpoint-seconds", type=int, required=True)
    parser.add_argument("--out-of-orderness-seconds", type=int, default=10)
    parser.add_argument("--join", choices=("temporal", "regular"), default="temporal")
    parser.add_argument("--transactional-id-prefix", default=f"bench-flink-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args(argv)

    def offsets(text: str) -> dict[int, int]:
        return {int(p): int(e) for p, e in json.loads(text).items()}

    from lockstep_bench.flink_sql import checkpointed_configuration, join_statements

    started = time.monotonic()
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    with tempfile.TemporaryDirectory(prefix="bench-flink-joins-") as scratch:
        conf = Configuration()
        for key, value in checkpointed_configuration(scratch, args.parallelism, args.checkpoint_seconds,
                                                     Path(args.connector_jar).resolve().as_uri()).items():
            conf.set_string(key, value)
        t_env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode()
                                        .with_configuration(conf).build())
        session_seconds = time.monotonic() - started
        ddl, insert = join_statements(args.bootstrap, args.orders, offsets(args.orders_ends), args.customers,
                                      offsets(args.customers_ends), args.sink, args.transactional_id_prefix,
                                      f"bench-flink-{uuid.uuid4().hex[:6]}", args.out_of_orderness_seconds, args.join)
        for statement in ddl:
            t_env.execute_sql(statement)
        job_started = time.monotonic()
        t_env.execute_sql(insert).wait()
        job_seconds = time.monotonic() - job_started
        checkpoints = sorted(p.name for p in Path(scratch, "checkpoints").rglob("chk-*"))
    print("BENCH_RESULT " + json.dumps({"job_seconds": round(job_seconds, 3),
                                         "session_seconds": round(session_seconds, 3), "join": args.join,
                                         "parallelism": args.parallelism, "checkpoints_left": len(checkpoints)}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
