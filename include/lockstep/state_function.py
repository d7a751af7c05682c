"""The Python state API: a function per key, for stateful logic the spec's windows and dedup do not cover.

A spec names it under ``state.function`` (docs/state.md)::

    state:
      event_time: {column: created_at, out_of_orderness: 10s}
      function:
        key: customer
        process: my_pipelines.sessions:process
        state: {orders: bigint, total_cents: bigint, first_at: bigint}
        version: 1

and Lockstep calls it once per key that has new records in the checkpoint, or a timer the
watermark has passed::

    def process(key: str, records: pandas.DataFrame, state: dict | None, ctx: Context):
        ...
        return rows, new_state

- ``records``: the key's new records of this checkpoint, oldest event first: the transform's columns
  (without ``error``/``headers``) and ``event_time_ms``. Empty when only timers fired.
- ``state``: the declared fields of the key's state, or None for a key without state.
- ``rows``: the output records, each a dict with ``value`` (str, bytes, or a dict/list written as JSON)
  and optionally ``key`` (the state key by default) and ``headers`` (a dict of name -> value, or a
  list of (name, value) pairs; values str, bytes or None), which the record carries after Lockstep's
  provenance headers; or a pandas DataFrame with those columns. The records' own input headers are
  not given to the function: an output carries only the headers it returns.
- ``new_state``: a dict of declared fields (missing ones are null), or None to delete the key.
- ``ctx.fired_timers``: the event times of this key's timers the watermark has passed;
  ``ctx.register_timer(at_ms)`` asks for a call once the watermark passes ``at_ms``.

The function runs in Spark's Python workers, in batch, over Spark's ``cogroup(...).applyInPandas``.
Its result for a checkpoint is computed once and kept (a local checkpoint of the result), so the
output and the state written are the same call's even if the function is not deterministic.
"""
from __future__ import annotations

__all__ = [
    "Context",
]

from dataclasses import dataclass, field


@dataclass
class Context:
    """What the function knows besides its records and state, and its timers."""

    key: str
    #: the watermark after this checkpoint (epoch ms), None before the first one
    watermark_ms: int | None
    #: event times (epoch ms) of this key's timers that fire in this call, oldest first
    fired_timers: list[int] = field(default_factory=list)
    #: the key's timers still pending after this call (registered ones included)
    timers: list[int] = field(default_factory=list)
    #: what Lockstep's own state functions are told besides the records (an interval join's sides and bounds)
    options: dict[str, object] = field(default_factory=dict)

    def register_timer(self, at_ms: int) -> None:
        """Call the function for this key again once the watermark passes ``at_ms`` (event time)."""
        if int(at_ms) not in self.timers:
            self.timers.append(int(at_ms))

    def delete_timer(self, at_ms: int) -> None:
        if int(at_ms) in self.timers:
            self.timers.remove(int(at_ms))
