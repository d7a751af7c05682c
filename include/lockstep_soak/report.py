"""docs/RELIABILITY.md from a soak's result: pure text, so it is tested without services."""
from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from lockstep_soak.schedule import BAD_CASE_DESCRIPTIONS, DESCRIPTIONS, BadCase, FaultKind


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def render(doc: dict[str, Any], command: str, commit: str | None = None) -> str:
    """Markdown for a soak's ``SoakResult.to_json()``; ``command`` is how to run it again, ``commit``
    the code it ran."""
    audit = doc["audit"] or {}
    faults = doc["faults"]
    injected = [f for f in faults if f["injected"]]
    recoveries = [f["recovery_s"] for f in injected if f["recovery_s"] is not None]
    unrecovered = [f for f in injected if f["recovery_s"] is None]
    cycles = doc["cycles"]
    completed = sum(1 for c in cycles if c["ok"])
    timeout_s = doc["config"]["timeout_ms"] / 1000
    verdict = "PASSED" if doc["ok"] else "FAILED"
    lines = [
        "# Reliability: what exactly-once survived",
        "",
        f"Written by `lockstep soak` on {doc['started']}"
        + (f" at commit `{commit}`" if commit else "") + "; do not edit by hand. Run it again with",
        "",
        f"    {command}",
        "",
        "(the same seed injects the same faults at the same moments of each cycle; what the machine does "
        "in between is not replayed). How the soak works and what each figure means: "
        "[operations.md, Soak](operations.md#soak-faults-at-random).",
        "",
        f"## Result: {verdict}",
        "",
        "| | |",
        "|---|---|",
        f"| seed | {doc['seed']} |",
        f"| topology | {doc['topology']} (Spark master `{doc['config']['spark_master']}`, {doc['config']['writer']} writer) |",
        f"| cycles | {len(cycles)} ({doc['config']['cycles']} with new input and faults, the rest drain), "
        f"{completed} checkpoints completed, {len(cycles) - completed} failed and were recovered by later cycles |",
        f"| faults injected | {len(injected)} ({len(faults) - len(injected)} planned but missed: the cycle "
        "had already passed that moment) |",
        f"| longest recovery | {_s(max(recoveries, default=None))} (fault to the next completed checkpoint; "
        f"median {_s(statistics.median(recoveries) if recoveries else None)}) |",
        f"| faults never recovered from | {len(unrecovered)} |",
        f"| input records produced | {audit.get('produced', 0)} ({audit.get('covered', 0)} covered by the "
        f"consumer group's offsets, {audit.get('uncovered', 0)} not) |",
        f"| records audited in sink + dead letters | {audit.get('outputs', 0)} |",
        f"| **lost** | **{audit.get('lost', '-')}** |",
        f"| **duplicated** | **{audit.get('duplicated', '-')}** |",
        f"| unexpected (no covered input) / payload mismatch | {audit.get('unexpected', '-')} / "
        f"{audit.get('mismatched', '-')} |",
        f"| longest LSO pin, whole soak | {_s(doc['lso_longest_s'])} (an open transaction holds back "
        "`read_committed` readers; normal runs pin it while they write) |",
        f"| LSO pinned after the last fault | {_s(doc['lso_after_last_fault_s'])} (limit: one transaction "
        f"timeout, {timeout_s:.0f} s); still pinned at the end: {', '.join(doc['lso_open_at_end']) or 'none'} |",
        f"| stuck | {doc['stuck'] or 'no'} |",
        f"| duration | {doc['seconds'] / 60:.1f} min |",
        "",
        "## Faults by kind",
        "",
        "| kind | what is done | injected | missed | longest recovery | median recovery |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for kind in FaultKind:
        mine = [f for f in faults if f["kind"] == kind.value]
        if not mine:
            continue
        hit = [f for f in mine if f["injected"]]
        rec = [f["recovery_s"] for f in hit if f["recovery_s"] is not None]
        lines.append(f"| `{kind.value}` | {DESCRIPTIONS[kind]} | {len(hit)} | {len(mine) - len(hit)} | "
                     f"{_s(max(rec, default=None))} | {_s(statistics.median(rec) if rec else None)} |")
    lines += [
        "",
        "## Bad input",
        "",
        f"Every cycle's input holds {doc['config']['bad_per_cycle']} bad records at seeded positions. The "
        "transform is `lockstep_examples.python_rows:enrich`, a row-level Python function made safe with "
        f"`lockstep.rows.guarded`; the sink topic's `max.message.bytes` is {SINK_LIMIT_TEXT}.",
        "",
        "| case | input | records | to the sink | dead-lettered | reason recorded (numbers as N) |",
        "|---|---|---:|---:|---:|---|",
    ]
    cases = audit.get("cases", {})
    for case in ("valid", *(c.value for c in BadCase)):
        got = cases.get(case)
        if got is None:
            continue
        what = "a valid JSON order" if case == "valid" else BAD_CASE_DESCRIPTIONS[BadCase(case)]
        reasons = "; ".join(f"`{r}` ({n})" for r, n in got["reasons"].items()) or "-"
        lines.append(f"| {case} | {what} | {got['records']} | {got['to_sink']} | {got['dead_lettered']} | {reasons} |")
    failures = Counter(f"{c['failed_step']}: {_generic(c['reason'])}" for c in cycles if not c["ok"])
    lines += [
        "",
        "## How the failed cycles failed",
        "",
        "The last line each failed step wrote (numbers as N), by count. Every one of these checkpoints was "
        "aborted or rolled forward by a later cycle's plan, without a human step.",
        "",
        "| count | failed step: last line |",
        "|---:|---|",
        *[f"| {n} | `{reason}` |" for reason, n in failures.most_common(15)],
        "",
        "## Every fault",
        "",
        "| cycle | kind | at (fraction of the cycle) | held | target | recovery | note |",
        "|---:|---|---:|---:|---|---:|---|",
        *[f"| {f['cycle'] + 1} | `{f['kind']}` | {f['at']:.2f} | {f['hold_s']:.1f} s | {f['target']} | "
          f"{_s(f['recovery_s'])} | {f['note']} |" for f in faults],
        "",
    ]
    return "\n".join(lines)


SINK_LIMIT_TEXT = "16384 bytes, so a padded order is too large once transformed"


def _generic(reason: str, limit: int = 200) -> str:
    import re

    reason = re.sub(r"\b\d+\b", "N", reason.replace("|", "/").replace("`", "'"))
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"
