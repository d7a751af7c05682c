"""The Iceberg race's parts that need no services (`lockstep_bench.iceberg_race`, `iceberg_report`, the peer's
statements in `flink_sql`): what each engine is asked to do, how a table is checked, and what the page says."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from lockstep_bench import flink_sql, iceberg_race, iceberg_report, peers, sink_check
from lockstep_examples.bench import FIELDS, MIN_AMOUNT


def test_the_peer_writes_the_same_columns_from_a_bounded_read_committed_scan() -> None:
    ddl, inserts = flink_sql.iceberg_statements("b:9092", "in", {0: 10, 1: 12}, "bench.t", "g")
    table, source = ddl[1], ddl[2]
    for name, _ in FIELDS:
        assert f"`{name}`" in table
    for column in ("`amount_cents` BIGINT", "`value` STRING", "`src_partition` INT", "`src_offset` BIGINT"):
        assert column in table
    assert "'scan.bounded.specific-offsets' = 'partition:0,offset:10;partition:1,offset:12'" in source
    assert "'properties.isolation.level' = 'read_committed'" in source
    assert len(inserts) == 1 and f"WHERE `amount` >= {MIN_AMOUNT}" in inserts[0]
    assert inserts[0].startswith("INSERT INTO ice.`bench`.`t` SELECT")


def test_the_peer_with_a_kafka_topic_adds_the_drain_races_exactly_once_sink_to_the_same_job() -> None:
    ddl, inserts = flink_sql.iceberg_statements("b:9092", "in", {0: 10}, "bench.t", "g", "out", "tx")
    assert inserts[1] == flink_sql.insert_sink()
    assert "'sink.delivery-guarantee' = 'exactly-once'" in ddl[-1] and "'topic' = 'out'" in ddl[-1]


def test_the_catalogs_keys_reach_the_peer_in_its_environment_not_its_arguments(tmp_path: Path) -> None:
    secret = "s3-secret-not-in-argv"
    env = {"AIRFLOW_CONN_ICEBERG_DEFAULT": json.dumps({"extra": {"s3.secret-access-key": secret}}), "OTHER": "x"}
    command = peers.flink_iceberg_command(tmp_path, tmp_path, "b:1", "in", {0: 5}, "bench.t", None,
                                          "http://127.0.0.1:1", env)
    assert secret not in " ".join(command.argv) and secret in command.env["AIRFLOW_CONN_ICEBERG_DEFAULT"]
    assert "--sink" not in command.argv
    assert command.env["HADOOP_CLASSPATH"].count("hadoop-client") == 2
    with_topic = peers.flink_iceberg_command(tmp_path, tmp_path, "b:1", "in", {0: 5}, "bench.t", "out",
                                             "http://127.0.0.1:1", env)
    assert with_topic.argv[with_topic.argv.index("--sink") + 1] == "out"


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_DEFAULT", json.dumps({"conn_type": "iceberg", "extra": {
        "type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": f"file://{tmp_path / 'wh'}"}}))
    from pyiceberg.catalog import load_catalog

    from lockstep.connections import iceberg_catalog

    cat = load_catalog(iceberg_race.CATALOG, **iceberg_catalog(iceberg_race.CATALOG))
    cat.create_namespace("bench")
    return cat


def test_a_table_is_checked_row_by_row_against_the_offsets_the_transform_keeps(catalog) -> None:
    want = sink_check.expected(40, 2)
    kept = [(p, o) for p in range(2) for o in range(len(want[p])) if want[p][o]]
    assert len(kept) < 40, "the generator's orders below the minimum are dropped"
    rows = kept[1:] + [kept[2], (0, 25), (5, 0)]  # one lost, one twice, one past the input, one of no partition
    schema = pa.schema([("src_partition", pa.int32()), ("src_offset", pa.int64())])
    table = catalog.create_table("bench.t", schema=schema)
    table.append(pa.table({"src_partition": [p for p, _ in rows], "src_offset": [o for _, o in rows]}, schema=schema))
    checked = iceberg_race.read_table("bench.t", ("src_partition", "src_offset"), want)
    assert (checked["missing"], checked["duplicates"], checked["unexpected"]) == (1, 1, 2)
    assert not checked["exact"] and checked["files"] == 1
    exact = catalog.create_table("bench.ok", schema=schema)
    exact.append(pa.table({"src_partition": [p for p, _ in kept], "src_offset": [o for _, o in kept]}, schema=schema))
    assert iceberg_race.read_table("bench.ok", ("src_partition", "src_offset"), want)["exact"]


def run(engine: str, rate: float, exact: bool = True, files: int = 8, repeat: int = 0) -> dict:
    return {"pipeline": engine, "repeat": repeat, "records_per_s": rate, "wall_s": 1e7 / rate, "cpu_s": 100.0,
            "peak_rss_mb": 2000.0, "inner": {"stages": {"keep": 30.0, "iceberg": 40.0}, "plan_s": 0.3,
                                             "run_s": 70.0, "commit_s": 1.0} if engine in iceberg_race.LOCKSTEPS else {},
            "check": {"exact": exact, "summary": "exact" if exact else "NOT exact: 3 missing", "files": files,
                      "bytes": 5e8, "records": 9e6},
            "topic_check": {"exact": True} if engine in (iceberg_race.LOCKSTEP, iceberg_race.FLINK_AND_KAFKA) else None}


def results(lockstep: float, flink: float, both: float = 80_000, flink_kafka: float = 100_000,
            floor_s: float = 30.0) -> dict:
    """``floor_s``: Spark's read and transform into noop (its read alone: half of it). ``lockstep``: the table alone's rate, against Flink's table only (``flink``); ``both``: Lockstep's table and
    topic, against Flink's table and Kafka sink (``flink_kafka``)."""
    rates = {iceberg_race.LOCKSTEP_TABLE: lockstep, iceberg_race.FLINK: flink, iceberg_race.LOCKSTEP: both,
             iceberg_race.FLINK_AND_KAFKA: flink_kafka}
    stream = {"records": 1_000_000, "checkpoints": [{"files": 8}] * 10, "compact_s": 4.0,
              "before": {"files": 80, "records": 899_998, "summary": "exact"},
              "after": {"files": 9, "records": 899_998, "summary": "exact"}}
    return {"settings": iceberg_race.IcebergSettings(warm_up=False).to_json(), "started_at": "2026-12-05",
            "commit": "abc", "seconds": 1800.0, "load": {"start": [1.0], "end": [2.0]}, "environment": {},
            "race": {"input": {"records": 10_000_000, "partitions": 8, "bytes": 2e9, "generate_s": 60.0},
                     "warm_up": [], "stream": stream,
                     "specs": {iceberg_race.LOCKSTEP: "name: x\n", iceberg_race.LOCKSTEP_TABLE: "name: alone\n"},
                     "flink_sql": {iceberg_race.FLINK: iceberg_race.flink_statements_for_report(
                         iceberg_race.FLINK, {0: 5})},
                     "runs": [run(engine, rate, files=2 if engine.startswith("flink") else 8, repeat=r)
                              for r in range(2) for engine, rate in rates.items()],
                     "floors": [floor(name, pass_s, r) for r in range(2) for name, pass_s in
                                ((iceberg_race.FLOOR_READ, floor_s / 2), (iceberg_race.FLOOR_TRANSFORM, floor_s))]}}


