"""The Iceberg sink (issue 71): the records a checkpoint writes to its Kafka topic land in an Iceberg table in the
same checkpoint, exactly once, through a real Iceberg REST catalog (Iceberg's own server, its warehouse on the
S3 server) and read back with pyiceberg. The table is compared with the sink topic record by record, by
provenance."""
from __future__ import annotations

import json

import pytest

from lockstep.model.checkpoint import CheckpointStatus
from lockstep.model.failpoints import FAILPOINTS, ICEBERG_FAILPOINTS, STATE_FAILPOINTS
from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC, WRITER_FAILPOINTS
from lockstep.store.checkpoint_store import TABLE_UPKEEP

from ..support.data import produce_orders, read_committed
from .engine_helpers import crash_at, lockstep, make_pipeline, open_transactions, run, store, verify
from .test_formats import ENRICHED, deserialized, make, order, produce, registry  # noqa: F401 - registry is a fixture


@pytest.fixture(scope="module")
def catalog(platform):
    """The session platform's Iceberg REST catalog, as a pyiceberg client of the ``iceberg_default`` connection."""
    from pyiceberg.catalog import load_catalog

    from lockstep.connections import iceberg_catalog

    platform.start("iceberg")
    return load_catalog("iceberg_default", **iceberg_catalog("iceberg_default"))


def with_table(tmp_path, bootstrap, unique):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=3,
                             transform="lockstep_examples.orders:enrich_for_table")
    table = f"lake_{unique}.orders"
    pipeline.rewrite(sink={"iceberg": {"table": table}})
    return pipeline, table


def table_rows(catalog, table: str) -> list[dict]:
    """Every row on the table's main branch."""
    return catalog.load_table(table).scan().to_arrow().to_pylist()


def sink_rows(bootstrap: str, topic: str) -> list[tuple]:
    """The sink topic's records as (source topic, partition, offset, value)."""
    out = []
    for m in read_committed(bootstrap, topic):
        headers = {k: v.decode() for k, v in m.headers() or []}
        out.append((headers[SOURCE_TOPIC], int(headers[SOURCE_PARTITION]), int(headers[SOURCE_OFFSET]),
                    m.value().decode()))
    return sorted(out)


def as_sink(rows: list[dict]) -> list[tuple]:
    """The table's rows as `sink_rows` (``value`` is the bytes the writers wrote to the topic)."""
    return sorted((r["lockstep_source_topic"], r["lockstep_source_partition"], r["lockstep_source_offset"],
                   r["value"].decode()) for r in rows)


def published_checkpoints(catalog, table: str, pipeline: str) -> list[int]:
    """The checkpoints named by the snapshots of main's history, oldest first."""
    t = catalog.load_table(table)
    by_id = {s.snapshot_id: s for s in t.snapshots()}
    found, snapshot = [], t.current_snapshot()
    while snapshot is not None:
        props = snapshot.summary.additional_properties
        if props.get("lockstep.pipeline") == pipeline:
            found.append(int(props["lockstep.checkpoint"]))
        snapshot = by_id.get(snapshot.parent_snapshot_id)
    return found[::-1]


def lockstep_branches(catalog, table: str) -> list[str]:
    return sorted(name for name in catalog.load_table(table).metadata.refs if name.startswith("lockstep-"))


