"""The state a new version of a pipeline's code would have left, against the state a checkpoint left (pure).

``lockstep replay --compare`` computes a stateful checkpoint again through a new spec, from the checkpoint's own
claim (its base state among it), and sets the state that run would leave beside the state the checkpoint
committed, key by key (the state key, ``__ls_key``). A key's state is its rows, as a multiset: a window's
buffered rows or partial aggregates, a dedup's passed records' event times, a state function's one row. The
rows are compared by every column but the key group (a function of the key): a key whose rows differ changed,
and the rows on one side only were added or removed. A key with rows on one side only was added or removed
whole. A column one side has and the other lacks reads as null. An example of a key with one row on each side
shows only the columns that differ.
"""
from __future__ import annotations

__all__ = [
    "StateDiff", "StateExample", "diff_state",
]

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep.model.state_rows import GROUP, KEY

#: How much of a key's rows an example shows.
SHOWN = 300

Row = Mapping[str, Any]


@dataclass(frozen=True)
class StateExample:
    """One key whose state changed, came or went, shown as text."""

    kind: str  #: changed, added or removed
    key: str
    before: str | None
    after: str | None

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "key": self.key, "before": self.before, "after": self.after}

    def line(self) -> str:
        if self.kind == "changed":
            return f"state of key {self.key} changed: {self.before} -> {self.after}"
        return f"state of key {self.key} {self.kind}: {self.after if self.kind == 'added' else self.before}"


@dataclass
class StateDiff:
    """The keys of one checkpoint's state that it or the new code touched, as committed (before) and as the new
    code leaves them (after)."""

    keys: int = 0
    same: int = 0
    changed: int = 0
    added: int = 0
    removed: int = 0
    rows_added: int = 0
    rows_removed: int = 0
    examples: list[StateExample] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.changed or self.added or self.removed)

    def add(self, other: StateDiff, examples: int) -> None:
        """Sum ``other`` into this one (the totals), keeping at most ``examples`` examples."""
        for name in ("keys", "same", "changed", "added", "removed", "rows_added", "rows_removed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.examples.extend(other.examples[:max(0, examples - len(self.examples))])

    def to_json(self) -> dict[str, object]:
        return {"keys": self.keys, "same": self.same, "changed": self.changed, "added": self.added,
                "removed": self.removed, "rows_added": self.rows_added, "rows_removed": self.rows_removed,
                "examples": [e.to_json() for e in self.examples]}

    def text(self) -> str:
        if self.empty:
            return f"state: {self.keys} keys compared, the same"
        return (f"state: {self.keys} keys compared: {self.same} the same, {self.changed} changed, {self.added} added, "
                f"{self.removed} removed ({self.rows_added} rows added, {self.rows_removed} removed)")


def diff_state(before: Iterable[Row], after: Iterable[Row], examples: int = 5) -> StateDiff:
    """The difference between the rows a checkpoint's state holds for some keys and the rows the new code leaves
    for the same keys, with at most ``examples`` examples."""
    old, new = _by_key(before), _by_key(after)
    diff = StateDiff(keys=len(set(old) | set(new)))
    for key in sorted(set(old) | set(new)):
        left, right = old.get(key, Counter()), new.get(key, Counter())
        if left == right:
            diff.same += 1
            continue
        diff.rows_added += sum((right - left).values())
        diff.rows_removed += sum((left - right).values())
        kind = "added" if not left else "removed" if not right else "changed"
        setattr(diff, kind, getattr(diff, kind) + 1)
        if len(diff.examples) < examples:
            shown_before, shown_after = _shown_pair(left, right)
            diff.examples.append(StateExample(kind, key, shown_before, shown_after))
    return diff


def _shown_pair(left: Counter[str], right: Counter[str]) -> tuple[str | None, str | None]:
    """A key's rows on each side as an example shows them: of one row each, only the columns that differ."""
    if sum(left.values()) == sum(right.values()) == 1:
        old, new = json.loads(next(iter(left))), json.loads(next(iter(right)))
        names = sorted(n for n in set(old) | set(new) if old.get(n) != new.get(n))
        return (json.dumps({n: old[n] for n in names if n in old}, sort_keys=True),
                json.dumps({n: new[n] for n in names if n in new}, sort_keys=True))
    return (_text(left) if left else None, _text(right) if right else None)


def _by_key(rows: Iterable[Row]) -> dict[str, Counter[str]]:
    """Each key's rows, each as the canonical JSON of its columns but the key and its group."""
    found: dict[str, Counter[str]] = {}
    for row in rows:
        shown = {name: _plain(value) for name, value in row.items() if name not in (KEY, GROUP) and value is not None}
        found.setdefault(str(row[KEY]), Counter())[json.dumps(shown, sort_keys=True)] += 1
    return found


def _plain(value: Any) -> Any:
    """A column's value as JSON holds it: bytes as text when they are UTF-8, else their size."""
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        try:
            return data.decode()
        except UnicodeDecodeError:
            return f"<{len(data)} bytes>"
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, int | float | str | bool):
        return value
    return str(value)


def _text(rows: Counter[str]) -> str:
    text = "; ".join(sorted(rows.elements()))
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."
