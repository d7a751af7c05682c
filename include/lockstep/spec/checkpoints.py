"""How a pipeline's checkpoints run: ``checkpoints`` (store, schedule or trigger), ``transactions``, ``spark``,
``producer`` and ``alerts``.

These sections decide where the checkpoint documents live, which transactional ids a pipeline may fence and
how Spark runs, so the settings that would break exactly-once (speculation, producer keys Lockstep owns, a
commit margin past the timeout) are refused here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from lockstep.spec.checker import (
    Checker,
    Section,
    allowed_keys,
    declared_default,
    declared_duration,
    declared_field,
    declared_integer,
    declared_words,
    describe,
    read_word,
)
from lockstep.spec.shape import BUCKET_PATTERN, EMAIL_PATTERN, ID_PREFIX_PATTERN, SCHEDULE_PRESETS

__all__ = [
    "AlertsSpec", "BUCKET_RE", "CheckpointSpec", "cron_problem", "EMAIL_RE", "ID_PREFIX_RE", "parse_store_url",
    "read_alerts", "read_checkpoints", "read_producer", "read_spark", "read_transactions", "SparkSpec",
    "StoreLocation", "TransactionSpec", "TriggerSpec",
]


ID_PREFIX_RE = re.compile(ID_PREFIX_PATTERN)
BUCKET_RE = re.compile(BUCKET_PATTERN)


class StoreLocation(NamedTuple):
    """Where a pipeline's checkpoints live: S3 bucket and key prefix (no trailing slash)."""

    bucket: str
    prefix: str


@dataclass(frozen=True)
class TriggerSpec:
    """``checkpoints.trigger``: start a checkpoint when the source's unread records reach
    ``lag_records``, or when some have waited ``max_wait_s`` since the last checkpoint completed;
    never while the topic is idle (unless ``state.event_time.idle_advance`` makes a window due), and never
    within ``min_interval_s`` of the last checkpoint's start. The source is looked at every ``poll_s``."""

    lag_records: int
    max_wait_s: int
    poll_s: int = 5
    #: seconds a checkpoint's start waits after the last one's start (0: none)
    min_interval_s: int = 0


@dataclass(frozen=True)
class CheckpointSpec:
    """``checkpoints``: where a pipeline's checkpoint documents live and when a checkpoint starts."""

    store: str
    bucket: str
    prefix: str
    aws_conn_id: str
    schedule: str | None
    max_records: int
    retain: int
    skip_deleted_ranges: bool
    #: Lag-driven checkpoints instead of a schedule (``schedule`` is then null).
    trigger: TriggerSpec | None = None
    #: A DAG run's tasks: ``three`` (plan, run, commit) or ``one`` (a ``checkpoint`` task doing all three).
    tasks: str = "three"
    #: Plan on top of a checkpoint in flight rather than wait for it (`lockstep.rules.pipelining`).
    pipelined: bool = False

    @property
    def one_task(self) -> bool:
        return self.tasks == "one"


@dataclass(frozen=True)
class TransactionSpec:
    """``transactions``: the id prefix Lockstep may fence under, and the timeout a commit must beat."""

    id_prefix: str
    timeout_ms: int
    commit_margin_ms: int
    #: A commit that begins with less than this share (percent) of ``timeout_ms`` left before the first
    #: transaction would time out logs a warning (and the commit task sends it as a gauge).
    warn_time_left_percent: int = 25


@dataclass(frozen=True)
class SparkSpec:
    """``spark``: where and how a checkpoint's Spark run happens."""

    master: str | None
    conf: Mapping[str, str] = field(default_factory=dict)
    #: "submit" (a spark-submit per checkpoint), "connect" (a session on a long-lived Spark
    #: Connect server), or None: the ``spark_default`` connection decides (`lockstep.spark.target`).
    mode: str | None = None
    #: The Spark Connect endpoint (``sc://host:port``) for connect mode; else from the connections.
    remote: str | None = None


EMAIL_RE = re.compile(EMAIL_PATTERN)


@dataclass(frozen=True)
class AlertsSpec:
    """Whom a failed checkpoint notifies, once per failure streak (`lockstep.rules.alert_policy`): a webhook
    (an Airflow connection of type http: a JSON POST whose ``text`` a chat's incoming webhook shows) and
    e-mail addresses (sent through an SMTP connection)."""

    webhook_conn_id: str | None = None
    email: tuple[str, ...] = ()
    smtp_conn_id: str = "smtp_default"


