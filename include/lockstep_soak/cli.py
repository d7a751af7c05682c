"""``lockstep soak``: start a platform of its own (free ports, data under var/soak), run the soak,
print the figures, write docs/RELIABILITY.md when asked, stop the platform. Exit 1 if anything was
lost, duplicated, left uncovered or pinned, or the pipeline got stuck."""
from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from lockstep_soak.driver import WINDOW_S
from lockstep_soak.schedule import FaultKind, kinds_for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cycles", type=int, default=10, help="checkpoint cycles with new input and faults (default 10)")
    parser.add_argument("--seed", type=int, help="replay the faults of an earlier soak (default: a new random seed)")
    parser.add_argument("--records", type=int, default=200, help="input records per cycle (default 200)")
    parser.add_argument("--bad", type=int, default=4, help="bad input records per cycle (default 4)")
    parser.add_argument("--faults", help="fault kinds to inject, comma-separated (default: every kind the mode has; "
                                         f"{', '.join(k.value for k in FaultKind)})")
    parser.add_argument("--min-faults", type=int, default=0,
                        help="go on past --cycles (up to three times as many) until this many faults were injected")
    parser.add_argument("--faults-per-cycle", type=int, default=2, choices=[1, 2, 3],
                        help="at most this many faults in one cycle, each of another family (default 2)")
    parser.add_argument("--more", type=float, default=0.5,
                        help="the chance of each further fault in a cycle, up to --faults-per-cycle (default 0.5)")
    parser.add_argument("--topology", choices=["cluster", "single"], default="cluster",
                        help="cluster: 3 brokers + Spark standalone (default); single: 1 broker + local Spark")
    parser.add_argument("--mode", choices=["connect", "submit"], default="connect",
                        help="connect: every run a session on the platform's Spark Connect server, which kill_connect "
                             "kills (the default, as users run); submit: a spark-submit per run")
    parser.add_argument("--spark-master", help="run the checkpoints' Spark here instead of the platform's master")
    parser.add_argument("--writer", choices=["jvm", "python"], default="jvm")
    parser.add_argument("--hold", default="2,12", metavar="MIN,MAX",
                        help="seconds a fault holds a service down, S3 slow or failing, a duplicated run stopped "
                             "(default 2,12)")
    parser.add_argument("--timeout-ms", type=int, default=60_000, help="transactions.timeout_ms of the soak pipeline")
    parser.add_argument("--stateful", action="store_true",
                        help="soak a stateful pipeline (event-time windows per customer, keyed state in S3); the audit "
                             "recomputes the windows and compares the committed state with the input")
    parser.add_argument("--window-s", type=int, default=WINDOW_S,
                        help=f"the stateful soak's window in seconds of event time; an order is 0.5 s after the one "
                             f"before, so 200 orders a cycle move it on by 100 s (default {WINDOW_S}: 5 such cycles)")
    parser.add_argument("--max-delta-ratio", type=float, default=1.0,
                        help="the stateful soak's state.compaction.max_delta_ratio (default 1.0; a tiny one compacts "
                             "every key group that gets a delta)")
    parser.add_argument("--iceberg", action="store_true",
                        help="the sink's records land in an Iceberg table too (sink.iceberg), which the audit reads back")
    parser.add_argument("--report", help="write the report (Markdown) here, e.g. docs/RELIABILITY.md")
    parser.add_argument("--keep", action="store_true", help="leave the soak's platform running afterwards")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def main(args: argparse.Namespace) -> int:
    from lockstep.paths import project_root
    from lockstep_dev.platform import Platform
    from lockstep_soak.driver import Soak, SoakConfig
    from lockstep_soak.report import render

    try:
        low, high = (float(v) for v in args.hold.split(","))
    except ValueError as exc:
        raise SystemExit(f"lockstep soak --hold: {args.hold!r} is not MIN,MAX in seconds, e.g. 2,12") from exc
    try:
        kinds = kinds_for(args.mode, None if args.faults is None else
                          tuple(FaultKind(k.strip()) for k in args.faults.split(",") if k.strip()))
    except ValueError as exc:
        raise SystemExit(f"lockstep soak --faults: {exc}; kinds: {', '.join(k.value for k in FaultKind)}") from exc
    work = project_root() / "var" / "soak"
    platform = Platform(state_dir=work / f"platform-{args.topology}", cluster=args.topology == "cluster",
                        free_ports=True)
    config = SoakConfig(work_dir=work, cycles=args.cycles, seed=args.seed, records_per_cycle=args.records,
                        bad_per_cycle=args.bad, kinds=kinds, faults_per_cycle=args.faults_per_cycle,
                        more_faults=args.more, min_faults=args.min_faults, timeout_ms=args.timeout_ms,
                        writer=args.writer, spark_master=args.spark_master, stateful=args.stateful, mode=args.mode,
                        hold_s=(low, high), window_s=args.window_s, max_delta_ratio=args.max_delta_ratio,
                        iceberg=args.iceberg)
    # SIGTERM (a CI timeout, kill) unwinds like Ctrl-C: the running step's tree is killed and the
    # platform stopped, instead of leaving them behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    commit = _commit()  # the code this soak runs, for the report
    platform.up(out=sys.stderr)
    try:
        result = Soak(platform, config, out=sys.stderr).run()
    finally:
        if not args.keep:
            platform.down(out=sys.stderr)
    doc = result.to_json()
    (work / f"{result.seed}.json").write_text(json.dumps(doc, indent=2))
    command = (f"lockstep soak --seed {result.seed} --cycles {args.cycles} --records {args.records} --bad {args.bad} "
               f"--min-faults {args.min_faults} --faults-per-cycle {args.faults_per_cycle} --more {args.more} "
               f"--topology {args.topology} --mode {args.mode} --writer {args.writer} --timeout-ms {args.timeout_ms}"
               + (" --stateful" if args.stateful else "") + (" --iceberg" if args.iceberg else "")
               + (f" --window-s {args.window_s}" if args.stateful and args.window_s != WINDOW_S else "")
               + (f" --max-delta-ratio {args.max_delta_ratio}" if args.stateful and args.max_delta_ratio != 1.0 else "")
               + (f" --hold {args.hold}" if args.hold != "2,12" else "")
               + (f" --faults {shlex.quote(args.faults)}" if args.faults is not None else "")
               + (f" --spark-master {shlex.quote(args.spark_master)}" if args.spark_master else ""))
    if args.report:
        Path(args.report).write_text(render(doc, command, commit))
        print(f"report written to {args.report}", file=sys.stderr)
    print(json.dumps(doc, indent=2) if args.json else summary(doc))
    return 0 if result.ok else 1


