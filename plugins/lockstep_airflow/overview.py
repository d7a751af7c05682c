"""What the Checkpoints page shows, gathered from S3 and Kafka as plain values.

The page is read-only and is looked at when something is wrong, so it must render
even when part of the platform is down: every external call is made per pipeline
and per source (store, savepoints, Kafka), and a failure becomes that section's
error message instead of an exception. Pipelines are gathered concurrently with
short Kafka timeouts so one unreachable cluster does not stall the whole page.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TypeVar

from lockstep.checkpoint import CheckpointView, Savepoint
from lockstep.errors import SpecError, TerminalError, TransientError
from lockstep.offsets import TopicPartition
from lockstep.spec import PipelineSpec, load_spec, load_specs

T = TypeVar("T")
#: Seconds to wait for Kafka metadata; a page view should fail fast, the DAG tasks may wait longer.
KAFKA_TIMEOUT_S = 5.0
S3_TIMEOUT_S = 5.0
MAX_WORKERS = 8


@dataclass(frozen=True)
class CheckpointRow:
    checkpoint_id: int
    status: str
    run_id: str
    claimed_at: str
    start_source: str
    restored_from: str | None
    ranges: list[str]
    records_in: int | None
    records_out: int | None
    records_dead_lettered: int | None
    transactions: int | None
    finished_at: str | None
    duration_s: float | None
    abort_reason: str | None
    replay_hint: str | None


@dataclass(frozen=True)
class SavepointRow:
    name: str
    checkpoint_id: int
    created_at: str


@dataclass(frozen=True)
class LagRow:
    """Lag of one partition: records up to the last stable offset the group has not committed yet."""

    partition: str
    committed: int | None
    last_stable: int | None
    lag: int | None


@dataclass
class Section:
    """One part of a pipeline's overview: its rows, or why they could not be read."""

    rows: list[Any] = field(default_factory=list)
    error: str | None = None


@dataclass
class PipelineOverview:
    name: str
    dag_id: str
    description: str
    topics: list[str]
    sink_topic: str
    dead_letter_topic: str
    consumer_group: str
    store: str
    checkpoints: Section
    savepoints: Section
    lag: Section

    @property
    def total_lag(self) -> int | None:
        if self.lag.error is not None or any(r.lag is None for r in self.lag.rows):
            return None
        return sum(r.lag for r in self.lag.rows)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "total_lag": self.total_lag}


@dataclass
class Overview:
    pipelines_dir: str
    pipelines: list[PipelineOverview]
    spec_errors: list[str]
    generated_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pipelines_dir": self.pipelines_dir, "generated_at": self.generated_at,
            "spec_errors": self.spec_errors, "pipelines": [p.to_json() for p in self.pipelines],
        }


# ---- pure conversions ------------------------------------------------------------------------------
def _parse_time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def duration_seconds(start: str | None, end: str | None) -> float | None:
    """Seconds between two ISO timestamps, None when either is missing, unparsable or naive/aware-mixed."""
    a, b = _parse_time(start), _parse_time(end)
    if a is None or b is None:
        return None
    try:
        return round((b - a).total_seconds(), 3)
    except TypeError:
        return None


def checkpoint_row(view: CheckpointView) -> CheckpointRow:
    prepared, completed, aborted = view.prepared, view.completed, view.aborted
    finished = completed.completed_at if completed else aborted.aborted_at if aborted else None
    return CheckpointRow(
        checkpoint_id=view.checkpoint_id, status=view.status.value, run_id=view.claim.run_id,
        claimed_at=view.claim.claimed_at, start_source=view.claim.start_source,
        restored_from=view.claim.restored_from, ranges=[str(r) for r in view.claim.ranges],
        records_in=prepared.records_in if prepared else None,
        records_out=prepared.records_out if prepared else None,
        records_dead_lettered=prepared.records_dead_lettered if prepared else None,
        transactions=len(prepared.transactions) if prepared else None,
        finished_at=finished, duration_s=duration_seconds(view.claim.claimed_at, finished),
        abort_reason=aborted.reason if aborted else None, replay_hint=aborted.replay_hint if aborted else None,
    )


def savepoint_row(savepoint: Savepoint) -> SavepointRow:
    return SavepointRow(savepoint.name, savepoint.checkpoint_id, savepoint.created_at)


def lag_rows(tps: list[TopicPartition], committed: dict[TopicPartition, int],
             stable: dict[TopicPartition, int]) -> list[LagRow]:
    """A partition the group never committed has no lag figure; it is shown, not guessed."""
    rows = []
    for tp in sorted(tps):
        c, s = committed.get(tp), stable.get(tp)
        rows.append(LagRow(tp.key, c, s, max(s - c, 0) if c is not None and s is not None else None))
    return rows


