"""A Kafka transaction as the coordinator reports it: its state, and one id's observation.

Shared by the rules that decide from observations (commit decision, recovery, the console) and
the adapters that make them (``lockstep.kafka``), so neither depends on the other.
"""
from __future__ import annotations

__all__ = [
    "OPEN_STATES", "TransactionObservation", "TransactionState", "utc_text",
]

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from lockstep.model.offsets import TopicPartition


class TransactionState(StrEnum):
    """A transaction's state as the coordinator reports it (DescribeTransactions / ListTransactions
    wire values), plus ``Unknown``: an id the coordinator does not know.

    Members are strings equal to the wire value, so JSON, logs and the console print them unchanged.
    A state a newer broker reports that is not listed here is kept as it came, not refused.
    """

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    UNKNOWN = "Unknown"

    @classmethod
    def _missing_(cls, value: object) -> TransactionState | None:
        if not isinstance(value, str):
            return None
        member = str.__new__(cls, value)
        member._name_, member._value_ = value.upper(), value
        return member


# States in which a transaction holds back read_committed readers (the ListTransactions filter).
OPEN_STATES: tuple[TransactionState, ...] = (TransactionState.ONGOING, TransactionState.PREPARE_COMMIT,
                                             TransactionState.PREPARE_ABORT, TransactionState.PREPARE_EPOCH_FENCE)


@dataclass(frozen=True)
class TransactionObservation:
    """What the transaction coordinator reports for one id (DescribeTransactions), or state Unknown;
    the partitions it writes to are for logs and the console."""

    transactional_id: str
    state: TransactionState
    producer_id: int
    epoch: int
    start_time_ms: int
    timeout_ms: int
    partitions: tuple[TopicPartition, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", TransactionState(self.state))  # a wire string becomes the enum

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES

    @property
    def deadline_ms(self) -> int | None:
        """Broker wall-clock time at which an Ongoing transaction is aborted (None if not started)."""
        return self.start_time_ms + self.timeout_ms if self.start_time_ms >= 0 and self.timeout_ms >= 0 else None

    def holds(self, producer_id: int, epoch: int) -> bool:
        """True if this is still the transaction a writer prepared with (producer_id, epoch)."""
        return self.state == TransactionState.ONGOING and self.producer_id == producer_id and self.epoch == epoch


def utc_text(epoch_ms: int) -> str:
    """A broker timestamp (epoch milliseconds) in UTC to the second, the way messages show times."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
