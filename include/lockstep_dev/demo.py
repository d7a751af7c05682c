"""``make demo`` / ``lockstep demo``: the platform with Airflow, the example orders
pipeline fed with generated data, three checkpoints run by the real scheduler, a
summary, and everything left running to explore."""
from __future__ import annotations

import argparse
import logging
import sys
import time

from lockstep.airflow_client import AirflowClient
from lockstep_dev.datagen import ensure_topics, produce_orders
from lockstep_dev.platform import Platform
from lockstep.paths import pipelines_dir
from lockstep.spec import load_spec

BATCH = 5_000
MALFORMED_EVERY = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoints", type=int, default=3, help="checkpoint runs through the scheduler (default 3)")


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return run_demo(args.checkpoints)


def run_demo(checkpoints: int = 3, out=sys.stdout) -> int:
    say = lambda text: print(text, file=out, flush=True)  # noqa: E731
    platform = Platform()
    say("1/5 starting the local platform (Kafka, S3, Airflow) ...")
    platform.up(with_airflow=True, out=out)
    import os

    os.environ.update(platform.client_env())
    spec = load_spec(pipelines_dir() / "orders.yaml")
    bootstrap = platform.kafka.bootstrap
    ensure_topics(bootstrap, {spec.source.topics[0]: 4, spec.sink.topic: 4, spec.sink.dead_letter_topic: 1})

    client = AirflowClient(platform.airflow.url, "admin", platform.airflow.admin_password() or "")
    say(f"2/5 waiting for Airflow to parse {spec.dag_id} ...")
    client.wait_for_dag(spec.dag_id)
    client.unpause(spec.dag_id)

    from lockstep.client_factory import checkpoint_store

    store = checkpoint_store(spec)
    latest = store.latest_completed()
    first_new = (latest.checkpoint_id + 1) if latest else 1
    say(f"3/5 running {checkpoints} checkpoints through the scheduler, {BATCH} new orders before each ...")
    produced = 0
    for n in range(checkpoints):
        start = _next_index(bootstrap, spec.source.topics[0])
        produce_orders(bootstrap, spec.source.topics[0], BATCH, start=start, malformed_every=MALFORMED_EVERY)
        produced += BATCH
        started = time.monotonic()
        run_id = client.trigger(spec.dag_id)
        state = client.wait_for_run(spec.dag_id, run_id, timeout=900)
        say(f"    checkpoint run {n + 1}/{checkpoints}: {run_id} {state} in {time.monotonic() - started:.0f} s")
        if state != "success":
            say(f"    the run failed; read its task logs at {platform.airflow.url}/dags/{spec.dag_id}")
            return 1

    say("4/5 auditing the output with `lockstep verify` ...")
    from lockstep.verify import verify_pipeline

    report = verify_pipeline(spec)
    views = [store.view(i) for i in store.checkpoint_ids(after=first_new - 1)]
    done = [v for v in views if v is not None and v.prepared is not None and v.completed is not None]
    say("5/5 summary")
    say(f"    checkpoints completed: {', '.join(str(v.checkpoint_id) for v in done)}")
    say(f"    records in: {sum(v.prepared.records_in for v in done)}  out: "
        f"{sum(v.prepared.records_out for v in done)}  dead-lettered: "
        f"{sum(v.prepared.records_dead_lettered for v in done)}")
    say(f"    verify: {report.summary()}")
    say(f"    Airflow UI: {platform.airflow.url}  (login admin / {platform.airflow.admin_password()})")
    say(f"    Checkpoints page: {platform.airflow.url}/lockstep/   DAG: {spec.dag_id} (unpaused, every 2 minutes)")
    say('    CLI: eval "$(.venv/bin/lockstep dev env)"; .venv/bin/lockstep checkpoints --spec include/pipelines/orders.yaml')
    say("    Stop everything: make down   (add --wipe to `lockstep dev down` to delete the data)")
    return 0 if report.ok else 1


def _next_index(bootstrap: str, topic: str) -> int:
    """Continue numbering after what the topic already holds, so re-running the demo adds new orders."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lockstep-demo-probe"})
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts)
    finally:
        consumer.close()
