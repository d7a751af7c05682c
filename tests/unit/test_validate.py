"""``lockstep validate``: each refusal with its exit code and its --json document, every example spec
accepted, one bad spec hiding nothing of the others; the --connect checks' decisions over fakes of the
services (the real ones: tests/integration/test_validate.py)."""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from lockstep.cli import main
from lockstep.kafka.topics import ListedTopic
from lockstep.ops import validate as v
from lockstep.rules.manifest_figures import manifest
from lockstep.spec import DURATION_RULE

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "include" / "pipelines").glob("*.y*ml"))

GOOD: dict[str, Any] = {
    "name": "orders-enrich",
    "source": {"topics": ["orders"]},
    "transform": "lockstep_examples.orders:enrich",
    "sink": {"topic": "orders-enriched", "dead_letter_topic": "orders-enriched-dlq"},
    "checkpoints": {"store": "s3://lockstep/checkpoints", "schedule": "*/10 * * * *"},
}


def write(folder: Path, file: str, **changes: Any) -> Path:
    doc = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key].update(value)
        else:
            doc[key] = value
    path = folder / file
    path.write_text(yaml.safe_dump(doc))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["validate", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def only_problem(doc: dict[str, Any]) -> dict[str, str]:
    assert doc["ok"] is False and doc["errors"] == [], doc
    (spec,) = doc["specs"]
    assert spec["ok"] is False
    (problem,) = spec["problems"]
    return problem


@pytest.fixture
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on the Python path for transforms written by the test (a unique module name each)."""
    folder = tmp_path / "code"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in [m for m in sys.modules if m.startswith("validate_fixture_")]:
        del sys.modules[name]


# ---- each refusal: exit 1, the problem named in --json and in text --------------------------------
def test_a_bad_duration_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "p.yaml", checkpoints={"schedule": None, "trigger": {"lag_records": 10, "max_wait": "1w"}})
    code, doc = run(capsys, str(path))
    assert code == 1
    assert only_problem(doc) == {"field": "checkpoints.trigger.max_wait",
                                 "reason": f"must be a duration: {DURATION_RULE}, got str '1w'"}


def test_a_day_is_a_duration_of_the_trigger_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "p.yaml", checkpoints={"schedule": None, "trigger": {"lag_records": 10, "max_wait": "1d"}})
    assert run(capsys, str(path)) == (0, {"ok": True, "specs": [{"path": str(path), "name": "orders-enrich", "ok": True,
                                                               "problems": []}], "errors": []})


def test_a_cron_that_airflow_would_refuse_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "p.yaml", checkpoints={"schedule": "99 * * * *"})
    code, doc = run(capsys, str(path))
    assert code == 1
    problem = only_problem(doc)
    assert problem["field"] == "checkpoints.schedule"
    assert problem["reason"].startswith("'99 * * * *' is not a valid cron expression: ")
    assert doc["specs"][0]["name"] == "orders-enrich"  # named even when the spec does not parse


def test_an_unimportable_transform_is_refused_naming_the_module(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "p.yaml", transform="validate_fixture_nowhere.orders:enrich")
    code, doc = run(capsys, str(path))
    assert code == 1
    assert only_problem(doc) == {"field": "transform", "reason": "cannot import module 'validate_fixture_nowhere.orders': "
                                                                 "ModuleNotFoundError: No module named "
                                                                 "'validate_fixture_nowhere'"}


def test_a_transform_module_that_fails_as_it_is_imported_is_refused(tmp_path: Path, user_code: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (user_code / "validate_fixture_broken.py").write_text("import json\nraise RuntimeError('no config')\n")
    code, doc = run(capsys, str(write(tmp_path, "p.yaml", transform="validate_fixture_broken:enrich")))
    assert code == 1
    assert only_problem(doc) == {"field": "transform", "reason": "cannot import module 'validate_fixture_broken': "
                                                                 "RuntimeError: no config"}


def test_a_missing_function_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run(capsys, str(write(tmp_path, "p.yaml", transform="lockstep_examples.orders:enrich_all")))
    assert code == 1
    assert only_problem(doc) == {"field": "transform",
                                 "reason": "module 'lockstep_examples.orders' has no attribute 'enrich_all'"}


@pytest.mark.parametrize(("source", "accepted"), [
    ("def t(df, spark):\n    return df\n", False),
    ("def t():\n    return None\n", False),
    ("def t(*, df):\n    return df\n", False),
    ("def t(df):\n    return df\n", True),
    ("def t(df, limit=10):\n    return df\n", True),
    ("def t(*frames):\n    return frames[0]\n", True),
    ("class T:\n    def __call__(self, df):\n        return df\nt = T()\n", True),
    ("t = 42\n", False),
])
def test_the_transform_must_take_one_dataframe(tmp_path: Path, user_code: Path, capsys: pytest.CaptureFixture[str],
                                               source: str, accepted: bool) -> None:
    module = f"validate_fixture_{abs(hash(source))}"
    (user_code / f"{module}.py").write_text(source)
    code, doc = run(capsys, str(write(tmp_path, "p.yaml", transform=f"{module}:t")))
    assert code == (0 if accepted else 1), doc
    if not accepted:
        problem = only_problem(doc)
        assert problem["field"] == "transform"
        assert ("must take 1 positional argument (df)" in problem["reason"]
                or problem["reason"] == f"{module}.t is a int, not a function"), problem


def test_a_state_functions_process_and_migrate_are_checked_with_their_own_arguments(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = {"event_time": {"column": "created_at"},
             "function": {"key": "customer", "process": "tests.support.state_functions:from_v1",
                          "migrate": "tests.support.state_functions:running_count", "state": {"count": "bigint"}}}
    code, doc = run(capsys, str(write(tmp_path, "p.yaml", transform="lockstep_examples.orders:parse", state=state)))
    assert code == 1
    found = {p["field"]: p["reason"] for p in doc["specs"][0]["problems"]}
    assert set(found) == {"state.function.process", "state.function.migrate"}
    assert "must take 4 positional arguments (key, records, state, ctx)" in found["state.function.process"]
    assert "must take 2 positional arguments (state, version)" in found["state.function.migrate"]
    state["function"] = {**state["function"], "process": "tests.support.state_functions:running_count",
                         "migrate": "tests.support.state_functions:from_v1"}
    assert run(capsys, str(write(tmp_path, "p.yaml", transform="lockstep_examples.orders:parse", state=state)))[0] == 0


def test_problems_print_as_file_field_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "p.yaml", checkpoints={"schedule": "99 * * * *"})
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{path}: checkpoints.schedule: '99 * * * *' is not a valid cron expression")
    assert out[-1] == "1 spec checked: 0 valid, 1 with problems"


# ---- the check could not run: exit 2 ----------------------------------------------------------------
def test_a_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run(capsys, str(tmp_path / "nowhere.yaml"))
    assert (code, doc) == (2, {"ok": False, "specs": [], "errors": [f"{tmp_path / 'nowhere.yaml'}: no such file or folder"]})
    assert main(["validate", str(tmp_path / "nowhere.yaml")]) == 2
    assert "lockstep validate: " in capsys.readouterr().err


def test_a_folder_without_specs_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run(capsys, str(tmp_path))
    assert code == 2 and doc["errors"] == [f"{tmp_path}: no spec files (*.yaml, *.yml) in this folder"]


def test_a_problem_outranks_what_could_not_be_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path, "bad.yaml", checkpoints={"schedule": "99 * * * *"})
    code, doc = run(capsys, str(bad), str(tmp_path / "nowhere"))
    assert code == 1 and len(doc["errors"]) == 1 and not doc["specs"][0]["ok"]


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["validate", "--conect"])
    assert exited.value.code == 2


# ---- the examples, a folder, the cross-checks --------------------------------------------------------
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_spec_is_accepted(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run(capsys, str(example))
    assert code == 0, doc


def test_the_default_is_the_pipelines_folder(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("LOCKSTEP_PIPELINES_DIR", raising=False)
    monkeypatch.delenv("LOCKSTEP_HOME", raising=False)
    code, doc = run(capsys)
    assert code == 0, doc
    assert sorted(s["path"] for s in doc["specs"]) == [str(p) for p in EXAMPLES]
    assert len(EXAMPLES) >= 3


def test_one_bad_spec_hides_nothing_of_the_others(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "a.yaml", transactions={"id_prefix": "a"}, name="a", checkpoints={"schedule": "99 * * * *"})
    write(tmp_path, "b.yaml", transactions={"id_prefix": "b"}, name="b", transform="validate_fixture_nowhere:t")
    write(tmp_path, "c.yml", transactions={"id_prefix": "c"}, name="c")
    (tmp_path / "notes.txt").write_text("not a spec")
    code, doc = run(capsys, str(tmp_path))
    assert code == 1
    assert [(Path(s["path"]).name, s["ok"], [p["field"] for p in s["problems"]]) for s in doc["specs"]] == [
        ("a.yaml", False, ["checkpoints.schedule"]), ("b.yaml", False, ["transform"]), ("c.yml", True, [])]


def test_specs_are_cross_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "a.yaml", transactions={"id_prefix": "orders"})
    write(tmp_path, "b.yaml", transactions={"id_prefix": "orders-enrich"})
    code, doc = run(capsys, str(tmp_path))
    assert code == 1
    a, b = doc["specs"]
    assert a["ok"] and [p["field"] for p in b["problems"]] == ["name", "transactions.id_prefix"]


def test_a_file_named_twice_is_checked_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "a.yaml")
    code, doc = run(capsys, str(tmp_path), str(path))
    assert code == 0 and len(doc["specs"]) == 1


# ---- --connect, over fakes of the services -----------------------------------------------------------
class FakeServices(v.Services):
    def __init__(self, topics: dict[str, int] | Exception) -> None:
        super().__init__()
        self.found = topics

    def topics(self, conn_id: str) -> dict[str, ListedTopic]:
        if isinstance(self.found, Exception):
            raise self.found
        return {t: ListedTopic(n) for t, n in self.found.items()}


class FakeStore:
    def __init__(self, state: Any, rekey_to: int | None = None) -> None:
        completed = SimpleNamespace(state=state)
        self.latest = SimpleNamespace(completed=completed) if state is not None else None
        self.rekey = rekey_to

    def history(self) -> Any:
        return SimpleNamespace(latest=self.latest)

    def state_files(self) -> Any:
        return SimpleNamespace(rekey_to=lambda: self.rekey)


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> None:
    for conn in ("kafka_default", "aws_default"):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", json.dumps({"conn_type": "generic", "extra": {}}))


def stored(monkeypatch: pytest.MonkeyPatch, store: FakeStore) -> None:
    from lockstep.steps import client_factory

    monkeypatch.setattr(client_factory, "checkpoint_store", lambda spec, timeout_s=None: store)


def state_of(operator: str, key_groups: int) -> Any:
    return manifest(operator, key_groups, 7, {}, {}, {}, None, {}, 1)


def windowed(tmp_path: Path, key_groups: int) -> Path:
    state = {"key_groups": key_groups, "event_time": {"column": "created_at"},
             "window": {"key": "customer", "size": "1m", "aggregates": {"n": "count(*)"}}}
    return write(tmp_path, "p.yaml", transform="lockstep_examples.orders:parse", state=state)


def test_connect_refuses_a_missing_topic_and_gives_partition_counts(tmp_path: Path, connections: None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    stored(monkeypatch, FakeStore(None))
    report = v.validate([write(tmp_path, "p.yaml")], connect=True,
                        services=FakeServices({"orders": 4, "orders-enriched-dlq": 1}))
    assert report.exit_code() == 1
    (spec,) = report.specs
    assert [(p.field, p.reason.split(";")[0]) for p in spec.problems] == [
        ("sink.topic", "topic 'orders-enriched' does not exist on Kafka connection 'kafka_default' (or the connection "
                       "may not describe it)")]
    assert spec.to_json()["topics"] == [
        {"field": "source.topics[0]", "topic": "orders", "partitions": 4},
        {"field": "sink.topic", "topic": "orders-enriched", "partitions": None},
        {"field": "sink.dead_letter_topic", "topic": "orders-enriched-dlq", "partitions": 1}]


def test_a_topic_listing_counts_each_topics_partitions_and_keeps_its_error() -> None:
    from lockstep.kafka.topics import topic_listing

    class Admin:
        def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
            assert topic is None  # one listing of every topic: naming one could create it
            return SimpleNamespace(topics={"orders": SimpleNamespace(partitions=dict.fromkeys(range(4)), error=None),
                                           "broken": SimpleNamespace(partitions={}, error="LEADER_NOT_AVAILABLE")})

    assert topic_listing(Admin(), 1.0) == {"orders": ListedTopic(4), "broken": ListedTopic(0, "LEADER_NOT_AVAILABLE")}


def test_connect_names_an_undefined_connection(tmp_path: Path, connections: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT")
    monkeypatch.setattr("lockstep.connections._lookup", _undefined(monkeypatch))
    stored(monkeypatch, FakeStore(None))
    report = v.validate([write(tmp_path, "p.yaml")], connect=True,
                        services=FakeServices({"orders": 4, "orders-enriched": 4, "orders-enriched-dlq": 1}))
    (spec,) = report.specs
    assert [p.field for p in spec.problems] == ["checkpoints.aws_conn_id"]
    assert "AIRFLOW_CONN_AWS_DEFAULT" in spec.problems[0].reason and report.exit_code() == 1


def _undefined(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Connections from the environment only, as outside Airflow."""
    import os

    from lockstep.connections import _parse
    from lockstep.errors import TerminalError

    def lookup(conn_id: str) -> Any:
        raw = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
        if raw is None:
            raise TerminalError(f"connection {conn_id!r} is not defined: set AIRFLOW_CONN_{conn_id.upper()}")
        return _parse(conn_id, raw)

    return lookup


def test_connect_to_a_cluster_that_does_not_answer_exits_2(tmp_path: Path, connections: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    stored(monkeypatch, FakeStore(None))
    report = v.validate([write(tmp_path, "p.yaml")], connect=True,
                        services=FakeServices(RuntimeError("KafkaError{code=_TRANSPORT}")))
    assert report.exit_code() == 2 and report.specs[0].ok
    assert report.errors[0].endswith("Kafka connection 'kafka_default' (source) could not be reached: "
                                     "KafkaError{code=_TRANSPORT}")


@pytest.mark.parametrize(("stored_state", "rekey_to", "field", "words"), [
    (state_of("window", 8), None, "state.key_groups",
     ["state.key_groups is 16", "has 8 key groups", "lockstep state rekey", "--key-groups 16"]),
    (state_of("dedup", 16), None, "state", ["belongs to a dedup operator", "spec now declares window"]),
    (state_of("window", 8), 16, None, []),   # a recorded re-key accepts the new count, as the plan does
    (state_of("window", 16), None, None, []),
    (None, None, None, []),                  # no state yet: anything goes
])
def test_connect_checks_the_stored_state_by_the_plans_rule(tmp_path: Path, connections: None,
                                                           monkeypatch: pytest.MonkeyPatch, stored_state: Any,
                                                           rekey_to: int | None, field: str | None,
                                                           words: list[str]) -> None:
    stored(monkeypatch, FakeStore(stored_state, rekey_to))
    report = v.validate([windowed(tmp_path, 16)], connect=True,
                        services=FakeServices({"orders": 4, "orders-enriched": 4, "orders-enriched-dlq": 1}))
    (spec,) = report.specs
    assert [p.field for p in spec.problems] == ([field] if field else [])
    assert all(w in spec.problems[0].reason for w in words)
    if stored_state is not None:
        assert spec.to_json()["state"] == {"checkpoint": 7, "operator": stored_state.operator,
                                           "key_groups": stored_state.key_groups, "rekey_to": rekey_to}


class FakeRegistry:
    """Subjects and the one schema each holds; compatible with anything, as a registry with no version is."""

    name = "fake"
    gave_reasons = False

    def __init__(self, subjects: dict[str, str]) -> None:
        self.subjects = subjects

    def _held(self, subject: str) -> str:
        from lockstep.formats.registry import RegistryError

        if subject not in self.subjects:
            raise RegistryError(f"Subject '{subject}' not found.", 404, 40401)
        return self.subjects[subject]

    def versions(self, subject: str) -> list[int]:
        self._held(subject)
        return [1]

    def version(self, subject: str, version: Any = "latest") -> Any:
        from lockstep.formats.registry import RegisteredSchema

        return RegisteredSchema(1, "AVRO", self._held(subject), 1)

    def lookup(self, subject: str, text: str, schema_type: str) -> Any:
        from lockstep.formats.registry import RegisteredSchema

        return RegisteredSchema(1, "AVRO", text, 1) if self.subjects.get(subject) == text else None

    def compatibility_problems(self, subject: str, text: str, schema_type: str) -> list[str]:
        return []


@pytest.mark.parametrize(("held", "problems"), [
    ({"orders-value": '"string"', "orders-enriched-value": '{"type": "string"}'}, []),
    ({"orders-enriched-value": '{"type": "string"}'}, [("source.value", "subject 'orders-value' (topic orders) is not "
                                                                         "in schema registry fake")]),
    ({"orders-value": '"string"'}, [("sink.value", "the schema (inline) is not registered under subject "
                                                   "'orders-enriched-value' in registry fake")]),
])
def test_connect_checks_registry_subjects_and_the_sinks_schema_as_the_plan_would(
        tmp_path: Path, connections: None, monkeypatch: pytest.MonkeyPatch, held: dict[str, str],
        problems: list[tuple[str, str]]) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT", json.dumps({"conn_type": "http", "host": "nowhere"}))
    registry = FakeRegistry(held)
    monkeypatch.setattr("lockstep.formats.registry.registry_for", lambda conn_id: registry)
    monkeypatch.setattr("lockstep.formats.resolution.registry_for", lambda conn_id: registry)
    stored(monkeypatch, FakeStore(None))
    path = write(tmp_path, "p.yaml", source={"value": "avro-confluent"},
                 sink={"value": {"format": "avro-confluent", "schema": {"type": "string"}}})
    report = v.validate([path], connect=True,
                        services=FakeServices({"orders": 4, "orders-enriched": 4, "orders-enriched-dlq": 1}))
    (spec,) = report.specs
    assert [(p.field, p.reason[:len(start)]) for p, (_, start) in zip(spec.problems, problems)] == problems
    assert len(spec.problems) == len(problems) and report.exit_code() == (1 if problems else 0)
    assert spec.subjects == ({"orders-value": 1} if "orders-value" in held else {})


def test_a_refused_route_condition_is_a_problem_on_its_route_and_a_refused_query_on_the_query(monkeypatch):
    """Under --connect an SQL pipeline's query, then its routes' conditions, are analyzed (`sql.analyzer.analyze`,
    on real Spark in tests/integration/test_sql.py); here, which field each refusal lands on."""
    from lockstep.ops import validate
    from lockstep.spec import parse_spec
    from lockstep.sql import analyzer

    spec = parse_spec({"name": "s", "source": {"topics": ["a"]}, "transform": {"sql": "SELECT * FROM input"},
                       "sink": {"topic": "b", "dead_letter_topic": "c", "routes": {"b.odd": "offest = 1"}},
                       "checkpoints": {"store": "s3://lockstep/x"}}, "s.yaml")
    services = SimpleNamespace(spark=lambda: object(), spark_url="sc://x")

    def problems(refused: str) -> list[tuple[str, str]]:
        monkeypatch.setattr(analyzer, "analyze", lambda spark, analyzed: refused)
        report = validate.SpecReport("s.yaml")
        assert validate._sql(spec, report, services) == []
        return [(p.field, p.reason) for p in report.problems]

    assert problems("s.yaml: sink.routes.b.odd: Spark refused the condition 'offest = 1': no offest") == \
        [("sink.routes.b.odd", "Spark refused the condition 'offest = 1': no offest")]
    assert problems("s.yaml: transform.sql: Spark refused the query: line 1, position 7: no such") == \
        [("transform.sql", "Spark refused the query: line 1, position 7: no such")]
