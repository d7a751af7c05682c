"""The Python side of ``state.function``: runs in Spark's Python workers, once per key of a checkpoint
(``cogroup(...).applyInPandas``), and calls the user's function (`lockstep.state_function`).

Each call returns pandas rows of one schema: ``__ls_kind`` says whether a row is an output record
("out") or the key's new state ("state"); `lockstep.spark.state_function_run` splits them. The settings travel
as plain values in the closure, never the spec's connections.
"""
from __future__ import annotations

__all__ = [
    "FunctionSettings", "KEY", "KIND", "apply_function", "result_columns", "schema_ddl", "state_columns",
]

import base64
import importlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lockstep.model.state_rows import (
    EVENT,
    FROM_OFFSET,
    FROM_PARTITION,
    FROM_TOPIC,
    FUNCTION_COLUMNS,
    GROUP,
    KEY,
    TIMERS,
    function_state_columns,
)

KIND, OUT_KEY, OUT_HEADERS = "__ls_kind", "__ls_out_key", "__ls_out_headers"
#: How the errors below begin ("state function module:function failed for key ..." and the like): a
#: failed run whose cause matches is the user's function failing, terminal (`lockstep.spark.job.job_outcome`).
USER_FAILURE = re.compile(r"\bstate function [\w.]+:\w+(,|:| failed)")
#: An output row's headers travel as JSON text (``[{"key": name, "value": base64 or null}]``, see
#: `encode_headers`): like the timers, an array column did not survive pandas -> Arrow in cogroup
#: (pyspark 4.0.0). `lockstep.spark.state_function_run` turns it back into Spark's Kafka header type.
OUT_COLUMNS = ((KIND, "string"), ("value", "binary"), (OUT_KEY, "binary"), ("topic", "string"),
               ("partition", "int"), ("offset", "bigint"), (OUT_HEADERS, "string"))
#: The JSON schema of `OUT_HEADERS`, for Spark's ``from_json``.
OUT_HEADERS_SCHEMA = "array<struct<key:string,value:string>>"


@dataclass(frozen=True)
class FunctionSettings:
    process: str
    fields: tuple[tuple[str, str], ...]
    watermark_ms: int | None
    #: the record columns the function sees, in order
    record_columns: tuple[str, ...]
    migrate: str | None = None
    from_version: int = 1
    #: ``ctx.options`` (`lockstep.spec.FunctionSpec.options`), as (name, value) pairs
    options: tuple[tuple[str, object], ...] = ()


def schema_ddl(columns: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in columns)