def floor(name: str, pass_s: float, repeat: int) -> dict:
    return {"pipeline": name, "repeat": repeat, "wall_s": pass_s + 3.0, "cpu_s": 2 * pass_s, "records_per_s": 1.0,
            "inner": {"pass_s": pass_s + repeat * 0.2}}


def test_the_page_states_the_ratio_against_the_target_the_files_and_the_compaction() -> None:
    page = iceberg_report.render(results(lockstep=90_000, flink=60_000))
    assert ("**Lockstep (connect mode): the table alone (no sink.topic), one checkpoint ÷ Flink SQL + Iceberg's Flink "
            "sink: the table only: 1.50×** (not met)") in page
    assert ("**Lockstep (connect mode): the table and a Kafka topic, one checkpoint ÷ Flink SQL + Iceberg's Flink "
            "sink: the table and a Kafka topic (exactly-once sink): 0.80×** (not met)") in page
    assert "| after 10 checkpoints | 80 | 899,998 | exact |" in page and "| after `compact --keep 1` | 9 |" in page
    assert "No uncounted run first" in page and "<secret key>" in page
    assert page.count("spends its time") == 2 and "name: alone" in page
    met = iceberg_report.render(results(lockstep=130_000, flink=60_000))
    assert "2.17×** (met)" in met
    assert iceberg_report.headline(results(lockstep=90_000, flink=60_000))[:2] == [
        "lockstep-table ÷ flink-iceberg: 1.50× (target 2.0×: not met)",
        "lockstep-connect ÷ flink-iceberg-and-kafka: 0.80× (target 2.0×: not met)"]
    assert iceberg_report.summary(results(lockstep=90_000, flink=60_000))["ratios"] == {
        "lockstep-table / flink-iceberg": 1.5, "lockstep-connect / flink-iceberg-and-kafka": 0.8}


