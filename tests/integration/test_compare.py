"""`lockstep replay --compare` on real Kafka, S3 and Spark Connect: completed checkpoints computed again through
a spec, from each checkpoint's own claim, and compared record by record with what they committed. With the
running spec the output is the same (the runs are deterministic, windows and state included); with a changed
transform exactly the records the change affects are reported, as this test computes them itself; nothing is
written to the sinks or the store's checkpoints either way."""
from __future__ import annotations

import json

import pytest
import yaml

from lockstep.store.checkpoint_store import COMPARISON

from ..support.data import MALFORMED_EVERY, order, produce_orders, read_committed
from .engine_helpers import lockstep, make_pipeline, open_transactions, run, store, verify
from .test_state import DEDUP, SESSIONS, T0, WINDOW, produce, stateful

FIXED = "lockstep_examples.orders:enrich_accepting_text"


def compare(pipeline, new_spec, *extra: str) -> tuple[int, dict]:
    result = lockstep("replay", "--spec", str(pipeline.spec_path), "--compare", str(new_spec), "--json", *extra)
    assert result.returncode in (0, 1, 2), result.stderr[-3000:]
    return result.returncode, json.loads(result.stdout)


def windows_changed_after_two_checkpoints(pipeline, tmp_path, **window) -> list[tuple[str, str]]:
    """Two checkpoints of 40 orders, then the spec's window changed (``window``'s fields): the change plan from
    the running spec, as (field, applies) pairs."""
    for n in range(2):
        produce(pipeline, range(40 * n, 40 * (n + 1)))
        assert run(pipeline).returncode == 0
    running = tmp_path / "running.yaml"
    running.write_text(pipeline.spec_path.read_text())
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["state"]["window"].update(window)
    pipeline.spec_path.write_text(yaml.safe_dump(doc))
    plan = lockstep("validate", str(pipeline.spec_path), "--against", str(running), "--json")
    assert plan.returncode == 0, plan.stdout[-2000:]
    return [(c["field"], c["applies"]) for c in json.loads(plan.stdout)["changes"]]


def test_the_running_spec_computes_the_same_output_and_a_changed_transform_exactly_what_it_changes(
        tmp_path, bootstrap, unique, spark_connect):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    for start in (0, 30):  # two checkpoints of 30 orders, every 10th not JSON (a dead letter)
        produce_orders(pipeline, 30, start=start)
        done = run(pipeline)
        assert done.returncode == 0, done.stderr[-3000:]

    code, same = compare(pipeline, pipeline.spec_path)
    assert code == 0 and same["same"], same
    assert same["compared"] == [1, 2] and same["not_compared"] == {}
    assert same["total"]["before"] == same["total"]["after"] == same["total"]["same"] == 60

    fixed = tmp_path / "fixed.yaml"  # the same pipeline, its transform changed to accept what is not JSON
    fixed.write_text(yaml.safe_dump({**yaml.safe_load(pipeline.spec_path.read_text()), "transform": FIXED}))
    code, changed = compare(pipeline, fixed, "--examples", "100")
    assert code == 1 and not changed["same"]
    # What the change affects, computed here: order i is offset i // 2 of partition i % 2; the malformed ones
    # were dead letters and are now sink records of {"raw": <the text>}.
    expected = {f"{pipeline.source}:{i % 2}@{i // 2}": f"not json {i}" for i in range(60) if i % MALFORMED_EVERY == 0}
    assert all(order(int(text.split()[-1])) == text.encode() for text in expected.values())
    examples = changed["total"]["examples"]
    assert {e["source"] for e in examples} == set(expected)
    for e in examples:
        assert e["kind"] == "changed" and e["fields"] == ["role", "value", "error"], e
        assert e["before"].startswith(f"[dead letters] value={expected[e['source']]} error=")
        assert e["after"] == f"[sink] value={json.dumps({'raw': expected[e['source']]}, separators=(',', ':'))}"
    total = changed["total"]
    assert (total["changed"], total["added"], total["removed"], total["same"]) == (len(expected), 0, 0, 60 - len(expected))
    assert total["dead_letters_lost"] == len(expected) and total["dead_letters_gained"] == 0
    assert [c["changed"] for c in changed["checkpoints"]] == [3, 3]

    # Nothing was written: the sinks hold what the two checkpoints wrote, no transaction is open, no checkpoint
    # was added; the store keeps the last comparison for the Checkpoints page.
    assert len(read_committed(bootstrap, pipeline.sink)) == 60 - len(expected)
    assert len(read_committed(bootstrap, pipeline.dead_letters)) == len(expected)
    assert open_transactions(pipeline) == []
    s = store(pipeline)
    assert list(s.checkpoint_ids()) == [1, 2]
    assert s.note(COMPARISON) == changed
    text = lockstep("replay", "--spec", str(pipeline.spec_path), "--compare", str(fixed), "--examples", "2")
    print(text.stdout)  # docs/operations.md, "Changing a pipeline", quotes it (-s shows it)
    assert text.returncode == 1 and text.stdout.splitlines()[0].endswith(f"computed again through {fixed}: the output "
                                                                         "changes")
    assert "total: 60 records before, 60 after: 54 the same, 6 changed, 0 added, 0 removed; dead letters 0 gained, " \
           "6 lost; fields changed: role (6), value (6), error (6)" in text.stdout


