"""What the Checkpoints page shows, gathered from S3 and Kafka as plain values.

The page is read-only and is looked at when something is wrong, so it must render
even when part of the platform is down: every external call is made per pipeline
and per source (store, savepoints, Kafka), and a failure becomes that section's
error message instead of an exception. Pipelines are gathered concurrently with
short Kafka timeouts so one unreachable cluster does not stall the whole page.

Cost of a page view, per pipeline, whatever the length of the history: the checkpoint ids
are listed (one S3 LIST per 1,000 ids, no object read) and only the ``limit`` checkpoints
shown are read (3 GETs each: claim, outcome, prepared), plus ``latest_completed()`` (the
pointer, one LIST after it, and one view) and the savepoints.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, TypeVar

from lockstep.errors import TerminalError, TransientError
from lockstep.model.checkpoint import CheckpointClaim, CheckpointStatus, CheckpointView
from lockstep.model.offsets import TopicPartition
from lockstep.model.savepoint import Savepoint
from lockstep.model.state_manifest import iso_ms
from lockstep.ops import lag
from lockstep.ops.lag import PartitionLag
from lockstep.spec import PipelineSpec, load_each
from lockstep.store.checkpoint_store import COMPARISON, TABLE_UPKEEP

T = TypeVar("T")
#: Seconds to wait for Kafka metadata; a page view should fail fast, the DAG tasks may wait longer.
KAFKA_TIMEOUT_S = 5.0
S3_TIMEOUT_S = 5.0
MAX_WORKERS = 8
#: Checkpoints read in parallel within one pipeline (the views of one page, the run search).
VIEW_WORKERS = 4
#: How far back the per-run view looks for the checkpoint a DAG run claimed.
RUN_SEARCH_WINDOW = 200


@dataclass(frozen=True)
class CheckpointRow:
    checkpoint_id: int
    status: str
    run_id: str
    claimed_at: str
    start_source: str
    restored_from: str | None
    ranges: list[str]
    records_in: int | None
    records_out: int | None
    records_dead_lettered: int | None
    transactions: int | None
    finished_at: str | None
    duration_s: float | None
    abort_reason: str | None
    replay_hint: str | None
    #: Completed with no records: every range empty (an idle source), nothing worth a row of its own.
    empty: bool = False
    #: Completed after a repair: the transactions lost and the input ranges given back to the next checkpoint.
    repair: str | None = None
    #: A stateful pipeline's state after this checkpoint (completed, or prepared and not aborted): its
    #: keys and bytes, and its watermark (ISO 8601 UTC; None before any event time). None when stateless.
    state_keys: int | None = None
    state_bytes: int | None = None
    watermark: str | None = None
    #: How far the watermark is behind the checkpoint's pinned clock (the "now" its run read), in seconds:
    #: event time falling behind shows here before any window is late. None when stateless or no watermark.
    watermark_delay_s: float | None = None
    #: The end offset the claim pinned per partition (``topic:partition``): where the next checkpoint starts,
    #: and what the lag chart counts from (`records_behind`). Read from the claim the row is built from.
    end_offsets: dict[str, int] = field(default_factory=dict)
    #: A pipelined checkpoint's (``checkpoints.pipelined``): the prepared checkpoint it was planned on top of.
    after: int | None = None
    #: The parts of the code (`lockstep.steps.code_version`) that differ from the next older checkpoint shown:
    #: where a new transform, route or state operator took over. Empty: the same code (or not recorded).
    code_changed: list[str] = field(default_factory=list)
    #: With ``sink.iceberg``: the checkpoint's rows for the table and where they are (staged on its branch, or the
    #: snapshot on main that published them). None: no table, or no rows.
    iceberg: str | None = None


@dataclass(frozen=True)
class EmptyRun:
    """Consecutive empty completed checkpoints, shown as one row (ids newest first like the table)."""

    first: int
    last: int
    ids: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class SavepointRow:
    name: str
    checkpoint_id: int
    created_at: str


@dataclass(frozen=True)
class LastCompletedRow:
    checkpoint_id: int
    completed_at: str
    age_s: float | None


@dataclass(frozen=True)
class DryRunRow:
    """The latest dry run: what it would have taken as checkpoint ``checkpoint_id``; nothing was claimed."""

    checkpoint_id: int
    run_id: str
    planned_at: str
    start_source: str
    restored_from: str | None
    ranges: list[str]
    records: int


def dry_run_row(plan: CheckpointClaim | None) -> list[DryRunRow]:
    """The latest dry run's plan (the claim it did not make) as a row."""
    if plan is None:
        return []
    return [DryRunRow(plan.checkpoint_id, plan.run_id, plan.claimed_at, plan.start_source, plan.restored_from,
                      [str(r) for r in plan.ranges if not r.is_empty], sum(r.count for r in plan.ranges))]


