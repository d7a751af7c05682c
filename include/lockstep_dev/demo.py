"""``make demo`` / ``lockstep demo``: the platform with Airflow, the six example pipelines fed with
generated orders (``orders-enrich``, stateless JSON; ``orders-per-customer``, event-time windows with
keyed state; ``orders-avro``, Avro in and out through the Schema Registry; ``orders-by-size``, an SQL
query over the same Avro orders whose ``sink.routes`` send them to three topics; ``orders-with-customers``,
the same Avro orders joined with the ``customers`` table, a compacted topic whose customers change tier
between checkpoints; ``orders-with-payments``, the JSON orders and their payments in an interval join), three
checkpoints of each run by the real scheduler, a summary, and everything left
running to explore."""
from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import TYPE_CHECKING, TextIO

from lockstep.ops.airflow_client import AirflowClient
from lockstep.paths import pipelines_dir
from lockstep.spec import PipelineSpec, load_spec
from lockstep_dev.datagen import (
    ensure_topics,
    produce_avro_orders,
    produce_customers,
    produce_orders_and_payments,
)
from lockstep_dev.platform import Platform

if TYPE_CHECKING:
    from lockstep.model.checkpoint import CheckpointView
    from lockstep.ops.compare import Comparison

BATCH = 5_000
MALFORMED_EVERY = 50
#: Every 40th customer never gets a row in the customers table: its orders are the join's dead letters.
NO_CUSTOMER_EVERY = 40
#: Before each checkpoint run, every 10th customer changes tier (a new version of its row).
CHANGED_EVERY = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoints", type=int, default=3, help="checkpoint runs through the scheduler (default 3)")


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return run_demo(args.checkpoints)


