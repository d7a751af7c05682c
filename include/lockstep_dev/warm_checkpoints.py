"""A new Spark Connect server warmed up through the checkpoint path: tiny real checkpoints, before the first real one.

A server's first checkpoint pays for its new JVM: classes loaded, Spark's generated code compiled, the
interpreter's hot loops not yet compiled, the Python workers started and the transform's modules
imported in them. Measured at 1,000,000 keys of dedup state (`lockstep bench --state-only --state-keys
1000000`, 100,000 records, an empty state cache each time): 11.0 s for the first checkpoint on a new
server, 7.0 s on a server that ran these warm-up checkpoints, 4.6 s for the next one (2026-11-28, with
the dedup judged on the driver).
A query of its own (``spark_connect.warm_up``) warms none of that, so this runs the path itself on
the platform's own Kafka and S3:

- a stateless pipeline (``lockstep_examples.orders:enrich``),
- a dedup pipeline (``lockstep_examples.orders:parse``, state keyed by ``order_id``) twice: its first
  checkpoint writes state, its second reads it back (repeats of held keys beside new ones),
- a windowed count per customer, as ``include/pipelines/orders_per_customer.yaml``,

each a real checkpoint (plan, run in a session of the new server, commit), over a topic and a
checkpoint store of their own, deleted afterwards; all of it ``ROUNDS`` times, each round with pipelines
and a topic of its own. Warm-up pipelines never share a name, a topic
or a transactional id with a user's (``lockstep-warm-up-<random>``).

The platform runs it after starting a Connect server when asked (``Platform(warm_checkpoints=True)``,
``lockstep dev up --warm-checkpoints``): the keyed-state benchmark's cold restore does, and tests do
not (it adds about 20 s to a server's start). ``python -m lockstep_dev.warm_checkpoints`` is the
process the platform starts, with the platform's connections in its environment.
"""
from __future__ import annotations

__all__ = ["RECORDS", "ROUNDS", "run"]

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

#: Orders per warm-up checkpoint by default: as many as a checkpoint of the keyed-state bench reads, so that
#: the JIT compiles the read's, the transform's and the write's per-record loops before the first real
#: checkpoint. With 2,000, the warmed-up cold restore at 10M keys spent 1.6-1.75 s in its first read and
#: 1.6 s in its output's stage; with 100,000, 0.9-1.2 s and 1.2-1.3 s (2026-11-28). It takes the server's
#: start from about 24 s to about 29 s.
RECORDS = 100_000
#: How many times the warm-up pipelines run, each round new ones. After one round, HotSpot's compiler threads
#: still took 1.6-2.5 s of CPU in the first two real checkpoints (0.2-0.3 s on a server that has run a
#: while): one round leaves hot code uncompiled. A restore's first checkpoint on the same host (1M keys of
#: dedup state, the cache kept, 100,000 records), alternating one round and two, five times each: 3.53,
#: 3.61, 3.65, 3.88, 3.62 s (median 3.62) against 3.42, 3.15, 3.31, 3.28, 3.36 s (median 3.31), its first
#: read 1.04-1.26 s against 0.95-1.04 s; the second round takes the server's start from about 26 s to 37 s
#: (2026-11-28).
ROUNDS = 2
PARTITIONS = 4


def specs(tag: str, topic: str, remote: str, bucket: str, records: int = RECORDS) -> dict[str, dict[str, Any]]:
    """The warm-up pipelines' spec documents, by kind."""
    event_time = {"column": "created_at", "out_of_orderness": "10s"}
    states: dict[str, tuple[str, dict[str, Any] | None]] = {
        "stateless": ("lockstep_examples.orders:enrich", None),
        "dedup": ("lockstep_examples.orders:parse",
                  {"key_groups": 8, "event_time": event_time,
                   "dedup": {"key": "order_id", "ttl": "1d", "duplicates": "dead_letter"}}),
        "windows": ("lockstep_examples.orders:parse",
                    {"key_groups": 8, "event_time": event_time,
                     "window": {"key": "customer", "size": "1m", "allowed_lateness": "0s",
                                "aggregates": {"orders": "count(*)"}}}),
    }
    docs = {}
    for kind, (transform, state) in states.items():
        name = f"{tag}-{kind}"
        docs[kind] = {
            "name": name,
            "source": {"topics": [topic], "auto_offset_reset": "earliest"},
            "transform": transform,
            **({"state": state} if state else {}),
            "sink": {"topic": f"{name}-out", "dead_letter_topic": f"{name}-dlq"},
            "checkpoints": {"store": f"s3://{bucket}/{tag}/{kind}", "max_records": records, "retain": 2},
            "transactions": {"id_prefix": name},
            "spark": {"mode": "connect", "remote": remote},
        }
    return docs


