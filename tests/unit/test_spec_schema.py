"""The spec's JSON Schema, rendered from the one declaration the checker reads (`lockstep.spec.shape`):
published, current, and in agreement with the checker on good and bad specs."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from lockstep.cli import main
from lockstep.errors import SpecError
from lockstep.spec import parse_spec
from lockstep.spec.fields import Field, Section
from lockstep.spec.shape import SPEC, spec_json_schema, spec_json_schema_text

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "lockstep-spec.schema.json"
EXAMPLES = sorted((ROOT / "include" / "pipelines").glob("*.y*ml"))
VALIDATOR = jsonschema.Draft202012Validator(spec_json_schema())
#: The same schema read as draft-07, as VS Code's YAML extension reads schemas: it uses only keywords that mean
#: the same in both drafts, so an editor refuses and accepts what the published draft 2020-12 does.
DRAFT_7 = jsonschema.Draft7Validator(spec_json_schema())

#: A spec with every section the declaration has but the other two stateful operators, each field set.
FULL: dict[str, Any] = {
    "name": "p", "description": "every section",
    "source": {"topics": ["in"], "kafka_conn_id": "kafka_a", "auto_offset_reset": "latest", "consumer_group": "g",
               "on_topic_recreated": "earliest", "key": {"format": "string"},
               "value": {"format": "json-confluent", "subject": "in-value"}, "registry_conn_id": "reg"},
    "transform": "m:f",
    "sink": {"topic": "out", "dead_letter_topic": "dlq", "kafka_conn_id": "kafka_b", "writer": "python",
             "parallelism": 4, "key": {"format": "string"},
             "value": {"format": "json-confluent", "schema": {"type": "object"}, "auto_register": True,
                       "compatibility": "BACKWARD"}, "registry_conn_id": "reg",
             "iceberg": {"table": "lake.orders", "catalog_conn_id": "lake"}},
    "checkpoints": {"store": "s3://bucket/p", "aws_conn_id": "aws", "schedule": None, "max_records": 10, "retain": 3,
                    "skip_deleted_ranges": True, "trigger": {"lag_records": 5, "max_wait": "1h", "poll_interval": 2}},
    "transactions": {"id_prefix": "p", "timeout_ms": 60_000, "commit_margin_ms": 10_000, "warn_time_left_percent": 30},
    "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": 4, "spark.x": "y"}, "mode": "connect",
              "remote": "sc://spark:15002"},
    "producer": {"linger.ms": 5},
    "state": {"key_groups": 8, "event_time": {"column": "ts", "out_of_orderness": "1s", "idle_timeout": "1m",
                                              "idle_advance": True},
              "window": {"key": "customer", "key_name": "customer", "size": "1m", "slide": "30s",
                         "allowed_lateness": "10s", "aggregates": {"n": "count(*)"}},
              "compaction": {"max_deltas": 4, "max_delta_ratio": 0.5}},
    "owner": "payments", "tags": ["tier-1"],
    "alerts": {"webhook_conn_id": "hook", "email": ["a@b.example"], "smtp_conn_id": "smtp"},
}
DEDUP = {**FULL, "state": {"event_time": {"column": "ts"}, "dedup": {"key": "id", "ttl": "1d", "duplicates": "drop"}}}
FUNCTION = {**FULL, "state": {"event_time": {"column": "ts"}, "function": {
    "key": "id", "process": "m:process", "state": {"n": "bigint"}, "version": 2, "migrate": "m:migrate", "ttl": "7d"}}}

JOINED = {**FULL, "source": {**FULL["source"], "topics": ["a", "b"]}, "state": {"event_time": {"column": "ts"},
          "interval_join": {"key": "id", "left": "a", "right": "b", "after": "15m", "before": "1m", "how": "left"}}}


def base_for(path: str) -> dict[str, Any]:
    if path.startswith("state.interval_join"):
        return JOINED
    return DEDUP if path.startswith("state.dedup") else FUNCTION if path.startswith("state.function") else FULL


def sections(section: Section = SPEC, path: str = "") -> Iterator[tuple[str, Section]]:
    yield path, section
    for key, f in section.fields.items():
        if f.section is not None:
            yield from sections(f.section, f"{path}.{key}" if path else key)


def fields() -> Iterator[tuple[str, Field]]:
    for path, section in sections():
        for key, f in section.fields.items():
            yield (f"{path}.{key}" if path else key), f


def changed(doc: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """``doc`` with the field at ``path`` set to ``value`` (deleted when ``value`` is DELETE)."""
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    at = doc
    for key in parents:
        at = at[key]
    if value is DELETE:
        del at[last]
    else:
        at[last] = value
    return doc


DELETE = object()
#: A value of the wrong type for each kind of field.
WRONG_TYPE = {"string": 5, "integer": "many", "number": "many", "boolean": "yes", "duration": "soon", "schedule": 5,
              "expression": 5, "mapping": 5, "list": 5, "section": 5}


def bad_specs() -> Iterator[Any]:
    """Specs the declaration says are wrong, one field each: an unknown key in each section, a wrong type for
    each field, each required field left out, each integer or number past its bounds, each enum's wrong word."""
    for path, _ in sections():
        bogus = f"{path}.bogus" if path else "bogus"
        yield pytest.param(path, bogus, 1, id=f"unknown key {bogus}")
    for path, f in fields():
        yield pytest.param(path, path, WRONG_TYPE[f.kind], id=f"wrong type {path}")
        if f.required:
            yield pytest.param(path, path, DELETE, id=f"missing {path}")
        if f.kind in ("integer", "number"):
            low, high = f.low, f.high
            assert low is not None
            yield pytest.param(path, path, low if f.low_exclusive else low - 1, id=f"below {path}")
            if high is not None:
                yield pytest.param(path, path, high + 1, id=f"above {path}")
        if f.enum:
            yield pytest.param(path, path, "@nope" if f.kind == "schedule" else "nope", id=f"bad word {path}")


