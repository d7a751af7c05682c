"""``tables``: topics kept as the latest value per key, joined into the input (docs/joins.md).

A table reads a topic of its own, never a source topic, and a join's options depend on each other (``as_of``
needs ``versions``), so the section is read and checked as one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockstep.spec.checker import IDENTIFIER_RE, MISSING, Checker, Section, describe, one_of, read_duration, read_topic
from lockstep.spec.fields import Section as SectionShape
from lockstep.spec.formats import FormatSpec, read_format
from lockstep.spec.shape import IDENTIFIER_PATTERN, RESERVED_TABLE_NAMES, TABLE
from lockstep.spec.sources import SourceSpec

__all__ = ["read_tables", "TableJoin", "TableSpec"]


@dataclass(frozen=True)
class TableJoin:
    """``tables.<name>.join``: join the table into every input record before the transform, on ``by`` (a
    Spark SQL expression over the decoded input) equal to the table's key (docs/joins.md)."""

    #: ``by``: a Spark SQL expression over the decoded input, equal to the table's key
    by: str
    #: ``left``: every record (the table's column null without a row); ``inner``: records with a row only
    how: str = "left"
    #: an inner join's records without a row: ``drop`` them or ``dead_letter`` them
    missing: str = "drop"
    #: an event-time (temporal) join: the record's event time (a Spark SQL expression: a TIMESTAMP or epoch
    #: seconds); each record meets the version its key had then. None: the latest version.
    as_of: str | None = None


@dataclass(frozen=True)
class TableSpec:
    """``tables.<name>``: the latest value per key of ``topic`` as of each checkpoint's pinned offsets,
    kept by Lockstep (`lockstep.tables.materialize`); a view named ``name`` in SQL transforms."""

    name: str
    topic: str
    key: FormatSpec = FormatSpec(format="string")
    value: FormatSpec = field(default_factory=FormatSpec)
    join: TableJoin | None = None
    #: ``versions``: how long (ms) each key's earlier values are kept behind the table's newest record, for
    #: joins ``as_of`` an event time; None: the latest value only.
    versions_ms: int | None = None
    #: ``on_error``: a table record that does not decode is a dead letter ("dead_letter") or fails the checkpoint
    #: for good ("fail").
    on_error: str = "dead_letter"

    @property
    def versioned(self) -> bool:
        return self.versions_ms is not None


def read_tables(c: Checker, doc: object, source: SourceSpec, folder: Path | None) -> tuple[TableSpec, ...]:
    """``tables``: name -> a table section (docs/joins.md)."""
    if doc is None:
        return ()
    shape = TABLE.section
    assert shape is not None
    join_shape = shape.fields["join"].section
    assert join_shape is not None
    tables: list[TableSpec] = []
    for name, raw in c.mapping(doc, "tables").items():
        path = f"tables.{name}"
        if not isinstance(name, str) or not IDENTIFIER_RE.fullmatch(name):
            c.fail(path, f"a table's name is the view SQL reads it by: {IDENTIFIER_PATTERN}")
            continue
        if name.lower() in RESERVED_TABLE_NAMES:
            c.fail(path, f"{name!r} is the view of the input; give the table another name")
            continue
        d = c.section(raw, path, shape.keys, optional=False)
        topic = read_topic(c, d, path, "topic")
        if topic is not None and topic in source.topics:
            c.fail(f"{path}.topic", f"{topic!r} is a source topic; a table reads a topic of its own")
        key = read_format(c, d.get("key"), f"{path}.key", folder, sink=False, declared=shape.fields["key"].section)
        value = read_format(c, d.get("value"), f"{path}.value", folder, sink=False,
                        declared=shape.fields["value"].section)
        join = None
        if d.get("join") is not None:
            j = c.section(d["join"], f"{path}.join", join_shape.keys)
            on = j.get("by", MISSING)
            if on is MISSING:
                c.fail(f"{path}.join.by", "is required: a Spark SQL expression over the input equal to the table's "
                                          "key (data.customer_id)")
            elif not isinstance(on, str) or not on.strip():
                c.fail(f"{path}.join.by", f"must be a Spark SQL expression, got {describe(on)}")
            how = _choice(c, j, f"{path}.join", "how", join_shape)
            missing = _choice(c, j, f"{path}.join", "missing", join_shape)
            if how == "left" and "missing" in j:
                c.fail(f"{path}.join.missing", "is for an inner join: a left join keeps every record")
            as_of = j.get("as_of")
            if as_of is not None and (not isinstance(as_of, str) or not as_of.strip()):
                c.fail(f"{path}.join.as_of", f"must be a Spark SQL expression (the record's event time), got "
                                             f"{describe(as_of)}")
                as_of = None
            elif as_of is not None and d.get("versions") is None:
                c.fail(f"{path}.versions", "is required for a join as_of an event time: how long to keep each key's "
                                           "earlier values (7d, say)")
            if isinstance(on, str) and on.strip() and how and missing:
                join = TableJoin(on.strip(), how, missing, as_of.strip() if isinstance(as_of, str) else None)
        versions = read_duration(c, d, path, "versions", None, positive=True) if d.get("versions") is not None else None
        on_error = _choice(c, d, path, "on_error", shape)
        if topic is not None:
            tables.append(TableSpec(name, topic, key, value, join, versions, on_error or "dead_letter"))
    topics = [t.topic for t in tables]
    for t in sorted({t for t in topics if topics.count(t) > 1}):
        c.fail("tables", f"topic {t!r} is read by more than one table")
    return tuple(tables)


def _choice(c: Checker, d: Section, path: str, key: str, shape: SectionShape) -> Any:
    """One of a table section's declared words (a table's shape sits under a name of the user's, not at a fixed path)."""
    words = shape.fields[key].enum
    return c.text(d, path, key, shape.fields[key].default, re.compile("|".join(map(re.escape, words))),
                  one_of(words))
