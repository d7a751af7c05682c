"""When a lag-triggered pipeline starts a checkpoint (pure): ``checkpoints.trigger``.

The watcher (``lockstep_airflow.triggers``) looks at the source every ``poll_s`` and asks `start_reason`.
A checkpoint starts when the unread records reach ``lag_records``, or when some have waited
``max_wait_s`` since the last checkpoint completed; while the topic is idle, only when a stateful
pipeline with ``state.event_time.idle_advance`` has a window or timer that the quiet has made due.

The condition "lag ≥ N" stays true until the checkpoint it starts has committed, and Airflow restarts a
watcher from its arguments after each event, so a watcher that only looked at the lag would fire again
and again. The decision is edge-triggered with a marker the watcher writes when it fires (`Fired`,
kept in the pipeline's store, which outlives any triggerer): having fired, it does not fire again
until a newer checkpoint has been claimed.

**One run ahead.** While a checkpoint is in flight, records that arrived after its plan fixed its ranges
are unread; once they reach ``lag_records`` the watcher fires at once instead of waiting for the commit.
With three tasks Airflow keeps the asset event until the running DAG run ends (``max_active_runs=1``) and
then starts the next run; with one task per checkpoint the next run starts at once and its plan waits in
its process for the checkpoint in flight (``lockstep_airflow.dag_factory.max_active_runs``). Either way the
next checkpoint begins as soon as the last one ends, without a poll and a trigger in between. The marker
keeps it at one run ahead: the next fire waits until that run has claimed its checkpoint. The trickle rule
(``max_wait``) and the timers' rule wait for the commit as before.

**Checkpoints at least ``min_interval_s`` apart** (``checkpoints.trigger.min_interval``), start to start, as
Flink's checkpoint interval spaces its checkpoints. Each checkpoint costs the same few CPU seconds whatever its
records (a DAG run, a task, a Spark job, a commit): with ``lag_records: 1`` a busy source runs them back to back,
the freshest results for the most CPU. The interval holds back every start that records or timers would make
(one run ahead included) until the newest checkpoint started that long ago (`interval_left_s`: when the watcher
fired for it, or else when it was claimed); a checkpoint in flight past its lease and the first checkpoint are not
held back.

**The wait of the run one ahead** costs a listing of the checkpoint in flight's folder a look
(`lockstep.store.checkpoint_store.CheckpointStore.stage`), not a plan: a plan reads the store's history and asks
Airflow whether the run that carries the checkpoint is alive, and twenty such waits every 0.2 s kept a 2-core
machine busy. `look_again_in` says when to look next: soon once the checkpoint is prepared (its commit is next),
seldom while its run still runs. The plan is tried again when the stage changes, and at least every
`PLAN_AGAIN_EVERY_S` (which notices a run that died without settling its checkpoint).

**A quiet source costs one request a look.** A look reads the broker's last stable offsets and the store.
Once a look has found nothing unread, nothing in flight and no timer pending, the next looks read only the
broker's offsets: while they stay the same, `start_reason` would answer None again, since it would see the
same unread count (none) and no new records. `Quiet` is what such a look leaves behind, and `still_quiet`
says whether the next look may stop at the offsets. The store is read again when they move, when a pending
timer falls due, and at least every `FULL_LOOK_EVERY_S`. That also catches what changes only in the store:
a run someone started by hand that claimed a checkpoint and was then lost, or a restore. With hundreds
of idle pipelines in one triggerer, this takes the store's reads (about seven S3 requests) out of most
looks. A busy source's watcher, once it has fired, waits for its run to claim a checkpoint
(`waiting_for_claim`): until then its looks list the checkpoints newer than the one it saw, one S3
request, instead of reading the lag.
"""
from __future__ import annotations

__all__ = [
    "FULL_LOOK_EVERY_S", "PLAN_AGAIN_EVERY_S", "Fired", "Quiet", "SourceLook", "interval_left_s", "look_again_in",
    "quiet", "start_reason", "still_quiet", "waiting_for_claim",
]