def parse_store_url(url: str) -> StoreLocation | None:
    """Split `s3://bucket[/prefix]`; None when it is not such a URL."""
    if not url.startswith("s3://"):
        return None
    bucket, _, prefix = url[len("s3://"):].partition("/")
    prefix = prefix.strip("/")
    if not BUCKET_RE.fullmatch(bucket) or ".." in bucket or "//" in prefix:
        return None
    return StoreLocation(bucket, prefix)


def _schedule(c: Checker, d: Section) -> Any:  # a reader's result, as Checker's
    """A cron string or an Airflow preset, checked as Airflow would, so a spec that passes gets its DAG."""
    value = d.get("schedule")
    if value is None:
        return None
    if not isinstance(value, str):
        c.fail("checkpoints.schedule", f"must be a cron string, an Airflow preset or null, got {describe(value)}")
    elif value.startswith("@"):
        if value in declared_words("checkpoints", "schedule"):
            return value
        c.fail("checkpoints.schedule", f"unknown preset {value!r} (known: {', '.join(sorted(SCHEDULE_PRESETS))})")
    elif (reason := cron_problem(value)) is None:
        return value
    else:
        c.fail("checkpoints.schedule", f"{value!r} is not a valid cron expression: {reason}")
    return None


def cron_problem(value: str) -> str | None:
    """Why Airflow would refuse ``value`` as a cron schedule, or None: croniter, which Airflow's cron
    timetable parses with, decides, so a spec that passes here also gets its DAG (``99 * * * *`` does not).
    Five fields (six with seconds), as Airflow takes them."""
    from croniter import CroniterBadCronError, CroniterBadDateError, croniter

    if len(value.split()) not in (5, 6):
        return f"it has {len(value.split())} fields; a cron expression has 5 (minute hour day month weekday)"
    try:
        croniter(value)
    except (CroniterBadCronError, CroniterBadDateError, ValueError, KeyError) as exc:
        return str(exc) or type(exc).__name__
    return None


def _trigger(c: Checker, d: Section) -> Any:  # a reader's result, as Checker's
    """``checkpoints.trigger``: lag-driven checkpoints, which exclude a schedule."""
    if d.get("trigger") is None:
        return None
    t = c.section(d["trigger"], "checkpoints.trigger", allowed_keys("checkpoints.trigger"))
    if "lag_records" not in t:
        c.fail("checkpoints.trigger.lag_records", "is required: the unread records that start a checkpoint")
    if d.get("schedule") is not None:
        c.fail("checkpoints.schedule", "must be null (or left out) when checkpoints.trigger is set: the lag starts "
                                       "checkpoints, not a schedule")
    lag = declared_integer(c, t, "checkpoints.trigger", "lag_records")
    wait = declared_duration(c, t, "checkpoints.trigger", "max_wait")
    poll = declared_duration(c, t, "checkpoints.trigger", "poll_interval")
    interval = declared_duration(c, t, "checkpoints.trigger", "min_interval")
    if None in (lag, wait, poll, interval):
        return None
    return TriggerSpec(lag_records=lag, max_wait_s=wait, poll_s=poll, min_interval_s=interval)


def read_checkpoints(c: Checker, doc: object) -> CheckpointSpec:
    """``checkpoints``: the store must be an S3 URL with a valid bucket, since every checkpoint lives there."""
    d = c.section(doc, "checkpoints", allowed_keys("checkpoints"), optional=False)
    store = c.text(d, "checkpoints", "store")
    location = parse_store_url(store) if store else None
    if store and location is None:
        c.fail("checkpoints.store", f"{store!r} is not s3://bucket[/prefix] with a valid bucket name")
    return CheckpointSpec(
        store=store,
        bucket=location.bucket if location else "",
        prefix=location.prefix if location else "",
        aws_conn_id=c.text(d, "checkpoints", "aws_conn_id", declared_default("checkpoints", "aws_conn_id")),
        schedule=_schedule(c, d),
        max_records=declared_integer(c, d, "checkpoints", "max_records"),
        retain=declared_integer(c, d, "checkpoints", "retain"),
        skip_deleted_ranges=c.boolean(d, "checkpoints", "skip_deleted_ranges",
                                      declared_default("checkpoints", "skip_deleted_ranges")),
        trigger=_trigger(c, d),
        tasks=read_word(c, d, "checkpoints", "tasks"),
        pipelined=c.boolean(d, "checkpoints", "pipelined", declared_default("checkpoints", "pipelined")),
    )