def run(remote: str, bucket: str, env: Mapping[str, str], timeout_s: float = 300,
        records: int = RECORDS, rounds: int = ROUNDS) -> dict[str, dict[str, float]]:
    """Warm the server at ``remote`` up in a process of its own (``env``: the platform's connections and
    the job environment; the checkpoints' stores in ``bucket``; ``records`` orders per checkpoint, ``rounds``
    rounds); returns each warm-up checkpoint's seconds, records read and state rows loaded. Raises if the
    warm-up failed: a server whose checkpoint path fails on tiny input would fail the first real checkpoint too."""
    done = subprocess.run([sys.executable, "-m", "lockstep_dev.warm_checkpoints", remote, bucket, str(records),
                           str(rounds)], env=dict(env), capture_output=True, text=True, timeout=timeout_s * rounds)
    if done.returncode != 0:
        raise RuntimeError(f"the warm-up checkpoints on {remote} failed (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}\n"
                           f"The server runs but is not warmed up: its checkpoints would fail the same way. Fix "
                           f"the cause above, or start the platform without --warm-checkpoints to see it in the "
                           f"first real checkpoint")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _main(remote: str, bucket: str, records: int = RECORDS, rounds: int = ROUNDS) -> dict[str, dict[str, float]]:
    done: dict[str, dict[str, float]] = {}
    for n in range(1, rounds + 1):
        done.update({(f"{name} ({n})" if rounds > 1 else name): figures
                     for name, figures in _round(remote, bucket, records).items()})
    return done


def _round(remote: str, bucket: str, records: int) -> dict[str, dict[str, float]]:
    """One round of the warm-up pipelines, new ones, over a topic of their own; everything they made deleted."""
    import boto3
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from lockstep.connections import kafka_config, s3_client_kwargs
    from lockstep.spec import load_spec
    from lockstep.steps.coordinator import checkpoint_cycle
    from lockstep_dev import kafka_nodes
    from lockstep_dev.datagen import order

    tag = f"lockstep-warm-up-{uuid.uuid4().hex[:8]}"
    topic = f"{tag}-orders"
    docs = specs(tag, topic, remote, bucket, records)
    kafka = kafka_config("kafka_default")
    admin = AdminClient({**kafka, "log_level": 3})
    topics = [topic] + [t for d in docs.values() for t in (d["sink"]["topic"], d["sink"]["dead_letter_topic"])]
    done: dict[str, dict[str, float]] = {}
    groups: list[str] = []
    folder: Path | None = None
    try:
        # The broker's default replication: a cluster's min.insync.replicas refuses a topic of one replica.
        for future in admin.create_topics([NewTopic(t, PARTITIONS) for t in topics]).values():
            future.result(timeout=60)
        kafka_nodes.wait_for_leaders(admin, topics, PARTITIONS)
        # The first half: new orders; the second: repeats of half of them and as many new ones.
        half = records // 2
        first = range(half)
        second = [*range(0, half, 2), *range(half, half + half // 2)]
        producer = Producer({**kafka, "enable.idempotence": True, "log_level": 3})
        for n, i in enumerate([*first, *second]):
            producer.produce(topic, order(i), partition=n % PARTITIONS)
        if producer.flush(60):
            raise RuntimeError(f"the warm-up's orders were not all delivered to {topic} within 60 s")
        folder = Path(tempfile.mkdtemp(prefix=f"{tag}-"))
        for kind, doc in docs.items():
            path = folder / f"{doc['name']}.yaml"
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
            spec = load_spec(path)
            groups.append(spec.source.consumer_group)
            rounds = 2 if kind == "dedup" else 1
            for n in range(rounds):
                began = time.monotonic()
                cycle = checkpoint_cycle(spec, max_records=half if rounds > 1 else None)
                prepared = cycle.view.prepared if cycle.view is not None else None
                if prepared is None or cycle.outcome is None:
                    raise RuntimeError(f"the warm-up's {kind} checkpoint completed no run")
                state = prepared.state.metrics if prepared.state is not None else {}
                done[f"{kind}-{n + 1}" if rounds > 1 else kind] = {
                    "seconds": round(time.monotonic() - began, 3), "records": prepared.records_in,
                    "rows_loaded": int(state.get("rows_loaded", 0))}
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        for future in admin.delete_topics(topics).values():
            try:
                future.result(timeout=30)
            except Exception:  # noqa: BLE001 - best effort: a topic the failure left uncreated
                pass
        # Each checkpoint published its offsets to its pipeline's consumer group.
        for future in (admin.delete_consumer_groups(groups, request_timeout=30) if groups else {}).values():
            try:
                future.result(timeout=30)
            except Exception:  # noqa: BLE001 - best effort: a group the failure left uncreated
                pass
        s3 = boto3.client("s3", **s3_client_kwargs("aws_default"))
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{tag}/"):
            for listed in page.get("Contents", []):
                s3.delete_object(Bucket=bucket, Key=listed["Key"])
    return done


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4, 5) or not all(arg.isdigit() and int(arg) > 0 for arg in sys.argv[3:]):
        sys.exit("usage: python -m lockstep_dev.warm_checkpoints REMOTE BUCKET [RECORDS [ROUNDS]]")
    try:
        result = _main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else RECORDS,
                       int(sys.argv[4]) if len(sys.argv) > 4 else ROUNDS)
    except Exception:  # noqa: BLE001 - told to the platform on stderr, without the connections' secrets
        import traceback

        from lockstep.connections import redact

        print(redact(traceback.format_exc()), file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # the Spark Connect client's threads would hold the interpreter's exit
