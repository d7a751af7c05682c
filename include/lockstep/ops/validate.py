"""``lockstep validate``: a folder of specs checked before it is merged, in CI or a pre-commit hook.

Every spec is checked on its own, so one bad spec hides nothing of the others' results, then the specs
against each other (`lockstep.spec.cross_check`: names, DAG ids, transactional id prefixes).

- **Offline** (no service): the spec's own parse (`lockstep.spec.load_spec`: its schema, cron by
  croniter, durations by one grammar), and the Python it names imported as the run imports it, each
  callable taking the arguments Lockstep calls it with: the transform one DataFrame, a state function's
  ``process`` (key, records, state, ctx), its ``migrate`` (state, version). An SQL pipeline's query is read
  (``sql_file``) and refused when empty; nothing is imported for it.
- **With ``connect``**: the services, through the spec's connections as the steps reach them: the
  connections are defined; the source topics, the sink topic and the dead-letter topic exist (their
  partition counts go in the report); the registry holds the subjects of registry-framed source parts,
  and a registry-framed sink part's schema is one the plan would write with (`writings`, as a dry run);
  the checkpoint store answers, and a stateful pipeline's stored state fits the spec, by the rule the
  plan refuses a checkpoint with (`lockstep.rules.state_base.base_refusal`: the operator, the key
  groups unless re-keyed, a state function's schema); an SQL pipeline's query is analyzed by Spark over an
  empty input of the source's columns when the ``spark_connect_default`` connection names a Spark Connect
  server (its line and position on ``transform.sql``), each spec's in a session of its own (one spec's views
  are never another's), and said to be not analyzed when it names none.

A problem is the spec's (``file: field: reason``, as `SpecError` prints it); an error is the check's own
(a path that does not exist, a service that does not answer). Exit codes follow ``lockstep verify``'s:
0 every spec valid, 1 some spec has problems, 2 none found but the check could not run in full.
"""
from __future__ import annotations

__all__ = [
    "validate",
]

import importlib
import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from lockstep.errors import SpecError, SpecProblem, TerminalError
from lockstep.spark.target import SPARK_CONNECT_CONN_ID  # whose Connect server analyzes SQL queries
from lockstep.spec import PipelineSpec, cross_check, load_spec
from lockstep.spec import spec_files as folder_specs

if TYPE_CHECKING:
    from lockstep.kafka.topics import ListedTopic

log = logging.getLogger(__name__)

#: What Lockstep passes to each callable a spec names (`lockstep.spark.job`, `lockstep.spark.state_worker`).
TRANSFORM_ARGS: tuple[str, ...] = ("df",)
PROCESS_ARGS: tuple[str, ...] = ("key", "records", "state", "ctx")
MIGRATE_ARGS: tuple[str, ...] = ("state", "version")
#: How long a service may take to answer one look under ``connect``: a CI job waits for a dead one this long.
CONNECT_TIMEOUT_S = 10.0


# ---- the report (pure) -----------------------------------------------------------------------------
@dataclass
class SpecReport:
    """One spec file's result: its problems, and under ``connect`` what was found for it."""

    path: str
    #: the spec's name (as the file declares it when the spec does not parse), None without one
    name: str | None = None
    problems: list[SpecProblem] = field(default_factory=list)
    #: under ``connect``: each topic the spec names, with its field and its partition count (None: missing)
    topics: list[dict[str, object]] = field(default_factory=list)
    #: under ``connect``: each registry subject of a registry-framed source part, with its version count
    subjects: dict[str, int] = field(default_factory=dict)
    #: under ``connect``, a stateful spec: the stored state's checkpoint, operator and key groups (None: none yet)
    state: dict[str, object] | None = None
    #: what was not checked, and why (an SQL query without a Spark Connect endpoint): not problems
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, field_path: str, reason: str) -> None:
        self.problems.append(SpecProblem(self.path, field_path, reason))

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"path": self.path, "name": self.name, "ok": self.ok,
                                  "problems": [{"field": p.field, "reason": p.reason} for p in self.problems]}
        if self.topics:
            doc["topics"] = self.topics
        if self.subjects:
            doc["subjects"] = self.subjects
        if self.state is not None:
            doc["state"] = self.state
        if self.notes:
            doc["notes"] = self.notes
        return doc