def summary(doc: dict[str, Any]) -> str:
    audit = doc["audit"] or {}
    injected = [f for f in doc["faults"] if f["injected"]]
    recoveries = [f["recovery_s"] for f in injected if f["recovery_s"] is not None]
    return (f"soak {'PASSED' if doc['ok'] else 'FAILED'} (seed {doc['seed']}): {len(doc['cycles'])} cycles, "
            f"{len(injected)} faults injected, longest recovery {max(recoveries, default=0):.1f} s; "
            f"{audit.get('produced', 0)} records produced, {audit.get('outputs', 0)} audited: "
            f"{audit.get('lost', '-')} lost, {audit.get('duplicated', '-')} duplicated, "
            f"{audit.get('unexpected', '-')} unexpected, {audit.get('uncovered', '-')} not covered; "
            f"LSO pinned {doc['lso_after_last_fault_s']:.1f} s after the last fault"
            + (_state_summary(audit["state"]) if audit.get("state") else "")
            + (f"; STUCK: {doc['stuck']}" if doc["stuck"] else ""))


def _state_summary(state: dict[str, Any]) -> str:
    return (f"; windows: {state['windows_expected']} expected, {state['windows_found']} found, {state['lost']} lost, "
            f"{state['duplicated']} duplicated, {state['unexpected']} unexpected, {state['wrong']} wrong value, "
            f"{state['late']} late records ({state['late_unplanned']} not produced late); state "
            f"{state['state_rows']} rows, {state['state_rows_expected']} expected from the input: "
            f"{'equal' if state['state_equal'] else 'DIFFERENT'}"
            + ("" if state["complete"] else f"; NOT COMPLETE: {'; '.join(state['unchecked'])}")
            + (f"; ERROR: {state['error']}" if state.get("error") else ""))


def _commit() -> str | None:
    import subprocess

    from lockstep.paths import project_root

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=project_root(), capture_output=True,
                             text=True, timeout=10)
    except OSError:
        return None
    return out.stdout.strip() or None