def describe_error(exc: BaseException) -> str:
    """Lockstep's own errors already say what to do; anything else is named by its type."""
    if isinstance(exc, (TerminalError, TransientError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _guarded(section: Section, read: Callable[[], list[Any]]) -> Section:
    try:
        section.rows = read()
    except Exception as exc:  # noqa: BLE001 - the page must render whatever one source does
        section.error = describe_error(exc)
    return section


# ---- I/O at the edges ------------------------------------------------------------------------------
def _partitions(admin: Any, topics: list[str], bootstrap: str) -> list[TopicPartition]:
    result: list[TopicPartition] = []
    for topic in topics:
        try:
            metadata = admin.list_topics(topic, timeout=KAFKA_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - KafkaException from librdkafka
            raise TransientError(f"Kafka at {bootstrap} did not answer within {KAFKA_TIMEOUT_S:g} s "
                                 f"(metadata of topic {topic}): {exc}") from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            reason = found.error if found is not None and found.error is not None else "unknown topic"
            raise TerminalError(f"source topic {topic!r} is not readable on {bootstrap}: {reason}")
        result.extend(TopicPartition(topic, p) for p in sorted(found.partitions))
    return result


def read_lag(spec: PipelineSpec) -> list[LagRow]:
    from lockstep import topics
    from lockstep.connections import kafka_config
    from lockstep.runtime import kafka_admin

    config = kafka_config(spec.source.kafka_conn_id)
    admin = kafka_admin(spec.source.kafka_conn_id)
    tps = _partitions(admin, list(spec.source.topics), str(config.get("bootstrap.servers")))
    stable = topics.last_stable_offsets(admin, tps)
    committed = topics.group_offsets(config, spec.source.consumer_group, tps)
    return lag_rows(tps, committed, stable)


def page_store(spec: PipelineSpec) -> Any:
    """The pipeline's checkpoint store, on an S3 client that gives up in seconds rather than minutes.

    ``runtime.checkpoint_store`` retries patiently, as a DAG task should; a page view should not.
    """
    import boto3
    from botocore.config import Config

    from lockstep.connections import s3_client_kwargs
    from lockstep.store import CheckpointStore

    config = Config(s3={"addressing_style": "path"}, connect_timeout=S3_TIMEOUT_S, read_timeout=S3_TIMEOUT_S,
                    retries={"max_attempts": 2, "mode": "standard"})
    client = boto3.client("s3", config=config, **s3_client_kwargs(spec.checkpoints.aws_conn_id))
    bucket, root = spec.checkpoint_location
    return CheckpointStore(client, bucket, root, spec.name)


def read_checkpoints(spec: PipelineSpec, limit: int) -> list[CheckpointRow]:
    return [checkpoint_row(v) for v in page_store(spec).recent(limit)]


def read_savepoints(spec: PipelineSpec) -> list[SavepointRow]:
    return [savepoint_row(s) for s in page_store(spec).list_savepoints()]


def load_pipeline_specs(directory: Path) -> tuple[list[PipelineSpec], list[str]]:
    """All specs that parse, and every problem found: one bad file must not hide the other pipelines."""
    try:
        return load_specs(directory), []
    except SpecError as exc:
        errors = [str(p) for p in exc.problems]
    except OSError as exc:
        return [], [f"cannot read pipeline specs from {directory}: {exc}"]
    specs = []
    for file in sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()):
        try:
            specs.append(load_spec(file))
        except SpecError:
            pass  # already listed in errors
    return specs, errors


def gather(directory: Path, limit: int = 20, now: Callable[[], datetime] | None = None) -> Overview:
    specs, errors = load_pipeline_specs(directory)
    with ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="lockstep-page") as pool:
        def section(read: Callable[[], list[Any]]) -> Any:
            return pool.submit(_guarded, Section(), read)

        futures = [(spec, section(lambda s=spec: read_checkpoints(s, limit)),
                    section(lambda s=spec: read_savepoints(s)), section(lambda s=spec: read_lag(s)))
                   for spec in specs]
        pipelines = [
            PipelineOverview(
                name=spec.name, dag_id=spec.dag_id, description=spec.description,
                topics=list(spec.source.topics), sink_topic=spec.sink.topic,
                dead_letter_topic=spec.sink.dead_letter_topic, consumer_group=spec.source.consumer_group,
                store=f"s3://{'/'.join(spec.checkpoint_location)}", checkpoints=checkpoints.result(),
                savepoints=savepoints.result(), lag=lag.result(),
            )
            for spec, checkpoints, savepoints, lag in futures
        ]
    stamp = (now or (lambda: datetime.now(timezone.utc)))().isoformat(timespec="seconds")
    return Overview(str(directory), pipelines, errors, stamp)
