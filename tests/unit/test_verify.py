"""What verify decides without services: which covered offsets can still be checked, how an output
record's provenance is read, which records are another producer's, and the exit code."""
from __future__ import annotations

import pytest

from lockstep.model.offsets import OffsetRange, TopicPartition
from lockstep.model.output_contract import CHECKPOINT_HEADER, REPLAY_HEADER, SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
from lockstep.ops.verify import (
    Outputs,
    Provenance,
    Unchecked,
    VerifyReport,
    clip_to_log_start,
    exit_code,
    provenance,
    within,
)
from tests.support.fake_pipeline import DEAD_LETTERS, SINK, SOURCE, spec


def headers(topic: str = SOURCE, partition: bytes | None = b"0", offset: bytes | None = b"7", **more: bytes | None
            ) -> dict[str, bytes | None]:
    return {SOURCE_TOPIC: topic.encode(), SOURCE_PARTITION: partition, SOURCE_OFFSET: offset, **more}


def test_ranges_below_the_log_start_are_cut_off_and_named_with_their_checkpoint():
    ranges = {1: (OffsetRange(SOURCE, 0, 0, 10), OffsetRange(SOURCE, 1, 0, 10)), 2: (OffsetRange(SOURCE, 0, 10, 20),)}
    kept, deleted = clip_to_log_start(ranges, {TopicPartition(SOURCE, 0): 15, TopicPartition(SOURCE, 1): 0})
    assert kept == {1: (OffsetRange(SOURCE, 1, 0, 10),), 2: (OffsetRange(SOURCE, 0, 15, 20),)}
    assert [(u.range, u.reason) for u in deleted] == [
        (OffsetRange(SOURCE, 0, 0, 10), "checkpoint 1: deleted by retention (the log starts at 15)"),
        (OffsetRange(SOURCE, 0, 10, 15), "checkpoint 2: deleted by retention (the log starts at 15)"),
    ]


def test_nothing_is_cut_while_the_log_still_holds_every_range():
    ranges = {1: (OffsetRange(SOURCE, 0, 5, 10),)}
    assert clip_to_log_start(ranges, {TopicPartition(SOURCE, 0): 5}) == (ranges, [])


def test_within_is_half_open_and_per_partition():
    gone = [OffsetRange(SOURCE, 0, 10, 15)]
    assert within((SOURCE, 0, 10), gone) and within((SOURCE, 0, 14), gone)
    assert not within((SOURCE, 0, 15), gone) and not within((SOURCE, 1, 12), gone) and not within(("x", 0, 12), gone)


def test_provenance_reads_the_headers_and_tells_absent_from_unreadable():
    assert provenance(headers()) == (SOURCE, 0, 7)
    assert provenance({"currency": b"EUR"}) is None  # no provenance at all: another producer's record
    with pytest.raises(Provenance, match=f"{SOURCE_OFFSET} missing or empty"):
        provenance(headers(offset=None))
    with pytest.raises(Provenance, match="unreadable"):
        provenance(headers(partition=b"zero"))


def test_outputs_sort_records_into_own_replayed_unreadable_and_other_producers():
    s = spec()
    out = Outputs()
    out.add(s, None, f"{SINK}:0@0", SINK, headers())
    out.add(s, None, f"{DEAD_LETTERS}:0@0", DEAD_LETTERS, headers(offset=b"8"))
    out.add(s, None, f"{SINK}:0@1", SINK, headers(offset=b"9", **{REPLAY_HEADER: b"3"}))
    out.add(s, None, f"{SINK}:0@2", SINK, {"k": b"v"})  # no provenance
    out.add(s, None, f"{SINK}:0@3", SINK, headers(topic="another-pipelines-source"))
    out.add(s, None, f"{SINK}:0@4", SINK, headers(offset=None))
    assert dict(out.actual) == {(SOURCE, 0, 7): 1, (SOURCE, 0, 8): 1}
    assert dict(out.replayed) == {(SOURCE, 0, 9): 1}
    assert dict(out.in_sink) == {(SOURCE, 0, 7): 1, (SOURCE, 0, 9): 1}  # the dead letter is not in the sink
    assert out.other_producers == [f"{SINK}:0@2", f"{SINK}:0@3"]
    assert out.unreadable == [f"{SINK}:0@4 (provenance header {SOURCE_OFFSET} missing or empty)"]


