"""What another version of a pipeline's code would have written, against what a checkpoint wrote (pure).

``lockstep replay --compare`` computes a completed checkpoint's output again through a new spec, from the
checkpoint's own claim, and sets it beside the records the checkpoint committed. Both sides arrive here as
`OutputRecord` values: where the record went (its role: the sink, a route's topic or the dead letters), the
input record it was made from (its provenance), its key, value, the transform's headers and, for a dead
letter, its reason. Lockstep's own headers (provenance, checkpoint, pipeline) are not compared: they say
where a record came from, not what the code made of it.

Records are matched by provenance: an input offset's outputs before and after. Those found on both sides
are the same; of the rest, records of the same provenance are paired as changed (by role and key, in
order), and what stays unpaired was added or removed. A changed record names the fields that differ:
``role`` (another topic, or now a dead letter), ``key``, ``value`` (``value.<field>`` for each top-level
field of two JSON objects), ``headers``, ``error``. A stateful checkpoint's state is compared too (`lockstep.rules.state_diff`).
"""
from __future__ import annotations

__all__ = [
    "CheckpointDiff", "Example", "OutputRecord", "compare_counts", "diff_checkpoint", "DEAD_LETTERS", "SINK",
]

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from lockstep.rules.state_diff import StateDiff

Key = TypeVar("Key", bound=tuple[object, ...])

#: The role of a record in ``sink.topic``; a route's records have their topic's name as their role.
SINK = "sink"
#: The role of a dead letter (``sink.dead_letter_topic``).
DEAD_LETTERS = "dead letters"

Source = tuple[str, int, int]


@dataclass(frozen=True, order=True)
class OutputRecord:
    """One output record as compared: where it went, what it was made from, and what it holds."""

    source: Source
    role: str
    key: bytes | None
    value: bytes | None
    #: the transform's headers, in order (Lockstep's own left out)
    headers: tuple[tuple[str, bytes | None], ...] = ()
    #: a dead letter's reason
    error: str | None = None

    def fields_changed(self, other: OutputRecord) -> list[str]:
        """The names of the fields in which ``other`` differs from this record."""
        changed = [name for name in ("role", "key") if getattr(self, name) != getattr(other, name)]
        if self.value != other.value:
            changed += _value_fields(self.value, other.value)
        changed += [name for name in ("headers", "error") if getattr(self, name) != getattr(other, name)]
        return changed


@dataclass(frozen=True)
class Example:
    """One record that changed, was added or was removed, shown as text."""

    kind: str  #: changed, added or removed
    source: Source
    fields: tuple[str, ...]
    before: str | None
    after: str | None

    def to_json(self) -> dict[str, object]:
        topic, partition, offset = self.source
        return {"kind": self.kind, "source": f"{topic}:{partition}@{offset}", "fields": list(self.fields),
                "before": self.before, "after": self.after}

    def line(self) -> str:
        topic, partition, offset = self.source
        where = f"{topic}:{partition}@{offset}"
        if self.kind == "changed":
            return f"changed {where} ({', '.join(self.fields)}): {self.before} -> {self.after}"
        return f"{self.kind} {where}: {self.after if self.kind == 'added' else self.before}"


