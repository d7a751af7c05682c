"""Dead-letter replay: the dead letters of a pipeline, run again through its CURRENT transform.

A replay is a pipeline of its own, derived from the spec (`replay_spec`): its source is the
pipeline's dead-letter topic, its sink the pipeline's sink and dead-letter topics, its checkpoints
(``<name>-replay`` in the same store) go through the engine's plan / run / commit, so claims,
recovery, fencing and failures are the engine's. What differs happens in the Spark job
(`replay_input`, `marked`): each dead letter is turned back into the input row it was made from
(provenance headers -> topic/partition/offset, its key and value), the selection is applied, and
original offsets an earlier COMPLETED replay checkpoint already wrote to the sink are dropped; the
output carries the original provenance plus a `REPLAY_HEADER` naming the replay checkpoint.

Exactly once: a replay checkpoint's range over the dead-letter topic is tracked like any source
(committed with its transactions), and `REPLAYED_PART` (written before the prepared decision, read
only for completed checkpoints) lists the original offsets it wrote to the sink, so no original
offset reaches the sink twice whatever is replayed again.

A partial commit is repaired like any other (`lockstep.rules.commit_decision.repair_ranges`): the
broker aborted some of its transactions, so their records never reached the sink. `REPLAYED_PART`
says which original offsets each Spark task (each transaction) wrote, and `completed_replays` leaves
the lost transactions' ones out, so they are due again; the repair gives the checkpoint's whole
range back, and the next replay checkpoint writes them, and skips what the kept transactions wrote.

The pure parts (derived spec, selection, header parsing, accounting) are apart from the Spark and
store code so they can be tested without either.
"""
from __future__ import annotations

__all__ = [
    "DeadLetter", "Original", "REPLAYED_PART", "Replayed", "SELECTION_PART", "SUFFIX", "Selection",
    "already_in_sink", "completed_replays", "fed_counter", "last_unselective", "parse_dead_letter", "replay_spec",
]

import dataclasses
import logging
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockstep.errors import CheckpointError, TerminalError
from lockstep.model.output_contract import (
    CHECKPOINT_HEADER,
    ERROR_HEADER,
    ORIGINAL_SIZE_HEADER,
    REPLAY_HEADER,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)
from lockstep.rules.start_offsets import parse_restore_time
from lockstep.spec import FormatSpec, PipelineSpec, SourceSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row

    from lockstep.model.checkpoint import CheckpointView
    from lockstep.store.checkpoint_store import PipelineStore
    from lockstep.transform import Transform

log = logging.getLogger(__name__)

SUFFIX = "-replay"
#: Per replay checkpoint: the selection it applies (written with its claim, before its run).
SELECTION_PART = "replay-selection"
#: Per replay checkpoint: the original offsets it fed to the transform and wrote to the sink
#: (written by its Spark run before the prepared decision; trusted only once it is completed).
REPLAYED_PART = "replayed"
#: A restore from before any record: the first replay reads the dead-letter topic from its start.
FROM_START = "time:1970-01-01T00:00:00+00:00"
#: Replay checkpoints are never deleted by retention: their `REPLAYED_PART`s are the dedup set, and
#: dropping one would let its original offsets reach the sink again. (Replays are few: one per
#: `lockstep deadletters replay`, or a few when the dead letters exceed the record budget.)
KEEP_ALL = 2**62

Original = tuple[str, int, int]  # (topic, partition, offset) of the original input record


