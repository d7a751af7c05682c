"""The benchmark's exactly-once peers, their pure parts: the Flink SQL built from the runner's end
offsets, the set-up's marker (install once, reuse while the versions match), the options that turn
the peers on and off, and the report's rows for them. No Flink, no Quix, no Kafka here."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
from lockstep_bench import flink_sql, peers, report, runner
from lockstep_bench.results import FLINK_SQL, LOCKSTEP, LOCKSTEP_CONNECT, PIPELINES, QUIX, RAW, SPARK, Results

ENDS = {2: 700, 0: 1000, 1: 0}


# ---- Flink SQL -------------------------------------------------------------------------------------
def test_specific_offsets_lists_partitions_in_order() -> None:
    assert flink_sql.specific_offsets(ENDS) == "partition:0,offset:1000;partition:1,offset:0;partition:2,offset:700"


def test_source_reads_from_zero_to_the_runners_end_offsets_committed_only() -> None:
    ddl = flink_sql.source_table("h:1", "in", ENDS, "g")
    assert "'scan.startup.mode' = 'specific-offsets'" in ddl
    assert "'scan.startup.specific-offsets' = 'partition:0,offset:0;partition:1,offset:0;partition:2,offset:0'" in ddl
    assert "'scan.bounded.mode' = 'specific-offsets'" in ddl
    assert "'scan.bounded.specific-offsets' = 'partition:0,offset:1000;partition:1,offset:0;" \
           "partition:2,offset:700'" in ddl
    assert "'properties.isolation.level' = 'read_committed'" in ddl
    for metadata in ("'topic'", "'partition'", "'offset'"):
        assert f"METADATA FROM {metadata} VIRTUAL" in ddl
    assert "`amount` DOUBLE" in ddl and "`created_at` BIGINT" in ddl and "'topic' = 'in'" in ddl


def test_sink_is_exactly_once_with_the_shared_producer_settings() -> None:
    ddl = flink_sql.sink_table("h:1", "out", "bench-flink-abc")
    for option in ("'sink.delivery-guarantee' = 'exactly-once'", "'sink.transactional-id-prefix' = 'bench-flink-abc'",
                   "'properties.linger.ms' = '20'", "'properties.batch.size' = '1000000'",
                   "'properties.compression.type' = 'lz4'", "'properties.acks' = 'all'", "'topic' = 'out'"):
        assert option in ddl, option
    assert "`headers` MAP<STRING, BYTES> METADATA" in ddl and "`amount_cents` BIGINT" in ddl


def test_shared_producer_settings_are_the_writers() -> None:
    from lockstep.spark.writer_settings import THROUGHPUT_PRODUCER_CONFIG

    assert flink_sql.PRODUCER == {k: str(v) for k, v in THROUGHPUT_PRODUCER_CONFIG.items()}


def test_insert_filters_computes_cents_and_writes_the_contracts_headers() -> None:
    sql = flink_sql.insert_sink()
    assert "WHERE `amount` >= 30.0" in sql and "CAST(ROUND(`amount` * 100, 0) AS BIGINT) AS `amount_cents`" in sql
    for name in (SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET):
        assert f"'{name}'" in sql


def test_one_job_writes_the_sink_and_the_counts_from_one_source() -> None:
    ddl, inserts = flink_sql.statements("h:1", "in", "out", ENDS, "p", "file:///tmp/c", "g")
    assert [d.split("(")[0] for d in ddl] == ["CREATE TEMPORARY TABLE src ", "CREATE TEMPORARY TABLE sink ",
                                              "CREATE TEMPORARY TABLE counts "]
    assert inserts[0].startswith("INSERT INTO sink") and inserts[1].startswith("INSERT INTO counts")
    assert all(i.endswith("FROM src") or "FROM src WHERE" in i for i in inserts)


# ---- set-up marker ---------------------------------------------------------------------------------
class FakeInstaller:
    """Stands in for ``subprocess.run``: records the commands, makes the venv's python appear."""

    def __init__(self, env: peers.PeerEnv, cache: Path) -> None:
        self.calls: list[list[str]] = []
        self.python = env.venv_python(cache)

    def __call__(self, argv: list[str], check: bool) -> None:
        assert check
        self.calls.append(argv)
        if "venv" in argv:
            self.python.parent.mkdir(parents=True)
            self.python.write_text("")