def test_each_claim_says_which_code_wrote_it_and_verify_sets_aside_what_other_code_wrote_differently(
        tmp_path, bootstrap, unique, spark_connect):
    """A query that keeps half the records deployed: `lockstep checkpoints` marks the first checkpoint it wrote,
    and `verify` sets the old query's checkpoint aside as not checked (exit 2, naming where today's code starts)
    instead of reporting the records the old query kept as unexpected. A change that writes every input's
    output alike (the dead-letter fix) leaves every checkpoint checked."""
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, transform={"sql": "SELECT * FROM input"})
    produce_orders(pipeline, 20)
    assert run(pipeline).returncode == 0
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    pipeline.spec_path.write_text(yaml.safe_dump({**doc, "transform": {"sql": "SELECT * FROM input WHERE offset % 2 = 0"}}))
    produce_orders(pipeline, 20, start=20)
    assert run(pipeline).returncode == 0

    listed = lockstep("checkpoints", "--spec", str(pipeline.spec_path), "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    rows = {r["checkpoint"]: r for r in json.loads(listed.stdout)}
    assert rows[2]["code_changed"] == ["transform"] and rows[1]["code_changed"] == []
    assert rows[1]["code"] != rows[2]["code"]

    report = verify(pipeline)
    assert report["ok"] and not report["complete"], report
    assert {u["range"].split("[")[0] for u in report["unchecked"]} == {f"{pipeline.source}:0", f"{pipeline.source}:1"}
    assert all(u["reason"].startswith("checkpoint 1: written by other code (its transform is not the spec's now), "
                                      "and 10 of its offsets differ from what today's code writes")
               and "--since-checkpoint 2" in u["reason"] for u in report["unchecked"]), report["unchecked"]
    assert verify(pipeline, "--since-checkpoint", "2")["complete"]


def test_a_stateful_verify_sets_aside_what_other_code_wrote_differently(tmp_path, bootstrap, unique, spark_connect):
    """A dedup whose TTL went from 1 h to 1 s after its first checkpoint: today's spec would have passed the copy of
    o5 that came 10 s after it, which the first checkpoint dead-lettered as a duplicate. The state's history is
    recomputed in one batch with today's code, so `verify` sets the difference aside as not checked, naming the
    checkpoint other code wrote and the way out, instead of reporting it as wrong."""
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=1000)
    stateful(pipeline, DEDUP)
    produce(pipeline, range(20))
    produce(pipeline, [5], created_at=T0 + 15)  # o5 again, 10 s later
    assert run(pipeline).returncode == 0
    assert verify(pipeline)["complete"]
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["state"]["dedup"]["ttl"] = "1s"
    pipeline.spec_path.write_text(yaml.safe_dump(doc))
    produce(pipeline, range(20, 40))
    done = run(pipeline)
    assert done.returncode == 0, done.stderr[-3000:]

    report = verify(pipeline)
    assert report["ok"] and not report["complete"], report
    assert report["wrong"] == report["lost"] == report["unexpected"] == report["duplicated"] == 0
    [why] = report["unchecked"]
    assert why.startswith("checkpoint 1 written by other code (its state is not the spec's now), and recomputing the "
                          "state's history with today's code finds 1 differences"), why
    assert "`lockstep replay --compare`" in why


