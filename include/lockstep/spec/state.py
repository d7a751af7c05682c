"""``state``: a stateful pipeline's operator (window, dedup, function, interval join), its event time, its key
groups and the compaction of its files.

Key groups and the operator are fixed once state exists, so the section takes exactly one operator and
refuses what a later run could not read back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lockstep.spec.checker import (
    IDENTIFIER_RE,
    MISSING,
    TRANSFORM_RE,
    Checker,
    allowed_keys,
    declared_default,
    declared_duration,
    declared_field,
    declared_integer,
    declared_words,
    describe,
    normalise_transform,
    read_expression,
    read_topic,
    read_word,
)
from lockstep.spec.shape import DEFAULT_KEY_NAME

__all__ = [
    "CompactionPolicy", "DedupSpec", "EventTime", "FUNCTION_RE", "FunctionSpec", "IntervalJoinSpec", "read_state",
    "StateSpec", "WindowSpec",
]


@dataclass(frozen=True)
class EventTime:
    """Event time and its watermark, shared by the stateful operators.

    ``column`` is a Spark SQL expression over the transform's output: a TIMESTAMP, or a number of
    epoch seconds. The watermark is the minimum over the source partitions of (the largest event
    time seen - ``out_of_orderness_ms``); a partition without records for ``idle_timeout_ms`` no
    longer holds it back. With ``idle_advance``, once every partition has been idle that long, event
    time is taken to go on with the claim's pinned clock, so the last windows of a burst fire while the
    source is quiet (`lockstep.rules.watermarks.advance`)."""

    column: str
    out_of_orderness_ms: int
    idle_timeout_ms: int
    idle_advance: bool = False


@dataclass(frozen=True)
class WindowSpec:
    """Event-time windows per key: tumbling (``slide_ms == size_ms``) or sliding."""

    key: str
    key_name: str
    size_ms: int
    slide_ms: int
    allowed_lateness_ms: int
    #: output field -> Spark SQL aggregate expression over the transform's columns, in YAML order
    aggregates: tuple[tuple[str, str], ...]
    #: keep the open windows' rows even when every aggregate merges (`lockstep.rules.window_partials`): the
    #: aggregates can then change while windows are open
    keep_rows: bool = False
    #: not in a spec file: the sizes the pipeline's tumbling windows had before, each with the event time its
    #: windows end by, oldest first, as its state records them (`lockstep.rules.window_drain`)
    earlier: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class DedupSpec:
    """A record within ``ttl_ms`` of event time of a passed record of its key is a duplicate; the
    rule, its late cut and its retention are `lockstep.rules.dedup`'s."""

    key: str
    ttl_ms: int
    #: "drop" or "dead_letter" (to the dead-letter topic, error ``duplicate``)
    duplicates: str


FUNCTION_RE = TRANSFORM_RE


@dataclass(frozen=True)
class FunctionSpec:
    """A user's Python function per key (`lockstep.state_api`): its new records, its state, its timers."""

    key: str
    #: ``module:function``
    process: str
    #: declared state fields -> Spark types, in YAML order
    fields: tuple[tuple[str, str], ...]
    version: int
    #: ``module:function`` turning a state of an earlier version into this one; None: none given
    migrate: str | None = None
    #: event-time TTL: a key whose last record is older than the watermark by this much loses its state
    ttl_ms: int | None = None
    #: what Lockstep's own functions are told besides the records (``ctx.options``; an interval join's sides)
    options: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class IntervalJoinSpec:
    """``state.interval_join``: records of ``left`` and ``right`` with the same key, the right one's event time
    within ``[left's - before, left's + after]`` (docs/joins.md, `lockstep.tables.interval_join`)."""

    key: str
    left: str
    right: str
    after_ms: int = 0
    before_ms: int = 0
    how: str = "inner"

    def function(self) -> FunctionSpec:
        """The state function that runs it."""
        from lockstep.tables.interval_join import PROCESS, STATE_FIELDS

        return FunctionSpec(key=self.key, process=PROCESS, fields=STATE_FIELDS, version=1, options={
            "left": self.left, "right": self.right, "after_ms": self.after_ms, "before_ms": self.before_ms,
            "how": self.how})


@dataclass(frozen=True)
class CompactionPolicy:
    """When a key group's chain of files is merged into a new base (``state.compaction``)."""

    #: compact when the chain would hold more deltas than this
    max_deltas: int = 16
    #: compact when the deltas' bytes would pass this multiple of the base's
    max_delta_ratio: float = 1.0


