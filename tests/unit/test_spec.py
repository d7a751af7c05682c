"""Pipeline spec loading and validation: every problem reported at once, typos never ignored."""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from lockstep.errors import SpecError, TerminalError
from lockstep.spec import DURATION_RULE, PipelineSpec, load_each, load_for_dag, load_spec, load_specs, parse_spec

FULL_YAML = textwrap.dedent(
    """
    name: orders-enrich
    description: "Enrich orders"
    source:
      topics: [orders]
      kafka_conn_id: kafka_default
      auto_offset_reset: earliest
      consumer_group: lockstep-orders-enrich
    transform: lockstep_examples.orders:enrich
    sink:
      topic: orders-enriched
      dead_letter_topic: orders-enriched-dlq
      kafka_conn_id: kafka_default
    checkpoints:
      store: s3://lockstep/checkpoints
      aws_conn_id: aws_default
      schedule: "*/10 * * * *"
      max_records: 100000
      retain: 20
      skip_deleted_ranges: false
    transactions:
      id_prefix: orders-enrich
      timeout_ms: 900000
      commit_margin_ms: 60000
    spark:
      master: null
      conf: {}
    producer: {}
    """
)

MINIMAL: dict[str, Any] = {
    "name": "orders-enrich",
    "source": {"topics": ["orders"]},
    "transform": "lockstep_examples.orders:enrich",
    "sink": {"topic": "orders-enriched", "dead_letter_topic": "orders-enriched-dlq"},
    "checkpoints": {"store": "s3://lockstep/checkpoints"},
}


def minimal(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(MINIMAL)
    doc.update(changes)
    return doc


def problems(doc: Any, file: str = "p.yaml") -> dict[str, str]:
    """field -> reason of every problem, failing the test if the spec was accepted."""
    with pytest.raises(SpecError) as info:
        parse_spec(doc, file)
    assert all(p.file == file for p in info.value.problems)
    return {p.field: p.reason for p in info.value.problems}


def write(directory: Path, name: str, doc: Any) -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return path


def test_full_example_loads(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "orders.yaml", FULL_YAML))
    assert spec.name == "orders-enrich"
    assert spec.description == "Enrich orders"
    assert spec.source.topics == ("orders",)
    assert spec.transform == "lockstep_examples.orders:enrich"
    assert spec.checkpoints.schedule == "*/10 * * * *"
    assert spec.transactions.timeout_ms == 900_000
    assert spec.path == str(tmp_path / "orders.yaml")


def test_defaults_are_filled_in() -> None:
    spec = parse_spec(minimal(), "p.yaml")
    assert spec.source.kafka_conn_id == "kafka_default"
    assert spec.source.auto_offset_reset == "earliest"
    assert spec.source.consumer_group == "lockstep-orders-enrich"
    assert spec.source.on_topic_recreated == "fail"
    assert spec.transactions.warn_time_left_percent == 25
    assert spec.sink.kafka_conn_id == "kafka_default"
    assert spec.sink.writer == "jvm"
    assert spec.checkpoints.aws_conn_id == "aws_default"
    assert spec.checkpoints.schedule is None
    assert spec.checkpoints.max_records == 100_000
    assert spec.checkpoints.retain == 20
    assert spec.checkpoints.skip_deleted_ranges is False
    assert spec.transactions.id_prefix == "orders-enrich"
    assert spec.transactions.timeout_ms == 900_000
    assert spec.transactions.commit_margin_ms == 60_000
    assert spec.spark.master is None
    assert dict(spec.spark.conf) == {}
    assert dict(spec.producer) == {}


def test_sink_connection_defaults_to_source_connection() -> None:
    doc = minimal(source={"topics": ["orders"], "kafka_conn_id": "kafka_prod"})
    assert parse_spec(doc, "p.yaml").sink.kafka_conn_id == "kafka_prod"


def test_dag_id_and_checkpoint_location() -> None:
    spec = parse_spec(minimal(), "p.yaml")
    assert spec.dag_id == "lockstep_orders_enrich"
    assert spec.checkpoint_location == ("lockstep", "checkpoints/orders-enrich")
    assert spec.checkpoint_location.bucket == "lockstep"


