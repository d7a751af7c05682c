"""The keyed-state benchmark's Flink side: Flink's RocksDB restore of the same state as Lockstep's cold
checkpoint (issue 27: a cold restore at 10M keys against Flink's RocksDB restore of the same state).

At the largest state size, after Lockstep's cold and warm checkpoints (``lockstep_bench.keyed_state``):

1. **Build-up, not counted.** Flink SQL's dedup by ``order_id`` (``include/lockstep_bench/jobs/flink_restore_job.py``)
   reads the size's own topic from its earliest offsets: the build-up's K distinct orders and every measured,
   cold and warm checkpoint's records, in the order Lockstep read them. So Flink's state holds exactly
   the keys Lockstep's does, with no copy of the input (checked: Flink's output is one record per
   distinct order, as many as Lockstep's state has keys). The bench watches the job's consumer group:
   Flink commits its offsets when a checkpoint completes, so offsets at the topic's end offsets mean a
   completed checkpoint holds the whole input. Then the job is cancelled, its last checkpoint retained.
2. The cold checkpoint's kind of input for the next checkpoint (``keyed_state.checkpoint_indices``): repeats
   of held keys and a few new keys.
3. **Restore, measured** (as many times as Lockstep's restore runs, each over the next checkpoint's records and
   from the checkpoint the restore before it retained). A new Flink process restores that checkpoint
   (``execution.state-recovery.path``,
   ``CLAIM`` mode: the checkpoint becomes the job's own and its first checkpoint is incremental on it, as
   Lockstep's next checkpoint builds on the state on S3) and runs until its output of the new keys is
   committed: its first completed checkpoint covering the new records, whose Kafka transactions Flink
   commits when it completes. ``produce`` places the new keys last in every partition (round-robin), so
   once all of them are visible under read_committed a checkpoint covered every partition's last record.
   Timed from the process start (the JVM, the mini-cluster, the SQL planned, the state restored, the
   records read, a checkpoint completed and its transactions committed) and from the job's submission.
   Flink checkpoints every ``CHECKPOINT_S`` seconds, so the time includes the wait for the next trigger.
   The group's committed offsets are not the clock here: Flink's Kafka source commits them from its
   fetcher thread, which waits in a 10 s ``poll`` once the partitions are drained (the connector's
   ``KafkaPartitionSplitReader.POLL_TIMEOUT``), so they reach the end offsets up to 10 s after the
   checkpoint; the bench still waits for them (``offsets_seconds``) before it stops the job, so the
   retained checkpoint holds every record. The build-up, not timed as a result, uses the offsets.
4. **Checked.** The restore's committed output must be exactly the new keys: a lost state would emit
   the repeats again, lost offsets would read everything again. A peer's wrong output is reported, not fatal.
"""
from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from lockstep_bench import flink_sql, workloads
from lockstep_bench import pipelines as pl
from lockstep_bench.measure import RunFailed, TreeSampler

#: Flink's checkpoint interval in the restore (its first checkpoint comes at most this late).
CHECKPOINT_S = 1.0
#: ... and in the build-up, which is not measured: a checkpoint a second over 10M new keys flushed
#: RocksDB's memtables into so many small files that the build-up slowed to about 1,000 records/s.
BUILDUP_CHECKPOINT_S = 10.0
CLAIM_MODE = "CLAIM"
STARTED = "JOB_STARTED "
#: How long the build-up may take at most: 10M keys on two shared cores take minutes.
BUILDUP_TIMEOUT_S = 3 * 3600
RESTORE_TIMEOUT_S = 1800


def order_id(i: int) -> str:
    """``lockstep_dev.datagen.order(i)``'s order id."""
    return f"o{i}"


def reached(committed: Mapping[int, int | None], ends: Mapping[int, int]) -> bool:
    """Every partition with records has its committed offset at (or past) its end offset."""
    return all((committed.get(p) or 0) >= end for p, end in ends.items() if end > 0)