def test_a_tables_rows_are_the_sink_topics_records_and_those_of_the_replays_that_wrote_the_table():
    """A replay writes the table beside the topic; one made before replays kept ``sink.iceberg`` wrote the topic
    alone: its records are no rows of the table, and verify must not call them lost."""
    s = spec()
    out = Outputs()
    out.add(s, None, f"{SINK}:0@0", SINK, headers())
    out.add(s, None, f"{SINK}:0@1", SINK, headers(offset=b"8", **{REPLAY_HEADER: b"2"}))  # replay 2: the topic alone
    out.add(s, None, f"{SINK}:0@2", SINK, headers(offset=b"9", **{REPLAY_HEADER: b"3"}))  # replay 3: the table too
    out.add(s, None, f"{DEAD_LETTERS}:0@0", DEAD_LETTERS, headers(offset=b"10", **{REPLAY_HEADER: b"3"}))
    assert dict(out.table_records(lambda cid: cid == 3)) == {(SOURCE, 0, 7): 1, (SOURCE, 0, 9): 1}
    assert dict(out.table_records(lambda cid: False)) == {(SOURCE, 0, 7): 1}


def test_outputs_of_checkpoints_before_since_are_left_out():
    out = Outputs()
    out.add(spec(), 5, f"{SINK}:0@0", SINK, headers(**{CHECKPOINT_HEADER: b"4"}))
    out.add(spec(), 5, f"{SINK}:0@1", SINK, headers(offset=b"8", **{CHECKPOINT_HEADER: b"5"}))
    assert dict(out.actual) == {(SOURCE, 0, 8): 1}


def report(**fields: object) -> VerifyReport:
    r = VerifyReport([1], 10, 10, 10)
    for name, value in fields.items():
        setattr(r, name, value)
    return r


def test_exit_codes_say_exactly_once_found_wrong_or_not_all_checked():
    gap = [Unchecked(OffsetRange(SOURCE, 0, 0, 5), "checkpoint 1: deleted by retention (the log starts at 5)")]
    assert exit_code(report()) == 0
    assert exit_code(report(other_producers=[f"{SINK}:0@2"])) == 0  # ignored, not a finding
    assert exit_code(report(unchecked=gap)) == 2
    assert exit_code(report(unreadable=[f"{SINK}:0@4 (...)"])) == 2
    assert exit_code(report(unchecked=gap, lost=[(SOURCE, 0, 7)])) == 1  # a finding wins over a gap
    assert exit_code(report(), drift_ok=False) == 1


def test_the_report_names_what_was_not_checked_and_what_was_ignored():
    gap = Unchecked(OffsetRange(SOURCE, 0, 0, 5), "checkpoint 1: deleted by retention (the log starts at 5)")
    r = report(unchecked=[gap], unreadable=[f"{SINK}:0@4 (bad)"], other_producers=[f"{SINK}:0@2"])
    text = r.summary()
    assert f"not checked: {SOURCE}:0[0,5) (5 offsets): checkpoint 1: deleted by retention" in text
    assert f"1 output records with unreadable provenance headers, for example {SINK}:0@4 (bad)" in text
    assert f"ignored: 1 records of other producers in the sink topics, for example {SINK}:0@2" in text
    doc = r.to_json()
    assert doc["complete"] is False and doc["unchecked_offsets"] == 5 and doc["other_producers"] == 1
    assert doc["unchecked"] == [{"range": f"{SOURCE}:0[0,5)", "records": 5, "reason": gap.reason}]


def test_a_repaired_checkpoint_is_expected_without_the_ranges_it_gave_back_and_is_named():
    from lockstep.model.checkpoint import CheckpointClaim, CompletedCheckpoint, PreparedCheckpoint, Repair
    from lockstep.model.offsets import OffsetRange
    from lockstep.ops.verify import completed_ranges
    from lockstep.store.checkpoint_store import CheckpointStore
    from tests.support.fake_s3 import FakeS3

    store = CheckpointStore(FakeS3(), "lockstep", "unit/orders", "orders")
    kept, given = OffsetRange(SOURCE, 0, 0, 9), OffsetRange(SOURCE, 1, 3, 7)
    store.claim(CheckpointClaim("orders", 1, "r1", "2026-01-01T00:00:00+00:00", (kept, given), "earliest"))
    store.write_prepared(PreparedCheckpoint("orders", 1, "2026-01-01T00:01:00+00:00", (), 13, 13, 0, 1.0))
    repair = Repair({"p-1-1": "transaction p-1-1 timed out"}, (given,))
    store.mark_completed(CompletedCheckpoint("orders", 1, "2026-01-01T00:02:00+00:00",
                                             {f"{SOURCE}:0": 9, f"{SOURCE}:1": 3}, ("p-1-0",), repair=repair))
    repaired: dict[int, str] = {}
    assert completed_ranges(store, None, repaired) == {1: (kept,)}
    assert repaired == {1: repair.summary}
    text = report(repaired=repaired).summary()
    assert f"checkpoint 1 completed after repair: {repair.summary}" in text


