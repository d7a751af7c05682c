"""Where a checkpoint starts reading: from the last completed checkpoint, a savepoint, the consumer
group or a time, and what a restore would skip or read again (pure).
"""
from __future__ import annotations

__all__ = [
    "OffsetSource", "READ_BEFORE", "RestoreRow", "StartOffsets", "TIME_PREFIX", "after_recreation",
    "choose_start_offsets", "describe_dropped", "describe_restore", "offsets_at_time", "parse_restore_time",
    "recreated_topics", "restore_diff", "restore_totals",
]

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from lockstep.errors import TopicRecreatedError
from lockstep.model.offsets import Offsets, TopicPartition, offset_of


@dataclass(frozen=True)
class OffsetSource:
    """A candidate map of start offsets with the label logs and the claim record ("checkpoint:41")."""

    label: str
    offsets: Offsets
    #: The topic ids the offsets belong to, where recorded (a checkpoint's claim, a savepoint).
    topic_ids: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def checkpoint(cls, checkpoint_id: int, offsets: Offsets, topic_ids: Mapping[str, str] | None = None) -> OffsetSource:
        return cls(f"checkpoint:{checkpoint_id}", offsets, dict(topic_ids or {}))

    @classmethod
    def savepoint(cls, name: str, offsets: Offsets, topic_ids: Mapping[str, str] | None = None) -> OffsetSource:
        return cls(f"savepoint:{name}", offsets, dict(topic_ids or {}))

    @classmethod
    def group(cls, offsets: Offsets) -> OffsetSource:
        return cls("group", offsets)


TIME_PREFIX = "time:"


def parse_restore_time(restore: str) -> datetime:
    """The moment of ``time:<ISO 8601 with a zone>`` (``Z`` or ``+01:00``); a naive time is refused,
    since Kafka's timestamps are UTC and a guess would replay the wrong hour."""
    text = restore[len(TIME_PREFIX):] if restore.startswith(TIME_PREFIX) else restore
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"restore from {restore!r}: {text!r} is not an ISO 8601 time "
                         "(like 2026-11-20T10:00:00Z)") from exc
    if moment.tzinfo is None:
        raise ValueError(f"restore from {restore!r}: the time has no zone; add Z for UTC or an offset like +01:00")
    return moment


def offsets_at_time(label: str, found: Mapping[TopicPartition, int | None], end: Offsets
                    ) -> tuple[OffsetSource, list[TopicPartition]]:
    """Start offsets of a restore by time: per partition the first record at or after the time
    (Kafka's offsets-for-times), or the partition's end where no record is that recent. Returns the
    source and the partitions that start at their end, which the caller must say."""
    at_end = sorted(tp for tp in end if found.get(tp) is None)
    offsets = {tp: end[tp] if (at := found.get(tp)) is None else min(int(at), end[tp]) for tp in end}
    return OffsetSource(label, offsets), at_end


@dataclass(frozen=True)
class StartOffsets:
    """Chosen start offsets, the winning source, and per partition where its offset came from."""

    source: str
    offsets: Mapping[TopicPartition, int]
    origins: Mapping[TopicPartition, str]
    #: partitions of the chosen source that are no longer read (topic removed from the spec).
    dropped: tuple[TopicPartition, ...] = ()


#: The origin of a partition the chosen start source does not hold: it is read from its log start.
NEW_PARTITION = "new-partition:earliest"
#: The origin of a partition of a topic read before, removed from the spec and added back: the group's offset.
READ_BEFORE = "group:read-before"


def choose_start_offsets(
    partitions: Iterable[TopicPartition],
    log_start_offsets: Offsets,
    stable_end_offsets: Offsets,
    auto_offset_reset: str,
    restore: OffsetSource | None = None,
    last_completed: OffsetSource | None = None,
    group: OffsetSource | None = None,
) -> StartOffsets:
    """Pick start offsets: explicit restore > latest completed checkpoint > group > auto_offset_reset.

    A partition the latest completed checkpoint does not know, but the group does, belongs to a topic
    that was removed from ``source.topics`` and added back: it goes on from the group's offset (the end
    offset Lockstep last published for it), not from the start again. Any other partition the chosen
    source does not know is new (or its topic was added) and starts at its log start, so no record is
    skipped; only an explicit `latest` reset deliberately skips the backlog. An empty group map counts
    as "no group offsets", as in Kafka.
    """
    current = sorted(set(partitions))
    chosen = next((s for s in (restore, last_completed) if s is not None), None)
    if chosen is None and group is not None and group.offsets:
        chosen = group
    if chosen is None:
        if auto_offset_reset not in ("earliest", "latest"):
            raise ValueError(f"auto_offset_reset must be earliest or latest, got {auto_offset_reset!r}")
        table = log_start_offsets if auto_offset_reset == "earliest" else stable_end_offsets
        return StartOffsets(
            source=auto_offset_reset,
            offsets={tp: offset_of(table, tp) for tp in current},
            origins={tp: auto_offset_reset for tp in current},
        )
    offsets: dict[TopicPartition, int] = {}
    origins: dict[TopicPartition, str] = {}
    read_before = group.offsets if group is not None and chosen is last_completed else {}
    for tp in current:
        if tp in chosen.offsets:
            offsets[tp], origins[tp] = chosen.offsets[tp], chosen.label
        elif tp in read_before:
            offsets[tp], origins[tp] = read_before[tp], READ_BEFORE
        else:
            offsets[tp], origins[tp] = offset_of(log_start_offsets, tp), NEW_PARTITION
    dropped = tuple(sorted(set(chosen.offsets) - set(current)))
    return StartOffsets(source=chosen.label, offsets=offsets, origins=origins, dropped=dropped)


