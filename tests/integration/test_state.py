"""Keyed state on real services: event-time windows and dedup whose output and state are exactly
once through a crash at every failpoint, in both run modes, with the state in S3 (docs/state.md)."""
from __future__ import annotations

import json
import os
from collections import Counter

import pytest
import yaml
from confluent_kafka import Producer

from lockstep.model.checkpoint import CheckpointStatus
from lockstep.model.failpoints import CRASH_EXIT_CODE, FAILPOINTS, ICEBERG_FAILPOINTS
from lockstep.model.output_contract import ERROR_HEADER, SOURCE_OFFSET, WRITER_FAILPOINTS
from lockstep_examples.orders import PARSED_OFFSET_HEADER

from ..support.data import read_committed
from .engine_helpers import crash_at, lockstep, make_pipeline, open_transactions, run, store, verify

T0 = 1_700_000_000  # epoch seconds of order 0; order i is created at T0 + i
SIZE_S = 10
CUSTOMERS = 5


def timed_order(i: int, created_at: int | None = None) -> bytes:
    if i % 10 == 7:
        return f"not json {i}".encode()
    return json.dumps({"order_id": f"o{i}", "customer": f"c{i % CUSTOMERS}", "amount": (i % 13) + 0.25,
                       "created_at": T0 + i if created_at is None else created_at}).encode()


def produce(pipeline, indexes, created_at: int | None = None, partitions: int = 2) -> None:
    producer = Producer({"bootstrap.servers": pipeline.bootstrap, "linger.ms": 5})
    for i in indexes:
        producer.produce(pipeline.source, timed_order(i, created_at), partition=i % partitions)
    producer.flush(30)


def stateful(pipeline, state: dict, transform: str = "lockstep_examples.orders:parse") -> None:
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["transform"] = transform
    doc["state"] = state
    pipeline.spec_path.write_text(yaml.safe_dump(doc))


WINDOW = {"key_groups": 8, "event_time": {"column": "created_at", "out_of_orderness": "2s"},
          "window": {"key": "customer", "size": f"{SIZE_S}s",
                     "aggregates": {"orders": "count(*)", "amount_cents": "sum(CAST(round(amount * 100) AS BIGINT))"}}}


def sliding(slide_s: int, keep_rows: bool = False) -> dict:
    return {**WINDOW, "window": {**WINDOW["window"], "slide": f"{slide_s}s", **({"keep_rows": True} if keep_rows else {})}}


def starts(t: int, slide_s: int) -> list[int]:
    """The starts of the windows (size SIZE_S, every slide_s seconds) that hold event time t."""
    last = t - t % slide_s
    return list(range(last - SIZE_S + slide_s, last + 1, slide_s))


def expected_windows(produced: list[int], watermark_ms: int, slide_s: int = SIZE_S) -> dict:
    """(customer, window start) -> (orders, amount_cents) of every window the watermark has passed."""
    windows: dict[tuple[str, int], list[int]] = {}
    for i in produced:
        doc = json.loads(timed_order(i)) if i % 10 != 7 else None
        if doc is None:
            continue
        for start in starts(doc["created_at"], slide_s):
            if (start + SIZE_S) * 1000 <= watermark_ms:
                windows.setdefault((doc["customer"], start), []).append(round(doc["amount"] * 100))
    return {k: (len(v), sum(v)) for k, v in windows.items()}