def test_records_of_another_pipeline_reading_the_same_source_are_other_producers():
    from lockstep.model.output_contract import PIPELINE_HEADER

    s = spec()
    out = Outputs()
    out.add(s, None, f"{SINK}:0@0", SINK, headers(**{PIPELINE_HEADER: s.name.encode()}))
    out.add(s, None, f"{SINK}:0@1", SINK, headers(offset=b"8", **{PIPELINE_HEADER: b"another-pipeline"}))
    out.add(s, None, f"{SINK}:0@2", SINK, headers(offset=b"9", **{PIPELINE_HEADER: f"{s.name}-replay".encode(),
                                                                  REPLAY_HEADER: b"3"}))
    out.add(s, None, f"{SINK}:0@3", SINK, headers(offset=b"10"))  # written before the header existed: judged as ours
    assert dict(out.actual) == {(SOURCE, 0, 7): 1, (SOURCE, 0, 10): 1}
    assert dict(out.replayed) == {(SOURCE, 0, 9): 1}
    assert out.other_producers == [f"{SINK}:0@1"]


def test_with_routes_an_output_in_another_topic_than_its_route_is_misrouted():
    from lockstep.ops.verify import misrouted

    s = spec(sink={"topic": SINK, "dead_letter_topic": DEAD_LETTERS, "routes": {"big": "data.big"}})
    out = Outputs()
    out.add(s, None, "big:0@0", "big", headers(offset=b"1"))
    out.add(s, None, f"{SINK}:0@0", SINK, headers(offset=b"2"))
    out.add(s, None, f"{DEAD_LETTERS}:0@0", DEAD_LETTERS, headers(offset=b"3"))  # dead letters are not routed
    out.add(s, None, f"{SINK}:0@1", SINK, headers(offset=b"4"))
    assert out.topics == {(SOURCE, 0, 1): {"big"}, (SOURCE, 0, 2): {SINK}, (SOURCE, 0, 4): {SINK}}
    assert dict(out.in_sink) == {(SOURCE, 0, 1): 1, (SOURCE, 0, 2): 1, (SOURCE, 0, 4): 1}
    expected = {(SOURCE, 0, 1): {"big"}, (SOURCE, 0, 2): {"big"}, (SOURCE, 0, 3): {DEAD_LETTERS},
                (SOURCE, 0, 4): {DEAD_LETTERS}}
    assert misrouted(expected, out.topics, []) == [((SOURCE, 0, 2), SINK, "big"), ((SOURCE, 0, 4), SINK, DEAD_LETTERS)]
    assert misrouted(expected, out.topics, [OffsetRange(SOURCE, 0, 2, 3)]) == \
        [((SOURCE, 0, 4), SINK, DEAD_LETTERS)], "an offset retention removed is left to the counts"
    wrong = report(misrouted=[((SOURCE, 0, 2), SINK, "big")])
    assert not wrong.ok and wrong.to_json()["misrouted_sample"] == [f"{SOURCE}:0@2 in {SINK}, expected big"]
    assert "misrouted: 1 outputs are in another topic than sink.routes send them to" in wrong.summary()


