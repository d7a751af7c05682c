"""The keyed-state benchmark's Flink side, its pure parts (``lockstep_bench.flink_restore``, the SQL and settings
of ``flink_sql``, the command of ``peers``) and the job's stdin/stdout protocol against a stand-in script.
No Flink, no Kafka here."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from lockstep_bench import flink_restore, flink_sql, peers
from lockstep_bench.pipelines import Command
from lockstep_examples.bench import FIELDS


# ---- the SQL ---------------------------------------------------------------------------------------------
def test_the_source_is_unbounded_from_the_earliest_offsets_read_committed_in_the_group() -> None:
    src = flink_sql.dedup_source_table("h:1", "in", "g")
    assert "'scan.startup.mode' = 'earliest-offset'" in src and "'properties.group.id' = 'g'" in src
    assert "'properties.isolation.level' = 'read_committed'" in src and "'topic' = 'in'" in src
    assert "scan.bounded" not in src  # a bounded job's last checkpoint finishes its splits: a restore reads nothing
    assert "`proc_time` AS PROCTIME()" in src
    for name, _ in FIELDS:
        assert f"`{name}`" in src


def test_the_sink_is_exactly_once_like_every_flink_jobs() -> None:
    sink = flink_sql.dedup_sink_table("h:1", "out", "tx-1")
    for key, value in flink_sql.sink_options("h:1", "out", "tx-1").items():
        assert f"'{key}' = '{value}'" in sink
    assert "'sink.delivery-guarantee' = 'exactly-once'" in sink and "'sink.transactional-id-prefix' = 'tx-1'" in sink
    assert "'properties.transaction.timeout.ms' = '600000'" in sink and "'format' = 'json'" in sink
    assert "proc_time" not in sink
    # The races' sinks are built from the same options.
    assert "'sink.transactional-id-prefix' = 'tx-1'" in flink_sql.sink_table("h:1", "out", "tx-1")
    assert "'sink.transactional-id-prefix' = 'tx-1'" in flink_sql.window_sink_table("h:1", "out", "tx-1")


def test_the_insert_keeps_the_first_row_of_each_order_id_on_processing_time() -> None:
    ddl, insert = flink_sql.dedup_statements("h:1", "in", "out", "tx", "g")
    assert [d.split("(")[0] for d in ddl] == ["CREATE TEMPORARY TABLE src ", "CREATE TEMPORARY TABLE sink "]
    assert "ROW_NUMBER() OVER (PARTITION BY `order_id` ORDER BY `proc_time` ASC) AS `row_num`" in insert
    assert insert.startswith("INSERT INTO sink SELECT `order_id`, ") and insert.endswith("WHERE `row_num` = 1")


def test_the_settings_keep_rocksdb_incremental_checkpoints_when_cancelled_and_the_dedups_ttl() -> None:
    conf = flink_sql.restore_configuration("file:///s/checkpoints", 1.5, 2, 41234)
    assert conf["state.backend.type"] == "rocksdb" and conf["execution.checkpointing.incremental"] == "true"
    assert conf["execution.checkpointing.externalized-checkpoint-retention"] == "RETAIN_ON_CANCELLATION"
    assert conf["execution.checkpointing.dir"] == "file:///s/checkpoints"
    assert conf["execution.checkpointing.interval"] == "1500ms" and conf["parallelism.default"] == "2"
    assert conf["table.exec.state.ttl"] == "400 d" and conf["rest.port"] == conf["rest.bind-port"] == "41234"
    assert "execution.state-recovery.path" not in conf
    assert conf["taskmanager.memory.managed.size"] == flink_sql.MANAGED_MEMORY  # RocksDB's, not the 128m default


def test_a_restore_names_the_checkpoint_and_the_claim_mode() -> None:
    conf = flink_sql.restore_configuration("file:///s/c", 1, 2, 1, restore_from="file:///s/c/j/chk-7")
    assert conf["execution.state-recovery.path"] == "file:///s/c/j/chk-7"
    assert conf["execution.state-recovery.claim-mode"] == "CLAIM"
    assert flink_sql.restore_configuration("f", 1, 2, 1, "r", "NO_CLAIM")["execution.state-recovery.claim-mode"] == \
        "NO_CLAIM"
    with pytest.raises(ValueError):
        flink_sql.restore_configuration("f", 1, 2, 1, "r", "LEGACY")


def test_the_command_runs_the_job_with_flinks_venv_and_restores_only_when_told(tmp_path: Path) -> None:
    kw = dict(bootstrap="h:1", source="in", sink="out", group="g", partitions=4, state_dir=tmp_path / "s",
              checkpoint_s=1.0, transactional_id_prefix="tx")
    first = peers.flink_restore_command(tmp_path, Path("/repo"), **kw)
    assert first.argv[:2] == [str(tmp_path / "bench/flink/venv/bin/python"),
                              "/repo/include/lockstep_bench/jobs/flink_restore_job.py"]
    assert first.argv[first.argv.index("--group") + 1] == "g" and "--restore-from" not in first.argv
    assert first.argv[first.argv.index("--state-dir") + 1] == str(tmp_path / "s")
    assert first.argv[first.argv.index("--transactional-id-prefix") + 1] == "tx"
    assert first.env["PYTHONPATH"] == "/repo/include"
    again = peers.flink_restore_command(tmp_path, Path("/repo"), **kw, restore_from="/s/j/chk-3")
    assert again.argv[again.argv.index("--restore-from") + 1] == "/s/j/chk-3"
    assert again.argv[again.argv.index("--claim-mode") + 1] == "CLAIM"


def test_checkpoints_on_s3_load_the_s3_plugin_and_configure_its_endpoint(tmp_path: Path) -> None:
    kw = dict(bootstrap="h:1", source="in", sink="out", group="g", partitions=4, state_dir=tmp_path / "s",
              checkpoint_s=1.0, transactional_id_prefix="tx")
    local = peers.flink_restore_command(tmp_path, Path("/repo"), **kw)
    assert "--checkpoints" not in local.argv
    on_s3 = peers.flink_restore_command(tmp_path, Path("/repo"), **kw, checkpoints="s3://b/flink/k-1",
                                        restore_from="s3://b/flink/k-1/j/chk-3")
    assert on_s3.argv[on_s3.argv.index("--checkpoints") + 1] == "s3://b/flink/k-1"
    assert on_s3.argv[on_s3.argv.index("--restore-from") + 1] == "s3://b/flink/k-1/j/chk-3"
    # The plugin's jar is one of the peer's downloads, in a folder of its own under PyFlink's plugins folder.
    plugin = dict(peers.FLINK.jars)[peers.FLINK_S3_PLUGIN]
    assert plugin.endswith(f"/flink-s3-fs-hadoop/{peers.FLINK_VERSION}/flink-s3-fs-hadoop-{peers.FLINK_VERSION}.jar")
    assert Path(peers.FLINK_S3_PLUGIN).parent.parent.as_posix().endswith("site-packages/pyflink/plugins")
    s3 = flink_sql.s3_configuration("http://127.0.0.1:9000", "ak", "sk")
    assert s3 == {"s3.endpoint": "http://127.0.0.1:9000", "s3.endpoint.region": "us-east-1",
                  "s3.path.style.access": "true", "s3.access-key": "ak", "s3.secret-key": "sk"}


def test_a_chain_on_s3_checkpoints_there_and_counts_its_bytes_there(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from lockstep_bench import workloads

    seen: list[dict] = []

    def run_phase(command: Command, *args: object, **kwargs: object) -> dict:
        seen.append(json.loads(command.argv[1]))
        n = len(seen)
        return {"seconds": 1.0, "from_job_started_s": 1.0, "offsets_seconds": 1.0, "clock": "outputs committed",
                "result": {"job_id": f"j{n}", "checkpoint": f"s3://b/x/j{n}/chk-{n}", "checkpoint_bytes": None,
                           "all_checkpoints_bytes": None}}

    monkeypatch.setattr(flink_restore, "run_phase", run_phase)
    monkeypatch.setattr(flink_restore, "scan_committed", lambda *a, **k: (0, []))
    monkeypatch.setattr(workloads, "end_offsets", lambda *a, **k: {0: 0})
    monkeypatch.setattr(workloads, "create_topic", lambda *a, **k: None)
    monkeypatch.setattr(workloads, "delete_topic", lambda *a, **k: None)
    command = lambda **kw: Command(["job", json.dumps({k: kw.get(k) for k in ("checkpoints", "restore_from")})], {})
    counted: list[str] = []
    out = flink_restore.measure("h:1", "t", keys=2, checkpoints=0, new_keys=1, indices=[[1, 5]],
                                produce=lambda orders: None, partitions=1, work_dir=tmp_path, log=lambda _m: None,
                                command=command, on_s3="s3://b/flink/", count_bytes=lambda uri: counted.append(uri) or 7)
    where = seen[0]["checkpoints"]
    assert where.startswith("s3://b/flink/2-") and seen[1] == {"checkpoints": where, "restore_from": "s3://b/x/j1/chk-1"}
    assert out["storage"] == "s3" and out["checkpoints"] == where
    assert counted == [f"{where}/j1/", f"{where}/", f"{where}/j2/", f"{where}/"]
    assert out["buildup"]["result"]["checkpoint_bytes"] == 7 and out["restores"][0]["checkpoint_bytes"] == 7


# ---- the checks ------------------------------------------------------------------------------------------
def test_offsets_reach_the_ends_only_on_every_partition_with_records() -> None:
    ends = {0: 10, 1: 0, 2: 5}
    assert flink_restore.reached({0: 10, 1: None, 2: 5}, ends)
    assert not flink_restore.reached({0: 10, 1: None, 2: 4}, ends)
    assert not flink_restore.reached({0: 10, 2: None}, ends)


@pytest.mark.parametrize("new_keys, partitions", [(100, 4), (4, 4), (3, 4), (0, 2)])
def test_the_new_keys_are_every_partitions_last_records_when_there_are_enough(new_keys: int, partitions: int) -> None:
    from lockstep_bench.keyed_state import checkpoint_indices

    indices = checkpoint_indices(1_000, 500, new_keys, 2, 0.1)
    last = {n % partitions: i for n, i in enumerate(indices)}  # keyed_state.produce's placement, in order
    new = set(indices[len(indices) - new_keys:])
    assert flink_restore.new_keys_last_everywhere(new_keys, partitions) == all(i in new for i in last.values())


def test_flink_emits_one_order_per_distinct_order_id() -> None:
    from lockstep_bench.keyed_state import checkpoint_indices

    keys, records, new = 1_000, 500, 20
    topic = list(range(keys)) + [i for n in range(3) for i in checkpoint_indices(keys, records, new, n, 0.1)]
    assert flink_restore.expected_outputs(keys, 3, new) == len(set(topic)) == 1_060


def test_a_restore_that_emits_the_new_keys_alone_is_exact_and_a_lost_state_is_caught() -> None:
    new, held = ["o10", "o11"], ["o1", "o2", "o3"]
    assert flink_restore.verdict(["o11", "o10"], new, held)["exact"]
    lost = flink_restore.verdict(["o1", "o2", "o3", "o10", "o11"], new, held)
    assert not lost["exact"] and lost["repeats_emitted"] == 3 and lost["emitted"] == 5
    twice = flink_restore.verdict(["o10", "o10", "o11"], new, held)
    assert not twice["exact"] and twice["duplicated"] == 1
    short = flink_restore.verdict(["o10"], new, held)
    assert not short["exact"] and short["missing"] == 1
    assert flink_restore.verdict(["o10", "o11", "o99"], new, held)["unknown"] == 1


# ---- the job's protocol ----------------------------------------------------------------------------------
FAKE_JOB = textwrap.dedent("""
    import json, sys
    print("noise before", flush=True)
    print("JOB_STARTED " + json.dumps({"job_id": "j1", "session_seconds": 0.5, "started_seconds": 0.7,
                                        "rest_port": 1}), flush=True)
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    print("BENCH_RESULT " + json.dumps({"job_id": "j1", "checkpoint": "/x/chk-3"}), flush=True)
""")


def _fake(tmp_path: Path, script: str) -> Command:
    path = tmp_path / "job.py"
    path.write_text(script)
    return Command([sys.executable, str(path)], {}, None)


def test_the_job_is_started_told_to_stop_and_read(tmp_path: Path) -> None:
    job = flink_restore.FlinkJob(_fake(tmp_path, FAKE_JOB), tmp_path / "logs" / "job.log")
    try:
        assert job.wait_started(timeout_s=30)["job_id"] == "j1" and job.job_started is not None
        assert job.stop(timeout_s=30) == {"job_id": "j1", "checkpoint": "/x/chk-3"}
        assert job.proc.returncode == 0
    finally:
        job.close()


def test_a_job_that_dies_before_it_starts_is_a_failure_with_its_output(tmp_path: Path) -> None:
    from lockstep_bench.measure import RunFailed

    job = flink_restore.FlinkJob(_fake(tmp_path, "import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)\n"),
                                 tmp_path / "job.log")
    try:
        with pytest.raises(RunFailed, match="exit code 3") as failed:
            job.wait_started(timeout_s=30)
        assert "boom" in str(failed.value)
    finally:
        job.close()


# ---- repeated restores -----------------------------------------------------------------------------------
def test_each_restore_restores_the_checkpoint_the_one_before_retained_over_its_own_new_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three restores: each produces its own orders first, restores the previous job's retained checkpoint
    (the build-up's for the first), and is checked against its own new keys only."""
    from lockstep_bench import workloads

    topic_ends = {0: 100}
    sink: list[str] = ["o1", "o2"]  # the build-up's output
    phases: list[tuple[str | None, str, dict]] = []

    def produce(orders: list[int]) -> None:
        topic_ends[0] += len(orders)
        sink.extend(f"o{i}" for i in orders[-2:])  # the job's output of the new keys, once each

    def run_phase(command: Command, log_file: Path, bootstrap: str, group: str, topic: str, sink_topic: str,
                  ends: dict, timeout_s: float, log: object, label: str, outputs: object = None) -> dict:
        restore_from = command.argv[command.argv.index("--restore-from") + 1] if "--restore-from" in command.argv \
            else None
        phases.append((restore_from, label, dict(ends)))
        return {"seconds": 10.0, "from_job_started_s": 4.0, "offsets_seconds": 12.0, "clock": "outputs committed",
                "job_started_s": 6.0, "cpu_s": 9.0, "peak_rss_mb": 1.0,
                "result": {"checkpoint": f"/c/chk-{len(phases)}", "checkpoint_bytes": 1, "all_checkpoints_bytes": 2}}

    def end_offsets(bootstrap: str, topic: str, committed: bool = True) -> dict[int, int]:
        return dict(topic_ends) if topic == "t" else {0: len(sink)}

    def scan(bootstrap: str, topic: str, starts: dict, ends: dict, value: object = None) -> tuple[int, list]:
        part = sink[starts.get(0, 0):ends[0]]
        return len(part), part

    monkeypatch.setattr(flink_restore, "run_phase", run_phase)
    monkeypatch.setattr(flink_restore, "scan_committed", scan)
    monkeypatch.setattr(workloads, "end_offsets", end_offsets)
    monkeypatch.setattr(workloads, "create_topic", lambda *a, **k: None)
    monkeypatch.setattr(workloads, "delete_topic", lambda *a, **k: None)
    command = lambda **kw: Command(["job", *(["--restore-from", kw["restore_from"]] if kw["restore_from"] else [])],
                                   {})
    batches = [[1, 2, 10, 11], [1, 2, 12, 13], [2, 1, 14, 15]]  # two repeats of held keys, then two new keys
    out = flink_restore.measure("h:1", "t", keys=2, checkpoints=0, new_keys=2, indices=batches, produce=produce,
                                partitions=1, work_dir=tmp_path, log=lambda _m: None, command=command)
    assert [(source, label) for source, label, _ in phases] == [
        (None, "build-up"), ("/c/chk-1", "restore 1"), ("/c/chk-2", "restore 2"), ("/c/chk-3", "restore 3")]
    # Each restore waits for its own records: the topic's ends after its batch.
    assert [ends[0] for _, _, ends in phases] == [100, 104, 108, 112]
    restores = out["restores"]
    assert [r["restored_from"] for r in restores] == ["/c/chk-1", "/c/chk-2", "/c/chk-3"]
    assert [r["records_in"] for r in restores] == [4, 4, 4]
    assert all(r["check"]["exact"] and r["check"]["emitted"] == 2 for r in restores), restores


