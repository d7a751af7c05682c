"""One DAG per pipeline spec: plan -> run (spark-submit) -> commit, or with ``checkpoints.tasks: one`` a single
``checkpoint`` task doing the three steps in one process.

One DAG run is one checkpoint. Runs are kept strictly sequential by
``max_active_runs=1`` for scheduled and manual runs, and for backfills (which
Airflow does not bound by ``max_active_runs``) by the plan task itself: it waits
while another run's checkpoint is still in flight, and the atomic claim in S3
makes a second owner of a checkpoint impossible whatever Airflow does. A
lag-triggered one-task DAG lets its next run start while one is committing
(`max_active_runs`): that run's plan waits for the checkpoint in flight.
"""
from __future__ import annotations

import hashlib
import logging
from collections.abc import MutableMapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import DAG, Asset, AssetWatcher

from lockstep.ops.drift import asset_name
from lockstep_airflow.operators import (
    IN_FLIGHT_WAIT,
    LockstepCheckpointOperator,
    LockstepCommitOperator,
    LockstepPlanOperator,
    LockstepRunOperator,
)
from lockstep_airflow.params import pipeline_params, read_restore_points

if TYPE_CHECKING:
    from lockstep.spec import PipelineSpec

log = logging.getLogger(__name__)
START_DATE = datetime(2024, 1, 1)
#: Airflow's longest DAG tag (``airflow.sdk.definitions.dag.TAG_MAX_LEN``: a longer one fails the DAG's
#: construction). A Kafka topic name may be 249 characters, so ``source:<topic>`` may be longer.
TAG_MAX_LEN = 100
#: Hex digits of the digest that ends a shortened tag: two long topics that share their first 89 characters
#: still get two tags.
TAG_DIGEST_LEN = 8


def fit_tag(tag: str) -> str:
    """``tag`` as it is when Airflow takes it, else its first characters, ``~`` (no topic name holds one) and
    the first `TAG_DIGEST_LEN` hex digits of the whole tag's SHA-256: stable from parse to parse, and
    distinct for two topics that differ anywhere."""
    if len(tag) <= TAG_MAX_LEN:
        return tag
    digest = hashlib.sha256(tag.encode()).hexdigest()[:TAG_DIGEST_LEN]
    return f"{tag[:TAG_MAX_LEN - TAG_DIGEST_LEN - 1]}~{digest}"


def sink_name(spec: PipelineSpec) -> str:
    """Where the pipeline's records go, in a word: its sink topic, or ``iceberg:<table>`` for a table alone."""
    if spec.sink.topic is not None or spec.sink.iceberg is None:
        return str(spec.sink.topic)
    return f"iceberg:{spec.sink.iceberg.table}"


def dag_tags(spec: PipelineSpec) -> list[str]:
    """The DAG's tags: ``lockstep``, its first source topic, its sink (topic, or table alone), a lag trigger's
    threshold, then the spec's own (`fit_tag` shortens one that names a long topic)."""
    lag = spec.checkpoints.trigger
    tags = ["lockstep", f"source:{spec.source.topics[0]}", f"sink:{sink_name(spec)}",
            *([f"trigger:lag>={lag.lag_records}"] if lag is not None else []), *spec.tags]
    return list(dict.fromkeys(fit_tag(t) for t in tags))