@dataclass(frozen=True)
class StateSpec:
    """A stateful pipeline's operator, its event time and its key groups (fixed once state exists)."""

    key_groups: int
    event_time: EventTime
    window: WindowSpec | None = None
    dedup: DedupSpec | None = None
    function: FunctionSpec | None = None
    #: ``interval_join``: run as Lockstep's own state function (`lockstep.tables.interval_join`), which ``function``
    #: then names; this keeps what the spec said, and the operator's name
    interval_join: IntervalJoinSpec | None = None
    #: when a key group's chain of delta files is merged into a new base (`lockstep.store.state_chain`)
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)

    @property
    def ttl_ms(self) -> int | None:
        """The event-time TTL of the state's keys (dedup's ``ttl``, a function's ``ttl``), None for windows."""
        return self.dedup.ttl_ms if self.dedup is not None else self.function.ttl_ms if self.function else None

    @property
    def operator(self) -> str:
        if self.interval_join is not None:
            return "interval_join"
        return "window" if self.window is not None else "dedup" if self.dedup is not None else "function"

    @property
    def key(self) -> str:
        chosen = self.window or self.dedup or self.function
        assert chosen is not None
        return chosen.key

    @property
    def schema_version(self) -> int:
        return self.function.version if self.function is not None else 1


def read_state(c: Checker, doc: object) -> StateSpec | None:
    """``state``: its key groups, compaction and event time, then its one operator (each read by its own
    reader, in that order, so the problems come in the spec's order)."""
    if doc is None or doc is MISSING:
        return None
    d = c.section(doc, "state", allowed_keys("state"))
    groups = declared_integer(c, d, "state", "key_groups")
    compaction = _compaction(c, d.get("compaction"))
    event_time = _event_time(c, d.get("event_time", MISSING))
    kinds = [k for k in ("window", "dedup", "function", "interval_join") if d.get(k) is not None]
    if len(kinds) != 1:
        c.fail("state", "needs exactly one operator: window, dedup, function or interval_join" if not kinds
               else f"has {' and '.join(kinds)}; a pipeline has one stateful operator")
        return None
    window = dedup = function = None
    interval: IntervalJoinSpec | None = None
    if kinds == ["window"]:
        window = _window(c, d["window"])
    elif kinds == ["function"]:
        function = _function(c, d["function"])
    elif kinds == ["interval_join"]:
        interval = _interval_join(c, d["interval_join"])
        function = interval.function()
    else:
        dedup = _dedup(c, d["dedup"])
    return StateSpec(key_groups=groups, event_time=event_time, window=window, dedup=dedup, function=function,
                     interval_join=interval, compaction=compaction)


def _compaction(c: Checker, doc: object) -> CompactionPolicy:
    """``state.compaction``: the ratio is a number in declared bounds (low exclusive), not an integer field."""
    k = c.section(doc, "state.compaction", allowed_keys("state.compaction"))
    r = declared_field("state.compaction", "max_delta_ratio")
    ratio = k.get("max_delta_ratio", r.default)
    assert r.low is not None and r.high is not None and r.low_exclusive
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not r.low < ratio <= r.high:
        c.fail("state.compaction.max_delta_ratio",
               f"must be a number above {r.low:g} (at most {r.high:g}), got {describe(ratio)}")
        ratio = r.default
    return CompactionPolicy(max_deltas=declared_integer(c, k, "state.compaction", "max_deltas"),
                            max_delta_ratio=float(ratio))


def _event_time(c: Checker, doc: object) -> EventTime:
    """``state.event_time``: required, whatever the operator, since every operator's watermark reads it."""
    e = c.section(doc, "state.event_time", allowed_keys("state.event_time"), optional=False)
    return EventTime(column=read_expression(c, e, "state.event_time", "column"),
                     out_of_orderness_ms=declared_duration(c, e, "state.event_time", "out_of_orderness"),
                     idle_timeout_ms=declared_duration(c, e, "state.event_time", "idle_timeout"),
                     idle_advance=c.boolean(e, "state.event_time", "idle_advance",
                                            declared_default("state.event_time", "idle_advance")))


