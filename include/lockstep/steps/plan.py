"""The plan step: recover, then fix the ranges of the next checkpoint and claim it; and the
restore plan (what a restore would read again or skip) without claiming anything.

Where to start and where to stop are ``lockstep.rules.start_offsets`` and ``lockstep.rules.ranges``
(pure); this module reads the offsets and the store they decide from.
"""
from __future__ import annotations

__all__ = [
    "plan", "restore_plan",
]

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from lockstep.errors import TerminalError, TopicRecreatedError, TransientError
from lockstep.formats.resolution import pin
from lockstep.kafka import broker_offsets, topics
from lockstep.model import failpoints
from lockstep.model.checkpoint import (
    CheckpointClaim,
    CheckpointView,
    History,
    Rerun,
    SpecFingerprint,
)
from lockstep.model.offsets import TopicPartition, offsets_from_json
from lockstep.model.state_manifest import StateManifest
from lockstep.rules.pinned import pinned_clock, planned_with
from lockstep.rules.pipelining import plan_on_top
from lockstep.rules.ranges import RangePlan, plan_ranges
from lockstep.rules.replay import fingerprint, replay_of, replayed
from lockstep.rules.start_offsets import (
    READ_BEFORE,
    TIME_PREFIX,
    OffsetSource,
    RestoreRow,
    StartOffsets,
    after_recreation,
    choose_start_offsets,
    describe_dropped,
    describe_restore,
    offsets_at_time,
    parse_restore_time,
    recreated_topics,
    restore_diff,
    restore_totals,
)
from lockstep.rules.state_base import base_refusal
from lockstep.rules.watermarks import fires_without_records
from lockstep.spec import PipelineSpec
from lockstep.steps.code_version import code_changes, code_fingerprint
from lockstep.steps.pipeline import Pipeline, now_iso, publish_end_offsets
from lockstep.steps.recover import in_flight, live_in_flight, recover
from lockstep.tables.pinning import reused_table_pin, table_pin
from lockstep.tables.pins import TablePin, TableVersion

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    claim: CheckpointClaim
    range_plan: RangePlan
    dry_run: bool = False
    #: with ``restore_from``: per partition, what the restore writes again (as ``lockstep restore-plan``)
    restore_rows: tuple[RestoreRow, ...] = ()

    @property
    def restore_summary(self) -> dict[str, int] | None:
        if not self.restore_rows:
            return None
        return restore_totals(self.restore_rows)

    def describe(self) -> str:
        ranges = ", ".join(str(r) for r in self.claim.ranges if not r.is_empty) or "no new records"
        return (f"checkpoint {self.claim.checkpoint_id}: {self.range_plan.total_records} records from "
                f"{self.claim.start_source}: {ranges}")


@dataclass(frozen=True)
class _Source:
    """The source topics as the brokers have them when the plan starts, read once: every decision of the
    plan (where to start, where to stop, whether a topic was recreated) is made against the same figures."""

    partitions: list[TopicPartition]
    topic_ids: dict[str, str]
    log_start: dict[TopicPartition, int]
    stable_end: dict[TopicPartition, int]


@dataclass(frozen=True)
class _Pins:
    """What a claim pins beside its ranges, so that every attempt over it (a retry, a repair's recomputation,
    a replay) decides as the first did: the state it starts from, its clock, its schemas, its tables' versions,
    and the spec fingerprint they came from."""

    state_base: StateManifest | None
    clock_ms: int
    fires_timers: bool
    schema_ids: dict[str, int]
    tables: dict[str, TablePin]
    fingerprint: SpecFingerprint
    replays: int | None


