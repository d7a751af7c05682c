"""Event-time windows over keyed state. A window fires when this checkpoint's records move the watermark past
its end plus the allowed lateness (`lockstep.rules.watermarks`), and its output names, as its provenance, the
latest record (by event time) that it counted. A record every window of which had fired goes to the
dead-letter topic as ``late``. The state keeps, until a window fires, either

- **partial aggregates** (`_partial_windows`), when every aggregate merges (`lockstep.rules.window_partials`):
  one row per key and open window with its aggregates so far; each checkpoint merges its records into them in
  one aggregation; or
- **the windows' rows** (`_row_windows`) otherwise: the aggregates are computed when a window fires, over the
  rows of every checkpoint that fed it.

A state of rows left by an earlier version (or before ``keep_rows`` was dropped) is turned into partials by the
first checkpoint that reads it; partials cannot become rows again (`window_state_refusal`)."""
from __future__ import annotations

__all__ = [
    "last_window_end", "partial_shape", "size_of", "window_starts_column", "window_state_refusal", "window_value",
]

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lockstep.model.state_rows import (
    EVENT,
    FROM_OFFSET,
    FROM_PARTITION,
    FROM_TOPIC,
    GROUP,
    INTERNAL,
    KEY,
    WINDOW_START,
    is_partial_window,
)
from lockstep.rules.watermarks import EventClock
from lockstep.rules.window_partials import PREFIX, Partial, aggregate_of, kept_partials
from lockstep.spark.keyed_rows import LATE, PROVENANCE, _records, no_headers
from lockstep.spec import StateSpec, WindowSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def window_value(w: WindowSpec, encode: Callable[[Column], Column] | None = None) -> Column:
    """A fired window's output value, from a row of (``__ls_key``, ``__ls_start``, the aggregates): the
    key (as ``key_name``), ``window_start``/``window_end`` in ISO-8601 UTC, the aggregates, as JSON or
    as ``encode`` makes the record (the sink's format)."""
    from pyspark.sql import functions as F

    sizes = (w.slide_ms, w.size_ms, *(size for size, _ in w.earlier))
    fmt = "yyyy-MM-dd'T'HH:mm:ss" + (".SSS" if any(ms % 1000 for ms in sizes) else "") + "'Z'"
    return (encode or F.to_json)(F.struct(
        F.col(KEY).alias(w.key_name),
        F.date_format(F.timestamp_millis(F.col(WINDOW_START)), fmt).alias("window_start"),
        F.date_format(F.timestamp_millis(F.col(WINDOW_START) + size_of(w, F.col(WINDOW_START))), fmt).alias("window_end"),
        *[F.col(name) for name, _ in w.aggregates]))


def size_of(w: WindowSpec, t: Column) -> Column:
    """The size of the window an event time, or a window's start, belongs to: an earlier size before the time its
    windows end by, else the spec's (`lockstep.rules.window_drain`)."""
    from pyspark.sql import functions as F

    size = F.lit(w.size_ms)
    for earlier, until in reversed(w.earlier):  # the oldest is tested first
        size = F.when(t < F.lit(until), F.lit(earlier)).otherwise(size)
    return size


def window_starts_column(w: WindowSpec) -> Column:
    """The starts of the windows of a row's event time (``__ls_event_ms``), as an array."""
    from pyspark.sql import functions as F

    t = F.col(EVENT)
    if w.earlier:  # tumbling windows whose size changed: one window, of the size its time has
        return F.array(t - F.pmod(t, size_of(w, t)))
    slide, size = F.lit(w.slide_ms), F.lit(w.size_ms)
    last = t - F.pmod(t, slide)
    return F.sequence(last - size + slide, last, slide)


def last_window_end(w: WindowSpec, t: Column) -> Column:
    """The end of the last window an event time belongs to."""
    from pyspark.sql import functions as F

    if w.earlier:
        size = size_of(w, t)
        return t - F.pmod(t, size) + size
    return t - F.pmod(t, F.lit(w.slide_ms)) + F.lit(w.size_ms)


def _late_for_windows(w: WindowSpec, before: int | None) -> Column:
    """A record every window of which had fired before the checkpoint started (its base's watermark)."""
    from pyspark.sql import functions as F

    if before is None:
        return F.lit(False)
    return last_window_end(w, F.col(EVENT)) + F.lit(w.allowed_lateness_ms) <= F.lit(before)


