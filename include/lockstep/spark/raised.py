"""Records for which the transform's expressions or a route's condition raise a Spark data error (ANSI mode:
``CAST_INVALID_INPUT``, ``DIVIDE_BY_ZERO``, ``ARITHMETIC_OVERFLOW``, ... every error of SQLSTATE class 22,
"data exception"), found and set aside so that one odd record does not stop a pipeline (``sink.on_error``,
docs/formats.md, *Records that raise*).

Spark evaluates an expression for every row of a task and fails the whole job at the first row that raises:
which records raise is not known until a write fails. The checkpoint's run then finds them by bisection of
its claimed ranges (`isolate`): each half of the input is run again through the transform and the routes (a
Spark job that writes nothing, `probe` in `lockstep.spark.job`), and a half that raises is halved again, down
to single records. Those records go to the dead-letter topic as they came, with Spark's reason, and the others
are written. The records found are a function of the claim's ranges (invariant 11): every attempt sets aside
the same ones. The normal path costs nothing: only a write that failed with a data error is bisected.

A failure that no single record raises (an aggregate over several records that overflows) cannot be set aside
and fails the checkpoint for good, as does a checkpoint with more than `MAX_RECORDS` such records (the
expression wants ``try_cast``); ``sink.on_error: fail`` fails it at the first one, naming the expression.
"""
from __future__ import annotations

__all__ = [
    "MAX_PROBES", "MAX_RECORDS", "DataError", "Raised", "Unisolated", "data_error", "halves", "isolate", "probe",
    "reason", "strict_failure", "where_raised",
]

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockstep.errors import TerminalError
from lockstep.model.offsets import OffsetRange
from lockstep.spec import PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lockstep.formats.codecs import Formats
    from lockstep.spark.target import JobSession

#: At most this many records of one checkpoint are set aside; more fail it (the expression wants try_cast).
MAX_RECORDS = 64
#: At most this many Spark jobs look for them (each a read and a transform of part of the input).
MAX_PROBES = 400

#: Spark's data errors: ``[ERROR_CLASS] message ... SQLSTATE: 22xxx``, then its query context (where).
_DATA_ERROR = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]\s*(.*?)\s*SQLSTATE:\s*(22[0-9A-Z]{3})", re.S)
#: The fragment Spark's query context quotes: the line after ``== SQL (line 1, position 1) ==`` (or ``== DataFrame ==``).
_CONTEXT = re.compile(r"== (?:SQL[^=\n]*|DataFrame) ==\s*\n(?:\"[^\n]*\" was called from\n)?([^\n]+)\n")

#: (topic, partition, offset) of a record that raised -> why (Spark's error class and message, and where).
Raised = Mapping[tuple[str, int, int], str]


@dataclass(frozen=True)
class DataError:
    """A Spark data error: its class, its message (one line), and the fragment of the expression it names."""

    error_class: str
    message: str
    fragment: str | None

    @property
    def text(self) -> str:
        return f"[{self.error_class}] {self.message}"


def data_error(exc: BaseException) -> DataError | None:
    """The Spark data error ``exc`` is, or carries (a failed job's cause), else None."""
    text = str(exc)
    cause = exc.__cause__
    while cause is not None and not _DATA_ERROR.search(text):
        text, cause = str(cause), cause.__cause__
    found = _DATA_ERROR.search(text)
    if found is None:
        return None
    message = " ".join(f"{found.group(2)} SQLSTATE: {found.group(3)}".split())
    context = _CONTEXT.search(text, found.end())
    fragment = context.group(1).strip() if context else None
    return DataError(found.group(1), message, fragment or None)


def where_raised(spec: PipelineSpec, error: DataError) -> str:
    """What raised, for people: the route whose condition holds Spark's fragment, else the query, else the
    transform (Spark names the fragment, not whose it is)."""
    fragment = " ".join((error.fragment or "").split()).lower()
    if fragment:
        for topic, condition in spec.sink.routes:
            if fragment in " ".join(condition.split()).lower():
                return f"sink.routes.{topic} (the condition {condition!r})"
    if spec.is_sql:
        where = "transform.sql" if (spec.transform_sql_from or "inline") == "inline" else \
            f"transform.sql_file ({spec.transform_sql_from})"
        return f"{where} (the query)"
    return f"transform {spec.transform}"


def reason(spec: PipelineSpec, error: DataError) -> str:
    """A set-aside record's ``lockstep.error``: what raised, and Spark's error class and message."""
    return f"{where_raised(spec, error)} raised {error.text}" + (f" (at {error.fragment})" if error.fragment else "")


