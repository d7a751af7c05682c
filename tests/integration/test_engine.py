"""The exactly-once engine end to end on the real platform: the CLI runs plan ->
spark-submit -> commit; the auditor checks the read_committed output."""
from __future__ import annotations

import time
from datetime import UTC

import pytest

from lockstep.model.checkpoint import CheckpointStatus
from lockstep.model.output_contract import ERROR_HEADER, PIPELINE_HEADER

from ..support.data import MALFORMED_EVERY, produce_orders, read_committed
from ..support.topics import create_topics
from .engine_helpers import group_offsets, make_pipeline, open_transactions, run, same_output, store, verify


def completed_views(pipeline):
    s = store(pipeline)
    views = [s.view(i) for i in s.checkpoint_ids()]
    return [v for v in views if v is not None and v.status is CheckpointStatus.COMPLETED]


def assert_tiled(views) -> None:
    """start(N+1) == end(N) on every partition of consecutive completed checkpoints."""
    for before, after in zip(views, views[1:]):
        ends = {r.tp: r.end for r in before.claim.ranges}
        starts = {r.tp: r.start for r in after.claim.ranges}
        assert starts == ends, f"checkpoint {after.checkpoint_id} does not start where {before.checkpoint_id} ended"


def test_five_checkpoints_tile_and_verify_exactly_once(tmp_path, bootstrap, unique):
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=4, max_records=200)
    produce_orders(pipeline, 1000)

    result = run(pipeline, "--checkpoints", "5")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("completed") == 5

    views = completed_views(pipeline)
    assert [v.checkpoint_id for v in views] == [1, 2, 3, 4, 5]
    assert_tiled(views)
    assert all(r.start == 0 for r in views[0].claim.ranges)
    assert sum(r.count for v in views for r in v.claim.ranges) == 1000
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["expected_outputs"] == report["actual_outputs"] == 1000

    # Offsets are published after completion only: the consumer group holds the last completed checkpoint's end offsets.
    assert group_offsets(pipeline) == dict(views[-1].completed.end_offsets)
    assert report["drift"] == [] and report["drift_ok"]

    dead = read_committed(bootstrap, pipeline.dead_letters)
    assert len(dead) == 1000 // MALFORMED_EVERY  # no silent loss: each malformed order is a dead letter
    assert all(dict(m.headers())[ERROR_HEADER] == b"not a JSON order with order_id" for m in dead)
    assert open_transactions(pipeline) == []


def test_empty_checkpoint_completes_and_commit_again_changes_nothing(tmp_path, bootstrap, unique):
    from lockstep.steps.coordinator import Pipeline, commit

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    view = store(pipeline).view(1)
    assert view.status is CheckpointStatus.COMPLETED
    assert view.prepared.transactions == ()

    produce_orders(pipeline, 40)
    assert run(pipeline).returncode == 0
    s = store(pipeline)
    before = {k["Key"]: k["ETag"] for k in s._s3.list_objects_v2(Bucket=s.bucket, Prefix=s.root)["Contents"]}
    outcome = commit(Pipeline.open(pipeline.spec()), 2)  # again, from a new process' point of view
    after = {k["Key"]: k["ETag"] for k in s._s3.list_objects_v2(Bucket=s.bucket, Prefix=s.root)["Contents"]}
    assert outcome.status is CheckpointStatus.COMPLETED and outcome.message == "already completed"
    assert before == after
    report = verify(pipeline)
    assert report["ok"] and report["actual_outputs"] == 40, report

    # Offsets are never moved backwards without a restore: if the group is ahead, it stays.
    from lockstep.kafka import broker_offsets
    from lockstep.model.offsets import TopicPartition

    ahead = {TopicPartition.from_key(k): v + 5 for k, v in group_offsets(pipeline).items()}
    broker_offsets.publish_offsets({"bootstrap.servers": bootstrap}, pipeline.spec().source.consumer_group, ahead)
    third = run(pipeline)  # an empty checkpoint: no Spark, same end offsets
    assert third.returncode == 0, third.stderr[-3000:]
    assert group_offsets(pipeline) == {tp.key: o for tp, o in ahead.items()}
    assert "not moving it backwards" in third.stderr


