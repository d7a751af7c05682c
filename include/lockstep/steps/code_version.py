"""Which code computes a pipeline's output: the digest each claim records (``code``), so tools can say which
code wrote which checkpoint and where it changed (`lockstep checkpoints`, the Checkpoints page), and recompute
only what today's code wrote (`lockstep verify`).

The user's code is read here, at the plan, from where the plan imports it: the source file of the module that
defines the transform (and a state function's process and migrate), and of the modules of its own package that
it imports, transitively; not libraries.
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

    The module that defines a function is read with the modules of its own top-level package that it imports,
    transitively; not other packages. A module that cannot be found here is digested by its name alone (its
    claim then says so: ``<module> not found``)."""
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
    """The source text of the module ``module:function`` names and of the modules of its own package that it
    imports, transitively (a helper module beside it is the transform's code too; a library is not), each under
    its name, without importing them (their parent packages are imported to be found); ``<module> not found``
    when the module cannot be found here."""
    name = target.partition(":")[0]
    first = _source(name)
    if first is None:
        return f"{name} not found"
    package = name.split(".")[0]
    roots = _package_roots(package)
    sources, todo = {name: first}, [name]
    while todo:
        current = todo.pop()
        for imported in _own_imports(current, sources[current], package):
            if imported not in sources and len(sources) < _MOST_MODULES:
                found = _file_source(roots, imported)
                if found is not None:
                    sources[imported] = found
                    todo.append(imported)
    if len(sources) == 1:
        return first
    return "\n".join(f"# module {n}\n{text}" for n, text in sorted(sources.items()))


#: How many modules of one package a fingerprint reads at most.
_MOST_MODULES = 50


def _source(module_name: str) -> str | None:
    import importlib.util

    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    if not origin or not origin.endswith(".py"):
        return None
    try:
        return Path(origin).read_text(errors="replace")
    except OSError:
        return None


def _package_roots(package: str) -> list[Path]:
    """The folders a top-level package's modules are found in (none for a single-file module)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    return [Path(p) for p in (getattr(found, "submodule_search_locations", None) or [])]


def _file_source(roots: list[Path], module_name: str) -> str | None:
    """The source of a module of the package by its file, found without importing anything (a name imported
    from a module is not a module, and has no file)."""
    parts = module_name.split(".")[1:]
    for root in roots:
        for candidate in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
            if parts and candidate.is_file():
                try:
                    return candidate.read_text(errors="replace")
                except OSError:
                    return None
    return None


def _own_imports(module_name: str, source: str, package: str) -> list[str]:
    """The modules of ``package`` that a module's source imports (``import``, ``from ... import``, relative ones
    resolved; a name imported from a package may be a module of it), sorted."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    parent = module_name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = parent.split(".") if parent else []
                anchor = anchor[:len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, *([base] if base else [])])
            if base:
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
    return sorted(n for n in found if n.split(".")[0] == package and n != module_name)


def code_changes(before: SpecFingerprint | None, after: SpecFingerprint | None) -> tuple[str, ...]:
    """The parts of the code that differ between two claims' fingerprints (empty: the same, or one of them is a
    claim of an earlier version, which recorded none)."""
    if before is None or after is None:
        return ()
    return before.changed(after)