@pytest.mark.parametrize(
    ("store", "bucket", "prefix", "location"),
    [
        ("s3://lockstep", "lockstep", "", "orders-enrich"),
        ("s3://lockstep/", "lockstep", "", "orders-enrich"),
        ("s3://my.bucket/a/b/", "my.bucket", "a/b", "a/b/orders-enrich"),
    ],
)
def test_store_url_is_split(store: str, bucket: str, prefix: str, location: str) -> None:
    spec = parse_spec(minimal(checkpoints={"store": store}), "p.yaml")
    assert (spec.checkpoints.bucket, spec.checkpoints.prefix) == (bucket, prefix)
    assert spec.checkpoint_location.prefix == location


@pytest.mark.parametrize("store", ["lockstep/checkpoints", "s3://", "s3://UPPER/x", "gs://b/x", "s3://b//x"])
def test_bad_store_url(store: str) -> None:
    assert "checkpoints.store" in problems(minimal(checkpoints={"store": store}))


@pytest.mark.parametrize("transform", ["pkg.mod.func", "pkg.mod:func", "mod:func"])
def test_transform_syntaxes_normalise_to_colon_form(transform: str) -> None:
    spec = parse_spec(minimal(transform=transform), "p.yaml")
    module, function = spec.transform_target
    assert f"{module}:{function}" == spec.transform
    assert function == "func"


@pytest.mark.parametrize("transform", ["func", "pkg.mod:", ":func", "pkg..mod:f", "pkg.mod:f.g", "1pkg:f", "a b:c"])
def test_bad_transform(transform: str) -> None:
    assert "transform" in problems(minimal(transform=transform))


def test_every_problem_is_reported_at_once_with_file_and_field() -> None:
    doc = {
        "name": "Orders!",
        "source": {"topics": ["ok", "bad topic"], "auto_offset_reset": "newest", "on_topic_recreated": "skip"},
        "transform": "nocolon",
        "sink": {"topic": "out"},
        "checkpoints": {"store": "s3://lockstep", "max_records": 0, "retain": 0, "skip_deleted_ranges": "yes"},
        "transactions": {"timeout_ms": 10, "id_prefix": "bad/prefix"},
    }
    with pytest.raises(SpecError) as info:
        parse_spec(doc, "specs/orders.yaml")
    fields = [p.field for p in info.value.problems]
    assert fields == [
        "name",
        "source.topics[1]",
        "source.auto_offset_reset",
        "source.on_topic_recreated",
        "transform",
        "sink.dead_letter_topic",
        "checkpoints.max_records",
        "checkpoints.retain",
        "checkpoints.skip_deleted_ranges",
        "transactions.id_prefix",
        "transactions.timeout_ms",
    ]
    message = str(info.value)
    # one line per problem, each "file: field: reason"
    for problem in info.value.problems:
        assert f"specs/orders.yaml: {problem.field}: {problem.reason}" in message.splitlines()
    assert isinstance(info.value, TerminalError)


def test_unknown_keys_are_errors_at_every_level() -> None:
    doc = minimal(schedul="@hourly")
    doc["checkpoints"] = {"store": "s3://lockstep", "max_record": 5}
    doc["sink"] = dict(doc["sink"], topc="x")
    found = problems(doc)
    assert set(found) == {"schedul", "checkpoints.max_record", "sink.topc"}
    assert "unknown key" in found["checkpoints.max_record"]
    assert "max_records" in found["checkpoints.max_record"]  # the allowed keys help spot the typo


def test_missing_sections_are_reported_once() -> None:
    found = problems({"name": "x", "transform": "a:b", "source": {"topics": ["t"]}})
    assert found == {"sink": "is required", "checkpoints": "is required"}


@pytest.mark.parametrize("doc", [None, [], "text"])
def test_document_must_be_a_mapping(doc: Any) -> None:
    assert "<document>" in problems(doc)


def test_speculation_is_an_error_in_any_spelling() -> None:
    for value in (True, "true", "TRUE"):
        found = problems(minimal(spark={"conf": {"spark.speculation": value}}))
        assert "fence" in found["spark.conf[spark.speculation]"]
    spec = parse_spec(minimal(spark={"conf": {"spark.speculation": False}}), "p.yaml")
    assert spec.spark.conf["spark.speculation"] == "false"


