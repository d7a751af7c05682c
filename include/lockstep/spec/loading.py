"""Reading spec files: one document (`parse_spec`), one file (`load_spec`), a directory (`load_specs`,
`load_each`), one pipeline's of a directory (`load_for_dag`), and the collisions between specs (`cross_check`).

A spec decides where data goes and which transactional ids Lockstep may fence, so every problem of a document
is reported together, and two specs that could fence each other's transactions are refused together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lockstep.errors import SpecError, SpecProblem
from lockstep.spec.checker import MISSING, Checker, allowed_keys, declared_default, describe
from lockstep.spec.checkpoints import read_alerts, read_checkpoints, read_producer, read_spark, read_transactions
from lockstep.spec.pipeline_spec import PipelineSpec, dag_id_of
from lockstep.spec.shape import DEFAULT_OWNER, NAME_PATTERN, TAG_PATTERN
from lockstep.spec.sources import read_sink, read_source, read_transform
from lockstep.spec.state import read_state
from lockstep.spec.tables import read_tables

__all__ = [
    "cross_check", "load_each", "load_for_dag", "load_spec", "load_specs", "NAME_RE", "parse_spec", "spec_files",
    "TAG_RE",
]


NAME_RE = re.compile(NAME_PATTERN)
TAG_RE = re.compile(TAG_PATTERN)


def parse_spec(doc: object, file: str) -> PipelineSpec:
    """Validate one parsed YAML document; raises SpecError listing every problem found."""
    c = Checker(file)
    d = c.section(doc, "", allowed_keys(""), optional=False)
    name = c.text(d, "", "name", pattern=NAME_RE, rule=f"allowed is {NAME_PATTERN}")
    description = d.get("description") or ""
    if not isinstance(description, str):
        c.fail("description", f"must be a string, got {describe(description)}")
    folder = Path(file).parent if file and not file.startswith("<") else None
    source = read_source(c, d.get("source", MISSING), name or "", folder)
    transform, sql, sql_from = read_transform(c, d.get("transform", MISSING), d, folder)
    spec = PipelineSpec(
        name=name,
        description=description if isinstance(description, str) else "",
        source=source,
        transform=transform or "",
        sink=read_sink(c, d.get("sink", MISSING), source, folder),
        checkpoints=read_checkpoints(c, d.get("checkpoints", MISSING)),
        transactions=read_transactions(c, d.get("transactions"), name or ""),
        spark=read_spark(c, d.get("spark")),
        producer=read_producer(c, d.get("producer")),
        path=file,
        state=read_state(c, d.get("state")),
        owner=c.text(d, "", "owner", declared_default("", "owner")) or DEFAULT_OWNER,
        tags=_tags(c, d.get("tags")),
        alerts=read_alerts(c, d.get("alerts")),
        transform_sql=sql,
        transform_sql_from=sql_from,
        tables=read_tables(c, d.get("tables"), source, folder),
    )
    _check_across_sections(c, spec)
    if c.problems:
        raise SpecError(c.problems)
    return spec


def _check_across_sections(c: Checker, spec: PipelineSpec) -> None:
    """The checks no section can make alone (each section's reader has seen only its own): a table must not read
    what the pipeline writes, an interval join's sides are the source's topics, and state takes neither tables
    nor routes yet."""
    for table in spec.tables:
        if table.topic in (spec.sink.topic, spec.sink.dead_letter_topic, *(t for t, _ in spec.sink.routes)):
            c.fail(f"tables.{table.name}.topic", f"{table.topic!r} is written by this pipeline; a pipeline must "
                                                 "not feed itself")
    _check_interval_join(c, spec)
    if spec.tables and spec.state is not None:
        c.fail("tables", "are not supported with state yet; join in a stateless pipeline whose sink topic the "
                         "stateful one reads")
    if spec.state is not None and spec.sink.table_only:
        c.fail("sink.topic", "is required with state yet: a stateful pipeline's output is verified and repaired from its "
                             "sink topic; keep sink.topic beside sink.iceberg (docs/iceberg.md)")
    if spec.state is not None and spec.sink.routes:
        c.fail("sink.routes", "are not supported with state yet (a window's and a state function's records are "
                              "made after the transform); route in a second, stateless pipeline that reads this one's "
                              "sink topic")


def _check_interval_join(c: Checker, spec: PipelineSpec) -> None:
    """An interval join's two sides are two of ``source.topics``, and every source topic is one of them."""
    j = spec.state.interval_join if spec.state is not None else None
    if j is None or not j.left or not j.right:
        return
    if j.left == j.right:
        c.fail("state.interval_join.right", "must be another topic than left")
    for side, topic in (("left", j.left), ("right", j.right)):
        if topic not in spec.source.topics:
            c.fail(f"state.interval_join.{side}", f"{topic!r} is not one of source.topics")
    others = [t for t in spec.source.topics if t not in (j.left, j.right)]
    if others:
        c.fail("source.topics", f"{', '.join(others)}: neither side of state.interval_join; its records would meet "
                                "nothing")


def _tags(c: Checker, value: object) -> tuple[str, ...]:
    """``tags``: distinct tags, in the spec's order, added to the DAG's own."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) and TAG_RE.fullmatch(t) for t in value):
        c.fail("tags", f"must be a list of tags (text of 1 to 100 characters, no commas), got {describe(value)}")
        return ()
    return tuple(dict.fromkeys(value))


def load_spec(path: str | Path) -> PipelineSpec:
    """Read and validate one spec file."""
    file = str(path)
    try:
        doc = _read_yaml(Path(path))
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError([SpecProblem(file, "<document>", f"cannot be read as YAML: {exc}")]) from exc
    return parse_spec(doc, file)


#: libyaml's safe loader where PyYAML was built with it (the wheels are): the same documents as the pure-Python
#: one, parsed about 5x faster; every spec read goes through it, so a file's head and its full read agree.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(path: Path) -> object:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)  # a safe loader (above)


def spec_files(directory: str | Path) -> list[Path]:
    """The spec files of a directory: its *.yaml and *.yml, by name."""
    return sorted(p for p in Path(directory).iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_specs(directory: str | Path) -> list[PipelineSpec]:
    """Load every *.yaml/*.yml in a directory and check the specs do not collide with each other; any
    problem in any spec raises (a command that acts on them all). `load_each` keeps the good ones."""
    specs, problems = load_each(directory)
    if problems:
        raise SpecError(problems)
    return specs


def load_each(directory: str | Path) -> tuple[list[PipelineSpec], list[SpecProblem]]:
    """The specs of a directory that validate and collide with no other, and the problems of the rest:
    one bad spec leaves every other pipeline its DAG, its page and its savepoints.

    Two specs that collide (`cross_check`) are both left out: either could fence the other's
    transactions, and which of them already runs is not known here."""
    return _load_files(spec_files(directory))


def _load_files(files: list[Path]) -> tuple[list[PipelineSpec], list[SpecProblem]]:
    specs: list[PipelineSpec] = []
    problems: list[SpecProblem] = []
    for file in files:
        try:
            specs.append(load_spec(file))
        except SpecError as exc:
            problems.extend(exc.problems)
    clashes = _clashes(specs)
    clashed = {path for a, b, _ in clashes for path in (a.path, b.path)}
    return [s for s in specs if s.path not in clashed], problems + [problem for _, _, problem in clashes]


def load_for_dag(directory: str | Path, dag_id: str) -> tuple[list[PipelineSpec], list[SpecProblem]]:
    """What `load_each` keeps of a directory's specs whose DAG id is ``dag_id`` (one, or none), and the problems of
    the files read: only the files that could be that pipeline's or collide with it are read in full.

    An Airflow task's process parses its DAG's file for its one DAG, and each other spec validated costs it a few
    milliseconds (each other DAG built, ~15 ms more): with hundreds of pipelines, seconds per task. Whether two
    specs collide depends only on their names and transactional id prefixes (`cross_check`), which the head of a
    file gives (`_Head`); a file whose head cannot be read that way is read in full, as `load_each` reads it."""
    heads = {file: _Head.of(file) for file in spec_files(directory)}
    own = [h for h in heads.values() if h is not None and dag_id_of(h.name) == dag_id]
    # A file without a head is no valid spec (no mapping, no text name, a transactions section that is none):
    # read in full all the same, so that its problems are the ones load_each reports.
    read = [f for f, h in heads.items() if h is None or any(h.may_collide(o) for o in own)]
    specs, problems = _load_files(read)
    return [s for s in specs if s.dag_id == dag_id], problems


@dataclass(frozen=True)
class _Head:
    """What a spec file says of the two fields collisions depend on, as `parse_spec` would read them when valid:
    its ``name``, and its ``transactions.id_prefix`` (the name when not given)."""

    name: str
    prefix: str

    @classmethod
    def of(cls, file: Path) -> _Head | None:
        """The file's head, or None when the file is not a mapping with a text name and, if any, a text prefix."""
        try:
            doc = _read_yaml(file)
        except (OSError, yaml.YAMLError):
            return None
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
            return None
        transactions = doc.get("transactions")
        prefix = transactions.get("id_prefix") if isinstance(transactions, dict) else None
        if transactions is not None and not isinstance(transactions, dict) or not isinstance(prefix, str | None):
            return None
        return cls(doc["name"], prefix or doc["name"])

    def may_collide(self, other: _Head) -> bool:
        """Whether the two specs, when both valid, could collide as `_clashes` finds (the same head included)."""
        return (self.name == other.name or dag_id_of(self.name) == dag_id_of(other.name)
                or _prefixes_clash(self.prefix, other.prefix))


def cross_check(specs: list[PipelineSpec]) -> list[SpecProblem]:
    """Problems between specs: shared names, DAG ids or transactional id prefixes.

    Transactional ids are `<prefix>-<checkpoint>-<task>` and recovery fences every id under a
    prefix, so `orders` and `orders-enrich` as prefixes would let one pipeline abort the other's
    transactions.
    """
    return [problem for _, _, problem in _clashes(specs)]


def _clashes(specs: list[PipelineSpec]) -> list[tuple[PipelineSpec, PipelineSpec, SpecProblem]]:
    """Each pair of specs that collide, with the problem (named on the later one)."""
    problems: list[tuple[PipelineSpec, PipelineSpec, SpecProblem]] = []
    for i, a in enumerate(specs):
        for b in specs[i + 1:]:
            if a.name == b.name:
                problems.append((a, b, SpecProblem(b.path, "name", f"{b.name!r} is also used by {a.path}")))
            elif a.dag_id == b.dag_id:
                problems.append((a, b, SpecProblem(b.path, "name", f"DAG id {b.dag_id} is also the DAG id of {a.path}")))
            pa, pb = a.transactions.id_prefix, b.transactions.id_prefix
            if pa == pb:
                problems.append((a, b, SpecProblem(b.path, "transactions.id_prefix", f"{pb!r} is also used by {a.path}")))
            elif _prefixes_clash(pa, pb):
                short, long_ = sorted((pa, pb), key=len)
                problems.append((a, b, SpecProblem(
                    b.path, "transactions.id_prefix",
                    f"{pb!r} and {pa!r} ({a.path}) overlap: ids under {long_!r} also start with {short + '-'!r}, "
                    "so fencing one pipeline would abort the other's transactions",
                )))
    return problems


def _prefixes_clash(pa: str, pb: str) -> bool:
    """Whether recovery under either transactional id prefix would fence ids of the other."""
    return pa == pb or pb.startswith(pa + "-") or pa.startswith(pb + "-")