def test_transaction_timeout_aborts_the_whole_checkpoint_and_the_next_run_replays(tmp_path, bootstrap, unique):
    from lockstep.errors import CheckpointError
    from lockstep.kafka.committer import TransactionCommitter
    from lockstep.model.transactions import TransactionState
    from lockstep.steps.coordinator import Pipeline, commit, plan
    from lockstep.steps.run import run_checkpoint

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, timeout_ms=4000, margin_ms=1000)
    produce_orders(pipeline, 100)
    p = Pipeline.open(pipeline.spec())
    claim = plan(p, run_id="timeout-test").claim
    run_checkpoint(p.spec, claim.checkpoint_id, p.store)
    prepared = p.store.view(claim.checkpoint_id).prepared
    tids = [t.transactional_id for t in prepared.transactions]
    deadline = time.monotonic() + 60
    with TransactionCommitter(bootstrap) as committer:
        while any(o.state == TransactionState.ONGOING for o in committer.describe(tids).values()):
            assert time.monotonic() < deadline, "the broker never timed the transactions out"
            time.sleep(0.5)

    with pytest.raises(CheckpointError) as failure:
        commit(p, claim.checkpoint_id)
    message = str(failure.value)
    assert f"checkpoint {claim.checkpoint_id}" in message and "aborted" in message
    assert "timed out" in message and "the next run replays" in message
    assert p.store.view(claim.checkpoint_id).status is CheckpointStatus.ABORTED
    assert read_committed(bootstrap, pipeline.sink) == []  # nothing of the checkpoint was committed

    pipeline.rewrite(transactions={"timeout_ms": 900_000, "commit_margin_ms": 60_000})  # the way out
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    replay = store(pipeline).view(claim.checkpoint_id + 1)
    assert replay.status is CheckpointStatus.COMPLETED
    assert replay.claim.ranges == claim.ranges  # the same ranges, replayed
    report = verify(pipeline)
    assert report["ok"] and report["actual_outputs"] == 100, report
    assert open_transactions(pipeline) == []


def test_restore_from_savepoint_replays_from_its_offsets(tmp_path, bootstrap, unique):
    from .engine_helpers import lockstep

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    produce_orders(pipeline, 60)
    assert run(pipeline).returncode == 0
    spec = ["--spec", str(pipeline.spec_path)]
    created = lockstep("savepoint", "create", "before-second", *spec)
    assert created.returncode == 0, created.stderr
    produce_orders(pipeline, 40, start=60)
    assert run(pipeline).returncode == 0
    sp_ends = store(pipeline).get_savepoint("before-second").end_offsets

    ahead = group_offsets(pipeline)
    for _attempt in range(2):  # restoring twice from the same savepoint neither fails nor duplicates
        result = run(pipeline, "--restore-from", "before-second")
        assert result.returncode == 0, result.stderr[-3000:]
        latest = store(pipeline).latest_completed()
        # A restore is the one case where the group's offsets may move backwards.
        assert group_offsets(pipeline) == dict(latest.completed.end_offsets) == ahead
        assert latest.claim.restored_from == "before-second"
        assert {r.tp.key: r.start for r in latest.claim.ranges} == dict(sp_ends)
        report = verify(pipeline, "--since-checkpoint", str(latest.checkpoint_id))
        assert report["ok"] and report["actual_outputs"] == 40, report
    # A shorter restore moves the group's offsets backwards, which only a restore may do.
    short = run(pipeline, "--restore-from", "before-second", "--max-records", "10")
    assert short.returncode == 0, short.stderr[-3000:]
    behind = dict(store(pipeline).latest_completed().completed.end_offsets)
    assert group_offsets(pipeline) == behind and sum(behind.values()) == sum(ahead.values()) - 30
    # The replays re-emitted the 40 records of the second checkpoint (and 10 more), as documented.
    assert len(read_committed(bootstrap, pipeline.sink)) + len(read_committed(bootstrap, pipeline.dead_letters)) == 190

    described = lockstep("savepoint", "describe", "before-second", *spec)
    assert "checkpoint 1" in described.stdout
    bad = lockstep("savepoint", "create", "../escape", *spec)
    assert bad.returncode == 2 and "savepoint name" in bad.stderr.lower()

    # Only the latest completed restore may move the group back: committing the short restore again
    # (an Airflow retry of its commit task) after a later checkpoint leaves the group where it is.
    from lockstep.steps.coordinator import Pipeline, commit

    short_id = store(pipeline).latest_completed().checkpoint_id
    assert run(pipeline).returncode == 0  # reads on from the short restore's ends
    assert group_offsets(pipeline) == ahead
    commit(Pipeline.open(pipeline.spec()), short_id)
    assert group_offsets(pipeline) == ahead, "an older restore committed again moved the group back"