def strict_failure(spec: PipelineSpec, error: DataError) -> TerminalError:
    """``sink.on_error: fail``: the checkpoint fails for good at a record that raises, naming where."""
    return TerminalError(
        f"{spec.path}: {where_raised(spec, error)} raised a Spark data error on a record of this checkpoint: "
        f"{error.text}" + (f" (at {error.fragment})" if error.fragment else "") + ". sink.on_error is fail: make the "
        "expression total (try_cast, try_divide, try_add, ...), or set sink.on_error: dead_letter to send such "
        "records to the dead-letter topic with the reason")


def halves(ranges: Sequence[OffsetRange]) -> tuple[tuple[OffsetRange, ...], tuple[OffsetRange, ...]]:
    """``ranges`` cut in two by their offsets' count, in order (a range split at its middle when it must be)."""
    total = sum(r.count for r in ranges)
    left: list[OffsetRange] = []
    right: list[OffsetRange] = []
    room = total // 2
    for r in ranges:
        if r.is_empty:
            continue
        if room >= r.count:
            left.append(r)
            room -= r.count
        elif room > 0:
            left.append(OffsetRange(r.topic, r.partition, r.start, r.start + room))
            right.append(OffsetRange(r.topic, r.partition, r.start + room, r.end))
            room = 0
        else:
            right.append(r)
    return tuple(left), tuple(right)


class Unisolated(TerminalError):
    """The records that raise cannot be set aside one by one (too many, or none alone)."""


def isolate(probe: Callable[[tuple[OffsetRange, ...]], DataError | None], ranges: Sequence[OffsetRange],
            first: DataError, checkpoint_id: int, spec: PipelineSpec) -> dict[tuple[str, int, int], str]:
    """The records of ``ranges`` that raise a data error, each with its reason: ``probe`` runs part of the input
    through the transform and the routes and says what it raised (None: nothing). ``first``: what the whole
    input raised. Deterministic: the same ranges and transform give the same records, in the same order."""
    found: dict[tuple[str, int, int], str] = {}
    whole = tuple(r for r in ranges if not r.is_empty)
    if sum(r.count for r in whole) == 1:  # the one record is what raised
        return {(whole[0].topic, whole[0].partition, whole[0].start): reason(spec, first)}
    left, right = halves(whole)
    stack = [right, left]  # left first: offsets in order
    probes = 0
    while stack:
        part = stack.pop()
        if not part:
            continue
        if probes >= MAX_PROBES:
            raise Unisolated(_too_many(spec, first, checkpoint_id, len(found), probes))
        raised = probe(part)
        probes += 1
        if raised is None:
            continue
        if sum(r.count for r in part) == 1:
            found[(part[0].topic, part[0].partition, part[0].start)] = reason(spec, raised)
            if len(found) > MAX_RECORDS:
                raise Unisolated(_too_many(spec, first, checkpoint_id, len(found), probes))
            continue
        left, right = halves(part)
        stack += [right, left]  # left first: offsets in order
    if not found:
        raise Unisolated(
            f"{spec.path}: {where_raised(spec, first)} raised a Spark data error over checkpoint {checkpoint_id}'s "
            f"records, but no record raises it alone (an aggregate over several records?): {first.text}. Make the "
            "expression total (try_cast, try_divide, try_add, ...); a retry fails the same way")
    return found


def _too_many(spec: PipelineSpec, first: DataError, checkpoint_id: int, found: int, probes: int) -> str:
    return (f"{spec.path}: {where_raised(spec, first)} raises a Spark data error for more records of checkpoint "
            f"{checkpoint_id} than are set aside one by one ({found} found in {probes} Spark jobs; at most "
            f"{MAX_RECORDS}): {first.text}. Make the expression total (try_cast, try_divide, try_add, ...), which "
            "gives null instead; a retry fails the same way")


def probe(spark: JobSession, kafka: Mapping[str, object], formats: Formats, transform: Callable[[DataFrame], DataFrame],
          enrich: Callable[[DataFrame], DataFrame] | None, enrich_errors: bool,
          part: tuple[OffsetRange, ...]) -> DataError | None:
    """The Spark data error that the records of ``part`` raise in ``transform`` (with its routes) and the sink's
    encoding (None: none), by a Spark job that computes their output as the write does and writes nothing: what
    `isolate` asks of a part of the input (the run's, `lockstep.spark.job`; an audit's, `lockstep.ops.verify`)."""
    from lockstep.formats.codecs import with_raw
    from lockstep.model.output_contract import OPTIONAL_COLUMNS, REQUIRED_COLUMNS
    from lockstep.spark.kafka_reader import read_ranges

    df = with_raw(read_ranges(spark, kafka, part, headers=True, tasks=1))
    out, _ = formats.transformed(df, transform, enrich, enrich_errors=enrich_errors)
    try:
        out.select(*[c for c in out.columns if c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)]) \
            .write.format("noop").mode("overwrite").save()
    except Exception as exc:
        error = data_error(exc)
        if error is None:
            raise
        return error
    return None