def test_spark_conf_values_are_rendered_as_strings() -> None:
    conf = {"spark.executor.cores": 2, "spark.ui.enabled": True, "spark.app.name": "x"}
    spec = parse_spec(minimal(spark={"master": "local[2]", "conf": conf}), "p.yaml")
    assert dict(spec.spark.conf) == {"spark.executor.cores": "2", "spark.ui.enabled": "true", "spark.app.name": "x"}
    assert spec.spark.master == "local[2]"
    assert "spark.conf[spark.x]" in problems(minimal(spark={"conf": {"spark.x": [1]}}))


@pytest.mark.parametrize("key", ["transactional.id", "enable.idempotence", "transaction.timeout.ms"])
def test_producer_may_not_set_owned_keys(key: str) -> None:
    found = problems(minimal(producer={key: "x", "linger.ms": 5}))
    assert list(found) == [f"producer[{key}]"]


def test_producer_passes_other_settings_through() -> None:
    spec = parse_spec(minimal(producer={"linger.ms": 5, "compression.type": "zstd"}), "p.yaml")
    assert dict(spec.producer) == {"linger.ms": 5, "compression.type": "zstd"}


def test_commit_margin_must_be_below_timeout() -> None:
    found = problems(minimal(transactions={"timeout_ms": 60_000, "commit_margin_ms": 60_000}))
    assert "less than transactions.timeout_ms" in found["transactions.commit_margin_ms"]


@pytest.mark.parametrize("timeout", [999, 3_600_001, "900000", True])
def test_timeout_bounds_and_type(timeout: Any) -> None:
    assert "transactions.timeout_ms" in problems(minimal(transactions={"timeout_ms": timeout}))


@pytest.mark.parametrize("schedule", ["@hourly", "@daily", "@continuous", "0 * * * *", "*/10 * * * *", "0 6 * * MON-FRI"])
def test_valid_schedules(schedule: str) -> None:
    assert parse_spec(minimal(checkpoints={"store": "s3://b1b", "schedule": schedule}), "p.yaml").checkpoints.schedule == schedule


@pytest.mark.parametrize("schedule", ["@sometimes", "every ten minutes", "* * *", 10, "99 * * * *", "0 25 * * *",
                                      "0 0 * * FUNDAY", "*/0 * * * *", "0 0 * * * * 2026"])
def test_invalid_schedules(schedule: Any) -> None:
    assert "checkpoints.schedule" in problems(minimal(checkpoints={"store": "s3://b1b", "schedule": schedule}))


def test_a_cron_airflow_would_refuse_is_refused_naming_the_value() -> None:
    """croniter decides, as in Airflow's cron timetable: a minute of 99 fits the fields' characters but
    no clock, and used to pass here only to fail when the DAG was built."""
    reason = problems(minimal(checkpoints={"store": "s3://b1b", "schedule": "99 * * * *"}))["checkpoints.schedule"]
    assert reason.startswith("'99 * * * *' is not a valid cron expression: ")