# ---- the derived pipeline --------------------------------------------------------------------------
def replay_spec(spec: PipelineSpec) -> PipelineSpec:
    """The pipeline that replays ``spec``'s dead letters: same store bucket/root, transform, sink and
    dead-letter topics, writer and Iceberg table; source = the dead-letter topic on the sink cluster; its own name,
    consumer group and transactional prefix (``<prefix>-replay-<id>-<task>`` never parses as one of
    the pipeline's own ids, so neither pipeline's recovery fences the other's transactions)."""
    if spec.replay_of is not None:
        raise TerminalError(f"{spec.path}: {spec.name} is already the replay pipeline of {spec.replay_of}")
    return dataclasses.replace(
        spec,
        name=spec.name + SUFFIX,
        description=f"dead-letter replay of {spec.name}",
        source=SourceSpec(topics=(spec.sink.dead_letter_topic,), kafka_conn_id=spec.sink.kafka_conn_id,
                          auto_offset_reset="earliest", consumer_group=spec.source.consumer_group + SUFFIX,
                          # dead letters are the input as it came: decoded as the source's, by its subjects
                          key=_as_source(spec.source.key, spec.source.topics[0], "key"),
                          value=_as_source(spec.source.value, spec.source.topics[0], "value"),
                          registry_conn_id=spec.source.registry_conn_id),
        transactions=dataclasses.replace(spec.transactions, id_prefix=spec.transactions.id_prefix + SUFFIX),
        checkpoints=dataclasses.replace(spec.checkpoints, retain=KEEP_ALL),
        # The records a replay recovers go to the sink topic and, with sink.iceberg, to the same table, staged and
        # published with the replay checkpoint's transactions as the pipeline's own (its snapshots and data folders
        # named after the replay pipeline; the table's upkeep spares its checkpoints in flight too).
        replay_of=spec.name,
    )


def _as_source(fmt: FormatSpec, topic: str, part: str) -> FormatSpec:
    """The source's format, read from the dead-letter topic: a registry format keeps the source topic's subject."""
    return dataclasses.replace(fmt, subject=fmt.subject_for(topic, part)) if fmt.registry else fmt


# ---- selection -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Selection:
    """Which dead letters a replay checkpoint takes: those written by pipeline checkpoint
    ``checkpoint`` (not re-dead-lettered ones), or those with a timestamp at or after ``since``
    (ISO with a zone), or, with neither, every dead letter of its range."""

    checkpoint: int | None = None
    since: str | None = None

    def __post_init__(self) -> None:
        if self.checkpoint is not None and self.since is not None:
            raise TerminalError("give --checkpoint or --since, not both")
        if self.checkpoint is not None and self.checkpoint < 1:
            raise TerminalError(f"--checkpoint {self.checkpoint}: checkpoint ids start at 1")
        if self.since is not None:
            try:
                parse_restore_time(self.since)
            except ValueError as exc:
                raise TerminalError(f"--since: {exc}") from exc

    @property
    def is_all(self) -> bool:
        return self.checkpoint is None and self.since is None

    @property
    def since_ms(self) -> int | None:
        return int(parse_restore_time(self.since).timestamp() * 1000) if self.since else None

    def describe(self) -> str:
        if self.checkpoint is not None:
            return f"dead letters of checkpoint {self.checkpoint}"
        if self.since is not None:
            return f"dead letters since {self.since}"
        return "every dead letter not replayed yet"

    def to_json(self) -> dict[str, object]:
        return {"checkpoint": self.checkpoint, "since": self.since}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Selection:  # a sidecar as json.loads read it
        return cls(checkpoint=doc.get("checkpoint"), since=doc.get("since"))

    def restore(self, last_unselective: int | None, latest_completed: int | None) -> str | None:
        """Where the replay checkpoint's range starts, as a ``restore_from`` value (None: after the
        latest completed replay checkpoint, the engine's own rule).

        A selective replay searches the topic from its start (``--checkpoint``) or from the time
        (``--since``); an unselective one continues after the last unselective one, so the records a
        selective replay passed over without taking stay due."""
        if self.checkpoint is not None:
            return FROM_START
        if self.since is not None:
            return "time:" + self.since
        if last_unselective == latest_completed:
            return None  # also: no replay yet -> the group of <group>-replay, else earliest
        return FROM_START if last_unselective is None else f"checkpoint:{last_unselective}"

    def takes(self, letter: DeadLetter) -> bool:
        """The selection on one parsed dead letter (the job applies the same rule in Spark)."""
        if self.checkpoint is not None:
            return letter.replayed_by is None and letter.checkpoint == self.checkpoint
        if self.since is not None:
            return letter.timestamp_ms >= (self.since_ms or 0)
        return True