def new_keys_last_everywhere(new_keys: int, partitions: int) -> bool:
    """Whether a checkpoint's last record in every partition is one of its new keys (``produce`` places the
    n-th record in partition n % partitions, and ``checkpoint_indices`` puts the new keys last): then
    the new keys' committed output marks a checkpoint that covered all of it."""
    return new_keys >= partitions


def expected_outputs(keys: int, checkpoints: int, new_keys: int) -> int:
    """How many orders Flink's dedup emits over the build-up's ``keys`` distinct orders and ``checkpoints``
    checkpoints' records (``keyed_state.checkpoint_indices``): one per distinct order."""
    return keys + checkpoints * new_keys


def verdict(emitted: Iterable[str], new: Iterable[str], held: Iterable[str]) -> dict[str, Any]:
    """The restore's output (order ids) against the new keys it must emit, once each, and nothing else."""
    emitted = list(emitted)
    want, old = set(new), set(held)
    got = set(emitted)
    out = {"emitted": len(emitted), "expected": len(want), "missing": len(want - got),
           "duplicated": len(emitted) - len(got), "repeats_emitted": len(got & old),
           "unknown": len(got - want - old)}
    out["exact"] = out["emitted"] == out["expected"] and not (out["missing"] or out["duplicated"])
    return out


