"""A small kit to declare the shape of a YAML document once, and render it as JSON Schema.

Lockstep's spec checker (`lockstep.spec`) reads its allowed keys, defaults, bounds and enums from a
declaration made of these values (`lockstep.spec.shape`), and `lockstep spec schema` renders the
same declaration for editors: one edit changes both. The checker keeps its own messages and its
cross-field rules; the declaration holds what can be said of one field alone. Pure data, no I/O.

Why not pydantic: its messages are its own (``Input should be a valid integer``), while the spec's are
tested word for word (field path, value, what is allowed), and a spec reports every problem at once
with rules across sections; a declaration the checker reads keeps both.
"""

from __future__ import annotations

__all__ = [
    "JSON_SCHEMA_DIALECT", "KINDS", "UNSET", "Field", "Section", "duration_pattern", "json_schema", "render",
    "render_section",
]

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _Unset:
    """No default: the field is required, or its default depends on other fields (``default_doc``)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()

#: Field kinds, and what a YAML value of each looks like.
KINDS = ("string", "integer", "number", "boolean", "duration", "schedule", "expression", "mapping", "list",
         "section")


@dataclass(frozen=True)
class Field:
    """One key of a section: what it takes, its default, whether it is required, and a line of docs."""

    kind: str
    doc: str
    default: Any = UNSET
    #: A default that depends on other fields (``lockstep-<name>``), said in words for the docs.
    default_doc: str = ""
    required: bool = False
    #: Whether ``null`` is accepted (as "not set").
    nullable: bool = False
    #: Integers and numbers: inclusive bounds (``low_exclusive``: above ``low``).
    low: float | None = None
    high: float | None = None
    low_exclusive: bool = False
    #: Strings: the words allowed; ``any_case`` accepts them in lower case too.
    enum: tuple[str, ...] = ()
    any_case: bool = False
    #: Strings: a regular expression the whole value must match (Python and ECMA alike).
    pattern: str | None = None
    #: Strings: values the pattern lets through that are refused all the same.
    refused: tuple[str, ...] = ()
    #: Strings: the empty string is accepted too.
    empty_ok: bool = False
    #: Strings with an enum: spaces anywhere are accepted too (``map<string, bigint>``).
    spaces_ok: bool = False
    #: Durations: more than 0; kept in this many ms (1000: whole seconds).
    positive: bool = False
    unit_ms: int = 1
    #: Sections: the declared keys.
    section: Section | None = None
    #: Mappings: each value; lists: each item.
    items: Field | None = None
    #: Mappings: each key's pattern, and keys refused.
    key_pattern: str | None = None
    refused_keys: tuple[str, ...] = ()
    #: Mappings and lists: at least this many entries; lists: no entry twice.
    min_items: int = 0
    unique: bool = False
    #: Other forms the field takes (a format's word for its section, ``auto`` for a number).
    alternatives: tuple[Field, ...] = ()

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert (self.section is not None) == (self.kind == "section"), self.doc

    @property
    def bounds(self) -> tuple[int, int | None]:
        """(low, high) of an integer, as the checker's ``integer`` takes them (high None: no upper bound)."""
        assert self.kind == "integer" and self.low is not None, self.doc
        return int(self.low), None if self.high is None else int(self.high)


@dataclass(frozen=True)
class Section:
    """A mapping with declared keys: unknown keys are refused (``additionalProperties: false``)."""

    doc: str
    fields: Mapping[str, Field] = field(default_factory=dict)

    @property
    def keys(self) -> set[str]:
        return set(self.fields)

    def at(self, path: str) -> Field:
        """The field at a dotted path below this section (``state.event_time.idle_timeout``)."""
        head, _, rest = path.partition(".")
        found = self.fields[head]
        if not rest:
            return found
        assert found.section is not None, path
        return found.section.at(rest)

    def section_at(self, path: str) -> Section:
        """The section at a dotted path ("" is this one)."""
        if not path:
            return self
        found = self.at(path).section
        assert found is not None, path
        return found


def duration_pattern(positive: bool, unit_ms: int) -> str:
    """The spec's one duration grammar (`lockstep.spec.duration_ms`) as a regular expression: digits with
    ms, s, m, h or d, or digits alone (seconds); more than 0 when ``positive``; whole seconds when
    ``unit_ms`` is 1000."""
    digits = r"0*[1-9]\d*" if positive else r"\d+"
    if unit_ms == 1000:
        ms = r"0*[1-9]\d*000" if positive else r"(?:\d*000|0+)"
    else:
        ms = digits
    return rf"\s*(?:{digits}\s*(?:s|m|h|d)?|{ms}\s*ms)\s*"


