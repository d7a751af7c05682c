"""The keyed-state benchmark's Flink SQL peer: the same dedup as Lockstep's stateful pipeline (the first
order of each ``order_id``, a 400-day state TTL), over an unbounded Kafka source, RocksDB state with
incremental checkpoints retained when the job is cancelled, exactly-once Kafka sink.

    <flink venv>/bin/python include/lockstep_bench/jobs/flink_restore_job.py --bootstrap HOST:PORT --source in \
        --sink out --group g --connector-jar flink-sql-connector-kafka.jar --parallelism 2 --checkpoint-seconds 1 \
        --state-dir DIR [--restore-from DIR/checkpoints/<job id>/chk-N]

Run with the Flink venv's Python (``lockstep_bench.peers`` installs it) and ``include/`` on PYTHONPATH; the
statements and settings come from ``lockstep_bench.flink_sql`` (``dedup_statements``,
``restore_configuration``). The bench drives it (``lockstep_bench.flink_restore``):

1. the job starts (a local mini-cluster in this process's JVM), submits the INSERT and prints
   ``JOB_STARTED {json}``: the seconds it took, the job id, the REST port;
2. it runs until the bench writes the line ``stop`` on stdin (the bench watches the group's committed
   offsets, which Flink commits when a checkpoint completes), then it reads the job's checkpoint
   statistics from the REST API, cancels the job (its last completed checkpoint stays on disk:
   ``RETAIN_ON_CANCELLATION``) and prints one ``BENCH_RESULT {json}`` line: the newest retained
   checkpoint (a ``chk-N`` folder with its ``_metadata``) and the bytes on disk of the job's checkpoint
   folder and of every job's together (an incremental checkpoint's files may be the previous job's);
3. ``--restore-from`` starts the job from such a checkpoint: the RocksDB state and the source offsets.

RocksDB's working folder is a temporary folder removed on exit, as on a new host; the checkpoints live in
``--state-dir``/checkpoints, or, with ``--checkpoints s3://bucket/prefix``, on S3 (the ``flink-s3-fs-hadoop``
plugin, in PyFlink's plugins folder: ``lockstep_bench.peers.FLINK_S3_PLUGIN``; the endpoint and keys from
``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``, the S3 clients' own environment),
where a restore downloads its state from, as a Flink on a new host does.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, cast

TERMINAL = {"CANCELED", "FAILED", "FINISHED", "ENDED"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rest(port: int, path: str) -> dict[str, Any] | None:
    """GET of the mini-cluster's REST API; None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return cast("dict[str, Any]", json.loads(response.read()))
    except (OSError, ValueError):
        return None


def disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def newest_checkpoint(job_folder: Path) -> Path | None:
    """The ``chk-N`` with the largest N that holds a ``_metadata`` file (a completed checkpoint)."""
    done = [p for p in job_folder.glob("chk-*") if (p / "_metadata").exists() and p.name[4:].isdigit()]
    return max(done, key=lambda p: int(p.name[4:]), default=None)


def job_status(client: Any) -> str:
    """The job's status; the local mini-cluster shuts down as soon as its one job has ended, after
    which only "ended" is known (the job's last checkpoint is on disk by then)."""
    try:
        return str(client.get_job_status().result()).rsplit(".", 1)[-1]
    except Exception:  # noqa: BLE001 - py4j's error for "MiniCluster is not yet running or has already been shut down"
        return "ENDED"


def checkpoint_stats(stats: dict[str, Any] | None) -> dict[str, Any]:
    """What the report uses of ``/jobs/<id>/checkpoints``: the counts, the latest completed checkpoint's
    sizes and durations, and the checkpoint the job was restored from."""
    if not stats:
        return {}
    latest = stats.get("latest") or {}
    completed = latest.get("completed") or {}
    keep = ("id", "state_size", "checkpointed_size", "end_to_end_duration", "external_path", "trigger_timestamp",
            "latest_ack_timestamp", "num_acknowledged_subtasks", "persisted_data")
    return {"counts": stats.get("counts"), "latest_completed": {k: completed[k] for k in keep if k in completed},
            "restored": latest.get("restored")}


