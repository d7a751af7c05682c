"""Engine subcommands of the ``lockstep`` CLI: run, restore-plan, transactions, status, checkpoints,
savepoint, state, verify, replay, deadletters, failpoints, validate, spec schema. They call the coordinator
functions the Airflow tasks call. The tools' subcommands (dev, demo, bench, soak) are dispatched by ``cli.TOOLS``."""
from __future__ import annotations

__all__ = [
    "add_parsers", "run_command",
]

import argparse
import json
import logging
import os
import socket
import sys
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from lockstep.ops.drift import Finding
    from lockstep.rules.change_plan import Change
    from lockstep.spark.dead_letter_replay import Selection
    from lockstep.spec import PipelineSpec
    from lockstep.store.checkpoint_store import PipelineStore


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The engine's subcommands, a helper per group of them so that a new subcommand joins its kin; the
    order of the calls is the order ``lockstep --help`` lists them in."""
    _add_run_parsers(sub)
    _add_watch_parsers(sub)
    _add_savepoint_parsers(sub)
    _add_state_parsers(sub)
    _add_audit_parsers(sub)
    _add_iceberg_parsers(sub)
    _add_spec_parsers(sub)


def _add_run_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Running checkpoints and planning a restore: what a DAG run does, from a terminal."""
    run = sub.add_parser("run", help="run checkpoints: plan -> Spark -> commit, like one DAG run each")
    _spec(run)
    run.add_argument("--checkpoints", type=int, default=1, help="how many checkpoints to run (default 1)")
    run.add_argument("--restore-from", help="start the first checkpoint from a SAVEPOINT name, checkpoint:ID or "
                     "time:ISO (each partition's first record at or after that time, e.g. time:2026-11-20T10:00:00Z)")
    run.add_argument("--max-records", type=int, help="override the spec's per-checkpoint record budget")
    run.add_argument("--dry-run", action="store_true", help="plan only: show the ranges, claim and commit nothing")

    rp = sub.add_parser("restore-plan", help="what a restore would do, per partition: current position, restore "
                                             "position, records written again; claims nothing")
    _spec(rp)
    rp.add_argument("--from", dest="restore_from", required=True, metavar="SAVEPOINT|checkpoint:ID|time:ISO",
                    help="the restore_from value to plan")


def _add_watch_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Looking at a pipeline's checkpoints and transactions: what stands where, and settling what is stuck."""
    txns = sub.add_parser("transactions", help="open transactions of a pipeline mapped to its checkpoints, and foreign "
                                               "ones holding back its partitions; `resolve` settles them as recovery does")
    txns.add_argument("action", nargs="?", choices=["list", "resolve"], default="list",
                      help="list (the default): show them; resolve: roll prepared checkpoints forward, fence what "
                           "nothing owns, mark claimed checkpoints aborted (refused while a run is in flight)")
    _spec(txns)
    txns.add_argument("--dry-run", action="store_true", help="with resolve: say what it would do, change nothing")
    txns.add_argument("--accept", choices=["duplicates", "loss"],
                      help="with resolve: settle a stuck checkpoint, a partial commit that cannot be repaired exactly. "
                           "duplicates: read its lost transactions' input again, outputs already committed for "
                           "those partitions appear twice; loss: complete it without their output")
    status = sub.add_parser("status", help="where each source record stands: committed, in flight in open "
                                          "transactions, not read yet; age of the oldest unread record")
    _spec(status)
    status.add_argument("--statsd", metavar="HOST:PORT", help="also send the figures as StatsD gauges (default: "
                        "$LOCKSTEP_STATSD if set; nothing otherwise)")

    ckpts = sub.add_parser("checkpoints", help="recent checkpoints of a pipeline, newest first")
    _spec(ckpts)
    ckpts.add_argument("--limit", type=int, default=20)


def _add_savepoint_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Savepoints: named, retained copies of completed checkpoints, to restore from."""
    sp = sub.add_parser("savepoint", help="named, retained copies of completed checkpoints")
    sp_sub = sp.add_subparsers(dest="savepoint_command", required=True)
    create = sp_sub.add_parser("create", help="savepoint of the latest (or a given) completed checkpoint")
    _spec(create)
    create.add_argument("name")
    create.add_argument("--checkpoint", type=int, help="completed checkpoint id (default: latest)")
    copy = sp_sub.add_parser("copy", help="copy a savepoint to another pipeline (replay into another topic)")
    _spec(copy)
    copy.add_argument("name")
    copy.add_argument("--to-spec", required=True, help="the pipeline that will restore from the copy")
    for verb in ("list", "describe", "delete"):
        p = sp_sub.add_parser(verb)
        _spec(p)
        if verb != "list":
            p.add_argument("name")


def _add_state_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """A stateful pipeline's keyed state: its figures, its rows, re-keying."""
    st = sub.add_parser("state", help="a stateful pipeline's keyed state: its figures, its rows, re-keying")
    st_sub = st.add_subparsers(dest="state_command", required=True)
    stats = st_sub.add_parser("stats", help="keys, rows, bytes, files per key group, watermark, partitions' event "
                                            "time, pending timers and the last run's timings")
    _spec(stats)
    stats.add_argument("--checkpoint", type=int, help="completed checkpoint id (default: latest)")
    show = st_sub.add_parser("show", help="rows of the state (key, event time, key group, the operator's columns)")
    _spec(show)
    show.add_argument("--checkpoint", type=int, help="completed checkpoint id (default: latest)")
    show.add_argument("--key", help="only the rows of this key")
    show.add_argument("--limit", type=int, default=20, help="rows shown at most (default 20)")
    show.add_argument("--table", help="a table's rows (its latest value per key) instead of the keyed state's")
    rekey = st_sub.add_parser("rekey", help="accept a new number of key groups: the next checkpoint writes the "
                                            "whole state in that many")
    _spec(rekey)
    rekey.add_argument("--key-groups", type=int, required=True, metavar="N", help="the new number of key groups")


