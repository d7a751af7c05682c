"""The spec's generic readers: how one YAML document is read field by field, and its problems collected.

Every section's reader (`lockstep.spec.sources`, `lockstep.spec.state`, ...) takes its words, integers,
durations, topics and expressions from here, so a field of any section refuses a wrong value in the same
words, with its file and field path; what a field allows (its keys, default, bounds, words) is read from
the one declaration, `lockstep.spec.shape`.
"""

from __future__ import annotations

import re
from typing import Any

from lockstep.errors import SpecProblem
from lockstep.spec.fields import UNSET, Field
from lockstep.spec.shape import IDENTIFIER_PATTERN, SPEC, TOPIC_PATTERN, TRANSFORM_PATTERN

__all__ = [
    "allowed_keys", "Checker", "declared_default", "declared_duration", "declared_field", "declared_integer",
    "declared_words", "describe", "duration_ms", "DURATION_RE", "DURATION_RULE", "IDENTIFIER_RE", "join_key",
    "MISSING", "normalise_transform", "one_of", "read_duration", "read_expression", "read_topic", "read_word",
    "Section", "TOPIC_RE", "TOPIC_RULE", "TRANSFORM_RE",
]

TOPIC_RE = re.compile(TOPIC_PATTERN)
TRANSFORM_RE = re.compile(TRANSFORM_PATTERN)
#: A key the document does not have (None is a value: YAML's null), so a reader tells absent from null.
MISSING = object()
DURATION_RE = re.compile(r"(\d+)\s*(ms|s|m|h|d)?")
#: What every duration field of a spec takes (`duration_ms`), as its messages say it.
DURATION_RULE = "a number with ms, s, m, h or d (500ms, 30s, 15m, 2h, 1d), or whole seconds"
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
IDENTIFIER_RE = re.compile(IDENTIFIER_PATTERN)
#: A mapping of a YAML document, as ``yaml.safe_load`` returns it: its keys are not always strings.
Section = dict[object, object]


