"""Drift audit: do the facts others read agree with the checkpoints?

Two things outside the checkpoint store tell the world how far a pipeline got: the consumer group's
offsets (what lag tools read) and the Airflow Asset events of the sink (what downstream DAGs run
on). Both are written after a checkpoint completes, so either can drift from it: a publish that
failed, a group moved by hand, an event without a committed checkpoint. The checks here are pure;
``lockstep verify`` gathers the facts and prints the findings.

A finding is *explained* when Lockstep itself knows why it happened and it needs no action (a
source cluster changed since the checkpoint, a checkpoint completed without an Airflow run). An
unexplained one makes ``verify`` exit 1 and says the way out.
"""
from __future__ import annotations

__all__ = [
    "Finding", "asset_name",
]

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from lockstep.logs import redact_urls
from lockstep.model.checkpoint import CheckpointStatus, CheckpointView
from lockstep.model.offsets import TopicPartition, offsets_from_json

#: Environment of ``lockstep verify --airflow-url``: the Airflow user whose token reads Asset events.
AIRFLOW_USER_ENV, AIRFLOW_PASSWORD_ENV = "LOCKSTEP_AIRFLOW_USERNAME", "LOCKSTEP_AIRFLOW_PASSWORD"


def asset_name(pipeline: str, role: str) -> str:
    """The Airflow Asset name of a pipeline's output topic (role ``sink`` or ``dead letters``); the DAG
    factory names its outlets with it and ``verify`` finds the sink's events by it."""
    return f"{pipeline}: {role}"


@dataclass(frozen=True)
class Finding:
    kind: str  # "group" or "asset"
    subject: str  # a partition, or "checkpoint N"
    message: str
    explained: bool = False

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.kind} {self.subject}: {self.message}" + (" (explained)" if self.explained else "")


def group_drift(latest: CheckpointView | None, group_name: str, group: Mapping[TopicPartition, int],
                moved_from: str | None = None) -> list[Finding]:
    """Compare the group's offsets with the latest completed checkpoint's end offsets.

    ``moved_from``: the connection the checkpoint read its source from, when the spec's
    ``source.kafka_conn_id`` has changed since (the commit then does not publish, on purpose)."""
    if latest is None or latest.completed is None:
        return []
    cid = latest.checkpoint_id
    ends = offsets_from_json(latest.completed.end_offsets)
    if moved_from is not None:
        return [Finding("group", group_name, f"not compared: checkpoint {cid} read its source through connection "
                        f"{moved_from!r}, and the spec's source.kafka_conn_id has changed since, so its offsets are "
                        "not published to this cluster's group", explained=True)]
    rerun = (f"re-run the commit of checkpoint {cid} (`lockstep run` commits the next one; an Airflow commit task "
             "can be cleared: a commit is idempotent and publishes again)")
    findings = []
    for tp, end in sorted(ends.items()):
        at = group.get(tp)
        if at == end:
            continue
        if at is None:
            findings.append(Finding("group", tp.key, f"consumer group {group_name} has no offset, checkpoint {cid} "
                                    f"ended at {end}: its publish failed or the group was deleted; {rerun}"))
        elif at < end:
            findings.append(Finding("group", tp.key, f"consumer group {group_name} is at {at}, {end - at:,} behind "
                                    f"checkpoint {cid}'s end {end}: its publish failed, or the group was moved back "
                                    f"by hand; lag tools over-report. {rerun}"))
        elif latest.claim.restored_from is not None:
            findings.append(Finding("group", tp.key, f"consumer group {group_name} is at {at}, ahead of checkpoint "
                                    f"{cid}'s end {end}: that checkpoint restored from {latest.claim.restored_from} "
                                    f"and moved the pipeline back, but its publish did not reach the group; {rerun}"))
        else:
            findings.append(Finding("group", tp.key, f"consumer group {group_name} is at {at}, {at - end:,} ahead of "
                                    f"checkpoint {cid}'s end {end}: moved by hand or committed by another consumer "
                                    "using the group. Lockstep plans from its checkpoints, so nothing is skipped, but "
                                    "lag tools under-report and commits never move a group backwards: set it back "
                                    f"with kafka-consumer-groups.sh --group {group_name} --topic {tp.topic}:"
                                    f"{tp.partition} --reset-offsets --to-offset {end} --execute (or stop the other "
                                    "consumer)"))
    return findings