def window_state_refusal(w: WindowSpec, base_columns: Sequence[str], written_by: int) -> str | None:
    """Why a window state of ``base_columns`` cannot go on under ``w``, or None. Rows become partials; partials
    cannot become rows, nor serve other aggregates than those they hold."""
    if not is_partial_window(base_columns):
        return None
    held = sorted(name for name in map(aggregate_of, base_columns) if name is not None)
    partials = kept_partials(w)
    if partials is not None and {p.column for p in partials} == {c for c in base_columns if c.startswith(PREFIX)}:
        return None
    why = ("state.window.keep_rows is set, or an aggregate is not a count, sum, min or max of one argument, so the "
           "windows' rows are needed" if partials is None else "state.window.aggregates changed")
    return (f"the state of checkpoint {written_by} keeps the open windows' partial aggregates ({', '.join(held)}) "
            f"under the aggregates it was written with, not the windows' rows, and {why}. Keep the aggregates as "
            "they were (and keep_rows as it was), or give the pipeline a new name to start without state")


def partial_shape(w: WindowSpec, rows: DataFrame) -> DataFrame:
    """An empty frame of a partial window state's columns, each aggregate typed as Spark types it over ``rows``
    (the transform's columns)."""
    from pyspark.sql import functions as F

    partials = kept_partials(w)
    assert partials is not None
    return _as_partials(rows.withColumn(WINDOW_START, F.lit(0).cast("bigint")), partials,
                        _partial_types(rows, partials)).limit(0)


def _partial_types(rows: DataFrame, partials: tuple[Partial, ...]) -> dict[str, str]:
    """Each aggregate's type as Spark gives it over ``rows`` (one analysis, no job)."""
    from pyspark.sql import functions as F

    typed = rows.agg(*[F.expr(f"{p.function}({p.argument})").alias(p.column) for p in partials])
    return {f.name: f.dataType.simpleString() for f in typed.schema.fields}


def _as_partials(rows: DataFrame, partials: tuple[Partial, ...], types: dict[str, str]) -> DataFrame:
    """Rows (with their window's start) as partial rows of one record each: a count's 1 or 0, a sum's, min's
    or max's argument, typed as the aggregate."""
    from pyspark.sql import functions as F

    def value(p: Partial) -> Column:
        if p.function == "count":
            one = F.lit(1) if p.argument == "*" else F.when(F.expr(p.argument).isNotNull(), 1).otherwise(0)
            return one.cast(types[p.column])
        return F.expr(p.argument).cast(types[p.column])

    return rows.select(KEY, EVENT, GROUP, WINDOW_START, F.col("topic").alias(FROM_TOPIC),
                       F.col("partition").cast("int").alias(FROM_PARTITION),
                       F.col("offset").cast("bigint").alias(FROM_OFFSET),
                       *[value(p).alias(p.column) for p in partials])


def _windows(state: StateSpec, clock: EventClock, good: DataFrame, loaded: DataFrame, data_columns: list[str],
             encode: Callable[[Column], Column] | None = None) -> tuple[DataFrame, DataFrame, list[DataFrame]]:
    """(the output: the late records and the windows that fire, the new state, the frames persisted for both
    to read, which the run lets go once the state is written)."""
    assert state.window is not None
    if kept_partials(state.window) is not None:
        return _partial_windows(state.window, clock, good, loaded, data_columns, encode)
    return (*_row_windows(state, clock, good, loaded, data_columns, encode), [])