def test_the_page_sets_sparks_floor_against_the_time_the_target_leaves() -> None:
    # Flink's table only: 1e7 / 60,000 = 166.7 s, so 2x leaves 83.3 s for Lockstep's checkpoint.
    slow = iceberg_report.render(results(lockstep=90_000, flink=60_000, floor_s=100.0))
    assert "would finish its checkpoint in **83.3 s**, with at most 167 CPU seconds" in slow
    assert "| the reader and the race's transform | 100.1 | 103.0 | 200 | 1.20× |" in slow  # medians of 100, 100.2
    assert "| Lockstep's reader alone | 50.1 | 53.0 | 100 | 0.60× |" in slow
    assert "**more than the 83.3 s the target leaves for the whole checkpoint**" in slow
    fast = iceberg_report.render(results(lockstep=90_000, flink=60_000, floor_s=40.0))
    assert "takes 40.1 s: 48% of the 83.3 s the target leaves" in fast
    assert iceberg_report.summary(results(lockstep=90_000, flink=60_000, floor_s=40.0))["floor_pass_s"] == {
        iceberg_race.FLOOR_READ: 20.1, iceberg_race.FLOOR_TRANSFORM: 40.1}
    none = results(lockstep=90_000, flink=60_000)
    none["race"]["floors"] = []
    assert "Spark's floor" not in iceberg_report.render(none)


def test_a_table_that_was_not_exact_says_so_on_the_page() -> None:
    r = results(lockstep=90_000, flink=60_000)
    r["race"]["runs"][1]["check"] = {**r["race"]["runs"][1]["check"], "exact": False, "summary": "NOT exact: 3 missing"}
    page = iceberg_report.render(r)
    assert "NOT exact (1/2)" in page and "NOT exact: 3 missing" in page


def test_the_options_make_the_settings_and_bad_ones_are_refused() -> None:
    assert iceberg_race.IcebergSettings(records=5, engines=(iceberg_race.LOCKSTEP,)).records == 5
    with pytest.raises(ValueError, match="unknown engines"):
        iceberg_race.IcebergSettings(engines=("spark-iceberg",))
    with pytest.raises(ValueError, match="at least"):
        iceberg_race.IcebergSettings(records=0)


def test_the_make_target_runs_the_iceberg_race() -> None:
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "bench-iceberg: setup\n\t$(BIN)/" + iceberg_report.FULL_COMMAND in makefile


def test_the_main_page_quotes_the_committed_pages_headline_and_is_rewritten_in_place(tmp_path) -> None:
    page = tmp_path / "BENCHMARKS-iceberg.md"
    assert "has not been run for this page" in iceberg_report.section(page)
    page.write_text(iceberg_report.render(results(lockstep=90_000, flink=60_000, floor_s=40.0)))
    text = iceberg_report.section(page)
    assert text.startswith(iceberg_report.HEADING + "\n\n") and "on 2026-12-05, commit abc" in text
    assert "Lockstep's table alone 90,000 against Flink's table only 60,000: **1.50×**" in text
    assert "(target ≥ 2×: not met)" in text and "writing nothing, in 40.1 s" in text

    main = tmp_path / "BENCHMARKS.md"
    main.write_text("# Benchmarks\n\n## Joins\n\nj\n\n## Making Lockstep faster\n\nm\n")
    iceberg_report.replace_section(main, page)
    once = main.read_text()
    assert once.index("## Joins") < once.index(iceberg_report.HEADING) < once.index("## Making Lockstep faster")
    iceberg_report.replace_section(main, page)
    assert main.read_text() == once, "written again in place, not twice"


def test_the_committed_pages_agree_make_bench_writes_the_same_iceberg_section_again() -> None:
    from lockstep_bench.measure import page_summary

    root = Path(__file__).resolve().parents[2]
    page = root / iceberg_report.PAGE
    assert page_summary(page, iceberg_report.SUMMARY_MARK) is not None
    section = iceberg_report.section(page)
    assert "Measured apart by `make bench-iceberg`" in section
    assert f"{section}\n\n## Making Lockstep faster" in (root / "docs" / "BENCHMARKS.md").read_text()
