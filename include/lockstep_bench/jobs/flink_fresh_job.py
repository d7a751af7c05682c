"""The freshness race's Flink SQL peer: the main race's transform over an unbounded Kafka source, in streaming
mode, exactly-once checkpoints every ``--checkpoint-seconds`` (each commits the sink's transactions).

    <flink venv>/bin/python include/lockstep_bench/jobs/flink_fresh_job.py --bootstrap HOST:PORT --source in \
        --sink out --partitions 8 --connector-jar flink-sql-connector-kafka.jar --parallelism 2 \
        --checkpoint-seconds 5

With ``--window-seconds`` and ``--out-of-orderness-seconds`` it runs the windowed pipeline instead (a tumbling
count per customer over the Kafka records' timestamps, ``flink_sql.streaming_window_statements``), with RocksDB
state as the windowed race's job keeps it.

Run with the Flink venv's Python and ``include/`` on PYTHONPATH (``lockstep_bench.peers``). Prints
``BENCH_READY {json}`` once the job is submitted and runs until it is stopped (SIGTERM): the freshness harness
stops it once its watcher has seen every record (``lockstep_bench.freshness``).
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
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--parallelism", type=int, required=True)
    parser.add_argument("--checkpoint-seconds", type=int, required=True)
    parser.add_argument("--window-seconds", type=int, help="the windowed pipeline: its tumbling window")
    parser.add_argument("--out-of-orderness-seconds", type=int, default=0)
    parser.add_argument("--transactional-id-prefix", default=f"bench-flink-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args(argv)

    from lockstep_bench.flink_sql import checkpointed_configuration, streaming_statements, streaming_window_statements

    started = time.monotonic()
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    with tempfile.TemporaryDirectory(prefix="bench-flink-fresh-") as scratch:
        conf = Configuration()
        for key, value in checkpointed_configuration(scratch, args.parallelism, args.checkpoint_seconds,
                                                     Path(args.connector_jar).resolve().as_uri()).items():
            conf.set_string(key, value)
        group = f"bench-flink-{uuid.uuid4().hex[:6]}"
        if args.window_seconds:
            ddl, insert = streaming_window_statements(args.bootstrap, args.source, args.sink, args.partitions,
                                                      args.transactional_id_prefix, group, args.window_seconds,
                                                      args.out_of_orderness_seconds)
        else:
            conf.set_string("state.backend.type", "hashmap")  # stateless: no RocksDB to start
            ddl, insert = streaming_statements(args.bootstrap, args.source, args.sink, args.partitions,
                                               args.transactional_id_prefix, group=group)
        t_env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode()
                                        .with_configuration(conf).build())
        for statement in ddl:
            t_env.execute_sql(statement)
        result = t_env.execute_sql(insert)
        print("BENCH_READY " + json.dumps({"session_seconds": round(time.monotonic() - started, 3),
                                            "parallelism": args.parallelism}), flush=True)
        result.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
