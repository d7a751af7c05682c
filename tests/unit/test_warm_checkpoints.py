"""`lockstep_dev.warm_checkpoints` without services: the warm-up pipelines' specs, and a failed warm-up's
last words. Its real checkpoints run in tests/integration/test_connect.py."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from lockstep.spec import load_spec
from lockstep_dev import warm_checkpoints


def test_the_warm_up_pipelines_are_valid_specs_of_their_own(tmp_path: Path) -> None:
    docs = warm_checkpoints.specs("lockstep-warm-up-ab12cd34", "lockstep-warm-up-ab12cd34-orders", "sc://h:1", "lockstep")
    assert sorted(docs) == ["dedup", "stateless", "windows"]
    for kind, doc in docs.items():
        path = tmp_path / f"{kind}.yaml"
        path.write_text(yaml.safe_dump(doc))
        spec = load_spec(path)
        # Nothing of a user's: its own name, topics, transactional ids and store.
        assert spec.name.startswith("lockstep-warm-up-ab12cd34-")
        assert doc["sink"]["topic"].startswith("lockstep-warm-up-ab12cd34-")
        assert doc["transactions"]["id_prefix"] == spec.name
        assert doc["checkpoints"]["store"] == f"s3://lockstep/lockstep-warm-up-ab12cd34/{kind}"
    assert docs["dedup"]["state"]["dedup"]["key"] == "order_id" and "window" in docs["windows"]["state"]


def test_a_failed_warm_up_names_its_cause_and_the_way_out() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}  # no Kafka connection
    with pytest.raises(RuntimeError) as failed:
        warm_checkpoints.run("sc://127.0.0.1:1", "lockstep", env, timeout_s=120)
    text = str(failed.value)
    assert text.startswith("the warm-up checkpoints on sc://127.0.0.1:1 failed (exit 1)")
    assert "kafka_default" in text, text
    assert text.splitlines()[-1].endswith("start the platform without --warm-checkpoints to see it in the first "
                                          "real checkpoint")


def test_each_round_runs_the_warm_up_pipelines_anew_and_names_its_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    rounds: list[tuple[str, str, int]] = []

    def one_round(remote: str, bucket: str, records: int) -> dict[str, dict[str, float]]:
        rounds.append((remote, bucket, records))
        return {"stateless": {"seconds": float(len(rounds))}, "dedup-1": {"seconds": 0.5}}

    monkeypatch.setattr(warm_checkpoints, "_round", one_round)
    done = warm_checkpoints._main("sc://h:1", "lockstep", 10, rounds=2)
    assert rounds == [("sc://h:1", "lockstep", 10)] * 2
    assert done == {"stateless (1)": {"seconds": 1.0}, "dedup-1 (1)": {"seconds": 0.5},
                    "stateless (2)": {"seconds": 2.0}, "dedup-1 (2)": {"seconds": 0.5}}
    rounds.clear()
    assert list(warm_checkpoints._main("sc://h:1", "lockstep", 10, rounds=1)) == ["stateless", "dedup-1"]