def test_a_restore_that_retained_no_checkpoint_stops_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lockstep_bench import workloads
    from lockstep_bench.measure import RunFailed

    def run_phase(command: Command, *args: object, **kwargs: object) -> dict:
        restoring = "--restore-from" in command.argv
        return {"seconds": 1.0, "from_job_started_s": 1.0, "offsets_seconds": 1.0, "clock": "outputs committed",
                "result": {"checkpoint": None if restoring else "/c/chk-1", "all_checkpoints_bytes": 1}}

    monkeypatch.setattr(flink_restore, "run_phase", run_phase)
    monkeypatch.setattr(flink_restore, "scan_committed", lambda *a, **k: (0, []))
    monkeypatch.setattr(workloads, "end_offsets", lambda *a, **k: {0: 0})
    monkeypatch.setattr(workloads, "create_topic", lambda *a, **k: None)
    monkeypatch.setattr(workloads, "delete_topic", lambda *a, **k: None)
    command = lambda **kw: Command(["job", *(["--restore-from", kw["restore_from"]] if kw["restore_from"] else [])],
                                   {})
    with pytest.raises(RunFailed, match="restore 1 retained no completed checkpoint"):
        flink_restore.measure("h:1", "t", keys=2, checkpoints=0, new_keys=1, indices=[[1, 5], [1, 6]],
                              produce=lambda orders: None, partitions=1, work_dir=tmp_path, log=lambda _m: None,
                              command=command)
