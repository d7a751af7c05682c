"""Reading the stored JSON documents (a checkpoint's claim, prepared, completed, aborted, run failure, a
savepoint) strictly: every field typed, every failure a `MetadataError` naming the object and the field.

These documents decide what gets committed, so a document read with another schema or missing a field
must fail loudly rather than be half-understood; one reader keeps that rule the same for each of them.
Used by the model's document modules (``checkpoint``, ``savepoint``).
"""

from __future__ import annotations

__all__ = [
    "Reader", "build",
]

from collections.abc import Callable, Mapping
from typing import Literal, TypeVar, overload

from lockstep.errors import LockstepError, MetadataError, TerminalError
from lockstep.model.offsets import OffsetRange, TopicPartition

T = TypeVar("T")
U = TypeVar("U")


class Reader:
    """Typed field access on a JSON document (as ``json.loads`` returns it), failing with the object
    key in the message."""

    def __init__(self, doc: object, key: str, schema: str | None, path: str = "") -> None:
        self.key = key
        self.path = path
        if not isinstance(doc, Mapping):
            what = f"field {path!r} must be" if path else "expected"
            raise MetadataError(key, f"{what} a JSON object, got {type(doc).__name__}")
        found = doc.get("schema")
        if schema is not None and found != schema:
            raise MetadataError(key, f"schema is {found!r}, expected {schema!r}")
        self.doc = doc

    def nested(self, name: str) -> Reader:
        """A JSON object inside this one (no schema of its own); errors name its full path."""
        return Reader(self.get(name, dict), self.key, None, self._name(name))

    def _name(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    @overload
    def get(self, name: str, kind: type[T], optional: Literal[False] = False) -> T: ...

    @overload
    def get(self, name: str, kind: type[T], optional: Literal[True]) -> T | None: ...

    @overload
    def get(self, name: str, kind: tuple[type[T], type[U]], optional: Literal[False] = False) -> T | U: ...

    def get(self, name: str, kind: type | tuple[type, ...], optional: bool = False) -> object:
        if name not in self.doc:
            raise MetadataError(self.key, f"missing field {self._name(name)!r}")
        value = self.doc[name]
        if value is None and optional:
            return None
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise MetadataError(self.key, f"field {self._name(name)!r} has the wrong type: {value!r}")
        return value

    def convert(self, name: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except LockstepError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise MetadataError(self.key, f"field {name!r} is invalid: {exc}") from exc

    def offsets(self, name: str) -> dict[str, int]:
        raw = self.get(name, dict)
        self.convert(name, lambda: [TopicPartition.from_key(k) for k in raw])
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in raw.values()):
            raise MetadataError(self.key, f"field {name!r} must map partitions to non-negative integers")
        return dict(raw)

    def topic_ids(self, name: str) -> dict[str, str]:
        """An optional map of topic name -> topic id (absent in documents of earlier versions)."""
        raw = self.doc.get(name) or {}
        if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
            raise MetadataError(self.key, f"field {name!r} must map topic names to topic ids")
        return dict(raw)

    def schema_ids(self, name: str) -> dict[str, int]:
        """An optional map of a spec part (``source.value``, ``sink.key``, ...) -> a registry schema id."""
        raw = self.doc.get(name) or {}
        if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                                for k, v in raw.items()):
            raise MetadataError(self.key, f"field {name!r} must map spec parts to schema ids")
        return dict(raw)

    def ranges(self, name: str) -> tuple[OffsetRange, ...]:
        raw = self.get(name, list)
        return self.convert(name, lambda: tuple(OffsetRange.from_json(r) for r in raw))


def build(key: str, fn: Callable[[], T]) -> T:
    """Construct a value, turning its own validation errors into a MetadataError for `key`."""
    try:
        return fn()
    except MetadataError:
        raise
    except (ValueError, TerminalError) as exc:
        raise MetadataError(key, str(exc)) from exc