def test_restore_by_time_re_emits_exactly_the_records_at_or_after_it(tmp_path, bootstrap, unique):
    """time:<ISO> starts each partition at its first record at or after the time (offsets-for-times);
    a partition with none that recent starts at its end, and the plan log says so."""
    import json
    from datetime import datetime

    from lockstep.model.output_contract import CHECKPOINT_HEADER

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=3)
    hour_ago = int(time.time() * 1000) - 3_600_000
    produce_orders(pipeline, 40, timestamp_ms=hour_ago)
    produce_orders(pipeline, 20, start=40, timestamp_ms=hour_ago + 600_000)  # ten minutes later
    assert run(pipeline).returncode == 0
    cut = datetime.fromtimestamp((hour_ago + 600_000) / 1000, UTC).isoformat().replace("+00:00", "Z")

    # First the plan of the restore: the 20 later records would be written again, nothing is new.
    from .engine_helpers import lockstep

    before = store(pipeline).latest_completed()
    planned = lockstep("restore-plan", "--spec", str(pipeline.spec_path), "--from", f"time:{cut}", "--json")
    assert planned.returncode == 0, planned.stderr[-3000:]
    diff = json.loads(planned.stdout)
    assert (diff["re_emitted"], diff["new"], diff["latest_completed"]) == (20, 0, before.checkpoint_id), diff
    assert {r["partition"]: r["current"] for r in diff["partitions"]} == dict(before.completed.end_offsets)
    assert list(store(pipeline).checkpoint_ids()) == [before.checkpoint_id]  # it claimed nothing
    text = lockstep("restore-plan", "--spec", str(pipeline.spec_path), "--from", f"time:{cut}").stdout
    assert "20 records would be written again, 0 read for the first time" in text, text
    print(text)  # the runbook's example (docs/operations.md), shown with -s

    result = run(pipeline, "--restore-from", f"time:{cut}")
    assert result.returncode == 0, result.stderr[-3000:]
    restored = store(pipeline).latest_completed()
    assert restored.claim.restored_from == f"time:{cut}" and restored.claim.start_source == f"time:{cut}"
    tagged = str(restored.checkpoint_id).encode()

    def of_restore(topic: str) -> list:
        return [m for m in read_committed(bootstrap, topic) if (CHECKPOINT_HEADER, tagged) in (m.headers() or [])]

    ids = sorted(json.loads(m.value())["order_id"] for m in of_restore(pipeline.sink))
    dead = sorted(m.value().decode() for m in of_restore(pipeline.dead_letters))
    assert ids == sorted(f"o{i}" for i in range(40, 60) if i % MALFORMED_EVERY), ids
    assert dead == sorted(f"not json {i}" for i in range(40, 60) if i % MALFORMED_EVERY == 0), dead
    report = verify(pipeline, "--since-checkpoint", str(restored.checkpoint_id))
    assert report["ok"], report

    # Later than every record: each partition starts at its end (nothing to replay), and says so.
    future = run(pipeline, "--restore-from", "time:2099-01-01T00:00:00Z")
    assert future.returncode == 0, future.stderr[-3000:]
    assert "have no record at or after that time; they start at their end" in future.stderr + future.stdout
    assert sum(r.count for r in store(pipeline).latest_completed().claim.ranges) == 0
    naive = run(pipeline, "--restore-from", "time:2026-11-20T10:00:00")
    assert naive.returncode != 0 and "the time has no zone" in naive.stderr + naive.stdout


