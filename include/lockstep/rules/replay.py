"""What a checkpoint that replays an aborted one reuses of that one's claim (pure decisions).

A claim pins everything its output depends on besides its ranges and base state: the clock its run may
read, the registry schemas it decodes into and encodes with, and each table's version (its base and the
offsets of its topic read on top). With them it pins a fingerprint of the spec fields those pins came
from (`fingerprint`). A checkpoint that starts where an aborted one started, from the same base state
(`lockstep.rules.pinned.pinned_clock`'s test), replays its ranges:

- the fingerprint is the spec's now: the replay reuses every pin as the aborted claim had it, so any
  attempt over those ranges computes the same output, whenever recovery ran (DESIGN.md, invariant 11);
- the spec changed since (a new sink schema, subject or topic, another registry, a table's topic or
  formats, the watermark's idleness): the replay is a new claim with fresh pins, and one log line names
  the fields that changed (`Replay.notice`). Reusing the old pins would replay the spec that failed.

A claim of an earlier version records no fingerprint: its replay takes its clock (what those versions
did) and fresh schemas and tables, which nothing then says were the aborted attempt's.
"""
from __future__ import annotations

__all__ = [
    "Replay", "fingerprint", "replay_of", "replayed",
]

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockstep.model.checkpoint import CheckpointClaim, CheckpointView, SpecFingerprint
from lockstep.model.transactions import utc_text
from lockstep.spec import FormatSpec, PipelineSpec
from lockstep.tables.pins import TableVersion


def fingerprint(spec: PipelineSpec) -> SpecFingerprint:
    """The spec fields a claim's pins come from, digested (`SpecFingerprint`). Only what a pin's value
    depends on is in it, so an unrelated edit (the transform, the schedule, the record budget) leaves a
    replay its pins:

    - ``source.topics``; for each decoded part of the source and the sink (``source.value``, ``sink.key``...)
      its ``format``, ``schema`` (the declared text), ``subject`` and ``message``: which schema id is pinned;
    - with a registry format on that side, ``source.registry_conn_id`` / ``sink.registry_conn_id``, and on the
      sink ``sink.topic`` and the routes' topics (their subjects are ``<topic>-<part>``);
    - per table, ``tables.<name>.topic``, ``.key``, ``.value`` (format and schema: how its rows are keyed and
      kept) and ``.versions``: what its pinned offsets are of and what version they build;
    - with state, ``state.event_time.idle_timeout_ms`` and ``.idle_advance``: what the pinned clock decides.
    """
    values: dict[str, object] = {"source.topics": list(spec.source.topics)}
    for side, registry_conn in (("source", spec.source.registry_conn_id), ("sink", spec.sink.registry_conn_id)):
        section = spec.source if side == "source" else spec.sink
        parts = {"key": section.key, "value": section.value}
        for part, fmt in parts.items():
            if fmt.decoded:
                values.update({f"{side}.{part}.{name}": v for name, v in _format(fmt).items()})
        if any(f.registry for f in parts.values()):
            values[f"{side}.registry_conn_id"] = registry_conn
            if side == "sink":
                values["sink.topic"] = spec.sink.topic
                values["sink.routes"] = [topic for topic, _ in spec.sink.routes]
    for table in spec.tables:
        values[f"tables.{table.name}.topic"] = table.topic
        values[f"tables.{table.name}.key"] = _format(table.key)
        values[f"tables.{table.name}.value"] = _format(table.value)
        values[f"tables.{table.name}.versions"] = table.versions_ms
    if spec.state is not None:
        values["state.event_time.idle_timeout_ms"] = spec.state.event_time.idle_timeout_ms
        values["state.event_time.idle_advance"] = spec.state.event_time.idle_advance
    return SpecFingerprint.of(values)


def _format(fmt: FormatSpec) -> dict[str, object]:
    return {"format": fmt.format, "schema": fmt.schema, "subject": fmt.subject, "message": fmt.message}