def test_a_checkpoint_is_staged_invisibly_then_published_once_beside_its_kafka_transactions(
        tmp_path, bootstrap, unique, catalog):
    pipeline, table = with_table(tmp_path, bootstrap, unique)
    produce_orders(pipeline, 60)

    # Prepared (its snapshot staged on its branch), not committed: nothing is on the table's main branch.
    crash_at(pipeline, "job.after_prepared")
    prepared = store(pipeline).view(1).prepared
    assert prepared is not None and prepared.iceberg is not None
    assert prepared.iceberg.records == 54  # 60 orders, every 10th malformed: a dead letter, not a row
    assert table_rows(catalog, table) == []
    assert lockstep_branches(catalog, table) == [f"lockstep-{pipeline.name}-1"]
    staged = catalog.load_table(table).scan(snapshot_id=prepared.iceberg.snapshot_id).to_arrow()
    assert staged.num_rows == 54 and set(staged["lockstep_checkpoint"].to_pylist()) == {1}

    produce_orders(pipeline, 30, start=60)
    finished = run(pipeline)  # commits checkpoint 1 (roll-forward), then runs checkpoint 2
    assert finished.returncode == 0, finished.stderr[-3000:]

    rows = table_rows(catalog, table)
    assert as_sink(rows) == sink_rows(bootstrap, pipeline.sink)
    assert len(rows) == 81 and {r["lockstep_checkpoint"] for r in rows} == {1, 2}
    assert set(rows[0]) == {"key", "value", "order_id", "customer", "amount", "currency", "lockstep_source_topic",
                            "lockstep_source_partition", "lockstep_source_offset", "lockstep_checkpoint"}
    for row in rows:  # the transform's own columns beside the bytes the topic got
        assert json.loads(row["value"])["order_id"] == row["order_id"] == row["key"].decode()
    # One snapshot on main per checkpoint, named after it; every staged branch gone.
    assert published_checkpoints(catalog, table, pipeline.name) == [1, 2]
    assert lockstep_branches(catalog, table) == []
    s = store(pipeline)
    ids = [s.view(i).completed.iceberg_snapshot for i in s.checkpoint_ids()]
    assert all(ids) and len(set(ids)) == len(ids)
    listing = lockstep("checkpoints", "--spec", str(pipeline.spec_path))
    assert f"iceberg {table}: 54 rows in 3 files, published as snapshot {ids[0]}" in listing.stdout, listing.stdout
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["table"] == {**report["table"], "ok": True, "rows": 81, "sink_records": 81}, report["table"]

    # verify reads the table back: a data file added to main a second time (another writer's mistake) is found.
    t = catalog.load_table(table)
    copy = next(iter(t.scan().plan_files())).file
    with t.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            append.append_data_file(copy)
    report = verify(pipeline)
    assert not report["ok"] and report["table"]["duplicated"] == copy.record_count > 0, report["table"]


def test_a_crash_at_every_failpoint_leaves_the_table_and_the_topic_exactly_once(tmp_path, bootstrap, unique, catalog):
    """A crash at each failpoint a connect-mode run passes (the table's own among them), one after another on one
    pipeline: each run first recovers what the crash before left (rolls it forward or aborts it), then crashes at
    the next. The Spark tasks' failpoints are left out: a writer's crash ends the run before the table's stage,
    as plan.after_claim does."""
    pipeline, table = with_table(tmp_path, bootstrap, unique)
    points = [f for f in FAILPOINTS if f not in (*STATE_FAILPOINTS, *WRITER_FAILPOINTS)]
    assert set(ICEBERG_FAILPOINTS) <= set(points)
    for n, point in enumerate(points):
        produce_orders(pipeline, 20, start=n * 20)
        crash_at(pipeline, point)
    produce_orders(pipeline, 20, start=len(points) * 20)
    finished = run(pipeline)
    assert finished.returncode == 0, finished.stderr[-3000:]

    rows = table_rows(catalog, table)
    expected = sink_rows(bootstrap, pipeline.sink)
    assert as_sink(rows) == expected, "the table holds exactly the sink topic's records"
    assert len({(r[0], r[1], r[2]) for r in expected}) == len(expected) == 18 * (len(points) + 1)
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["table"]["ok"] and report["table"]["rows"] == len(expected), report["table"]
    assert open_transactions(pipeline) == []
    s = store(pipeline)
    statuses = {i: s.view(i).status for i in s.checkpoint_ids()}
    assert CheckpointStatus.ABORTED in statuses.values(), "some crashes aborted their checkpoint"
    completed = sorted(i for i, status in statuses.items() if status is CheckpointStatus.COMPLETED)
    assert published_checkpoints(catalog, table, pipeline.name) == completed, "one snapshot per completed checkpoint"
    assert lockstep_branches(catalog, table) == [], "no staged branch outlives its checkpoint"

    # Upkeep: the small files of every checkpoint but the newest two merged, old snapshots expired, orphan files
    # removed; the same rows.
    compacted = lockstep("iceberg", "compact", "--spec", str(pipeline.spec_path), "--keep", "2", "--json")
    assert compacted.returncode == 0, compacted.stderr[-2000:]
    figures = json.loads(compacted.stdout)
    assert figures["files_after"] < figures["files_before"] and figures["rows"] > 0, figures
    expired = lockstep("iceberg", "expire", "--spec", str(pipeline.spec_path), "--older-than", "0", "--json")
    assert expired.returncode == 0 and json.loads(expired.stdout)["snapshots_expired"] > 0, expired.stderr[-2000:]
    # The files of the attempts that crashed before staging, and of the snapshots just expired: no snapshot reads them.
    orphans = lockstep("iceberg", "orphans", "--spec", str(pipeline.spec_path), "--older-than", "0", "--json")
    assert orphans.returncode == 0, orphans.stderr[-2000:]
    removed = json.loads(orphans.stdout)
    assert removed["orphans"] > 0 and removed["orphan_bytes"] > 0, removed
    assert as_sink(table_rows(catalog, table)) == expected, "no file main reads was removed"
    kept = s.note(TABLE_UPKEEP)  # each action's latest figures, for the Checkpoints page
    assert {a: (kept[a]["by"], kept[a]["files_after"]) for a in ("compact", "expire", "orphans")} == {
        "compact": ("lockstep iceberg compact", figures["files_after"]),
        "expire": ("lockstep iceberg expire", figures["files_after"]),
        "orphans": ("lockstep iceberg orphans", removed["files_after"])}, kept
    assert kept["orphans"]["orphans"] == removed["orphans"] and kept["compact"]["rows"] == figures["rows"]
    produce_orders(pipeline, 20, start=(len(points) + 1) * 20)
    assert run(pipeline).returncode == 0
    rows = table_rows(catalog, table)
    expected = sink_rows(bootstrap, pipeline.sink)
    assert as_sink(rows) == expected and len(expected) == 18 * (len(points) + 2)