from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.model.checkpoint import CheckpointStage
from lockstep.model.offsets import TopicPartition
from lockstep.spec import TriggerSpec

#: A fire whose run never claimed a checkpoint (the run failed before planning, the DAG was paused) is
#: forgotten after this long: the watcher may fire again.
REFIRE_AFTER_S = 600
#: A quiet source's store is read at least this often (`still_quiet`).
FULL_LOOK_EVERY_S = 60.0
#: The run one ahead looks at the checkpoint in flight this often once it is prepared, and while it is claimed.
PREPARED_LOOK_S, CLAIMED_LOOK_S = 0.2, 1.0
#: ... and plans again at least this often, whatever it saw.
PLAN_AGAIN_EVERY_S = 5.0


@dataclass(frozen=True)
class Fired:
    """The marker of the watcher's last event: when, and the newest checkpoint id it saw then."""

    at_s: float
    newest_checkpoint: int | None

    def to_json(self) -> dict[str, object]:
        return {"at_s": self.at_s, "newest_checkpoint": self.newest_checkpoint}

    @classmethod
    def from_json(cls, doc: object) -> Fired | None:
        if not isinstance(doc, dict):
            return None
        at, newest = doc.get("at_s"), doc.get("newest_checkpoint")
        if isinstance(at, bool) or not isinstance(at, int | float):
            return None
        return cls(float(at), newest if isinstance(newest, int) and not isinstance(newest, bool) else None)


@dataclass(frozen=True)
class SourceLook:
    """What the watcher saw at one look (``lockstep.ops.lag.read_lag`` and the store)."""

    #: records up to the last stable offsets that no checkpoint has claimed; None when where to start
    #: is not known yet (no completed checkpoint and no consumer-group offsets)
    unread: int | None
    #: the newest checkpoint id in the store (claimed, in flight or settled), None before the first
    newest_checkpoint: int | None
    #: seconds since the newest checkpoint in flight (claimed or prepared) was claimed; None if none is
    in_flight_age_s: float | None
    #: seconds since the last checkpoint completed; None before the first
    since_completed_s: float | None
    #: seconds until a checkpoint without records would fire a pending window or timer of the committed
    #: state (``state.event_time.idle_advance``; 0 or less: due now); None when none would
    timers_due_in_s: float | None = None
    #: seconds since the newest checkpoint (in flight or settled) was claimed; None before the first
    since_started_s: float | None = None


def interval_left_s(look: SourceLook, trigger: TriggerSpec, fired: Fired | None = None,
                    now_s: float | None = None) -> float:
    """Seconds until ``checkpoints.trigger.min_interval`` lets a checkpoint start: the interval less the time since
    the newest checkpoint started; 0 when it lets one start now (no interval, or no checkpoint yet).

    A checkpoint the watcher started started when it fired: ``fired`` saw the checkpoint before it as the newest,
    and its run claimed the next one a second or two later (Airflow's DAG run, its task, the plan). Counted from
    the claim, each interval would be that much longer than the spec says."""
    if trigger.min_interval_s <= 0 or look.since_started_s is None:
        return 0.0
    since = look.since_started_s
    if fired is not None and now_s is not None and look.newest_checkpoint is not None \
            and look.newest_checkpoint == (fired.newest_checkpoint or 0) + 1:
        since = max(since, now_s - fired.at_s)
    return max(0.0, trigger.min_interval_s - since)


def waiting_for_claim(fired: Fired | None, newest_checkpoint: int | None, now_s: float) -> bool:
    """Whether the run the watcher's last fire started has yet to claim its checkpoint: no checkpoint newer than the
    one the fire saw, and the fire is not so old that its run must have failed (`REFIRE_AFTER_S`). While it is, the
    watcher starts nothing, so a look needs to know only whether a newer checkpoint has been claimed."""
    return fired is not None and fired.newest_checkpoint == newest_checkpoint and now_s - fired.at_s < REFIRE_AFTER_S