def doc_md(spec: PipelineSpec) -> str:
    c = spec.checkpoints
    return "\n".join([
        f"# Lockstep pipeline `{spec.name}`",
        spec.description or "",
        "",
        f"Reads **{', '.join(spec.source.topics)}** (`{spec.source.kafka_conn_id}`), applies `{spec.transform}`, "
        + (f"writes **{spec.sink.topic}**" if spec.sink.topic is not None else
         f"lands its records in Iceberg table **{spec.sink.iceberg.table if spec.sink.iceberg else '?'}** alone")
        + (f" and, by its routes, **{', '.join(t for t, _ in spec.sink.routes)}**" if spec.sink.routes else "")
        + f" with dead letters in **{spec.sink.dead_letter_topic}**, exactly once.",
        "",
        ("One run = one checkpoint, in one task (`checkpoints.tasks: one`): `checkpoint` fixes the offset ranges "
         f"and claims the checkpoint in `{c.store}`, writes them in Kafka transactions without committing, then "
         "verifies and commits every transaction and publishes offsets to consumer group "
         f"`{spec.source.consumer_group}`." if c.one_task else
         "One run = one checkpoint: `plan` fixes the offset ranges and claims the checkpoint in "
         f"`{c.store}`; `run` writes them in Kafka transactions without committing; `commit` verifies and "
         "commits every transaction, then publishes offsets to consumer group "
         f"`{spec.source.consumer_group}`."),
        "",
        *([f"**Lag-triggered** (`checkpoints.trigger`): a checkpoint starts when {c.trigger.lag_records:,} source "
           f"records are unread, or when some have waited {c.trigger.max_wait_s} s since the last checkpoint "
           f"completed; the watcher looks every {c.trigger.poll_s} s and starts no run while the topic is idle"
           + (f"; checkpoints start at least {c.trigger.min_interval_s} s apart." if c.trigger.min_interval_s else
              "."),
           ""] if c.trigger is not None else []),
        f"Budget {c.max_records} records per checkpoint; transactions time out after "
        f"{spec.transactions.timeout_ms} ms; {c.retain} completed checkpoints retained. Spec: `{spec.path}`.",
        "",
        f"Owner: **{spec.owner}**. " + (
            "A failed checkpoint alerts " + " and ".join(
                ([f"webhook connection `{spec.alerts.webhook_conn_id}`"] if spec.alerts.webhook_conn_id else [])
                + ([", ".join(spec.alerts.email)] if spec.alerts.email else []))
            + " once, until a run succeeds again." if spec.alerts is not None else "No alerts (`alerts` in the spec)."),
        "",
        "**Params**: `restore_from` (savepoint or `checkpoint:ID`, replays from there), `max_records`, "
        "`dry_run`. A failed checkpoint's task log ends with one line naming the checkpoint, the cause "
        "and the way out; the next run recovers by itself.",
    ])


def topic_assets(spec: PipelineSpec) -> list[Asset]:
    """The sink and dead-letter topics as Kafka Assets (``kafka://<first bootstrap server>/<topic>``,
    the Kafka provider's form), so downstream DAGs can be scheduled on committed output. A connection
    that cannot be read while the DAG file is parsed falls back to its id as the server part. A table without
    a sink topic is the sink's Asset itself: ``iceberg://<catalog connection>/<table>``."""
    try:
        from lockstep.connections import get_connection

        extra = get_connection(spec.sink.kafka_conn_id).extra or {}
        server = str(extra.get("bootstrap.servers", "")).split(",")[0].strip() or spec.sink.kafka_conn_id
    except Exception as exc:  # noqa: BLE001 - parsing a DAG file must not fail on a connection
        log.warning("%s: connection %s not readable at parse time (%s); assets are named after the connection id",
                    spec.name, spec.sink.kafka_conn_id, exc)
        server = spec.sink.kafka_conn_id
    iceberg = spec.sink.iceberg
    sink = (f"kafka://{server}/{spec.sink.topic}" if spec.sink.topic is not None or iceberg is None else
            f"iceberg://{iceberg.catalog_conn_id}/{iceberg.table}")
    return [Asset(uri=uri, name=asset_name(spec.name, role), group="lockstep", extra={"pipeline": spec.name, "role": role})
            for role, uri in (("sink", sink), ("dead letters", f"kafka://{server}/{spec.sink.dead_letter_topic}"),
                              *((f"route {t}", f"kafka://{server}/{t}") for t, _ in spec.sink.routes))]


def sink_asset(pipeline: str, pipelines_dir: Path | None = None) -> Asset:
    """The sink topic's Asset of ``pipeline``: schedule a DAG on it to run after each commit with records."""
    from lockstep.paths import pipelines_dir as default_dir
    from lockstep.spec import load_each

    for spec in load_each(pipelines_dir or default_dir())[0]:
        if spec.name == pipeline:
            return topic_assets(spec)[0]
    raise ValueError(f"no pipeline named {pipeline!r} in {pipelines_dir or default_dir()}")


def sink_assets(pipelines_dir: Path | None = None) -> list[Asset]:
    """The sink topics' Assets of every pipeline (an unreadable spec folder: none; a pipeline whose Asset
    cannot be made: not its)."""
    from lockstep.paths import pipelines_dir as default_dir
    from lockstep.spec import load_each

    try:
        specs = load_each(pipelines_dir or default_dir())[0]
    except OSError as exc:
        log.warning("no pipeline assets: %s", exc)
        return []
    assets = []
    for spec in specs:
        try:
            assets.append(topic_assets(spec)[0])
        except Exception as exc:  # noqa: BLE001 - one pipeline's Asset must not take the others' with it
            log.warning("pipeline %s: no sink Asset (%s)", spec.name, build_problem(spec, exc))
    return assets