def plan(p: Pipeline, run_id: str, restore: str | None = None, max_records: int | None = None,
         dry_run: bool = False, run_alive: Callable[[str], bool | None] | None = None) -> Plan:
    """Recover, then fix the ranges of the next checkpoint and claim it (unless ``dry_run``). Each step is a
    helper below, in the order they run: recover, read the source, choose the starts, fix the ranges, pin
    what the run will read and write with, then claim."""
    if max_records is not None and max_records < 1:
        raise TerminalError(f"a record budget of {max_records} takes nothing: give 1 or more, or none for the "
                            f"spec's {p.spec.checkpoints.max_records}")
    started = time.monotonic()
    history, on_top = _recovered_history(p, run_id, restore, dry_run, run_alive)
    latest, next_id = history.latest, history.next_id
    if latest is not None and not dry_run:
        _republish(p, latest)
    source = _read_source(p)
    starts = _start_offsets(p, restore, on_top or latest, next_id, source)
    restore_rows = _restore_rows(p, restore, latest, next_id, starts, source)
    ranges = _ranges(p, restore, max_records, next_id, starts, source)
    pins = _pins(p, restore, history, ranges, dry_run, on_top)
    claim = CheckpointClaim(
        pipeline=p.spec.name, checkpoint_id=next_id, run_id=run_id, claimed_at=now_iso(), ranges=ranges.ranges,
        start_source=starts.source, restored_from=restore,
        skipped={tp.key: n for tp, n in ranges.skipped.items()}, planned_with=planned_with(p.spec),
        topic_ids=source.topic_ids, state_base=pins.state_base, clock_ms=pins.clock_ms,
        fires_timers=pins.fires_timers, rerun=None if on_top else _rerun(p.spec, restore, latest),
        schema_ids=pins.schema_ids,
        tables=pins.tables, fingerprint=pins.fingerprint, replays=pins.replays,
        after=on_top.checkpoint_id if on_top else None, code=code_fingerprint(p.spec),
    )
    return _claim(p, Plan(claim, ranges, dry_run, restore_rows), started)


def _recovered_history(p: Pipeline, run_id: str, restore: str | None, dry_run: bool,
                       run_alive: Callable[[str], bool | None] | None) -> tuple[History, CheckpointView | None]:
    """The store's history once recovery settled what earlier runs left (a dry run recovers nothing): the
    one read of the store, read again only when recovery changed it; and the checkpoint another live run
    still carries that this one is planned on top of (`lockstep.rules.pipelining`), if any.

    Checkpoints other live runs carry are left to them. When the next checkpoint cannot be planned on top
    of one of them, the plan waits (`CheckpointInFlight`): before recovering anything, when pipelining is
    off or this is a restore; otherwise after recovering what no live run carries."""
    history = p.store.history()
    if dry_run:
        return history, None
    live = live_in_flight(p, run_id, run_alive, history)
    if live and (not p.spec.checkpoints.pipelined or restore is not None):
        raise in_flight(live)
    if recover(p, history, tuple(live)):
        history = p.store.history()
    failpoints.hit("plan.after_recovery")
    on_top = plan_on_top(history.after, restore, p.spec.checkpoints.pipelined)
    if isinstance(on_top, str):
        raise in_flight(live, on_top)
    if on_top is not None:
        log.info("checkpoint %d: planned on top of checkpoint %d, %s by run %s (checkpoints.pipelined): it starts "
                 "where that one ends and commits after it", history.next_id, on_top.checkpoint_id,
                 on_top.status.value, on_top.claim.run_id)
    return history, on_top


def _read_source(p: Pipeline) -> _Source:
    """The source topics' partitions, ids, log starts and last stable offsets, as the brokers have them now."""
    tps = topics.partitions(p.source_admin, p.spec.source.topics)
    ids = topics.topic_ids(p.source_admin, p.spec.source.topics)
    log_start = broker_offsets.log_start_offsets(p.source_admin, tps)
    stable_end = broker_offsets.last_stable_offsets(p.source_admin, tps)
    return _Source(tps, ids, log_start, stable_end)