def test_a_windowed_pipeline_computes_the_same_windows_from_each_checkpoints_state_and_clock(
        tmp_path, bootstrap, unique, spark_connect):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=1000)
    stateful(pipeline, WINDOW)
    for n in range(3):  # each checkpoint closes the windows of the one before: its output comes from the state
        produce(pipeline, range(40 * n, 40 * (n + 1)))
        done = run(pipeline)
        assert done.returncode == 0, done.stderr[-3000:]
    code, report = compare(pipeline, pipeline.spec_path)
    assert code == 0 and report["same"] and report["compared"] == [1, 2, 3], report
    assert all(c["state"]["keys"] for c in report["checkpoints"]), report  # the open windows' state, compared
    windows = len(read_committed(bootstrap, pipeline.sink))
    assert windows > 0 and report["total"]["before"] == report["total"]["after"] == report["total"]["same"]
    assert report["total"]["before"] == windows + len(read_committed(bootstrap, pipeline.dead_letters))
    assert sum(1 for c in report["checkpoints"] if c["before"]) >= 2  # windows fired in more than one

    # Sliding windows instead: the state's pending windows were cut as tumbling 10 s windows, and sliding windows
    # overlap any time a new size could take over. The first checkpoint started without state, so it is computed
    # again with them (other windows: changes); the others cannot be, and the next plan refuses, naming the change,
    # before it claims anything.
    resized = tmp_path / "resized.yaml"
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["state"]["window"]["slide"] = "5s"
    resized.write_text(yaml.safe_dump(doc))
    code, report = compare(pipeline, resized)
    assert code == 1 and report["compared"] == [1] and sorted(report["not_compared"]) == ["2", "3"], report
    assert all("only tumbling windows change size" in why for why in report["not_compared"].values())
    pipeline.spec_path.write_text(resized.read_text())
    produce(pipeline, range(120, 160))
    refused = run(pipeline)
    assert refused.returncode != 0 and "are tumbling 10000 ms and the spec's 10000 ms sliding every 5000 ms" \
        in refused.stderr
    assert list(store(pipeline).checkpoint_ids()) == [1, 2, 3]


@pytest.mark.parametrize("keep_rows", [False, True], ids=["partials", "rows"])
def test_a_tumbling_windows_new_size_drains_the_open_windows_at_the_old_size(tmp_path, bootstrap, unique,
                                                                             spark_connect, keep_rows):
    """10 s windows become 20 s windows while the pipeline runs: the change plan says it applies at the next
    checkpoint; the windows of records before the switch (the first multiple of 20 s after the latest event time
    the state had seen) fire at 10 s, later ones at 20 s, each exactly once with every record it holds, as this
    test computes them itself; `verify` recomputes each at its size, and each checkpoint computed again through the
    new spec gives the same output and state."""
    from datetime import datetime

    from .test_state import SIZE_S, timed_order

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=1000)
    stateful(pipeline, {**WINDOW, "window": {**WINDOW["window"], "keep_rows": keep_rows}})
    assert windows_changed_after_two_checkpoints(pipeline, tmp_path, size="20s") == [
        ("state.window.size", "next checkpoint")]
    logs = []
    for n in range(2, 4):
        produce(pipeline, range(40 * n, 40 * (n + 1)))
        done = run(pipeline)
        assert done.returncode == 0, done.stderr[-3000:]
        logs.append(done.stderr)
    assert "checkpoint 3: the windows' size changed from 10000 ms to 20000 ms" in logs[0], logs[0][-3000:]
    assert "size changed" not in logs[1]

    # What fires, computed here: order i has event time T0 + i; the state had seen up to T0 + 79 when the size
    # changed, so 20 s windows take over at the next multiple of 20 s; the watermark ends at T0 + 159 - 2.
    switch = ((T0 + 79) // 20 + 1) * 20
    watermark = T0 + 159 - 2
    expected: dict[tuple[str, int, int], tuple[int, int]] = {}
    for i in range(160):
        if i % 10 == 7:
            continue
        order_doc = json.loads(timed_order(i))
        t = T0 + i
        size = SIZE_S if t < switch else 20
        start = t - t % size
        if start + size <= watermark:
            orders, cents = expected.get((order_doc["customer"], start, size), (0, 0))
            expected[(order_doc["customer"], start, size)] = (orders + 1, cents + round(order_doc["amount"] * 100))
    assert {size for _, _, size in expected} == {10, 20}
    found = []
    for record in read_committed(bootstrap, pipeline.sink):
        window = json.loads(record.value())
        start, end = (int(datetime.fromisoformat(window[k].replace("Z", "+00:00")).timestamp())
                      for k in ("window_start", "window_end"))
        found.append(((window["customer"], start, end - start), (window["orders"], window["amount_cents"])))
    assert sorted(found) == sorted(expected.items()), "each window once, at its own size"

    report = verify(pipeline)
    assert report["ok"] and report["complete"] and report["wrong"] == 0, report
    assert report["actual_outputs"] == len(expected) and report["state_mismatched"] == 0
    code, same = compare(pipeline, pipeline.spec_path, "--from-checkpoint", "3")
    assert code == 0 and same["same"] and same["compared"] == [3, 4], same


def test_a_windows_aggregates_changed_over_kept_rows_fire_with_the_new_ones_and_verify_checks_each_with_its_own(
        tmp_path, bootstrap, unique, spark_connect):
    """A window whose state keeps its rows takes new aggregates at the next checkpoint (the change plan says so):
    the open windows fire with them, those fired before keep theirs, and `verify` recomputes each window with
    the aggregates of the checkpoint that fired it (its state records them)."""
    from datetime import datetime

    from .test_state import SIZE_S, timed_order

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=1000)
    stateful(pipeline, {**WINDOW, "window": {**WINDOW["window"], "keep_rows": True}})
    aggregates = {**WINDOW["window"]["aggregates"], "top_cents": "max(CAST(round(amount * 100) AS BIGINT))"}
    assert windows_changed_after_two_checkpoints(pipeline, tmp_path, aggregates=aggregates) == [
        ("state.window.aggregates", "next checkpoint")]
    for n in range(2, 4):
        produce(pipeline, range(40 * n, 40 * (n + 1)))
        done = run(pipeline)
        assert done.returncode == 0, done.stderr[-3000:]

    top: dict[tuple[str, int], int] = {}
    for i in range(160):
        if i % 10 != 7:
            order_doc = json.loads(timed_order(i))
            key = (order_doc["customer"], (T0 + i) - (T0 + i) % SIZE_S)
            top[key] = max(top.get(key, 0), round(order_doc["amount"] * 100))
    fired: dict[int, int] = {}
    for record in read_committed(bootstrap, pipeline.sink):
        window = json.loads(record.value())
        cid = int(dict(record.headers())["lockstep.checkpoint"])
        fired[cid] = fired.get(cid, 0) + 1
        start = int(datetime.fromisoformat(window["window_start"].replace("Z", "+00:00")).timestamp())
        if cid <= 2:
            assert "top_cents" not in window, window
        else:
            assert window["top_cents"] == top[(window["customer"], start)], window
    assert fired.get(1) and fired.get(2) and fired.get(3) and fired.get(4), fired
    report = verify(pipeline)
    assert report["ok"] and report["complete"] and report["wrong"] == 0, report
    assert report["actual_outputs"] == sum(fired.values())