def test_a_table_without_a_topic_gets_each_row_once_through_a_crash_at_every_failpoint(tmp_path, bootstrap, unique,
                                                                                       catalog):
    """``sink.iceberg`` without ``sink.topic``: the records land in the table alone, as the transform's columns
    (no ``value``: ``order_columns``), partitioned; the transactions carry the dead letters, each with its input's
    bytes. A crash at each failpoint a connect-mode run passes, one after another: the table ends with each order
    once, the dead-letter topic with each malformed one once, and verify checks the table as the sink."""
    from ..support.data import MALFORMED_EVERY

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=3,
                             transform="lockstep_examples.orders:order_columns")
    table = f"lake_{unique}.orders"
    pipeline.rewrite(sink={"topic": None, "iceberg": {"table": table, "partitioning": ["bucket(2, customer)"]}})
    points = [f for f in FAILPOINTS if f not in (*STATE_FAILPOINTS, *WRITER_FAILPOINTS)]
    per = 20
    for n, point in enumerate(points):
        produce_orders(pipeline, per, start=n * per)
        crash_at(pipeline, point)
    produce_orders(pipeline, per, start=len(points) * per)
    finished = run(pipeline)
    assert finished.returncode == 0, finished.stderr[-3000:]

    total = per * (len(points) + 1)
    rows = table_rows(catalog, table)
    assert set(rows[0]) == {"order_id", "customer", "amount", "currency", "lockstep_source_topic",
                            "lockstep_source_partition", "lockstep_source_offset", "lockstep_checkpoint"}, rows[0]
    offsets = [(r["lockstep_source_partition"], r["lockstep_source_offset"]) for r in rows]
    assert len(offsets) == len(set(offsets)) == total - total // MALFORMED_EVERY, "each order a row, once"
    assert {r["order_id"] for r in rows} == {f"o{i}" for i in range(total) if i % MALFORMED_EVERY}
    dead = read_committed(bootstrap, pipeline.dead_letters)
    assert sorted(m.value().decode() for m in dead) == sorted(
        f"not json {i}" for i in range(0, total, MALFORMED_EVERY)), "each dead letter once, as it came"
    assert read_committed(bootstrap, pipeline.sink, timeout=5) == [], "no sink topic is written"
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["table"]["ok"] and report["table"]["rows"] == len(rows), report["table"]
    assert open_transactions(pipeline) == []
    s = store(pipeline)
    completed = sorted(i for i in s.checkpoint_ids() if s.view(i).status is CheckpointStatus.COMPLETED)
    assert published_checkpoints(catalog, table, pipeline.name) == [
        i for i in completed if s.view(i).prepared.iceberg is not None and s.view(i).prepared.iceberg.files]
    assert sum(s.view(i).prepared.records_out for i in completed) == len(rows), "records out are the table's rows"

    # A checkpoint without dead letters reads its input once and writes nothing to Kafka.
    produce_orders(pipeline, MALFORMED_EVERY - 1, start=total + 1)
    again = run(pipeline)
    assert again.returncode == 0, again.stderr[-3000:]
    latest = s.latest_completed()
    assert latest.checkpoint_id > completed[-1] and latest.prepared.records_out == MALFORMED_EVERY - 1
    assert latest.prepared.records_dead_lettered == 0 and not any(t.records or t.dead_letters
                                                                  for t in latest.prepared.transactions)
    assert len(table_rows(catalog, table)) == len(rows) + MALFORMED_EVERY - 1
    report = verify(pipeline)
    assert report["ok"] and report["table"]["rows"] == len(rows) + MALFORMED_EVERY - 1, report


