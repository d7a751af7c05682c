"""docs/RELIABILITY.md from a soak's result: pure text, so it is tested without services."""
from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from lockstep_soak.schedule import BAD_CASE_DESCRIPTIONS, DESCRIPTIONS, STATE_FILE_KINDS, BadCase, FaultKind


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _median(values: list[float]) -> str:
    return _s(statistics.median(values) if values else None)


def _mode(config: dict[str, Any]) -> str:
    mode = config.get("mode", "submit")  # a soak from before connect mode ran in submit mode
    return ("connect mode: every run a session on a Spark Connect server on the cluster" if mode == "connect"
            else "submit mode: a spark-submit per run")


def render(doc: dict[str, Any], command: str, commit: str | None = None) -> str:
    """Markdown for a soak's ``SoakResult.to_json()``; ``command`` is how to run it again, ``commit``
    the code it ran."""
    audit = doc["audit"] or {}
    faults = doc["faults"]
    injected = [f for f in faults if f["injected"]]
    recoveries = [f["recovery_s"] for f in injected if f["recovery_s"] is not None]
    after_hold = [f["recovery_after_hold_s"] for f in injected if f.get("recovery_after_hold_s") is not None]
    failing = [f for f in injected if f.get("failed_checkpoint")]
    after_failed = [f["recovery_after_hold_s"] for f in failing if f.get("recovery_after_hold_s") is not None]
    unrecovered = [f for f in injected if f["recovery_s"] is None]
    cycles = doc["cycles"]
    completed = sum(1 for c in cycles if c["ok"])
    timeout_s = doc["config"]["timeout_ms"] / 1000
    verdict = "PASSED" if doc["ok"] else "FAILED"
    state = audit.get("state")
    stateful = bool(doc["config"].get("stateful"))
    per_record = ("sink (windows, checked below) + dead letters (each matched to its order: every bad order "
                  "once, no valid one)") if stateful else "sink + dead letters"
    lines = [
        "# Reliability: what exactly-once survived" + (" with keyed state" if stateful else ""),
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
        f"| topology | {doc['topology']} ({_mode(doc['config'])}, Spark master `{doc['config']['spark_master']}`, "
        f"{doc['config']['writer']} writer) |",
        f"| cycles | {len(cycles)} ({doc['config']['cycles']} with new input and faults, the rest drain), "
        f"{completed} checkpoints completed, {len(cycles) - completed} failed and were recovered by later cycles |",
        f"| faults injected | {len(injected)} ({len(faults) - len(injected)} planned but missed: the cycle "
        "had already passed that moment) |",
        f"| median recovery, the fault's own hold time excluded | **{_median(after_hold)}** (from the end of the "
        "fault: the service back, S3 normal again, the broker done aborting, to the next completed checkpoint; "
        f"longest {_s(max(after_hold, default=None))}) |",
        f"| the same, of the {len(failing)} faults that failed their cycle's checkpoint | {_median(after_failed)} "
        f"(longest {_s(max(after_failed, default=None))}; the other faults' checkpoints completed despite them) |",
        f"| median recovery, from the fault | {_median(recoveries)} (fault to the next completed checkpoint; "
        f"longest {_s(max(recoveries, default=None))}) |",
        f"| faults never recovered from | {len(unrecovered)} |",
        f"| checkpoints completed after repair | {_repaired(doc)} |",
        f"| input records produced | {audit.get('produced', 0)} ({audit.get('covered', 0)} covered by the "
        f"consumer group's offsets, {audit.get('uncovered', 0)} not) |",
        f"| records audited in {per_record} | {audit.get('outputs', 0)} |",
        f"| **lost** | **{audit.get('lost', '-')}** |",
        f"| **duplicated** | **{audit.get('duplicated', '-')}** |",
        f"| unexpected (no covered input) / payload mismatch | {audit.get('unexpected', '-')} / "
        f"{audit.get('mismatched', '-')} |",
        f"| longest LSO pin, whole soak | {_s(doc['lso_longest_s'])} (an open transaction holds back "
        "`read_committed` readers; normal runs pin it while they write) |",
        f"| LSO pinned after the last fault | {_s(doc['lso_after_last_fault_s'])} (limit: one transaction "
        f"timeout, {timeout_s:.0f} s); still pinned at the end: {', '.join(doc['lso_open_at_end']) or 'none'} |",
        *([f"| Iceberg table `{audit['table']['table']}` (sink.iceberg) read back | {audit['table']['rows']} rows for "
           f"{audit['table']['sink_records']} sink records: **{audit['table']['lost']} lost, "
           f"{audit['table']['duplicated']} duplicated**, {audit['table']['unexpected']} unexpected |"]
          if audit.get("table") else []),
        f"| stuck | {doc['stuck'] or 'no'} |",
        f"| duration | {doc['seconds'] / 60:.1f} min |",
        "",
        *(state_table(state, doc["config"]) if stateful else []),
        "## Faults by kind",
        "",
        "Recovery runs from the fault to the next completed checkpoint; its hold is the part that is the fault's own "
        "(a service down, S3 slow or failing, the broker's transaction timeout, a stopped first attempt), and the "
        "recovery after it is Lockstep's part.",
        "",
        "*Failed its checkpoint* counts the faults whose cycle's checkpoint failed, all of them and those that "
        "landed alone in their cycle: with others beside it, a fault's cycle may have failed for another's sake.",
        "",
        "| kind | what is done | injected | missed | failed its checkpoint (alone in the cycle) | median hold | "
        "median recovery after the hold | longest recovery after the hold | median recovery | outcome |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    landed_in: Counter[int] = Counter(f["cycle"] for f in faults if f["injected"])
    for kind in FaultKind:
        mine = [f for f in faults if f["kind"] == kind.value]
        if not mine:
            continue
        hit = [f for f in mine if f["injected"]]
        rec = [f["recovery_s"] for f in hit if f["recovery_s"] is not None]
        held = [f["held_s"] for f in hit if f.get("held_s") is not None]
        after = [f["recovery_after_hold_s"] for f in hit if f.get("recovery_after_hold_s") is not None]
        outcomes = Counter(f["status"] for f in hit if f.get("status"))
        outcome = "; ".join(f"{text}: {n}" for text, n in sorted(outcomes.items())) or "-"
        alone = [f for f in hit if landed_in[f["cycle"]] == 1]
        failed = sum(1 for f in hit if f.get("failed_checkpoint"))
        failed_alone = sum(1 for f in alone if f.get("failed_checkpoint"))
        lines.append(f"| `{kind.value}` | {DESCRIPTIONS[kind]} | {len(hit)} | {len(mine) - len(hit)} | "
                     f"{failed} ({failed_alone} of {len(alone)}) | {_median(held)} | {_median(after)} | "
                     f"{_s(max(after, default=None))} | {_median(rec)} | {outcome} |")
    lines += anchored_table(faults)
    lines += [
        "",
        "## Bad input",
        "",
        f"Every cycle's input holds {doc['config']['bad_per_cycle']} bad records at seeded positions. "
        + (STATEFUL_BAD_TEXT if stateful else "The transform is `lockstep_examples.python_rows:enrich`, a row-level "
           "Python function made safe with `lockstep.rows.guarded`; the sink topic's `max.message.bytes` is "
           f"{SINK_LIMIT_TEXT}."),
        "",
        "| case | input | records | to the sink | dead-lettered | reason recorded (numbers as N) |",
        "|---|---|---:|---:|---:|---|",
    ]
    cases = audit.get("cases", {})
    for case in ("valid", *(c.value for c in BadCase)):
        got = cases.get(case)
        if got is None:
            continue
        what = (STATEFUL_CASE_TEXT.get(case) if stateful else None) or \
            ("a valid JSON order" if case == "valid" else BAD_CASE_DESCRIPTIONS[BadCase(case)])
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
        "| cycle | kind | at (fraction of the cycle) | hold planned | held | target | recovery | after the hold | "
        "note |",
        "|---:|---|---:|---:|---:|---|---:|---:|---|",
        *[f"| {f['cycle'] + 1} | `{f['kind']}` | {f['at']:.2f} | {f['hold_s']:.1f} s | {_s(f.get('held_s'))} | "
          f"{f['target']} | {_s(f['recovery_s'])} | {_s(f.get('recovery_after_hold_s'))} | {f['note']} |"
          for f in faults],
        "",
    ]
    return "\n".join(lines)