def window_outputs(pipeline, produced: list[int], slide_s: int = SIZE_S) -> list[tuple[tuple[str, int], tuple[int, int]]]:
    """(customer, window start) -> (orders, amount_cents) of every output; each output's provenance
    must name the latest order its window counted (order i is offset i // 2 of partition i % 2)."""
    from datetime import datetime

    latest: dict[tuple[str, int], int] = {}
    for i in produced:
        if i % 10 != 7:
            for start in starts(T0 + i, slide_s):
                key = (f"c{i % CUSTOMERS}", start)
                latest[key] = max(latest.get(key, i), i)
    found = []
    for record in read_committed(pipeline.bootstrap, pipeline.sink):
        doc = json.loads(record.value())
        start = int(datetime.fromisoformat(doc["window_start"].replace("Z", "+00:00")).timestamp())
        assert doc["window_end"].endswith("Z")
        assert record.key().decode() == doc["customer"]
        headers = dict(record.headers())
        source = (int(headers["lockstep.source.partition"]), int(headers["lockstep.source.offset"]))
        newest = latest[(doc["customer"], start)]
        assert source == (newest % 2, newest // 2), (doc, source, newest)
        found.append(((doc["customer"], start), (doc["orders"], doc["amount_cents"])))
    return found


def own_headers(records) -> list[tuple[bytes | None, bytes | None]]:
    """Per record, (the `parse_with_headers` header, its provenance offset): equal when the record
    carries the header of the input record it came from."""
    return [(dict(m.headers() or []).get(PARSED_OFFSET_HEADER), dict(m.headers() or []).get(SOURCE_OFFSET))
            for m in records]


def dead_letter_errors(pipeline) -> Counter:
    return Counter(dict(m.headers() or []).get(ERROR_HEADER, b"").decode()
                   for m in read_committed(pipeline.bootstrap, pipeline.dead_letters))


# Connect mode crashes the process that plans, drives and commits at each of those failpoints. A
# writer failpoint set to crash halts the JVM its task runs in, so it runs in submit mode (in connect
# mode it would halt the shared server): one of them here, mid-transaction, with the Python writer.
# The writers write a stateful checkpoint's output as any other (test_failpoints.py crashes each).
# Sliding windows (10 s every 5 s) in connect mode, their state as partial aggregates (a count and a sum merge),
# tumbling ones in submit mode with the windows' rows kept (keep_rows).
@pytest.mark.parametrize("mode,writer,points,slide_s,keep_rows", [
    ("connect", "jvm", [f for f in FAILPOINTS if f not in WRITER_FAILPOINTS and f not in ICEBERG_FAILPOINTS], 5, False),
    ("submit", "python", ["job.mid_produce"], SIZE_S, True),
], ids=["connect-jvm-sliding-partials", "submit-python-tumbling-rows"])
def test_windows_are_exactly_once_through_a_crash_at_every_failpoint(mode, writer, points, slide_s, keep_rows, tmp_path,
                                                                     bootstrap, unique, spark_connect):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=100, writer=writer, mode=mode)
    stateful(pipeline, sliding(slide_s, keep_rows))
    produced: list[int] = []
    for n, point in enumerate(points):
        batch = range(40 * n, 40 * (n + 1))
        produce(pipeline, batch)
        produced += batch
        crash_at(pipeline, point)  # the failpoint itself fired, not another failure with its exit code
    produce(pipeline, range(40 * len(points), 40 * len(points) + 40))
    produced += range(40 * len(points), 40 * len(points) + 40)
    late = 3 if mode == "connect" else 0
    if late:  # orders of windows that fired checkpoints ago: late, to the dead-letter topic, never counted
        produce(pipeline, [1, 2, 3], created_at=T0 + 1)
    # One checkpoint reads all that is left (a spark-submit costs 20-30 s); in connect mode a second,
    # without records, carries the state forward.
    done = run(pipeline, "--checkpoints", "2" if mode == "connect" else "1", "--max-records", "1000")
    assert done.returncode == 0, done.stderr[-3000:]

    s = store(pipeline)
    statuses = {i: s.view(i).status for i in s.checkpoint_ids()}
    assert CheckpointStatus.CLAIMED not in statuses.values() and CheckpointStatus.PREPARED not in statuses.values()
    latest = s.latest_completed()
    manifest = latest.completed.state
    assert manifest is not None and manifest.operator == "window" and manifest.key_groups == 8
    newest = [max(i for i in produced if i % 2 == p and i % 10 != 7) for p in (0, 1)]
    assert manifest.watermark_ms == (T0 + min(newest)) * 1000 - 2000  # the slower partition's, less the bound
    assert s.view(latest.checkpoint_id).claim.ranges[0].end > 0
    found = window_outputs(pipeline, produced, slide_s)
    counted = Counter(key for key, _ in found)
    assert [key for key, n in counted.items() if n > 1] == []  # no (key, window) emitted twice
    expected = expected_windows(produced, manifest.watermark_ms, slide_s)
    differ = {k: (dict(found).get(k), expected.get(k)) for k in set(dict(found)) | set(expected)
              if dict(found).get(k) != expected.get(k)}
    assert not differ, (sorted(differ.items())[:20], [(i, st.value) for i, st in statuses.items()])
    report = verify(pipeline)  # lockstep verify recomputes the windows from the whole input, and agrees
    assert report["ok"] and report["complete"] and report["expected_outputs"] == len(expected), report
    assert (report["lost"], report["duplicated"], report["unexpected"], report["wrong"], report["late"]) == (0, 0, 0, 0, late)
    # The committed state (each key group's chain of base and deltas, merged) is what the recompute leaves open.
    assert report["state_mismatched"] == 0 and report["state_rows"] == manifest.rows, report
    if mode != "connect":
        assert open_transactions(pipeline) == []
        return  # verify's own failure is checked once, in connect mode (in submit mode it starts a JVM)
    # The check can fail: a window's output written a second time is found.
    first = read_committed(pipeline.bootstrap, pipeline.sink)[0]
    again = Producer({"bootstrap.servers": pipeline.bootstrap})
    again.produce(pipeline.sink, first.value(), first.key(), headers=first.headers())
    again.flush(30)
    caught = verify(pipeline)
    assert not caught["ok"] and caught["duplicated"] == 1 and caught["lost"] == 0, caught
    assert dead_letter_errors(pipeline) == Counter({"not a JSON order with order_id": len(produced) // 10, "late": late})
    # A late order goes to the dead-letter topic as it came (the windows' cached input keeps only such values).
    late_values = [json.loads(m.value()) for m in read_committed(pipeline.bootstrap, pipeline.dead_letters)
                   if dict(m.headers() or []).get(ERROR_HEADER) == b"late"]
    assert sorted(doc["order_id"] for doc in late_values) == ["o1", "o2", "o3"]
    assert {doc["created_at"] for doc in late_values} == {T0 + 1}
    # The windows still open are the state: a row per customer and open window (their partial aggregates, which
    # verify compared above with its recompute), nothing else.
    open_windows = {(i % CUSTOMERS, start) for i in produced if i % 10 != 7 for start in starts(T0 + i, slide_s)
                    if (start + SIZE_S) * 1000 > manifest.watermark_ms}
    assert manifest.rows == len(open_windows) > 0
    assert "__ls_start" in manifest.columns and any(c.startswith("__ls_agg_orders_") for c in manifest.columns)
    # State files: the latest state's, and none of a checkpoint that never completed.
    files = s.state_files()
    assert set(manifest.all_files) <= set(files.listing())
    aborted = {i for i, st in statuses.items() if st is CheckpointStatus.ABORTED}
    assert not [k for k in files.listing() if files.checkpoint_of(k) in aborted]
    assert open_transactions(pipeline) == []


def test_a_state_of_rows_becomes_partials_and_partials_do_not_become_rows_again(tmp_path, bootstrap, unique,
                                                                                 spark_connect):
    """A window's state written as rows (keep_rows, or an earlier version) turns into partial aggregates at the
    first checkpoint that may keep them, with every window exact across the change; going back is refused,
    naming the way out, before anything is written."""
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=1000, mode="connect")
    stateful(pipeline, {**WINDOW, "window": {**WINDOW["window"], "keep_rows": True}})
    produce(pipeline, range(0, 60))
    assert run(pipeline, "--checkpoints", "1").returncode == 0
    rows_state = store(pipeline).latest_completed().completed.state
    assert rows_state is not None and "__ls_start" not in rows_state.columns and rows_state.rows > 0
    stateful(pipeline, WINDOW)  # every aggregate merges: partials from here on
    produce(pipeline, range(60, 130))
    assert run(pipeline, "--checkpoints", "1").returncode == 0
    s = store(pipeline)
    manifest = s.latest_completed().completed.state
    assert manifest is not None and "__ls_start" in manifest.columns
    produced = list(range(130))
    found = window_outputs(pipeline, produced)
    assert Counter(key for key, _ in found).most_common(1)[0][1] == 1  # no window twice
    assert dict(found) == expected_windows(produced, manifest.watermark_ms)
    report = verify(pipeline)
    assert report["ok"] and report["state_mismatched"] == 0 and report["state_rows"] == manifest.rows > 0, report
    completed = s.latest_completed().checkpoint_id
    stateful(pipeline, {**WINDOW, "window": {**WINDOW["window"], "keep_rows": True}})
    produce(pipeline, range(130, 150))
    refused = run(pipeline, "--checkpoints", "1")
    assert refused.returncode != 0
    assert "keeps the open windows' partial aggregates" in refused.stderr, refused.stderr[-2000:]
    assert "Keep the aggregates as they were" in refused.stderr
    assert store(pipeline).latest_completed().checkpoint_id == completed


DEDUP = {"key_groups": 4, "event_time": {"column": "created_at", "out_of_orderness": "2s"},
         "dedup": {"key": "order_id", "ttl": "1h", "duplicates": "dead_letter"},
         # Small state files are mostly Parquet's own overhead: compact on the deltas' count only.
         "compaction": {"max_deltas": 2, "max_delta_ratio": 100}}


def test_dedup_passes_each_key_once_across_checkpoints_and_crashes(tmp_path, bootstrap, unique, spark_connect):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=30)
    stateful(pipeline, DEDUP, "lockstep_examples.orders:parse_with_headers")
    producer = Producer({"bootstrap.servers": pipeline.bootstrap, "linger.ms": 5})
    sent: list[str] = []
    for i in range(120):  # order o{n} is sent three times: at i, i + 1 (other partition) and i + 40 (later checkpoints)
        n = i // 2 if i < 80 else (i - 80)
        doc = {"order_id": f"o{n}", "customer": "c", "amount": 1.0, "created_at": T0 + i}
        producer.produce(pipeline.source, json.dumps(doc).encode(), partition=i % 2)
        sent.append(f"o{n}")
    producer.flush(30)
    assert crash_at(pipeline, "job.after_prepared").returncode == CRASH_EXIT_CODE
    assert crash_at(pipeline, "commit.between_commits").returncode == CRASH_EXIT_CODE
    done = run(pipeline, "--checkpoints", "4")
    assert done.returncode == 0, done.stderr[-3000:]

    out = [json.loads(m.value())["order_id"] for m in read_committed(pipeline.bootstrap, pipeline.sink)]
    assert sorted(out) == sorted(set(sent))  # every order once, whichever checkpoint saw its copies
    assert dead_letter_errors(pipeline) == Counter({"duplicate": len(sent) - len(set(sent))})
    # Passing records and duplicates are the transform's records: each keeps its own headers.
    for records in (read_committed(pipeline.bootstrap, pipeline.sink),
                    read_committed(pipeline.bootstrap, pipeline.dead_letters)):
        carried = own_headers(records)
        assert carried and all(mine == source for mine, source in carried), carried
    manifest = store(pipeline).latest_completed().completed.state
    assert manifest.operator == "dedup" and manifest.keys == len(set(sent))
    report = verify(pipeline)
    assert report["ok"] and report["complete"] and report["actual_outputs"] == len(set(sent)), report
    assert report["state_mismatched"] == 0 and report["state_rows"] == len(set(sent)), report
    # Incremental: checkpoints after the first wrote deltas of the keys they touched, and compacted
    # a group's chain once it would pass two deltas.
    s = store(pipeline)
    states = [v.completed.state for v in (s.view(i) for i in s.checkpoint_ids())
              if v is not None and v.completed is not None and v.completed.state is not None]
    assert any(m.delta_count for m in states), [m.files for m in states]
    assert any(m.metrics.get("compactions") for m in states), [dict(m.metrics) for m in states]
    assert all(len(chain) <= 3 for m in states for chain in m.files.values())
    # The driver judged: each checkpoint's output stayed in the Spark partitions its records were read in (its
    # tasks'), with no shuffle to place it, and the sinks above hold each order once, in its transaction.
    placed = [m.metrics["output_in_place"] for m in states if "output_in_place" in m.metrics]
    assert placed and all(p == 1.0 for p in placed), [dict(m.metrics) for m in states]

    # Re-keying reads the whole state and writes it in the new groups, as bases; then deltas again.
    assert lockstep("state", "rekey", "--spec", str(pipeline.spec_path), "--key-groups", "8").returncode == 0
    stateful(pipeline, {**DEDUP, "key_groups": 8})
    def send(*orders: int, at: int) -> None:
        for i, n in enumerate(orders):
            producer.produce(pipeline.source, json.dumps({"order_id": f"o{n}", "customer": "c", "amount": 1.0,
                                                          "created_at": T0 + at + i}).encode(), partition=i % 2)
        producer.flush(30)

    send(0, 200, 1, 201, at=200)  # two repeats, two new orders
    assert run(pipeline, "--checkpoints", "1").returncode == 0
    rekeyed = store(pipeline).latest_completed().completed.state
    assert rekeyed.key_groups == 8 and rekeyed.delta_count == 0 and rekeyed.keys == len(set(sent)) + 2
    send(2, 202, at=300)
    assert run(pipeline, "--checkpoints", "1").returncode == 0
    after = store(pipeline).latest_completed().completed.state
    assert after.keys == len(set(sent)) + 3 and after.delta_count >= 1, after.files
    for group in after.files:  # every row is in the group of its key's new hash
        rows = store(pipeline).state_files().read_state(after, [group]).to_pylist()
        assert {r["__ls_key_group"] for r in rows} == {group}
    report = verify(pipeline)
    assert report["ok"] and report["state_mismatched"] == 0 and report["state_rows"] == len(set(sent)) + 3, report
    assert open_transactions(pipeline) == []


