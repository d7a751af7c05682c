"""The columns of a state row, as every module that reads or writes state files names them (pure data).

A state file is Parquet; each row is one key's (a window's buffered record, a dedup's passed record, a
state function's state) with Lockstep's own columns beside the operator's:
- ``__ls_key``: the state key (string); ``__ls_key_group``: its key group (int, `pmod(xxhash64(key), G)`);
- ``__ls_event_ms``: the event time in epoch ms (bigint);
- ``__ls_tombstone``: in a delta only, true for a key whose state is gone;
- a window's state of partial aggregates (`lockstep.rules.window_partials`) has a row per key and open window:
  ``__ls_start``, the window's start (epoch ms), the event time and provenance (``__ls_from_*``) of the latest
  record it counted, then each aggregate's value so far under its output name;
- a state function's rows also have ``__ls_timers`` (a JSON list of epoch ms) and the provenance of the
  key's latest record (``__ls_from_topic``, ``__ls_from_partition``, ``__ls_from_offset``), then the
  fields the spec declares.

Spark computes with them (`lockstep.spark.keyed_state`, `lockstep.spark.state_worker`), the chains merge them
(`lockstep.store.state_chain`), the tools show them (`lockstep.ops.state_report`) and `verify` recomputes
them (`lockstep.ops.verify_state`): one definition here for all of them.
"""
from __future__ import annotations

from collections.abc import Container

__all__ = [
    "EVENT", "FROM_OFFSET", "FROM_PARTITION", "FROM_TOPIC", "FUNCTION_COLUMNS", "GROUP", "INTERNAL", "KEY",
    "TIMERS", "TOMBSTONE", "WINDOW_START", "function_state_columns", "is_partial_window",
]

KEY, EVENT, GROUP = "__ls_key", "__ls_event_ms", "__ls_key_group"
#: The columns every state row has, in order.
INTERNAL = (KEY, EVENT, GROUP)
TOMBSTONE = "__ls_tombstone"
TIMERS = "__ls_timers"
#: A window's start, in a window state of partial aggregates (one row per key and open window).
WINDOW_START = "__ls_start"
FROM_TOPIC, FROM_PARTITION, FROM_OFFSET = "__ls_from_topic", "__ls_from_partition", "__ls_from_offset"
#: A state function's state rows' own columns (name, Spark type), before the declared fields.
FUNCTION_COLUMNS = ((KEY, "string"), (GROUP, "int"), (EVENT, "bigint"), (TIMERS, "string"),
                    (FROM_TOPIC, "string"), (FROM_PARTITION, "int"), (FROM_OFFSET, "bigint"))


def function_state_columns(fields: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A state function's state rows' columns: Lockstep's, then the spec's declared ``fields``."""
    return FUNCTION_COLUMNS + fields


def is_partial_window(columns: Container[str]) -> bool:
    """Whether a window state of these columns keeps partial aggregates (else the windows' rows)."""
    return WINDOW_START in columns