@dataclass(frozen=True)
class ComparisonRow:
    """The latest ``lockstep replay --compare``: which completed checkpoints were computed again through which
    spec, and what changed (`lockstep.ops.compare.Comparison`)."""

    compared_at: str
    spec: str
    checkpoints: list[int]
    same: bool
    changed: int
    added: int
    removed: int
    not_compared: int
    fields: list[str]
    #: a stateful pipeline's state: the keys compared (summed over the checkpoints), and those that differ
    state_keys: int | None = None
    state_differ: int = 0

    @property
    def output_same(self) -> bool:
        return not (self.changed or self.added or self.removed)


def comparison_row(doc: dict[str, Any] | None) -> list[ComparisonRow]:
    """The latest comparison's report, as the store keeps it, as a row; a report that does not read as one is
    left out (it is informational)."""
    if not doc:
        return []
    try:
        total = doc["total"]
        state = total.get("state")
        return [ComparisonRow(str(doc["compared_at"]), str(doc["spec"]), [int(c) for c in doc["compared"]],
                              bool(doc["same"]), int(total["changed"]), int(total["added"]), int(total["removed"]),
                              len(doc.get("not_compared") or {}), sorted(total.get("fields") or {}),
                              None if state is None else int(state["keys"]),
                              0 if state is None else int(state["changed"]) + int(state["added"]) + int(state["removed"]))]
    except (KeyError, TypeError, ValueError):
        return []


@dataclass(frozen=True)
class UpkeepRow:
    """The latest run of one upkeep action of a pipeline's Iceberg table (``lockstep.ops.table_upkeep``)."""

    action: str
    at: str
    line: str
    seconds: float | None
    by: str
    files_after: int
    dry_run: bool = False


#: The upkeep actions in the order they run (``lockstep iceberg upkeep``).
UPKEEP_ACTIONS = ("compact", "expire", "orphans")


def upkeep_rows(doc: dict[str, Any] | None) -> list[UpkeepRow]:
    """Each upkeep action's latest figures, as the store keeps them, in the order the actions run; an entry that
    does not read as one is left out (they are informational)."""
    rows = []
    for action in UPKEEP_ACTIONS:
        entry = (doc or {}).get(action)
        if not isinstance(entry, dict):
            continue
        try:
            rows.append(UpkeepRow(action, str(entry["at"]), str(entry["line"]),
                                  None if entry.get("seconds") is None else float(entry["seconds"]), str(entry["by"]),
                                  int(entry["files_after"]), bool(entry.get("dry_run"))))
        except (KeyError, TypeError, ValueError):
            continue
    return rows


@dataclass
class Section:
    """One part of a pipeline's overview: its rows, or why they could not be read."""

    rows: list[Any] = field(default_factory=list)
    error: str | None = None


@dataclass
class CheckpointsSection(Section):
    """One page of a pipeline's checkpoints, newest first, and where the neighbouring pages start.

    ``older_before``: the ``before`` of the next older page (None: this page holds the oldest).
    ``newer``: whether newer checkpoints exist; ``newer_before`` is the next newer page's
    ``before``, None when that page is the newest (no ``before`` at all)."""

    #: The oldest and the newest checkpoint id stored (the page lists no more than it shows, so it does not
    #: count them: retention and savepoints leave gaps).
    oldest: int | None = None
    newest: int | None = None
    older_before: int | None = None
    newer: bool = False
    newer_before: int | None = None
    highlight: int | None = None
    missing: int | None = None


@dataclass(frozen=True)
class PageQuery:
    limit: int = 20
    before: int | None = None
    checkpoint: int | None = None
    pipeline: str | None = None


