"""State functions (`lockstep.state_function`) for unit tests of the worker side
(`lockstep.spark.state_worker`), named by tests as ``tests.support.state_functions:<name>``."""
from __future__ import annotations

from typing import Any

from lockstep.state_function import Context

#: How long after a key's last event its timer fires.
GAP_MS = 10_000


def running_count(key: str, records: Any, state: dict[str, Any] | None,
                  ctx: Context) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Counts a key's records, one output row per record; once the watermark passes its last event plus
    ``GAP_MS`` (a timer), emits a closing row and deletes the key."""
    current = dict(state) if state else {"count": 0, "last_at": None}
    if ctx.fired_timers:
        return [{"value": {"closed": key, "count": current["count"], "fired": list(ctx.fired_timers)},
                 "key": f"closed-{key}"}], None
    rows = []
    for record in records.itertuples():
        current["count"] += 1
        current["last_at"] = int(record.event_time_ms)
        rows.append({"value": f"{key}:{current['count']}:{record.amount}"})
    for timer in list(ctx.timers):
        ctx.delete_timer(timer)
    ctx.register_timer(current["last_at"] + GAP_MS)
    return rows, current


def undeclared(key: str, records: Any, state: dict[str, Any] | None,
               ctx: Context) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Returns a state field the spec does not declare."""
    return [], {"count": 1, "surprise": True}


def from_v1(state: dict[str, Any], version: int) -> dict[str, Any] | None:
    """Version 1 kept ``n``; version 2 calls it ``count`` and adds ``last_at``. Keys with nothing counted go."""
    assert version == 1
    if not state["n"]:
        return None
    return {"count": state["n"] * 1, "last_at": None}


def with_headers(key: str, records: Any, state: dict[str, Any] | None,
                 ctx: Context) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One output per record with the record's offset as a header (a dict), and one with repeated
    headers (pairs, bytes and a header without value)."""
    rows: list[dict[str, Any]] = [{"value": "r", "headers": {"offset": str(r.offset)}} for r in records.itertuples()]
    rows.append({"value": "pairs", "headers": [("tag", "a"), ("tag", b"\xff\x00"), ("empty", None)]})
    return rows, None


def bad_headers(key: str, records: Any, state: dict[str, Any] | None,
                ctx: Context) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Returns a header whose value is a number."""
    return [{"value": "x", "headers": {"n": 1}}], None