@dataclass
class CheckpointDiff:
    """One checkpoint's output, as committed (before) and as the new code computes it (after)."""

    checkpoint_id: int
    before: int = 0
    after: int = 0
    same: int = 0
    added: int = 0
    removed: int = 0
    changed: int = 0
    #: records that are dead letters after and were not before, and the other way round
    dead_letters_gained: int = 0
    dead_letters_lost: int = 0
    #: how many changed records differ in each field
    fields: Counter[str] = field(default_factory=Counter)
    examples: list[Example] = field(default_factory=list)
    #: a stateful checkpoint's state, as committed and as the new code leaves it (None: stateless)
    state: StateDiff | None = None

    @property
    def empty(self) -> bool:
        """The new code writes exactly what the checkpoint wrote, and leaves the state it left."""
        return self.same_output and (self.state is None or self.state.empty)

    @property
    def same_output(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def add(self, other: CheckpointDiff, examples: int) -> None:
        """Sum ``other`` into this one (the totals), keeping at most ``examples`` examples."""
        for name in ("before", "after", "same", "added", "removed", "changed", "dead_letters_gained",
                     "dead_letters_lost"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.fields.update(other.fields)
        self.examples.extend(other.examples[:max(0, examples - len(self.examples))])
        if other.state is not None:
            if self.state is None:
                self.state = StateDiff()
            self.state.add(other.state, examples)

    def to_json(self) -> dict[str, object]:
        return {"checkpoint": self.checkpoint_id, "before": self.before, "after": self.after, "same": self.same,
                "added": self.added, "removed": self.removed, "changed": self.changed,
                "dead_letters_gained": self.dead_letters_gained, "dead_letters_lost": self.dead_letters_lost,
                "fields": dict(sorted(self.fields.items())), "examples": [e.to_json() for e in self.examples],
                "state": None if self.state is None else self.state.to_json()}

    def line(self) -> str:
        head = f"checkpoint {self.checkpoint_id}" if self.checkpoint_id >= 0 else "total"
        state = "" if self.state is None else f"; {self.state.text()}"
        if self.same_output:
            return f"{head}: {self.before} records, the same{state}"
        text = (f"{head}: {self.before} records before, {self.after} after: {self.same} the same, "
                f"{self.changed} changed, {self.added} added, {self.removed} removed")
        if self.dead_letters_gained or self.dead_letters_lost:
            text += f"; dead letters {self.dead_letters_gained} gained, {self.dead_letters_lost} lost"
        if self.fields:
            text += "; fields changed: " + ", ".join(f"{name} ({n})" for name, n in self.fields.most_common())
        return text + state


def diff_checkpoint(checkpoint_id: int, before: Iterable[OutputRecord], after: Iterable[OutputRecord],
                    examples: int = 5) -> CheckpointDiff:
    """The difference between a checkpoint's committed output and the output computed again, with at most
    ``examples`` examples."""
    old, new = _by_source(before), _by_source(after)
    diff = CheckpointDiff(checkpoint_id, before=sum(map(len, old.values())), after=sum(map(len, new.values())))
    for source in sorted(set(old) | set(new)):
        left, right = Counter(old.get(source, ())), Counter(new.get(source, ()))
        common = left & right
        diff.same += sum(common.values())
        gone, came = sorted((left - common).elements()), sorted((right - common).elements())
        for b, a in _paired(gone, came):
            if b is not None and a is not None:
                names = b.fields_changed(a)
                diff.changed += 1
                diff.fields.update(names)
                _example(diff, examples, Example("changed", source, tuple(names), _text(b), _text(a)))
            elif a is not None:
                diff.added += 1
                _example(diff, examples, Example("added", source, (), None, _text(a)))
            elif b is not None:
                diff.removed += 1
                _example(diff, examples, Example("removed", source, (), _text(b), None))
            if (a is not None and a.role == DEAD_LETTERS) and (b is None or b.role != DEAD_LETTERS):
                diff.dead_letters_gained += 1
            if (b is not None and b.role == DEAD_LETTERS) and (a is None or a.role != DEAD_LETTERS):
                diff.dead_letters_lost += 1
    return diff


def _by_source(records: Iterable[OutputRecord]) -> dict[Source, list[OutputRecord]]:
    grouped: dict[Source, list[OutputRecord]] = {}
    for r in records:
        grouped.setdefault(r.source, []).append(r)
    return grouped


def _paired(gone: list[OutputRecord], came: list[OutputRecord]
            ) -> list[tuple[OutputRecord | None, OutputRecord | None]]:
    """The records of one provenance that are not on both sides, paired: first those of the same role and key,
    then the rest in order; what is left over stands alone (removed, or added)."""
    pairs: list[tuple[OutputRecord | None, OutputRecord | None]] = []
    rest: list[OutputRecord] = []
    for b in gone:
        match = next((a for a in came if (a.role, a.key) == (b.role, b.key)), None)
        if match is None:
            rest.append(b)
        else:
            came.remove(match)
            pairs.append((b, match))
    for i, b in enumerate(rest):
        pairs.append((b, came[i] if i < len(came) else None))
    pairs += [(None, a) for a in came[len(rest):]]
    return pairs


def _value_fields(before: bytes | None, after: bytes | None) -> list[str]:
    """``value.<field>`` for each top-level field two JSON object values differ in; ``value`` otherwise."""
    old, new = _json_object(before), _json_object(after)
    if old is None or new is None:
        return ["value"]
    names = sorted(n for n in set(old) | set(new) if old.get(n, _MISSING) != new.get(n, _MISSING))
    return [f"value.{n}" for n in names] or ["value"]


_MISSING = object()


def _json_object(value: bytes | None) -> Mapping[str, object] | None:
    if not value or value[:1] != b"{":
        return None
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _example(diff: CheckpointDiff, most: int, example: Example) -> None:
    if len(diff.examples) < most:
        diff.examples.append(example)


#: How much of a key or value an example shows.
SHOWN = 200


def _text(record: OutputRecord) -> str:
    """A record as an example shows it: its role, key and value (decoded as UTF-8 when they are text, else their
    size), the transform's headers' names, and a dead letter's reason."""
    parts = [f"[{record.role}]"]
    if record.key is not None:
        parts.append(f"key={_shown(record.key)}")
    parts.append(f"value={_shown(record.value)}")
    if record.headers:
        parts.append("headers=" + ",".join(name for name, _ in record.headers))
    if record.error is not None:
        parts.append(f"error={record.error[:SHOWN]}")
    return " ".join(parts)


def _shown(data: bytes | None) -> str:
    if data is None:
        return "null"
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return f"<{len(data)} bytes>"
    if not text.isprintable():
        return f"<{len(data)} bytes>"
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def compare_counts(expected: Counter[Key], actual: Counter[Key]) -> tuple[list[Key], list[Key], list[Key]]:
    """Keys found fewer times than expected (lost), more (duplicated), and never expected (unexpected)."""
    lost: list[Key] = []
    duplicated: list[Key] = []
    unexpected: list[Key] = []
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key, 0), actual.get(key, 0)
        if want and got < want:
            lost.append(key)
        elif want and got > want:
            duplicated.append(key)
        elif not want and got:
            unexpected.append(key)
    return lost, duplicated, unexpected
