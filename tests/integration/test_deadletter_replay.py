"""Dead-letter replay on the real platform: a checkpoint dead-letters malformed orders and negative
amounts; the transform is fixed to accept the malformed ones (not the negative ones); `lockstep
deadletters replay` writes each fixed record to the sink exactly once, however often it is replayed,
dead-letters the still-rejected ones again, and `verify` accounts for all of it."""
from __future__ import annotations

import json
from collections import Counter

import yaml
from confluent_kafka import Producer

from lockstep.model.output_contract import REPLAY_HEADER, SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC

from ..support.data import MALFORMED_EVERY, produce_orders, read_committed
from .engine_helpers import lockstep, make_pipeline, run

ORDERS, NEGATIVE = 40, 2  # 40 orders (every 10th malformed) and 2 orders with a negative amount
FIXED = "lockstep_examples.orders:enrich_accepting_text"


def originals(records) -> Counter:
    return Counter((dict(m.headers())[SOURCE_TOPIC].decode(), int(dict(m.headers())[SOURCE_PARTITION]),
                    int(dict(m.headers())[SOURCE_OFFSET])) for m in records)


def replay(spec_path, *extra: str) -> list[dict]:
    result = lockstep("deadletters", "replay", "--spec", str(spec_path), "--json", *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def listing(spec_path, *extra: str) -> list[dict]:
    result = lockstep("deadletters", "list", "--spec", str(spec_path), "--json", *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_replay_writes_each_fixed_dead_letter_once(tmp_path, bootstrap, unique):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    produce_orders(pipeline, ORDERS)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(NEGATIVE):
        producer.produce(pipeline.source, json.dumps({"order_id": f"neg{i}", "amount": -1.0, "currency": "EUR"})
                         .encode(), partition=i % 2)
    producer.flush(30)
    first = run(pipeline, "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads(first.stdout)[0]["dead_lettered"] == ORDERS // MALFORMED_EVERY + NEGATIVE

    fixed = tmp_path / "fixed.yaml"  # the same pipeline, its transform fixed
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    fixed.write_text(yaml.safe_dump({**doc, "transform": FIXED}))

    due = listing(fixed)
    assert len(due) == ORDERS // MALFORMED_EVERY + NEGATIVE and not any(d["replayed"] for d in due), due
    malformed = {tuple(d["original"].replace("@", ":").rsplit(":", 2)) for d in due if "not a JSON" in d["error"]}
    assert len(malformed) == ORDERS // MALFORMED_EVERY

    [r1] = replay(fixed)
    assert (r1["status"], r1["replayed"], r1["to_sink"], r1["dead_lettered_again"]) == \
        ("completed", 6, 4, 2), r1
    # Which task (transaction) wrote which original offset, for a repair to leave out a lost one's:
    # the record's partitions are the writer's, so every task named opened a transaction.
    from lockstep.spark.dead_letter_replay import REPLAYED_PART, Replayed, replay_spec
    from lockstep.spec import load_spec
    from lockstep.steps.client_factory import checkpoint_store

    rstore = checkpoint_store(replay_spec(load_spec(fixed)))
    recorded = Replayed.from_json(rstore.sidecar(r1["replay_checkpoint"], REPLAYED_PART))
    assert recorded.tasks and sorted(o for xs in recorded.tasks.values() for o in xs) == sorted(recorded.fed)
    written = rstore.view(r1["replay_checkpoint"]).prepared.transactions
    assert set(recorded.tasks) == {t.task_index for t in written}, (recorded.tasks, written)
    r2 = lockstep("deadletters", "replay", "--spec", str(fixed))  # only what r1 rejected again: nothing new in the sink
    assert r2.returncode == 0, r2.stderr[-3000:]
    print(r2.stdout)
    assert "2 replayed: 0 written to the sink, 2 dead-lettered again; skipped 0 already replayed" in r2.stdout
    [r3] = replay(fixed, "--checkpoint", "1")  # checkpoint 1's dead letters again: the 4 fixed ones are skipped
    assert (r3["replayed"], r3["to_sink"], r3["skipped_duplicates"]) == (2, 0, 4), r3

    sink = read_committed(bootstrap, pipeline.sink)
    replayed_in_sink = [m for m in sink if REPLAY_HEADER in dict(m.headers())]
    assert {(t, str(p), str(o)) for t, p, o in originals(replayed_in_sink)} == malformed
    assert max(originals(sink).values()) == 1  # no original offset twice in the sink
    assert len(sink) == ORDERS - ORDERS // MALFORMED_EVERY + len(malformed)
    for m in replayed_in_sink:
        assert json.loads(m.value())["raw"].startswith("not json")
        assert dict(m.headers())[REPLAY_HEADER] == str(r1["replay_checkpoint"]).encode()
    dead = read_committed(bootstrap, pipeline.dead_letters)
    assert len(dead) == ORDERS // MALFORMED_EVERY + NEGATIVE + 3 * NEGATIVE  # r1, r2, r3 rejected them again

    listed = listing(fixed, "--checkpoint", "1")
    assert sorted(d["replayed"] for d in listed) == [False] * NEGATIVE + [True] * len(malformed), listed
    print(lockstep("deadletters", "list", "--spec", str(fixed), "--checkpoint", "1").stdout)

    report = lockstep("verify", "--spec", str(fixed))
    print(report.stdout)
    assert report.returncode == 0, report.stdout + report.stderr[-3000:]
    # pipeline: one output per input offset; replays: r1 fed 6, r2 and r3 the 2 still rejected
    assert f"{ORDERS + NEGATIVE} outputs expected, {ORDERS + NEGATIVE} found; 0 lost, 0 duplicated, 0 unexpected" \
        in report.stdout
    assert "10 outputs expected, 10 replayed records checked; 0 lost, 0 duplicated, 0 unexpected, 0 original " \
        "offsets in the sink more than once" in report.stdout
