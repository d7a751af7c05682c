"""The join race's decisions without services: the generated input, the expected enriched orders, every
engine's output format, the sink check, the Flink statements built from the run's offsets, Lockstep's spec,
the options and the report's arithmetic (lockstep_bench.joins, lockstep_bench.joins_report)."""
from __future__ import annotations

import argparse
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from lockstep.spec import load_spec
from lockstep_bench import flink_sql, joins, joins_report, runner

KEYS = 1000


# ---- the input and what every engine must write --------------------------------------------------------
def test_every_order_has_a_customer_of_the_table_and_each_partition_rises_in_event_time() -> None:
    customers = {key: (json.loads(value), partition) for value, partition, key in joins.customer_records(KEYS, 8)}
    assert len(customers) == KEYS
    last: dict[int, int] = {}
    seen = set()
    for n, (value, partition, key) in enumerate(joins.order_records(3 * KEYS, KEYS, 8)):
        doc = json.loads(value)
        assert key is not None and key.decode() == doc["customer"] and key in customers
        assert partition == customers[key][1]  # an order goes to its customer's partition
        assert doc["order_id"] == f"o{n}" and doc["created_at"] == joins.EPOCH + n
        assert doc["created_at"] > last.get(partition, 0)
        last[partition] = doc["created_at"]
        if n < KEYS:
            seen.add(doc["customer"])
    assert len(seen) == KEYS  # the first KEYS orders have every customer once: the whole table is used
    assert set(last) == set(range(8))


def test_every_customer_version_predates_every_order() -> None:
    assert joins.CUSTOMERS_AT < joins.EPOCH * 1000


def test_the_expected_row_joins_the_produced_customer_into_the_produced_order() -> None:
    want = joins.Expected.of(10, KEYS)
    i = 7
    order = joins.order(i, KEYS)
    c = joins.customer_index(i, KEYS)
    assert order["customer"] == f"customer-{c}"
    assert want.row(i) == (f"o{i}", f"customer-{c}", order["amount"], f"Customer {c}", joins.TIERS[c % 3])
    plain = joins.Expected.of(10, KEYS, enriched=False)
    assert plain.row(i) == (f"o{i}", f"customer-{c}", order["amount"], None, None)
    with pytest.raises(KeyError):
        joins.Expected(10, KEYS, True, {}).row(i)  # an order whose customer has no row has no output


def test_lockstep_and_flink_outputs_parse_to_the_same_row() -> None:
    lockstep = b'{"order_id":"o3","customer":"customer-23757","amount":57.57,"name":"Customer 23757","tier":"bronze"}'
    flink = b'{"tier":"bronze","name":"Customer 23757","amount":57.57,"customer":"customer-23757","order_id":"o3"}'
    assert joins.parse_output(lockstep) == joins.parse_output(flink) == \
        ("o3", "customer-23757", 57.57, "Customer 23757", "bronze")
    assert joins.parse_output(b'{"order_id":"o3","customer":"c","amount":1.0}') == ("o3", "c", 1.0, None, None)


def _rows(want: joins.Expected) -> list[joins.Row]:
    # Each row as an engine would write it: JSON, parsed back.
    return [joins.parse_output(json.dumps(dict(zip(flink_sql.JOIN_OUTPUT, want.row(i), strict=True))).encode())
            for i in range(want.records)]


def test_check_accepts_every_order_once_with_its_customers_fields() -> None:
    want = joins.Expected.of(500, KEYS)
    verdict = joins.check(want, reversed(_rows(want)))  # any order
    assert verdict.exact and verdict.records == 500 and "exact: 500 orders" in verdict.summary()