def test_lingering_transactions_of_a_higher_past_parallelism_are_fenced(tmp_path, bootstrap, unique):
    """A dead writer of checkpoint 1 at task 7 (a parallelism since scaled down) must not
    stall read_committed readers: the next plan finds and fences it (the fencing invariant)."""
    import subprocess
    import sys

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    produce_orders(pipeline, 20)
    script = (
        "import os; from confluent_kafka import Producer\n"
        f"p = Producer({{'bootstrap.servers': '{bootstrap}', 'transactional.id': '{pipeline.prefix}-1-7'}})\n"
        "p.init_transactions(30); p.begin_transaction()\n"
        f"p.produce('{pipeline.sink}', b'zombie', partition=0); p.flush(30)\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert open_transactions(pipeline) == [f"{pipeline.prefix}-1-7"]

    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{pipeline.prefix}-1-7" in result.stderr  # the fencing is logged with the id
    assert open_transactions(pipeline) == []
    values = [m.value() for m in read_committed(bootstrap, pipeline.sink)]
    assert b"zombie" not in values and len(values) == 18
    assert verify(pipeline)["ok"]


def test_replay_from_a_savepoint_into_another_topic(tmp_path, bootstrap, unique):
    """docs/operations.md: copy a savepoint to a replay pipeline with its own sink topic."""
    import yaml

    from .engine_helpers import lockstep

    original = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    produce_orders(original, 30)
    assert run(original).returncode == 0
    assert lockstep("savepoint", "create", "base", "--spec", str(original.spec_path)).returncode == 0
    produce_orders(original, 20, start=30)
    assert run(original).returncode == 0

    replay = make_pipeline(tmp_path, bootstrap, f"r{unique}", partitions=2)
    doc = yaml.safe_load(replay.spec_path.read_text())
    doc["source"]["topics"] = [original.source]  # same input, its own sink, prefix and store
    replay.spec_path.write_text(yaml.safe_dump(doc))
    replay.source = original.source
    copied = lockstep("savepoint", "copy", "base", "--spec", str(original.spec_path), "--to-spec", str(replay.spec_path))
    assert copied.returncode == 0, copied.stderr
    result = run(replay, "--restore-from", "base")
    assert result.returncode == 0, result.stderr[-3000:]
    replayed = read_committed(bootstrap, replay.sink) + read_committed(bootstrap, replay.dead_letters)
    offsets = sorted(int(dict(m.headers())["lockstep.source.offset"]) for m in replayed)
    assert len(replayed) == 20 and offsets == sorted([o for o in range(15, 25)] * 2)
    assert verify(replay)["ok"]


def test_a_run_refuses_to_recover_a_checkpoint_whose_run_is_still_alive(tmp_path, bootstrap, unique):
    """Runs must not overlap: recovering a live run's checkpoint would fence it mid-flight. With
    ``checkpoints.pipelined`` off (the default, set here all the same) the run waits for it (here: reports it and
    exits); on, it plans on top of a prepared one and leaves it alone as well (tests/unit/test_pipelining.py,
    tests/integration/test_pipelined.py)."""
    import os
    import socket
    from datetime import datetime

    import yaml

    from lockstep.model.checkpoint import AbortedCheckpoint, CheckpointClaim
    from lockstep.rules.run_ownership import cli_run_id

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=1)
    doc = yaml.safe_load(pipeline.spec_path.read_text())
    doc["checkpoints"]["pipelined"] = False
    pipeline.spec_path.write_text(yaml.safe_dump(doc))
    s = store(pipeline)
    now = datetime.now(UTC).isoformat()
    live = cli_run_id(socket.gethostname(), os.getpid(), "live")  # this test process: alive
    s.claim(CheckpointClaim(pipeline.name, 1, live, now, (), "earliest"))
    refused = run(pipeline)
    assert refused.returncode == 2
    assert "checkpoint 1 is still in flight" in refused.stderr and f"pid {os.getpid()}" in refused.stderr
    assert s.view(1).status is CheckpointStatus.CLAIMED  # untouched

    dead = subprocess_pid_that_exited()
    s.claim(CheckpointClaim(pipeline.name, 2, cli_run_id(socket.gethostname(), dead, "dead"), now, (), "earliest"))
    s.mark_aborted(AbortedCheckpoint(pipeline.name, 1, now, "settled for the test", "-"))
    recovered = run(pipeline)  # checkpoint 2's owner is gone: recovered, then checkpoint 3 runs
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    assert s.view(2).status is CheckpointStatus.ABORTED and s.view(3).status is CheckpointStatus.COMPLETED


def subprocess_pid_that_exited() -> int:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def test_a_prefix_and_sink_topic_edited_while_a_checkpoint_is_in_flight(tmp_path, bootstrap, unique):
    """The claim pins what a checkpoint was planned with. A spec edited after its Spark
    tasks left their transactions open does not strand them: recovery fences them under the prefix
    they were written with, and the edit takes effect from the next checkpoint, exactly once."""
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    produce_orders(pipeline, 40)
    crashed = run(pipeline, failpoints="job.before_prepared=crash")
    assert crashed.returncode != 0
    old_prefix, old_sink = pipeline.prefix, pipeline.sink
    assert open_transactions(pipeline), "the crashed run's Spark tasks should have left transactions open"

    new_prefix, new_sink = f"tx2-{unique}", f"out2-{unique}"
    create_topics(bootstrap, {new_sink: 2})
    pipeline.rewrite(transactions={"id_prefix": new_prefix}, sink={"topic": new_sink})
    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    changed = [line for line in result.stderr.splitlines()
               if f"transactions.id_prefix changed from '{old_prefix}' to '{new_prefix}'" in line]
    assert len(changed) == 1 and "checkpoint 1" in changed[0], result.stderr[-3000:]
    assert f"fenced 2 transactional ids of failed attempts ({old_prefix}-1-0, {old_prefix}-1-1)" in result.stderr

    s = store(pipeline)
    assert s.view(1).status is CheckpointStatus.ABORTED
    replay = s.view(2)
    assert replay.status is CheckpointStatus.COMPLETED and replay.claim.ranges == s.view(1).claim.ranges
    assert (replay.claim.planned_with.id_prefix, replay.claim.planned_with.sink_topic) == (new_prefix, new_sink)
    assert all(t.transactional_id.startswith(f"{new_prefix}-2-") for t in replay.prepared.transactions)
    assert open_transactions(pipeline) == []  # nothing left under the old prefix
    pipeline.prefix, pipeline.sink = new_prefix, new_sink
    assert open_transactions(pipeline) == []  # nor under the new one
    assert read_committed(bootstrap, old_sink) == []  # the aborted attempt stays invisible
    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["expected_outputs"] == report["actual_outputs"] == 40


