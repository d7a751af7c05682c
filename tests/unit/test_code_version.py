"""Which code wrote which checkpoint, without services: the claim's code fingerprint follows the transform's
source or query, the routes and the state operator, and nothing that only says how or when checkpoints run;
`lockstep checkpoints`, the Checkpoints page and `lockstep verify` name where it changed."""
from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from lockstep.model.checkpoint import CheckpointClaim, CheckpointView
from lockstep.model.offsets import OffsetRange
from lockstep.ops.verify import other_code
from lockstep.spec import parse_spec
from lockstep.steps.code_version import code_changes, code_fingerprint
from lockstep_airflow.overview import checkpoint_row, with_code_changes

BASE: dict[str, Any] = {
    "name": "p", "source": {"topics": ["t"]}, "transform": "lockstep_examples.orders:enrich",
    "sink": {"topic": "o", "dead_letter_topic": "d", "routes": {"big": "data.amount >= 100"}},
    "checkpoints": {"store": "s3://bucket/p", "max_records": 10},
}


def spec(edit=None, base: dict[str, Any] = BASE):
    doc = copy.deepcopy(base)
    if edit:
        edit(doc)
    return parse_spec(doc, "p.yaml")


def test_the_fingerprint_follows_what_computes_the_output_and_nothing_else(tmp_path: Path, monkeypatch) -> None:
    base = code_fingerprint(spec())
    assert code_fingerprint(spec()) == base  # deterministic
    assert code_changes(base, code_fingerprint(spec(lambda d: d["checkpoints"].update(max_records=99)))) == ()
    assert code_changes(base, code_fingerprint(spec(lambda d: d.update(
        transform="lockstep_examples.orders:enrich_accepting_text")))) == ("transform",)
    assert code_changes(base, code_fingerprint(spec(lambda d: d["sink"].update(routes={"big": "data.amount > 5"})))) \
        == ("sink.routes",)
    sql = spec(lambda d: d.update(transform={"sql": "SELECT * FROM input"}))
    assert code_changes(code_fingerprint(sql), code_fingerprint(spec(lambda d: d.update(
        transform={"sql": "SELECT * FROM input WHERE offset > 1"})))) == ("transform",)

    # the module's source is what counts, not only its name: an edited file is other code
    package = tmp_path / "codev_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "t.py").write_text("def f(df):\n    return df\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = spec(lambda d: d.update(transform="codev_pkg.t:f"))
    before = code_fingerprint(mine)
    (package / "t.py").write_text("def f(df):\n    return df.limit(1)\n")
    assert code_changes(before, code_fingerprint(mine)) == ("transform",)
    missing = code_fingerprint(spec(lambda d: d.update(transform="nowhere_module:f")))
    assert missing.fields["transform"] != before.fields["transform"]