def _start_offsets(p: Pipeline, restore: str | None, latest: CheckpointView | None, next_id: int,
                   source: _Source) -> StartOffsets:
    """Where each partition starts (`lockstep.rules.start_offsets`): the restore asked for, else the latest
    completed checkpoint, else the consumer group, else the spec's reset; a recreated topic is refused on a
    restore and handled by ``source.on_topic_recreated`` otherwise."""
    tps, ids, log_start, stable_end = source.partitions, source.topic_ids, source.log_start, source.stable_end
    latest_ends = _end_offsets(latest) if latest else None
    restored = _restore_source(p, restore, tps, stable_end, next_id)
    if restored is not None and (recreated := recreated_topics(restored.topic_ids, ids)):
        raise TopicRecreatedError(next_id, recreated, restore=restored.label)
    starts = choose_start_offsets(
        tps, log_start, stable_end, p.spec.source.auto_offset_reset,
        restore=restored,
        last_completed=OffsetSource.checkpoint(latest.checkpoint_id, latest_ends) if latest and latest_ends is not None
        else None,
        # The group: before the first checkpoint, and for partitions the latest one does not know.
        group=OffsetSource.group(broker_offsets.group_offsets(p.source_kafka, p.spec.source.consumer_group, tps))
        if restore is None and (latest_ends is None or not set(tps) <= set(latest_ends)) else None,
    )
    if restore is None and latest is not None:
        # The last completed checkpoint's offsets belong to the topics as they were then.
        recreated = recreated_topics(latest.claim.topic_ids, ids)
        starts = after_recreation(starts, recreated, p.spec.source.on_topic_recreated, latest.checkpoint_id,
                                  log_start, stable_end)
        for topic, old, new in recreated:
            log.warning("checkpoint %d: source topic %s was deleted and created again since checkpoint %d (topic id "
                        "%s, now %s); reading it from its %s (source.on_topic_recreated)", next_id, topic,
                        latest.checkpoint_id, old, new, "start" if p.spec.source.on_topic_recreated == "earliest"
                        else "end")
    _warn_of_starts(p, latest, next_id, starts)
    return starts


def _warn_of_starts(p: Pipeline, latest: CheckpointView | None, next_id: int, starts: StartOffsets) -> None:
    """Say where the starts lose records (dropped by retention) or read some a second time (a topic removed
    from ``source.topics`` and added back): both are worth a warning in the plan's log."""
    if (dropped := describe_dropped(starts)) is not None:
        log.warning("checkpoint %d: %s", next_id, dropped)
    if (again := sorted(tp.key for tp, origin in starts.origins.items() if origin == READ_BEFORE)):
        log.warning("checkpoint %d: %s not in checkpoint %s: read before, removed from source.topics and added back; "
                    "going on from consumer group %s's offsets, where Lockstep last published them", next_id,
                    ", ".join(again), latest.checkpoint_id if latest else "-", p.spec.source.consumer_group)


def _restore_rows(p: Pipeline, restore: str | None, latest: CheckpointView | None, next_id: int,
                  starts: StartOffsets, source: _Source) -> tuple[RestoreRow, ...]:
    """With ``restore``: per partition, what the restore writes again (as ``lockstep restore-plan``), logged."""
    if restore is None:
        return ()
    restore_rows = tuple(restore_diff(starts, _current_position(p, latest, source.partitions), source.stable_end))
    log.info("checkpoint %d: restore from %s, against %s:\n%s", next_id, restore,
             f"checkpoint {latest.checkpoint_id}" if latest else "the consumer group",
             "\n".join(describe_restore(restore_rows)))
    return restore_rows


def _ranges(p: Pipeline, restore: str | None, max_records: int | None, next_id: int, starts: StartOffsets,
            source: _Source) -> RangePlan:
    """Where each partition stops (`lockstep.rules.ranges`): at its last stable offset, within the record
    budget; records retention deleted are skipped only with ``skip_deleted_ranges``, and said so."""
    budget = p.spec.checkpoints.max_records if max_records is None else max_records
    ranges = plan_ranges(starts.offsets, source.log_start, source.stable_end, budget,
                         p.spec.checkpoints.skip_deleted_ranges, next_id, starts.source, restoring=restore is not None)
    for tp, skipped in ranges.skipped.items():
        log.warning("checkpoint %d: skipping %d records of %s deleted by retention (skip_deleted_ranges)",
                    next_id, skipped, tp.key)
    return ranges