def _anchored(pattern: str) -> str:
    return f"^(?:{pattern})$"


def _core(f: Field) -> dict[str, Any]:
    """The JSON Schema of a field's main form, without its description, default or null."""
    if f.kind == "string":
        out: dict[str, Any] = {"type": "string"} if f.empty_ok else {"type": "string", "minLength": 1}
        if f.enum:
            out = {"enum": [*f.enum, *(w.lower() for w in f.enum if f.any_case and w.lower() != w)]}
        if f.enum and f.spaces_ok:
            spaced = "|".join(" *".join(re.escape(c) for c in word) for word in f.enum)
            out = {"anyOf": [out, {"type": "string", "pattern": _anchored(f" *(?:{spaced}) *")}]}
        if f.pattern:
            out["pattern"] = _anchored(f.pattern)
        if f.refused:
            out["not"] = {"enum": list(f.refused)}
        return out
    if f.kind in ("integer", "number"):
        out = {"type": f.kind}
        if f.low is not None:
            out["exclusiveMinimum" if f.low_exclusive else "minimum"] = f.low
        if f.high is not None:
            out["maximum"] = f.high
        return out
    if f.kind == "boolean":
        return {"type": "boolean"}
    if f.kind == "duration":
        return {"oneOf": [{"type": "integer", "minimum": 1 if f.positive else 0},
                          {"type": "string", "pattern": _anchored(duration_pattern(f.positive, f.unit_ms))}]}
    if f.kind == "schedule":
        # A preset, or five or six fields (croniter judges them in the checker; a pattern cannot).
        return {"type": "string", "pattern": _anchored("|".join([*f.enum, r"\s*[^@\s]\S*(?:\s+\S+){4,5}\s*"]))}
    if f.kind == "expression":
        return {"type": "string", "pattern": r"\S"}
    if f.kind == "mapping":
        out = {"type": "object"}
        if f.items is not None:
            out["additionalProperties"] = render(f.items)
        names: dict[str, Any] = {}
        if f.key_pattern:
            names["pattern"] = _anchored(f.key_pattern)
        if f.refused_keys:
            names["not"] = {"enum": list(f.refused_keys)}
        if names:
            out["propertyNames"] = names
        if f.min_items:
            out["minProperties"] = f.min_items
        return out
    if f.kind == "list":
        out = {"type": "array"}
        if f.items is not None:
            out["items"] = render(f.items)
        if f.min_items:
            out["minItems"] = f.min_items
        if f.unique:
            out["uniqueItems"] = True
        return out
    if f.kind == "section":
        assert f.section is not None
        return render_section(f.section, describe=False)
    raise AssertionError(f.kind)


def render(f: Field) -> dict[str, Any]:
    """A field's JSON Schema: its forms (``oneOf`` when it has several, ``null`` among them when it is
    nullable), its description (with a default that depends on other fields, in words) and its default."""
    forms = [_core(f), *(_core(a) for a in f.alternatives)]
    if f.nullable and len(forms) == 1 and isinstance(forms[0].get("type"), str):
        forms[0]["type"] = [forms[0]["type"], "null"]  # a section's keys stay at the top, for editors
    elif f.nullable and len(forms) == 1 and "enum" in forms[0]:
        forms[0]["enum"].append(None)
    elif f.nullable:
        forms.append({"type": "null"})
    out: dict[str, Any] = {"description": f.doc + (f" Default: {f.default_doc}." if f.default_doc else "")}
    if len(forms) == 1:
        out.update(forms[0])
    else:
        out["oneOf"] = forms
    if f.default is not UNSET:
        out["default"] = f.default
    return out


def render_section(s: Section, describe: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"description": s.doc} if describe else {}
    out["type"] = "object"
    out["properties"] = {key: render(f) for key, f in s.fields.items()}
    required = [key for key, f in s.fields.items() if f.required]
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    return out


def json_schema(root: Section, title: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a document whose top level is ``root``. Only keywords that mean the
    same in draft-07 are used (no ``$defs``, no ``prefixItems``): editors' YAML support reads draft-07."""
    return {"$schema": JSON_SCHEMA_DIALECT, "title": title, **render_section(root)}
