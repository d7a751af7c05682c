"""Event-time windows over keyed state: the state keeps the rows of windows that have not fired, and a
window fires when this checkpoint's records move the watermark past its end plus the allowed lateness
(`lockstep.rules.watermarks`); its aggregates are then computed over the rows of every checkpoint that fed
it, and its output names, as its provenance, the latest record (by event time) that it counted. A record
every window of which had fired goes to the dead-letter topic as ``late``."""
from __future__ import annotations

__all__ = ["window_starts_column", "window_value"]

from collections.abc import Callable
from typing import TYPE_CHECKING

from lockstep.model.state_rows import EVENT, INTERNAL, KEY
from lockstep.rules.watermarks import EventClock
from lockstep.spark.keyed_rows import LATE, PROVENANCE, _records, no_headers
from lockstep.spec import StateSpec, WindowSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def window_value(w: WindowSpec, encode: Callable[[Column], Column] | None = None) -> Column:
    """A fired window's output value, from a row of (``__ls_key``, ``__ls_start``, the aggregates): the
    key (as ``key_name``), ``window_start``/``window_end`` in ISO-8601 UTC, the aggregates, as JSON or
    as ``encode`` makes the record (the sink's format)."""
    from pyspark.sql import functions as F

    fmt = "yyyy-MM-dd'T'HH:mm:ss" + (".SSS" if w.slide_ms % 1000 or w.size_ms % 1000 else "") + "'Z'"
    return (encode or F.to_json)(F.struct(
        F.col(KEY).alias(w.key_name),
        F.date_format(F.timestamp_millis(F.col("__ls_start")), fmt).alias("window_start"),
        F.date_format(F.timestamp_millis(F.col("__ls_start") + F.lit(w.size_ms)), fmt).alias("window_end"),
        *[F.col(name) for name, _ in w.aggregates]))


def window_starts_column(w: WindowSpec) -> Column:
    """The starts of the windows of a row's event time (``__ls_event_ms``), as an array."""
    from pyspark.sql import functions as F

    slide, size = F.lit(w.slide_ms), F.lit(w.size_ms)
    last = F.col(EVENT) - F.pmod(F.col(EVENT), slide)
    return F.sequence(last - size + slide, last, slide)


def _last_end(w: WindowSpec, t: Column) -> Column:
    """The end of the last window an event time belongs to."""
    from pyspark.sql import functions as F

    return t - F.pmod(t, F.lit(w.slide_ms)) + F.lit(w.size_ms)


def _late_for_windows(w: WindowSpec, before: int | None) -> Column:
    """A record every window of which had fired before the checkpoint started (its base's watermark)."""
    from pyspark.sql import functions as F

    if before is None:
        return F.lit(False)
    return _last_end(w, F.col(EVENT)) + F.lit(w.allowed_lateness_ms) <= F.lit(before)


def _windows(state: StateSpec, clock: EventClock, good: DataFrame, loaded: DataFrame,
             data_columns: list[str], encode: Callable[[Column], Column] | None = None) -> tuple[DataFrame, DataFrame]:
    from pyspark.sql import functions as F

    w = state.window
    assert w is not None
    size, lateness = F.lit(w.size_ms), F.lit(w.allowed_lateness_ms)

    before, after = clock.before, clock.after
    is_late = _late_for_windows(w, before)
    late = good.filter(is_late).withColumn("error", F.lit(LATE))
    rows = good.filter(~is_late).select(*INTERNAL, *data_columns).unionByName(loaded)
    exploded = rows.withColumn("__ls_start", F.explode(window_starts_column(w)))
    end = F.col("__ls_start") + size + lateness
    open_before = (end > F.lit(before)) if before is not None else F.lit(True)
    fires = (end <= F.lit(after)) if after is not None else F.lit(False)
    fired = (exploded.filter(open_before & fires)
             .groupBy(KEY, "__ls_start")
             .agg(*[F.expr(expr).alias(name) for name, expr in w.aggregates],
                  F.max_by(F.struct(*PROVENANCE), F.struct(EVENT, *PROVENANCE)).alias("__ls_from")))
    output = fired.select(window_value(w, encode).cast("binary").alias("value"), F.col(KEY).cast("binary").alias("key"),
                          F.col("__ls_from.topic").alias("topic"), F.col("__ls_from.partition").cast("int").alias("partition"),
                          F.col("__ls_from.offset").cast("bigint").alias("offset"),
                          F.lit(None).cast("string").alias("error"),
                          no_headers().alias("headers"))  # many records' aggregate: provenance headers only
    keep = (_last_end(w, F.col(EVENT)) + lateness > F.lit(after)) if after is not None else F.lit(True)
    return _records(late).unionByName(output), rows.filter(keep)