@pytest.mark.parametrize("doc", [FULL, DEDUP, FUNCTION, JOINED], ids=["window", "dedup", "function", "interval_join"])
def test_the_bases_of_the_bad_specs_are_valid_to_both(doc):
    parse_spec(copy.deepcopy(doc), "p.yaml")
    VALIDATOR.validate(doc)
    DRAFT_7.validate(doc)


@pytest.mark.parametrize(("section", "field", "value"), list(bad_specs()))
def test_the_schema_and_the_checker_both_refuse_a_bad_spec(section, field, value):
    doc = changed(base_for(section), field, value)
    assert not VALIDATOR.is_valid(doc), f"the schema accepts {field} = {value!r}"
    assert not DRAFT_7.is_valid(doc), f"the schema read as draft-07 accepts {field} = {value!r}"
    with pytest.raises(SpecError) as refused:
        parse_spec(doc, "p.yaml")
    named = [p.field for p in refused.value.problems]
    assert any(f == field or f.startswith((f"{field}.", f"{field}[")) for f in named), named


def test_the_checkers_messages_still_say_what_is_allowed():
    """Bounds and words now come from the declaration; the checker says them as it did."""
    with pytest.raises(SpecError) as refused:
        parse_spec(changed(changed(changed(FULL, "transactions.timeout_ms", 999), "source.auto_offset_reset", "x"),
                           "state.compaction.max_delta_ratio", 0), "p.yaml")
    assert {(p.field, p.reason) for p in refused.value.problems} == {
        ("transactions.timeout_ms", "must be between 1000 and 3600000, got 999"),
        ("source.auto_offset_reset", "'x' is invalid: must be earliest or latest"),
        ("state.compaction.max_delta_ratio", "must be a number above 0 (at most 1000), got int 0"),
    }


def test_the_published_schema_is_the_rendering_of_the_declaration():
    assert PUBLISHED.read_text(encoding="utf-8") == spec_json_schema_text(), \
        "docs/lockstep-spec.schema.json is stale: run `lockstep spec schema --output docs/lockstep-spec.schema.json`"