def test_check_names_missing_wrong_duplicated_and_unknown_orders() -> None:
    want = joins.Expected.of(500, KEYS)
    rows = _rows(want)
    wrong = (rows[1][0], rows[1][1], rows[1][2], "Someone else", rows[1][4])
    bad = [wrong, *rows[2:], rows[2], ("o500", "customer-1", 1.0, "x", "y"), ("x7", "customer-1", 1.0, "x", "y")]
    verdict = joins.check(want, bad)
    assert not verdict.exact
    assert verdict.missing == 1 and verdict.missing_samples == ["o0"]
    assert verdict.wrong == [(wrong, rows[1])]
    assert verdict.duplicated == ["o2"]
    assert verdict.unknown == ["o500", "x7"]  # past the input, and not an order id at all
    assert "NOT exact: 1 of 500 orders missing, 1 with wrong fields, 1 written twice, 2 not in the input" in \
        verdict.summary()
    assert not joins.check(want, []).exact
    # the reference's rows (no name, tier) are wrong for the join, and the join's for the reference
    plain = joins.Expected.of(500, KEYS, enriched=False)
    assert not joins.check(want, _rows(plain)).exact and not joins.check(plain, rows).exact
    assert joins.check(plain, _rows(plain)).exact


# ---- Flink SQL -----------------------------------------------------------------------------------------
ORDERS_ENDS = {1: 70, 0: 50}
CUSTOMERS_ENDS = {0: 6, 1: 4}


def _statements(kind: str = "temporal") -> tuple[str, str, str, str]:
    ddl, insert = flink_sql.join_statements("b:9092", "orders", ORDERS_ENDS, "customers", CUSTOMERS_ENDS, "out", "tx",
                                            "g", 10, kind)
    orders, customers, sink = ddl
    return orders, customers, sink, insert


def test_flink_joins_each_order_as_of_its_event_time_against_the_upsert_table() -> None:
    orders, customers, sink, insert = _statements()
    assert "FROM orders AS o JOIN customers FOR SYSTEM_TIME AS OF o.`ts` AS c ON o.`customer` = c.`id`" in insert
    assert "`ts` AS TO_TIMESTAMP_LTZ(`created_at`, 0)" in orders
    assert "WATERMARK FOR `ts` AS `ts` - INTERVAL '10' SECOND(2)" in orders
    assert "'scan.bounded.specific-offsets' = 'partition:0,offset:50;partition:1,offset:70'" in orders
    assert "'connector' = 'upsert-kafka'" in customers and "PRIMARY KEY (`id`) NOT ENFORCED" in customers
    assert "`version_ts` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL" in customers
    assert "WATERMARK FOR `version_ts` AS `version_ts`" in customers
    assert "'scan.bounded.mode' = 'specific-offsets'" in customers
    assert "'scan.bounded.specific-offsets' = 'partition:0,offset:6;partition:1,offset:4'" in customers
    assert "'key.format' = 'raw'" in customers and "'value.fields-include' = 'EXCEPT_KEY'" in customers
    for source in (orders, customers):
        assert "'properties.isolation.level' = 'read_committed'" in source
    assert "'sink.delivery-guarantee' = 'exactly-once'" in sink and "'sink.transactional-id-prefix' = 'tx'" in sink
    assert re.findall(r"^  `(\w+)`", sink, re.M) == list(flink_sql.JOIN_OUTPUT)


def test_the_fallback_is_a_regular_join_and_nothing_else_is_accepted() -> None:
    *_, insert = _statements("regular")
    assert "FOR SYSTEM_TIME" not in insert and "JOIN customers AS c ON o.`customer` = c.`id`" in insert
    with pytest.raises(ValueError, match="join kind 'lookup'"):
        flink_sql.insert_join("lookup")


def test_flink_checkpoints_as_in_the_windowed_race() -> None:
    conf = flink_sql.checkpointed_configuration("/tmp/x", 2, 5, "file:///c.jar")
    assert conf["state.backend.type"] == "rocksdb" and conf["execution.checkpointing.incremental"] == "true"
    assert conf["execution.checkpointing.interval"] == "5s" and conf["execution.checkpointing.mode"] == "EXACTLY_ONCE"
    assert conf["execution.checkpointing.dir"] == "file:///tmp/x/checkpoints" and conf["parallelism.default"] == "2"
    window_job = Path(flink_sql.__file__).parent / "jobs" / "flink_window_job.py"
    assert "checkpointed_configuration(" in window_job.read_text()  # one definition for both races