def _env(tmp_path: Path, version: str = "1.0") -> peers.PeerEnv:
    jar = tmp_path / "remote" / "c.jar"
    jar.parent.mkdir(exist_ok=True)
    jar.write_bytes(b"jar")
    return peers.PeerEnv("flink", (f"apache-flink=={version}",), (("c.jar", jar.as_uri()),), python=sys.executable)


def test_first_use_installs_and_writes_the_marker_last(tmp_path: Path) -> None:
    env, cache = _env(tmp_path), tmp_path / "cache"
    fake = FakeInstaller(env, cache)
    assert not peers.is_installed(env, cache)
    assert peers.ensure(env, cache, run=fake) == env.venv_python(cache)
    assert [c[1:3] for c in fake.calls] == [["-m", "venv"], ["-m", "pip"]] and "apache-flink==1.0" in fake.calls[1]
    assert env.jar(cache).read_bytes() == b"jar"
    assert json.loads((cache / "bench" / "flink" / peers.MARKER).read_text()) == env.wanted()
    assert peers.is_installed(env, cache)


def test_second_use_reuses_the_folder(tmp_path: Path) -> None:
    env, cache = _env(tmp_path), tmp_path / "cache"
    peers.ensure(env, cache, run=FakeInstaller(env, cache))
    again = FakeInstaller(env, cache)
    peers.ensure(env, cache, run=again)
    assert again.calls == []


def test_other_versions_or_a_missing_marker_install_again(tmp_path: Path) -> None:
    env, cache = _env(tmp_path), tmp_path / "cache"
    peers.ensure(env, cache, run=FakeInstaller(env, cache))
    newer = _env(tmp_path, "2.0")
    assert not peers.is_installed(newer, cache)
    upgrade = FakeInstaller(newer, cache)
    peers.ensure(newer, cache, run=upgrade)
    assert [c[1:3] for c in upgrade.calls] == [["-m", "pip"]]  # the venv is kept, pip brings the new pins
    (cache / "bench" / "flink" / peers.MARKER).unlink()  # an interrupted set-up leaves no marker
    redo = FakeInstaller(newer, cache)
    peers.ensure(newer, cache, run=redo)
    assert len(redo.calls) == 1 and peers.is_installed(newer, cache)


def test_a_deleted_jar_is_not_reused(tmp_path: Path) -> None:
    env, cache = _env(tmp_path), tmp_path / "cache"
    peers.ensure(env, cache, run=FakeInstaller(env, cache))
    env.jar(cache).unlink()
    assert not peers.is_installed(env, cache)


def test_flink_parallelism_is_the_cores_capped_by_the_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers.os, "cpu_count", lambda: 2)
    assert [peers.parallelism(n) for n in (1, 2, 8)] == [1, 2, 2]


# ---- options ---------------------------------------------------------------------------------------
def _settings(*argv: str) -> runner.Settings:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    return runner.settings_from_args(parser.parse_args(list(argv)))


def test_peers_run_by_default_not_with_quick_unless_forced() -> None:
    assert _settings().peers and not _settings("--no-peers").peers
    assert not _settings("--quick").peers and _settings("--quick", "--peers").peers


# ---- report ----------------------------------------------------------------------------------------
def _run(name: str, wall: float, records: int = 1000, partitions: int = 4) -> dict:
    return {"pipeline": name, "records": records, "partitions": partitions, "wall_s": wall, "peak_rss_mb": 100.0,
            "cpu_s": 5.0, "repeat": 0,
            "inner": {"job_seconds": wall / 2, "spark_seconds": wall / 2, "plan_s": 0.5, "run_s": wall - 1,
                      "commit_s": 0.5, "session_seconds": 1.0},
            "records_per_s": records / wall}


def _report(tmp_path: Path, names: tuple[str, ...]) -> str:
    walls = {LOCKSTEP_CONNECT: 5.0, LOCKSTEP: 10.0, SPARK: 12.0, RAW: 20.0, FLINK_SQL: 8.0, QUIX: 40.0}
    runs = [_run(n, walls[n]) for n in names]
    res = Results(settings={"records": 1000, "partitions": 4, "repeats": 1, "partition_records": 1000},
                  environment={"cpus": 2, "pyflink": "2.3.0", "flink_kafka_connector": "5.0.0-2.2",
                               "quixstreams": "3.28.1"},
                  main=runs, sizes=[{**r, "reused": True} for r in runs], seconds=60.0)
    path = tmp_path / "BENCH.md"
    report.write(res, path)
    return path.read_text()