# ---- one dead letter -------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeadLetter:
    """A dead letter's provenance: the input record it was made from and why it was rejected."""

    original: Original
    checkpoint: int | None  #: the checkpoint that wrote it (a replay checkpoint if ``replayed_by``)
    error: str
    timestamp_ms: int
    too_large: bool  #: key, value and headers dropped to fit: nothing to replay
    replayed_by: int | None  #: set on a dead letter written by a replay checkpoint


def parse_dead_letter(headers: Iterable[tuple[str, bytes | None]], timestamp_ms: int, where: str) -> DeadLetter:
    """A dead letter from its headers; ``where`` (topic:partition@offset) names it in the error of
    a record without Lockstep's provenance headers."""
    h = {k: v for k, v in headers}
    try:
        # A header without a value (None) fails here too: the topic's as a missing one (AttributeError,
        # caught), a number's with int()'s TypeError (not caught), as before.
        original = (h[SOURCE_TOPIC].decode(), int(h[SOURCE_PARTITION]), int(h[SOURCE_OFFSET]))  # type: ignore[union-attr, arg-type]
    except (KeyError, ValueError, AttributeError) as exc:
        raise TerminalError(f"dead letter {where} has no valid provenance headers ({SOURCE_TOPIC}, "
                            f"{SOURCE_PARTITION}, {SOURCE_OFFSET}): it was not written by Lockstep and cannot "
                            "be replayed; remove it from the dead-letter topic or leave it out with --since") from exc

    def number(name: str) -> int | None:
        value = h.get(name)
        return int(value) if value else None

    return DeadLetter(original, number(CHECKPOINT_HEADER), (h.get(ERROR_HEADER) or b"").decode(errors="replace"),
                      timestamp_ms, ORIGINAL_SIZE_HEADER in h, number(REPLAY_HEADER))


# ---- what a replay checkpoint did --------------------------------------------------------------------
@dataclass(frozen=True)
class Replayed:
    """`REPLAYED_PART` of one replay checkpoint."""

    fed: tuple[Original, ...] = ()  #: original offsets given to the transform (one output each expected)
    to_sink: tuple[Original, ...] = ()  #: of those, the ones the transform accepted (the dedup set)
    skipped_duplicates: int = 0  #: already written to the sink by an earlier replay, or twice in this range
    skipped_too_large: int = 0  #: dead letters without key and value: nothing to replay
    not_selected: int = 0
    warnings: tuple[str, ...] = field(default=())
    read: int = 0  #: dead letters in the checkpoint's range (its offsets also count transaction markers)
    #: per writing Spark task (its transaction's ``task_index``), the original offsets whose output it
    #: wrote (to the sink or dead-lettered again); None in documents of earlier versions
    tasks: Mapping[int, tuple[Original, ...]] | None = None
    skipped_tables: int = 0  #: dead letters of a table's records: rows of a table, not the transform's input

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "schema": "lockstep.replayed/1", "fed": [list(o) for o in self.fed],
            "to_sink": [list(o) for o in self.to_sink], "skipped_duplicates": self.skipped_duplicates,
            "skipped_too_large": self.skipped_too_large, "not_selected": self.not_selected,
            "warnings": list(self.warnings), "read": self.read, "skipped_tables": self.skipped_tables}
        if self.tasks is not None:
            doc["tasks"] = {str(task): [list(o) for o in originals] for task, originals in sorted(self.tasks.items())}
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Replayed:  # a sidecar as json.loads read it
        def as_tuples(xs: Iterable[Sequence[Any]]) -> tuple[Original, ...]:
            return tuple((str(t), int(p), int(o)) for t, p, o in xs)

        tasks = doc.get("tasks")
        return cls(as_tuples(doc.get("fed", ())), as_tuples(doc.get("to_sink", ())),
                   int(doc.get("skipped_duplicates", 0)), int(doc.get("skipped_too_large", 0)),
                   int(doc.get("not_selected", 0)), tuple(doc.get("warnings", ())), int(doc.get("read", 0)),
                   None if tasks is None else {int(task): as_tuples(xs) for task, xs in tasks.items()},
                   int(doc.get("skipped_tables", 0)))

    def without_tasks(self, lost: set[int]) -> Replayed:
        """What the checkpoint delivered once the transactions of tasks ``lost`` were aborted after
        the others committed (a repaired partial commit): their records never reached the sink, so
        their original offsets are neither written (``to_sink``, the dedup set) nor fed (each fed one
        expects an output, `lockstep.ops.verify`); they are due again. Needs ``tasks``."""
        if not lost:
            return self
        if self.tasks is None:
            raise ValueError("which task wrote which record is not recorded")
        gone = {o for task in lost for o in self.tasks.get(task, ())}
        return dataclasses.replace(self, fed=tuple(o for o in self.fed if o not in gone),
                                   to_sink=tuple(o for o in self.to_sink if o not in gone),
                                   tasks={t: xs for t, xs in self.tasks.items() if t not in lost})