def test_the_schema_is_draft_2020_12_and_closes_every_section():
    schema = spec_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["additionalProperties"] is False and schema["required"] == ["name", "source", "transform", "sink",
                                                                              "checkpoints"]
    timeout = schema["properties"]["transactions"]["properties"]["timeout_ms"]
    assert (timeout["minimum"], timeout["maximum"], timeout["default"]) == (1000, 3_600_000, 900_000)
    assert timeout["description"]
    assert all(f.doc for _, f in fields())


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_spec_validates_against_the_schema(path):
    VALIDATOR.validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    DRAFT_7.validate(yaml.safe_load(path.read_text(encoding="utf-8")))


RECORDER = textwrap.dedent(
    """
    import copy, pickle, os
    import lockstep.spec as spec

    FOUND = []
    _parse = spec.parse_spec

    def parse_spec(doc, file):
        kept = copy.deepcopy(doc)
        parsed = _parse(doc, file)
        FOUND.append(kept)
        return parsed

    def pytest_configure(config):
        spec.parse_spec = parse_spec

    def pytest_unconfigure(config):
        with open(os.environ["SPECS_OUT"], "wb") as out:
            pickle.dump(FOUND, out)
    """
)
#: The unit tests whose specs are recorded: those that build specs as YAML or dicts.
SPEC_TESTS = ("test_spec.py", "test_formats_spec.py", "test_alerts.py", "test_validate.py", "test_state_chain.py",
              "test_dedup_rule.py", "test_protobuf_formats.py", "test_sql.py")


def test_every_spec_the_unit_tests_parse_as_valid_validates_against_the_schema(tmp_path):
    """The specs the spec tests build and the checker accepts, recorded as they run (in a child pytest)."""
    (tmp_path / "spec_recorder.py").write_text(RECORDER)
    out = tmp_path / "specs.pickle"
    env = {**__import__("os").environ, "SPECS_OUT": str(out),
           "PYTHONPATH": f"{tmp_path}:{ROOT / 'include'}:{ROOT / 'plugins'}"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "spec_recorder", "-p", "no:cacheprovider",
                           *(str(ROOT / "tests" / "unit" / name) for name in SPEC_TESTS)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    docs = pickle.loads(out.read_bytes())
    assert len(docs) > 100
    refused = [(json.dumps(doc, default=str)[:300], error.message) for doc in docs for validator in (VALIDATOR, DRAFT_7)
               if (error := jsonschema.exceptions.best_match(validator.iter_errors(doc))) is not None]
    assert not refused, refused[:5]


def test_lockstep_spec_schema_prints_or_writes_the_schema(tmp_path, capsys):
    assert main(["spec", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == spec_json_schema()
    assert main(["spec", "schema", "--output", str(tmp_path / "s.json")]) == 0
    assert (tmp_path / "s.json").read_text() == spec_json_schema_text()
    assert main(["spec", "schema", "--output", str(tmp_path / "no" / "s.json")]) == 2
    assert "cannot write the spec's schema to" in capsys.readouterr().err


def test_the_spec_classes_defaults_are_the_declared_ones():
    """The dataclasses keep defaults for specs built in code (replay, tests); they must say what the YAML's do."""
    from lockstep.spec import AlertsSpec, CompactionPolicy, FormatSpec, SinkSpec, SourceSpec, TransactionSpec, TriggerSpec

    declared = {path: f.default for path, f in fields()}
    pairs = {
        "state.compaction.max_deltas": CompactionPolicy().max_deltas,
        "state.compaction.max_delta_ratio": CompactionPolicy().max_delta_ratio,
        "transactions.warn_time_left_percent": TransactionSpec("p", 1, 0).warn_time_left_percent,
        "checkpoints.trigger.poll_interval": TriggerSpec(1, 1).poll_s,
        "source.on_topic_recreated": SourceSpec((), "k", "earliest", "g").on_topic_recreated,
        "source.registry_conn_id": SourceSpec((), "k", "earliest", "g").registry_conn_id,
        "sink.writer": SinkSpec("o", "d", "k").writer,
        "source.value.format": FormatSpec().format,
        "sink.value.auto_register": FormatSpec().auto_register,
        "alerts.smtp_conn_id": AlertsSpec().smtp_conn_id,
    }
    assert {path: declared[path] for path in pairs} == pairs