def test_status_counts_records_in_flight_and_verify_flags_a_hand_moved_group(tmp_path, bootstrap, unique):
    """``lockstep status`` tells claimed-but-uncommitted records from unread ones; ``verify``'s drift
    audit flags a consumer group moved away from the latest completed checkpoint."""
    import json
    import socket

    from lockstep.kafka import broker_offsets
    from lockstep.model.offsets import TopicPartition

    from .engine_helpers import lockstep

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, max_records=40)
    spec = ["--spec", str(pipeline.spec_path)]
    produce_orders(pipeline, 100)
    assert run(pipeline).returncode == 0  # checkpoint 1: 40 records
    crashed = run(pipeline, failpoints="job.after_prepared=crash")  # checkpoint 2: prepared, never committed
    assert crashed.returncode != 0 and store(pipeline).view(2).status is CheckpointStatus.PREPARED

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as statsd:
        statsd.bind(("127.0.0.1", 0))
        statsd.settimeout(10)
        status = lockstep("status", *spec, "--json", "--statsd", f"127.0.0.1:{statsd.getsockname()[1]}")
        assert status.returncode == 0, status.stderr[-3000:]
        doc = json.loads(status.stdout)
        assert doc["last_completed"] == 1 and doc["committed_from"] == "checkpoint 1"
        assert [(f["checkpoint_id"], f["status"], f["records"]) for f in doc["in_flight"]] == [(2, "prepared", 40)]
        assert doc["totals"] == {"in_flight": 40, "unread": 20}
        assert all(p["in_flight_checkpoints"] in ([2], []) for p in doc["partitions"])
        assert doc["oldest_unread_age_s"] is not None and doc["oldest_unread_age_s"] >= 0
        received = statsd.recv(65535).decode().splitlines()
    base = f"airflow.lockstep.{pipeline.name}"
    assert f"{base}.records_in_flight:40|g" in received and f"{base}.records_unread:20|g" in received
    text = lockstep("status", *spec).stdout
    assert "in flight: checkpoint 2 prepared (40 records" in text and "total: 40 in flight, 20 unread" in text

    assert run(pipeline).returncode == 0  # rolls checkpoint 2 forward, then checkpoint 3 takes the last 20
    doc = json.loads(lockstep("status", *spec, "--json").stdout)
    assert doc["last_completed"] == 3 and doc["in_flight"] == [] and doc["totals"] == {"in_flight": 0, "unread": 0}

    latest = store(pipeline).latest_completed()
    ends = dict(latest.completed.end_offsets)
    moved = next(k for k, v in ends.items() if v > 0)
    broker_offsets.publish_offsets({"bootstrap.servers": bootstrap}, pipeline.spec().source.consumer_group,
                           {TopicPartition.from_key(moved): ends[moved] + 5})  # "by hand", ahead of the checkpoint
    report = verify(pipeline)
    assert report["ok"] and not report["drift_ok"], report  # the output is exactly once; the group drifted
    (finding,) = report["drift"]
    assert finding["subject"] == moved and not finding["explained"]
    assert f"5 ahead of checkpoint {latest.checkpoint_id}'s end {ends[moved]}" in finding["message"]
    assert f"--to-offset {ends[moved]}" in finding["message"]


def test_verify_reports_a_range_retention_deleted_and_ignores_another_producers_records(tmp_path, bootstrap, unique):
    """Retention deleted part of a completed checkpoint's input, and other producers wrote to the sink
    (a plain producer, and another pipeline reading the same source): verify does not crash. It checks
    what is left, names the deleted offsets, counts the foreign records apart, and exits 2 (nothing
    wrong found, not everything checked)."""
    import json

    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient

    from .engine_helpers import lockstep

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    produce_orders(pipeline, 40)  # 20 per partition
    assert run(pipeline).returncode == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (done,) = admin.delete_records([KafkaPartition(pipeline.source, 0, 8)]).values()
    assert done.result(timeout=30).low_watermark == 8  # offsets 0..7 of partition 0 are gone
    foreign = Producer({"bootstrap.servers": bootstrap})
    foreign.produce(pipeline.sink, b"not from lockstep", partition=0)
    ours = read_committed(bootstrap, pipeline.sink)[0]
    headers = dict(ours.headers())
    assert headers[PIPELINE_HEADER] == pipeline.name.encode()  # the writer names the pipeline
    # What another pipeline that reads the same source writes into the same sink: the same provenance.
    foreign.produce(pipeline.sink, ours.value(), partition=0, headers={**headers, PIPELINE_HEADER: b"another"})
    foreign.flush(10)

    result = lockstep("verify", "--spec", str(pipeline.spec_path), "--json")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] and not report["complete"], report
    assert report["unchecked"] == [{"range": f"{pipeline.source}:0[0,8)", "records": 8,
                                    "reason": "checkpoint 1: deleted by retention (the log starts at 8)"}], report
    assert (report["covered_offsets"], report["expected_outputs"], report["actual_outputs"]) == (40, 32, 32), report
    assert (report["lost"], report["duplicated"], report["unexpected"], report["other_producers"]) == (0, 0, 0, 2)
    text = lockstep("verify", "--spec", str(pipeline.spec_path))
    assert text.returncode == 2 and f"not checked: {pipeline.source}:0[0,8) (8 offsets)" in text.stdout, text.stdout