def init_plugins(conf: Any) -> None:
    """Load the plugins folder's file systems (the S3 plugin) with ``conf``'s ``s3.*`` settings, as a cluster's entry
    point does at its start, before the local mini-cluster needs them for its checkpoints."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    j_conf = conf._j_configuration
    plugins = jvm.org.apache.flink.core.plugin.PluginUtils.createPluginManagerFromRootFolder(j_conf)
    jvm.org.apache.flink.core.fs.FileSystem.initialize(j_conf, plugins)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--group", required=True, help="the source's consumer group (its offsets are committed "
                                                       "when a checkpoint completes)")
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--parallelism", type=int, required=True)
    parser.add_argument("--checkpoint-seconds", type=float, required=True)
    parser.add_argument("--state-dir", type=Path, required=True, help="checkpoints go to STATE_DIR/checkpoints")
    parser.add_argument("--checkpoints", help="where checkpoints go: an s3:// URI (default: STATE_DIR/checkpoints)")
    parser.add_argument("--restore-from", help="a retained checkpoint's chk-N folder (or its s3:// URI) to restore from")
    parser.add_argument("--claim-mode", default="CLAIM", help="CLAIM or NO_CLAIM (lockstep_bench.flink_sql)")
    parser.add_argument("--transactional-id-prefix", default=f"bench-flink-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args(argv)

    import os

    from lockstep_bench.flink_sql import dedup_statements, restore_configuration, s3_configuration

    started = time.monotonic()
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    on_s3 = bool(args.checkpoints and args.checkpoints.startswith("s3://"))
    checkpoints = (args.state_dir / "checkpoints").resolve()
    checkpoints.mkdir(parents=True, exist_ok=True)
    checkpoints_uri = args.checkpoints.rstrip("/") if on_s3 else checkpoints.as_uri()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="flink-restore-tmp-", dir=args.state_dir) as scratch:
        conf = Configuration()
        conf.set_string("pipeline.jars", Path(args.connector_jar).resolve().as_uri())
        conf.set_string("io.tmp.dirs", scratch)  # RocksDB's working folder too
        conf.set_string("web.upload.dir", scratch)
        conf.set_string("restart-strategy.type", "none")  # a failure ends the job, and the bench reports it
        restore = args.restore_from if not args.restore_from or "://" in args.restore_from else \
            Path(args.restore_from).resolve().as_uri()
        settings = restore_configuration(checkpoints_uri, args.checkpoint_seconds, args.parallelism, port, restore,
                                         args.claim_mode)
        if on_s3:
            settings.update(s3_configuration(os.environ["AWS_ENDPOINT_URL_S3"], os.environ["AWS_ACCESS_KEY_ID"],
                                             os.environ["AWS_SECRET_ACCESS_KEY"],
                                             os.environ.get("AWS_DEFAULT_REGION", "us-east-1")))
        for key, value in settings.items():
            conf.set_string(key, value)
        if on_s3:
            init_plugins(conf)
        t_env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode()
                                        .with_configuration(conf).build())
        session_seconds = time.monotonic() - started
        ddl, insert = dedup_statements(args.bootstrap, args.source, args.sink, args.transactional_id_prefix,
                                       args.group)
        for statement in ddl:
            t_env.execute_sql(statement)
        client = t_env.execute_sql(insert).get_job_client()
        job_id = str(client.get_job_id())
        print("JOB_STARTED " + json.dumps({"session_seconds": round(session_seconds, 3),
                                           "started_seconds": round(time.monotonic() - started, 3),
                                           "job_id": job_id, "rest_port": port, "restore_from": args.restore_from}),
              flush=True)
        for line in sys.stdin:  # until the bench says stop (or closes stdin)
            if line.strip() == "stop":
                break
        stats = rest(port, f"/jobs/{job_id}/checkpoints")
        job = rest(port, f"/jobs/{job_id}") or {}
        status = job_status(client)
        if status not in TERMINAL:
            client.cancel().result()
        deadline = time.monotonic() + 120
        while status not in TERMINAL and time.monotonic() < deadline:
            time.sleep(0.2)
            status = job_status(client)
    folder = checkpoints / job_id
    if on_s3:  # the newest completed checkpoint, as the REST API gave it before the cancel (no listing of S3 here)
        latest = checkpoint_stats(stats).get("latest_completed") or {}
        newest_uri = latest.get("external_path")
    else:
        newest = newest_checkpoint(folder)
        newest_uri = str(newest) if newest else None
    print("BENCH_RESULT " + json.dumps({
        "session_seconds": round(session_seconds, 3), "job_id": job_id, "status": status,
        "parallelism": args.parallelism, "checkpoint_seconds": args.checkpoint_seconds,
        "restore_from": args.restore_from, "claim_mode": args.claim_mode if args.restore_from else None,
        "checkpoint": newest_uri, "checkpoints_uri": checkpoints_uri,
        # On S3 the bench counts the bytes (lockstep_bench.flink_restore); this venv has no S3 client.
        "checkpoint_bytes": None if on_s3 else disk_bytes(folder),
        "all_checkpoints_bytes": None if on_s3 else disk_bytes(checkpoints),
        "checkpoints": checkpoint_stats(stats),
        "job": {k: job.get(k) for k in ("state", "start-time", "duration", "timestamps") if k in job}}),
        flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