@dataclass(frozen=True)
class Replay:
    """How a new checkpoint stands to the aborted one whose ranges it replays."""

    checkpoint_id: int
    #: the aborted checkpoint it replays
    aborted: CheckpointClaim
    #: the spec fields changed since it was planned (empty: its pins are reused)
    changed: tuple[str, ...] = ()
    #: tables whose version the replay would start from is not the aborted claim's (a restore elsewhere)
    other_base: tuple[str, ...] = ()
    #: the aborted claim records no fingerprint (an earlier version)
    unknown: bool = False

    @property
    def reuses(self) -> bool:
        """Whether the replay takes every pin of the aborted claim (its clock, schema ids and table versions)."""
        return not (self.changed or self.other_base or self.unknown)

    def notice(self, spec: PipelineSpec) -> str:
        """The one log line that says what the replay reuses, and when it does not, why."""
        cid, aborted = self.checkpoint_id, self.aborted.checkpoint_id
        if self.reuses:
            return (f"checkpoint {cid} replays aborted checkpoint {aborted}'s ranges with its pins (its clock "
                    f"{utc_text(self.aborted.clock)}, schema ids and table versions): the spec they came from is "
                    "unchanged, so it joins, decodes and writes as that checkpoint's first attempt did")
        if self.unknown:
            return (f"checkpoint {cid} replays aborted checkpoint {aborted}'s ranges with its clock "
                    f"({utc_text(self.aborted.clock)}) but fresh schema "
                    f"ids and table versions: checkpoint {aborted}'s claim records no fingerprint of the spec they "
                    "came from (an earlier Lockstep version claimed it)")
        why = [f"{name} ({_now(spec, name)})" for name in self.changed]
        why += [f"tables.{name} starts from another version" for name in self.other_base]
        return (f"checkpoint {cid} replays aborted checkpoint {aborted}'s ranges with fresh pins: the spec changed "
                f"since ({'; '.join(why)}); its output follows the spec as it is now")


def _now(spec: PipelineSpec, name: str) -> str:
    """A changed field as the spec has it now, for the log line (a schema by where it came from)."""
    section, _, rest = name.partition(".")
    if section == "tables":
        table_name, _, field = rest.partition(".")
        table = next((t for t in spec.tables if t.name == table_name), None)
        if table is None:
            return "the table is gone"
        value: object = {"topic": table.topic, "versions": table.versions_ms}.get(field, "changed")
        return "changed" if value == "changed" else f"now {value!r}"
    if section in ("source", "sink"):
        part, _, field = rest.partition(".")
        side = spec.source if section == "source" else spec.sink
        if part in ("key", "value") and field:
            fmt: FormatSpec = getattr(side, part)
            if field == "schema":
                return f"now {fmt.schema_from}" if fmt.schema is not None else "now none declared"
            return f"now {getattr(fmt, field)!r}"
        value = getattr(side, part, None)
        if part == "routes":
            value = [topic for topic, _ in spec.sink.routes]
        return f"now {list(value) if isinstance(value, tuple) else value!r}"
    return "changed"


def replay_of(checkpoint_id: int, aborted: CheckpointView | None, now: SpecFingerprint,
              bases: Mapping[str, TableVersion | None]) -> Replay | None:
    """How checkpoint ``checkpoint_id`` replays ``aborted`` (the aborted attempt whose starts and base state it
    has, `lockstep.rules.pinned.pinned_clock`; None: it replays none, and takes fresh pins). ``now``: the spec's
    fingerprint; ``bases``: per table of the spec, the version the checkpoint starts from (a replay reuses a
    table's pin only over the same base)."""
    if aborted is None:
        return None
    claim = aborted.claim
    if claim.fingerprint is None:
        return Replay(checkpoint_id, claim, unknown=True)
    other = tuple(sorted(name for name, pin in claim.tables.items()
                         if name in bases and _base_of(pin.base) != _base_of(bases[name])))
    return Replay(checkpoint_id, claim, claim.fingerprint.changed(now), other)


def _base_of(version: TableVersion | None) -> tuple[object, ...] | None:
    return None if version is None else (version.topic, version.written_by, tuple(version.files),
                                         tuple(sorted(version.ends.items())))


def replayed(earlier: Sequence[CheckpointView], replays: int | None) -> CheckpointView | None:
    """The view of checkpoint ``replays`` among ``earlier`` (None when it is not there)."""
    return next((v for v in earlier if v.checkpoint_id == replays), None) if replays is not None else None
