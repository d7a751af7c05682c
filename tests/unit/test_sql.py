"""SQL pipelines (``transform: {sql: ...}`` / ``{sql_file: ...}``): the spec's two forms, their shape in the
published schema, the refusals naming their field, and how Spark's refusal of a query is told (pure)."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from lockstep.errors import SpecError
from lockstep.kafka.topics import ListedTopic
from lockstep.ops import validate as v
from lockstep.spec import load_spec, parse_spec
from lockstep.spec.shape import spec_json_schema
from lockstep.sql.runtime import first_line, kept_columns, missing_columns, position, refusal
from lockstep.transform import ship_to_executors

BASE: dict[str, Any] = {
    "name": "orders-sql",
    "source": {"topics": ["orders"]},
    "transform": {"sql": "SELECT * FROM input WHERE value IS NOT NULL"},
    "sink": {"topic": "orders-big", "dead_letter_topic": "orders-big-dlq"},
    "checkpoints": {"store": "s3://lockstep/checkpoints", "schedule": "*/10 * * * *"},
}


def doc(**changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def write(folder: Path, d: dict[str, Any], name: str = "p.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(d))
    return path


def problems(d: dict[str, Any], file: str = "p.yaml") -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        parse_spec(d, file)
    return {p.field: p.reason for p in info.value.problems}


# ---- the spec ---------------------------------------------------------------------------------------------
def test_an_inline_query_is_the_transform() -> None:
    spec = parse_spec(doc(), "p.yaml")
    assert spec.is_sql and spec.transform_sql == "SELECT * FROM input WHERE value IS NOT NULL"
    assert spec.transform_sql_from == "inline" and spec.transform == "SQL (inline)"


def test_a_query_file_is_read_beside_the_spec(tmp_path: Path) -> None:
    (tmp_path / "q.sql").write_text("-- big orders\nSELECT *\nFROM input\n\n")
    spec = load_spec(write(tmp_path, doc(transform={"sql_file": "q.sql"})))
    assert spec.transform_sql == "-- big orders\nSELECT *\nFROM input"
    assert spec.transform_sql_from == str(tmp_path / "q.sql") and spec.transform == "SQL (q.sql)"


def test_a_python_transform_is_no_sql() -> None:
    spec = parse_spec(doc(transform="lockstep_examples.orders.enrich"), "p.yaml")
    assert not spec.is_sql and spec.transform_sql is None
    assert spec.transform_target == ("lockstep_examples.orders", "enrich")


@pytest.mark.parametrize("transform, field, words", [
    ({"sql": "SELECT 1", "sql_file": "q.sql"}, "transform", "not both"),
    ({}, "transform", "needs sql"),
    ({"sql": "  \n"}, "transform.sql", "is empty"),
    ({"sql": "-- nothing\n-- at all"}, "transform.sql", "is empty"),
    ({"sql": 7}, "transform.sql", "must be a non-empty string"),
    ({"sql": "SELECT * FROM input", "dialect": "flink"}, "transform.dialect", "unknown key (allowed: sql, sql_file)"),
    ({"sql_file": "missing.sql"}, "transform.sql_file", "cannot read SQL file"),
    ("not a target", "transform", "or a section with sql or sql_file"),
])
def test_a_bad_sql_transform_is_refused_naming_its_field(transform: Any, field: str, words: str) -> None:
    found = problems(doc(transform=transform))
    assert field in found and words in found[field], found


def test_an_empty_query_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "q.sql").write_text("\n\n")
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, doc(transform={"sql_file": "q.sql"})))
    (problem,) = info.value.problems
    assert problem.field == "transform.sql_file" and f"the query ({tmp_path / 'q.sql'}) is empty" in problem.reason


# ---- the published schema ---------------------------------------------------------------------------------
def test_the_schema_takes_both_forms_and_refuses_what_the_checker_refuses() -> None:
    validator = jsonschema.Draft202012Validator(spec_json_schema())
    assert validator.is_valid(doc())
    assert validator.is_valid(doc(transform={"sql_file": "q.sql"}))
    assert validator.is_valid(doc(transform="m.n:f"))
    assert not validator.is_valid(doc(transform={"sql": "SELECT 1", "dialect": "flink"}))
    assert not validator.is_valid(doc(transform={"sql": ""}))
    forms = spec_json_schema()["properties"]["transform"]["oneOf"]
    assert forms[1]["properties"].keys() == {"sql", "sql_file"} and forms[1]["additionalProperties"] is False


# ---- Spark's refusal, told in one line (pure) --------------------------------------------------------------
ANALYSIS = ("[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name `amout` cannot "
            "be resolved. Did you mean one of the following? [`topic`, `value`]. SQLSTATE: 42703; line 2 pos 2;\n"
            "'Project [value#0, 'amout]\n+- SubqueryAlias input\n")
PARSE = ("\n[PARSE_SYNTAX_ERROR] Syntax error at or near 'input'. SQLSTATE: 42601 (line 1, pos 14)\n\n== SQL ==\n"
         "SELECT * FORM input\n--------------^^^\n")


def test_the_place_is_spark_s_line_and_position() -> None:
    assert position(ANALYSIS, "SELECT *,\n  amout FROM input") == (2, 2)
    assert position(PARSE, "SELECT * FORM input") == (1, 14)
    # a message without its place: from the query context's offset
    assert position("[X] no place", "SELECT *,\n  amout FROM input", 12) == (2, 2)
    assert position("[X] no place", "SELECT 1") is None


def test_the_reason_is_the_first_line_without_place_or_plan() -> None:
    assert first_line(ANALYSIS).endswith("Did you mean one of the following? [`topic`, `value`]. SQLSTATE: 42703")
    assert first_line(PARSE) == "[PARSE_SYNTAX_ERROR] Syntax error at or near 'input'. SQLSTATE: 42601"


def test_the_refusal_is_one_line_naming_the_spec_the_field_and_the_place() -> None:
    line = refusal("include/pipelines/o.yaml", "/x/q.sql", ANALYSIS, "SELECT *,\n  amout FROM input")
    assert "\n" not in line
    assert line.startswith("include/pipelines/o.yaml: transform.sql_file (/x/q.sql): Spark refused the query: "
                           "line 2, position 2: [UNRESOLVED_COLUMN.WITH_SUGGESTION]")
    assert refusal("o.yaml", "inline", PARSE, "SELECT * FORM input").startswith(
        "o.yaml: transform.sql: Spark refused the query: line 1, position 14: [PARSE_SYNTAX_ERROR]")


def test_the_columns_a_query_keeps() -> None:
    assert kept_columns(sink_data=False, stateful=False) == ("topic", "partition", "offset", "value")
    assert kept_columns(sink_data=True, stateful=False) == ("topic", "partition", "offset", "data")
    assert kept_columns(sink_data=True, stateful=True)[-1] == "value"
    assert missing_columns(["value", "topic", "key"], False, False) == ["partition", "offset"]
    assert missing_columns(["value", "topic", "partition", "offset"], False, False) == []


def test_an_sql_transform_ships_no_python() -> None:
    class NoSpark:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"nothing to ship, yet {name} was used")

    assert ship_to_executors(NoSpark(), parse_spec(doc(), "p.yaml")) == []


# ---- lockstep validate ---------------------------------------------------------------------------------------
def test_validate_offline_takes_an_sql_spec_without_importing_anything(tmp_path: Path) -> None:
    report = v.validate([write(tmp_path, doc())])
    assert report.exit_code() == 0, report.lines()


def test_validate_refuses_an_empty_query_file(tmp_path: Path) -> None:
    (tmp_path / "q.sql").write_text("   \n")
    report = v.validate([write(tmp_path, doc(transform={"sql_file": "q.sql"}))])
    assert report.exit_code() == 1
    (problem,) = report.specs[0].problems
    assert problem.field == "transform.sql_file" and "is empty" in problem.reason


class Services(v.Services):
    """Kafka and the store answer (every topic there); the Spark Connect endpoint is ``spark``."""

    def __init__(self, spark: object | None) -> None:
        super().__init__()
        self.session = spark

    def topics(self, conn_id: str) -> dict[str, ListedTopic]:
        return {t: ListedTopic(1) for t in ("orders", "orders-big", "orders-big-dlq")}

    def spark(self) -> Any:
        return self.session


@pytest.fixture
def connected(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from lockstep.steps import client_factory

    for conn in ("kafka_default", "aws_default"):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", json.dumps({"conn_type": "generic", "extra": {}}))
    store = SimpleNamespace(history=lambda: SimpleNamespace(latest=None))
    monkeypatch.setattr(client_factory, "checkpoint_store", lambda spec, timeout_s=None: store)


def test_validate_connect_without_an_endpoint_says_the_sql_was_not_analyzed(tmp_path: Path, connected: None) -> None:
    report = v.validate([write(tmp_path, doc())], connect=True, services=Services(None))
    assert report.exit_code() == 0, report.lines()
    assert report.specs[0].notes == ["transform.sql: not analyzed (no Spark Connect endpoint: define the "
                                     "spark_connect_default connection to analyze SQL against the source's columns)"]
    assert any("note: transform.sql: not analyzed" in line for line in report.lines())


def test_validate_connect_reports_spark_s_refusal_on_transform_sql(tmp_path: Path, connected: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import lockstep.sql.analyzer as sql

    path = write(tmp_path, doc())
    seen: list[object] = []

    def analyze(spark: object, spec: Any) -> str:
        seen.append(spark)
        return refusal(spec.path, "inline", PARSE, spec.transform_sql)

    monkeypatch.setattr(sql, "analyze", analyze)
    report = v.validate([path], connect=True, services=Services("the session"))
    assert seen == ["the session"] and report.exit_code() == 1
    (problem,) = report.specs[0].problems
    assert problem.field == "transform.sql"
    assert problem.reason.startswith("Spark refused the query: line 1, position 14: [PARSE_SYNTAX_ERROR]")


class Unreachable(Services):
    def __init__(self) -> None:
        super().__init__(None)
        self.asked = 0

    def spark(self) -> Any:
        self.asked += 1
        raise RuntimeError("UNAVAILABLE: failed to connect to all addresses\nmore detail")


def test_validate_connect_with_a_server_that_does_not_answer_could_not_check(tmp_path: Path, connected: None) -> None:
    services = Unreachable()
    report = v.validate([write(tmp_path, doc())], connect=True, services=services)
    assert report.exit_code() == 2 and report.specs[0].ok
    assert report.errors == [f"{tmp_path / 'p.yaml'}: transform.sql: not analyzed: UNAVAILABLE: failed to connect to "
                             "all addresses"]


def test_validate_connect_makes_no_session_without_the_connection(connected: None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", raising=False)
    monkeypatch.setattr("lockstep.connections._lookup", _undefined)
    services = v.Services()
    assert services.spark() is None and services.spark_url is None
    services.close()


def _undefined(conn_id: str) -> Any:
    from lockstep.errors import TerminalError

    raise TerminalError(f"connection {conn_id!r} is not defined")


def test_a_query_s_wrong_types_are_told_as_sql() -> None:
    from lockstep.errors import TerminalError
    from lockstep.spark.output_stages import check_output_schema

    fields = {"value": "binary", "topic": "string", "partition": "int", "offset": "bigint", "error": "int"}
    with pytest.raises(TerminalError) as info:
        check_output_schema(parse_spec(doc(), "p.yaml"), fields)
    assert str(info.value).startswith("p.yaml: transform SQL (inline) returned columns of the wrong type: `error` is "
                                      "int (expected string). Cast them in the query (for example `CAST(error AS "
                                      "STRING) AS error`).")