def completed_replays(store: PipelineStore) -> dict[int, Replayed]:
    """`Replayed` of every COMPLETED replay checkpoint (a prepared or aborted one decides nothing),
    as delivered: of a repaired one, without the records of its lost transactions (`lost_tasks`).

    A completed checkpoint with records but without its `REPLAYED_PART` cannot be accounted for."""
    result: dict[int, Replayed] = {}
    for cid in store.checkpoint_ids():
        view = store.view(cid)
        if view is None or view.completed is None:
            continue
        doc = store.sidecar(cid, REPLAYED_PART)
        if doc is None:
            if any(not r.is_empty for r in view.claim.ranges):
                raise CheckpointError(cid, f"of {store.pipeline} is completed but its {REPLAYED_PART}.json is "
                                           "missing, so which dead letters it replayed is unknown; restore it "
                                           "from a backup of the store before replaying again")
            continue
        replayed = Replayed.from_json(doc)
        lost = lost_tasks(view)
        if lost and replayed.tasks is None:
            log.warning("checkpoint %d of %s was completed after repair (%s) by a version of Lockstep that did not "
                        "record which transaction wrote which record: all of its %d records are taken as written; "
                        "see `lockstep deadletters list` and replay the missing ones with --checkpoint or --since",
                        cid, store.pipeline, view.completed.repair.summary if view.completed.repair else "",
                        len(replayed.to_sink))
        elif lost:
            replayed = replayed.without_tasks(lost)
        result[cid] = replayed
    return result


def lost_tasks(view: CheckpointView) -> set[int]:
    """The task indexes of the transactions a repair of the completed checkpoint ``view`` lost."""
    repair = view.completed.repair if view.completed is not None else None
    if repair is None or view.prepared is None:
        return set()
    return {t.task_index for t in view.prepared.transactions if t.transactional_id in repair.lost}


def already_in_sink(replays: Mapping[int, Replayed]) -> set[Original]:
    return {o for r in replays.values() for o in r.to_sink}


def last_unselective(store: PipelineStore) -> int | None:
    """The newest completed replay checkpoint that took every dead letter of its range."""
    latest = None
    for cid in store.checkpoint_ids():
        view = store.view(cid)
        if view is not None and view.completed is not None:
            doc = store.sidecar(cid, SELECTION_PART)
            if doc is None or Selection.from_json(doc).is_all:
                latest = cid
    return latest


def fed_counter(replays: Mapping[int, Replayed]) -> Counter[Original]:
    return Counter(o for r in replays.values() for o in r.fed)


