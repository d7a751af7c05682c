"""The windowed race's Flink SQL peer: a TUMBLE window count per customer, bounded Kafka source in
streaming mode, RocksDB state with incremental checkpoints, exactly-once Kafka sink.

    <flink venv>/bin/python include/lockstep_bench/jobs/flink_window_job.py --bootstrap HOST:PORT --source in \
        --sink out --ends '{"0": 1000}' --connector-jar flink-sql-connector-kafka.jar --parallelism 2

Run with the Flink venv's Python (``lockstep_bench.peers`` installs it) and ``include/`` on PYTHONPATH;
the statements come from ``lockstep_bench.flink_sql.window_statements``. Streaming mode, not batch:
in batch mode Flink sorts instead of keeping state, and the race is about state. Checkpoints every
``--checkpoint-seconds`` commit the sink's transactions; when the bounded source ends, Flink fires
the open windows with its final watermark and commits the last transactions in a final checkpoint.
Prints one ``BENCH_RESULT {json}`` line.
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
    parser.add_argument("--ends", required=True, help='{"partition": end offset} JSON')
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--parallelism", type=int, required=True)
    parser.add_argument("--checkpoint-seconds", type=int, required=True)
    parser.add_argument("--window-seconds", type=int, required=True)
    parser.add_argument("--out-of-orderness-seconds", type=int, required=True)
    parser.add_argument("--transactional-id-prefix", default=f"bench-flink-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args(argv)
    ends = {int(p): int(e) for p, e in json.loads(args.ends).items()}

    from lockstep_bench.flink_sql import checkpointed_configuration, window_statements

    started = time.monotonic()
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    with tempfile.TemporaryDirectory(prefix="bench-flink-windows-") as scratch:
        conf = Configuration()
        for key, value in checkpointed_configuration(scratch, args.parallelism, args.checkpoint_seconds,
                                                     Path(args.connector_jar).resolve().as_uri()).items():
            conf.set_string(key, value)
        t_env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode()
                                        .with_configuration(conf).build())
        session_seconds = time.monotonic() - started
        ddl, insert = window_statements(args.bootstrap, args.source, args.sink, ends, args.transactional_id_prefix,
                                        f"bench-flink-{uuid.uuid4().hex[:6]}", args.window_seconds,
                                        args.out_of_orderness_seconds)
        for statement in ddl:
            t_env.execute_sql(statement)
        job_started = time.monotonic()
        t_env.execute_sql(insert).wait()
        job_seconds = time.monotonic() - job_started
        checkpoints = sorted(p.name for p in Path(scratch, "checkpoints").rglob("chk-*"))
    print("BENCH_RESULT " + json.dumps({"job_seconds": round(job_seconds, 3),
                                         "session_seconds": round(session_seconds, 3),
                                         "parallelism": args.parallelism, "checkpoints_left": len(checkpoints)}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