def test_the_modules_of_its_own_package_a_transform_imports_are_its_code_too(tmp_path, monkeypatch) -> None:
    """A helper module beside the transform, imported absolutely or relatively (and what it imports in turn), is
    the transform's code; a module of the package it does not import, and a library, are not."""
    package = tmp_path / "codev_helpers"
    (package / "sub").mkdir(parents=True)
    for init in (package / "__init__.py", package / "sub" / "__init__.py"):
        init.write_text("")
    (package / "t.py").write_text("import json\nfrom codev_helpers import rates\nfrom .sub.deep import g\n"
                                  "from codev_helpers.boom import X\ndef f(df):\n    return df\n")
    (package / "boom.py").write_text("raise RuntimeError('imported')\nX = 1\n")  # read, never imported
    (package / "rates.py").write_text("RATE = 1\n")
    (package / "sub" / "deep.py").write_text("from ..leaf import LEAF\ndef g():\n    return LEAF\n")
    (package / "leaf.py").write_text("LEAF = 1\n")
    (package / "unrelated.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = spec(lambda d: d.update(transform="codev_helpers.t:f"))
    before = code_fingerprint(mine)
    (package / "unrelated.py").write_text("X = 2\n")
    assert code_changes(before, code_fingerprint(mine)) == ()
    assert not any(name.startswith("codev_helpers.") for name in sys.modules), "the helpers were imported"
    for module in ("rates.py", "sub/deep.py", "leaf.py", "boom.py"):
        changed = code_fingerprint(mine)
        (package / module).write_text((package / module).read_text() + "# edited\n")
        assert code_changes(changed, code_fingerprint(mine)) == ("transform",), module


def test_how_state_is_stored_is_not_code_but_what_it_computes_is() -> None:
    stateful = {**BASE, "transform": "lockstep_examples.orders:parse", "sink": {"topic": "o", "dead_letter_topic": "d"},
                "state": {"key_groups": 8, "event_time": {"column": "ts"},
                          "window": {"key": "customer", "size": "1m", "aggregates": {"n": "count(*)"}}}}
    base = code_fingerprint(spec(base=stateful))
    assert code_changes(base, code_fingerprint(spec(lambda d: d["state"].update(key_groups=16), stateful))) == ()
    assert code_changes(base, code_fingerprint(spec(lambda d: d["state"]["window"].update(keep_rows=True),
                                                    stateful))) == ()
    assert code_changes(base, code_fingerprint(spec(lambda d: d["state"]["window"].update(size="5m"), stateful))) \
        == ("state",)


def claim(cid: int, code) -> CheckpointClaim:
    return CheckpointClaim("p", cid, f"r{cid}", "2026-12-04T00:00:00+00:00", (OffsetRange("t", 0, cid, cid + 1),),
                           "group", code=code)


def test_the_claim_keeps_its_code_and_the_page_marks_where_it_changed() -> None:
    old, new = code_fingerprint(spec()), code_fingerprint(spec(lambda d: d.update(transform="m:g")))
    assert CheckpointClaim.from_json(claim(1, old).to_json()).code == old
    assert CheckpointClaim.from_json({k: v for k, v in claim(1, old).to_json().items() if k != "code"}).code is None
    views = [CheckpointView(claim(cid, code)) for cid, code in ((4, new), (3, new), (2, old), (1, None))]
    rows = with_code_changes([checkpoint_row(v) for v in views], views)
    assert [r.code_changed for r in rows] == [[], ["transform"], [], []]  # 1 recorded none: not judged


def test_verify_sets_aside_only_what_other_code_wrote_differently_and_says_from_where_todays_ran() -> None:
    from lockstep.ops.verify import VerifyReport, set_aside

    now, old = spec(), spec(lambda d: d.update(transform="lockstep_examples.orders:enrich_accepting_text"))
    codes = {1: code_fingerprint(old), 2: code_fingerprint(old), 3: code_fingerprint(now), 4: None}
    reasons = other_code(now, codes)
    assert sorted(reasons) == [1, 2]
    assert other_code(now, {3: code_fingerprint(now)}) == {}

    ranges = {cid: (OffsetRange("t", 0, 10 * cid, 10 * cid + 10),) for cid in (1, 2, 3)}
    report = VerifyReport([1, 2, 3], 30, 30, 31, lost=[("t", 0, 22), ("t", 0, 35)], unexpected=[("t", 0, 23)],
                          misrouted=[(("t", 0, 24), "a", "b")])
    set_aside(report, reasons, ranges)
    # checkpoint 1 (other code, written alike) stays checked; checkpoint 2's three findings are set aside;
    # checkpoint 3's loss (today's code) stands
    assert (report.lost, report.unexpected, report.misrouted) == ([("t", 0, 35)], [], [])
    [u] = report.unchecked
    assert u.range == ranges[2][0] and u.reason == (
        "checkpoint 2: written by other code (its transform is not the spec's now), and 3 of its offsets differ "
        "from what today's code writes: verify it with the spec and code that wrote it; today's code wrote "
        "checkpoints from 3 on (`lockstep verify --since-checkpoint 3`)")