def test_the_report_quotes_the_statements_over_the_runs_end_offsets() -> None:
    statements = joins.flink_statements_for_report("temporal", {"orders": ORDERS_ENDS, "customers": CUSTOMERS_ENDS})
    assert len(statements) == 4 and "FOR SYSTEM_TIME AS OF" in statements[-1]
    assert "'partition:0,offset:50;partition:1,offset:70'" in statements[0] and "<bootstrap>" in statements[0]


# ---- Lockstep's spec -------------------------------------------------------------------------------------
def test_lockstep_joins_the_customers_table_inner_and_selects_the_same_fields(tmp_path: Path) -> None:
    spec = load_spec(joins.lockstep_spec(tmp_path, "j", "orders", "customers", "out", 1000, "sc://localhost:15002"))
    (table,) = spec.tables
    assert table.name == "customers" and table.topic == "customers"
    assert table.join is not None and table.join.by == "data.customer" and table.join.how == "inner"
    assert spec.checkpoints.max_records == 1000  # one checkpoint over the whole input
    assert all(f"'{name}'" in joins.QUERY for name in flink_sql.JOIN_OUTPUT)
    assert "customers.data.name" in joins.QUERY and "customers.data.tier" in joins.QUERY
    plain = load_spec(joins.lockstep_spec(tmp_path, "p", "orders", "customers", "out", 1000, "sc://localhost:15002",
                                          join=False))
    assert not plain.tables and "customers" not in joins.QUERY_NO_JOIN


# ---- options -----------------------------------------------------------------------------------------------
def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_options_make_the_settings_and_bad_ones_are_refused() -> None:
    s = runner.joins_settings_from_args(_args("--joins-only", "--joins-records", "2000", "--joins-keys", "100",
                                              "--repeats", "1", "--joins-flink-join", "regular",
                                              "--joins-engines", "lockstep-connect,flink-sql"))
    assert (s.records, s.keys, s.repeats, s.flink_join, s.engines) == (2000, 100, 1, "regular",
                                                                        (joins.LOCKSTEP, joins.FLINK))
    default = runner.joins_settings_from_args(_args("--joins-only"))
    assert (default.records, default.keys, default.partitions, default.flink_join) == (1_000_000, 100_000, 8,
                                                                                        "temporal")
    assert default.report == joins_report.PAGE
    with pytest.raises(ValueError, match="unknown engines"):
        joins.JoinSettings(engines=("quix-streams",))
    with pytest.raises(ValueError, match="--joins-flink-join"):
        joins.JoinSettings(flink_join="lookup")
    with pytest.raises(ValueError, match="at least 1"):
        joins.JoinSettings(keys=0)


# ---- the run's own figures ------------------------------------------------------------------------------
def test_the_tables_materialization_is_picked_out_of_the_runs_log() -> None:
    from lockstep_bench.pipelines import _TableLines

    handler = _TableLines()
    log = logging.getLogger("test.joins.tables")
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.INFO)
    # lockstep.tables.materialize.materialize's line
    log.info("checkpoint %d: table %s: %d keys after %d offsets of %s (%s, %d files, %d bytes) in %.1f s",
             1, "customers", 100000, 100000, "bench-joins-customers-1", "written", 1, 2_345_678, 3.4)
    log.info("checkpoint 1: something else in 9.0 s")
    assert handler.tables == {"customers": {"keys": 100000, "offsets": 100000, "seconds": 3.4}}


def test_the_phases_before_and_during_the_writers_pass_come_from_the_times_of_the_runs_log_lines() -> None:
    from lockstep_bench.pipelines import _RunPhases

    handler = _RunPhases()
    for at, message in ((10.0, "checkpoint 1: formats: source.value json; sink.value json (no schema)"),
                        (12.5, "checkpoint 1: table customers: 100 keys after 100 offsets of c (written, 1 files, "
                               "9 bytes) in 2.5 s"),
                        (16.0, "checkpoint 1: reading 8 ranges (1000000 records at most) in 2 tasks (...)"),
                        (16.1, "checkpoint 1: shipped lockstep to the executors"),
                        (26.0, "checkpoint 1: 2 Spark tasks wrote their transactions in 16.0 s")):
        record = logging.LogRecord("lockstep.spark.job", logging.INFO, __file__, 1, message, None, None)
        record.created = at
        handler.emit(record)
    assert handler.phases() == {"prepare_s": 3.5, "write_s": 10.0}  # from the table's line, the later one
    del handler.at["table"]
    assert handler.phases() == {"prepare_s": 6.0, "write_s": 10.0}  # without a table: from the formats line
    del handler.at["written"]
    assert handler.phases() == {}  # a milestone missing: nothing rather than a wrong figure


