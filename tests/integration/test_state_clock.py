"""The clock of a stateful checkpoint is the one its claim pins (DESIGN.md, invariant 11):
- a checkpoint whose run starts after a partition has gone idle by the wall clock (but not by its
  claim's clock), aborted after prepare and planned again later, fires the same windows and leaves the
  same state both times, because the run reads only its claim's clock and the replay takes the first
  attempt's;
- with ``idle_advance``, a checkpoint without records fires the windows the quiet has made due."""
from __future__ import annotations

import json
import time
from collections import Counter

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaPartition

from lockstep.model.checkpoint import CheckpointStatus
from lockstep.rules.watermarks import advance
from lockstep.steps.coordinator import Pipeline, commit, plan
from lockstep.steps.run import run_checkpoint

from ..support.data import read_committed, topic_partitions
from .engine_helpers import make_pipeline, open_transactions, run, store, verify
from .test_state import T0, WINDOW, expected_windows, produce, stateful, window_outputs

IDLE_S = 3


def outputs(bootstrap: str, topic: str, checkpoint: int) -> Counter:
    """(key, value) of every record a checkpoint wrote to ``topic``, committed or not (read_uncommitted:
    an aborted transaction's records are in the log too)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"uncommitted-{topic}",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted",
                         "enable.partition.eof": True})
    try:
        parts = topic_partitions(consumer, topic)
        consumer.assign([KafkaPartition(topic, p, 0) for p in parts])
        remaining, found = set(parts), Counter()
        deadline = time.monotonic() + 30
        while remaining and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.1):  # a short batch waits its whole timeout
                if msg.error():
                    remaining.discard(msg.partition())
                elif dict(msg.headers() or []).get("lockstep.checkpoint") == str(checkpoint).encode():
                    found[(msg.key(), msg.value())] += 1
        assert not remaining, f"reading {topic}: partitions {remaining} never reached their end"
        return found
    finally:
        consumer.close()


def test_a_checkpoint_aborted_after_prepare_and_replayed_later_gives_the_same_output_and_state(
        tmp_path, bootstrap, unique, spark_connect):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    stateful(pipeline, {**WINDOW, "event_time": {**WINDOW["event_time"], "idle_timeout": f"{IDLE_S}s"}})
    produce(pipeline, range(21))  # both partitions up to event time T0+20,
    produce(pipeline, range(21, 40, 2))  # partition 1 on to T0+39: the watermark is T0+18
    assert run(pipeline).returncode == 0
    # Partition 0 only, far later in event time: partition 1 holds the watermark back until it is idle.
    produce(pipeline, range(40, 80, 2), created_at=T0 + 200)
    s = store(pipeline)
    quiet_since = s.view(1).claim.clock  # partition 1's last records were read by checkpoint 1
    # Checkpoint 2 is planned as if at once (its pinned clock 1 s after checkpoint 1's), and runs now, when
    # by the wall clock partition 1 has been idle for longer than IDLE_S: the run must not read that clock.
    time.sleep(max(0.0, quiet_since / 1000 + IDLE_S + 1 - time.time()))
    p = Pipeline.open(pipeline.spec())
    p.wall_ms = lambda: quiet_since + 1000
    cid = plan(p, run_id="first-attempt").claim.checkpoint_id
    run_checkpoint(p.spec, cid, p.store)
    first = s.view(2)
    assert first.status is CheckpointStatus.PREPARED and first.claim.clock == quiet_since + 1000
    clock = first.claim.clock
    base = first.claim.state_base
    assert base is not None

    # Another attempt fences checkpoint 2's transactions: its commit cannot go on, and it is replayed.
    for t in first.prepared.transactions:
        Producer({"bootstrap.servers": pipeline.bootstrap, "transactional.id": t.transactional_id}).init_transactions(30)
    # Planned again by the wall clock, minutes later as far as partition 1 is concerned; its first
    # attempt's run is gone (as Airflow's plan task knows of a failed DAG run).
    later = Pipeline.open(pipeline.spec())
    replay = plan(later, run_id="replay", run_alive=lambda run_id: False).claim.checkpoint_id
    assert s.view(2).status is CheckpointStatus.ABORTED and replay == 3
    run_checkpoint(later.spec, replay, later.store)
    commit(later, replay)
    again = s.view(3)
    assert again.status is CheckpointStatus.COMPLETED and again.claim.ranges == first.claim.ranges
    assert again.claim.clock == clock, "the replay takes the aborted attempt's clock"
    # What the wall clock would have decided: partition 1 idle, the watermark at partition 0's events.
    by_wall = advance(base.partitions, base.watermark_ms, {f"{pipeline.source}:0": (T0 + 200) * 1000},
                      [r.tp.key for r in first.claim.ranges], int(time.time() * 1000), 2000, IDLE_S * 1000)
    assert by_wall.idle and by_wall.after == (T0 + 198) * 1000

    mine, theirs = again.completed.state, first.prepared.state
    assert mine.watermark_ms == theirs.watermark_ms == (T0 + 37) * 1000, "partition 1 still held it back"
    assert (mine.keys, mine.rows, mine.timers, mine.next_timer_ms, dict(mine.partitions)) == \
        (theirs.keys, theirs.rows, theirs.timers, theirs.next_timer_ms, dict(theirs.partitions))
    files = s.state_files()
    assert sorted(map(str, files.read_state(mine).to_pylist())) == sorted(map(str, files.read_state(theirs).to_pylist()))
    fired = outputs(pipeline.bootstrap, pipeline.sink, 2)
    starts = sorted({json.loads(value)["window_start"] for _, value in fired})
    assert starts == ["2023-11-14T22:13:30Z", "2023-11-14T22:13:40Z"], "the windows ending by T0+37 fired"
    assert outputs(pipeline.bootstrap, pipeline.sink, 3) == fired
    assert outputs(pipeline.bootstrap, pipeline.dead_letters, 3) == outputs(pipeline.bootstrap, pipeline.dead_letters, 2)
    committed = [m for m in read_committed(pipeline.bootstrap, pipeline.sink)
                 if dict(m.headers())["lockstep.checkpoint"] == b"2"]
    assert committed == [], "the aborted attempt's output is never visible"
    report = verify(pipeline)
    assert report["ok"] and report["state_mismatched"] == 0, report
    assert open_transactions(pipeline) == []


def test_with_idle_advance_a_quiet_source_gets_its_last_windows_from_a_checkpoint_without_records(
        tmp_path, bootstrap, unique, spark_connect):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    stateful(pipeline, {**WINDOW, "event_time": {**WINDOW["event_time"], "idle_timeout": "5s", "idle_advance": True}})
    produced = list(range(21))  # event times T0 .. T0+20 over both partitions: the watermark is T0+17
    produce(pipeline, produced)
    assert run(pipeline).returncode == 0
    s = store(pipeline)
    first = s.view(1).completed.state
    assert first.watermark_ms == (T0 + 17) * 1000 and first.timers > 0
    # Quiet: by a clock 13 s past the last records, event time has gone on to T0+20+13-2 = T0+31.
    time.sleep(max(0.0, s.view(1).claim.clock / 1000 + 13 - time.time()))
    done = run(pipeline)
    assert done.returncode == 0, done.stderr[-3000:]
    quiet = s.view(2)
    assert quiet.claim.fires_timers and all(r.is_empty for r in quiet.claim.ranges)
    assert quiet.prepared.records_in == 0 and len(quiet.prepared.transactions) == 1
    state = quiet.completed.state
    assert state.watermark_ms == (T0 + 20) * 1000 + (quiet.claim.clock - s.view(1).claim.clock) - 2000
    assert state.watermark_ms >= (T0 + 30) * 1000 and state.timers == 0 and state.rows == 0, "every window fired"
    found = dict(window_outputs(pipeline, produced))
    assert found == expected_windows(produced, state.watermark_ms)
    assert {start for _, start in found} == {T0, T0 + 10, T0 + 20}
    report = verify(pipeline)
    assert report["ok"] and report["state_mismatched"] == 0, report
    assert open_transactions(pipeline) == []