# ---- Kafka -----------------------------------------------------------------------------------------------
def committed_offsets(bootstrap: str, group: str, topic: str, partitions: Iterable[int]) -> dict[int, int | None]:
    """The group's committed offsets (None: none yet)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as KTP
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    request = ConsumerGroupTopicPartitions(group, [KTP(topic, p) for p in partitions])
    result = next(iter(admin.list_consumer_group_offsets([request], request_timeout=30).values())).result()
    return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in result.topic_partitions}


def wait_settled(bootstrap: str, topic: str, timeout_s: float = 120) -> dict[int, int]:
    """Wait until no transaction is open in ``topic`` (its last stable offsets are its ends: the
    committer has committed the last checkpoint's transactions); returns those offsets."""
    deadline = time.monotonic() + timeout_s
    while True:
        stable = workloads.end_offsets(bootstrap, topic)
        if stable == workloads.end_offsets(bootstrap, topic, committed=False):
            return stable
        if time.monotonic() > deadline:
            raise RunFailed(f"{topic} still has open transactions after {timeout_s:.0f} s (stable offsets {stable})")
        time.sleep(0.2)


def scan_committed(bootstrap: str, topic: str, starts: Mapping[int, int], ends: Mapping[int, int],
                   value: Callable[[bytes], Any] | None = None) -> tuple[int, list[Any]]:
    """The committed records of ``topic`` between ``starts`` and ``ends`` (read_committed): how many, and
    ``value(record)`` of each when given (a count alone keeps no record: the build-up's are millions)."""
    take = (lambda msg: value(msg.value() or b"")) if value is not None else None
    return workloads.read_committed(bootstrap, topic, starts, ends, take)


# ---- the job's process -----------------------------------------------------------------------------------
class FlinkJob:
    """One run of the restore job: started, its ``JOB_STARTED`` awaited, stopped with ``stop`` on stdin
    (then its ``BENCH_RESULT``); killed, its whole process group (the PyFlink JVM too), if anything fails."""

    def __init__(self, command: pl.Command, log_file: Path) -> None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_file, "a")
        self.log_file = log_file
        self.started = time.monotonic()
        self.proc = subprocess.Popen(command.argv, env=command.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, text=True, start_new_session=True)
        self.sampler = TreeSampler(self.proc.pid).__enter__()
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stdout: list[str] = []
        self.job_started: float | None = None
        self.info: dict[str, Any] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout.append(line)
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def _line(self, prefix: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RunFailed(f"the Flink job printed no {prefix.strip()} in {timeout_s:.0f} s; "
                                f"{self.tail()}") from None
            if line is None:
                raise RunFailed(f"the Flink job ended (exit code {self.proc.wait()}) before {prefix.strip()}; "
                                f"{self.tail()}")
            if line.startswith(prefix):
                return cast("dict[str, Any]", json.loads(line[len(prefix):]))

    def tail(self) -> str:
        try:
            err = self.log_file.read_text()[-3000:]
        except OSError:
            err = ""
        return f"stdout:\n{''.join(self.stdout)[-2000:]}\nstderr ({self.log_file}):\n{err}"

    def wait_started(self, timeout_s: float = 300) -> dict[str, Any]:
        self.info = self._line(STARTED, timeout_s)
        self.job_started = time.monotonic()
        return self.info

    def job_state(self) -> str | None:
        """The job's state from the mini-cluster's REST API (None: no answer)."""
        import urllib.request

        port = self.info.get("rest_port")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs/{self.info.get('job_id')}", timeout=5) as r:
                return str(json.loads(r.read()).get("state"))
        except (OSError, ValueError):
            return None

    def stop(self, timeout_s: float = 300) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.close()
        result = self._line(pl.RESULT, timeout_s)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.kill()
        self.sampler.__exit__(None, None, None)
        return result

    def kill(self) -> None:
        import os
        import signal

        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.sampler.__exit__(None, None, None)

    def close(self) -> None:
        self.kill()
        self._log.close()


def wait_until(job: FlinkJob, done: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.1) -> float:
    """Call ``done`` until it is true; returns the monotonic time it was. Fails when the job's process or
    the job itself ends first, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_state_check = time.monotonic()
    while True:
        if done():
            return time.monotonic()
        if job.proc.poll() is not None:
            raise RunFailed(f"the Flink job ended (exit code {job.proc.returncode}) before {what}; {job.tail()}")
        now = time.monotonic()
        if now - last_state_check > 5:
            last_state_check = now
            state = job.job_state()
            if state in ("FAILED", "CANCELED", "FINISHED"):
                raise RunFailed(f"the Flink job is {state} before {what}; {job.tail()}")
        if now > deadline:
            raise RunFailed(f"the Flink job: not {what} after {timeout_s:.0f} s")
        time.sleep(poll_s)


class SinkWatch:
    """A read_committed consumer of the sink from ``starts``: the order ids as their transactions commit."""

    def __init__(self, bootstrap: str, topic: str, starts: Mapping[int, int]) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as KTP

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-flink-watch-{uuid.uuid4().hex[:6]}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "fetch.wait.max.ms": 10, "log_level": 3})
        self.consumer.assign([KTP(topic, p, o) for p, o in starts.items()])
        self.seen: set[str] = set()

    def has(self, ids: set[str]) -> bool:
        for msg in self.consumer.consume(10_000, timeout=0.05):
            if not msg.error():
                self.seen.add(json.loads(msg.value() or b"{}").get("order_id"))
        return ids <= self.seen

    def close(self) -> None:
        self.consumer.close()


def run_phase(command: pl.Command, log_file: Path, bootstrap: str, group: str, topic: str, sink: str,
              ends: Mapping[int, int], timeout_s: float, log: Callable[[str], None], label: str,
              outputs: tuple[Mapping[int, int], set[str]] | None = None) -> dict[str, Any]:
    """One process of the job until its group reaches ``ends`` and the sink's transactions are committed.
    ``outputs``: (the sink's offsets before, the order ids this phase must output): the time they are all
    committed is the phase's time; without it, the time the group reached ``ends``."""
    job = FlinkJob(command, log_file)
    watch = SinkWatch(bootstrap, sink, outputs[0]) if outputs else None
    try:
        info = job.wait_started()
        log(f"flink {label}: job {info['job_id']} submitted {info['started_seconds']:.1f} s after the process "
            f"started (session {info['session_seconds']:.1f} s)")
        output_done = None
        if watch is not None and outputs is not None:
            want = outputs[1]
            output_done = wait_until(job, lambda: watch.has(want), timeout_s,
                                     f"its {len(want):,} new orders were committed to {sink}", poll_s=0.0)
        cpu_s, peak = job.sampler.cpu_s, job.sampler.peak_rss
        offsets_done = wait_until(job, lambda: reached(committed_offsets(bootstrap, group, topic, ends), ends),
                                  timeout_s, f"its group {group} reached {dict(ends)}")
        if output_done is None:
            output_done = offsets_done
            cpu_s, peak = job.sampler.cpu_s, job.sampler.peak_rss
        wait_settled(bootstrap, sink)
        result = job.stop()
    finally:
        job.close()
        if watch is not None:
            watch.close()
    assert job.job_started is not None
    return {"seconds": round(output_done - job.started, 3),
            "from_job_started_s": round(output_done - job.job_started, 3),
            "offsets_seconds": round(offsets_done - job.started, 3),
            "clock": "outputs committed" if outputs else "group offsets",
            "job_started_s": round(job.job_started - job.started, 3), "cpu_s": round(cpu_s, 2),
            "peak_rss_mb": round(peak / 2**20, 1), "started": info, "result": result}


def s3_bytes(uri: str) -> int:
    """The bytes of every object under an ``s3://bucket/prefix`` (the platform's S3: boto3 takes the endpoint and
    the keys from the clients' environment, ``AWS_ENDPOINT_URL_S3`` and the rest)."""
    import boto3
    from botocore.config import Config

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    client = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sum(int(o["Size"]) for page in pages for o in page.get("Contents", []))


def measure(bootstrap: str, topic: str, keys: int, checkpoints: int, new_keys: int, indices: list[list[int]],
            produce: Callable[[list[int]], None], partitions: int, work_dir: Path, log: Callable[[str], None],
            state_keys: int | None = None, command: Callable[..., pl.Command] | None = None,
            on_s3: str | None = None, count_bytes: Callable[[str], int] = s3_bytes) -> dict[str, Any]:
    """The module docstring's four steps over ``topic``, which holds the build-up's ``keys`` orders and
    ``checkpoints`` checkpoints' records, each with ``new_keys`` new ones; ``indices``: each restore's
    orders (``keyed_state.checkpoint_indices`` of the next checkpoints: the repeats, then the new keys),
    which ``produce`` writes to the topic before it. The first restore restores the build-up's checkpoint,
    each later one the checkpoint the restore before it retained (CLAIM mode: it became that job's own):
    so each restores the whole state, larger each time by the restore before it's new keys. ``state_keys``: what
    Lockstep's state holds after the same records, for the check that Flink's holds as many. ``on_s3``: an
    ``s3://bucket/prefix`` for Flink's checkpoints (production's layout: every restore downloads its state, as
    Lockstep's on a new host does), their bytes counted there by ``count_bytes``; else a local folder. Returns the
    report's figures (``restores``: each restore's, in order; ``storage``: ``s3`` or ``local disk``)."""
    from lockstep.paths import cache_dir, project_root
    from lockstep_bench import peers

    make = command or (lambda **kw: peers.flink_restore_command(cache_dir(), project_root(), **kw))
    tag = uuid.uuid4().hex[:6]
    sink, group, prefix = f"{topic}-flink-out-{tag}", f"bench-flink-restore-{tag}", f"bench-flink-restore-{tag}"
    state_dir = work_dir / "flink" / f"{keys}-{tag}"
    where = f"{on_s3.rstrip('/')}/{keys}-{tag}" if on_s3 else None
    workloads.create_topic(bootstrap, sink, partitions, {"retention.ms": "-1"})

    def job(restore_from: str | None = None) -> pl.Command:
        return make(bootstrap=bootstrap, source=topic, sink=sink, group=group, partitions=partitions,
                    state_dir=state_dir, checkpoint_s=CHECKPOINT_S if restore_from else BUILDUP_CHECKPOINT_S,
                    transactional_id_prefix=prefix, restore_from=restore_from, claim_mode=CLAIM_MODE,
                    **({"checkpoints": where} if where else {}))

    def counted(phase: dict[str, Any]) -> dict[str, Any]:
        """On S3, the bytes the job (which has no S3 client) could not count: its own checkpoints, and everyone's."""
        result = phase["result"]
        if where:
            result["checkpoint_bytes"] = count_bytes(f"{where}/{result.get('job_id')}/")
            result["all_checkpoints_bytes"] = count_bytes(f"{where}/")
        return phase

    try:
        ends = workloads.end_offsets(bootstrap, topic)
        buildup = counted(run_phase(job(), state_dir / "buildup.log", bootstrap, group, topic, sink, ends,
                                    BUILDUP_TIMEOUT_S, log, "build-up"))
        buildup["records_in"] = sum(ends.values())
        marks = workloads.end_offsets(bootstrap, sink)
        started = time.monotonic()
        buildup["output_records"], _ = scan_committed(bootstrap, sink, {}, marks)
        buildup["expected_output"] = expected_outputs(keys, checkpoints, new_keys)
        buildup["lockstep_state_keys"] = state_keys
        checkpoint = buildup["result"].get("checkpoint")
        log(f"flink build-up: {buildup['records_in']:,} records to a completed checkpoint in {buildup['seconds']:.1f} s "
            f"({buildup['from_job_started_s']:.1f} s from the job's submission), checkpoint {checkpoint} "
            f"{buildup['result'].get('checkpoint_bytes', 0):,} B; {buildup['output_records']:,} orders out "
            f"(expected {buildup['expected_output']:,}; counted in {time.monotonic() - started:.1f} s)")
        restores: list[dict[str, Any]] = []
        for n, orders in enumerate(indices, 1):
            if not checkpoint:
                raise RunFailed(f"the Flink {'build-up' if n == 1 else f'restore {n - 1}'} retained no completed "
                                f"checkpoint; {(restores[-1] if restores else buildup)['result']}")
            produce(orders)
            new_ends = workloads.end_offsets(bootstrap, topic)
            repeats = len(orders) - new_keys
            new_ids = {order_id(i) for i in orders[repeats:]}
            restore = counted(run_phase(job(checkpoint), state_dir / f"restore-{n}.log", bootstrap, group, topic,
                                        sink, new_ends, RESTORE_TIMEOUT_S, log, f"restore {n}",
                                        outputs=(marks, new_ids) if new_keys_last_everywhere(new_keys, partitions)
                                        else None))
            restore["records_in"] = sum(new_ends.values()) - sum(ends.values())
            sink_ends = workloads.end_offsets(bootstrap, sink)
            _, emitted = scan_committed(bootstrap, sink, marks, sink_ends, value=lambda v: json.loads(v)["order_id"])
            restore["check"] = verdict(emitted, map(order_id, orders[repeats:]), map(order_id, set(orders[:repeats])))
            restore["checkpoint_bytes"] = restore["result"].get("all_checkpoints_bytes")
            restore["restored_from"] = checkpoint
            log(f"flink restore {n}: {restore['records_in']:,} records after restoring {checkpoint} to a completed "
                f"checkpoint ({restore['clock']}) in {restore['seconds']:.2f} s from the process start, "
                f"{restore['from_job_started_s']:.2f} s from the job's submission (group offsets there at "
                f"{restore['offsets_seconds']:.2f} s); checkpoints on {'S3' if where else 'disk'} "
                f"{restore['checkpoint_bytes'] or 0:,} B; output {json.dumps(restore['check'])}")
            if not restore["check"]["exact"]:
                log(f"flink restore {n}: its output is NOT the new keys alone (the report shows it)")
            restores.append(restore)
            checkpoint, ends, marks = restore["result"].get("checkpoint"), new_ends, sink_ends
        return {"checkpoint_s": CHECKPOINT_S, "buildup_checkpoint_s": BUILDUP_CHECKPOINT_S,
                "managed_memory": flink_sql.MANAGED_MEMORY, "claim_mode": CLAIM_MODE, "sink": sink, "group": group,
                "storage": "s3" if where else "local disk", "checkpoints": where, "buildup": buildup,
                "restores": restores}
    finally:
        workloads.delete_topic(bootstrap, sink)
        shutil.rmtree(state_dir / "checkpoints", ignore_errors=True)  # hundreds of MB at 10M keys; logs stay