def _window(c: Checker, doc: object) -> WindowSpec:
    """``state.window``: a slide that divides the size, and aggregates whose names do not clash with the output's
    own fields (the key's name, window_start, window_end)."""
    w = c.section(doc, "state.window", allowed_keys("state.window"))
    key = read_expression(c, w, "state.window", "key")
    size = declared_duration(c, w, "state.window", "size")
    slide = declared_duration(c, w, "state.window", "slide", w.get("size", "0s"))
    if size and slide and (slide > size or size % slide):
        c.fail("state.window.slide", f"must divide state.window.size ({size} ms) and not exceed it, got {slide} ms")
    name = c.text(w, "state.window", "key_name", key if key and IDENTIFIER_RE.fullmatch(key) else DEFAULT_KEY_NAME,
                  IDENTIFIER_RE, "a field name: letters, digits and _")
    aggs = c.mapping(w.get("aggregates", MISSING), "state.window.aggregates", optional=False)
    if not aggs and not any(p.field == "state.window.aggregates" for p in c.problems):
        c.fail("state.window.aggregates", "must name at least one output field and its aggregate")
    checked: list[tuple[str, str]] = []
    for field_name, expr in aggs.items():
        where = f"state.window.aggregates.{field_name}"
        if not isinstance(field_name, str) or not IDENTIFIER_RE.fullmatch(field_name):
            c.fail(where, "output field names are letters, digits and _")
        elif field_name in (name, "window_start", "window_end"):
            c.fail(where, f"{field_name!r} is already a field of the output (key_name, window_start, window_end)")
        elif not isinstance(expr, str) or not expr.strip():
            c.fail(where, f"must be a Spark SQL aggregate such as count(*) or sum(amount), got {describe(expr)}")
        else:
            checked.append((field_name, expr.strip()))
    return WindowSpec(key=key, key_name=name, size_ms=size, slide_ms=slide,
                      allowed_lateness_ms=declared_duration(c, w, "state.window", "allowed_lateness"),
                      aggregates=tuple(checked), keep_rows=bool(c.boolean(w, "state.window", "keep_rows", False)))


def _interval_join(c: Checker, doc: object) -> IntervalJoinSpec:
    """``state.interval_join``: its sides are checked against ``source.topics`` once the source is read
    (`lockstep.spec.loading`)."""
    path = "state.interval_join"
    j = c.section(doc, path, allowed_keys(path))
    how = read_word(c, j, path, "how")
    return IntervalJoinSpec(key=read_expression(c, j, path, "key"), left=read_topic(c, j, path, "left"),
                            right=read_topic(c, j, path, "right"),
                            after_ms=declared_duration(c, j, path, "after"),
                            before_ms=declared_duration(c, j, path, "before"), how=how or "inner")


def _dedup(c: Checker, doc: object) -> DedupSpec:
    """``state.dedup``: what becomes of a duplicate is one of the declared words."""
    x = c.section(doc, "state.dedup", allowed_keys("state.dedup"))
    action = c.text(x, "state.dedup", "duplicates", declared_default("state.dedup", "duplicates"))
    if action is not None and action not in declared_words("state.dedup", "duplicates"):
        c.fail("state.dedup.duplicates", f"must be one of {', '.join(declared_words('state.dedup', 'duplicates'))}, "
                                         f"got {action!r}")
    return DedupSpec(key=read_expression(c, x, "state.dedup", "key"),
                     ttl_ms=declared_duration(c, x, "state.dedup", "ttl"), duplicates=action)


def _function(c: Checker, doc: object) -> FunctionSpec:
    """``state.function``: the user's functions and the declared state fields, typed so the state files can be read back."""
    path = "state.function"
    f = c.section(doc, path, allowed_keys(path))
    rule = 'expected "module.path:function"'
    fields = c.mapping(f.get("state", MISSING), f"{path}.state", optional=False)
    checked: list[tuple[str, str]] = []
    types = declared_field(path, "state").items.enum  # type: ignore[union-attr]
    for name, kind in fields.items():
        where = f"{path}.state.{name}"
        if not isinstance(name, str) or not IDENTIFIER_RE.fullmatch(name) or name.startswith("__"):
            c.fail(where, "state field names are letters, digits and _, not starting with __")
        elif not isinstance(kind, str) or kind.replace(" ", "") not in types:
            c.fail(where, f"must be one of {', '.join(types)}, got {describe(kind)}")
        else:
            checked.append((name, kind.replace(" ", "")))
    if not fields and not any(p.field == f"{path}.state" for p in c.problems):
        c.fail(f"{path}.state", "must declare at least one state field and its type")
    process = c.text(f, path, "process", pattern=FUNCTION_RE, rule=rule)
    migrate = c.text(f, path, "migrate", None, FUNCTION_RE, rule)
    return FunctionSpec(key=read_expression(c, f, path, "key"),
                        process=normalise_transform(process) if process else "",
                        fields=tuple(checked), version=declared_integer(c, f, path, "version"),
                        migrate=normalise_transform(migrate) if migrate else None,
                        ttl_ms=declared_duration(c, f, path, "ttl") if f.get("ttl") is not None else None)
