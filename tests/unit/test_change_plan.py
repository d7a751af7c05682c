"""The change plan (`lockstep validate NEW --against RUNNING`) without services: each kind of change between a
running spec and its new version, classified as applying at the next checkpoint, needing a step first, or
refused with the way out; and the CLI's exit codes."""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from lockstep.cli import main
from lockstep.rules.change_plan import Applies, change_plan, worst
from lockstep.spec import parse_spec

BASE: dict[str, Any] = {
    "name": "orders", "transform": "lockstep_examples.orders:enrich",
    "source": {"topics": ["orders"], "kafka_conn_id": "kafka_default", "consumer_group": "orders"},
    "sink": {"topic": "out", "dead_letter_topic": "dlq", "kafka_conn_id": "kafka_default",
             "routes": {"big": "data.amount >= 100"}},
    "checkpoints": {"store": "s3://lockstep/checkpoints", "max_records": 1000},
    "transactions": {"id_prefix": "orders"},
    "tables": {"customers": {"topic": "customers", "value": "json"}},
}
WINDOW = {"key_groups": 32, "event_time": {"column": "created_at", "out_of_orderness": "10s"},
          "window": {"key": "customer", "size": "1m",
                     "aggregates": {"orders": "count(*)", "cents": "sum(CAST(amount * 100 AS BIGINT))"}}}
FUNCTION = {"key_groups": 32, "event_time": {"column": "created_at"},
            "function": {"key": "customer", "process": "m:process", "state": {"orders": "bigint"}}}
DEDUP = {"key_groups": 32, "event_time": {"column": "created_at"}, "dedup": {"key": "order_id", "ttl": "1h"}}