def test_a_table_alone_dead_letters_a_record_that_does_not_decode_counted_in_its_one_pass(tmp_path, bootstrap,
                                                                                           unique, catalog):
    """A table without a topic, JSON in (no schema), a transform with no ``error`` column: the record that is not
    JSON never reaches the transform; the table's pass counts it (connect mode), and the Kafka write, which had
    nothing to carry until then, writes it to the dead-letter topic with its bytes and reason."""
    from confluent_kafka import Producer

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=1, transform="lockstep_examples.orders:order_fields")
    table = f"lake_{unique}.orders"
    pipeline.rewrite(source={"value": "json"}, sink={"topic": None, "iceberg": {"table": table}})
    producer = Producer({"bootstrap.servers": pipeline.bootstrap})
    for i in range(6):
        producer.produce(pipeline.source, b"not json" if i == 3 else json.dumps(
            {"order_id": f"o{i}", "customer": "c", "amount": i + 0.5}).encode(), partition=0)
    producer.flush(30)
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "checkpoint 1: 1 records do not decode" in result.stderr
    assert sorted(r["order_id"] for r in table_rows(catalog, table)) == [f"o{i}" for i in (0, 1, 2, 4, 5)]
    assert [m.value() for m in read_committed(bootstrap, pipeline.dead_letters)] == [b"not json"]
    prepared = store(pipeline).view(1).prepared
    assert (prepared.records_out, prepared.records_dead_lettered) == (5, 1)
    report = verify(pipeline)
    assert report["ok"] and report["table"]["rows"] == 5, report


def test_a_partial_kafka_commit_is_repaired_and_the_table_gets_each_row_once(tmp_path, bootstrap, unique, catalog,
                                                                             monkeypatch):
    """The commit dies after the first of three transactions; the broker times the other two out. The repair
    publishes the table's files of the kept transaction's source partition only; the given-back partitions' rows
    come with the next checkpoint, which reads them again: the table ends with each row once, as the topic. The
    table is partitioned (``bucket(3, customer)``): the Spark tasks write a file per source and bucket, each in
    the partition Iceberg computes for its rows."""
    import time

    import pyarrow.parquet as pq
    from pyiceberg.types import StringType

    from lockstep.kafka.committer import TransactionCommitter
    from lockstep.model.failpoints import FailpointError
    from lockstep.model.transactions import TransactionState
    from lockstep.steps.coordinator import Pipeline, commit, plan
    from lockstep.steps.run import run_checkpoint

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=3, timeout_ms=15_000, margin_ms=1000,
                             parallelism=3, transform="lockstep_examples.orders:enrich_for_table")
    table = f"lake_{unique}.orders"
    pipeline.rewrite(sink={"iceberg": {"table": table, "partitioning": ["bucket(3, customer)"]}})
    produce_orders(pipeline, 150)
    p = Pipeline.open(pipeline.spec())
    cid = plan(p, run_id="repair-test").claim.checkpoint_id
    run_checkpoint(p.spec, cid, p.store)
    prepared = p.store.view(cid).prepared
    assert len(prepared.transactions) == 3 and len(prepared.iceberg.files) > 3, prepared.iceberg.files
    assert len({f.sources for f in prepared.iceberg.files}) == 3, "a file holds one source partition's rows"
    t = catalog.load_table(table)
    assert [str(f.transform) for f in t.spec().fields] == ["bucket[3]"]
    bucket = t.spec().fields[0].transform.transform(StringType())
    for task in t.scan(snapshot_id=prepared.iceberg.snapshot_id).plan_files():
        with t.io.new_input(task.file.file_path).open() as stream:
            held = {bucket(c) for c in pq.read_table(stream)["customer"].to_pylist()}
        assert held == {task.file.partition[0]}, (task.file.file_path, held, task.file.partition)
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "commit.between_commits=raise")
    with pytest.raises(FailpointError):
        commit(p, cid)
    monkeypatch.delenv("LOCKSTEP_FAILPOINTS")
    assert table_rows(catalog, table) == [], "the table waits for the Kafka decision"
    first, *rest = prepared.transactions
    deadline = time.monotonic() + 90
    with TransactionCommitter(bootstrap) as committer:
        while any(o.state != TransactionState.COMPLETE_ABORT
                  for o in committer.describe(sorted(t.transactional_id for t in rest)).values()):
            assert time.monotonic() < deadline, "the broker never timed the other transactions out"
            time.sleep(0.5)

    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"checkpoint {cid}: completed after repair" in result.stderr
    kept = {tp.key for tp in first.sources}
    rows = table_rows(catalog, table)
    assert {f"{r['lockstep_source_topic']}:{r['lockstep_source_partition']}" for r in rows
            if r["lockstep_checkpoint"] == cid} == kept, "the repaired checkpoint published its kept share only"
    assert as_sink(rows) == sink_rows(bootstrap, pipeline.sink)
    assert len(rows) == 135 and published_checkpoints(catalog, table, pipeline.name) == [cid, cid + 1]
    report = verify(pipeline)
    assert report["ok"] and report["table"]["rows"] == 135, report


