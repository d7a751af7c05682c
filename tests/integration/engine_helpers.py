"""Shared helpers for engine tests: a throwaway pipeline on the session platform, the real CLI
as a subprocess, and broker-side checks. Topics, input data and the read_committed reader are in
tests/support, shared with the Airflow tests."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from confluent_kafka.admin import AdminClient

from tests.support.pipelines import PipelineUnderTest

LOCKSTEP = str(Path(sys.executable).parent / "lockstep")


def make_pipeline(tmp_path: Path, bootstrap: str, unique: str, partitions: int = 4,
                  max_records: int = 100_000, timeout_ms: int = 900_000, transform: str = "lockstep_examples.orders:enrich",
                  margin_ms: int = 60_000, writer: str | None = None, replication: int = 1,
                  master: str | None = None, remote: str | None = None, mode: str | None = None,
                  parallelism: int | None = None) -> PipelineUnderTest:
    """A pipeline of fresh topics. Its checkpoints run as a user's do by default: in connect mode, on
    the server of the spark_connect_default connection (the session's). ``master`` runs them as
    spark-submits on that master; ``mode="submit"`` alone as spark-submits on the spark_default
    connection's master; ``remote`` (an ``sc://`` URL) in sessions of that Spark Connect server.
    ``parallelism``: the spec's ``sink.parallelism`` (default auto: the cluster's cores)."""
    name = f"t-{unique}"
    pipeline = PipelineUnderTest.create(tmp_path, bootstrap, name, unique, partitions, replication)
    spec = {
        "name": name,
        "source": {"topics": [pipeline.source]},
        "transform": transform,
        "sink": {"topic": pipeline.sink, "dead_letter_topic": pipeline.dead_letters,
                 **({"writer": writer} if writer else {}),
                 **({"parallelism": parallelism} if parallelism else {})},
        "checkpoints": {"store": f"s3://lockstep/tests/{unique}", "max_records": max_records, "retain": 100},
        "transactions": {"id_prefix": pipeline.prefix, "timeout_ms": timeout_ms, "commit_margin_ms": margin_ms},
        "spark": {k: v for k, v in (("mode", "connect" if remote else mode), ("master", master),
                                    ("remote", remote)) if v},
    }
    pipeline.spec_path.write_text(yaml.safe_dump(spec))
    return pipeline


def lockstep(*args: str, failpoints: str | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    env.pop("LOCKSTEP_FAILPOINTS", None)
    if failpoints:
        env["LOCKSTEP_FAILPOINTS"] = failpoints
    return subprocess.run([LOCKSTEP, *args], env=env, capture_output=True, text=True, timeout=timeout)


def run(pipeline: PipelineUnderTest, *extra: str, failpoints: str | None = None) -> subprocess.CompletedProcess:
    return lockstep("run", "--spec", str(pipeline.spec_path), *extra, failpoints=failpoints)


def crash_at(pipeline: PipelineUnderTest, point: str, *extra: str) -> subprocess.CompletedProcess:
    """Run with failpoint ``point`` armed to crash, and check that the failpoint is what stopped the run,
    not any failure with the same exit code: its own words (`lockstep.model.failpoints.hit`) are in the
    log, from the CLI's process or relayed from the Spark job's output; the CLI died with the
    failpoint's exit code, or reports the Spark run that the crash killed."""
    from lockstep.model.failpoints import CRASH_EXIT_CODE

    result = run(pipeline, *extra, failpoints=f"{point}=crash")
    assert result.returncode in (CRASH_EXIT_CODE, 2), (point, result.returncode, result.stderr[-3000:])
    assert re.search(rf"lockstep failpoint {re.escape(point)}\b.*: crashing the process", result.stderr), \
        (point, "the failpoint did not fire", result.stderr[-3000:])
    if result.returncode == 2:
        assert "Spark run failed" in result.stderr, (point, result.stderr[-3000:])
    return result


def verify(pipeline: PipelineUnderTest, *extra: str) -> dict:
    result = lockstep("verify", "--spec", str(pipeline.spec_path), "--json", *extra)
    assert result.returncode in (0, 1, 2), result.stderr[-3000:]
    assert result.stdout.strip(), result.stderr[-3000:]
    report = json.loads(result.stdout)
    found = 0 if report["ok"] and report["drift_ok"] else 1  # exit codes of docs/semantics.md
    assert result.returncode == (2 if found == 0 and not report["complete"] else found), report
    return report


def same_output(pipeline: PipelineUnderTest) -> dict:
    """`lockstep replay --compare` with the pipeline's own spec: every retained completed checkpoint, computed
    again from its claim, writes exactly what it committed (the runs are deterministic). Returns the report."""
    result = lockstep("replay", "--spec", str(pipeline.spec_path), "--compare", str(pipeline.spec_path), "--json")
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    report = json.loads(result.stdout)
    assert report["same"] and report["compared"] and not report["not_compared"], report
    return report


def open_transactions(pipeline: PipelineUnderTest) -> list[str]:
    from lockstep.kafka.committer import TransactionCommitter

    with TransactionCommitter(pipeline.bootstrap) as committer:
        return committer.list_open(f"{pipeline.prefix}-")


def store(pipeline: PipelineUnderTest):
    from lockstep.steps.client_factory import checkpoint_store

    return checkpoint_store(pipeline.spec())


def group_offsets(pipeline: PipelineUnderTest) -> dict[str, int]:
    """The pipeline consumer group's committed offsets, keyed like checkpoint end offsets."""
    from lockstep.kafka import broker_offsets, topics

    spec = pipeline.spec()
    admin = AdminClient({"bootstrap.servers": pipeline.bootstrap})
    tps = topics.partitions(admin, spec.source.topics)
    found = broker_offsets.group_offsets({"bootstrap.servers": pipeline.bootstrap}, spec.source.consumer_group, tps)
    return {tp.key: offset for tp, offset in found.items()}