def _add_iceberg_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The upkeep of a pipeline's Iceberg table (``sink.iceberg``; docs/iceberg.md)."""
    ice = sub.add_parser("iceberg", help="look after a pipeline's Iceberg table: compact small files, expire "
                                         "snapshots, remove orphan files")
    ice_sub = ice.add_subparsers(dest="iceberg_command", required=True)
    compact = ice_sub.add_parser("compact", help="rewrite the rows of older checkpoints into fewer files")
    _spec(compact)
    compact.add_argument("--keep", type=int, default=10, metavar="N",
                         help="leave the newest N completed checkpoints' files as they are (default 10)")
    expire = ice_sub.add_parser("expire", help="expire old snapshots, never those of checkpoints not completed yet")
    _spec(expire)
    expire.add_argument("--older-than", default="7d", metavar="AGE",
                        help="seconds, or with s, m, h or d (default 7d); keep it longer than a commit's retries")
    orphans = ice_sub.add_parser("orphans", help="delete the data files no snapshot reads (dead run attempts, aborted "
                                                 "checkpoints, expired snapshots), never a checkpoint in flight's")
    _spec(orphans)
    orphans.add_argument("--older-than", default="3d", metavar="AGE",
                         help="only files last written before this: seconds, or with s, m, h or d (default 3d, as "
                              "Iceberg's own remove_orphan_files); keep it longer than a run takes")
    orphans.add_argument("--dry-run", action="store_true", help="count them, delete nothing")
    every = ice_sub.add_parser("upkeep", help="compact, expire, then remove orphans, as the lockstep_iceberg_upkeep "
                                              "DAG does; each action's figures are kept for the Checkpoints page")
    _spec(every)
    every.add_argument("--keep", type=int, default=10, metavar="N", help="as compact --keep (default 10)")
    every.add_argument("--expire-older-than", default="7d", metavar="AGE", help="as expire --older-than (default 7d)")
    every.add_argument("--orphans-older-than", default="3d", metavar="AGE",
                       help="as orphans --older-than (default 3d)")
    every.add_argument("--dry-run", action="store_true", help="count the orphans, delete none (compaction and expiry "
                                                              "still run)")


def _add_audit_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Auditing the output and handling the records set aside: verify, dead letters."""
    verify = sub.add_parser("verify", help="audit the output: lost and duplicated input offsets (exit 1 if any)")
    _spec(verify)
    verify.add_argument("--since-checkpoint", type=int, help="only checkpoints from this id on (e.g. after a replay)")
    verify.add_argument("--airflow-url", help="also check the sink Asset's events in this Airflow against the "
                        "checkpoints (user from $LOCKSTEP_AIRFLOW_USERNAME / $LOCKSTEP_AIRFLOW_PASSWORD)")

    rp = sub.add_parser("replay", help="compute completed checkpoints again through a new spec, from each one's own "
                                       "input, state and pins, and compare with what they wrote (writes nothing "
                                       "to the sinks; exit 0 the same, 1 the output or state changes, 2 some not compared)")
    _spec(rp)
    rp.add_argument("--compare", required=True, metavar="NEW_SPEC", help="the new version of the spec (its "
                    "transform, routes, formats, state); the running pipeline's store and sinks are --spec's")
    rp.add_argument("--from-checkpoint", type=int, metavar="ID", help="the first completed checkpoint to compare")
    rp.add_argument("--to-checkpoint", type=int, metavar="ID", help="the last completed checkpoint to compare")
    rp.add_argument("--last", type=int, metavar="N", help="only the newest N completed checkpoints of that range "
                                                          "(default: every retained one)")
    rp.add_argument("--examples", type=int, default=5, help="changed, added or removed records shown (default 5)")

    dl = sub.add_parser("deadletters", help="dead letters of a pipeline; replay them through the current transform, "
                                           "exactly once")
    dl_sub = dl.add_subparsers(dest="deadletters_command", required=True)
    for verb, text in (("list", "the dead letters, per checkpoint that wrote them, and whether already replayed"),
                       ("replay", "run dead letters again through the spec's current transform into the sink, as "
                                  "checkpoints of the pipeline <name>-replay")):
        p = dl_sub.add_parser(verb, help=text)
        _spec(p)
        which = p.add_mutually_exclusive_group()
        which.add_argument("--checkpoint", type=int, help="only the dead letters written by this checkpoint")
        which.add_argument("--since", metavar="TIME", help="only dead letters written at or after TIME "
                                                           "(ISO 8601 with a zone, e.g. 2026-11-20T10:00:00Z)")
        if verb == "replay":
            p.add_argument("--max-records", type=int, help="dead letters read per replay checkpoint (default: the "
                                                           "spec's checkpoints.max_records)")


def _add_spec_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """What needs no pipeline: the failpoints, checking spec files, the spec's own schema."""
    fp = sub.add_parser("failpoints", help="list the named failpoints and their actions (LOCKSTEP_FAILPOINTS=name=action)")
    fp.add_argument("--json", action="store_true")

    val = sub.add_parser("validate", help="check spec files before they are merged (CI, pre-commit): exit 0 all valid, "
                                          "1 some spec has problems, 2 the check could not run in full")
    val.add_argument("paths", nargs="*", metavar="PATH", help="spec files or folders of them (default: the pipelines "
                                                              "folder, $LOCKSTEP_PIPELINES_DIR or include/pipelines)")
    val.add_argument("--connect", action="store_true", help="also reach the services through each spec's connections: "
                     "topics and partitions, registry subjects, the checkpoint store and the stored state's key groups")
    val.add_argument("--json", action="store_true", help="one JSON document on stdout")
    val.add_argument("--against", metavar="RUNNING", help="with one spec: the change plan from the running version "
                     "of it, a spec file (e.g. from `git show main:<path>`) or the name of a pipeline deployed in the "
                     "pipelines folder: per change, whether it applies at the next "
                     "checkpoint, needs a step first, or is refused and the way out; exit 1 if one is refused")

    sc = sub.add_parser("spec", help="the pipeline spec's own description")
    sc_sub = sc.add_subparsers(dest="action", required=True)
    schema = sc_sub.add_parser("schema", help="print the spec's JSON Schema (draft 2020-12) for editors and CI "
                                              "(docs/lockstep-spec.schema.json is the same)")
    schema.add_argument("--output", metavar="FILE", help="write it to FILE instead of stdout")