def test_windows_land_in_the_table_exactly_once_and_the_stateful_verify_reads_it_back(tmp_path, bootstrap, unique,
                                                                                      catalog, spark_connect):
    """A windowed pipeline (keyed state) with a table: crashes at the table's own failpoints, then the stateful
    verify (the windows recomputed from the whole input) and its table check agree."""
    from .test_state import WINDOW, produce, stateful

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=100)
    stateful(pipeline, WINDOW)
    table = f"lake_{unique}.windows"
    pipeline.rewrite(sink={"iceberg": {"table": table}})
    for n, point in enumerate(ICEBERG_FAILPOINTS):
        produce(pipeline, range(40 * n, 40 * (n + 1)))
        crash_at(pipeline, point)
    produce(pipeline, range(40 * len(ICEBERG_FAILPOINTS), 40 * len(ICEBERG_FAILPOINTS) + 40))
    done = run(pipeline, "--max-records", "1000")
    assert done.returncode == 0, done.stderr[-3000:]

    rows = table_rows(catalog, table)
    assert rows and as_sink(rows) == sink_rows(bootstrap, pipeline.sink)
    assert {json.loads(r["value"])["window_start"] for r in rows}, "the windows' values are the table's"
    report = verify(pipeline)
    assert report["ok"] and report["complete"], report
    assert report["table"]["ok"] and report["table"]["rows"] == len(rows) == report["actual_outputs"], report["table"]


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_records_too_large_for_the_topic_are_not_the_tables_rows(tmp_path, bootstrap, unique, catalog, writer):
    """The writers dead-letter a record larger than the sink topic takes; the table leaves it out by the writers'
    own estimate. Orders whose records straddle the limit byte by byte: the table is the topic, exactly."""
    from confluent_kafka import Producer

    from .test_bad_input import order, set_max_message_bytes

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, writer=writer,
                             transform="lockstep_examples.orders:enrich_for_table")
    table = f"lake_{unique}.orders"
    pipeline.rewrite(sink={"iceberg": {"table": table}})
    set_max_message_bytes(bootstrap, pipeline.sink, 2000)
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(1400, 1800, 4):  # record sizes across the 2000-byte limit
        producer.produce(pipeline.source, order(n, customer="x" * n), partition=n % 2)
    producer.flush(30)
    assert run(pipeline).returncode == 0

    expected = sink_rows(bootstrap, pipeline.sink)
    dead = read_committed(bootstrap, pipeline.dead_letters)
    assert expected and dead, "some records fit the topic, some are dead letters for their size"
    assert as_sink(table_rows(catalog, table)) == expected


def test_a_spark_submit_run_stages_the_table_as_a_connect_session_does(tmp_path, bootstrap, unique, catalog):
    """spark.mode: submit: the run's driver is the checkpoint's own spark-submit, which stages the snapshot; the
    commit publishes it. The table is the topic."""
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, mode="submit",
                             transform="lockstep_examples.orders:enrich_for_table")
    table = f"lake_{unique}.orders"
    pipeline.rewrite(sink={"iceberg": {"table": table}})
    produce_orders(pipeline, 40)
    done = run(pipeline)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = table_rows(catalog, table)
    assert len(rows) == 36 and as_sink(rows) == sink_rows(bootstrap, pipeline.sink)
    assert published_checkpoints(catalog, table, pipeline.name) == [1]