def changed_doc(base: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    edit(doc)
    return doc


ICEBERG = {**BASE, "sink": {**BASE["sink"], "iceberg": {"table": "lake.orders"}}}
UNROUTED = {**BASE, "sink": {k: v for k, v in ICEBERG["sink"].items() if k != "routes"}}


def with_state(state: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["transform"] = "lockstep_examples.orders:parse"
    doc["state"] = copy.deepcopy(state)
    del doc["tables"]
    del doc["sink"]["routes"]  # not with state (yet)
    return doc


def changed(base: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> list:
    new = copy.deepcopy(base)
    edit(new)
    return change_plan(parse_spec(base, "running.yaml"), parse_spec(new, "new.yaml"))


def setter(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            doc = doc[p]
        if value is None:
            del doc[last]
        else:
            doc[last] = value
    return edit


# (id, running spec, edit, field, when it applies, words of the reason)
CASES = [
    ("transform code", BASE, setter("transform", "lockstep_examples.orders:enrich_accepting_text"), "transform",
     Applies.NEXT, "--compare <new>"),
    ("SQL query", {**BASE, "transform": {"sql": "SELECT * FROM input"}},
     setter("transform", {"sql": "SELECT * FROM input WHERE offset > 0"}), "transform", Applies.NEXT, "new code"),
    ("route added", BASE, setter("sink.routes", {"big": "data.amount >= 100", "eu": "data.currency = 'EUR'"}),
     "sink.routes", Applies.NEXT, "data.currency = 'EUR' go there"),
    ("route condition", BASE, setter("sink.routes", {"big": "data.amount >= 500"}), "sink.routes", Applies.NEXT,
     "data.amount >= 100 -> data.amount >= 500"),
    ("route removed", BASE, setter("sink.routes", None), "sink.routes", Applies.NEXT, "go to sink.topic"),
    ("sink topic", BASE, setter("sink.topic", "out2"), "sink.topic", Applies.NEXT, "stays in the old topic"),
    ("sink schema", BASE, setter("sink.value", {"format": "avro-confluent", "schema": {"type": "string"}}),
     "sink.value", Applies.NEXT, "incompatible one is refused before any transaction opens"),
    ("source topic added", BASE, setter("source.topics", ["orders", "orders-eu"]), "source.topics", Applies.NEXT,
     "log start"),
    ("source topic removed", {**BASE, "source": {**BASE["source"], "topics": ["orders", "orders-eu"]}},
     setter("source.topics", ["orders"]), "source.topics", Applies.NEXT, "goes on from there"),
    ("source format", BASE, setter("source.value", "json"), "source.value", Applies.NEXT, "dead letter"),
    ("source cluster", BASE, setter("source.kafka_conn_id", "kafka_eu"), "source.kafka_conn_id", Applies.REFUSED,
     "restore_from: time:"),
    ("sink cluster", BASE, setter("sink.kafka_conn_id", "kafka_eu"), "sink.kafka_conn_id", Applies.NEXT,
     "settled on the old one"),
    ("new table", BASE, setter("tables", {"customers": {"topic": "customers", "value": "json"},
                                          "prices": {"topic": "prices"}}), "tables.prices", Applies.NEXT, "log start"),
    ("table key format", BASE, setter("tables.customers.key", "json"), "tables.customers.key", Applies.REFUSED,
     "Rename the table"),
    ("table removed", BASE, setter("tables", None), "tables.customers", Applies.NEXT, "No longer read"),
    ("pipeline renamed", BASE, setter("name", "orders-v2"), "name", Applies.STEP, "savepoint copy"),
    ("store moved", BASE, setter("checkpoints.store", "s3://other/checkpoints"), "checkpoints.store", Applies.REFUSED,
     "Keep checkpoints.store"),
    ("key groups", with_state(WINDOW), setter("state.key_groups", 64), "state.key_groups", Applies.STEP,
     "lockstep state rekey --spec <running> --key-groups 64"),
    ("tumbling window size", with_state(WINDOW), setter("state.window.size", "5m"), "state.window.size", Applies.NEXT,
     "fire at the old size, later ones at the new"),
    ("sliding window size", with_state({**WINDOW, "window": {**WINDOW["window"], "slide": "30s"}}),
     setter("state.window.size", "5m"), "state.window.size", Applies.REFUSED, "Sliding windows overlap any switch"),
    ("window aggregates of partials", with_state(WINDOW), setter("state.window.aggregates", {"orders": "count(*)"}),
     "state.window.aggregates", Applies.REFUSED, "keep_rows: true"),
    ("window aggregates of rows", with_state({**WINDOW, "window": {**WINDOW["window"], "keep_rows": True}}),
     setter("state.window.aggregates", {"orders": "count(*)", "top": "max(amount)"}), "state.window.aggregates",
     Applies.NEXT, "fire with the new aggregates"),
    ("window key", with_state(WINDOW), setter("state.window.key", "currency"), "state.window.key", Applies.REFUSED,
     "new pipeline"),
    ("rows to partials", with_state({**WINDOW, "window": {**WINDOW["window"], "keep_rows": True}}),
     setter("state.window.keep_rows", False), "state.window.keep_rows", Applies.NEXT, "partial aggregates"),
    ("partials to rows", with_state(WINDOW), setter("state.window.keep_rows", True), "state.window.keep_rows",
     Applies.REFUSED, "cannot become the rows"),
    ("out of orderness", with_state(WINDOW), setter("state.event_time.out_of_orderness", "30s"),
     "state.event_time.out_of_orderness", Applies.NEXT, "not fired again"),
    ("operator", with_state(WINDOW), lambda d: d["state"].update(window=None, dedup={"key": "order_id", "ttl": "1h"}),
     "state", Applies.REFUSED, "never read by another"),
    ("state added", {k: v for k, v in BASE.items() if k != "tables"} | {"sink": {**BASE["sink"], "routes": {}}},
     lambda d: d.update(state=copy.deepcopy(DEDUP)), "state", Applies.NEXT,
     "starts without state"),
    ("dedup key", with_state(DEDUP), setter("state.dedup.key", "customer"), "state.dedup.key", Applies.REFUSED,
     "pass once more"),
    ("dedup ttl", with_state(DEDUP), setter("state.dedup.ttl", "2h"), "state.dedup.ttl", Applies.NEXT, "next checkpoint"),
    ("function field added", with_state(FUNCTION), setter("state.function.state", {"orders": "bigint", "last": "string"}),
     "state.function.state", Applies.NEXT, "read as it is"),
    ("function field removed", with_state(FUNCTION), setter("state.function.state", {"total": "bigint"}),
     "state.function.state", Applies.REFUSED, "field 'orders' (bigint) is gone"),
    ("function migrated", with_state(FUNCTION),
     lambda d: d["state"]["function"].update(state={"total": "bigint"}, version=2, migrate="m:migrate"),
     "state.function.state", Applies.NEXT, "migrated by m:migrate"),
    ("schedule", BASE, setter("checkpoints.max_records", 5000), "checkpoints.max_records", Applies.NEXT,
     "not what they write"),
    ("table added", BASE, setter("sink.iceberg", {"table": "lake.orders"}), "sink.iceberg", Applies.NEXT,
     "land in the table too"),
    ("table removed", ICEBERG, setter("sink.iceberg", None), "sink.iceberg", Applies.NEXT,
     "publish to the table they staged in"),
    ("table moved", ICEBERG, setter("sink.iceberg.table", "lake.orders_v2"), "sink.iceberg.table", Applies.NEXT,
     "lands in the new table"),
    ("table partitioned", ICEBERG, setter("sink.iceberg.partitioning", ["day(ordered_at)", "bucket(8, customer)"]),
     "sink.iceberg.partitioning", Applies.STEP, "evolve lake.orders's partition spec to [day(ordered_at), "
     "bucket(8, customer)] first"),
    ("topic dropped for the table alone", UNROUTED, setter("sink.topic", None), "sink.topic", Applies.NEXT,
     "land in Iceberg table lake.orders alone"),
    ("topic added beside the table alone", changed_doc(UNROUTED, setter("sink.topic", None)), setter("sink.topic", "out"),
     "sink.topic", Applies.NEXT, "go to out too, beside Iceberg table lake.orders"),
    ("table partitioning unset", changed_doc(ICEBERG, setter("sink.iceberg.partitioning", ["region"])),
     setter("sink.iceberg.partitioning", None), "sink.iceberg.partitioning", Applies.NEXT, "as it is partitioned"),
]


@pytest.mark.parametrize("running,edit,field,applies,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_kind_of_change_is_classified_with_its_reason(running, edit, field, applies, words) -> None:
    changes = changed(running, edit)
    assert [c.field for c in changes] == [field], changes
    [change] = changes
    assert change.applies is applies and words in change.why, change


def test_the_same_spec_has_no_change_and_worst_ranks_the_classes() -> None:
    assert change_plan(parse_spec(BASE, "a.yaml"), parse_spec(copy.deepcopy(BASE), "b.yaml")) == []
    assert worst([]) is None
    both = changed(BASE, lambda d: d.update(transform="m:g", name="orders-2"))
    assert {c.applies for c in both} == {Applies.NEXT, Applies.STEP} and worst(both) is Applies.STEP


def write(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_validate_against_prints_the_plan_and_exits_1_on_a_refused_change(tmp_path: Path, capsys) -> None:
    running = write(tmp_path / "..", "running-orders.yaml", with_state(WINDOW))
    (tmp_path / "new").mkdir()
    ok = copy.deepcopy(with_state(WINDOW))
    ok["state"]["event_time"]["out_of_orderness"] = "30s"
    new = write(tmp_path / "new", "orders.yaml", ok)
    assert main(["validate", str(new), "--against", str(running)]) == 0
    out = capsys.readouterr().out
    assert f"change plan from {running}:" in out and "next checkpoint: state.event_time.out_of_orderness" in out

    ok["state"]["window"]["slide"] = "30s"
    new.write_text(yaml.safe_dump(ok))
    assert main(["validate", str(new), "--against", str(running), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [(c["field"], c["applies"]) for c in doc["changes"]] == [  # the most severe first
        ("state.window.size", "refused"), ("state.event_time.out_of_orderness", "next checkpoint")]


def test_validate_against_needs_one_spec_and_a_running_spec_that_loads(tmp_path: Path, capsys) -> None:
    new = write(tmp_path, "orders.yaml", BASE)
    assert main(["validate", str(new), str(new), "--against", str(new)]) == 2
    assert "give exactly one spec file" in capsys.readouterr().err
    assert main(["validate", str(new), "--against", str(tmp_path / "missing.yaml")]) == 2
    assert "neither a spec file nor a pipeline of" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed")
    assert main(["validate", str(new), "--against", str(broken)]) == 2
    assert f"--against {broken}: the running spec does not load" in capsys.readouterr().err


def test_validate_against_a_deployed_pipeline_by_its_name(tmp_path: Path, capsys, monkeypatch) -> None:
    """`--against orders` takes the spec Airflow runs: the pipeline of that name in the pipelines folder."""
    deployed = tmp_path / "pipelines"
    deployed.mkdir()
    write(deployed, "orders.yaml", BASE)
    monkeypatch.setenv("LOCKSTEP_PIPELINES_DIR", str(deployed))
    changed_doc = copy.deepcopy(BASE)
    changed_doc["sink"]["topic"] = "out2"
    new = write(tmp_path, "orders-next.yaml", changed_doc)
    assert main(["validate", str(new), "--against", "orders", "--json"]) == 0
    assert [(c["field"], c["applies"]) for c in json.loads(capsys.readouterr().out)["changes"]] == [
        ("sink.topic", "next checkpoint")]
    assert main(["validate", str(new), "--against", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--against nope: neither a spec file nor a pipeline of" in err and "(pipelines: orders)" in err