def start_reason(look: SourceLook, trigger: TriggerSpec, fired: Fired | None, now_s: float,
                 in_flight_lease_s: float) -> str | None:
    """Why a checkpoint should start now, or None to keep waiting.

    ``in_flight_lease_s``: how long a checkpoint in flight is presumed to have a run carrying it (the
    transaction timeout); past it, a run is started to recover it."""
    if waiting_for_claim(fired, look.newest_checkpoint, now_s):
        return None  # the run this watcher started has not claimed its checkpoint yet
    if look.in_flight_age_s is not None:
        if look.in_flight_age_s >= in_flight_lease_s:
            return (f"checkpoint {look.newest_checkpoint} has been in flight for {look.in_flight_age_s:.0f} s, "
                    "longer than its transactions' timeout: a run recovers it")
        if interval_left_s(look, trigger, fired, now_s) > 0:
            return None  # checkpoints.trigger.min_interval: the next one starts later
        if look.unread is not None and look.unread >= trigger.lag_records:
            return (f"{look.unread:,} records unread beyond checkpoint {look.newest_checkpoint}, which is in flight, "
                    f"at least checkpoints.trigger.lag_records ({trigger.lag_records:,}): the next run waits for it "
                    "and starts when it ends")
        return None  # a run is carrying it; the rest waits for its commit
    if look.unread is None:
        return "no checkpoint has completed yet: a first checkpoint finds where to start"
    if interval_left_s(look, trigger, fired, now_s) > 0:
        return None  # checkpoints.trigger.min_interval: the next one starts later
    if look.unread >= trigger.lag_records:
        return f"{look.unread:,} records unread, at least checkpoints.trigger.lag_records ({trigger.lag_records:,})"
    if look.unread > 0 and (look.since_completed_s is None or look.since_completed_s >= trigger.max_wait_s):
        since = "no checkpoint completed" if look.since_completed_s is None else \
            f"the last checkpoint completed {look.since_completed_s:.0f} s ago"
        return f"{look.unread:,} records unread and {since}, at least checkpoints.trigger.max_wait ({trigger.max_wait_s} s)"
    if look.timers_due_in_s is not None and look.timers_due_in_s <= 0:
        return ("the source has been idle long enough for the watermark to pass a pending window or timer "
                "(state.event_time.idle_advance): a checkpoint without records fires it")
    return None


@dataclass(frozen=True)
class Quiet:
    """What a look that read the store and found the source quiet leaves for the next looks: the last stable
    offsets it saw, when, and when a pending timer falls due (seconds since the epoch; None: none pending)."""

    stable: Mapping[TopicPartition, int]
    at_s: float
    timers_due_at_s: float | None = None


def quiet(look: SourceLook, stable: Mapping[TopicPartition, int], now_s: float) -> Quiet | None:
    """The `Quiet` a full look leaves when it found nothing to start a checkpoint for and nothing that could
    change without the source's offsets moving; None when the next look must read the store again (records
    unread, a checkpoint in flight, no checkpoint completed yet)."""
    if look.unread != 0 or look.in_flight_age_s is not None:
        return None
    due = None if look.timers_due_in_s is None else now_s + look.timers_due_in_s
    return Quiet(dict(stable), now_s, due)


def still_quiet(last: Quiet | None, stable: Mapping[TopicPartition, int], now_s: float) -> bool:
    """Whether a look that read ``stable`` from the broker may stop there: the source has not moved since the
    quiet look, which is less than `FULL_LOOK_EVERY_S` old, and no timer it saw pending has fallen due."""
    return (last is not None and dict(stable) == last.stable and 0 <= now_s - last.at_s < FULL_LOOK_EVERY_S
            and (last.timers_due_at_s is None or now_s < last.timers_due_at_s))


def look_again_in(stage: CheckpointStage | None) -> float | None:
    """Seconds until the run one ahead looks again at the checkpoint in flight that is at ``stage``; None when it
    should plan now (the checkpoint settled, or is gone)."""
    if stage is CheckpointStage.PREPARED:
        return PREPARED_LOOK_S
    if stage is CheckpointStage.CLAIMED:
        return CLAIMED_LOOK_S
    return None