def test_windows_rescaled_from_a_savepoint_32_to_64_key_groups_stay_exact(tmp_path, bootstrap, unique, spark_connect):
    """Flink's stop-with-savepoint and restart at a new parallelism, as a user does it here: a savepoint of the
    latest checkpoint, `lockstep state rekey --key-groups 64`, the spec at 64, a restore from the savepoint. The
    restore's checkpoint reads the 32 groups and writes every key in its group of 64; every window stays exact
    through it, `verify` agrees, and each checkpoint computed again (`replay --compare`) writes what it did."""
    from .engine_helpers import same_output

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=1000)
    stateful(pipeline, {**WINDOW, "key_groups": 32})
    produced: list[int] = []
    for n in range(2):
        produce(pipeline, range(40 * n, 40 * (n + 1)))
        produced += range(40 * n, 40 * (n + 1))
        assert run(pipeline).returncode == 0
    assert lockstep("savepoint", "create", "rescale", "--spec", str(pipeline.spec_path)).returncode == 0
    refused = lockstep("state", "rekey", "--spec", str(pipeline.spec_path), "--key-groups", "64")
    assert refused.returncode == 0, refused.stderr[-2000:]
    stateful(pipeline, {**WINDOW, "key_groups": 64})
    for n in range(2, 4):
        produce(pipeline, range(40 * n, 40 * (n + 1)))
        produced += range(40 * n, 40 * (n + 1))
        done = run(pipeline, *(("--restore-from", "rescale") if n == 2 else ()))
        assert done.returncode == 0, done.stderr[-3000:]
    s = store(pipeline)
    latest = s.latest_completed()
    restored = s.view(latest.checkpoint_id - 1)
    assert restored.claim.restored_from == "rescale" and restored.claim.state_base.key_groups == 32
    manifest = latest.completed.state
    assert restored.completed.state.key_groups == manifest.key_groups == 64
    for group in manifest.files:  # every row is in its key's group of 64
        rows = s.state_files().read_state(manifest, [group]).to_pylist()
        assert {r["__ls_key_group"] for r in rows} <= {group}
    found = window_outputs(pipeline, produced)
    assert [k for k, n in Counter(k for k, _ in found).items() if n > 1] == []  # the latest checkpoint: nothing again
    assert dict(found) == expected_windows(produced, manifest.watermark_ms)
    report = verify(pipeline)
    assert report["ok"] and report["complete"] and report["state_mismatched"] == 0, {k: v for k, v in report.items() if k in ("unchecked", "complete", "notes")}
    assert report["state_rows"] == manifest.rows
    same_output(pipeline)