def test_customers_can_be_stamped_before_the_orders(monkeypatch: pytest.MonkeyPatch) -> None:
    import confluent_kafka

    from lockstep_dev import datagen

    sent: list[dict[str, Any]] = []

    class Producer:
        def __init__(self, _conf: dict[str, Any]) -> None:
            pass

        def produce(self, topic: str, value: bytes, **kw: Any) -> None:
            sent.append({"topic": topic, **kw})

        def poll(self, _t: float) -> int:
            return 0

        def flush(self, _t: float) -> int:
            return 0

    monkeypatch.setattr(confluent_kafka, "Producer", Producer)
    datagen.send("b", "customers", [(b"{}", 0, b"k")], timestamp_ms=joins.CUSTOMERS_AT)
    datagen.send("b", "orders", [(b"{}", 1, None)])
    assert [s["timestamp"] for s in sent] == [joins.CUSTOMERS_AT, 0]  # 0: the producer's clock


# ---- the report ------------------------------------------------------------------------------------------
def _run(engine: str, wall: float, exact: bool = True, table_s: float | None = None) -> dict[str, Any]:
    inner: dict[str, Any] = {"job_seconds": wall - 1} if engine == joins.FLINK else \
        {"plan_s": 0.5, "run_s": wall - 1.5, "commit_s": 0.3, "spark_seconds": wall - 2, "session_seconds": 0.4,
         "phases": {"prepare_s": (wall - 4) / 3, "write_s": (wall - 4) * 2 / 3}}
    if table_s is not None:
        inner["tables"] = {"customers": {"keys": 100_000, "offsets": 100_000, "seconds": table_s}}
    return {"pipeline": engine, "wall_s": wall, "records_per_s": 1_000_000 / wall, "cpu_s": wall * 1.5,
            "peak_rss_mb": 1000.0, "inner": inner, "repeat": 0,
            "check": {"exact": exact, "records": 1_000_000, "summary": "exact" if exact else "NOT exact: 3 missing"}}


def _results(lockstep_walls: tuple[float, ...], flink_walls: tuple[float, ...], flink_join: str = "temporal",
             flink_exact: bool = True) -> dict[str, Any]:
    runs = [_run(joins.LOCKSTEP, w, table_s=3.0) for w in lockstep_walls] + \
        [_run(joins.FLINK, w, exact=flink_exact) for w in flink_walls] + \
        [_run(joins.LOCKSTEP_NO_JOIN, 12.0) for _ in lockstep_walls]
    return {"settings": {"records": 1_000_000, "keys": 100_000, "partitions": 8, "repeats": 3,
                         "flink_join": flink_join},
            "started_at": "2026-11-27 14:00:00 UTC", "commit": "abc1234", "seconds": 600.0,
            "load": {"start": [1.5, 1, 1], "end": [2.25, 1, 1]}, "environment": {"cpus": 2},
            "race": {"runs": runs, "warm_up": [], "input_seconds": {"customers": 1.0, "orders": 9.0},
                     "specs": {joins.LOCKSTEP: "name: x\n"}, "flink_sql": ["CREATE x", "INSERT y"]}}