def test_a_recreated_source_topic_is_refused_then_read_whole_under_the_policy(tmp_path, bootstrap, unique):
    """The source topic is deleted and created again, and grows past the stored offsets: the next run
    refuses (never a silent skip into the new log), names the topic and both ids, and so does a restore
    from a savepoint of the old topic; with ``source.on_topic_recreated: earliest`` it reads all of the
    new topic, exactly once."""
    import yaml
    from confluent_kafka.admin import AdminClient

    from .engine_helpers import lockstep

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    produce_orders(pipeline, 40)  # 20 per partition
    assert run(pipeline).returncode == 0
    assert lockstep("savepoint", "create", "before", "--spec", str(pipeline.spec_path)).returncode == 0
    old_ids = store(pipeline).view(1).claim.topic_ids
    assert set(old_ids) == {pipeline.source}

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([pipeline.source])[pipeline.source].result(timeout=30)
    deadline = time.monotonic() + 60
    while True:  # the broker creates a deleted topic's name again only once the deletion is done
        try:
            create_topics(bootstrap, {pipeline.source: 2})
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    produce_orders(pipeline, 160)  # 80 per partition: offsets 0..79, past the stored 20

    refused = run(pipeline)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert f"{pipeline.source}: topic id {old_ids[pipeline.source]} at checkpoint 1" in refused.stderr, refused.stderr
    assert "source.on_topic_recreated: earliest" in refused.stderr.strip().splitlines()[-1], refused.stderr
    restore = run(pipeline, "--restore-from", "before")
    assert restore.returncode == 2 and "cannot restore from savepoint:before" in restore.stderr, restore.stderr
    assert "--restore-from time:" in restore.stderr.strip().splitlines()[-1], restore.stderr
    assert list(store(pipeline).checkpoint_ids()) == [1]

    spec = yaml.safe_load(pipeline.spec_path.read_text())
    spec["source"]["on_topic_recreated"] = "earliest"
    pipeline.spec_path.write_text(yaml.safe_dump(spec))
    assert run(pipeline).returncode == 0
    view = store(pipeline).view(2)
    assert view.status is CheckpointStatus.COMPLETED and view.prepared.records_in == 160
    assert view.completed.topic_ids[pipeline.source] != old_ids[pipeline.source]
    report = verify(pipeline, "--since-checkpoint", "2")  # checkpoint 1's offsets name the old topic's records
    assert report["ok"] and report["expected_outputs"] == report["actual_outputs"] == 160, report


def test_records_retention_deleted_before_they_were_read_are_refused_then_skipped_when_allowed(
        tmp_path, bootstrap, unique):
    """Retention deletes records the next checkpoint must read: the plan refuses, naming the checkpoint,
    the deleted offsets and the option; with ``checkpoints.skip_deleted_ranges`` it skips exactly those
    records, records the skip in the claim, and reads the rest."""
    import yaml
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2)
    produce_orders(pipeline, 40)  # offsets 0..19 on each partition
    assert run(pipeline).returncode == 0
    produce_orders(pipeline, 40, start=40)  # offsets 20..39
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (done,) = admin.delete_records([KafkaPartition(pipeline.source, 0, 30)]).values()
    assert done.result(timeout=30).low_watermark == 30

    refused = run(pipeline)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "checkpoint 2 cannot be planned: Kafka retention deleted records it must read" in refused.stderr
    assert f"{pipeline.source}:0: offsets 20 to 29 (10 records) were deleted" in refused.stderr, refused.stderr
    assert "checkpoints.skip_deleted_ranges: true" in refused.stderr.strip().splitlines()[-1]

    spec = yaml.safe_load(pipeline.spec_path.read_text())
    spec["checkpoints"]["skip_deleted_ranges"] = True
    pipeline.spec_path.write_text(yaml.safe_dump(spec))
    assert run(pipeline).returncode == 0
    view = store(pipeline).view(2)
    assert view.status is CheckpointStatus.COMPLETED and dict(view.claim.skipped) == {f"{pipeline.source}:0": 10}
    assert view.prepared.records_in == 30