def lag_asset(spec: PipelineSpec) -> Asset:
    """The Asset a lag-triggered pipeline's DAG is scheduled on: its watcher fires when a checkpoint
    should start (``lockstep_airflow.triggers``)."""
    from lockstep_airflow.triggers import LockstepLagTrigger

    lag = spec.checkpoints.trigger
    if lag is None:
        raise ValueError(f"pipeline {spec.name}: only a spec with checkpoints.trigger has a lag Asset")
    name = f"lockstep_{spec.name}_lag"
    trigger = LockstepLagTrigger(spec_path=str(spec.path), pipeline=spec.name, poll_s=lag.poll_s)
    return Asset(name=name, group="lockstep", extra={"pipeline": spec.name, "role": "lag trigger"},
                 watchers=[AssetWatcher(name=name, trigger=trigger)])


def schedule_of(spec: PipelineSpec) -> list[Asset] | str | None:
    """The spec's cron schedule, or for ``checkpoints.trigger`` its lag Asset."""
    return [lag_asset(spec)] if spec.checkpoints.trigger is not None else spec.checkpoints.schedule


#: ``max_active_runs`` of a lag-triggered one-task DAG: its watcher starts at most one run ahead of the one
#: running (`lockstep.rules.lag_trigger`), whose task waits in its process for the checkpoint before it, so two
#: runs are active at once; the claim in S3 keeps their checkpoints apart. Above two, so that Airflow's cached
#: "at max_active_runs" flag, which its dag-processor can write stale after the scheduler cleared it (the
#: next run then waits for the next parse: 11 s once in docs/BENCHMARKS-freshness.md's trials), is never set
#: in steady state; the extra slots only let a manual run wait beside them.
ONE_AHEAD_MAX_ACTIVE_RUNS = 4


def max_active_runs(spec: PipelineSpec) -> int:
    """1, or for a lag-triggered pipeline with one task per checkpoint `ONE_AHEAD_MAX_ACTIVE_RUNS`."""
    return ONE_AHEAD_MAX_ACTIVE_RUNS if spec.checkpoints.trigger is not None and spec.checkpoints.one_task else 1


def build_dag(spec: PipelineSpec, s3_clients: MutableMapping[str, Any] | None = None, *,
              restore_points: bool = True) -> DAG:
    """The pipeline's DAG; ``s3_clients`` (by connection id) are shared with the other pipelines of the parse.
    ``restore_points=False`` proposes none in the trigger form (no read of the store: `build_problems`)."""
    lag = spec.checkpoints.trigger
    with DAG(
        dag_id=spec.dag_id,
        schedule=schedule_of(spec),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=max_active_runs(spec),
        description=spec.description or f"Lockstep: {', '.join(spec.source.topics)} -> {sink_name(spec)}, exactly once",
        doc_md=doc_md(spec),
        tags=dag_tags(spec),
        params=pipeline_params(read_restore_points(spec, s3_clients) if restore_points else []),
        default_args={"owner": spec.owner},
        # Registered by the caller (`pipeline_dags` returns it), never by the ``with`` block: a DAG whose
        # construction failed half-way must not reach the DagBag.
        auto_register=False,
    ) as dag:
        if spec.checkpoints.one_task:
            # One process for the three steps; a retry plans again, which recovers this run's checkpoint first.
            LockstepCheckpointOperator(task_id="checkpoint", spec_path=spec.path, retries=3,
                                       wait_in_flight=IN_FLIGHT_WAIT if lag is not None else None,
                                       retry_delay=timedelta(seconds=5), retry_exponential_backoff=True,
                                       outlets=topic_assets(spec),
                                       doc_md="Recover, claim this checkpoint's ranges, run them in open "
                                              "transactions, then verify and commit every one; updates the sink "
                                              "and dead-letter Assets when it completed with records.")
            return dag
        plan = LockstepPlanOperator(task_id="plan", spec_path=spec.path, retries=2,
                                    retry_delay=timedelta(seconds=10), retry_exponential_backoff=True,
                                    doc_md="Recover, then fix and claim this checkpoint's offset ranges.")
        # Retrying the run is safe: the same transactional ids re-init and fence the failed attempt.
        run = LockstepRunOperator(task_id="run", spec_path=spec.path, retries=1, retry_delay=timedelta(seconds=10),
                                  doc_md="Bounded Spark run: produce in open transactions, record them.")
        commit = LockstepCommitOperator(task_id="commit", spec_path=spec.path, retries=3,
                                        retry_delay=timedelta(seconds=5), retry_exponential_backoff=True,
                                        outlets=topic_assets(spec),
                                        doc_md="Verify and commit every transaction; idempotent. Updates the "
                                               "sink and dead-letter Assets once the checkpoint completed with "
                                               "records (a checkpoint with none is skipped: no asset event).")
        plan >> run >> commit
    return dag