def asset_drift(events: Iterable[Mapping[str, object]], views: Mapping[int, CheckpointView],
                first_retained: int | None = None) -> list[Finding]:
    """Compare sink Asset events (their ``extra``: pipeline, checkpoint_id, records, end_offsets) with
    the checkpoints in the store (``views`` by id; ids below ``first_retained`` were deleted by
    retention and are not judged)."""
    findings = []
    seen: set[int] = set()
    for extra in events:
        cid = extra.get("checkpoint_id")
        if not isinstance(cid, int):
            findings.append(Finding("asset", "event", f"an event without a checkpoint id: {dict(extra)!r}"))
            continue
        seen.add(cid)
        if first_retained is not None and cid < first_retained:
            continue
        view = views.get(cid)
        subject = f"checkpoint {cid}"
        if view is None or view.status is not CheckpointStatus.COMPLETED:
            status = view.status.value if view is not None else "not in the store"
            findings.append(Finding("asset", subject, f"has a sink asset event but is {status}: downstream DAGs ran "
                                    "for output that was never committed; re-run them after the next completed "
                                    "checkpoint"))
            continue
        assert view.completed is not None  # status COMPLETED
        if extra.get("end_offsets") not in (None, dict(view.completed.end_offsets)):
            findings.append(Finding("asset", subject, "its event's end offsets differ from the checkpoint's: "
                                    f"{extra.get('end_offsets')} vs {dict(view.completed.end_offsets)}"))
        if view.prepared is not None and extra.get("records") not in (None, view.prepared.records_out):
            findings.append(Finding("asset", subject, f"its event says {extra.get('records')} records, the "
                                    f"checkpoint wrote {view.prepared.records_out}"))
    since = min(seen) if seen else None
    for cid, view in sorted(views.items()):
        if since is None or cid <= since or cid in seen or view.status is not CheckpointStatus.COMPLETED:
            continue
        if view.prepared is not None and view.prepared.records_out > 0:
            findings.append(Finding("asset", f"checkpoint {cid}", f"completed with {view.prepared.records_out:,} "
                                    "records but has no sink asset event: it was rolled forward by the next run's "
                                    "plan or completed by the CLI; its records are in the topic and the next "
                                    "event follows them", explained=True))
    return findings


def read_asset_events(url: str, pipeline: str) -> list[dict[str, object]]:
    """The ``extra`` of every event of the pipeline's sink Asset, oldest first, from Airflow's REST API."""
    import os
    import urllib.parse

    from lockstep.errors import TerminalError
    from lockstep.ops.airflow_client import AirflowClient, AirflowError

    user, password = os.environ.get(AIRFLOW_USER_ENV), os.environ.get(AIRFLOW_PASSWORD_ENV)
    if not user or not password:
        raise TerminalError(f"--airflow-url needs {AIRFLOW_USER_ENV} and {AIRFLOW_PASSWORD_ENV} in the environment "
                            "(an Airflow user allowed to read assets)")
    try:
        client = AirflowClient(url, user, password)
        name = asset_name(pipeline, "sink")
        assets = client._call("GET", f"/api/v2/assets?name_pattern={urllib.parse.quote(name, safe='')}")["assets"]
        found = [a for a in assets if a.get("name") == name]
        if not found:
            return []
        events: list[dict[str, object]] = []
        offset = 0
        while True:
            page = client._call("GET", f"/api/v2/assets/events?asset_id={found[0]['id']}&order_by=timestamp"
                                       f"&limit=100&offset={offset}")["asset_events"]
            events += [e.get("extra") or {} for e in page]
            if len(page) < 100:
                return events
            offset += 100
    except (AirflowError, OSError) as exc:
        raise TerminalError(f"cannot read the asset events of {pipeline} from {redact_urls(url)}: "
                            f"{redact_urls(str(exc))}") from exc


def summary(findings: list[Finding]) -> str:
    flagged = [f for f in findings if not f.explained]
    if not findings:
        return "drift: none (the consumer group holds the latest completed checkpoint's end offsets)"
    return f"drift: {len(flagged)} to act on, {len(findings) - len(flagged)} explained\n" + "\n".join(
        f"  {f}" for f in findings)