def test_verify_decodes_each_checkpoint_with_the_schema_ids_its_claim_pinned_not_the_registrys_latest(monkeypatch):
    """The schemas a checkpoint's run read and wrote with are its claim's (`schema_ids`); verify recomputes each
    checkpoint with those (a Formats per set of pins), whatever versions the registry holds since."""
    from types import SimpleNamespace

    from lockstep.formats import codecs
    from lockstep.model.checkpoint import CheckpointClaim, CompletedCheckpoint, PreparedCheckpoint
    from lockstep.ops import verify
    from lockstep.store.checkpoint_store import CheckpointStore
    from tests.support.fake_s3 import FakeS3

    store = CheckpointStore(FakeS3(), "lockstep", "unit/orders", "orders")
    pinned = {1: {"source.value": 3, "sink.value": 4}, 2: {"source.value": 3, "sink.value": 4},
              3: {"source.value": 5, "sink.value": 6}}
    ranges = {cid: (OffsetRange(SOURCE, 0, 10 * (cid - 1), 10 * cid),) for cid in pinned}
    for cid, ids in pinned.items():
        at = "2026-01-01T00:00:00+00:00"
        store.claim(CheckpointClaim("orders", cid, f"r{cid}", at, ranges[cid], "earliest", schema_ids=ids))
        store.write_prepared(PreparedCheckpoint("orders", cid, at, (), 10, 10, 0, 1.0))
        store.mark_completed(CompletedCheckpoint("orders", cid, at, {f"{SOURCE}:0": 10 * cid}, ()))
    schemas: dict[int, object] = {}
    assert verify.completed_ranges(store, None, schemas=schemas) == ranges  # type: ignore[arg-type]
    assert schemas == pinned

    built: list[dict[str, int] | None] = []
    read: list[OffsetRange] = []
    topics: list[object] = []  # the topics each Formats is told the checkpoints read (their subjects must exist)

    class Frame:
        def __init__(self, rs: tuple[OffsetRange, ...] = ()) -> None:
            self.rs, self.columns = rs, ["topic", "partition", "offset"]

        def collect(self) -> list[dict[str, object]]:
            return [{"topic": r.topic, "partition": r.partition, "offset": o} for r in self.rs
                    for o in range(r.start, r.end)]

    class Formats:
        def __init__(self, spec: object, pinned: dict[str, int] | None = None, read: object = None) -> None:
            built.append(None if pinned is None else dict(pinned))
            topics.append(read)

        def transformed(self, df: Frame, transform: object, enrich: object = None, enrich_errors: bool = False,
                        **more: object) -> tuple[Frame, None]:
            return df, None

        @staticmethod
        def with_dead_letters(out: Frame, decoded: None, columns: object) -> Frame:
            return out

    monkeypatch.setattr(codecs, "Formats", Formats)
    monkeypatch.setattr(verify, "read_ranges", lambda spark, kafka, rs: read.extend(rs) or Frame(rs))
    monkeypatch.setattr(verify, "kafka_config", lambda *args: {})
    monkeypatch.setattr(verify, "forget_read_settings", lambda spark: None)
    expected = verify.expected_outputs(spec(), SimpleNamespace(), ranges, [], schemas=schemas)  # type: ignore[arg-type]
    assert sum(expected.values()) == 30 and read == [r for rs in ranges.values() for r in rs]
    assert built == [pinned[1], pinned[3]], "one Formats per set of pins, each the claim's"
    assert topics == [{r.topic for rs in ranges.values() for r in rs if not r.is_empty}] * 2


def test_stateful_verify_reads_each_set_of_pinned_schema_ids_apart_and_refuses_pins_that_came_back() -> None:
    """A stateful pipeline's input is recomputed with the schema ids each checkpoint's claim pinned: the
    checkpoints that share a set of pins are read as one range per partition, and a set of pins whose
    checkpoints are not contiguous (the schemas changed and changed back) leaves the state unchecked."""
    from types import SimpleNamespace

    from lockstep.ops.verify_state import _by_pins

    def view(pins: dict[str, int], *ranges: OffsetRange) -> SimpleNamespace:
        return SimpleNamespace(claim=SimpleNamespace(schema_ids=pins), delivered_ranges=ranges)

    v1, v2 = {"source.value": 1}, {"source.value": 2}
    views = [view(v1, OffsetRange("in", 0, 0, 5)), view(v1, OffsetRange("in", 0, 5, 9), OffsetRange("in", 1, 0, 4)),
             view(v2, OffsetRange("in", 0, 9, 12), OffsetRange("in", 1, 4, 4))]
    assert _by_pins(views) == {  # type: ignore[arg-type]
        (("source.value", 1),): (OffsetRange("in", 0, 0, 9), OffsetRange("in", 1, 0, 4)),
        (("source.value", 2),): (OffsetRange("in", 0, 9, 12),),
    }
    back = _by_pins([*views, view(v1, OffsetRange("in", 0, 12, 15))])  # type: ignore[list-item]
    assert isinstance(back, str) and "not contiguous" in back and "{'source.value': 1}" in back
