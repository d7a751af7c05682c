"""Does a class (or an object) have what a ``typing.Protocol`` declares, call for call?

mypy checks the library's own uses of a Protocol, but not the tests' fakes, and a real client class
whose methods are untyped or generated only shows at run time. ``protocol_gaps`` checks, at run
time, that every member the Protocol declares is there, and that every method accepts each call the
Protocol's signature allows: the same positional slots, the same keyword names, a default where the
Protocol has one, and no extra parameter without a default. Return and parameter *types* are left
to mypy; ``*args`` / ``**kwargs`` accept what they would.
"""
from __future__ import annotations

import inspect
from typing import Any, Protocol

_NOT_MEMBERS = frozenset({
    "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__", "__init__",
    "__parameters__", "__orig_bases__", "__protocol_attrs__", "__subclasshook__", "__abstractmethods__",
    "__non_callable_proto_members__", "__class_getitem__", "__init_subclass__", "__slots__", "__static_attributes__",
    "__firstlineno__", "_is_protocol", "_is_runtime_protocol", "_abc_impl",
})


def protocol_members(protocol: type) -> dict[str, Any]:
    """Each member the Protocol declares (its own and its Protocol bases'): name -> the declaration
    (a function, a property, or ``None`` for an annotated attribute)."""
    members: dict[str, Any] = {}
    for base in reversed(protocol.__mro__):
        if base in (object, Protocol) or not getattr(base, "_is_protocol", False):
            continue
        for name in base.__dict__.get("__annotations__", {}):
            members.setdefault(name, None)
        for name, value in base.__dict__.items():
            if name not in _NOT_MEMBERS:
                members[name] = value
    return members


def _method_gaps(name: str, wanted: inspect.Signature, found: inspect.Signature) -> list[str]:
    P = inspect.Parameter
    params = list(found.parameters.values())
    var_positional = any(p.kind is P.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind is P.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in params if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)}
    gaps: list[str] = []
    used: set[str] = set()
    for index, w in enumerate(wanted.parameters.values()):
        if w.kind is P.VAR_POSITIONAL or w.kind is P.VAR_KEYWORD:
            if not (var_positional if w.kind is P.VAR_POSITIONAL else var_keyword):
                gaps.append(f"{name}: takes no {'*args' if w.kind is P.VAR_POSITIONAL else '**kwargs'}")
            continue
        match = None
        if w.kind is not P.KEYWORD_ONLY:  # callers may pass it in its place
            if index < len(positional):
                match = positional[index]
            elif not var_positional:
                gaps.append(f"{name}: no parameter at position {index} for {w.name!r}")
                continue
        if w.kind is not P.POSITIONAL_ONLY:  # callers may name it
            named = by_name.get(w.name)
            if match is not None and match is not named:
                gaps.append(f"{name}: {w.name!r} is {match.name!r} at position {index}")
                continue
            if named is None and not var_keyword:
                gaps.append(f"{name}: no parameter named {w.name!r}")
                continue
            match = named
        if match is not None:
            used.add(match.name)
            if w.default is not P.empty and match.default is P.empty:
                gaps.append(f"{name}: {w.name!r} is optional in the protocol, required here")
    required = [p.name for p in params if p.name not in used and p.default is P.empty
                and p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    if required:
        gaps.append(f"{name}: requires {required}, which the protocol's callers do not pass")
    return gaps


def _signature(function: Any, bound: bool) -> inspect.Signature | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
        return None
    if not bound:  # a function looked up on a class: drop its self
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return signature


def protocol_gaps(candidate: Any, protocol: type) -> list[str]:
    """What ``candidate`` (an object, or a class whose instances would be used) lacks of ``protocol``;
    empty when it has everything. An attribute the Protocol annotates is looked up on the object (on
    a class: among its class attributes, properties and annotations)."""
    is_class = isinstance(candidate, type)
    gaps = []
    for name, declared in protocol_members(protocol).items():
        if declared is None or isinstance(declared, property):
            present = hasattr(candidate, name) or (is_class and any(
                name in getattr(k, "__annotations__", {}) for k in candidate.__mro__))
            if not present:
                gaps.append(f"missing attribute {name!r}")
            continue
        if not hasattr(candidate, name):
            gaps.append(f"missing method {name!r}")
            continue
        found = inspect.getattr_static(candidate, name)
        if isinstance(found, (staticmethod, classmethod)):
            found = getattr(candidate, name)
            bound = True
        else:
            found = getattr(candidate, name)
            bound = not is_class
        if not callable(found):
            gaps.append(f"{name!r} is not callable")
            continue
        wanted, have = _signature(declared, bound=False), _signature(found, bound=bound)
        if wanted is not None and have is not None:
            gaps += _method_gaps(name, wanted, have)
    return gaps
