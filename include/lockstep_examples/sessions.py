"""A state function (`lockstep.state_function`): each customer's running order count, and a
"session closed" record once a customer has ordered nothing for ``GAP_MS`` of event time.

Spec (``state.function``)::

    function:
      key: customer
      process: lockstep_examples.sessions:process
      state: {orders: bigint, total_cents: bigint, last_at_ms: bigint}
"""
from __future__ import annotations

from typing import Any

from lockstep.state_function import Context

GAP_MS = 20_000


def process(key: str, records: Any, state: dict[str, Any] | None, ctx: Context) -> tuple[list[dict[str, Any]], Any]:
    session = state or _new()
    rows: list[dict[str, Any]] = []
    for order in records.itertuples():
        at = int(order.event_time_ms)
        if session["last_at_ms"] is not None and at > session["last_at_ms"] + GAP_MS:
            rows.append(_closed(key, session))  # a gap before this order: the previous session is over
            session = _new()
        session["orders"] += 1
        session["total_cents"] += round(order.amount * 100)
        session["last_at_ms"] = max(at, session["last_at_ms"] or 0)
        rows.append({"value": {"customer": key, "order_id": order.order_id, "nth": session["orders"]}})
    for timer in list(ctx.timers):
        ctx.delete_timer(timer)
    end = session["last_at_ms"] + GAP_MS
    if ctx.watermark_ms is not None and ctx.watermark_ms >= end:  # no order within the gap: over
        rows.append(_closed(key, session))
        return rows, None
    ctx.register_timer(end)
    return rows, session


def _new() -> dict[str, Any]:
    return {"orders": 0, "total_cents": 0, "last_at_ms": None}


def _closed(key: str, session: dict[str, Any]) -> dict[str, Any]:
    """A closed session's record; its ``headers`` tell a consumer what it is without reading the value."""
    return {"value": {"customer": key, "closed": True, "orders": session["orders"],
                      "total_cents": session["total_cents"]}, "headers": {"session": "closed"}}


def process_v2(key: str, records: Any, state: dict[str, Any] | None,
               ctx: Context) -> tuple[list[dict[str, Any]], Any]:
    """Version 2 of the state: ``total_cents`` is called ``cents``. Same logic as `process`."""
    old = None if state is None else {"orders": state["orders"], "total_cents": state["cents"],
                                      "last_at_ms": state["last_at_ms"]}
    rows, new = process(key, records, old, ctx)
    return rows, None if new is None else {"orders": new["orders"], "cents": new["total_cents"],
                                           "last_at_ms": new["last_at_ms"]}


def migrate(state: dict[str, Any], version: int) -> dict[str, Any] | None:
    """A version-1 state as version 2 (``state.function.migrate``): ``total_cents`` became ``cents``."""
    if version != 1:
        raise ValueError(f"no migration from version {version}")
    return {"orders": state["orders"], "cents": state["total_cents"], "last_at_ms": state["last_at_ms"]}