def test_many_source_partitions_go_through_at_most_sink_parallelism_transactions_and_survive_a_crash_mid_commit(
        tmp_path, bootstrap, unique):
    """docs/semantics.md, Transactions per checkpoint: 48 source partitions, sink.parallelism 3. The
    checkpoint writes through at most 3 transactions, each carrying whole source partitions (every
    source partition in exactly one); the commit dies after its first transaction, and the next run
    rolls the checkpoint forward. Every order is in the sink once, with its provenance, and the outputs
    of each source partition keep their order in each sink partition."""
    from lockstep.model.failpoints import CRASH_EXIT_CODE
    from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
    from lockstep.model.transactional_ids import transactional_id

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=48, parallelism=3)
    produce_orders(pipeline, 960)
    crashed = run(pipeline, failpoints="commit.between_commits=crash")
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr[-3000:]
    view = store(pipeline).view(1)
    assert view.status is CheckpointStatus.PREPARED and view.claim.task_count == 3
    transactions = view.prepared.transactions
    assert sorted(t.transactional_id for t in transactions) == [transactional_id(pipeline.prefix, 1, i) for i in range(3)]
    carried = [tp.partition for t in transactions for tp in t.sources]
    assert sorted(carried) == list(range(48)), carried  # each source partition whole, in one transaction
    assert open_transactions(pipeline), "the crash left no transaction open"

    resumed = run(pipeline)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert store(pipeline).view(1).status is CheckpointStatus.COMPLETED and open_transactions(pipeline) == []
    report = verify(pipeline)
    assert report["ok"] and report["lost"] == 0 and report["duplicated"] == 0, report
    seen: dict[tuple[int, int], list[int]] = {}  # (sink partition, source partition) -> source offsets in sink order
    outputs = sorted(read_committed(bootstrap, pipeline.sink), key=lambda m: (m.partition(), m.offset()))
    for msg in outputs:
        headers = dict(msg.headers())
        assert headers[SOURCE_TOPIC].decode() == pipeline.source, headers
        seen.setdefault((msg.partition(), int(headers[SOURCE_PARTITION])), []).append(int(headers[SOURCE_OFFSET]))
    assert {source for _, source in seen} == set(range(48))
    for where, offsets in seen.items():
        assert offsets == sorted(offsets), f"sink partition {where[0]}, source partition {where[1]}: {offsets}"
    assert len(outputs) == 960 - 960 // MALFORMED_EVERY


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_outputs_of_one_source_partition_keep_their_order_in_each_sink_partition(tmp_path, bootstrap, unique, writer):
    """docs/semantics.md, Ordering: two outputs of the same source partition that land in the same sink
    partition appear in input order, within a checkpoint and across checkpoints."""
    from lockstep.model.output_contract import SOURCE_OFFSET, SOURCE_PARTITION

    pipeline = make_pipeline(tmp_path, bootstrap, f"{unique}{writer[0]}", partitions=3, max_records=150, writer=writer)
    produce_orders(pipeline, 300)
    for _ in range(2):  # 150 records each: two checkpoints
        assert run(pipeline).returncode == 0
    seen: dict[tuple[int, int], list[int]] = {}  # (sink partition, source partition) -> source offsets in sink order
    for msg in sorted(read_committed(bootstrap, pipeline.sink), key=lambda m: (m.partition(), m.offset())):
        headers = dict(msg.headers())
        seen.setdefault((msg.partition(), int(headers[SOURCE_PARTITION])), []).append(int(headers[SOURCE_OFFSET]))
    assert len({sink for sink, _ in seen}) > 1 and len({source for _, source in seen}) == 3, seen.keys()
    for where, offsets in seen.items():
        assert offsets == sorted(offsets), f"sink partition {where[0]}, source partition {where[1]}: {offsets}"
    assert sum(len(o) for o in seen.values()) == 300 - 300 // MALFORMED_EVERY