def test_report_compares_lockstep_with_each_peer(tmp_path: Path) -> None:
    text = _report(tmp_path, PIPELINES + (FLINK_SQL, QUIX))
    ratios = text.split("### Ratios", 1)[1].split("\n## ", 1)[0]

    def row(mode: str, peer: str) -> str:
        return next(line for line in ratios.splitlines() if line.startswith(f"| Lockstep, {mode} (exactly-once) | {peer} |"))

    # Connect mode (5 s) is held to the issue's targets; spark-submit (10 s) is shown against the peers too.
    assert "1.60×" in row("Spark Connect", "Flink SQL exactly-once") and "met: ≥ 1.0×" in row("Spark Connect", "Flink SQL exactly-once")
    assert "2.40×" in row("Spark Connect", "Spark at-least-once") and "met: ≥ 1.2×" in row("Spark Connect", "Spark at-least-once")
    flink = row("spark-submit", "Flink SQL exactly-once")
    quix = row("spark-submit", "Quix Streams exactly-once")
    assert "0.80×" in flink and "4.00×" in quix
    submit_vs_spark = row("spark-submit", "Spark at-least-once")
    assert "1.20×" in submit_vs_spark and "met: ≥ 1.0×" in submit_vs_spark
    sizes = text.split("## Scaling with input size", 1)[1].split("\n## ", 1)[0]
    assert "Flink SQL exactly-once rec/s (wall s)" in sizes and "Quix Streams exactly-once rec/s (wall s)" in sizes
    assert "| PyFlink (peer) | 2.3.0 |" in text and "| quixstreams (peer) | 3.28.1 |" in text
    assert "Exactly-once peers" in text and "flink-sql-connector-kafka` 5.0.0-2.2" in text


def test_report_without_peers_has_no_peer_rows_or_columns(tmp_path: Path) -> None:
    # Its links to the windowed race, the join race and the freshness race (measured apart) name them.
    before, joins, after = _report(tmp_path, PIPELINES).replace(report.KEYED_STATE, "").partition("## Joins")
    assert joins
    formats, fresh, rest = after.split("## Formats", 1)[1].partition("## Freshness under sustained load")
    assert fresh
    text = before + formats + rest.split("\n## ", 1)[1]
    assert "Flink SQL" not in text and "Quix" not in text