@dataclass
class PipelineOverview:
    name: str
    dag_id: str
    description: str
    topics: list[str]
    sink_topic: str  #: sink.topic, then the sink.routes topics
    dead_letter_topic: str
    consumer_group: str
    store: str
    checkpoints: CheckpointsSection
    savepoints: Section
    lag: Section
    last_completed: Section = field(default_factory=Section)
    last_dry_run: Section = field(default_factory=Section)
    #: the latest ``lockstep replay --compare`` (`ComparisonRow`)
    last_comparison: Section = field(default_factory=Section)
    #: open transactions of the pipeline, and foreign ones holding back its partitions (``OpenTransaction``).
    transactions: Section = field(default_factory=Section)
    #: ``sink.iceberg``'s table, and its upkeep actions' latest figures (`UpkeepRow`)
    table: str | None = None
    table_upkeep: Section = field(default_factory=Section)
    #: the spec's ``checkpoints.tasks``: which task logs a checkpoint row links to
    tasks: str = "three"

    @property
    def total_lag(self) -> int | None:
        """Records past the committed offsets: in flight plus unread."""
        counts = [r.not_committed for r in self.lag.rows]
        if self.lag.error is not None or any(n is None for n in counts):
            return None
        return sum(int(n) for n in counts)

    @property
    def in_flight(self) -> int:
        return sum(r.in_flight for r in self.lag.rows) if self.lag.error is None else 0

    @property
    def series(self) -> CheckpointSeries | None:
        """What the charts plot (and the JSON carries as ``series``), from the sections already read."""
        return checkpoint_series(self.checkpoints, self.lag)

    def to_json(self) -> dict[str, Any]:
        series = self.series
        doc = {**asdict(self), "total_lag": self.total_lag, "in_flight": self.in_flight,
               "series": asdict(series) if series is not None else None}
        for row, obj in zip(doc["lag"]["rows"], self.lag.rows):
            row["not_committed"] = obj.not_committed
        doc["transactions"] = {"rows": [r.to_json() for r in self.transactions.rows],
                               "error": self.transactions.error}
        return doc


@dataclass
class Overview:
    pipelines_dir: str
    pipelines: list[PipelineOverview]
    spec_errors: list[str]
    generated_at: str
    timezone: str = "UTC"
    query: PageQuery = field(default_factory=PageQuery)

    def to_json(self) -> dict[str, Any]:
        return {
            "pipelines_dir": self.pipelines_dir, "generated_at": self.generated_at, "timezone": self.timezone,
            "query": asdict(self.query), "spec_errors": self.spec_errors,
            "pipelines": [p.to_json() for p in self.pipelines],
        }


# ---- pure conversions ------------------------------------------------------------------------------
def _parse_time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def duration_seconds(start: str | None, end: str | None) -> float | None:
    """Seconds between two ISO timestamps, None when either is missing, unparsable or naive/aware-mixed."""
    a, b = _parse_time(start), _parse_time(end)
    if a is None or b is None:
        return None
    try:
        return round((b - a).total_seconds(), 3)
    except TypeError:
        return None


def is_empty_view(view: CheckpointView) -> bool:
    """A completed checkpoint that read and wrote nothing (collapsed on the page). One that read no records
    but wrote (windows fired by ``idle_advance``, a repair's lost share written again) is not."""
    prepared = view.prepared
    return (view.status is CheckpointStatus.COMPLETED and all(r.is_empty for r in view.claim.ranges)
            and (prepared is None or (prepared.records_in == 0 and not prepared.transactions)))


def checkpoint_row(view: CheckpointView) -> CheckpointRow:
    prepared, completed, aborted = view.prepared, view.completed, view.aborted
    finished = completed.completed_at if completed else aborted.aborted_at if aborted else None
    state = completed.state if completed else prepared.state if prepared and not aborted else None
    return CheckpointRow(
        checkpoint_id=view.checkpoint_id, status=view.status.value, run_id=view.claim.run_id,
        claimed_at=view.claim.claimed_at, start_source=view.claim.start_source,
        restored_from=view.claim.restored_from, ranges=[str(r) for r in view.claim.ranges],
        records_in=prepared.records_in if prepared else None,
        records_out=prepared.records_out if prepared else None,
        records_dead_lettered=prepared.records_dead_lettered if prepared else None,
        transactions=len(prepared.transactions) if prepared else None,
        finished_at=finished, duration_s=duration_seconds(view.claim.claimed_at, finished),
        abort_reason=aborted.reason if aborted else None, replay_hint=aborted.replay_hint if aborted else None,
        empty=is_empty_view(view), repair=completed.repair.summary if completed and completed.repair else None,
        state_keys=state.keys if state else None, state_bytes=state.bytes if state else None,
        watermark=iso_ms(state.watermark_ms) if state and state.watermark_ms is not None else None,
        watermark_delay_s=watermark_delay(view.claim, state.watermark_ms if state else None),
        end_offsets=dict(view.claim.end_offsets), after=view.claim.after, iceberg=iceberg_text(view),
    )