def state_columns(fields: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return function_state_columns(fields)


def result_columns(fields: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return OUT_COLUMNS + state_columns(fields)


def _target(name: str) -> Callable[..., Any]:
    module, _, function = name.partition(":")
    found: object = getattr(importlib.import_module(module), function, None)
    if not callable(found):
        raise TypeError(f"state function {name}: {module} has no callable {function!r}")
    return found


def _as_bytes(value: object, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), default=str).encode()
    raise TypeError(f"{what} must be str, bytes, or a dict/list (written as JSON), got {type(value).__name__}")


def encode_headers(headers: object, what: str) -> str | None:
    """An output row's ``headers`` as `OUT_HEADERS` text, or None without any.

    The function may give a dict (name -> value) or a list of (name, value) pairs (a name may then
    repeat, as Kafka allows); a value is str (written as UTF-8), bytes, or None (a header without a
    value). They follow Lockstep's provenance headers on the record, as a stateless transform's do."""
    if headers is None:
        return None
    if isinstance(headers, dict):
        pairs = list(headers.items())
    elif isinstance(headers, (list, tuple)):
        pairs = list(headers)
    else:
        raise TypeError(f"{what} must be a dict of name -> value or a list of (name, value) pairs, "
                        f"got {type(headers).__name__}")
    encoded = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise TypeError(f"{what}: header {i} must be a (name, value) pair with a str name, got {pair!r}")
        name, value = pair
        if value is not None and not isinstance(value, (str, bytes)):
            raise TypeError(f"{what}: header {name!r}'s value must be str, bytes or None, got {type(value).__name__}")
        raw = value.encode() if isinstance(value, str) else value
        encoded.append({"key": name, "value": None if raw is None else base64.b64encode(raw).decode("ascii")})
    return json.dumps(encoded, separators=(",", ":")) if encoded else None


def apply_function(settings: FunctionSettings) -> Callable[[Any, Any, Any], Any]:
    """The function ``applyInPandas`` calls per key: (key tuple, the key's new records, its state row)."""
    from lockstep.state_function import Context

    names = [n for n, _ in result_columns(settings.fields)]
    declared = [n for n, _ in settings.fields]

    def per_key(key: tuple[Any, ...], records: Any, state: Any) -> Any:
        import pandas as pd

        process = _target(settings.process)
        k = str(key[0])
        row: dict[str, Any] | None = state.iloc[0].to_dict() if len(state) else None
        timers = sorted(int(t) for t in json.loads(row[TIMERS] or "[]")) if row is not None else []
        wm = settings.watermark_ms
        due = [t for t in timers if wm is not None and t <= wm]
        if not len(records) and not due:
            assert row is not None  # cogroup calls for keys with records or state
            return _frame([{**row, KIND: "state"}], names)  # nothing happened to this key
        records = records.sort_values([EVENT, "topic", "partition", "offset"]).reset_index(drop=True)
        given = records.rename(columns={EVENT: "event_time_ms"})[list(settings.record_columns)]
        ctx = Context(k, wm, due, [t for t in timers if t not in due], dict(settings.options))
        current = None if row is None else {n: _plain(row[n]) for n in declared}
        try:
            result = process(k, given, current, ctx)
            rows, new_state = result
        except Exception as exc:
            raise RuntimeError(f"state function {settings.process} failed for key {k!r}: {exc!r}") from exc
        if len(records):
            last = records.iloc[-1]
            origin = (str(last["topic"]), int(last["partition"]), int(last["offset"]), int(last[EVENT]))
        elif row is not None:
            origin = (row[FROM_TOPIC], int(row[FROM_PARTITION]), int(row[FROM_OFFSET]), int(row[EVENT]))
        else:  # only timers fire only for keys with state
            raise AssertionError(f"key {k!r}: timers without state")
        out: list[dict[str, Any]] = []
        for i, r in enumerate(rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows or []):
            if not isinstance(r, dict) or "value" not in r:
                raise TypeError(f"state function {settings.process}, key {k!r}: output row {i} must be a dict "
                                f"with 'value' (and optionally 'key', 'headers'), got {r!r}")
            out.append({KIND: "out", "value": _as_bytes(r["value"], f"output row {i}'s value"),
                        OUT_KEY: _as_bytes(r.get("key", k), f"output row {i}'s key"),
                        "topic": origin[0], "partition": origin[1], "offset": origin[2],
                        OUT_HEADERS: encode_headers(r.get("headers"), f"state function {settings.process}, key "
                                                                      f"{k!r}: output row {i}'s headers")})
        if new_state is not None:
            if not isinstance(new_state, dict):
                raise TypeError(f"state function {settings.process}, key {k!r}: the new state must be a dict of "
                                f"{declared} or None (delete the key), got {type(new_state).__name__}")
            unknown = sorted(set(new_state) - set(declared))
            if unknown:
                raise ValueError(f"state function {settings.process}, key {k!r}: state fields {unknown} are not "
                                 f"declared in state.function.state ({declared})")
            group = int(records[GROUP].iloc[0]) if len(records) else int(row[GROUP]) if row is not None else 0
            out.append({KIND: "state", KEY: k, GROUP: group,
                        EVENT: origin[3], TIMERS: json.dumps(sorted(ctx.timers)), FROM_TOPIC: origin[0],
                        FROM_PARTITION: origin[1], FROM_OFFSET: origin[2],
                        **{n: new_state.get(n) for n in declared}})
        return _frame(out, names)

    return per_key


def migrate_rows(settings: FunctionSettings, old_fields: tuple[str, ...]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``mapInPandas`` over state rows of an earlier version: the spec's ``migrate(state, version)``."""
    names = [n for n, _ in state_columns(settings.fields)]
    declared = [n for n, _ in settings.fields]

    def migrate(batches: Iterator[Any]) -> Iterator[Any]:

        assert settings.migrate is not None
        fn = _target(settings.migrate)
        for batch in batches:
            out = []
            for row in batch.to_dict("records"):
                old = {n: _plain(row.get(n)) for n in old_fields}
                new = fn(old, settings.from_version)
                if new is None:
                    continue
                out.append({**{c: row[c] for c, _ in FUNCTION_COLUMNS}, **{n: new.get(n) for n in declared}})
            yield _frame(out, names)

    return migrate


def _frame(rows: list[dict[str, Any]], names: list[str]) -> Any:
    """The rows as a pandas DataFrame of Python objects. pandas 3 stores strings in Arrow-backed
    columns, which pyspark 4.0.0's conversion back to Arrow refuses (a ChunkedArray where it expects
    an Array); object columns convert as every pandas before 3 did."""
    import pandas as pd

    return pd.DataFrame({n: pd.Series([r.get(n) for r in rows], dtype=object) for n in names}, columns=names)


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as Python values, pandas' missing values as None, for the user's dicts."""
    if value is None:
        return None
    if hasattr(value, "tolist"):
        value = value.tolist()
    elif hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    if type(value).__name__ == "NaTType":
        return None
    return value