def describe_dropped(starts: StartOffsets) -> str | None:
    """What a plan must say when its start source holds partitions the spec no longer reads (a topic
    removed from ``source.topics`` since that checkpoint or savepoint): they are not read."""
    if not starts.dropped:
        return None
    by_topic: dict[str, list[int]] = {}
    for tp in starts.dropped:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    topics = "; ".join(f"{t} (partitions {', '.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))
    return (f"{starts.source} holds offsets of {topics}, no longer in source.topics: not read from here on; "
            "add the topic back to the spec to read it")


@dataclass(frozen=True)
class RestoreRow:
    """One partition of a restore plan: where the pipeline is, where the restore would start, and
    how many records it would write again (already processed once) and read for the first time."""

    partition: str
    current: int | None      # the latest completed checkpoint's end (None: never read)
    restore: int             # where the restored checkpoint starts
    end: int                 # the last stable offset now
    re_emitted: int          # records in [restore, current): written a second time
    new: int                 # records in [max(restore, current), end): not yet processed
    #: the restore point does not hold this partition: its topic (or the partition) was added since,
    #: so the restore reads it from its log start
    added: bool = False

    def to_json(self) -> dict[str, object]:
        return {"partition": self.partition, "current": self.current, "restore": self.restore, "end": self.end,
                "re_emitted": self.re_emitted, "new": self.new, "added": self.added}


def restore_diff(starts: StartOffsets, current: Offsets, end: Offsets) -> list[RestoreRow]:
    """What restoring from ``starts`` would do, per partition the spec reads, against the latest
    completed checkpoint's ends (``current``). A restore ahead of the current position skips
    records (``re_emitted`` 0, ``new`` from the restore on); a partition never read has no current."""
    rows = []
    for tp in sorted(starts.offsets):
        restore, now, stable = starts.offsets[tp], current.get(tp), end.get(tp, starts.offsets[tp])
        re_emitted = max((now if now is not None else restore) - restore, 0)
        rows.append(RestoreRow(tp.key, now, restore, stable, re_emitted,
                               max(stable - max(restore, now if now is not None else restore), 0),
                               added=starts.origins.get(tp) == NEW_PARTITION))
    return rows


def restore_totals(rows: Iterable[RestoreRow]) -> dict[str, int]:
    """Records a restore writes again and reads for the first time, over all partitions."""
    rows = list(rows)
    return {"re_emitted": sum(r.re_emitted for r in rows), "new": sum(r.new for r in rows)}


def describe_restore(rows: Iterable[RestoreRow]) -> list[str]:
    """The per-partition table of a restore diff and its total line (``restore-plan``, a plan's log)."""
    rows = list(rows)
    lines = [f"{'partition':32} {'current':>10} {'restore':>10} {'end':>10} {'again':>8} {'new':>8}"]
    for r in rows:
        current = "–" if r.current is None else str(r.current)
        lines.append(f"{r.partition:32} {current:>10} {r.restore:>10} {r.end:>10} {r.re_emitted:>8} {r.new:>8}"
                     + ("  added since the restore point: read from its start" if r.added else ""))
    added = sum(1 for r in rows if r.added)
    totals = restore_totals(rows)
    lines.append(f"{totals['re_emitted']:,} records would be written again, "
                 f"{totals['new']:,} read for the first time"
                 + (f"; {added} partition{'s' if added > 1 else ''} added to source.topics since the restore point"
                    if added else ""))
    return lines


#: The origin of a partition of a recreated topic read under ``source.on_topic_recreated``.
RECREATED = "topic-recreated"


def recreated_topics(recorded: Mapping[str, str], now: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(topic, recorded id, current id) of every topic whose id changed: deleted and created again.
    A topic without a recorded id (a claim of an earlier version, a topic added since) is not judged."""
    return [(topic, recorded[topic], now[topic]) for topic in sorted(recorded)
            if topic in now and now[topic] != recorded[topic]]


def after_recreation(starts: StartOffsets, recreated: list[tuple[str, str, str]], policy: str, checkpoint_id: int,
                     log_start_offsets: Offsets, stable_end_offsets: Offsets) -> StartOffsets:
    """Start offsets once recreated topics are accounted for: refused under policy ``fail`` (never a
    silent skip into the new topic); from the new topic's start (``earliest``) or end (``latest``)."""
    if not recreated:
        return starts
    if policy == "fail":
        raise TopicRecreatedError(checkpoint_id, recreated)
    if policy not in ("earliest", "latest"):
        raise ValueError(f"on_topic_recreated must be fail, earliest or latest, got {policy!r}")
    table = log_start_offsets if policy == "earliest" else stable_end_offsets
    topics = {topic for topic, _, _ in recreated}
    offsets, origins = dict(starts.offsets), dict(starts.origins)
    for tp in offsets:
        if tp.topic in topics:
            offsets[tp], origins[tp] = offset_of(table, tp), f"{RECREATED}:{policy}"
    return replace(starts, offsets=offsets, origins=origins)