def read_transactions(c: Checker, doc: object, name: str) -> TransactionSpec:
    """``transactions``: the commit margin must leave time before the transactions' timeout."""
    d = c.section(doc, "transactions", allowed_keys("transactions"))
    prefix = c.text(d, "transactions", "id_prefix", name or "x", ID_PREFIX_RE, "allowed are 1-200 of [A-Za-z0-9._-]")
    timeout = declared_integer(c, d, "transactions", "timeout_ms")
    margin = declared_integer(c, d, "transactions", "commit_margin_ms")
    if timeout is not None and margin is not None and margin >= timeout:
        c.fail("transactions.commit_margin_ms", f"must be less than transactions.timeout_ms ({timeout}), got {margin}")
    warn = declared_integer(c, d, "transactions", "warn_time_left_percent")
    return TransactionSpec(id_prefix=prefix, timeout_ms=timeout, commit_margin_ms=margin, warn_time_left_percent=warn)


def read_spark(c: Checker, doc: object) -> SparkSpec:
    """``spark``: refuses what would break exactly-once (speculation) or leak a secret (a remote's parameters)."""
    d = c.section(doc, "spark", allowed_keys("spark"))
    master = c.text(d, "spark", "master", None)
    mode = c.text(d, "spark", "mode", None)
    if mode is not None and mode not in declared_words("spark", "mode"):
        c.fail("spark.mode", f"must be one of {', '.join(declared_words('spark', 'mode'))}, got {mode!r}")
    remote = c.text(d, "spark", "remote", None)
    if remote is not None and not remote.startswith("sc://"):
        c.fail("spark.remote", f"must be a Spark Connect URL (sc://HOST:PORT), got {remote!r}")
    elif remote is not None and ";" in remote:
        # Parameters would land in logs with the URL; a token belongs in the environment.
        c.fail("spark.remote", "takes sc://HOST:PORT only, no ;parameters: give a token in the run's "
                               "environment as SPARK_CONNECT_AUTHENTICATE_TOKEN, never in the spec")
    if remote is not None and mode == "submit":
        c.fail("spark.remote", "is the endpoint of connect mode; spark.mode says submit")
    conf = c.mapping(d.get("conf"), "spark.conf")
    rendered: dict[str, str] = {}
    for key, value in conf.items():
        where = f"spark.conf[{key}]"
        if not isinstance(key, str) or not isinstance(value, (str, int, bool)):
            c.fail(where, f"keys must be strings and values strings, integers or booleans, got {describe(value)}")
            continue
        rendered[key] = str(value).lower() if isinstance(value, bool) else str(value)
        if key == "spark.speculation" and rendered[key].strip().lower() == "true":
            c.fail(where, "speculation must stay off: a speculative task attempt would fence the "
                          "transaction of the attempt that wins")
    return SparkSpec(master=master, conf=rendered, mode=mode, remote=remote)


def read_producer(c: Checker, doc: object) -> dict[str, object]:
    """``producer``: keys Lockstep sets itself (transactional ids, timeouts) are refused, not overridden."""
    d = c.mapping(doc, "producer")
    for key in sorted(set(declared_field("", "producer").refused_keys).intersection(d)):
        c.fail(f"producer[{key}]", "is set by Lockstep (it owns transactional ids and timeouts); "
                                   "use transactions.* instead")
    # keys as the YAML has them, unchecked: a producer client refuses a key that is not a string
    return dict(d)  # type: ignore[arg-type]


def read_alerts(c: Checker, doc: object) -> AlertsSpec | None:
    """``alerts``: a section that names no one is refused, as it would silently notify nobody."""
    if doc is None:
        return None
    d = c.section(doc, "alerts", allowed_keys("alerts"))
    webhook = c.text(d, "alerts", "webhook_conn_id", None)
    email = d.get("email") or []
    if isinstance(email, str):
        email = [email]
    if not isinstance(email, list) or not all(isinstance(e, str) and EMAIL_RE.fullmatch(e) for e in email):
        c.fail("alerts.email", f"must be an e-mail address or a list of them, got {describe(d.get('email'))}")
        email = []
    if d and webhook is None and not email and not any(p.field.startswith("alerts") for p in c.problems):
        c.fail("alerts", "names no one: set webhook_conn_id (an http connection) or email (addresses)")
    smtp = declared_default("alerts", "smtp_conn_id")
    return AlertsSpec(webhook, tuple(email), c.text(d, "alerts", "smtp_conn_id", smtp) or smtp)