def run_demo(checkpoints: int = 3, out: TextIO = sys.stdout) -> int:
    def say(text: str) -> None:
        print(text, file=out, flush=True)

    platform = Platform()
    say("1/5 starting the local platform (Kafka, S3, Schema Registry, Iceberg catalog, Spark Connect, Airflow) ...")
    platform.up(with_airflow=True, with_connect=True, out=out)
    import os

    os.environ.update(platform.client_env())
    spec = load_spec(pipelines_dir() / "orders.yaml")
    windows = load_spec(pipelines_dir() / "orders_per_customer.yaml")
    avro = load_spec(pipelines_dir() / "orders_avro.yaml")
    by_size = load_spec(pipelines_dir() / "orders_by_size.yaml")
    joined = load_spec(pipelines_dir() / "orders_with_customers.yaml")
    paid = load_spec(pipelines_dir() / "orders_with_payments.yaml")
    specs = (spec, windows, avro, by_size, joined, paid)
    bootstrap = platform.kafka.bootstrap
    ensure_topics(bootstrap, {spec.source.topics[0]: 4, avro.source.topics[0]: 4, paid.source.topics[1]: 4,
                              **{topic: 4 for s in specs for topic in s.sink.topics},
                              **{s.sink.dead_letter_topic: 1 for s in specs}})
    customers = joined.tables[0].topic
    ensure_topics(bootstrap, {customers: 2}, {"cleanup.policy": "compact"})  # a table's topic keeps each key's last
    produce_customers(bootstrap, customers, missing_every=NO_CUSTOMER_EVERY)
    from lockstep.formats.registry import registry_for

    registry_url = registry_for(avro.source.registry_conn_id).url

    client = AirflowClient(platform.airflow.url, "admin", platform.airflow.admin_password() or "")
    say(f"2/5 waiting for Airflow to parse {', '.join(s.dag_id for s in specs)} ...")
    for s in specs:
        client.wait_for_dag(s.dag_id)
        client.unpause(s.dag_id)

    from lockstep.steps.client_factory import checkpoint_store

    first_new = {}
    for s in specs:
        latest = checkpoint_store(s).latest_completed()
        first_new[s.name] = (latest.checkpoint_id + 1) if latest else 1
    say(f"3/5 running {checkpoints} checkpoints of each pipeline through the scheduler, {BATCH} new orders before "
        "each ...")
    for n in range(checkpoints):
        start = _next_index(bootstrap, spec.source.topics[0])
        # In one transaction: a scheduled run between the two would read orders whose payments come a checkpoint
        # later, and the interval join would write them alone (verify then finds them paired in its one batch).
        produce_orders_and_payments(bootstrap, spec.source.topics[0], paid.source.topics[1], BATCH, start=start,
                                    malformed_every=MALFORMED_EVERY)
        produce_avro_orders(bootstrap, avro.source.topics[0], registry_url, BATCH,
                            start=_next_index(bootstrap, avro.source.topics[0]), malformed_every=MALFORMED_EVERY)
        if n:  # some customers change tier: each checkpoint joins against the table as its claim pins it
            produce_customers(bootstrap, customers, version=n, every=CHANGED_EVERY, missing_every=NO_CUSTOMER_EVERY)
        started = time.monotonic()
        runs = {s.dag_id: client.trigger(s.dag_id) for s in specs}
        for dag_id, run_id in runs.items():
            state = client.wait_for_run(dag_id, run_id, timeout=900)
            say(f"    checkpoint run {n + 1}/{checkpoints} of {dag_id}: {run_id} {state} in "
                f"{time.monotonic() - started:.0f} s")
            if state != "success":
                say(f"    the run failed; read its task logs at {platform.airflow.url}/dags/{dag_id}")
                return 1

    say("4/5 auditing the output with `lockstep verify`, and computing each checkpoint again with "
        "`lockstep replay --compare` ...")
    from lockstep.ops.compare import compare_pipeline
    from lockstep.ops.verify import verify_pipeline

    ok = True
    say("5/5 summary")
    for s in specs:
        report = verify_pipeline(s)
        ok = ok and report.ok
        store = checkpoint_store(s)
        # One set of checkpoints for every line below: the ones verify audited. The DAG is unpaused,
        # so its schedule may complete checkpoints of its own (often empty) beside the triggered runs.
        views = [v for v in (store.view(i) for i in report.checkpoints) if v is not None and v.prepared is not None]
        say(f"    {s.name} ({s.dag_id}):")
        for line in summary_lines(views, first_new[s.name], checkpoints):
            say(f"      {line}")
        if s.sink.routes:
            say(f"      by topic: {routed_counts(s)}")
        for line in table_lines(views):
            say(f"      {line}")
        say(f"      verify: {report.summary()}".replace("\n", "\n      "))
        if s.sink.iceberg is not None:
            say(f"      iceberg: {iceberg_line(s)}")
        # Each checkpoint of this demo computed again from its claim through the pipeline's own spec: the same
        # output, record by record (the runs are deterministic; docs/operations.md, "Changing a pipeline").
        compared = compare_pipeline(s, s, first=first_new[s.name])
        ok = ok and compared.same and not compared.not_compared
        say(f"      replay --compare: {compare_line(compared)}")
    say(f"    Airflow UI: {platform.airflow.url}  (login admin / {platform.airflow.admin_password()})")
    say(f"    Checkpoints page: {platform.airflow.url}/lockstep/   DAGs: {', '.join(s.dag_id for s in specs)} "
        "(unpaused, every 2 minutes)")
    say('    CLI: eval "$(.venv/bin/lockstep dev env)"; .venv/bin/lockstep checkpoints --spec include/pipelines/orders.yaml')
    say("         .venv/bin/lockstep state stats --spec include/pipelines/orders_per_customer.yaml")
    for s in specs:
        if s.sink.iceberg is not None:
            say(f"    Iceberg table {s.sink.iceberg.table} (of {s.name}), read with pyiceberg:")
            say(f"         {iceberg_query(s.sink.iceberg.table, s.sink.iceberg.catalog_conn_id)}")
    say("    Stop everything: make down   (add --wipe to `lockstep dev down` to delete the data)")
    return 0 if ok else 1


def iceberg_line(spec: PipelineSpec) -> str:
    """The demo's line for a pipeline's Iceberg table: its rows on main and the checkpoints that published them."""
    from lockstep.iceberg.table_sink import IcebergTable

    assert spec.sink.iceberg is not None  # the caller's condition
    table = IcebergTable(spec.sink.iceberg.catalog_conn_id, spec.sink.iceberg.table)
    rows = table.provenance()
    published = table.published_checkpoints(spec.name)
    return (f"{spec.sink.iceberg.table}: {sum(rows.values()):,} rows on its main branch, published by "
            f"{len(published)} checkpoints ({_id_list(published)}), one snapshot each")


