"""Stream-stream interval joins (``state.interval_join``, docs/joins.md): two source topics joined on a key
within an event-time interval, as a state function (`lockstep.state_function`) Lockstep runs for you.

A record of the ``left`` topic at event time ``t`` meets every record of the ``right`` topic with the same key
whose event time is within ``[t - before, t + after]`` (``after: 15m``: a payment within 15 minutes after its
order). Each pair is written once, when the second of the two arrives. Each side's records wait in the key's
state until the watermark passes the last moment a partner could still come (``t + after`` for a left record,
``t + before`` for a right one); then they are dropped, and with an outer join (``how: left``, ``right`` or
``full``) a record that met no partner is written once, alone.

The output value is JSON: ``{"key", "left", "right", "left_time_ms", "right_time_ms"}``, each side the record's
value (parsed when it is JSON, else its text), null for the missing side of an outer join's record. Its
provenance headers are those of the checkpoint's last record of the key (a state function's rule), its Kafka
key the join key.

A record that comes after the watermark passed its partners' expiry (later than ``out_of_orderness``) finds
them gone: size ``state.event_time.out_of_orderness`` for the lateness the sources have. Everything here is a
function of the records, the state and the watermark, so a retry, a repair's recomputation and ``lockstep
verify`` (one call per key over the whole input) give the same pairs.
"""
from __future__ import annotations

__all__ = [
    "PROCESS", "STATE_FIELDS", "process",
]

import json
from typing import Any

from lockstep.state_function import Context

#: The state function Lockstep runs for ``state.interval_join`` (`lockstep.spec` names it), and its state: each
#: side's waiting records, a JSON list each.
PROCESS = "lockstep.tables.interval_join:process"
STATE_FIELDS = (("left", "string"), ("right", "string"))
OUTER = {"left": ("left", "full"), "right": ("right", "full")}


def _value(raw: object) -> object:
    """A record's value for the output: parsed JSON, else its text (None stays None)."""
    if raw is None:
        return None
    text = bytes(raw).decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray, memoryview)) else str(raw)
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pair(key: str, left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, object]:
    return {"key": key, "value": {
        "key": key, "left": left["value"] if left else None, "right": right["value"] if right else None,
        "left_time_ms": left["t"] if left else None, "right_time_ms": right["t"] if right else None}}


def _within(left_t: int, right_t: int, before: int, after: int) -> bool:
    return left_t - before <= right_t <= left_t + after


def process(key: str, records: Any, state: dict[str, Any] | None, ctx: Context) -> tuple[list[dict[str, object]],
                                                                                          dict[str, str] | None]:
    """One key's call: pair the new records with each other and with the waiting ones, then let go of what the
    watermark has passed (an outer join's unmatched ones written then)."""
    o: dict[str, Any] = ctx.options
    before, after, how = int(o["before_ms"]), int(o["after_ms"]), str(o["how"])
    waiting = {side: json.loads((state or {}).get(side) or "[]") for side in ("left", "right")}
    out: list[dict[str, object]] = []
    for r in records.to_dict("records"):
        side = "left" if r["topic"] == o["left"] else "right" if r["topic"] == o["right"] else None
        if side is None:
            continue  # the spec lets no other topic in
        entry: dict[str, Any] = {"t": int(r["event_time_ms"]), "value": _value(r.get("value")), "matched": False}
        other = "right" if side == "left" else "left"
        for partner in waiting[other]:
            left, right = (entry, partner) if side == "left" else (partner, entry)
            if _within(left["t"], right["t"], before, after):
                out.append(_pair(key, left, right))
                partner["matched"] = entry["matched"] = True
        waiting[side].append(entry)
    wm = ctx.watermark_ms
    ctx.timers.clear()
    for side, lasts in (("left", after), ("right", before)):
        kept = []
        for entry in waiting[side]:
            if wm is not None and wm > entry["t"] + lasts:  # no partner can come any more
                if not entry["matched"] and how in OUTER[side]:
                    out.append(_pair(key, entry if side == "left" else None, entry if side == "right" else None))
            else:
                kept.append(entry)
                ctx.register_timer(entry["t"] + lasts + 1)
        waiting[side] = kept
    if not waiting["left"] and not waiting["right"]:
        return out, None
    return out, {side: json.dumps(entries, separators=(",", ":")) for side, entries in waiting.items()}