@pytest.mark.parametrize(("section", "key"), [
    ("checkpoints.trigger", "max_wait"), ("checkpoints.trigger", "poll_interval"),
    ("state.event_time", "out_of_orderness"), ("state.dedup", "ttl"),
])
@pytest.mark.parametrize(("value", "ms"), [("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("2h", 7_200_000),
                                           ("1d", 86_400_000), ("1 d", 86_400_000), (90, 90_000), ("90", 90_000)])
def test_every_duration_field_reads_one_grammar(section: str, key: str, value: Any, ms: int) -> None:
    """``ttl: 7d`` and ``max_wait: 1d`` alike; each field keeps its unit (the trigger's are seconds)."""
    seconds = section == "checkpoints.trigger"
    if seconds and ms % 1000:
        return  # a seconds field refuses a part of a second: test_a_bad_lag_trigger_is_named
    doc = with_duration(section, key, value)
    spec = parse_spec(doc, "p.yaml")
    if seconds:
        assert spec.checkpoints.trigger is not None
        assert getattr(spec.checkpoints.trigger, {"max_wait": "max_wait_s", "poll_interval": "poll_s"}[key]) == ms // 1000
    else:
        assert spec.state is not None
        got = spec.state.event_time.out_of_orderness_ms if key == "out_of_orderness" else spec.state.ttl_ms
        assert got == ms


@pytest.mark.parametrize(("section", "key"), [
    ("checkpoints.trigger", "max_wait"), ("state.event_time", "out_of_orderness"), ("state.dedup", "ttl"),
])
@pytest.mark.parametrize("value", ["soon", "1w", "1.5h", "-5s", -5, True, "s"])
def test_every_duration_field_refuses_with_one_message(section: str, key: str, value: Any) -> None:
    found = problems(with_duration(section, key, value))
    assert found[f"{section}.{key}"] == f"must be a duration: {DURATION_RULE}, got {type(value).__name__} {value!r}"


def with_duration(section: str, key: str, value: Any) -> dict[str, Any]:
    """A valid spec with ``value`` in the duration field ``section.key`` (a lag trigger, or dedup state)."""
    if section == "checkpoints.trigger":
        return minimal(checkpoints={"store": "s3://b1b", "trigger": {"lag_records": 10, key: value}})
    state: dict[str, Any] = {"event_time": {"column": "created_at"}, "dedup": {"key": "order_id", "ttl": "1h"}}
    state["event_time" if section == "state.event_time" else "dedup"][key] = value
    return minimal(transform="lockstep_examples.orders:parse", state=state)


@pytest.mark.parametrize("topic", [".", "..", "a" * 250, "with space", "ü", ""])
def test_kafka_topic_name_rules(topic: str) -> None:
    assert "sink.topic" in problems(minimal(sink={"topic": topic, "dead_letter_topic": "dlq"}))


def test_topics_must_be_a_non_empty_unique_list() -> None:
    assert "source.topics" in problems(minimal(source={"topics": []}))
    assert "source.topics" in problems(minimal(source={"topics": "orders"}))
    assert "source.topics" in problems(minimal(source={"topics": ["a", "a"]}))


def test_sink_must_not_be_a_source_or_the_dead_letter_topic() -> None:
    assert "sink.topic" in problems(minimal(sink={"topic": "orders", "dead_letter_topic": "dlq"}))
    assert "sink.dead_letter_topic" in problems(minimal(sink={"topic": "out", "dead_letter_topic": "out"}))


def test_sink_parallelism_is_auto_or_a_positive_integer() -> None:
    sink = minimal()["sink"]
    assert parse_spec(minimal(), "p.yaml").sink.parallelism is None  # auto: the cluster's cores
    assert parse_spec(minimal(sink={**sink, "parallelism": "auto"}), "p.yaml").sink.parallelism is None
    assert parse_spec(minimal(sink={**sink, "parallelism": 12}), "p.yaml").sink.parallelism == 12
    assert problems(minimal(sink={**sink, "parallelism": "many"}))["sink.parallelism"] == \
        "must be auto or a positive integer, got 'many'"
    assert problems(minimal(sink={**sink, "parallelism": 0}))["sink.parallelism"] == "must be between 1 and 100000, got 0"


def test_sink_writer_is_jvm_or_python() -> None:
    sink = {"topic": "out", "dead_letter_topic": "dlq"}
    assert parse_spec(minimal(sink={**sink, "writer": "python"}), "p.yaml").sink.writer == "python"
    reason = problems(minimal(sink={**sink, "writer": "scala"}))["sink.writer"]
    assert "jvm, python" in reason and "'scala'" in reason


@pytest.mark.parametrize("name", ["Orders", "-orders", "orders.enrich", "a" * 64, ""])
def test_name_rules(name: str) -> None:
    assert "name" in problems(minimal(name=name))


def test_unreadable_yaml_is_a_spec_error(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.yaml", "name: [unclosed\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.problems[0].file == str(path)


def spec_doc(name: str, prefix: str | None = None) -> dict[str, Any]:
    doc = minimal(name=name, sink={"topic": f"{name}-out", "dead_letter_topic": f"{name}-dlq"})
    if prefix is not None:
        doc["transactions"] = {"id_prefix": prefix}
    return doc


def test_load_specs_reads_yaml_and_yml_only(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", spec_doc("alpha"))
    write(tmp_path, "b.yml", spec_doc("beta"))
    write(tmp_path, "notes.txt", "not a spec")
    specs = load_specs(tmp_path)
    assert [s.name for s in specs] == ["alpha", "beta"]
    assert all(isinstance(s, PipelineSpec) for s in specs)


def test_load_specs_reports_problems_of_all_files(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", minimal(name="Bad"))
    write(tmp_path, "b.yaml", minimal(name="good", transform="x"))
    with pytest.raises(SpecError) as info:
        load_specs(tmp_path)
    assert {(Path(p.file).name, p.field) for p in info.value.problems} == {("a.yaml", "name"), ("b.yaml", "transform")}


def test_load_each_keeps_the_specs_that_validate_and_collide_with_none(tmp_path: Path) -> None:
    """One bad spec, and a pair whose id prefixes overlap (both left out: either could fence the other's
    transactions), leave the good ones usable; every problem is reported."""
    write(tmp_path, "a.yaml", spec_doc("alpha"))
    write(tmp_path, "b.yaml", minimal(name="Bad"))
    write(tmp_path, "c.yaml", spec_doc("orders"))
    write(tmp_path, "d.yaml", spec_doc("orders-enrich"))
    write(tmp_path, "e.yml", spec_doc("zeta"))
    specs, problems = load_each(tmp_path)
    assert [s.name for s in specs] == ["alpha", "zeta"]
    assert [(Path(p.file).name, p.field) for p in problems] == [("b.yaml", "name"), ("d.yaml", "transactions.id_prefix")]


def tricky_folder(directory: Path) -> None:
    """Specs that keep their DAG, and every way `load_each` leaves one out or reports a file."""
    write(directory, "a.yaml", spec_doc("alpha"))                     # alone
    write(directory, "b.yaml", minimal(name="Bad"))                   # invalid name
    write(directory, "c.yaml", spec_doc("orders"))                    # prefix "orders" ...
    write(directory, "d.yaml", spec_doc("orders-enrich"))             # ... prefixes "orders-enrich": both out
    write(directory, "e.yml", spec_doc("zeta"))
    write(directory, "f.yaml", spec_doc("pay-x", "p1"))               # DAG id lockstep_pay_x ...
    write(directory, "g.yaml", spec_doc("pay_x", "p2"))               # ... twice: both out
    write(directory, "h.yaml", spec_doc("same"))                      # the same name ...
    write(directory, "i.yaml", spec_doc("same", "other"))             # ... twice: both out
    write(directory, "j.yaml", {**spec_doc("gamma"), "sink": 5})      # invalid, named like a valid one ...
    write(directory, "k.yaml", spec_doc("gamma", "gamma-2"))          # ... which keeps its DAG
    write(directory, "l.yaml", "name: [unclosed")                     # not YAML
    write(directory, "m.yaml", "- a list")                            # not a mapping
    write(directory, "n.yaml", {**spec_doc("nu"), "name": 7})         # a name that is no text
    write(directory, "o.yaml", {**spec_doc("omicron"), "transactions": "x"})  # a section that is none
    write(directory, "p.yaml", spec_doc("pi", "alpha-2"))             # its prefix under alpha's: both out
    write(directory, "q.yaml", {**spec_doc("kappa"), "transactions": None})   # empty section: the name's prefix


def test_a_tasks_parse_keeps_what_load_each_keeps_of_its_dag(tmp_path: Path) -> None:
    """`load_for_dag` (a task's process parsing the file for its one DAG) keeps exactly the spec `load_each`
    keeps for that DAG id, for every DAG id of the folder and one of none, collisions included."""
    tricky_folder(tmp_path)
    kept = {s.dag_id: s for s in load_each(tmp_path)[0]}
    assert sorted(kept) == ["lockstep_gamma", "lockstep_kappa", "lockstep_zeta"]
    names = ["alpha", "Bad", "orders", "orders-enrich", "zeta", "pay-x", "pay_x", "same", "gamma", "nu", "omicron",
             "pi", "kappa", "missing"]
    for dag_id in {"lockstep_" + n.replace("-", "_") for n in names}:
        specs, _ = load_for_dag(tmp_path, dag_id)
        assert specs == ([kept[dag_id]] if dag_id in kept else []), dag_id


def test_a_tasks_parse_reads_in_full_only_its_spec_those_that_may_collide_and_the_unreadable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lockstep.spec import loading

    tricky_folder(tmp_path)
    read: list[str] = []
    full = loading.load_spec
    monkeypatch.setattr(loading, "load_spec", lambda path: read.append(Path(path).name) or full(path))
    specs, problems = load_for_dag(tmp_path, "lockstep_alpha")
    assert specs == []  # pi's prefix alpha-2 lies under alpha's
    assert read == ["a.yaml", "l.yaml", "m.yaml", "n.yaml", "o.yaml", "p.yaml"]
    assert {(Path(p.file).name, p.field) for p in problems} >= {("l.yaml", "<document>"), ("p.yaml", "transactions.id_prefix")}
    read.clear()
    assert [s.name for s in load_for_dag(tmp_path, "lockstep_gamma")[0]] == ["gamma"]
    assert read == ["j.yaml", "k.yaml", "l.yaml", "m.yaml", "n.yaml", "o.yaml"]


def test_duplicate_names_and_prefixes_across_specs(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", spec_doc("orders"))
    write(tmp_path, "b.yaml", spec_doc("orders"))
    with pytest.raises(SpecError) as info:
        load_specs(tmp_path)
    assert {p.field for p in info.value.problems} == {"name", "transactions.id_prefix"}
    assert all(p.file.endswith("b.yaml") for p in info.value.problems)


def test_names_mapping_to_the_same_dag_id_collide(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", spec_doc("orders-x", "p1"))
    write(tmp_path, "b.yaml", spec_doc("orders_x", "p2"))
    with pytest.raises(SpecError, match="lockstep_orders_x"):
        load_specs(tmp_path)


def test_prefix_that_prefixes_another_prefix_collides(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", spec_doc("orders"))  # id prefix "orders"
    write(tmp_path, "b.yaml", spec_doc("orders-enrich"))  # ids "orders-enrich-1-0" start with "orders-"
    with pytest.raises(SpecError) as info:
        load_specs(tmp_path)
    [problem] = info.value.problems
    assert problem.field == "transactions.id_prefix"
    assert "'orders-'" in problem.reason


def test_prefixes_sharing_only_characters_do_not_collide(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", spec_doc("orders"))
    write(tmp_path, "b.yaml", spec_doc("ordersx"))
    write(tmp_path, "c.yaml", spec_doc("orders2", "orders.v2"))
    assert len(load_specs(tmp_path)) == 3


# ---- state: windows, dedup, functions ----------------------------------------------------------------
EVENT_TIME = {"column": "created_at"}


def stateful(**state: Any) -> dict[str, Any]:
    return minimal(state={"event_time": EVENT_TIME, **state})


def test_a_window_spec_parses_with_its_defaults() -> None:
    spec = parse_spec(stateful(window={"key": "customer", "size": "1m", "aggregates": {"orders": "count(*)"}}),
                      "p.yaml")
    state = spec.state
    assert state is not None and state.operator == "window" and state.key == "customer"
    assert state.key_groups == 128
    assert state.event_time.column == "created_at"
    assert state.event_time.idle_timeout_ms == 5 * 60_000 and state.event_time.out_of_orderness_ms == 0
    w = state.window
    assert w is not None and w.size_ms == 60_000 and w.slide_ms == 60_000, "a window without slide is tumbling"
    assert w.key_name == "customer", "an identifier key names the output's key field"
    assert w.allowed_lateness_ms == 0 and w.aggregates == (("orders", "count(*)"),)
    assert state.dedup is None and state.function is None and state.schema_version == 1


def test_a_window_over_a_key_expression_names_its_key_field_key() -> None:
    spec = parse_spec(stateful(window={"key": "lower(customer)", "size": "10s", "slide": "5s",
                                       "aggregates": {"n": "count(*)"}}), "p.yaml")
    assert spec.state is not None and spec.state.window is not None
    assert spec.state.window.key_name == "key" and spec.state.window.slide_ms == 5000


def test_a_dedup_spec_parses_with_its_defaults() -> None:
    spec = parse_spec(stateful(key_groups=16, dedup={"key": "order_id", "ttl": "1h"}), "p.yaml")
    state = spec.state
    assert state is not None and state.operator == "dedup" and state.key == "order_id" and state.key_groups == 16
    assert state.dedup is not None and state.dedup.ttl_ms == 3_600_000 and state.dedup.duplicates == "drop"
    assert state.window is None and state.function is None


def test_a_function_spec_parses_with_its_defaults() -> None:
    spec = parse_spec(stateful(function={"key": "customer", "process": "my.sessions.process",
                                         "state": {"orders": "bigint", "tags": "array< string>"}}), "p.yaml")
    state = spec.state
    assert state is not None and state.operator == "function" and state.key == "customer"
    f = state.function
    assert f is not None
    assert f.process == "my.sessions:process", "the dotted syntax is normalised like a transform's"
    assert f.fields == (("orders", "bigint"), ("tags", "array<string>"))
    assert f.version == 1 and f.migrate is None and state.schema_version == 1


def test_a_stateless_spec_has_no_state() -> None:
    assert parse_spec(minimal(), "p.yaml").state is None


@pytest.mark.parametrize(("state", "field", "words"), [
    ({"window": {"key": "k", "size": "1m", "aggregates": {"n": "count(*)"}}, "dedup": {"key": "k", "ttl": "1h"}},
     "state", "window and dedup"),
    ({}, "state", "exactly one operator"),
    ({"window": {"key": "k", "size": "1m", "slide": "25s", "aggregates": {"n": "count(*)"}}},
     "state.window.slide", "must divide state.window.size (60000 ms)"),
    ({"window": {"key": "k", "size": "1m", "slide": "2m", "aggregates": {"n": "count(*)"}}},
     "state.window.slide", "not exceed it"),
    ({"window": {"key": "k", "size": "1m", "slide": "0s", "aggregates": {"n": "count(*)"}}},
     "state.window.slide", "more than 0"),
    ({"window": {"key": "k", "size": "10 parsecs", "aggregates": {"n": "count(*)"}}},
     "state.window.size", "must be a duration"),
    ({"dedup": {"key": "k", "ttl": "0s"}}, "state.dedup.ttl", "more than 0"),
    ({"dedup": {"key": "k", "ttl": "1h", "duplicates": "keep"}}, "state.dedup.duplicates", "drop, dead_letter"),
    ({"window": {"key": "k", "size": "1m", "aggregates": {"window_start": "min(x)"}}},
     "state.window.aggregates.window_start", "already a field of the output"),
    ({"window": {"key": "k", "size": "1m", "aggregates": {}}}, "state.window.aggregates", "at least one"),
    ({"function": {"key": "k", "process": "m:f", "state": {"n": "bigint", "when": "datetime"}}},
     "state.function.state.when", "must be one of"),
    ({"function": {"key": "k", "process": "m:f", "state": {"__n": "bigint"}}},
     "state.function.state.__n", "not starting with __"),
    ({"function": {"key": "k", "process": "m:f", "state": {"n": "bigint"}, "migrate": "nope"}},
     "state.function.migrate", "module.path:function"),
    ({"key_groups": 0, "dedup": {"key": "k", "ttl": "1h"}}, "state.key_groups", "between 1 and 32768"),
])
def test_each_state_problem_is_reported_at_its_field(state: dict[str, Any], field: str, words: str) -> None:
    found = problems(stateful(**state))
    assert field in found, found
    assert words in found[field]


def test_a_bad_duration_names_the_field_and_the_value() -> None:
    found = problems(minimal(state={"event_time": {"column": "t", "out_of_orderness": "10 parsecs", "idle_timeout": -3},
                                    "dedup": {"key": "k", "ttl": "1h"}}))
    assert set(found) == {"state.event_time.out_of_orderness", "state.event_time.idle_timeout"}
    assert "'10 parsecs'" in found["state.event_time.out_of_orderness"]
    assert "-3" in found["state.event_time.idle_timeout"]


def test_unknown_state_keys_are_errors_at_every_level() -> None:
    doc = minimal(state={"event_time": {"column": "t", "watermark": "1s"}, "keygroups": 8,
                         "window": {"key": "k", "size": "1m", "aggregates": {"n": "count(*)"}, "sliding": "1s"}})
    found = problems(doc)
    assert set(found) == {"state.keygroups", "state.event_time.watermark", "state.window.sliding"}
    assert all(reason.startswith("unknown key") for reason in found.values())


def test_every_state_problem_is_reported_at_once() -> None:
    found = problems(minimal(state={"event_time": {}, "function": {"process": "m:f", "state": {"n": "int64"},
                                                                   "version": 0}}))
    assert set(found) == {"state.event_time.column", "state.function.state.n", "state.function.key",
                          "state.function.version"}


def test_a_lag_trigger_takes_records_and_durations_instead_of_a_schedule() -> None:
    from lockstep.spec import TriggerSpec

    checkpoints = minimal()["checkpoints"]
    lagged = {**checkpoints, "trigger": {"lag_records": 5000, "max_wait": "15m", "poll_interval": 2}}
    spec = parse_spec(minimal(checkpoints=lagged), "p.yaml")
    assert spec.checkpoints.trigger == TriggerSpec(lag_records=5000, max_wait_s=900, poll_s=2)
    assert spec.checkpoints.schedule is None
    assert parse_spec(minimal(checkpoints={**checkpoints, "trigger": {"lag_records": 1}}),
                      "p.yaml").checkpoints.trigger == TriggerSpec(1, 3600, 5)
    assert parse_spec(minimal(), "p.yaml").checkpoints.trigger is None  # cron stays the default


@pytest.mark.parametrize(("trigger", "schedule", "field", "reason"), [
    ({"lag_records": 10}, "@hourly", "checkpoints.schedule", "must be null (or left out) when checkpoints.trigger"),
    ({"max_wait": "1h"}, None, "checkpoints.trigger.lag_records", "is required"),
    ({"lag_records": 0}, None, "checkpoints.trigger.lag_records", "must be >= 1"),
    ({"lag_records": 10, "max_wait": "soon"}, None, "checkpoints.trigger.max_wait", "must be a duration"),
    ({"lag_records": 10, "max_wait": "0s"}, None, "checkpoints.trigger.max_wait", "must be more than 0"),
    ({"lag_records": 10, "poll_interval": "1500ms"}, None, "checkpoints.trigger.poll_interval", "whole number of seconds"),
    ({"lag_records": 10, "lag": 3}, None, "checkpoints.trigger.lag", "unknown key"),
])
def test_a_bad_lag_trigger_is_named(trigger, schedule, field: str, reason: str) -> None:
    checkpoints = {**minimal()["checkpoints"], "trigger": trigger, "schedule": schedule}
    assert reason in problems(minimal(checkpoints=checkpoints))[field]


def test_sink_routes_are_topics_and_conditions_in_order_and_refuse_what_would_write_twice_or_nowhere() -> None:
    sink = {"topic": "out", "dead_letter_topic": "dlq"}
    spec = parse_spec(minimal(sink={**sink, "routes": {"out.big": "data.amount >= 100", "out.eu": " data.eu "}}),
                      "p.yaml")
    assert spec.sink.routes == (("out.big", "data.amount >= 100"), ("out.eu", "data.eu"))
    assert spec.sink.topics == ("out", "out.big", "out.eu")
    assert parse_spec(minimal(sink=sink), "p.yaml").sink.topics == ("out",)
    found = problems(minimal(sink={**sink, "routes": {"orders": "true", "out": "true", "dlq": "true", "a b": "true",
                                                       "x": "", "y": 3}}))
    assert "is also a source topic" in found["sink.routes.orders"]
    assert "is sink.topic already" in found["sink.routes.out"]
    assert "is sink.dead_letter_topic already" in found["sink.routes.dlq"]
    assert "Kafka topic names" in found["sink.routes.a b"]
    assert "must be a Spark SQL condition" in found["sink.routes.x"] and "got int 3" in found["sink.routes.y"]


def test_sink_routes_are_not_for_stateful_pipelines() -> None:
    sink = {"topic": "out", "dead_letter_topic": "dlq", "routes": {"out.big": "true"}}
    stateful = minimal(sink=sink, state={"event_time": {"column": "ts"}, "dedup": {"key": "id", "ttl": "1h"}})
    assert "not supported with state yet" in problems(stateful)["sink.routes"]