def _spec(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spec", required=True, help="pipeline spec YAML (include/pipelines/*.yaml)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run_command(args: argparse.Namespace) -> int:
    if args.command == "failpoints":
        return _failpoints(args)
    if args.command == "validate":
        return _validate(args)
    if args.command == "spec":
        return _spec_schema(args)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    from lockstep.logs import quiet_clients

    quiet_clients()
    from lockstep.spec import load_spec

    spec = load_spec(args.spec)
    handler = {"run": _run, "checkpoints": _checkpoints, "savepoint": _savepoint, "verify": _verify,
               "restore-plan": _restore_plan, "status": _status, "transactions": _transactions,
               "deadletters": _deadletters, "state": _state, "replay": _replay, "iceberg": _iceberg}[args.command]
    return handler(spec, args)


def _emit(args: argparse.Namespace, doc: object, text: str) -> None:
    print(json.dumps(doc, indent=2, default=str) if args.json else text)


def _run(spec: PipelineSpec, args: argparse.Namespace) -> int:
    from lockstep.ops import metrics
    from lockstep.steps.coordinator import checkpoint_cycle

    results: list[dict[str, object]] = []
    for n in range(args.checkpoints):
        cycle = checkpoint_cycle(spec, restore=args.restore_from if n == 0 else None, max_records=args.max_records,
                                 dry_run=args.dry_run)
        planned = cycle.planned
        cid = planned.claim.checkpoint_id
        if cycle.outcome is None:
            results.append({"checkpoint": cid, "dry_run": True, "ranges": [r.to_json() for r in planned.claim.ranges],
                            "records": planned.range_plan.total_records})
            if not args.json:
                print(planned.describe())
            break
        assert cycle.view is not None and cycle.view.prepared is not None  # committed, so prepared
        prepared = cycle.view.prepared
        repaired = cycle.outcome.repair
        status = "completed after repair" if repaired else cycle.outcome.status.value
        row: dict[str, object] = {"checkpoint": cid, "status": status, "records_in": prepared.records_in,
               "records_out": prepared.records_out, "dead_lettered": prepared.records_dead_lettered,
               "transactions": len(cycle.outcome.committed), "seconds": round(cycle.seconds, 1),
               **({"repair": repaired.to_json()} if repaired else {})}
        results.append(row)
        metrics.send_commit_time_left(spec.name, spec.transactions.timeout_ms, cycle.outcome.time_left_ms)
        if not args.json:
            print(f"[{n + 1}/{args.checkpoints}] checkpoint {cid} {row['status']}: {row['records_in']} in, "
                  f"{row['records_out']} out, {row['dead_lettered']} dead-lettered, {row['transactions']} "
                  f"transactions, {row['seconds']} s" + (f"; {repaired.summary}" if repaired else ""), flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def _transactions(spec: PipelineSpec, args: argparse.Namespace) -> int:
    from lockstep.errors import TerminalError
    from lockstep.ops.open_transactions import table
    from lockstep.ops.transaction_console import look, resolve_transactions
    from lockstep.rules.run_ownership import cli_run_id
    from lockstep.steps.coordinator import CheckpointInFlight, Pipeline

    if args.accept and args.action != "resolve":
        raise TerminalError("--accept goes with resolve: lockstep transactions resolve --spec ... --accept ...")
    p = Pipeline.open(spec)
    if args.action == "list":
        if args.dry_run:
            raise TerminalError("--dry-run goes with resolve: lockstep transactions resolve --spec ... --dry-run")
        console = look(p)
        lines = table(console.rows) + [f"cluster of connection {c!r} not listed: {why}"
                                       for c, why in console.unreachable.items()]
        if console.refused:
            lines.append(f"resolve is refused now: {console.refused}")
        _emit(args, console.to_json(), "\n".join(lines))
        return 0
    run_id = cli_run_id(socket.gethostname(), os.getpid(), uuid.uuid4().hex[:8])
    try:
        console, lines = resolve_transactions(p, run_id, dry_run=args.dry_run, accept=args.accept)
    except CheckpointInFlight as exc:
        raise CheckpointInFlight(f"{exc}; nothing was resolved: settling a checkpoint under a live run would fence "
                                 "its transactions. Run `lockstep transactions resolve` again once that run "
                                 "has ended") from exc
    head = "dry run, nothing changed; resolve would:" if args.dry_run else "resolved:"
    doc = {"dry_run": args.dry_run, "before": [r.to_json() for r in console.rows], "actions": lines}
    _emit(args, doc, "\n".join([head, *(f"  {line}" for line in lines)]))
    return 0


def _restore_plan(spec: PipelineSpec, args: argparse.Namespace) -> int:
    from lockstep.rules.start_offsets import describe_restore
    from lockstep.steps.coordinator import Pipeline, restore_plan

    planned = restore_plan(Pipeline.open(spec), args.restore_from)
    doc = planned.to_json()
    latest = f"checkpoint {planned.latest_completed}" if planned.latest_completed else "none (the group's offsets)"
    lines = [f"restore of {spec.name} from {planned.source} (latest completed: {latest}); nothing is claimed",
             *describe_restore(planned.rows)]
    if planned.dropped:
        lines[-1] += f"; {planned.dropped}"
    _emit(args, doc, "\n".join(lines))
    return 0


def _status(spec: PipelineSpec, args: argparse.Namespace) -> int:
    from lockstep.ops import lag, metrics
    from lockstep.steps.client_factory import checkpoint_store

    target = metrics.metrics_target(args.statsd)  # a bad --statsd is refused before any read
    result = lag.read_lag(spec, checkpoint_store(spec))
    sent = metrics.send_gauges(spec.name, result.gauges(), target)
    _emit(args, result.to_json(), lag.describe(result) + (f"\n{sent} gauges sent to {target.where}"
                                                           if sent and target else ""))
    return 0


class _CheckpointRow(TypedDict):
    """One line of ``lockstep checkpoints`` (``--json``: one object)."""

    checkpoint: int
    status: str
    claimed_at: str
    start_source: str
    ranges: list[str]
    records_out: int | None
    dead_lettered: int | None
    transactions: int | None
    reason: str | None
    #: For a checkpoint completed after a repair: the transactions lost and the ranges given back.
    repair: dict[str, object] | None
    #: For a pipelined checkpoint (``checkpoints.pipelined``): the prepared one it was planned on top of.
    after: int | None
    #: Which code wrote it (its claim's code fingerprint, digested), and the parts that differ from the next
    #: older checkpoint's (empty: the same, or not recorded).
    code: str | None
    code_changed: list[str]
    #: With ``sink.iceberg``: the table's rows of the checkpoint, the snapshot staged on its branch, and the one on
    #: main that published them (None until the commit).
    iceberg: dict[str, object] | None


def _checkpoints(spec: PipelineSpec, args: argparse.Namespace) -> int:
    from lockstep.steps.client_factory import checkpoint_store
    from lockstep.steps.code_version import code_changes

    views = checkpoint_store(spec).recent(args.limit)
    rows: list[_CheckpointRow] = []
    for i, v in enumerate(views):
        older = views[i + 1].claim.code if i + 1 < len(views) else None
        rows.append(_CheckpointRow(
            checkpoint=v.checkpoint_id, status=v.status_text, claimed_at=v.claim.claimed_at,
            start_source=v.claim.start_source, ranges=[str(r) for r in v.claim.ranges if not r.is_empty],
            records_out=v.prepared.records_out if v.prepared else None,
            dead_lettered=v.prepared.records_dead_lettered if v.prepared else None,
            transactions=len(v.prepared.transactions) if v.prepared else None,
            reason=v.aborted.reason if v.aborted else None,
            repair=v.completed.repair.to_json() if v.completed and v.completed.repair else None,
            after=v.claim.after, code=v.claim.code.digest[:12] if v.claim.code else None,
            code_changed=list(code_changes(older, v.claim.code)),
            iceberg={"table": v.prepared.iceberg.table, "rows": v.prepared.iceberg.records,
                     "files": len(v.prepared.iceberg.files), "staged": v.prepared.iceberg.snapshot_id,
                     "published": v.completed.iceberg_snapshot if v.completed else None}
            if v.prepared and v.prepared.iceberg else None,
        ))
    repairs = {v.checkpoint_id: v.completed.repair.summary for v in views if v.completed and v.completed.repair}
    text = "\n".join(f"{r['checkpoint']:>6} {r['status']:9} {r['claimed_at'][:19]}  out={r['records_out']} "
                     f"dlq={r['dead_lettered']} txns={r['transactions']}  {', '.join(r['ranges']) or '(empty)'}"
                     + (f"\n       planned on top of checkpoint {r['after']}" if r["after"] is not None else "")
                     + (f"\n       code changed: {', '.join(r['code_changed'])}" if r["code_changed"] else "")
                     + (f"\n       reason: {r['reason']}" if r["reason"] else "")
                     + (f"\n       repair: {repairs[r['checkpoint']]}" if r["checkpoint"] in repairs else "")
                     + _iceberg_line(r["iceberg"])
                     for r in rows)
    _emit(args, rows, text or "no checkpoints yet")
    return 0


def _iceberg(spec: PipelineSpec, args: argparse.Namespace) -> int:
    from lockstep.ops import table_upkeep

    if args.iceberg_command == "compact":
        done = [table_upkeep.compact(spec, args.keep)]
    elif args.iceberg_command == "orphans":
        done = [table_upkeep.remove_orphans(spec, table_upkeep.parse_age(args.older_than), args.dry_run)]
    elif args.iceberg_command == "expire":
        done = [table_upkeep.expire(spec, table_upkeep.parse_age(args.older_than))]
    else:
        done = table_upkeep.upkeep(spec, args.keep, table_upkeep.parse_age(args.expire_older_than,
                                                                           "--expire-older-than"),
                                   table_upkeep.parse_age(args.orphans_older_than, "--orphans-older-than"),
                                   args.dry_run)
    if len(done) == 1:
        _emit(args, done[0].to_json(), done[0].line())
    else:
        _emit(args, {"actions": [d.to_json() for d in done]}, "\n".join(d.line() for d in done))
    return 0


def _iceberg_line(table: dict[str, object] | None) -> str:
    if table is None:
        return ""
    where = (f"published as snapshot {table['published']}" if table["published"] is not None
             else f"staged as snapshot {table['staged']}" if table["staged"] is not None else "no rows")
    return f"\n       iceberg {table['table']}: {table['rows']} rows in {table['files']} files, {where}"


class _DeadLetterRow(TypedDict):
    """One line of ``lockstep deadletters list`` (``--json``: one object)."""

    original: str
    dead_letter: str
    checkpoint: int | None
    replay_checkpoint: int | None
    error: str
    replayed: bool
    too_large: bool
    table: bool  #: a record of one of the pipeline's table topics: not the transform's input, never replayed


def _savepoint(spec: PipelineSpec, args: argparse.Namespace) -> int:
    from lockstep.errors import TerminalError
    from lockstep.model.savepoint import validate_savepoint_name
    from lockstep.steps.client_factory import checkpoint_store

    store = checkpoint_store(spec)
    cmd = args.savepoint_command
    if cmd == "create":
        sp = store.create_savepoint(validate_savepoint_name(args.name), args.checkpoint,
                                    datetime.now(UTC).isoformat())
        _emit(args, sp.to_json(), f"savepoint {sp.name} of checkpoint {sp.checkpoint_id} created")
    elif cmd == "list":
        sps = store.list_savepoints()
        _emit(args, [s.to_json() for s in sps],
              "\n".join(f"{s.name:24} checkpoint {s.checkpoint_id:<6} {s.created_at[:19]}" for s in sps) or "no savepoints")
    elif cmd == "describe":
        sp = store.get_savepoint(args.name)
        offsets = ", ".join(f"{k}={v}" for k, v in sorted(sp.end_offsets.items()))
        _emit(args, sp.to_json(), f"savepoint {sp.name}: checkpoint {sp.checkpoint_id}, created {sp.created_at}\n"
                                  f"restores from offsets: {offsets}")
    elif cmd == "copy":
        from lockstep.spec import load_spec

        target = load_spec(args.to_spec)
        if set(target.source.topics) != set(spec.source.topics):
            raise TerminalError(f"{args.to_spec}: source.topics {list(target.source.topics)} differ from "
                                f"{spec.path}'s {list(spec.source.topics)}; a savepoint's offsets only mean "
                                "something for the same source topics")
        sp = checkpoint_store(target).adopt_savepoint(store.get_savepoint(args.name), datetime.now(UTC).isoformat(),
                                                      source_bucket=spec.checkpoints.bucket)
        _emit(args, sp.to_json(), f"savepoint {sp.name} copied from {spec.name} to {target.name}; restore with "
                                  f"lockstep run --spec {args.to_spec} --restore-from {sp.name}")
    elif cmd == "delete":
        store.delete_savepoint(args.name)
        _emit(args, {"deleted": args.name}, f"savepoint {args.name} deleted")
    return 0


def _state(spec: PipelineSpec, args: argparse.Namespace) -> int:
    import time

    from lockstep.errors import TerminalError
    from lockstep.ops import state_report as sr
    from lockstep.steps.client_factory import checkpoint_store

    store = checkpoint_store(spec)
    files = store.state_files()
    if spec.tables and args.state_command in ("stats", "show") and (spec.state is None or
                                                                     getattr(args, "table", None)):
        return _tables(spec, args, store)
    if spec.state is None:
        raise sr.stateless(spec)
    if args.state_command == "rekey":
        found = sr.committed_state(store)
        refused = sr.rekey_refusal(found, args.key_groups)
        if refused:
            raise TerminalError(f"state rekey of {spec.name} refused: {refused}")
        assert found.manifest is not None
        at = datetime.now(UTC).isoformat()
        files.record_rekey(args.key_groups, found.manifest.key_groups, at)
        _emit(args, {"pipeline": spec.name, "key_groups": args.key_groups, "previous": found.manifest.key_groups,
                     "checkpoint": found.checkpoint_id, "at": at, "spec_key_groups": spec.state.key_groups},
              sr.rekey_text(spec, found, args.key_groups))
        return 0
    found = sr.committed_state(store, args.checkpoint)
    if found.manifest is None or found.checkpoint_id is None:
        _emit(args, {"pipeline": spec.name, "checkpoint": found.checkpoint_id, "state": None},
              sr.no_state_text(spec.name, found))
        return 0
    manifest = found.manifest
    if args.state_command == "stats":
        doc = sr.stats(found.checkpoint_id, manifest, sr.file_sizes(files, manifest),
                       spec.state.event_time.idle_timeout_ms, int(time.time() * 1000))
        _emit(args, {"pipeline": spec.name, **doc}, sr.describe_stats(spec.name, doc))
        return 0
    if args.limit < 1:
        raise TerminalError(f"--limit must be at least 1, got {args.limit}")
    shown = sr.read_rows(files, manifest, args.key, args.limit)
    _emit(args, {"pipeline": spec.name, "checkpoint": found.checkpoint_id, "key": args.key, "rows": shown.rows,
                 "more": shown.more},
          sr.describe_rows(spec.name, found.checkpoint_id, manifest, shown, args.key))
    return 0


def _tables(spec: PipelineSpec, args: argparse.Namespace, store: PipelineStore) -> int:
    """``lockstep state stats`` of a pipeline with tables and no keyed state, and ``state show --table``."""
    from lockstep.errors import TerminalError
    from lockstep.ops import state_report as sr

    checkpoint, tables = sr.committed_tables(store, args.checkpoint)
    if args.state_command == "stats":
        doc = sr.table_stats(checkpoint, tables)
        _emit(args, {"pipeline": spec.name, **doc}, sr.describe_table_stats(spec.name, doc))
        return 0
    name = args.table or spec.tables[0].name
    if name not in {t.name for t in spec.tables}:
        raise TerminalError(f"{spec.path}: no table {name!r} (tables: {', '.join(t.name for t in spec.tables)})")
    if args.limit < 1:
        raise TerminalError(f"--limit must be at least 1, got {args.limit}")
    version = tables.get(name)
    if checkpoint is None or version is None:
        _emit(args, {"pipeline": spec.name, "checkpoint": checkpoint, "table": name, "rows": []},
              f"{spec.name}: table {name} has no version yet (no completed checkpoint has read records)")
        return 0
    shown = sr.table_rows(store.state_files(), version, args.key, args.limit)
    _emit(args, {"pipeline": spec.name, "checkpoint": checkpoint, "table": name, "key": args.key, "rows": shown.rows,
                 "more": shown.more}, sr.describe_table_rows(spec.name, checkpoint, version, shown, args.key))
    return 0


def _drift(spec: PipelineSpec, airflow_url: str | None) -> list[Finding]:
    """The drift audit's findings: the group's offsets (and the Asset events) against the checkpoints."""
    from lockstep.connections import kafka_config
    from lockstep.kafka import broker_offsets, topics
    from lockstep.ops import drift
    from lockstep.rules.pinned import resolve_pinned
    from lockstep.steps.client_factory import checkpoint_store, kafka_admin

    store = checkpoint_store(spec)
    latest = store.latest_completed()
    findings = []
    if latest is not None:
        moved = resolve_pinned(latest.claim, spec).changed("source.kafka_conn_id")
        tps = topics.partitions(kafka_admin(spec.source.kafka_conn_id), spec.source.topics)
        group = broker_offsets.group_offsets(kafka_config(spec.source.kafka_conn_id), spec.source.consumer_group, tps)
        findings += drift.group_drift(latest, spec.source.consumer_group, group, str(moved.old) if moved else None)
    if airflow_url:
        events = drift.read_asset_events(airflow_url, spec.name)
        ids = [cid for e in events if isinstance(cid := e.get("checkpoint_id"), int)]
        retained = list(store.checkpoint_ids())
        views = {v.checkpoint_id: v for v in (store.view(i) for i in retained if ids and i >= min(ids))
                 if v is not None}
        findings += drift.asset_drift(events, views, retained[0] if retained else None)
    return findings


def _verify(spec: PipelineSpec, args: argparse.Namespace) -> int:
    from lockstep.ops import drift
    from lockstep.ops.verify import exit_code, verify_pipeline

    def progress(seen: int) -> None:
        print(f"\rreading output: {seen} records", end="", file=sys.stderr, flush=True)

    report = verify_pipeline(spec, args.since_checkpoint, progress if not args.json and sys.stderr.isatty() else None)
    findings = _drift(spec, args.airflow_url)
    flagged = [f for f in findings if not f.explained]
    doc = {**report.to_json(), "drift": [f.to_json() for f in findings], "drift_ok": not flagged}
    _emit(args, doc, report.summary() + "\n" + drift.summary(findings))
    return exit_code(report, drift_ok=not flagged)


def _replay(spec: PipelineSpec, args: argparse.Namespace) -> int:
    from lockstep.ops.compare import compare_pipeline, exit_code
    from lockstep.spec import load_spec

    report = compare_pipeline(spec, load_spec(args.compare), args.from_checkpoint, args.to_checkpoint, args.last,
                              args.examples)
    _emit(args, report.to_json(), "\n".join(report.lines()))
    return exit_code(report)


def _validate(args: argparse.Namespace) -> int:
    """Specs are checked without being loaded first: a spec that does not parse is a result, not a failure."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    from lockstep.logs import quiet_clients
    from lockstep.ops.validate import validate
    from lockstep.paths import pipelines_dir

    quiet_clients()
    if args.against is not None and len(args.paths) != 1:
        print("lockstep validate: --against compares one spec with its running version: give exactly one spec file",
              file=sys.stderr)
        return 2
    changes = _change_plan(args.paths[0], args.against) if args.against is not None else None
    if args.against is not None and changes is None:
        return 2
    report = validate(args.paths or [pipelines_dir()], connect=args.connect)
    if args.json:
        doc = report.to_json()
        if changes is not None:
            doc["changes"] = [c.to_json() for c in changes]
        print(json.dumps(doc, indent=2, default=str))
    else:
        print("\n".join(report.lines()))
        if changes is not None:
            print(f"change plan from {args.against}:" if changes else f"change plan from {args.against}: no change")
            print("\n".join(f"  {c.line()}" for c in changes))
        for error in report.errors:
            print(f"lockstep validate: {error}", file=sys.stderr)
    from lockstep.rules.change_plan import Applies

    refused = changes is not None and any(c.applies is Applies.REFUSED for c in changes)
    return max(report.exit_code(), 1 if refused else 0)


def _change_plan(new_path: str, running: str) -> list[Change] | None:
    """The change plan from the running spec to the new one; None when the running spec cannot be had (said on
    stderr). ``running`` is a spec file, or the name of a pipeline deployed in the pipelines folder (the one
    Airflow runs). A new spec that does not load has no plan: the validation's report names its problems."""
    from pathlib import Path

    from lockstep.errors import SpecError
    from lockstep.paths import pipelines_dir
    from lockstep.rules.change_plan import change_plan
    from lockstep.spec import load_each, load_spec

    deployed: PipelineSpec | None = None
    if not Path(running).exists():
        specs = {spec.name: spec for spec in load_each(pipelines_dir())[0]}
        deployed = specs.get(running)
        if deployed is None:
            print(f"lockstep validate: --against {running}: neither a spec file nor a pipeline of {pipelines_dir()} "
                  f"(pipelines: {', '.join(sorted(specs)) or 'none'})", file=sys.stderr)
            return None
    try:
        old = deployed if deployed is not None else load_spec(running)
    except (SpecError, OSError) as exc:
        print(f"lockstep validate: --against {running}: the running spec does not load: {exc}", file=sys.stderr)
        return None
    try:
        new = load_spec(new_path)
    except (SpecError, OSError):
        return []
    return change_plan(old, new)


def _spec_schema(args: argparse.Namespace) -> int:
    """The JSON Schema rendered from the spec's one declaration (`lockstep.spec.shape`), the shape the checker
    reads: an editor completes and checks against the same keys, defaults and bounds."""
    from lockstep.errors import TerminalError
    from lockstep.spec.shape import spec_json_schema_text

    text = spec_json_schema_text()
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            raise TerminalError(f"cannot write the spec's schema to {args.output}: {exc.strerror or exc}") from exc
        print(f"wrote the spec's JSON Schema to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _failpoints(args: argparse.Namespace) -> int:
    from lockstep.model.failpoints import ACTIONS, FAILPOINTS

    text = "\n".join([*(f"{name:28} {where}" for name, where in FAILPOINTS.items()), "",
                      "actions (LOCKSTEP_FAILPOINTS=name=action,name=action):",
                      *(f"{action:28} {what}" for action, what in ACTIONS.items())])
    _emit(args, {"failpoints": FAILPOINTS, "actions": ACTIONS}, text)
    return 0


def _deadletters(spec: PipelineSpec, args: argparse.Namespace) -> int:
    from lockstep.spark.dead_letter_replay import Selection

    selection = Selection(checkpoint=args.checkpoint, since=args.since)
    if args.deadletters_command == "list":
        return _deadletters_list(spec, selection, args)
    return _deadletters_replay(spec, selection, args)


def _deadletters_list(spec: PipelineSpec, selection: Selection, args: argparse.Namespace) -> int:
    from lockstep.ops.deadletters import read_dead_letters
    from lockstep.spark.dead_letter_replay import already_in_sink, completed_replays, replay_spec
    from lockstep.steps.client_factory import checkpoint_store

    in_sink = already_in_sink(completed_replays(checkpoint_store(replay_spec(spec))))
    tables = {t.topic for t in spec.tables}  # a table record's dead letter: fixed in its topic, never replayed
    rows: list[_DeadLetterRow] = []
    for where, letter in read_dead_letters(spec):
        if not selection.takes(letter):
            continue
        t, p, o = letter.original
        rows.append(_DeadLetterRow(original=f"{t}:{p}@{o}", dead_letter=where, checkpoint=letter.checkpoint,
                                   replay_checkpoint=letter.replayed_by, error=letter.error,
                                   replayed=letter.original in in_sink, too_large=letter.too_large,
                                   table=letter.original[0] in tables))
    lines, current = [], None
    for row in sorted(rows, key=lambda r: (r["replay_checkpoint"] is not None, r["replay_checkpoint"] or 0,
                                           r["checkpoint"] or 0)):
        label = (f"replay checkpoint {row['replay_checkpoint']} (rejected again)" if row["replay_checkpoint"]
                 else f"checkpoint {row['checkpoint']}")
        if label != current:
            current = label
            lines.append(f"{label}:")
        state = ("replayed" if row["replayed"] else "too large, cannot be replayed" if row["too_large"]
                 else "a table's record: write the fixed row to its topic" if row["table"] else "due")
        lines.append(f"  {row['original']:32} {state:9} {row['error'][:100]}")
    due = sum(1 for r in rows if not r["replayed"] and not r["too_large"] and not r["table"])
    lines.append(f"{len(rows)} dead letters ({selection.describe()}): {len(rows) - due} replayed or not replayable, "
                 f"{due} due" + (f"; replay them with lockstep deadletters replay --spec {spec.path}" if due else ""))
    _emit(args, rows, "\n".join(lines))
    return 0


def _deadletters_replay(spec: PipelineSpec, selection: Selection, args: argparse.Namespace) -> int:
    from lockstep.errors import TerminalError
    from lockstep.spark.dead_letter_replay import REPLAYED_PART, SELECTION_PART, Replayed, last_unselective, replay_spec
    from lockstep.steps.coordinator import checkpoint_cycle

    if spec.state is not None:
        raise TerminalError(f"{spec.path}: {spec.name} is stateful: a replayed dead letter would land in windows or "
                            "keys whose state has moved on (a window that already fired, a key already passed), so "
                            "dead-letter replay is for stateless pipelines. Fix the input upstream and restore from "
                            "a savepoint before it (`lockstep run --restore-from`) to recompute with it")
    if spec.sink.table_only:
        raise TerminalError(f"{spec.path}: {spec.name} lands its records in an Iceberg table alone (no sink.topic), and "
                            "a dead-letter replay writes what it recovers to sink.topic, not to the table (not yet: "
                            "docs/iceberg.md). Fix the input upstream and backfill from a savepoint before it "
                            "(`lockstep run --restore-from`)")
    rspec = replay_spec(spec)
    results: list[dict[str, object]] = []
    target, covered, n = None, 0, 0

    def first_restore(store: PipelineStore) -> str | None:
        latest = store.latest_completed()
        return selection.restore(last_unselective(store), latest.checkpoint_id if latest else None)

    def pin_selection(store: PipelineStore, cid: int) -> None:  # a retried run applies the same selection
        store.write_sidecar(cid, SELECTION_PART, selection.to_json())

    while True:
        # later rounds continue after the previous one, whatever the selection
        cycle = checkpoint_cycle(rspec, restore=first_restore if n == 0 else None, max_records=args.max_records,
                                 before_run=pin_selection)
        planned, view, outcome = cycle.planned, cycle.view, cycle.outcome
        assert outcome is not None and view is not None and view.prepared is not None  # committed, so prepared
        cid = planned.claim.checkpoint_id
        doc = cycle.store.sidecar(cid, REPLAYED_PART)
        done = Replayed.from_json(doc) if doc else Replayed()
        row = {"replay_checkpoint": cid, "pipeline": rspec.name, "status": outcome.status.value,
               "selection": selection.to_json(), "offsets": view.prepared.records_in, "dead_letters_read": done.read,
               "replayed": len(done.fed), "to_sink": len(done.to_sink),
               "dead_lettered_again": len(done.fed) - len(done.to_sink),
               "skipped_duplicates": done.skipped_duplicates, "skipped_too_large": done.skipped_too_large,
               "skipped_tables": done.skipped_tables, "not_selected": done.not_selected, "warnings": list(done.warnings),
               "seconds": round(cycle.seconds, 1)}
        results.append(row)
        if not args.json:
            print(f"replay checkpoint {cid} of {rspec.name} {row['status']} ({selection.describe()}): "
                  f"{row['dead_letters_read']} dead letters read, {row['replayed']} replayed: {row['to_sink']} "
                  f"written to the sink, {row['dead_lettered_again']} dead-lettered again; skipped "
                  f"{row['skipped_duplicates']} already replayed, {row['skipped_too_large']} too large, "
                  + (f"{row['skipped_tables']} table records (fix those in their table's topic), "
                     if row["skipped_tables"] else "")
                  + f"{row['not_selected']} not selected; {row['seconds']} s", flush=True)
        if target is None:
            # Bounded by what was there when the command started: dead letters the replay itself
            # writes (rejected again) wait for the next invocation instead of looping forever.
            target = planned.range_plan.total_records + planned.range_plan.backlog_remaining
        covered += planned.range_plan.total_records
        n += 1
        if covered >= target or planned.range_plan.total_records == 0:
            break
    if args.json:
        print(json.dumps(results, indent=2))
    return 0