def iceberg_text(view: CheckpointView) -> str | None:
    """A checkpoint's rows for its Iceberg table, in words: staged, published (and which snapshot), or dropped."""
    staged = view.prepared.iceberg if view.prepared is not None else None
    if staged is None or staged.snapshot_id is None:
        return None
    rows = f"{staged.table}: {staged.records:,} rows in {len(staged.files)} files"
    if view.completed is not None:
        published = view.completed.iceberg_snapshot
        return f"{rows}, published as snapshot {published}" if published is not None else f"{rows}, not published"
    if view.aborted is not None:
        return f"{rows}, dropped with the checkpoint"
    return f"{rows}, staged on branch {staged.branch}"


def with_code_changes(rows: list[CheckpointRow], views: list[CheckpointView]) -> list[CheckpointRow]:
    """``rows`` (of ``views``, newest first), each marked with the parts of the code that differ from the next
    older one's claim."""
    from dataclasses import replace

    from lockstep.steps.code_version import code_changes

    for i in range(len(views) - 1):
        changed = code_changes(views[i + 1].claim.code, views[i].claim.code)
        if changed:
            rows[i] = replace(rows[i], code_changed=list(changed))
    return rows


def watermark_delay(claim: CheckpointClaim, watermark_ms: int | None) -> float | None:
    """Seconds from the watermark to the claim's pinned clock (``clock_ms``, else its ``claimed_at``)."""
    if watermark_ms is None:
        return None
    try:
        return round((claim.clock - watermark_ms) / 1000, 3)
    except (TypeError, ValueError):  # a claim of an earlier version with an unreadable claimed_at
        return None


@dataclass(frozen=True)
class CheckpointSeries:
    """The figures the page's charts plot, one per checkpoint shown, oldest first (the table is newest
    first). Built from the rows and the lag section the page has already read: no store call of its own.

    ``records_behind``: records past each checkpoint's end offsets (`records_behind`). ``watermark_delay_s``
    is None for a stateless pipeline (no row carries state)."""

    checkpoint_ids: list[int]
    records_in: list[int | None]
    records_out: list[int | None]
    records_dead_lettered: list[int | None]
    duration_s: list[float | None]
    records_behind: list[int | None]
    watermark_delay_s: list[float | None] | None = None


def checkpoint_series(checkpoints: CheckpointsSection, lag: Section) -> CheckpointSeries | None:
    """The charts' figures for one pipeline's page of checkpoints; None when there is no row to plot.

    The newest checkpoint's lag is read against the lag section's last stable offsets ("now"), but only
    when the page holds the newest checkpoint stored: on an older page, the next claim is off the page."""
    if checkpoints.error is not None or not checkpoints.rows:
        return None
    rows = sorted(checkpoints.rows, key=lambda r: r.checkpoint_id)
    now = None
    if not checkpoints.newer and lag.error is None and lag.rows and all(r.last_stable is not None for r in lag.rows):
        now = {r.partition: r.last_stable for r in lag.rows}
    stateful = any(r.state_keys is not None for r in rows)
    return CheckpointSeries(
        checkpoint_ids=[r.checkpoint_id for r in rows], records_in=[r.records_in for r in rows],
        records_out=[r.records_out for r in rows], records_dead_lettered=[r.records_dead_lettered for r in rows],
        duration_s=[r.duration_s for r in rows], records_behind=records_behind(rows, now),
        watermark_delay_s=[r.watermark_delay_s for r in rows] if stateful else None,
    )


