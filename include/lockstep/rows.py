"""Row-level Python functions in a transform, with a failing row dead-lettered instead of failing the run.

A transform is ``DataFrame -> DataFrame``; when part of it is a plain Python function applied to each
row (a parser, a lookup), one record that makes it raise would fail the Spark task on every replay.
``guarded`` turns such a function into a UDF that returns ``struct<value, error>``: the function's
result, or its exception as ``"<function> raised <Type>: <message>"``. ``apply`` puts the two into
the columns Lockstep writes: ``value`` (the result; a failed row keeps its input value) and
``error`` (a failed row's reason, so the writer sends it to the dead-letter topic)::

    from lockstep.rows import apply, guarded

    @guarded(returns="binary")
    def to_cents(value: bytes) -> bytes: ...

    def transform(df):
        return apply(df, to_cents, "value")

Only ``Exception`` is caught: a worker that dies (``SystemExit``, a signal) still fails the task.
"""
from __future__ import annotations

__all__ = [
    "Guarded", "apply", "guarded",
]

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

RESULT = "__lockstep_row_result"

#: A plain Python function of a row's column values (Spark passes them as Python values).
RowFunction = Callable[..., object]


def reason(fn: RowFunction, exc: BaseException) -> str:
    """The ``error`` of a row whose function raised: the function's name, the exception's type and message."""
    return f"{getattr(fn, '__name__', 'function')} raised {type(exc).__name__}: {exc}"


class Guarded:
    """A row function and its safe form; calling it with columns gives the ``struct<value, error>`` column.

    The Spark UDF is built at that call (inside the transform, where a Spark session exists), so a
    module may decorate its functions at import time, on the driver or on an executor.
    """

    def __init__(self, function: RowFunction, returns: str) -> None:
        self.function, self.returns = function, returns

        @functools.wraps(function)
        def safe(*args: object) -> tuple[object, str | None]:
            try:
                return function(*args), None
            except Exception as exc:  # noqa: BLE001 - the point: any failure of one row becomes its error
                return None, reason(function, exc)

        #: The plain Python function returning ``(value, error)``; what the UDF runs.
        self.safe = safe
        functools.update_wrapper(self, function)

    def __call__(self, *columns: Column | str) -> Column:
        from pyspark.sql import functions as F

        return F.udf(self.safe, f"struct<value: {self.returns}, error: string>")(*columns)


@overload
def guarded(fn: RowFunction, *, returns: str = "binary") -> Guarded: ...


@overload
def guarded(fn: None = None, *, returns: str = "binary") -> Callable[[RowFunction], Guarded]: ...


def guarded(fn: RowFunction | None = None, *, returns: str = "binary") -> Guarded | Callable[[RowFunction], Guarded]:
    """Decorator: ``fn`` as a `Guarded` row function whose result column is ``struct<value: returns,
    error: string>``. Use bare (``@guarded``) or with the result type (``@guarded(returns="string")``,
    any Spark DDL type)."""
    def wrap(function: RowFunction) -> Guarded:
        return Guarded(function, returns)

    return wrap(fn) if fn is not None else wrap


def apply(df: DataFrame, udf: Callable[..., Column], *columns: Column | str, into: str = "value") -> DataFrame:
    """``df`` with ``into`` set to ``udf(*columns)`` (a ``guarded`` function) on every row it succeeds for.

    A row it raised for keeps its input ``into`` (cast to the result type) and gets the exception as
    ``error``; a row that already had an ``error`` keeps that one (the first reason wins).
    """
    from pyspark.sql import functions as F

    returns = getattr(udf, "returns", "binary")
    args = [F.col(c) if isinstance(c, str) else c for c in columns]
    existing = F.col("error") if "error" in df.columns else F.lit(None).cast("string")
    out = df.withColumn(RESULT, udf(*args))
    error = F.coalesce(existing, F.col(f"{RESULT}.error"))
    kept = F.col(into).cast(returns) if into in df.columns else F.lit(None).cast(returns)
    return (
        out.withColumn("error", error)
        .withColumn(into, F.when(F.col("error").isNull(), F.col(f"{RESULT}.value")).otherwise(kept))
        .drop(RESULT)
    )