def test_the_ratio_is_lockstep_over_flink_from_medians_and_the_target_is_stated(tmp_path: Path) -> None:
    res = _results((16.0, 15.0, 30.0), (40.0, 32.0, 36.0))
    sm = joins_report.summary(res)
    assert sm["ratio"] == pytest.approx(36.0 / 16.0, abs=1e-3) and sm["met"] is True
    assert sm["load"] == ["1.50", "2.25"]
    text = joins_report.render(res)
    assert "**Target (issue 41): Lockstep ≥ 1.0× Flink SQL's temporal join — met: 2.25×**" in text
    assert "load average 1.50 at the start, 2.25 at the end (2 cores)" in text
    assert "| Flink SQL, event-time temporal join (RocksDB, incremental) | 27,778 | 36.0 |" in text
    # with the table (median 16 s wall): 3 s materializing it, 4 s before the writers, 8 s writing; without it
    # (12 s wall): no table, 8/3 s before the writers, 16/3 s writing
    assert "| process, start to exit (wall) | 16.0 | 12.0 | 4.0 |" in text
    assert "| — table materialized (read its records, write its files to S3, build the view) | 3.0 | 0.0 | 3.0 |" in text
    assert "counting the records that do not decode | 4.0 | 2.7 | 1.3 |" in text
    assert "| — the writers' pass: read, decode, join, transform, write the transactions | 8.0 | 5.3 | 2.7 |" in text
    assert "```yaml\nname: x\n```" in text and "```sql\nCREATE x;\n\nINSERT y;\n```" in text
    slow = joins_report.summary(_results((40.0,), (20.0,)))
    assert slow["met"] is False and slow["ratio"] == pytest.approx(0.5)
    assert "— not met: 0.50×**" in joins_report.render(_results((40.0,), (20.0,)))


def test_a_wrong_peer_sink_and_the_fallback_join_are_reported_as_such() -> None:
    text = joins_report.render(_results((16.0,), (30.0,), flink_join="regular", flink_exact=False))
    assert "Flink SQL, REGULAR join on the upsert table (not temporal" in text
    assert "Lockstep ≥ 1.0× Flink SQL's regular (not temporal) join" in text
    assert "NOT EXACT in 0 of 1 runs" in text and "run 2, flink-sql: NOT exact: 3 missing" in text


def test_the_benchmarks_section_states_the_pages_figures(tmp_path: Path) -> None:
    page = tmp_path / "BENCHMARKS-joins.md"
    joins_report.write(_results((16.0, 15.0, 30.0), (40.0, 32.0, 36.0)), page)
    assert joins_report.read_summary(page) == json.loads(json.dumps(joins_report.summary(
        _results((16.0, 15.0, 30.0), (40.0, 32.0, 36.0)))))
    section = joins_report.section(page)
    assert section.startswith("## Joins")
    assert "2026-11-27 14:00:00 UTC, commit abc1234" in section and "**2.25×**" in section
    assert "| Lockstep (connect mode), `tables:` join | 62,500 | — |" in section
    assert "Target (issue 41): Lockstep ≥ 1.0× Flink SQL — met." in section
    assert "has not been run" in joins_report.section(tmp_path / "missing.md")


def test_make_bench_keeps_the_joins_section_and_the_committed_page_has_it(tmp_path: Path) -> None:
    """docs/BENCHMARKS.md's "Joins" comes from docs/BENCHMARKS-joins.md, so `make bench`, which does not
    measure it, writes it again; the committed BENCHMARKS.md holds exactly what the next `make bench` writes."""
    from lockstep_bench import report
    from lockstep_bench.results import Results

    root = Path(__file__).resolve().parents[2]
    assert joins_report.read_summary(root / joins_report.PAGE) is not None  # the committed page has its figures
    section = joins_report.section(root / joins_report.PAGE)
    res = Results(settings={"records": 1000, "partitions": 4, "repeats": 1, "partition_records": 1000},
                  environment={"cpus": 2}, seconds=60.0)
    out = tmp_path / "BENCH.md"
    report.write(res, out)
    generated = out.read_text()
    assert f"{section}\n\n## Formats" in generated
    assert f"{section}\n\n## Formats" in (root / "docs" / "BENCHMARKS.md").read_text()


def test_the_make_target_runs_the_join_race() -> None:
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "bench-joins: setup\n\t$(BIN)/" + joins_report.FULL_COMMAND in makefile