@dataclass
class ValidateReport:
    specs: list[SpecReport]
    #: what kept the check from running in full (a path, a service), one line each
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and all(s.ok for s in self.specs)

    def exit_code(self) -> int:
        """0: every spec valid and every check ran; 1: some spec has problems; 2: none found, but not
        everything could be checked (as ``lockstep verify``: what is known wrong outranks what is unknown)."""
        if not all(s.ok for s in self.specs):
            return 1
        return 2 if self.errors else 0

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "specs": [s.to_json() for s in self.specs], "errors": list(self.errors)}

    def lines(self) -> list[str]:
        """The text form: each problem as ``file: field: reason``, a line per valid spec, a summary."""
        out: list[str] = []
        for s in self.specs:
            out += [str(p) for p in s.problems] if s.problems else [f"{s.path}: ok ({s.name})"]
            out += [f"{s.path}: note: {n}" for n in s.notes]
        bad = sum(not s.ok for s in self.specs)
        out.append(f"{len(self.specs)} spec{'s' if len(self.specs) != 1 else ''} checked: {len(self.specs) - bad} "
                   f"valid, {bad} with problems" + (f"; {len(self.errors)} check{'s' if len(self.errors) != 1 else ''} "
                                                    "could not run" if self.errors else ""))
        return out


def signature_problem(function: Callable[..., Any], args: Sequence[str]) -> str | None:
    """Why ``function`` cannot be called with ``args`` as positional arguments, or None (also None when
    Python cannot tell: a builtin without a signature)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*args)
    except TypeError as exc:
        wanted = f"{len(args)} positional argument{'s' if len(args) != 1 else ''} ({', '.join(args)})"
        return f"must take {wanted}; its signature is {signature} ({exc})"
    return None


# ---- the files -------------------------------------------------------------------------------------
def spec_files(paths: Iterable[str | Path]) -> tuple[list[Path], list[str]]:
    """The spec files named: a file as is, a folder's *.yaml / *.yml (as Airflow's DAG file loads them,
    `lockstep.spec.spec_files`); and an error for each path that names none."""
    files: dict[Path, Path] = {}
    errors: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = folder_specs(path)
            if not found:
                errors.append(f"{path}: no spec files (*.yaml, *.yml) in this folder")
            for p in found:
                files.setdefault(p.resolve(), p)
        elif path.is_file():
            files.setdefault(path.resolve(), path)
        else:
            errors.append(f"{path}: no such file or folder")
    return list(files.values()), errors


# ---- offline checks --------------------------------------------------------------------------------
def check_offline(file: Path) -> tuple[SpecReport, PipelineSpec | None]:
    """The spec's parse, then the Python it names; the spec (None when it does not parse) for what follows."""
    report = SpecReport(str(file))
    try:
        spec = load_spec(file)
    except SpecError as exc:
        report.problems.extend(exc.problems)
        report.name = _declared_name(file)
        return report, None
    report.name = spec.name
    for field_path, target, args in callables(spec):
        reason = callable_problem(target, args)
        if reason is not None:
            report.problem(field_path, reason)
    return report, spec


def callables(spec: PipelineSpec) -> list[tuple[str, str, tuple[str, ...]]]:
    """The ``module:function`` targets a spec names, with their field and the arguments they are called with."""
    found = [] if spec.is_sql else [("transform", spec.transform, TRANSFORM_ARGS)]  # SQL: analyzed under connect
    f = spec.state.function if spec.state is not None else None
    if f is not None:
        found.append(("state.function.process", f.process, PROCESS_ARGS))
        if f.migrate:
            found.append(("state.function.migrate", f.migrate, MIGRATE_ARGS))
    return found


def callable_problem(target: str, args: Sequence[str]) -> str | None:
    """Why ``module:function`` cannot be imported and called with ``args``, or None. Imported as the run's
    driver imports it: from this process's Python path (run with the Airflow workers' PYTHONPATH)."""
    module_name, _, function_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - an ImportError, or whatever the module raises as it is imported
        return f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
    function = getattr(module, function_name, None)
    if function is None:
        return f"module {module_name!r} has no attribute {function_name!r}"
    if not callable(function):
        return f"{module_name}.{function_name} is a {type(function).__name__}, not a function"
    reason = signature_problem(function, args)
    return f"{target} {reason}" if reason else None


def _declared_name(file: Path) -> str | None:
    try:
        doc = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    name = doc.get("name") if isinstance(doc, dict) else None
    return name if isinstance(name, str) else None