def iceberg_query(table: str, conn_id: str) -> str:
    """A shell command that reads the table as any pyiceberg user would (after `lockstep dev env`)."""
    return ("eval \"$(.venv/bin/lockstep dev env)\"; .venv/bin/python -c 'from pyiceberg.catalog import "
            "load_catalog; from lockstep.connections import iceberg_catalog; "
            f"t = load_catalog(\"lake\", **iceberg_catalog(\"{conn_id}\")).load_table(\"{table}\"); "
            "print(t.scan(row_filter=\"amount >= 100\", selected_fields=(\"order_id\", \"customer\", "
            "\"amount\", \"lockstep_checkpoint\")).to_arrow().to_pandas())'")


def compare_line(report: Comparison) -> str:
    """The demo's line for `lockstep replay --compare` with the pipeline's own spec."""
    n = len(report.checkpoints)
    line = (f"{n} checkpoint{'s' if n != 1 else ''} computed again through its own spec, "
            + (f"{report.total.before:,} records: the same output" if report.same else report.total.line()))
    if report.same and report.total.state is not None:
        line += f"; {report.total.state.text()}"
    if report.not_compared:
        line += "; not compared: " + "; ".join(f"checkpoint {c}: {why}" for c, why in sorted(report.not_compared.items()))
    return line


def table_lines(views: list[CheckpointView]) -> list[str]:
    """Per table, the version the last of ``views`` joined against (its keys, its checkpoint, its files) and
    how many versions the checkpoints joined against in all."""
    done = [v for v in views if v.completed is not None and v.completed.tables]
    if not done:
        return []
    lines = []
    for name, last in sorted(done[-1].completed.tables.items()):  # type: ignore[union-attr]
        versions = {v.completed.tables[name].written_by for v in done  # type: ignore[union-attr]
                    if name in v.completed.tables}  # type: ignore[union-attr]
        lines.append(f"table {name}: {last.keys:,} keys as of checkpoint {last.written_by} ({len(last.files)} "
                     f"files, {last.bytes:,} bytes); {len(versions)} versions joined by these checkpoints")
    return lines


def routed_counts(spec: PipelineSpec) -> str:
    """How many committed records each of a routed pipeline's topics holds (``orders-large: 812, ...``),
    read as a downstream consumer does (``read_committed``)."""
    from collections import Counter

    from lockstep.connections import kafka_config
    from lockstep.kafka.reader import read_committed

    counts = Counter(r.topic for r in read_committed(kafka_config(spec.sink.kafka_conn_id), spec.sink.topics,
                                                     "lockstep-demo-probe", lambda topic: f"reading {topic}"))
    return ", ".join(f"{topic}: {counts[topic]:,}" for topic in spec.sink.topics)


def summary_lines(views: list[CheckpointView], first_new: int, triggered: int) -> list[str]:
    """The summary's checkpoint lines, from the completed checkpoints that verify audited (each one
    prepared): ``first_new`` is the first one this demo could have made, ``triggered`` how many runs it made."""
    new = [v for v in views if v.checkpoint_id >= first_new]
    older = len(views) - len(new)
    prepared = [v.prepared for v in new if v.prepared is not None]  # all of them: the caller passes prepared ones
    empty = sum(1 for p in prepared if p.records_in == 0)
    lines = [f"checkpoints completed by this demo: {_id_list([v.checkpoint_id for v in new])} ({triggered} "
             f"triggered runs; {max(0, len(new) - triggered)} more by the DAG's schedule; "
             f"{empty} without new records)"]
    if older:
        lines.append(f"checkpoints completed before this demo: {older}")
    # Offsets, not records: a source written in transactions (the orders, sent with their payments) holds a
    # commit marker at an offset after each transaction's records, in every partition it wrote.
    lines.append(f"input offsets: {sum(p.records_in for p in prepared)}  out: "
                 f"{sum(p.records_out for p in prepared)}  dead-lettered: "
                 f"{sum(p.records_dead_lettered for p in prepared)}")
    return lines


def _id_list(ids: list[int]) -> str:
    if not ids:
        return "none"
    if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 2:
        return f"{ids[0]}..{ids[-1]}"
    return ", ".join(map(str, ids))


def _next_index(bootstrap: str, topic: str) -> int:
    """Continue numbering after what the topic already holds, so re-running the demo adds new orders."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lockstep-demo-probe"})
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts)
    finally:
        consumer.close()
