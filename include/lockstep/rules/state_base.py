"""What state a stateful checkpoint may start from (pure): the plan checks before it claims, the run
again before it reads. State in a format newer than this Lockstep's is refused; state of one operator
is never read by another; the number of key groups is fixed unless a re-key is recorded; what the stored
rows mean (a window's key, size and slide, a dedup's or a function's key: the state's `state_shape`, which
records a window's aggregates too) is fixed, since rows kept under one shape read under another give wrong
output without an error; a state function's declared schema must fit the stored state's unless a migration is named.
"""
from __future__ import annotations

__all__ = [
    "base_refusal", "format_refusal", "key_group_refusal", "operator_refusal", "schema_change", "shape_refusal",
    "state_shape",
]

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lockstep.model.state_manifest import STATE_FORMAT_VERSION, StateManifest
from lockstep.model.state_rows import function_state_columns

if TYPE_CHECKING:
    from lockstep.spec import PipelineSpec, StateSpec


def base_refusal(spec: PipelineSpec, base: StateManifest | None, rekey_to: int | None) -> str | None:
    """Why the checkpoint may not start from ``base`` (the plan checks before it claims, the run again).

    A state function declares its state's schema, so a change that old state cannot be read as is
    refused here, naming the field, unless the spec names a migration."""
    assert spec.state is not None
    refused = format_refusal(base) or operator_refusal(base, spec.state.operator) \
        or key_group_refusal(base, spec.state.key_groups, rekey_to) or shape_refusal(base, spec.state)
    f = spec.state.function
    if refused or f is None or base is None:
        return refused
    problems = schema_change(base.columns, dict(function_state_columns(f.fields)))
    if f.version < base.schema_version:
        problems.append(f"state.function.version is {f.version}, older than the state's version {base.schema_version}")
    if problems and f.migrate is None:
        return (f"the state of checkpoint {base.written_by} (version {base.schema_version}) does not fit "
                f"state.function.state: {'; '.join(problems)}. Keep the field (a new nullable field is fine), or "
                "name a migration in state.function.migrate (module:function taking the old state and its version)")
    return None


def schema_change(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """Why state with columns ``old`` cannot be read as ``new`` (empty when it can): a new column is
    accepted (old rows read it as null); a removed column or a changed type is not."""
    problems = [f"field {name!r} ({kind}) is gone from the state's new schema" for name, kind in old.items()
                if name not in new]
    problems += [f"field {name!r} changed type from {kind} to {new[name]}" for name, kind in old.items()
                 if name in new and new[name] != kind]
    return problems


def key_group_refusal(base: StateManifest | None, key_groups: int, rekey_to: int | None) -> str | None:
    """Why a checkpoint may not start from ``base`` with ``key_groups`` key groups, or None.

    The number of key groups is fixed when the pipeline first writes state: changing it moves every
    key to another group. Only an explicit ``lockstep state rekey`` (``rekey_to``) allows it."""
    if base is None or base.key_groups == key_groups:
        return None
    if rekey_to == key_groups:
        return None
    return (f"state.key_groups is {key_groups}, but the pipeline's state (checkpoint {base.written_by}) has "
            f"{base.key_groups} key groups. Set state.key_groups back to {base.key_groups}, or re-key the state "
            f"explicitly with `lockstep state rekey --spec <the pipeline's spec> --key-groups {key_groups}`")


def state_shape(state: StateSpec) -> dict[str, object]:
    """What the operator's stored rows mean, from its spec: what a spec that reads them must say alike."""
    if state.window is not None:
        w = state.window
        shape: dict[str, object] = {"key": w.key, "size_ms": w.size_ms, "slide_ms": w.slide_ms,
                                    "aggregates": [[name, expr] for name, expr in w.aggregates]}
        if w.earlier:  # the sizes its windows had, and until when (`lockstep.rules.window_drain`)
            shape["earlier"] = [list(e) for e in w.earlier]
        return shape
    if state.interval_join is not None:
        j = state.interval_join
        return {"key": j.key, "left": j.left, "right": j.right}
    return {"key": state.key}


#: How each part of a shape is named in the spec.
_SHAPE_FIELDS = {"key": "key", "size_ms": "size", "slide_ms": "slide", "aggregates": "aggregates", "left": "left",
                 "right": "right"}


_JUDGED_ELSEWHERE = frozenset(("aggregates", "size_ms", "slide_ms", "earlier"))


def shape_refusal(base: StateManifest | None, state: StateSpec) -> str | None:
    """Why state written under one shape may not be read under the spec's (None: the same, or a manifest of an
    earlier version, which recorded none)."""
    from lockstep.rules.window_drain import drained

    if base is None or not base.shape:
        return None
    continued = drained(state, base)
    if isinstance(continued, str):
        return continued
    now = state_shape(continued)
    # A window's aggregates are recorded, not judged here: a state of the windows' rows fires them with the new
    # aggregates (the windows fired before keep theirs, and verify recomputes each with its checkpoint's), and a
    # state of partial aggregates refuses other aggregates itself (`lockstep.spark.windows.window_state_refusal`).
    # Its size was judged above: its open windows drain at their size (`lockstep.rules.window_drain`).
    differ = [name for name in sorted(set(base.shape) | set(now))
              if name not in _JUDGED_ELSEWHERE and base.shape.get(name) != now.get(name)]
    if not differ:
        return None
    section = f"state.{state.operator}"
    what = "; ".join(f"{section}.{_SHAPE_FIELDS.get(n, n)} was {_shown(n, base.shape.get(n))}, is now "
                     f"{_shown(n, now.get(n))}" for n in differ)
    return (f"the pipeline's state (checkpoint {base.written_by}) was kept under another {state.operator}: {what}. "
            "Its rows read under the new spec would give wrong output without an error. Set the spec back, or run the "
            "new version as a new pipeline (another name and sink) started with `restore_from: time:<ISO>` where it "
            "should take over (`lockstep validate <new spec> --against <running spec>` lists such changes)")


def _shown(name: str, value: object) -> str:
    if isinstance(value, list):
        return ", ".join(f"{n}: {e}" for n, e in value) or "none"
    if value is None:
        return "unset"
    return f"{value} ms" if name.endswith("_ms") else str(value)


def format_refusal(base: StateManifest | None) -> str | None:
    """State in a format newer than this Lockstep's is never read as an older one (a pack of several groups'
    deltas taken as one group's would be wrong state, not an error)."""
    if base is None or base.format_version <= STATE_FORMAT_VERSION:
        return None
    return (f"the pipeline's state (checkpoint {base.written_by}) is in format {base.format_version}, written by a "
            f"newer Lockstep; this one reads formats up to {STATE_FORMAT_VERSION}. Upgrade Lockstep to the release "
            "that wrote it, or a newer one")


def operator_refusal(base: StateManifest | None, operator: str) -> str | None:
    """State of one operator (window, dedup) is never read by another."""
    if base is None or base.operator == operator:
        return None
    return (f"the pipeline's state (checkpoint {base.written_by}) belongs to a {base.operator} operator, and the "
            f"spec now declares {operator}. A changed operator starts without state: give the pipeline a new name")
