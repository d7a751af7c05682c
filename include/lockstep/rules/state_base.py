"""What state a stateful checkpoint may start from (pure): the plan checks before it claims, the run
again before it reads. State in a format newer than this Lockstep's is refused; state of one operator
is never read by another; the number of key groups is fixed unless a re-key is recorded; a state
function's declared schema must fit the stored state's unless a migration is named.
"""
from __future__ import annotations

__all__ = [
    "base_refusal", "format_refusal", "key_group_refusal", "operator_refusal", "schema_change",
]

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lockstep.model.state_manifest import STATE_FORMAT_VERSION, StateManifest
from lockstep.model.state_rows import function_state_columns

if TYPE_CHECKING:
    from lockstep.spec import PipelineSpec


def base_refusal(spec: PipelineSpec, base: StateManifest | None, rekey_to: int | None) -> str | None:
    """Why the checkpoint may not start from ``base`` (the plan checks before it claims, the run again).

    A state function declares its state's schema, so a change that old state cannot be read as is
    refused here, naming the field, unless the spec names a migration."""
    assert spec.state is not None
    refused = format_refusal(base) or operator_refusal(base, spec.state.operator) \
        or key_group_refusal(base, spec.state.key_groups, rekey_to)
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