class Checker:
    """Reads one YAML document field by field, collecting problems instead of stopping at the first.

    A reader (``text``, ``integer``, ...) returns the value once it is checked, or None after noting
    the problem: Any, because ``parse_spec`` builds the spec's dataclasses from what they return and
    raises `SpecError` before a spec with a None where a value belongs leaves it.
    """

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[SpecProblem] = []

    def fail(self, path: str, reason: str) -> None:
        self.problems.append(SpecProblem(self.file, path, reason))

    def mapping(self, doc: object, path: str, optional: bool = True) -> Section:
        if doc is MISSING or (doc is None and optional):
            if not optional:
                self.fail(path, "is required")
            return {}
        if not isinstance(doc, dict):
            self.fail(path or "<document>", f"must be a mapping, got {describe(doc)}")
            return {}
        return doc

    def section(self, doc: object, path: str, allowed: set[str], optional: bool = True) -> Section:
        d = self.mapping(doc, path, optional)
        for key in sorted(set(d) - allowed, key=str):
            self.fail(join_key(path, str(key)), f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return d

    def text(self, doc: Section, path: str, key: str, default: object = MISSING,
             pattern: re.Pattern[str] | None = None, rule: str = "") -> Any:
        value = doc.get(key, default)
        where = join_key(path, key)
        if value is MISSING:
            if not any(p.field == path for p in self.problems):  # a missing section is reported once
                self.fail(where, "is required")
        elif value is None and default is None:
            return None
        elif not isinstance(value, str) or not value:
            self.fail(where, f"must be a non-empty string, got {describe(value)}")
        elif pattern is not None and not pattern.fullmatch(value):
            self.fail(where, f"{value!r} is invalid: {rule}")
        else:
            return value
        return None

    def integer(self, doc: Section, path: str, key: str, default: int, low: int, high: int | None) -> Any:
        value = doc.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(join_key(path, key), f"must be an integer, got {describe(value)}")
        elif value < low or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f">= {low}"
            self.fail(join_key(path, key), f"must be {bounds}, got {value}")
        else:
            return value
        return None

    def boolean(self, doc: Section, path: str, key: str, default: bool) -> Any:
        value = doc.get(key, default)
        if not isinstance(value, bool):
            self.fail(join_key(path, key), f"must be true or false, got {describe(value)}")
            return None
        return value


def join_key(path: str, key: str) -> str:
    """A field's path as messages name it (``sink.topic``; a top-level key alone)."""
    return f"{path}.{key}" if path else key


def describe(value: object) -> str:
    """What a refused value was, for its message: its type and its value, or nothing."""
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"


# The declaration's side of the checker: what `lockstep.spec.shape` says of a field, as the readers take it.

def allowed_keys(path: str) -> set[str]:
    """The keys a section allows (``""``: the top level)."""
    return SPEC.section_at(path).keys


def declared_field(path: str, key: str) -> Field:
    """The declaration of a field in `lockstep.spec.shape`: the one place its default, bounds and words live."""
    return SPEC.at(join_key(path, key))


def declared_default(path: str, key: str) -> Any:
    """A field's declared default: None for an optional one without (null allowed), MISSING for a required one."""
    f = declared_field(path, key)
    if f.default is UNSET:
        return None if f.nullable else MISSING
    return f.default


def declared_integer(c: Checker, d: Section, path: str, key: str) -> Any:
    """An integer field with its declared default and bounds (a required one's default is its low bound: its
    absence is reported once, by the caller)."""
    f = declared_field(path, key)
    low, high = f.bounds
    return c.integer(d, path, key, f.default if isinstance(f.default, int) else low, low, high)


def declared_words(path: str, key: str) -> tuple[str, ...]:
    """The words a field takes, as declared, so a message lists exactly what the schema allows."""
    return declared_field(path, key).enum


def one_of(words: tuple[str, ...]) -> str:
    """``must be fail, earliest or latest``."""
    return f"must be {', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else f"must be {words[0]}"


def read_word(c: Checker, d: Section, path: str, key: str) -> Any:
    """A text field that takes one of its declared words; a wrong one is refused as its pattern would be."""
    words = declared_words(path, key)
    return c.text(d, path, key, declared_default(path, key), re.compile("|".join(map(re.escape, words))), one_of(words))


TOPIC_RULE = "Kafka topic names are 1-249 characters of [A-Za-z0-9._-] and not '.' or '..'"


def read_topic(c: Checker, doc: Section, path: str, key: str) -> Any:  # a reader's result, as Checker's
    """A Kafka topic name: the pattern leaves ``.`` and ``..`` through, which Kafka refuses, so they are refused here."""
    value = c.text(doc, path, key, pattern=TOPIC_RE, rule=TOPIC_RULE)
    if value in (".", ".."):
        c.fail(join_key(path, key), f"{value!r} is invalid: {TOPIC_RULE}")
        return None
    return value


def duration_ms(value: object) -> int | None:
    """``"500ms"``, ``"10s"``, ``"1m"``, ``"2h"``, ``"1d"`` (a space before the unit is allowed) or a whole
    number of seconds (an integer, or digits alone), in ms; None if not one. The one grammar of every
    duration field of a spec (`DURATION_RULE`)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1000 if value >= 0 else None
    if isinstance(value, str) and (m := DURATION_RE.fullmatch(value.strip())):
        return int(m.group(1)) * _DURATION_MS[m.group(2) or "s"]
    return None


def declared_duration(c: Checker, d: Section, path: str, key: str, default: object = MISSING) -> Any:
    """A duration field as declared: its default (unless the caller's depends on another field), whether it
    must be more than 0, and its unit."""
    f = declared_field(path, key)
    if default is MISSING and f.default is not UNSET:
        default = f.default
    return read_duration(c, d, path, key, default, positive=f.positive, unit_ms=f.unit_ms)


def read_duration(c: Checker, d: Section, path: str, key: str, default: object = MISSING, positive: bool = False,
              unit_ms: int = 1) -> Any:
    """A duration field, in the unit its spec field keeps (ms, or seconds with ``unit_ms=1000``): every
    field reads the same grammar (`duration_ms`) and says the same thing when it cannot."""
    value = d.get(key, default)
    where = join_key(path, key)
    if value is MISSING:
        c.fail(where, "is required")
        return None
    ms = duration_ms(value)
    if ms is None:
        c.fail(where, f"must be a duration: {DURATION_RULE}, got {describe(value)}")
    elif positive and ms == 0:
        c.fail(where, "must be more than 0")
    elif ms % unit_ms:
        c.fail(where, f"must be a whole number of seconds, got {describe(value)}")
    else:
        return ms // unit_ms
    return None


def read_expression(c: Checker, d: Section, path: str, key: str) -> Any:
    """A Spark SQL expression: checked here for being text only; Spark checks it when the run starts."""
    value = d.get(key, MISSING)
    if value is MISSING:
        c.fail(join_key(path, key), "is required")
    elif not isinstance(value, str) or not value.strip():
        c.fail(join_key(path, key), f"must be a Spark SQL expression, got {describe(value)}")
    else:
        return value.strip()
    return None


def normalise_transform(value: str) -> str:
    """``module.path:function`` whichever of the two accepted syntaxes was given, so the rest reads one form."""
    if ":" in value:
        return value
    module, _, function = value.rpartition(".")
    return f"{module}:{function}"