def test_a_state_functions_new_version_writes_the_same_output_and_the_state_it_migrated(
        tmp_path, bootstrap, unique, spark_connect):
    """Version 2 of the sessions function renames a state field (``total_cents`` -> ``cents``) and migrates the
    old state (``state.function.migrate``). Computed again, each checkpoint writes the same output and leaves,
    for every key, the same state under the new name: the comparison says exactly that, key by key."""
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=40)
    stateful(pipeline, SESSIONS)
    for n in range(2):  # each customer orders every 5 s: their sessions stay open, each key keeps a state row
        produce(pipeline, range(40 * n, 40 * (n + 1)))
        done = run(pipeline)
        assert done.returncode == 0, done.stderr[-3000:]

    code, same = compare(pipeline, pipeline.spec_path)
    assert code == 0 and same["same"] and same["compared"] == [1, 2], same
    assert [c["state"]["keys"] for c in same["checkpoints"]] == [5, 5], same  # c0 .. c4

    v2 = tmp_path / "v2.yaml"
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["state"]["function"] = {**doc["state"]["function"], "process": "lockstep_examples.sessions:process_v2",
                                "version": 2, "migrate": "lockstep_examples.sessions:migrate",
                                "state": {"orders": "bigint", "cents": "bigint", "last_at_ms": "bigint"}}
    v2.write_text(yaml.safe_dump(doc))
    code, changed = compare(pipeline, v2, "--examples", "10")
    assert code == 1 and changed["compared"] == [1, 2] and changed["not_compared"] == {}, changed
    for c in changed["checkpoints"]:
        assert (c["changed"], c["added"], c["removed"], c["same"]) == (0, 0, 0, c["before"]) and c["before"], c
        state = c["state"]
        assert (state["keys"], state["changed"], state["same"], state["added"], state["removed"]) == (5, 5, 0, 0, 0)
        assert state["rows_added"] == state["rows_removed"] == 5
    examples = changed["total"]["state"]["examples"]
    assert len(examples) == 10 and {e["kind"] for e in examples} == {"changed"}
    for e in examples:  # one row per key: the same state under the new field name (only what differs is shown)
        before, after = json.loads(e["before"]), json.loads(e["after"])
        assert list(before) == ["total_cents"] and after == {"cents": before["total_cents"]}, e
    text = lockstep("replay", "--spec", str(pipeline.spec_path), "--compare", str(v2), "--examples", "1")
    print(text.stdout)  # docs/operations.md, "Changing a pipeline", quotes it (-s shows it)
    assert text.returncode == 1 and text.stdout.splitlines()[0].endswith("the state changes"), text.stdout
    assert "state: 10 keys compared: 0 the same, 10 changed, 0 added, 0 removed (10 rows added, 10 removed)" \
        in text.stdout