@pytest.mark.parametrize(("mode", "writer"), [("connect", "jvm"), ("connect", "python")])
def test_a_partial_commit_whose_rest_timed_out_is_repaired_by_the_next_run(tmp_path, bootstrap, unique, monkeypatch,
                                                                            mode, writer):
    """The commit dies after its first transaction; the broker times the others out. The next run
    completes the checkpoint "after repair" and reads the lost transactions' input again: nothing
    lost, nothing twice, with either writer (each records which source partitions its transactions
    carry). The repair is the plan's and the commit's, in the CLI: submit mode would only add its
    spark-submits (about a minute)."""
    from lockstep.kafka.committer import TransactionCommitter
    from lockstep.model.failpoints import FailpointError
    from lockstep.model.transactions import TransactionState
    from lockstep.steps.coordinator import Pipeline, commit, plan
    from lockstep.steps.run import run_checkpoint

    from .engine_helpers import lockstep

    # A transaction per partition (sink.parallelism 3), so that two of the three can be lost.
    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=3, timeout_ms=15_000, margin_ms=1000,
                             writer=writer, mode=mode, parallelism=3)
    produce_orders(pipeline, 150)
    p = Pipeline.open(pipeline.spec())
    claim = plan(p, run_id="repair-test").claim
    cid = claim.checkpoint_id
    run_checkpoint(p.spec, cid, p.store)
    prepared = p.store.view(cid).prepared
    assert len(prepared.transactions) == 3 and all(t.sources for t in prepared.transactions)
    monkeypatch.setenv("LOCKSTEP_FAILPOINTS", "commit.between_commits=raise")
    with pytest.raises(FailpointError):
        commit(p, cid)  # the first transaction is committed, then the commit dies
    monkeypatch.delenv("LOCKSTEP_FAILPOINTS")
    first, *rest = prepared.transactions
    lost = {t.transactional_id for t in rest}
    deadline = time.monotonic() + 90
    with TransactionCommitter(bootstrap) as committer:
        while any(o.state != TransactionState.COMPLETE_ABORT for o in committer.describe(sorted(lost)).values()):
            assert time.monotonic() < deadline, "the broker never timed the other transactions out"
            time.sleep(0.5)

    result = run(pipeline)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"checkpoint {cid}: completed after repair" in result.stderr
    repaired = store(pipeline).view(cid)
    assert repaired.status is CheckpointStatus.COMPLETED and repaired.status_text == "completed after repair"
    assert set(repaired.completed.repair.lost) == lost
    given_back = tuple(sorted(r for r in claim.ranges if r.tp in {tp for t in rest for tp in t.sources}))
    assert repaired.completed.repair.replayed == given_back and len(given_back) == 2
    assert repaired.completed.committed == (first.transactional_id,)
    after = store(pipeline).view(cid + 1)
    assert after.status is CheckpointStatus.COMPLETED
    starts = {r.tp: r.start for r in after.claim.ranges}
    assert all(starts[r.tp] == r.start for r in given_back), "the next checkpoint read the lost input again"

    listing = lockstep("checkpoints", "--spec", str(pipeline.spec_path))
    assert listing.returncode == 0 and "completed after repair" in listing.stdout, listing.stdout
    assert "given back to the next checkpoint" in listing.stdout
    report = verify(pipeline)
    assert report["ok"] and report["actual_outputs"] == 150, report
    assert report["lost"] == report["duplicated"] == 0 and str(cid) in report["repaired"], report
    assert open_transactions(pipeline) == []
    # Computed again, the repaired checkpoint writes only what it delivered; the next one, the given-back share.
    assert same_output(pipeline)["compared"] == [cid, cid + 1]


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_a_retried_spark_task_fences_its_first_attempt_and_writes_exactly_once(tmp_path, bootstrap, unique, writer):
    """docs/semantics.md, Spark task retry: each task's first attempt fails after its first record
    (`raise-first-attempt`); the master local[2,2] lets Spark retry each task once. The retry reuses
    the task's transactional id, so its init fences the first attempt; it writes all of the task's
    records, the checkpoint commits, and read_committed readers see every output once."""
    from lockstep.model.output_contract import MID_PRODUCE_AFTER_RECORDS, mid_produce_message
    from lockstep.model.transactional_ids import transactional_id

    pipeline = make_pipeline(tmp_path, bootstrap, unique, partitions=2, writer=writer, master="local[2,2]")
    produce_orders(pipeline, 100)

    result = run(pipeline, failpoints="job.mid_produce=raise-first-attempt")
    assert result.returncode == 0, result.stderr[-3000:]
    for task in (0, 1):  # each task's first attempt failed (Spark's log of the lost attempt)
        raised = f"failpoint job.mid_produce raised{mid_produce_message(task, MID_PRODUCE_AFTER_RECORDS)} in the " \
                 "task's first attempt"
        assert raised in result.stderr, result.stderr[-3000:]
    view = store(pipeline).view(1)
    assert view.status is CheckpointStatus.COMPLETED
    transactions = view.prepared.transactions
    assert sorted(t.transactional_id for t in transactions) == [transactional_id(pipeline.prefix, 1, t) for t in (0, 1)]
    # A fresh transactional id's first init gets epoch 0: a later epoch is a second init of the same id,
    # the retry's, which fenced the first attempt.
    assert all(t.epoch > 0 for t in transactions), transactions
    assert sum(t.records + t.dead_letters for t in transactions) == 100

    report = verify(pipeline)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (0, 0, 0), report
    assert report["ok"] and report["expected_outputs"] == report["actual_outputs"] == 100, report
    assert open_transactions(pipeline) == []