def records_behind(rows: list[CheckpointRow], now: dict[str, int] | None = None) -> list[int | None]:
    """Per checkpoint (``rows`` oldest first), the records past its end offsets when the next one was
    claimed: the next claim's end offsets less its own, summed over partitions. A claim ends at the last
    stable offset unless the record budget (``max_records``) cut it short, so this is the lag as the next
    checkpoint found it, or a lower bound of it. The newest row is measured against ``now`` (last stable
    offsets by partition, from the lag section), when given.

    No figure (None) for an aborted checkpoint (nothing of it was committed: the next one replays its
    ranges), for a row whose next claim ends behind its own end (a restore went back), or with nothing to
    compare."""
    out: list[int | None] = []
    for i, row in enumerate(rows):
        following = rows[i + 1].end_offsets if i + 1 < len(rows) else now
        if row.status == CheckpointStatus.ABORTED.value or not row.end_offsets or following is None:
            out.append(None)
            continue
        gaps = [following[p] - end for p, end in row.end_offsets.items() if p in following]
        out.append(sum(gaps) if gaps and min(gaps) >= 0 else None)
    return out


def collapse_empty(rows: list[CheckpointRow], keep: Iterable[int] = ()) -> list[CheckpointRow | EmptyRun]:
    """Runs of two or more consecutive empty checkpoints (in the order given) become one EmptyRun.

    Ids in ``keep`` (the highlighted checkpoint) are never folded away."""
    kept = set(keep)
    out: list[CheckpointRow | EmptyRun] = []
    run: list[CheckpointRow] = []

    def flush() -> None:
        if len(run) >= 2:
            ids = tuple(r.checkpoint_id for r in run)
            out.append(EmptyRun(first=min(ids), last=max(ids), ids=ids))
        else:
            out.extend(run)
        run.clear()

    for row in rows:
        if row.empty and row.checkpoint_id not in kept:
            run.append(row)
        else:
            flush()
            out.append(row)
    flush()
    return out


