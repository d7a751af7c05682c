"""Which code computes a pipeline's output: the digest each claim records (``code``), so tools can say which
code wrote which checkpoint and where it changed (`lockstep checkpoints`, the Checkpoints page), and recompute
only what today's code wrote (`lockstep verify`).

The user's code is read here, at the plan, from where the plan imports it: the source file of the module that
defines the transform (and a state function's process and migrate), not the modules it imports.
"""
from __future__ import annotations

__all__ = [
    "code_changes", "code_fingerprint",
]

from pathlib import Path

from lockstep.model.checkpoint import SpecFingerprint
from lockstep.rules.state_base import state_shape
from lockstep.spec import PipelineSpec


def code_fingerprint(spec: PipelineSpec) -> SpecFingerprint:
    """What computes a checkpoint's output, digested by part (`SpecFingerprint`): which code wrote which checkpoint.

    - ``transform``: the SQL query's text, or the Python function's name and its module's source file;
    - ``sink.routes``: the routes' topics and conditions, in order;
    - ``state``: the operator's shape (`lockstep.rules.state_base.state_shape`), its event time, window lateness,
      dedup TTL, and a state function's process and migrate (names and their modules' sources); not how the
      state is stored (key groups, rows or partial aggregates, compaction);
    - ``tables.<name>.join``: each declared join.

    Only the module that defines a function is read, not the modules it imports. A module that cannot be
    found here is digested by its name alone (its claim then says so: ``<module> not found``)."""
    values: dict[str, object] = {
        "transform": {"sql": spec.transform_sql} if spec.is_sql else {"function": spec.transform,
                                                                   "source": _module_source(spec.transform)},
        "sink.routes": [list(route) for route in spec.sink.routes],
    }
    state = spec.state
    if state is not None:
        e, w, d, f = state.event_time, state.window, state.dedup, state.function
        values["state"] = {
            "operator": state.operator, "shape": state_shape(state),
            "event_time": [e.column, e.out_of_orderness_ms, e.idle_timeout_ms, e.idle_advance],
            "window": None if w is None else [w.allowed_lateness_ms],
            "dedup": None if d is None else [d.ttl_ms, d.duplicates],
            "function": None if f is None else {
                "process": f.process, "process_source": _module_source(f.process), "migrate": f.migrate,
                "migrate_source": _module_source(f.migrate) if f.migrate else None, "version": f.version,
                "fields": [list(x) for x in f.fields], "ttl_ms": f.ttl_ms, "options": dict(f.options)},
        }
    for table in spec.tables:
        if table.join is not None:
            j = table.join
            values[f"tables.{table.name}.join"] = [j.by, j.how, j.missing, j.as_of]
    return SpecFingerprint.of(values)


def _module_source(target: str) -> str:
    """The source text of the module ``module:function`` names, without importing it (its parent packages are
    imported to be found); ``<module> not found`` when it cannot be found here."""
    import importlib.util

    module_name = target.partition(":")[0]
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        found = None
    origin = getattr(found, "origin", None)
    if not origin or not origin.endswith(".py"):
        return f"{module_name} not found"
    try:
        return Path(origin).read_text(errors="replace")
    except OSError:
        return f"{module_name} not found"


def code_changes(before: SpecFingerprint | None, after: SpecFingerprint | None) -> tuple[str, ...]:
    """The parts of the code that differ between two claims' fingerprints (empty: the same, or one of them is a
    claim of an earlier version, which recorded none)."""
    if before is None or after is None:
        return ()
    return before.changed(after)