def pipeline_dags(pipelines_dir: Path | None = None) -> dict[str, DAG]:
    """A DAG for each spec that validates and builds: a spec that does not validate, or whose DAG cannot be
    built, is left out (`raise_spec_problems` shows why, as the import error of dags/lockstep_spec_errors.py),
    and every other pipeline keeps its DAG and runs.

    A task's process parses the file for its own DAG only (Airflow's parsing context names it): it reads in full
    and builds only that pipeline's spec and DAG, and the specs that could collide with it (`load_for_dag`), not
    every pipeline's, whose cost grows with the pipelines in the folder."""
    from airflow.sdk import get_parsing_context

    from lockstep.paths import pipelines_dir as default_dir
    from lockstep.spec import load_each, load_for_dag

    directory = pipelines_dir or default_dir()
    wanted = get_parsing_context().dag_id
    specs, problems = load_for_dag(directory, wanted) if wanted else load_each(directory)
    for problem in problems:
        log.warning("pipeline spec left out (no DAG until it is fixed): %s", problem)
    s3_clients: dict[str, Any] = {}  # one S3 client per connection for the restore points of every pipeline
    dags: dict[str, DAG] = {}
    for spec in specs:
        try:
            dags[spec.dag_id] = build_dag(spec, s3_clients)
        except Exception as exc:  # noqa: BLE001 - one pipeline's DAG must not take the others' with it
            log.warning("pipeline spec left out (no DAG until it is fixed): %s", build_problem(spec, exc))
    return dags


def build_problem(spec: PipelineSpec, exc: BaseException) -> str:
    """What `raise_spec_problems` and the parse's log say of a spec whose DAG could not be built."""
    return (f"{spec.path}: its DAG {spec.dag_id} cannot be built: {type(exc).__name__}: {' '.join(str(exc).split())}"
            " (a Lockstep bug, or a value Airflow refuses: report it with the spec)")


def build_problems(specs: list[PipelineSpec]) -> dict[str, str]:
    """By spec path, why the DAG of each of ``specs`` that `pipeline_dags` could not build failed: each is built
    again here, without reading its store (the dag-processor parses each DAG file in a process of its own, so
    this file cannot see what the pipelines' file hit)."""
    problems: dict[str, str] = {}
    for spec in specs:
        try:
            build_dag(spec, restore_points=False)
        except Exception as exc:  # noqa: BLE001 - reported, as the pipelines' file left it out
            problems[spec.path] = build_problem(spec, exc)
    return problems


class InvalidPipelineSpecs(Exception):
    """The specs that do not validate, each with its problems: what Airflow shows as an import error."""


def raise_spec_problems(pipelines_dir: Path | None = None) -> None:
    """Raise `InvalidPipelineSpecs` naming every problem of the specs that `pipeline_dags` leaves out (a DAG
    file's import error is what Airflow's UI shows for a file that cannot be loaded): the specs that do not
    validate, and those whose DAG cannot be built; nothing if there is none."""
    from lockstep.paths import pipelines_dir as default_dir
    from lockstep.spec import load_each, spec_files

    directory = pipelines_dir or default_dir()
    specs, problems = load_each(directory)
    unbuilt = build_problems(specs)
    if problems or unbuilt:
        kept = {s.path for s in specs if s.path not in unbuilt}
        left_out = [f.name for f in spec_files(directory) if str(f) not in kept]
        raise InvalidPipelineSpecs("\n".join([
            f"{len(left_out)} pipeline spec{'s' if len(left_out) != 1 else ''} in {directory} "
            f"{'have' if len(left_out) != 1 else 'has'} no DAG until fixed ({', '.join(left_out)}); every other "
            "pipeline keeps its DAG. Check specs with `lockstep validate` before merging them:",
            *(f"  {p}" for p in [*map(str, problems), *unbuilt.values()])]))