def test_an_avro_sink_lands_its_records_fields_as_the_tables_columns(tmp_path, bootstrap, unique, catalog,
                                                                     registry):  # noqa: F811
    """``sink.value`` in Avro through the registry, beside a table: the table's columns are the record's fields, as
    Confluent's deserializer reads them from the topic (not the framed bytes), typed by the schema; a dead letter is
    no row; verify finds each record of the topic once in the table."""
    from confluent_kafka.schema_registry import Schema

    table = f"lake_{unique}.enriched"
    pipeline = make(tmp_path, bootstrap, unique, {"value": "avro-confluent"},
                    {"value": {"format": "avro-confluent", "schema": json.loads(ENRICHED)}, "iceberg": {"table": table}},
                    "lockstep_examples.avro_orders:enrich", partitions=3)
    registry.register_schema(f"{pipeline.sink}-value", Schema(ENRICHED, "AVRO"))
    produce(pipeline, registry, [(i, order(i)) for i in range(1, 31)])  # every 9th a dead letter: 27 rows
    finished = run(pipeline)
    assert finished.returncode == 0, finished.stderr[-3000:]

    t = catalog.load_table(table)
    fields = [f["name"] for f in json.loads(ENRICHED)["fields"]]
    assert [c.name for c in t.schema().columns] == ["key", *fields, "lockstep_source_topic",
                                                    "lockstep_source_partition", "lockstep_source_offset",
                                                    "lockstep_checkpoint"]
    assert [str(t.schema().find_field(n).field_type) for n in ("amount", "amount_cents", "priority")] == [
        "double", "long", "boolean"]
    rows = sorted(table_rows(catalog, table), key=lambda r: r["order_id"])
    read = sorted(deserialized(pipeline, registry, pipeline.sink), key=lambda r: r["order_id"])
    assert len(read) == 27 and [{f: r[f] for f in fields} for r in rows] == read
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["table"]["ok"] and report["table"]["rows"] == 27, report["table"]


def test_a_dead_letter_replay_lands_its_records_in_the_table_too(tmp_path, bootstrap, unique, catalog):
    """``lockstep deadletters replay`` through a fixed transform: the records it recovers go to the sink topic and
    to the table, published with the replay checkpoint's transactions (its snapshot names the replay pipeline), so
    the table keeps holding exactly the topic's records; verify checks both; the upkeep keeps every row."""
    import yaml

    pipeline, table = with_table(tmp_path, bootstrap, unique)
    for start in (0, 20):  # two checkpoints; every 10th order malformed: 4 dead letters, 36 rows
        produce_orders(pipeline, 20, start=start)
        assert run(pipeline).returncode == 0
    assert len(table_rows(catalog, table)) == 36
    fixed = tmp_path / "fixed.yaml"  # the same pipeline, its transform fixed to accept what it could not parse
    fixed.write_text(yaml.safe_dump({**yaml.safe_load(pipeline.spec_path.read_text()),
                                     "transform": "lockstep_examples.orders:enrich_accepting_text"}))
    replayed = lockstep("deadletters", "replay", "--spec", str(fixed), "--json")
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    [r] = json.loads(replayed.stdout)
    assert (r["status"], r["to_sink"]) == ("completed", 4), r

    rows = table_rows(catalog, table)
    assert len(rows) == 40 and as_sink(rows) == sink_rows(bootstrap, pipeline.sink)
    assert published_checkpoints(catalog, table, pipeline.name + "-replay") == [r["replay_checkpoint"]]
    assert lockstep_branches(catalog, table) == []
    report = json.loads(lockstep("verify", "--spec", str(fixed), "--json").stdout)
    assert report["ok"] and report["replayed"]["checked"] == 4, report
    assert report["table"]["ok"] and report["table"]["rows"] == 40, report["table"]
    since = json.loads(lockstep("verify", "--spec", str(fixed), "--since-checkpoint", "1", "--json").stdout)
    assert since["table"]["ok"], since["table"]  # the replayed offsets left out: a replay numbers its own checkpoints

    kept = lockstep("iceberg", "upkeep", "--spec", str(fixed), "--keep", "1", "--expire-older-than", "0",
                    "--orphans-older-than", "0", "--json")
    assert kept.returncode == 0, kept.stderr[-2000:]
    compacted, _, _ = json.loads(kept.stdout)["actions"]
    assert compacted["rows"] > 0, "checkpoint 1's rows, and the replay's (its checkpoint 1), compacted"
    assert as_sink(table_rows(catalog, table)) == sink_rows(bootstrap, pipeline.sink), "the upkeep keeps every row"