SINK_LIMIT_TEXT = "16384 bytes, so a padded order is too large once transformed"
STATEFUL_BAD_TEXT = ("The transform is `lockstep_examples.orders:parse`: an order it rejects goes to the dead-letter "
                     "topic, never into a window. A late order is a valid one created an hour before the rest: "
                     "dead-lettered as `late` by any checkpoint that starts with a watermark past its window, "
                     "counted in its window otherwise (the first checkpoint has no watermark yet).")

#: What a case is in the stateful soak, where it is not what the stateless one's is.
STATEFUL_CASE_TEXT = {"valid": "a valid JSON order (counted in its window, not written itself)",
                      BadCase.POISON.value: "a JSON order whose amount is not a number: the transform gives it an error"}


def _yes(ok: bool) -> str:
    return "**yes**" if ok else "**NO**"


#: What a fault anchored at each failpoint interrupted.
ANCHOR_TEXT = {"state.mid_upload": "the checkpoint's state files half uploaded",
               "commit.mid_state_gc": "the commit's garbage collection of state files half done",
               "commit.between_commits": "the commit between its transactions' EndTxns",
               "commit.after_verify": "the commit as it sends its EndTxns"}


def anchored_table(faults: list[dict[str, Any]]) -> list[str]:
    """Faults that landed at a failpoint, by failpoint, kind and (at ``state.mid_upload``) the kind of
    state file just uploaded: a delta, a new base, or a compaction's new base."""
    anchored = [f for f in faults if f.get("anchor")]
    if not anchored:
        return []
    rows: Counter[tuple[str, str, str]] = Counter()
    missed: Counter[tuple[str, str]] = Counter()
    for f in anchored:
        if not f["injected"]:
            missed[(f["anchor"], f["kind"])] += 1
            continue
        target = f.get("target", "")
        found = next((k for k in STATE_FILE_KINDS if f"{f['anchor']} ({k})" in target), "")
        rows[(f["anchor"], f["kind"], found)] += 1
    lines = ["", "## Faults at a chosen moment", "",
             "Faults anchored at a failpoint land when a step pauses there."
             + (" At `state.mid_upload` the step had just uploaded its first state file of the checkpoint, a "
                "compaction's when it compacts a key group: a compaction's new base (`compaction`), deltas merged "
                "into one (`delta-merge`), else a `delta` or a `base`. At `commit.mid_state_gc` the commit was "
                "deleting the state files no retained checkpoint names (the first already gone when there were more): "
                "those of a checkpoint whose run failed in the cycle before."
                if any(f["anchor"] == "state.mid_upload" for f in anchored) else ""), "",
             "| failpoint | moment | kind | state file just uploaded | landed |", "|---|---|---|---|---:|"]
    for (anchor, kind, found), n in sorted(rows.items()):
        lines.append(f"| `{anchor}` | {ANCHOR_TEXT.get(anchor, '-')} | `{kind}` | {found or '-'} | {n} |")
    for (anchor, kind), n in sorted(missed.items()):
        lines.append(f"| `{anchor}` | {ANCHOR_TEXT.get(anchor, '-')} | `{kind}` | missed: the cycle never got "
                     f"there | {n} planned |")
    return lines