def _pins(p: Pipeline, restore: str | None, history: History, ranges: RangePlan, dry_run: bool,
          on_top: CheckpointView | None) -> _Pins:
    """What the claim pins beside its ranges (`_Pins`), in the order they depend on each other: the base
    state, the clock (a replay's, when it reuses an aborted checkpoint's pins), the timers it fires, the
    schemas, the tables. ``on_top``: the checkpoint in flight it is planned on top of, whose prepared state
    and tables are its bases."""
    latest, next_id = history.latest, history.next_id
    state_base = _state_base(p, restore, latest, next_id, on_top)
    earlier = [v for v in history.after if on_top is None or v.checkpoint_id != on_top.checkpoint_id]
    clock_ms, replays = pinned_clock({r.tp.key: r.start for r in ranges.ranges},
                                     state_base.written_by if state_base is not None else None, earlier,
                                     p.wall_ms())
    bases = _table_bases(p, restore, latest, on_top)
    now = fingerprint(p.spec)
    clock_ms, reuse = _replay(p, next_id, replayed(history.after, replays), now, bases, clock_ms)
    fires = _fires_timers(p, ranges, state_base, clock_ms)
    if fires:
        log.info("checkpoint %d: no new records, and every source partition has been idle long enough for the "
                 "watermark to pass a pending timer (state.event_time.idle_advance): the checkpoint fires what is "
                 "due", next_id)
    schema_ids = _schema_ids(p, ranges, next_id, dry_run, reuse)
    tables = _table_pins(p, bases, next_id, any(not r.is_empty for r in ranges.ranges), reuse)
    return _Pins(state_base, clock_ms, fires, schema_ids, tables, now,
                 reuse.checkpoint_id if reuse else None)


def _replay(p: Pipeline, next_id: int, aborted: CheckpointView | None, now: SpecFingerprint,
            bases: dict[str, TableVersion | None], clock_ms: int) -> tuple[int, CheckpointClaim | None]:
    """The clock, and the aborted claim whose pins the checkpoint reuses (None: fresh pins): a replay of an
    aborted checkpoint reuses its pins while the spec they came from is the same (`lockstep.rules.replay`);
    one that cannot takes the wall clock now."""
    replay = replay_of(next_id, aborted, now, bases)
    if replay is not None:
        if replay.reuses or replay.unknown:
            log.info(replay.notice(p.spec))
        else:
            log.warning(replay.notice(p.spec))
            clock_ms = p.wall_ms()
    return clock_ms, replay.aborted if replay is not None and replay.reuses else None


def _schema_ids(p: Pipeline, ranges: RangePlan, next_id: int, dry_run: bool,
                reuse: CheckpointClaim | None) -> dict[str, int]:
    """The registry schemas the checkpoint reads into and writes with (`lockstep.formats.resolution.pin`),
    empty without registry formats; a replay that reuses its pins takes the aborted attempt's."""
    schema_ids: dict[str, int] = {}
    if any(f.registry for f in (p.spec.source.key, p.spec.source.value, p.spec.sink.key, p.spec.sink.value)):
        # The schemas before anything is written: a sink schema the registry would reject is refused here,
        # and the ones the checkpoint reads into and writes with are pinned in its claim.
        try:
            schema_ids = pin(p.spec, dry_run=dry_run, read={r.topic for r in ranges.ranges if not r.is_empty})
        except TerminalError as exc:
            raise TerminalError(f"checkpoint {next_id}: not claimed: {exc}") from None
    if reuse is not None and schema_ids:
        # The aborted attempt's schemas, as its clock: the replay reads and writes as it would have (a part it
        # left unpinned, its subject then unknown, takes the one pinned now).
        schema_ids = {**schema_ids, **reuse.schema_ids}
    return schema_ids


def _claim(p: Pipeline, result: Plan, started: float) -> Plan:
    """Claim the planned checkpoint (the conditional create that makes its id ours), or, for a dry run,
    record what would have been claimed and claim nothing."""
    if result.dry_run:
        log.info("dry run, nothing claimed: %s", result.describe())
        p.store.record_dry_run(result.claim)
        return result
    p.store.claim(result.claim)
    log.info("%s (claimed in %.1f s; %d records left for later checkpoints)", result.describe(),
             time.monotonic() - started, result.range_plan.backlog_remaining)
    failpoints.hit("plan.after_claim")
    return result