# ---- in the Spark job ------------------------------------------------------------------------------
def replay_input(df: DataFrame, selection: Selection, in_sink: set[Original],
                 tables: Collection[str] = ()) -> tuple[DataFrame, dict[str, int]]:
    """The dead letters of ``df`` (Spark's Kafka source with ``includeHeaders``) as the input rows
    they were made from, selected and deduplicated; and the counts of what was left out. The dead letters
    of a table's records (their provenance names one of ``tables``, the pipeline's table topics) are left
    out: they are rows of a table, not input of the transform (the table takes its key's next good record).

    The rebuilt row has the columns of the pipeline's own input (key, value, topic, partition,
    offset, timestamp, timestampType): provenance from the headers, key and value as dead-lettered
    (the transform's output value of a rejected row, which `lockstep.rows.apply` and the examples
    leave as the input bytes), and the dead letter's timestamp (the original one is not kept)."""
    from pyspark.sql import functions as F

    def header(name: str) -> Column:
        matching = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name))
        return F.get(matching, F.lit(0)).getField("value")  # null when absent (ANSI mode refuses [0])

    rows = df.select(
        "key", "value", "timestamp", "timestampType",
        header(SOURCE_TOPIC).cast("string").alias("topic"),
        header(SOURCE_PARTITION).cast("string").cast("int").alias("partition"),
        header(SOURCE_OFFSET).cast("string").cast("long").alias("offset"),
        header(CHECKPOINT_HEADER).cast("string").cast("long").alias("_dl_checkpoint"),
        header(REPLAY_HEADER).isNotNull().alias("_dl_replayed"),
        header(ORIGINAL_SIZE_HEADER).isNotNull().alias("_dl_too_large"),
    ).cache()
    counts: dict[str, int] = {"read": rows.count()}
    no_provenance = rows.filter(F.col("topic").isNull() | F.col("partition").isNull() | F.col("offset").isNull())
    if (bad := no_provenance.count()):
        raise TerminalError(f"{bad} records of the dead-letter topic have no valid provenance headers ("
                            f"{SOURCE_TOPIC}, {SOURCE_PARTITION}, {SOURCE_OFFSET}): they were not written by "
                            "Lockstep and cannot be replayed; select around them with --since")
    if selection.checkpoint is not None:
        chosen = rows.filter((F.col("_dl_checkpoint") == selection.checkpoint) & ~F.col("_dl_replayed"))
    elif selection.since is not None:
        chosen = rows.filter(F.unix_millis(F.col("timestamp")) >= F.lit(selection.since_ms))
    else:
        chosen = rows
    counts["selected"] = chosen.count()
    counts["tables"] = 0
    if tables:
        of_tables = F.col("topic").isin(*sorted(tables))
        counts["tables"] = chosen.filter(of_tables).count()
        chosen = chosen.filter(~of_tables)
    replayable = chosen.filter(~F.col("_dl_too_large"))
    counts["too_large"] = counts["selected"] - counts["tables"] - replayable.count()
    unique = replayable.dropDuplicates(["topic", "partition", "offset"])
    if in_sink:
        done = df.sparkSession.createDataFrame(sorted(in_sink), "topic string, partition int, offset long")
        unique = unique.join(F.broadcast(done), ["topic", "partition", "offset"], "left_anti")
    out = unique.select("key", "value", "topic", "partition", "offset", "timestamp", "timestampType").cache()
    counts["fed"] = out.count()
    counts["duplicates"] = counts["selected"] - counts["tables"] - counts["too_large"] - counts["fed"]
    return out, counts


def marked(transform: Transform, checkpoint_id: int) -> Transform:
    """``transform`` with `REPLAY_HEADER` (the replay checkpoint's id) appended to the headers it
    returns (or as the only header), so both writers write it like any user header."""
    from pyspark.sql import functions as F

    def replay_transform(df: DataFrame) -> DataFrame:
        out = transform(df)
        mark = F.array(F.struct(F.lit(REPLAY_HEADER).alias("key"),
                                F.lit(str(checkpoint_id)).cast("binary").alias("value")))
        if "headers" not in out.columns:
            return out.withColumn("headers", mark)
        return out.withColumn("headers", F.when(F.col("headers").isNull(), mark)
                              .otherwise(F.concat(F.col("headers"), mark)))

    return replay_transform