def state_table(state: dict[str, Any] | None, config: dict[str, Any]) -> list[str]:
    """The "Keyed state" section of a stateful soak: the windows against their recomputation from the
    whole committed input (``lockstep verify``), and the committed state against the input."""
    if not state:
        return ["## Keyed state", "", "**No figures: the stateful audit did not run.**", ""]
    from datetime import UTC, datetime

    wm = state.get("watermark_ms")
    when = "none" if wm is None else datetime.fromtimestamp(wm / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    samples = "; ".join(f"{k}: {', '.join(v)}" for k, v in (state.get("samples") or {}).items())
    lines = [
        "## Keyed state",
        "",
        f"The pipeline counts orders and sums their amounts per customer ({config.get('customers', '?')} customers) "
        f"in tumbling event-time windows of {config.get('window_s', '?')} s (`state.window`, watermark 2 s behind "
        "the slowest partition). After the drain, `lockstep verify` recomputes every window the final watermark "
        "has passed from the whole committed input in one batch and compares it with the sink; the latest "
        "completed checkpoint's state must hold exactly the valid orders whose window has not fired, counted "
        "from what the soak produced.",
        "",
        "| | |",
        "|---|---|",
        f"| windows expected (recomputed) / found in the sink | {state['windows_expected']} / {state['windows_found']} |",
        f"| **windows lost** | **{state['lost']}** |",
        f"| **windows duplicated** | **{state['duplicated']}** |",
        f"| windows unexpected / with a wrong value | {state['unexpected']} / {state['wrong']} |",
        f"| late records (dead-lettered as `late`) | {state['late']} ({state['late_unplanned']} of them produced "
        "in order, which must be 0) |",
        f"| final watermark | {when} (checkpoint {state.get('checkpoint') or '-'}) |",
        f"| state rows: manifest / expected from the input | {state.get('state_rows')} / "
        f"{state.get('state_rows_expected')} ({state.get('state_keys')} keys) |",
        f"| **state equal to recomputation** | {_yes(bool(state.get('state_equal')))} |",
        f"| recomputation complete | {_yes(bool(state.get('complete')))}"
        + (f" ({'; '.join(state['unchecked'])})" if state.get("unchecked") else "") + " |",
    ]
    if state.get("error"):
        lines.append(f"| error | {_cell(state['error'], 400)} |")
    if samples:
        lines.append(f"| samples | {_cell(samples, 600)} |")
    return [*lines, ""]


def _repaired(doc: dict[str, Any]) -> str:
    """The checkpoints the store calls "completed after repair", and how every checkpoint left in the
    store ended (``CheckpointView.status_text``)."""
    repaired = doc.get("repaired") or []
    statuses = doc.get("statuses") or {}
    text = f"{len(repaired)}" + (f" (checkpoints {', '.join(map(str, repaired))})" if repaired else "")
    if statuses:
        text += "; every checkpoint left in the store: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    return text


def _cell(text: str, limit: int) -> str:
    text = text.replace("|", "/").replace("`", "'").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _generic(reason: str, limit: int = 200) -> str:
    import re

    reason = re.sub(r"\b\d+\b", "N", reason.replace("|", "/").replace("`", "'"))
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"