def _rerun(spec: PipelineSpec, restore: str | None, latest: CheckpointView | None) -> Rerun | None:
    """The lost share of the latest completed checkpoint's output that the next one writes again (a
    stateful partial commit's repair): while no later checkpoint has completed, each one planned from it
    carries it; a restore starts elsewhere and carries none. Refused while the code is not the code that
    wrote that checkpoint: the share is that code's output."""
    if restore is not None or latest is None or latest.completed is None or latest.completed.repair is None:
        return None
    rerun = latest.completed.repair.rerun(latest.checkpoint_id)
    changed = code_changes(latest.claim.code, code_fingerprint(spec)) if rerun is not None else ()
    if rerun is not None and changed:
        raise TerminalError(
            f"checkpoint {latest.checkpoint_id} was completed after a repair: the output of its lost "
            f"task{'s' if len(rerun.tasks) > 1 else ''} {', '.join(map(str, rerun.tasks))} must be computed again, "
            f"with the code that wrote it, and its {', '.join(changed)} {'is' if len(changed) == 1 else 'are'} not "
            f"the spec's now (the code recorded in its claim: `lockstep checkpoints --json`, field code). Deploy that "
            "code again for one run, which writes the lost share; then deploy the new code")
    if rerun is not None:
        log.warning("checkpoint %d was completed after a repair: this checkpoint writes again the output of its lost "
                    "task%s %s", latest.checkpoint_id, "s" if len(rerun.tasks) > 1 else "",
                    ", ".join(map(str, rerun.tasks)))
    return rerun


def _fires_timers(p: Pipeline, ranges: RangePlan, base: StateManifest | None, clock_ms: int) -> bool:
    """A checkpoint without records that must still run its operator (``idle_advance``, a timer due)."""
    state = p.spec.state
    if state is None or not state.event_time.idle_advance or state.dedup is not None or base is None:
        return False  # dedup's expiries are lazy: nothing to emit
    if any(not r.is_empty for r in ranges.ranges):
        return False  # the run starts anyway, and its operator fires whatever is due
    return fires_without_records(base, [r.tp.key for r in ranges.ranges], clock_ms,
                                 state.event_time.out_of_orderness_ms, state.event_time.idle_timeout_ms)


def _state_base(p: Pipeline, restore: str | None, latest: CheckpointView | None,
                checkpoint_id: int, on_top: CheckpointView | None = None) -> StateManifest | None:
    """The keyed state a stateful pipeline's checkpoint starts from: the state of the checkpoint or
    savepoint its start offsets come from (a checkpoint in flight's prepared one, planned on top of it), so
    that offsets and state always belong together."""
    if p.spec.state is None:
        return None
    if on_top is not None:
        assert on_top.prepared is not None  # plan_on_top: only on a prepared one
        base = on_top.prepared.state
    elif restore is None:
        base = latest.completed.state if latest is not None and latest.completed is not None else None
    elif restore.startswith(TIME_PREFIX):
        raise TerminalError(f"checkpoint {checkpoint_id}: a stateful pipeline cannot restore from {restore}: no state "
                            "belongs to offsets found by time. Restore from a savepoint or checkpoint:<id>, whose "
                            "state the restore carries")
    elif restore.startswith("checkpoint:"):
        view = p.store.view(int(restore.split(":", 1)[1]))
        base = view.completed.state if view is not None and view.completed is not None else None
    else:
        base = p.store.get_savepoint(restore).state

    refused = base_refusal(p.spec, base, p.store.state_files().rekey_to())
    if refused:
        raise TerminalError(f"checkpoint {checkpoint_id}: {refused}")
    return base