def test_every_competitor_has_a_command_and_the_peers_join_only_when_on(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from lockstep_bench import results

    platform = SimpleNamespace(kafka=SimpleNamespace(bootstrap="h:1"))
    on = runner.Bench(runner.Settings(), platform, tmp_path)
    names = {getattr(results, n) for n in ("LOCKSTEP", "LOCKSTEP_CONNECT", "LOCKSTEP_CONNECT_IDENTITY",
                                           "LOCKSTEP_PYTHON", "SPARK", "RAW", "FLINK_SQL", "QUIX", "PRODUCER_PERF",
                                           "CONSUMER_PERF")}
    assert set(on.commands) == names
    assert on.competitors() == (LOCKSTEP_CONNECT, LOCKSTEP, SPARK, RAW, FLINK_SQL, QUIX)
    assert runner.Bench(runner.Settings(peers=False), platform, tmp_path).competitors() == PIPELINES


def test_peer_commands_run_the_jobs_with_their_own_venvs(tmp_path: Path) -> None:
    ends = {0: 10, 1: 20}
    flink = peers.flink_command(tmp_path, Path("/repo"), "h:1", "in", "out", ends)
    assert flink.argv[:2] == [str(tmp_path / "bench/flink/venv/bin/python"), "/repo/include/lockstep_bench/jobs/flink_sql_job.py"]
    assert flink.argv[flink.argv.index("--ends") + 1] == '{"0": 10, "1": 20}'
    assert flink.argv[flink.argv.index("--connector-jar") + 1].endswith(f"-{peers.FLINK_KAFKA_CONNECTOR}.jar")
    quix = peers.quix_command(tmp_path, Path("/repo"), "h:1", "in", "out", ends)
    assert quix.argv[:2] == [str(tmp_path / "bench/quix/venv/bin/python"), "/repo/include/lockstep_bench/jobs/quix_job.py"]
    assert flink.env["PYTHONPATH"] == quix.env["PYTHONPATH"] == "/repo/include"


def test_report_holds_partitions_and_the_large_input_to_issue_28s_targets(tmp_path: Path) -> None:
    """The partition table's last count against 8 partitions (≥ 0.8×) with Lockstep's steps and
    transactions, and the large input's Lockstep against kafka-producer-perf-test (≥ 0.5×)."""
    from lockstep_bench.results import LOCKSTEP_CONNECT_IDENTITY, PRODUCER_PERF

    def lk(partitions: int, wall: float, records: int = 1_000_000, name: str = LOCKSTEP_CONNECT) -> dict:
        run = _run(name, wall, records=records, partitions=partitions)
        run["inner"]["transactions"] = 2
        return run

    partitions = [lk(8, 8.0), lk(1024, 9.5), _run(RAW, 9.0, records=1_000_000, partitions=1024)]
    large = [lk(8, 50.0, 10_000_000), lk(8, 30.0, 10_000_000, LOCKSTEP_CONNECT_IDENTITY),
             _run(PRODUCER_PERF, 40.0, records=10_000_000, partitions=8)]
    res = Results(settings={"records": 1000, "partitions": 8, "repeats": 1, "partition_records": 1_000_000},
                  environment={"cpus": 2}, main=[_run(n, 5.0) for n in PIPELINES], partitions=partitions,
                  large=large, seconds=60.0)
    path = tmp_path / "BENCH.md"
    report.write(res, path)
    text = path.read_text()
    scaling = text.split("## Scaling with partitions", 1)[1].split("\n## ", 1)[0]
    assert "| 1,024 | 105,263 (9.5) | 0.50 | 8.50 | 0.50 | 2 |" in scaling
    assert "One run each: 1,024 partitions at 0.84× the throughput at 8, through 2 transactions" in scaling
    assert "partitions, alternated" not in scaling and "Target" not in scaling  # no rounds ran: no verdict
    big = text.split("## A large input: 10,000,000 records", 1)[1].split("\n## ", 1)[0]
    assert "Lockstep with the benchmark transform ≥ 0.5× kafka-producer-perf-test's records/s — met: 0.80×" in big
    assert "Lockstep's path (identity transform) ≥ 0.5× kafka-producer-perf-test's records/s — met: 1.33×" in big
    assert "| Lockstep, Spark Connect, identity transform (exactly-once) | 333,333 | 30.0 |" in big
    assert "takes the identity run's 333,333 records/s to 200,000: 0.60×" in big


def test_the_alternated_partition_rounds_are_shown_pair_by_pair_and_judged_on_their_median(tmp_path: Path) -> None:
    """Issue 44: 1,024 partitions against 8 in alternated rounds, each pair a row with its ratio, the
    target (issue 69: ≥ 0.9×) on the median of the rounds; a round with one count missing is left out."""
    def lk(partitions: int, wall: float, rnd: int) -> dict:
        run = _run(LOCKSTEP_CONNECT, wall, records=1_000_000, partitions=partitions)
        run["repeat"], run["sink"] = rnd, {"exact": True}
        return run

    pairs = [lk(8, 8.0, 0), lk(1024, 10.0, 0), lk(1024, 8.0, 1), lk(8, 8.0, 1), lk(8, 7.0, 2), lk(1024, 14.0, 2),
             lk(8, 9.0, 3)]
    assert [(r, round(q, 2)) for r, _, _, q in report.partition_rounds(pairs)] == [(0, 0.8), (1, 1.0), (2, 0.5)]
    res = Results(settings={"records": 1000, "partitions": 8, "repeats": 1, "partition_records": 1_000_000},
                  environment={"cpus": 2}, main=[_run(n, 5.0) for n in PIPELINES], partition_pairs=pairs, seconds=60.0)
    path = tmp_path / "BENCH.md"
    report.write(res, path)
    section = path.read_text().split("### 8 against 1,024 partitions, alternated", 1)[1].split("\n## ", 1)[0]
    assert "| 1 | 125,000 (8.0) | 0.50 / 7.00 / 0.50 | 5 | exact | 100,000 (10.0) | 0.50 / 9.00 / 0.50 | 5 | exact " \
           "| 0.80× |" in section
    assert "3 rounds" in section
    assert "≥ 0.9× the throughput at 8, median of the rounds — not met: 0.80× (rounds 0.50–1.00×)" in section
    pairs[1] = lk(1024, 8.8, 0)
    report.write(res, path)
    assert "≥ 0.9× the throughput at 8, median of the rounds — met: 0.91× (rounds 0.50–1.00×)" in path.read_text()