TTL_S = 60


def test_dedup_drops_a_copy_within_its_ttl_whatever_checkpoint_it_comes_in(tmp_path, bootstrap, unique, spark_connect):
    """Issue 39's sequence (ttl 60 s, out-of-orderness 10 s): checkpoint 1 has K at 0 s and another
    key at 100 s (the watermark moves to 90 s, past K's old expiry at 60 s); checkpoint 2 has a copy
    of K at 40 s, not late. The copy is a duplicate (`lockstep.rules.dedup`), and so are the other
    shapes of the rule: two records of a key a TTL apart in one checkpoint both pass, a copy between
    two held records, a record more than the TTL after its key's held one passes, one older than
    the watermark less the TTL is late."""
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=1)
    stateful(pipeline, {"key_groups": 4, "event_time": {"column": "created_at", "out_of_orderness": "10s"},
                        "dedup": {"key": "order_id", "ttl": f"{TTL_S}s", "duplicates": "dead_letter"}})
    producer = Producer({"bootstrap.servers": pipeline.bootstrap, "linger.ms": 5})

    def send(*orders: tuple[str, int]) -> None:
        for order, at in orders:
            producer.produce(pipeline.source, json.dumps({"order_id": order, "customer": "c", "amount": 1.0,
                                                          "created_at": T0 + at}).encode(), partition=0)
        producer.flush(30)

    first = [("K", 0), ("A", 0), ("A", 70), ("B", 10), ("B", 30), ("X", 100)]
    second = [("K", 40), ("A", 35), ("B", 80), ("C", 20), ("X", 100), ("D", 95)]
    send(*first)
    assert run(pipeline).returncode == 0
    after_one = store(pipeline).latest_completed().completed.state
    assert after_one.watermark_ms == (T0 + 90) * 1000 and after_one.rows == 5 and after_one.keys == 4
    send(*second)
    done = run(pipeline)
    assert done.returncode == 0, done.stderr[-3000:]

    sent = first + second  # offset i is sent[i]
    out = [int(dict(m.headers())["lockstep.source.offset"]) for m in read_committed(pipeline.bootstrap, pipeline.sink)]
    assert sorted(sent[i] for i in out) == sorted([("K", 0), ("A", 0), ("A", 70), ("B", 10), ("X", 100),
                                                   ("B", 80), ("D", 95)])  # K once
    dead = {int(dict(m.headers())["lockstep.source.offset"]): dict(m.headers())[ERROR_HEADER].decode()
            for m in read_committed(pipeline.bootstrap, pipeline.dead_letters)}
    assert {sent[i]: error for i, error in dead.items()} == {("B", 30): "duplicate", ("K", 40): "duplicate",
                                                             ("A", 35): "duplicate", ("X", 100): "duplicate",
                                                             ("C", 20): "late"}
    # Every passed record is held until the watermark (90 s) passes it plus twice the TTL: all of them.
    state = store(pipeline).latest_completed().completed.state
    assert (state.rows, state.keys) == (7, 5), state
    report = verify(pipeline)  # verify calls a copy a copy by the same rule
    assert report["ok"] and report["complete"] and report["late"] == 1, report
    assert (report["actual_outputs"], report["duplicated"], report["lost"], report["state_rows"]) == (7, 0, 0, 7), report

    # What the old rule wrote (the copy of K passed) is caught: K twice within its TTL.
    copy = next(m for m in read_committed(pipeline.bootstrap, pipeline.dead_letters)
                if int(dict(m.headers())["lockstep.source.offset"]) == sent.index(("K", 40)))
    again = Producer({"bootstrap.servers": pipeline.bootstrap})
    again.produce(pipeline.sink, copy.value(), copy.key(), headers=[h for h in copy.headers() if h[0] != ERROR_HEADER])
    again.flush(30)
    caught = verify(pipeline)
    assert not caught["ok"] and caught["duplicated"] == 1 and caught["duplicated_sample"] == ["K"], caught
    assert open_transactions(pipeline) == []