def _table_bases(p: Pipeline, restore: str | None, latest: CheckpointView | None,
                 on_top: CheckpointView | None = None) -> dict[str, TableVersion | None]:
    """Each table's version a checkpoint starts from: the one where its start offsets come from (the latest
    completed checkpoint, the checkpoint in flight it is planned on top of, or the checkpoint or savepoint
    restored from; a restore by time keeps the latest one's); None for a table without one yet."""
    if not p.spec.tables:
        return {}
    if on_top is not None:
        assert on_top.prepared is not None  # plan_on_top: only on a prepared one
        bases = on_top.prepared.tables
    elif restore is None or restore.startswith(TIME_PREFIX):
        bases = latest.completed.tables if latest is not None and latest.completed is not None else {}
    elif restore.startswith("checkpoint:"):
        view = p.store.view(int(restore.split(":", 1)[1]))
        bases = view.completed.tables if view is not None and view.completed is not None else {}
    else:
        bases = p.store.get_savepoint(restore).tables
    return {table.name: bases.get(table.name) for table in p.spec.tables}


def _table_pins(p: Pipeline, bases: dict[str, TableVersion | None], checkpoint_id: int, reads: bool,
                reuse: CheckpointClaim | None) -> dict[str, TablePin]:
    """Each table's pin (`lockstep.tables.pinning.table_pin`): its version ``bases`` names, and its topic's
    offsets up to the last stable ones now; or, replaying aborted checkpoint ``reuse`` with its pins, that
    claim's pin (`lockstep.tables.pinning.reused_table_pin`). Either is refused when retention deleted offsets
    it reads, unless ``checkpoints.skip_deleted_ranges``."""
    pins = {}
    skip = p.spec.checkpoints.skip_deleted_ranges
    for table in p.spec.tables:
        tps = topics.partitions(p.source_admin, [table.topic], f"tables.{table.name}.topic")
        log_start = {tp.partition: o for tp, o in broker_offsets.log_start_offsets(p.source_admin, tps).items()}
        stable_end = {tp.partition: o for tp, o in broker_offsets.last_stable_offsets(p.source_admin, tps).items()}
        earlier = reuse.tables.get(table.name) if reuse is not None else None
        if reuse is not None and earlier is not None:
            pin = reused_table_pin(earlier, log_start, stable_end, skip, checkpoint_id, reuse.checkpoint_id)
        else:
            pin = table_pin(table.name, table.topic, bases.get(table.name), log_start, stable_end, reads,
                            checkpoint_id, skip)
        for partition, skipped in sorted(pin.skipped.items()):
            log.warning("checkpoint %d: table %s: skipping %d records of %s:%d deleted by retention before any "
                        "checkpoint read them (skip_deleted_ranges)", checkpoint_id, table.name, skipped, table.topic,
                        partition)
        if pin.records:
            log.info("checkpoint %d: table %s: reads %d offsets of %s on top of %s%s", checkpoint_id, table.name,
                     pin.records, table.topic, f"its version of checkpoint {pin.base.written_by}" if pin.base
                     else "nothing (its first version)",
                     f", as aborted checkpoint {reuse.checkpoint_id} pinned them" if earlier is not None and reuse
                     else "")
        pins[table.name] = pin
    return pins


def _republish(p: Pipeline, latest: CheckpointView) -> None:
    """Publish the last completed checkpoint's end offsets again where the group is behind them: a
    commit that crashed between completing and publishing left the group one checkpoint behind. The
    group only informs lag tools, so a failure here is logged and does not stop the plan."""
    try:
        publish_end_offsets(p, latest)
    except (TerminalError, TransientError) as exc:
        log.warning("checkpoint %d: could not check the consumer group's offsets (%s); the next commit publishes "
                    "them", latest.checkpoint_id, exc)


@dataclass(frozen=True)
class RestorePlan:
    """What ``restore_from`` would do now, without claiming anything (``lockstep restore-plan``)."""

    restore: str
    source: str
    latest_completed: int | None
    rows: list[RestoreRow]
    dropped: str | None

    def to_json(self) -> dict[str, object]:
        return {"restore": self.restore, "source": self.source, "latest_completed": self.latest_completed,
                "partitions": [r.to_json() for r in self.rows], "dropped": self.dropped,
                **restore_totals(self.rows)}


