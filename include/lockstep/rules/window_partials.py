"""Which window aggregates a window's state can keep as partial aggregates, and how they merge (pure).

A window keeps what its aggregates need until it fires. Any Spark SQL aggregate can be computed from the
window's rows, so that is what the state keeps by default for an aggregate this module does not know. But
``count``, ``sum``, ``min`` and ``max`` of one argument merge: the aggregate of a window's rows is the
aggregate (``sum`` for a count) of the aggregates of any split of them. For those the state keeps one row per
key and open window, its aggregates so far, however many records fed it, as Flink keeps an accumulator per
key and window. What the state then carries no longer grows with the records the open windows hold.

Read from the aggregate's SQL text only, conservatively: one call of one of the four functions whose
parentheses enclose the whole expression, no ``DISTINCT`` (a distinct count does not merge), no quoted text
(a parenthesis in a string literal could mislead the reading) and no second argument. Anything else (``avg``,
``sum(a) / count(*)``, ``count(DISTINCT x)``, a ``FILTER`` clause) keeps the rows, which is always right.
"""
from __future__ import annotations

__all__ = ["MERGED_BY", "PREFIX", "Partial", "aggregate_of", "kept_partials", "partial", "partials"]

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lockstep.spec import WindowSpec

#: The aggregate functions that merge, and the function that merges their partial values.
MERGED_BY = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}

#: The prefix of an aggregate's column in a window state of partials (`Partial.column`).
PREFIX = "__ls_agg_"

_CALL = re.compile(r"(?is)^(count|sum|min|max)\s*\((.*)\)$")


@dataclass(frozen=True)
class Partial:
    """One aggregate kept as its partial value: the output field, the function, its argument's SQL (``*`` for
    ``count(*)``)."""

    name: str
    function: str
    argument: str

    @property
    def merged_by(self) -> str:
        return MERGED_BY[self.function]

    @property
    def column(self) -> str:
        """Its column in the state: the output field and a digest of the aggregate, so that a state is never
        merged into under another aggregate of the same name (``count(*)`` become ``count(x)``)."""
        digest = hashlib.sha256(f"{self.function}({self.argument})".encode()).hexdigest()[:8]
        return f"{PREFIX}{self.name}_{digest}"


def _one_argument(inner: str) -> bool:
    """``inner`` is one balanced expression, no top-level comma, no quotes."""
    if not inner or any(q in inner for q in "'\"`"):
        return False
    depth = 0
    for ch in inner:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:  # the call's parenthesis closed before the end: `sum(a) + sum(b)`
                return False
        elif ch == "," and depth == 0:
            return False
    return depth == 0


def partial(name: str, expr: str) -> Partial | None:
    """The aggregate ``expr`` (output field ``name``) as a partial, or None when its rows must be kept."""
    m = _CALL.match(expr.strip())
    if m is None:
        return None
    function, inner = m.group(1).lower(), m.group(2).strip()
    if not _one_argument(inner):
        return None
    first = inner.split(None, 1)[0].lower()
    if first in ("distinct", "all"):
        return None
    if inner == "*" and function != "count":
        return None
    return Partial(name, function, inner)


def partials(aggregates: Sequence[tuple[str, str]]) -> tuple[Partial, ...] | None:
    """Every aggregate as a partial, or None when any of them needs the window's rows."""
    found = [partial(name, expr) for name, expr in aggregates]
    if not found or any(p is None for p in found):
        return None
    return tuple(p for p in found if p is not None)


def kept_partials(w: WindowSpec) -> tuple[Partial, ...] | None:
    """The partials a window's state keeps per key and open window, or None: it keeps the windows' rows (an
    aggregate that does not merge, or ``keep_rows``)."""
    return None if w.keep_rows else partials(w.aggregates)


def aggregate_of(column: str) -> str | None:
    """The output field whose partial a state column holds (`Partial.column`), or None for another column."""
    if not column.startswith(PREFIX):
        return None
    return column[len(PREFIX):].rsplit("_", 1)[0]