def select_window(ids: list[int], limit: int, before: int | None = None, checkpoint: int | None = None
                  ) -> tuple[list[int], CheckpointsSection]:
    """Which of ``ids`` (ascending) one page shows, newest first, and the paging around it.

    ``checkpoint`` wins over ``before``: the page holding that id, with it roughly in the middle.
    A ``checkpoint`` that is not stored (deleted by retention, a typo) gives the newest page and
    ``missing`` set, so the page can say so."""
    page = CheckpointsSection()
    n = len(ids)
    if checkpoint is not None and checkpoint in ids:
        i = bisect_left(ids, checkpoint)
        hi = min(n, i + 1 + (limit - 1) // 2)
        lo = max(0, hi - limit)
        hi = min(n, lo + limit)
        page.highlight = checkpoint
    else:
        if checkpoint is not None:
            page.missing = checkpoint
        hi = bisect_left(ids, before) if before is not None and checkpoint is None else n
        lo = max(0, hi - limit)
    if lo > 0:
        page.older_before = ids[lo]
    if hi < n:
        page.newer = True
        newer_hi = hi + limit
        page.newer_before = ids[newer_hi] if newer_hi < n else None
    return list(reversed(ids[lo:hi])), page


def savepoint_row(savepoint: Savepoint) -> SavepointRow:
    return SavepointRow(savepoint.name, savepoint.checkpoint_id, savepoint.created_at)


def last_completed_row(view: CheckpointView | None, now: datetime) -> list[LastCompletedRow]:
    if view is None or view.completed is None:
        return []
    at = _parse_time(view.completed.completed_at)
    try:
        age = round((now - at).total_seconds(), 3) if at is not None else None
    except TypeError:  # a naive timestamp
        age = None
    return [LastCompletedRow(view.checkpoint_id, view.completed.completed_at, age)]


def describe_error(exc: BaseException) -> str:
    """Lockstep's own errors already say what to do; anything else is named by its type."""
    if isinstance(exc, (TerminalError, TransientError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _guarded(section: Section, read: Callable[[], list[Any]]) -> Section:
    try:
        section.rows = read()
    except Exception as exc:  # noqa: BLE001 - the page must render whatever one source does
        section.error = describe_error(exc)
    return section


# ---- store reads (over CheckpointStore's public API) -------------------------------------------------
def _views(store: Any, ids: list[int]) -> list[CheckpointView]:
    if len(ids) <= 1:
        found = [store.view(i) for i in ids]
    else:
        with ThreadPoolExecutor(max_workers=VIEW_WORKERS, thread_name_prefix="lockstep-view") as pool:
            found = list(pool.map(store.view, ids))
    return [v for v in found if v is not None]


def checkpoint_page(store: Any, query: PageQuery) -> CheckpointsSection:
    """One page of checkpoints. Only the ids around the page are listed (`window_ids`) and only the
    shown checkpoints are read, so the page costs the same at 10,000 checkpoints as at 20."""
    try:
        newest = store.newest_checkpoint_id()
        ids, missing = window_ids(store, query, newest)
        shown, page = select_window(ids, query.limit, query.before if query.checkpoint is None else None,
                                    None if missing else query.checkpoint)
        page.missing = missing
        page.oldest = next(iter(store.checkpoint_ids()), None) if ids else None
        page.newest = newest
        views = _views(store, shown)
        page.rows = with_code_changes([checkpoint_row(v) for v in views], views)
    except Exception as exc:  # noqa: BLE001 - as _guarded
        return CheckpointsSection(error=describe_error(exc))
    return page


def window_ids(store: Any, query: PageQuery, newest: int | None) -> tuple[list[int], int | None]:
    """The stored ids (ascending) that `select_window` needs to place the page ``query`` asks for, the
    same page and links as over every id: up to ``limit + 1`` below the page's anchor (the ``before``, the
    asked ``checkpoint``, or past the newest) and ``2 * limit + 1`` from it up. Also the asked checkpoint
    when it is not stored (the newest page is shown then). ``newest``: the highest id stored."""
    limit = max(1, query.limit)
    anchor = query.checkpoint if query.checkpoint is not None else query.before
    if anchor is not None:
        above = _ids_from(store, anchor - 1, count=2 * limit + 1)
        if query.checkpoint is None or (above and above[0] == query.checkpoint):
            # A `before` past the newest id: nothing lies between, so search down from the newest.
            below_from = anchor if newest is None else min(anchor, newest + 1)
            return _ids_below(store, below_from, limit + 1) + above, None
    ids = [] if newest is None else _ids_below(store, newest + 1, limit + 1)
    return ids, query.checkpoint


def _ids_from(store: Any, after: int | None, stop: int | None = None, count: int | None = None) -> list[int]:
    """Ids above ``after`` (all, when None), below ``stop``, at most ``count`` of them."""
    found: list[int] = []
    for cid in store.checkpoint_ids(after=after if after is not None and after >= 1 else None):
        if stop is not None and cid >= stop:
            break
        found.append(cid)
        if count is not None and len(found) >= count:
            break
    return found


def _ids_below(store: Any, anchor: int, count: int) -> list[int]:
    """The ``count`` highest ids below ``anchor``, ascending (fewer: all there are). Ids are dense but for
    the gaps retention and savepoints leave, so the first listing, from ``anchor - count``, mostly
    suffices; each further one starts four times as far down."""
    span = count
    while True:
        start = anchor - span - 1
        found = _ids_from(store, start, stop=anchor)
        if len(found) >= count or start < 1:
            return found[-count:]
        span *= 4


def find_run_checkpoints(store: Any, run_id: str, window: int = RUN_SEARCH_WINDOW) -> tuple[list[CheckpointRow], int]:
    """The checkpoints claimed by ``run_id`` among the newest ``window`` ids, newest first, and how
    many ids were searched. Reads newest first, a few at a time, and stops after the first batch
    with a match: a run claims one checkpoint, and the one asked about is usually recent."""
    ids = list(store.checkpoint_ids())[-window:][::-1]
    for start in range(0, len(ids), VIEW_WORKERS * 2):
        batch = _views(store, ids[start:start + VIEW_WORKERS * 2])
        found = [checkpoint_row(v) for v in batch if v.claim.run_id == run_id]
        if found:
            return found, len(ids)
    return [], len(ids)


# ---- I/O at the edges ------------------------------------------------------------------------------
def _partitions(admin: Any, topics: list[str], bootstrap: str) -> list[TopicPartition]:
    result: list[TopicPartition] = []
    for topic in topics:
        try:
            metadata = admin.list_topics(topic, timeout=KAFKA_TIMEOUT_S)
        except Exception as exc:
            raise TransientError(f"Kafka at {bootstrap} did not answer within {KAFKA_TIMEOUT_S:g} s "
                                 f"(metadata of topic {topic}): {exc}") from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            reason = found.error if found is not None and found.error is not None else "unknown topic"
            raise TerminalError(f"source topic {topic!r} is not readable on {bootstrap}: {reason}")
        result.extend(TopicPartition(topic, p) for p in sorted(found.partitions))
    return result


def read_lag(spec: PipelineSpec, store: Any, now: datetime) -> list[PartitionLag]:
    """Transaction-aware lag (``lockstep.ops.lag``), with the page's short Kafka timeouts. Without a
    store (S3 unreachable) it falls back to the consumer group's offsets, so the lag still shows."""
    from lockstep.connections import kafka_config

    bootstrap = str(kafka_config(spec.source.kafka_conn_id).get("bootstrap.servers"))
    return lag.read_lag(spec, store, now=now, timestamp_timeout_s=KAFKA_TIMEOUT_S,
                        list_partitions=lambda admin, topics: _partitions(admin, list(topics), bootstrap)).partitions


def read_open_transactions(spec: PipelineSpec, store: Any, now: datetime) -> list[Any]:
    """``lockstep transactions`` for the page: the same rows, read with the page's store and committers
    that give up after ``KAFKA_TIMEOUT_S`` rather than a task's minute."""
    from lockstep.connections import kafka_config
    from lockstep.ops.transaction_console import look
    from lockstep.steps.client_factory import committer_for_connection, kafka_admin
    from lockstep.steps.coordinator import Pipeline

    def committer(conn_id: str) -> Any:
        return committer_for_connection(conn_id, retry_deadline_s=KAFKA_TIMEOUT_S)

    p = Pipeline(spec, store, kafka_admin(spec.source.kafka_conn_id, check_s=KAFKA_TIMEOUT_S),
                 kafka_config(spec.source.kafka_conn_id), lambda: committer(spec.sink.kafka_conn_id),
                 wall_ms=lambda: int(now.timestamp() * 1000), committer_for=committer)
    return look(p).rows


def page_store(spec: PipelineSpec) -> Any:
    """The pipeline's checkpoint store, on an S3 client that gives up in seconds rather than minutes.

    ``client_factory.checkpoint_store`` retries patiently by default, as a DAG task should; a page view
    should not. Its client is shared by the page's threads that read the views (``VIEW_WORKERS``), hence
    its pool. Built by the store's one maker of S3 clients, like every other store of the plugin.
    """
    from lockstep.steps.client_factory import checkpoint_store

    return checkpoint_store(spec, timeout_s=S3_TIMEOUT_S, max_pool_connections=VIEW_WORKERS * 2)


def read_savepoints(spec: PipelineSpec) -> list[SavepointRow]:
    return [savepoint_row(s) for s in page_store(spec).list_savepoints()]


def load_pipeline_specs(directory: Path) -> tuple[list[PipelineSpec], list[str]]:
    """All specs that validate, and every problem found: one bad file must not hide the other pipelines."""
    try:
        specs, problems = load_each(directory)
    except OSError as exc:
        return [], [f"cannot read pipeline specs from {directory}: {exc}"]
    return specs, [str(p) for p in problems]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def pipeline_overview(spec: PipelineSpec, checkpoints: CheckpointsSection, savepoints: Section, lag: Section,
                      last_completed: Section, last_dry_run: Section | None = None,
                      transactions: Section | None = None, last_comparison: Section | None = None,
                      table_upkeep: Section | None = None) -> PipelineOverview:
    return PipelineOverview(
        name=spec.name, dag_id=spec.dag_id, description=spec.description, topics=list(spec.source.topics),
        sink_topic=", ".join(spec.sink.topics) or (f"Iceberg table {spec.sink.iceberg.table}" if spec.sink.iceberg
                                                   else ""), dead_letter_topic=spec.sink.dead_letter_topic,
        consumer_group=spec.source.consumer_group, store=f"s3://{'/'.join(spec.checkpoint_location)}",
        checkpoints=checkpoints, savepoints=savepoints, lag=lag, last_completed=last_completed,
        last_dry_run=last_dry_run or Section(), transactions=transactions or Section(),
        last_comparison=last_comparison or Section(), tasks=spec.checkpoints.tasks,
        table=spec.sink.iceberg.table if spec.sink.iceberg else None, table_upkeep=table_upkeep or Section(),
    )


def gather(directory: Path, limit: int = 20, now: Callable[[], datetime] | None = None, *,
           query: PageQuery | None = None, tz: tzinfo | None = None,
           store_for: Callable[[PipelineSpec], Any] = page_store,
           lag_for: Callable[[PipelineSpec, Any, datetime], list[PartitionLag]] = read_lag,
           transactions_for: Callable[[PipelineSpec, Any, datetime], list[Any]] = read_open_transactions) -> Overview:
    """Everything the page shows; ``query.pipeline`` limits it (and its S3/Kafka calls) to one pipeline."""
    query = query or PageQuery(limit=limit)
    moment = (now or _utcnow)()
    specs, errors = load_pipeline_specs(directory)
    if query.pipeline is not None:
        specs = [s for s in specs if s.name == query.pipeline]
    # One store (one boto3 client) per pipeline, made here: creating clients is not thread-safe.
    stores: dict[str, Any] = {}
    store_errors: dict[str, str] = {}
    for spec in specs:
        try:
            stores[spec.name] = _LatestOnce(store_for(spec))
        except Exception as exc:  # noqa: BLE001 - e.g. a missing connection: that pipeline's sections say so
            store_errors[spec.name] = describe_error(exc)

    with ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="lockstep-page") as pool:
        def section(spec: PipelineSpec, read: Callable[[Any], list[Any]], needs_store: bool = True) -> Any:
            if needs_store and spec.name in store_errors:
                return pool.submit(Section, [], store_errors[spec.name])
            return pool.submit(_guarded, Section(), lambda: read(stores.get(spec.name)))

        def of(spec: PipelineSpec, read: Callable[[PipelineSpec, Any, datetime], list[Any]]) -> Callable[[Any], list[Any]]:
            """``read`` for this spec, bound now: the sections read later, in the pool's threads."""
            return lambda st: read(spec, st, moment)

        def checkpoints(spec: PipelineSpec) -> Any:
            if spec.name in store_errors:
                return pool.submit(CheckpointsSection, [], store_errors[spec.name])
            return pool.submit(checkpoint_page, stores[spec.name], query)

        futures = [(spec, checkpoints(spec),
                    section(spec, lambda st: [savepoint_row(x) for x in st.list_savepoints()]),
                    section(spec, of(spec, lag_for), needs_store=False),
                    section(spec, lambda st: last_completed_row(st.latest_completed(), moment)),
                    section(spec, lambda st: dry_run_row(st.last_dry_run())),
                    section(spec, of(spec, transactions_for)),
                    section(spec, lambda st: comparison_row(st.note(COMPARISON))),
                    section(spec, lambda st: upkeep_rows(st.note(TABLE_UPKEEP))) if spec.sink.iceberg else None)
                   for spec in specs]
        pipelines = [pipeline_overview(spec, c.result(), s.result(), lag.result(), last.result(), dry.result(),
                                       txns.result(), compared.result(), kept.result() if kept else None)
                     for spec, c, s, lag, last, dry, txns, compared, kept in futures]
    stamp = moment.isoformat(timespec="seconds")
    return Overview(str(directory), pipelines, errors, stamp, timezone=zone_name(tz or UTC), query=query)


class _LatestOnce:
    """A store whose ``latest_completed()`` is read once per page view: the lag and the "last
    completed" line both need it (a pointer GET, a LIST and a view each time)."""

    def __init__(self, store: Any) -> None:
        import threading

        self._store = store
        self._lock = threading.Lock()
        self._latest: tuple[Any] | None = None

    def latest_completed(self) -> Any:
        with self._lock:
            if self._latest is None:
                self._latest = (self._store.latest_completed(),)
            return self._latest[0]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def zone_name(tz: tzinfo) -> str:
    """An IANA name where the zone has one (``Europe/Amsterdam``), else its abbreviation."""
    for attr in ("key", "name", "zone"):
        value = getattr(tz, attr, None)
        if isinstance(value, str) and value:
            return value
    return datetime.now(tz).tzname() or "UTC"


def find_spec_for_dag(directory: Path, dag_id: str) -> PipelineSpec | None:
    specs, _ = load_pipeline_specs(directory)
    return next((s for s in specs if s.dag_id == dag_id), None)