def restore_plan(p: Pipeline, restore: str) -> RestorePlan:
    """Per partition: the current position (the latest completed checkpoint's ends, or the group's
    offsets before the first one), where the restore would start, and the records it would write
    again and read new. Reads only; the same source resolution as ``plan``."""
    latest = p.store.latest_completed()
    tps = topics.partitions(p.source_admin, p.spec.source.topics)
    log_start = broker_offsets.log_start_offsets(p.source_admin, tps)
    stable_end = broker_offsets.last_stable_offsets(p.source_admin, tps)
    source = _restore_source(p, restore, tps, stable_end)
    starts = choose_start_offsets(tps, log_start, stable_end, p.spec.source.auto_offset_reset, restore=source)
    return RestorePlan(restore, starts.source, latest.checkpoint_id if latest else None,
                       restore_diff(starts, _current_position(p, latest, tps), stable_end), describe_dropped(starts))


def _current_position(p: Pipeline, latest: CheckpointView | None,
                      tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """What a restore is measured against: the latest completed checkpoint's ends, or before the
    first one, the consumer group's offsets."""
    if latest is not None:
        return _end_offsets(latest)
    return broker_offsets.group_offsets(p.source_kafka, p.spec.source.consumer_group, tps)


def _end_offsets(view: CheckpointView) -> dict[TopicPartition, int]:
    """Where the next checkpoint after ``view`` starts: the history's latest completed checkpoint's end
    offsets, or those of the checkpoint in flight it is planned on top of, as claimed."""
    if view.completed is None:
        return offsets_from_json(view.claim.end_offsets)
    return offsets_from_json(view.completed.end_offsets)


def _restore_source(p: Pipeline, restore: str | None, tps: list[TopicPartition] | None = None,
                    stable_end: dict[TopicPartition, int] | None = None, checkpoint_id: int | None = None
                    ) -> OffsetSource | None:
    """``checkpoint:ID`` restores from a completed checkpoint, ``time:<ISO>`` from the first record at
    or after that time in each partition, anything else names a savepoint."""
    if restore is None:
        return None
    if restore.startswith(TIME_PREFIX):
        try:
            moment = parse_restore_time(restore)
        except ValueError as exc:
            raise TerminalError(f"{exc}; trigger a new run with a valid restore_from") from exc
        found = broker_offsets.offsets_for_time(p.source_admin, list(tps or []), int(moment.timestamp() * 1000))
        source, at_end = offsets_at_time(restore, found, dict(stable_end or {}))
        if at_end:
            log.warning("checkpoint %s: restore from %s: %s have no record at or after that time; they start at "
                        "their end", checkpoint_id, restore, ", ".join(tp.key for tp in at_end))
        return source
    if restore.startswith("checkpoint:"):
        raw = restore.split(":", 1)[1]
        if not raw.isdigit():
            raise TerminalError(f"restore from {restore!r}: expected checkpoint:<id> with a numeric id; trigger a "
                                "new run with a valid restore_from")
        view = p.store.view(int(raw))
        if view is None or view.completed is None:
            status = view.status.value if view else "not found (deleted by retention?)"
            raise TerminalError(f"cannot restore from checkpoint {raw}: it is {status}; only completed checkpoints "
                                "and savepoints can be restored from: trigger a new run with restore_from naming "
                                "one (`lockstep checkpoints` lists them)")
        return OffsetSource.checkpoint(int(raw), offsets_from_json(view.completed.end_offsets), view.claim.topic_ids)
    try:
        savepoint = p.store.get_savepoint(restore)
    except TerminalError as exc:
        raise TerminalError(f"cannot restore: {exc}; nothing was claimed. Trigger a new run with restore_from "
                            "naming an existing savepoint or checkpoint:<id> (`lockstep savepoint list` lists "
                            "them); a scheduled run restores nothing") from exc
    return OffsetSource.savepoint(savepoint.name, offsets_from_json(savepoint.end_offsets), savepoint.topic_ids)