def as_original(row: Row) -> Original:
    return (row["topic"], int(row["partition"]), int(row["offset"]))

@dataclass
class ReplayRun:
    """What the Spark job of one replay checkpoint knows between reading and writing."""

    store: PipelineStore
    checkpoint_id: int
    fed: tuple[Original, ...]
    counts: dict[str, int]

    def record(self, out: DataFrame) -> Replayed:
        """Write `REPLAYED_PART` from the transform's output (the columns the writer reads): a row
        without ``error`` goes to the sink; one the transform still rejects is dead-lettered again
        and not counted as replayed, so a later replay takes it. ``out`` must be what the writer
        writes, partition for partition (`lockstep.spark.job` keeps it as a local checkpoint): each
        row's Spark partition is the task, and so the transaction, that writes it (``tasks``)."""
        from pyspark.sql import functions as F

        error = F.col("error").isNull() if "error" in out.columns else F.lit(True)
        rows = out.select("topic", "partition", "offset", error.alias("_to_sink"),
                          F.spark_partition_id().alias("_task")).collect()
        to_sink = tuple(sorted(as_original(r) for r in rows if r["_to_sink"]))
        by_task: dict[int, list[Original]] = {}
        for r in rows:
            by_task.setdefault(int(r["_task"]), []).append(as_original(r))
        tasks = {task: tuple(sorted(originals)) for task, originals in by_task.items()}
        warnings: list[str] = []
        if self.counts["too_large"]:
            warnings.append(f"{self.counts['too_large']} dead letters were too large to keep their key and value "
                            "(lockstep.original.size): nothing to replay, skipped")
        if self.counts.get("tables"):
            warnings.append(f"{self.counts['tables']} dead letters are records of a table's topic that did not decode: "
                            "not the transform's input, skipped; the table takes its key's next good record, so "
                            "write the fixed row to the table's topic")
        for warning in warnings:
            log.warning("checkpoint %d: %s", self.checkpoint_id, warning)
        replayed = Replayed(self.fed, to_sink, self.counts["duplicates"], self.counts["too_large"],
                            self.counts["read"] - self.counts["selected"], tuple(warnings), self.counts["read"], tasks,
                            self.counts.get("tables", 0))
        self.store.write_sidecar(self.checkpoint_id, REPLAYED_PART, replayed.to_json(), once=False)
        log.info("checkpoint %d: replaying %d dead letters (%d to the sink, %d rejected again); skipped %d "
                 "duplicates, %d too large, %d table records, %d not selected", self.checkpoint_id, len(self.fed),
                 len(to_sink), len(self.fed) - len(to_sink), replayed.skipped_duplicates, replayed.skipped_too_large,
                 replayed.skipped_tables, replayed.not_selected)
        return replayed


def start_replay(spec: PipelineSpec, checkpoint_id: int, df: DataFrame, transform: Transform,
                 store: PipelineStore) -> tuple[DataFrame, Transform, ReplayRun]:
    """The replay checkpoint's input rows and marked transform, with its pinned selection."""
    doc = store.sidecar(checkpoint_id, SELECTION_PART)
    if doc is None:
        raise CheckpointError(checkpoint_id, f"of {spec.name} has no {SELECTION_PART}.json, so which dead letters "
                                             "it takes is unknown; the next `lockstep deadletters replay` aborts it "
                                             "and plans a new one")
    selection = Selection.from_json(doc)
    in_sink = already_in_sink(completed_replays(store))
    rows, counts = replay_input(df, selection, in_sink, {t.topic for t in spec.tables})
    fed = tuple(sorted(as_original(r) for r in rows.select("topic", "partition", "offset").collect()))
    return rows, marked(transform, checkpoint_id), ReplayRun(store, checkpoint_id, fed, counts)