def _partial_windows(w: WindowSpec, clock: EventClock, good: DataFrame, loaded: DataFrame, data_columns: list[str],
                     encode: Callable[[Column], Column] | None) -> tuple[DataFrame, DataFrame, list[DataFrame]]:
    """The checkpoint's records (and a state of rows, the first time) as partials of one record, merged with the
    state's partials by key and window in one aggregation; the windows that fire are written, the others kept.
    The merged windows (a row per key and window) are persisted: the write computes them, the new state reads
    them back instead of aggregating the records again."""
    from pyspark.sql import functions as F

    partials = kept_partials(w)
    assert partials is not None
    size, lateness = size_of(w, F.col(WINDOW_START)), F.lit(w.allowed_lateness_ms)
    before, after = clock.before, clock.after
    is_late = _late_for_windows(w, before)
    late = good.filter(is_late).withColumn("error", F.lit(LATE))
    rows = good.filter(~is_late).select(*INTERNAL, *data_columns)
    types = _partial_types(rows, partials)
    if not is_partial_window(loaded.columns):  # a state of rows: its rows count as this checkpoint's
        rows = rows.unionByName(loaded)
    end = F.col(WINDOW_START) + size + lateness
    open_before = (end > F.lit(before)) if before is not None else F.lit(True)
    exploded = rows.withColumn(WINDOW_START, F.explode(window_starts_column(w))).filter(open_before)
    ones = _as_partials(exploded, partials, types)
    if is_partial_window(loaded.columns):
        ones = ones.unionByName(loaded.select(*ones.columns))
    latest = F.max(F.struct(EVENT, FROM_TOPIC, FROM_PARTITION, FROM_OFFSET)).alias("__ls_latest")
    merged = (ones.groupBy(KEY, GROUP, WINDOW_START)
              .agg(*[F.expr(f"{p.merged_by}(`{p.column}`)").cast(types[p.column]).alias(p.column) for p in partials],
                   latest)
              .select(KEY, F.col(f"__ls_latest.{EVENT}").alias(EVENT), GROUP, WINDOW_START,
                      *[F.col(f"__ls_latest.{c}").alias(c) for c in (FROM_TOPIC, FROM_PARTITION, FROM_OFFSET)],
                      *[p.column for p in partials])
              .persist())
    fires = (end <= F.lit(after)) if after is not None else F.lit(False)
    fired = merged.filter(fires).select(KEY, WINDOW_START, FROM_TOPIC, FROM_PARTITION, FROM_OFFSET,
                                        *[F.col(p.column).alias(p.name) for p in partials])
    output = fired.select(
        window_value(w, encode).cast("binary").alias("value"), F.col(KEY).cast("binary").alias("key"),
        F.col(FROM_TOPIC).alias("topic"), F.col(FROM_PARTITION).alias("partition"),
        F.col(FROM_OFFSET).alias("offset"), F.lit(None).cast("string").alias("error"),
        no_headers().alias("headers"))  # many records' aggregate: provenance headers only
    return _records(late).unionByName(output), merged.filter(~fires), [merged]


def _row_windows(state: StateSpec, clock: EventClock, good: DataFrame, loaded: DataFrame,
                 data_columns: list[str], encode: Callable[[Column], Column] | None = None) -> tuple[DataFrame, DataFrame]:
    """The windows over the rows of this checkpoint and the state's; the rows of open windows kept."""
    from pyspark.sql import functions as F

    w = state.window
    assert w is not None
    size, lateness = size_of(w, F.col(WINDOW_START)), F.lit(w.allowed_lateness_ms)

    before, after = clock.before, clock.after
    is_late = _late_for_windows(w, before)
    late = good.filter(is_late).withColumn("error", F.lit(LATE))
    rows = good.filter(~is_late).select(*INTERNAL, *data_columns).unionByName(loaded)
    exploded = rows.withColumn(WINDOW_START, F.explode(window_starts_column(w)))
    end = F.col(WINDOW_START) + size + lateness
    open_before = (end > F.lit(before)) if before is not None else F.lit(True)
    fires = (end <= F.lit(after)) if after is not None else F.lit(False)
    fired = (exploded.filter(open_before & fires)
             .groupBy(KEY, WINDOW_START)
             .agg(*[F.expr(expr).alias(name) for name, expr in w.aggregates],
                  F.max_by(F.struct(*PROVENANCE), F.struct(EVENT, *PROVENANCE)).alias("__ls_from")))
    output = fired.select(window_value(w, encode).cast("binary").alias("value"), F.col(KEY).cast("binary").alias("key"),
                          F.col("__ls_from.topic").alias("topic"), F.col("__ls_from.partition").cast("int").alias("partition"),
                          F.col("__ls_from.offset").cast("bigint").alias("offset"),
                          F.lit(None).cast("string").alias("error"),
                          no_headers().alias("headers"))  # many records' aggregate: provenance headers only
    keep = (last_window_end(w, F.col(EVENT)) + lateness > F.lit(after)) if after is not None else F.lit(True)
    return _records(late).unionByName(output), rows.filter(keep)