def test_the_spark_dedup_decides_as_its_python_rule_on_random_keys(spark_connect):
    """`rules.dedup.judge` is the operator's per-checkpoint decision in Python (the unit tests hold it
    against a model that never forgets); here the operator itself, in a Connect session, must decide
    every record and keep every state row as it does, on each of its paths."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("dedup_against_rule.py")
    done = subprocess.run([sys.executable, str(script), spark_connect, "39"], capture_output=True, text=True,
                          timeout=600, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["differ"] == [] and report["rounds"] == 4, report
    assert all(report["paths"].get(p, 0) >= 10 for p in ("new", "covered", "folded")) and report["late"] > 0, report
    # The driver marked its passes or its copies, whichever were fewer, inline and kept on the server.
    assert any(m.startswith("passes") for m in report["marked"]) and any(m.startswith("copies") for m in report["marked"]), report
    assert any(m.endswith("(on the server)") for m in report["marked"]), report


SESSIONS = {"key_groups": 4, "event_time": {"column": "created_at", "out_of_orderness": "2s"},
            "function": {"key": "customer", "process": "lockstep_examples.sessions:process", "version": 1,
                         "state": {"orders": "bigint", "total_cents": "bigint", "last_at_ms": "bigint"}}}


def test_a_state_function_keeps_running_counts_and_timers_exactly_once(tmp_path, bootstrap, unique, spark_connect):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=40)
    stateful(pipeline, SESSIONS)
    produce(pipeline, range(100))
    for point in ("job.before_prepared", "job.after_prepared", "commit.between_commits"):
        assert crash_at(pipeline, point).returncode == CRASH_EXIT_CODE, point
    assert run(pipeline, "--checkpoints", "3").returncode == 0
    # Two orders far later in event time move the watermark past every session's gap: all close.
    produce(pipeline, [1000, 1001], created_at=T0 + 1000)
    done = run(pipeline)
    assert done.returncode == 0, done.stderr[-3000:]

    valid = [i for i in range(100) if i % 10 != 7]
    out = [json.loads(m.value()) for m in read_committed(pipeline.bootstrap, pipeline.sink)]
    counts = [(o["customer"], o["nth"]) for o in out if "nth" in o and o["order_id"] not in ("o1000", "o1001")]
    per_customer = Counter(f"c{i % CUSTOMERS}" for i in valid)
    assert sorted(counts) == sorted((c, n) for c, total in per_customer.items() for n in range(1, total + 1))
    closed = {o["customer"]: o for o in out if o.get("closed")}
    # The headers the function returned are on its records, after Lockstep's; rows without have none.
    extra = Counter(tuple(k for k, _ in m.headers() if not k.startswith("lockstep."))
                    for m in read_committed(pipeline.bootstrap, pipeline.sink))
    ended = sum(1 for o in out if o.get("closed"))
    assert extra == Counter({("session",): ended, (): len(out) - ended}), extra
    assert {dict(m.headers())["session"] for m in read_committed(pipeline.bootstrap, pipeline.sink)
            if "session" in dict(m.headers())} == {b"closed"}
    assert {c: o["orders"] for c, o in closed.items()} == dict(per_customer)
    cents = {f"c{c}": sum(round(((i % 13) + 0.25) * 100) for i in valid if i % CUSTOMERS == c) for c in range(CUSTOMERS)}
    assert {c: o["total_cents"] for c, o in closed.items()} == cents
    manifest = store(pipeline).latest_completed().completed.state
    # Closed sessions were deleted; the two late-coming customers' sessions are open, with their timers.
    assert manifest.operator == "function" and manifest.keys == 2 and manifest.timers == 2
    report = verify(pipeline)  # one call per key over the whole input gives the same outputs
    assert report["ok"] and report["complete"] and report["expected_outputs"] == len(out), report

    # Version 2 renames a field: refused when the plan is made, naming it, until a migration is named.
    renamed = {**SESSIONS["function"], "process": "lockstep_examples.sessions:process_v2", "version": 2,
               "state": {"orders": "bigint", "cents": "bigint", "last_at_ms": "bigint"}}
    stateful(pipeline, {**SESSIONS, "function": renamed})
    produce(pipeline, [1005], created_at=T0 + 1005)  # customer c0, in its open session
    refused = run(pipeline)
    assert refused.returncode == 2 and "'total_cents'" in refused.stderr.splitlines()[-1], refused.stderr[-2000:]
    stateful(pipeline, {**SESSIONS, "function": {**renamed, "migrate": "lockstep_examples.sessions:migrate"}})
    migrated = run(pipeline)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    everything = Counter(m.value() for m in read_committed(pipeline.bootstrap, pipeline.sink))
    second = everything - Counter(json.dumps(o, separators=(",", ":")).encode() for o in out)
    assert [json.loads(v) for v in second.elements()] == [{"customer": "c0", "order_id": "o1005", "nth": 2}]
    after = store(pipeline).latest_completed().completed.state
    assert after.schema_version == 2 and "cents" in after.columns and "total_cents" not in after.columns
    assert open_transactions(pipeline) == []


def test_savepoints_carry_the_state_to_a_restore_and_to_another_pipeline(tmp_path, bootstrap, unique, spark_connect):
    from .engine_helpers import lockstep

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=100)
    stateful(pipeline, WINDOW, "lockstep_examples.orders:parse_with_headers")
    produce(pipeline, range(100))
    assert run(pipeline).returncode == 0
    # A fired window is many records' aggregate: Lockstep's headers only. A dead letter keeps its own.
    windows = list(read_committed(pipeline.bootstrap, pipeline.sink))
    assert windows and not [m.headers() for m in windows if PARSED_OFFSET_HEADER in dict(m.headers())]
    bad = own_headers(read_committed(pipeline.bootstrap, pipeline.dead_letters))
    assert len(bad) == 10 and all(mine == source for mine, source in bad), bad
    saved = lockstep("savepoint", "create", "sp", "--spec", str(pipeline.spec_path))
    assert saved.returncode == 0, saved.stderr[-2000:]
    produce(pipeline, range(100, 160))
    assert run(pipeline).returncode == 0
    s = store(pipeline)
    after_two = s.view(2)
    # What users inspect, read from the real store: the committed state's figures and its rows.
    stats = lockstep("state", "stats", "--spec", str(pipeline.spec_path), "--json")
    assert stats.returncode == 0, stats.stderr[-2000:]
    doc = json.loads(stats.stdout)
    assert (doc["checkpoint"], doc["keys"], doc["rows"], doc["bytes"]) == (2, after_two.completed.state.keys,
                                                                         after_two.completed.state.rows,
                                                                         after_two.completed.state.bytes)
    assert sum(g["bytes"] for g in doc["per_key_group"]) == doc["bytes"]
    shown = lockstep("state", "show", "--spec", str(pipeline.spec_path), "--key", "c1", "--limit", "100", "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    rows = json.loads(shown.stdout)["rows"]
    assert rows and all(r["key"] == "c1" for r in rows)
    # A window's partial aggregates read under their output names, each open window once, by its start.
    assert all({"window_start", "orders", "amount_cents", "latest_offset"} <= set(r) for r in rows), rows[:2]
    assert len({r["window_start"] for r in rows}) == len(rows) and rows[0]["window_start"].endswith("Z")

    restored = run(pipeline, "--restore-from", "sp")
    assert restored.returncode == 0, restored.stderr[-3000:]
    again = s.view(3)
    # The restore starts from the savepoint's state, and re-reading the same input from it gives
    # exactly the state and the windows the first reading gave.
    assert again.claim.state_base == s.get_savepoint("sp").state == s.view(1).completed.state
    for field in ("rows", "keys", "watermark_ms", "timers"):
        assert getattr(again.completed.state, field) == getattr(after_two.completed.state, field), field
    by_checkpoint: dict[str, list[str]] = {}
    for m in read_committed(pipeline.bootstrap, pipeline.sink):
        by_checkpoint.setdefault(dict(m.headers())["lockstep.checkpoint"].decode(), []).append(m.value().decode())
    assert sorted(by_checkpoint["3"]) == sorted(by_checkpoint["2"]) and by_checkpoint["2"]

    # Another pipeline restores from a copy: its own copy of the state files, the same windows.
    (tmp_path / "b").mkdir()
    other = make_pipeline(tmp_path / "b", bootstrap, unique + "b", partitions=2, max_records=100)
    doc = yaml.safe_load(other.spec_path.read_text())
    doc["source"]["topics"] = [pipeline.source]
    other.spec_path.write_text(yaml.safe_dump(doc))
    stateful(other, WINDOW)
    copied = lockstep("savepoint", "copy", "sp", "--spec", str(pipeline.spec_path), "--to-spec", str(other.spec_path))
    assert copied.returncode == 0, copied.stderr[-2000:]
    assert run(other, "--restore-from", "sp").returncode == 0
    theirs = store(other).view(1)
    assert all(k.startswith(store(other).state_files().prefix) for k in theirs.claim.state_base.all_files)
    assert theirs.completed.state.rows == after_two.completed.state.rows
    assert sorted(m.value().decode() for m in read_committed(other.bootstrap, other.sink)) == sorted(by_checkpoint["2"])
