"""The benchmark's Flink SQL peer: a bounded Kafka → Kafka job with Flink's exactly-once Kafka sink.

    <flink venv>/bin/python include/lockstep_bench/jobs/flink_sql_job.py --bootstrap HOST:PORT --source in --sink out \
        --ends '{"0": 1000}' --connector-jar flink-sql-connector-kafka.jar --parallelism 2

Run with the Flink venv's Python (``lockstep_bench.peers`` installs it) and ``include/`` on
PYTHONPATH; the statements come from ``lockstep_bench.flink_sql``. PyFlink's Table API on a local
mini-cluster, in BATCH runtime mode: the Kafka source is bounded by the end offsets, and in batch
mode Flink's sink commits its writers' transactions when the input ends (no checkpoint needed; in
streaming mode the last transaction would wait for a checkpoint after the source finished). Prints
one ``BENCH_RESULT {json}`` line: records in/out (counted by the job on the same scan), the job's
own time and the time to create the table environment.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path


def read_counts(folder: Path) -> tuple[int, int]:
    rows = [line for f in sorted(folder.rglob("*")) if f.is_file() and not f.name.startswith(".")
            for line in f.read_text().splitlines() if line.strip()]
    if len(rows) != 1:
        raise RuntimeError(f"expected one count row in {folder}, found {rows!r}")
    records_in, records_out = (int(x) for x in rows[0].split(","))
    return records_in, records_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--ends", required=True, help='{"partition": end offset} JSON')
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--parallelism", type=int, required=True)
    parser.add_argument("--transactional-id-prefix", default=f"bench-flink-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args(argv)
    ends = {int(p): int(e) for p, e in json.loads(args.ends).items()}

    from lockstep_bench.flink_sql import statements

    started = time.monotonic()
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    with tempfile.TemporaryDirectory(prefix="bench-flink-") as scratch:
        conf = Configuration()
        conf.set_string("pipeline.jars", Path(args.connector_jar).resolve().as_uri())
        conf.set_string("parallelism.default", str(args.parallelism))
        # The mini-cluster's spill and upload folders, gone with the run (defaults: /tmp, fixed names).
        conf.set_string("io.tmp.dirs", scratch)
        conf.set_string("web.upload.dir", scratch)
        t_env = TableEnvironment.create(EnvironmentSettings.new_instance().in_batch_mode()
                                        .with_configuration(conf).build())
        session_seconds = time.monotonic() - started
        ddl, inserts = statements(args.bootstrap, args.source, args.sink, ends, args.transactional_id_prefix,
                                  Path(scratch, "counts").as_uri(), group=f"bench-flink-{uuid.uuid4().hex[:6]}")
        for statement in ddl:
            t_env.execute_sql(statement)
        job = t_env.create_statement_set()
        for statement in inserts:
            job.add_insert_sql(statement)
        job_started = time.monotonic()
        job.execute().wait()
        job_seconds = time.monotonic() - job_started
        records_in, records_out = read_counts(Path(scratch, "counts"))
    print("BENCH_RESULT " + json.dumps({"records_in": records_in, "records_out": records_out,
                                         "job_seconds": round(job_seconds, 3),
                                         "session_seconds": round(session_seconds, 3),
                                         "parallelism": args.parallelism}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