# ---- connect checks --------------------------------------------------------------------------------
class Services:
    """The services under ``connect``, each reached once per connection for all the specs checked: a
    folder of fifty specs on one cluster lists its topics once, and a dead one is waited for once."""

    def __init__(self, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._listings: dict[str, dict[str, ListedTopic] | Exception] = {}
        #: the session `spark` made last (stopped when the next is made, or by `close`)
        self._session: Any = None
        #: what making the first session raised: a server that cannot be reached is waited for once
        self._failed: Exception | None = None
        self._looked = False
        #: the Spark Connect endpoint `spark` found (None: none, or not looked for yet)
        self.spark_url: str | None = None

    def spark(self) -> Any:
        """A clean Spark Connect session on the ``spark_connect_default`` connection's endpoint, a new one for
        each call (each SQL pipeline's query): the views (a table's, ``input``) and functions one spec's check
        registers are its session's, so another spec's query never finds them; the previous session is stopped.
        None when that connection is not defined. Raises what making the first session raised, each time."""
        if self._failed is not None:
            raise self._failed
        if not self._looked:
            from lockstep.connections import get_connection
            from lockstep.spark.target import connect_url

            self._looked = True
            try:
                conn = get_connection(SPARK_CONNECT_CONN_ID)
            except TerminalError:
                conn = None
            host = getattr(conn, "host", None)
            self.spark_url = connect_url(host, getattr(conn, "port", None)) if host else None
        if self.spark_url is None:
            return None
        from lockstep.spark.connect import new_session

        self.close()
        try:
            self._session = new_session(self.spark_url)  # `create`, never `getOrCreate`: a session of its own
        except Exception as exc:  # kept, and raised again for every spec that asks
            self._failed = exc
            raise
        return self._session

    def close(self) -> None:
        """Stop the last session `spark` made, if any (the server forgets its views)."""
        session, self._session = self._session, None
        if session is not None:
            session.stop()

    def topics(self, conn_id: str) -> dict[str, ListedTopic]:
        """Every topic of the connection's cluster (`lockstep.kafka.topics.topic_listing`: a listing, as a
        metadata request naming a topic could create it); raises what reaching it raised."""
        if conn_id not in self._listings:
            from lockstep.kafka.topics import topic_listing
            from lockstep.steps.client_factory import kafka_admin

            try:
                self._listings[conn_id] = topic_listing(kafka_admin(conn_id, self.timeout_s), self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - kept, and raised again for every spec that asks
                self._listings[conn_id] = exc
        found = self._listings[conn_id]
        if isinstance(found, Exception):
            raise found
        return found


def check_connect(spec: PipelineSpec, report: SpecReport, services: Services) -> list[str]:
    """The spec's services, found as its steps find them; its problems go in ``report``, and what could
    not be reached is returned."""
    errors: list[str] = []
    usable = _connections(spec, report)
    if spec.source.kafka_conn_id in usable:
        wanted = [(f"source.topics[{i}]", t) for i, t in enumerate(spec.source.topics)]
        wanted += [(f"tables.{t.name}.topic", t.topic) for t in spec.tables]
        errors += _topics(spec, report, services, "source", spec.source.kafka_conn_id, wanted)
    if spec.sink.kafka_conn_id in usable:
        wanted = [*((("sink.topic", spec.sink.topic),) if spec.sink.topic is not None else ()),
                  ("sink.dead_letter_topic", spec.sink.dead_letter_topic),
                  *((f"sink.routes.{t}", t) for t, _ in spec.sink.routes)]
        errors += _topics(spec, report, services, "sink", spec.sink.kafka_conn_id, wanted)
    if spec.source.registry_conn_id in usable:
        errors += _subjects(spec, report)
    if spec.sink.registry_conn_id in usable:
        errors += _sink_schemas(spec, report)
    if spec.checkpoints.aws_conn_id in usable:
        errors += _store(spec, report, services.timeout_s)
    if spec.is_sql and (spec.source.registry_conn_id in usable or not _registry_parts(spec)):
        errors += _sql(spec, report, services)
    return errors


def _registry_parts(spec: PipelineSpec) -> bool:
    """Whether the source's records are decoded with a registry's schemas (the query reads them as ``data``)."""
    return spec.source.key.registry or spec.source.value.registry


def _sql(spec: PipelineSpec, report: SpecReport, services: Services) -> list[str]:
    """An SQL pipeline's query analyzed by Spark over an empty input of the reader's columns, decoded as the
    run decodes them: a syntax error or an unknown column is a problem on ``transform.sql`` with Spark's line
    and position. Needs a Spark Connect endpoint (`Services.spark`); without one the query is not analyzed,
    which is said, and is no error. The problem is on ``transform.sql`` or ``transform.sql_file``, as the spec
    gives the query."""
    from lockstep.sql.analyzer import analyze

    try:
        spark = services.spark()
        if spark is None:
            report.notes.append("transform.sql: not analyzed (no Spark Connect endpoint: define the "
                                "spark_connect_default connection to analyze SQL against the source's columns)")
            return []
        refused = analyze(spark, spec)
    except TerminalError as exc:  # the source's schemas could not be had (the registry's check names why)
        report.notes.append(f"transform.sql: not analyzed: {str(exc).splitlines()[0]}")
        return []
    except Exception as exc:  # noqa: BLE001 - the server (or the registry) did not answer: the check could not run
        from lockstep.spark.connect import server_away

        cause = server_away(exc, services.spark_url or "", f"connection {SPARK_CONNECT_CONN_ID}") \
            or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return [f"{spec.path}: transform.sql: not analyzed: {cause}"]
    routes = f"{spec.path}: sink.routes."
    if refused is not None and refused.startswith(routes):  # "<file>: sink.routes.<topic>: <reason>"
        field, _, reason = refused.removeprefix(f"{spec.path}: ").partition(": ")
        report.problem(field, reason)
    elif refused is not None:  # "<file>: transform.sql[_file (<its file>)]: <reason>": the reason on the spec's field
        where = "transform.sql" if spec.transform_sql_from == "inline" else "transform.sql_file"
        reason = refused.removeprefix(f"{spec.path}: ").removeprefix(f"{where}: ")
        report.problem(where, reason.removeprefix(f"{where} ({spec.transform_sql_from}): "))
    return []


def _connections(spec: PipelineSpec, report: SpecReport) -> set[str]:
    """The connection ids the spec uses that are defined; a problem on each field naming one that is not."""
    from lockstep.connections import get_connection

    fields = [("source.kafka_conn_id", spec.source.kafka_conn_id), ("sink.kafka_conn_id", spec.sink.kafka_conn_id),
              ("checkpoints.aws_conn_id", spec.checkpoints.aws_conn_id)]
    if spec.source.key.registry or spec.source.value.registry:
        fields.append(("source.registry_conn_id", spec.source.registry_conn_id))
    if spec.sink.key.registry or spec.sink.value.registry:
        fields.append(("sink.registry_conn_id", spec.sink.registry_conn_id))
    usable: set[str] = set()
    for field_path, conn_id in fields:
        try:
            get_connection(conn_id)
        except TerminalError as exc:
            report.problem(field_path, str(exc))
            continue
        usable.add(conn_id)
    return usable


def _topics(spec: PipelineSpec, report: SpecReport, services: Services, side: str, conn_id: str,
            wanted: list[tuple[str, str]]) -> list[str]:
    try:
        listing = services.topics(conn_id)
    except TerminalError as exc:  # the brokers answered, and refused the connection's credentials
        report.problem(f"{side}.kafka_conn_id", str(exc))
        return []
    except Exception as exc:  # noqa: BLE001 - librdkafka's KafkaException: no broker answered in time
        return [f"{spec.path}: Kafka connection {conn_id!r} ({side}) could not be reached: {exc}"]
    for field_path, topic in wanted:
        found = listing.get(topic)
        partitions = found.partitions if found is not None and found.error is None else 0
        report.topics.append({"field": field_path, "topic": topic, "partitions": partitions or None})
        if not partitions:
            report.problem(field_path, f"topic {topic!r} does not exist on Kafka connection {conn_id!r}"
                                       f"{f' ({found.error})' if found is not None and found.error else ''} (or "
                                       "the connection may not describe it); create it, or fix the name")
    return []


def _subjects(spec: PipelineSpec, report: SpecReport) -> list[str]:
    """Each registry-framed source part's subjects hold a schema: without one, no record of the topic decodes."""
    from lockstep.errors import TransientError
    from lockstep.formats.registry import RegistryError, registry_for

    for part, fmt in (("value", spec.source.value), ("key", spec.source.key)):
        if not fmt.registry:
            continue
        try:
            registry = registry_for(spec.source.registry_conn_id)
            for topic in spec.source.topics:
                subject = fmt.subject_for(topic, part)
                try:
                    report.subjects[subject] = len(registry.versions(subject))
                except RegistryError as exc:
                    if exc.status != 404:
                        raise
                    report.problem(f"source.{part}", f"subject {subject!r} (topic {topic}) is not in schema registry "
                                                     f"{registry.name}; its records cannot be decoded. Register the "
                                                     f"topic's schema, or set source.{part}.subject")
        except TransientError as exc:
            return [f"{spec.path}: source.{part}: {exc}"]
        except TerminalError as exc:
            report.problem("source.registry_conn_id", str(exc))
    return []


def _sink_schemas(spec: PipelineSpec, report: SpecReport) -> list[str]:
    """A registry sink part's schema is one the plan would write with: the plan's own check
    (`lockstep.formats.resolution.writings`) as a dry run, which registers nothing."""
    from lockstep.errors import TransientError
    from lockstep.formats.resolution import writings

    if not (spec.sink.key.registry or spec.sink.value.registry):
        return []
    try:
        writings(spec, dry_run=True)
    except TransientError as exc:
        return [f"{spec.path}: sink: {exc}"]
    except TerminalError as exc:  # "<file>: sink.<part>: <reason>", or the connection's own message
        text = str(exc).removeprefix(f"{spec.path}: ")
        where, _, reason = text.partition(": ")
        report.problem(*((where, reason) if where in ("sink.value", "sink.key") else ("sink.registry_conn_id", text)))
    return []


def _store(spec: PipelineSpec, report: SpecReport, timeout_s: float) -> list[str]:
    """The checkpoint store answers; a stateful pipeline's stored state is one its next plan would start from."""
    from lockstep.errors import TransientError
    from lockstep.rules.state_base import base_refusal, key_group_refusal, operator_refusal
    from lockstep.steps.client_factory import checkpoint_store

    try:
        store = checkpoint_store(spec, timeout_s)
        latest = store.history().latest
        if spec.state is None:
            return []
        base = latest.completed.state if latest is not None and latest.completed is not None else None
        rekey_to = store.state_files().rekey_to()
    except TransientError as exc:
        return [f"{spec.path}: checkpoint store {spec.checkpoints.store} could not be reached: {exc}"]
    except TerminalError as exc:
        report.problem("checkpoints.store", f"{spec.checkpoints.store}: {exc}")
        return []
    assert spec.state is not None
    if base is not None:
        report.state = {"checkpoint": base.written_by, "operator": base.operator, "key_groups": base.key_groups,
                        "rekey_to": rekey_to}
    refused = base_refusal(spec, base, rekey_to)
    if refused is not None:
        field_path = ("state" if operator_refusal(base, spec.state.operator) else
                      "state.key_groups" if key_group_refusal(base, spec.state.key_groups, rekey_to) else
                      "state.function.state")
        report.problem(field_path, refused)
    return []


# ---- the whole check -------------------------------------------------------------------------------
def validate(paths: Iterable[str | Path], connect: bool = False, services: Services | None = None) -> ValidateReport:
    """Check every spec under ``paths``, each on its own, then against each other; with ``connect``,
    against the services too."""
    files, errors = spec_files(paths)
    reports: list[SpecReport] = []
    specs: list[PipelineSpec] = []
    services = services or Services()
    with ExitStack() as stack:
        if connect:  # a Connect session (SQL pipelines) marks this process's environment; put it back after
            from lockstep.spark.connect import connect_mode

            stack.enter_context(connect_mode())
        _check_all(files, connect, services, reports, specs, errors)
    by_path = {r.path: r for r in reports}
    for problem in cross_check(specs):
        by_path[problem.file].problems.append(problem)
    return ValidateReport(reports, errors)


def _check_all(files: list[Path], connect: bool, services: Services, reports: list[SpecReport],
               specs: list[PipelineSpec], errors: list[str]) -> None:
    try:
        for file in files:
            report, spec = check_offline(file)
            reports.append(report)
            if spec is None:
                continue
            specs.append(spec)
            if connect:
                errors += check_connect(spec, report, services)
    finally:
        services.close()
