"""Kafka's transaction protocol, spoken from any process: the one module that touches client internals.

The commit task ends transactions that other processes prepared: it sends EndTxn itself with the
recorded producer id and epoch, as Flink's `resumeTransaction` does. librdkafka cannot do that (it
only ends its own transactions), so this module speaks the protocol with kafka-python (pinned to
3.0.12), through its private connection manager (`_manager.send` / `run`) and raw request classes.
Fencing re-initialises an id with a confluent-kafka producer (InitProducerId). Both clients take
their settings from the connection translation every client uses (`lockstep.kafka.client_configs`),
handed in by the caller (`lockstep.steps.client_factory.committer_for_connection` resolves the
connection through `lockstep.connections.kafka_config`: this package never resolves one itself).

The operations are small and typed: each returns plain values and the Kafka error name the broker
answered with (``NoError`` on success), or raises `RetriableKafkaError` when the client itself
failed with an error Kafka marks retriable. What an error *means* for Lockstep (retry, fenced,
unknown id) is the committer's business (`lockstep.kafka.committer`), not this module's.

Facts this relies on, verified on Kafka 4.2 (transaction protocol v1 rules, which the broker applies
to EndTxn up to v4 — v5+ would switch it to v2 rules, hence `END_TXN_MAX_VERSION = 4`):

* EndTxn(commit) from another process with the recorded id/epoch commits; repeating it returns no
  error (CompleteCommit is idempotent while the epoch is unchanged).
* A transaction the broker timed out is aborted with the epoch bumped by one: a late commit gets
  PRODUCER_FENCED, never a silent success. Re-initialising the id (fencing) bumps the epoch too.
* EndTxn on a transaction that is not open (Empty, CompleteAbort) gets INVALID_TXN_STATE; an id
  the coordinator never saw gets INVALID_PRODUCER_ID_MAPPING.
"""

from __future__ import annotations

__all__ = [
    "KafkaTransactionAdmin",
]

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from lockstep.kafka.client_configs import ClientConfig
from lockstep.model.offsets import TopicPartition
from lockstep.model.transactions import TransactionState

log = logging.getLogger(__name__)

T = TypeVar("T")

NO_ERROR = "NoError"
#: The requests an answer can come from (`EndTxnResult.request`, `TransactionDescription.request`).
FIND_COORDINATOR, END_TXN, DESCRIBE_TRANSACTIONS = "FindCoordinator", "EndTxn", "DescribeTransactions"
END_TXN_MAX_VERSION = 4
_TRANSACTION_KEY_TYPE = 1  # FindCoordinator key type for transactional ids


# ---- answers ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EndTxnResult:
    """The broker's answer to EndTxn, or to the FindCoordinator before it when that one failed."""

    error: str = NO_ERROR
    request: str = END_TXN


@dataclass(frozen=True)
class TransactionDescription:
    """DescribeTransactions for one id. With an error (or an error finding its coordinator, then
    ``request`` is FIND_COORDINATOR) only ``transactional_id``, ``error`` and ``request`` are meaningful."""

    transactional_id: str
    error: str = NO_ERROR
    request: str = DESCRIBE_TRANSACTIONS
    state: TransactionState = TransactionState.UNKNOWN
    producer_id: int = -1
    epoch: int = -1
    start_time_ms: int = -1
    timeout_ms: int = -1
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class TransactionListing:
    """One row of ListTransactions."""

    transactional_id: str
    producer_id: int
    state: TransactionState


@dataclass(frozen=True)
class Coordinator:
    """FindCoordinator for a transactional id: the broker leading its transaction coordinator."""

    node_id: int
    error: str = NO_ERROR


class RetriableKafkaError(Exception):
    """The client failed with an error Kafka marks retriable (connection lost, request timed out,
    coordinator loading); the message names the error."""


class FenceError(Exception):
    """InitProducerId for a transactional id did not succeed (the coordinator refused or did not answer)."""


# ---- the interface the committer needs -------------------------------------------------------------
class TransactionAdmin(Protocol):
    """The transaction operations the committer uses; `KafkaTransactionAdmin` speaks them to Kafka,
    tests replace it with an in-memory fake."""

    def describe_transaction(self, transactional_id: str) -> TransactionDescription: ...

    def list_transactions(self, states: Sequence[TransactionState]) -> list[TransactionListing]: ...

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> EndTxnResult: ...

    def fence(self, transactional_id: str, timeout_s: float) -> None: ...

    def close(self) -> None: ...


# ---- kafka-python and confluent-kafka ------------------------------------------------------------
class KafkaTransactionAdmin:
    """`TransactionAdmin` on a Kafka cluster: kafka-python's `KafkaAdminClient` for the requests,
    a confluent-kafka producer for fencing.

    `client_config` holds kafka-python `KafkaAdminClient` settings (security, client_id, ...);
    `producer_config` holds confluent-kafka settings used only by `fence`. Without them the cluster
    is a PLAINTEXT one (tests, tools); pipelines use `from_configs`.
    """

    def __init__(self, bootstrap: str, client_config: Mapping[str, object] | None = None,
                 producer_config: Mapping[str, object] | None = None) -> None:
        from kafka import KafkaAdminClient  # heavy; imported only when a client is built

        self.bootstrap = bootstrap
        self._admin = KafkaAdminClient(bootstrap_servers=bootstrap, **dict(client_config or {}))
        self._producer_config = {k: v for k, v in (producer_config or {}).items() if k != "bootstrap.servers"}

    @classmethod
    def from_configs(cls, client: ClientConfig, producer: ClientConfig) -> KafkaTransactionAdmin:
        """The cluster of a Kafka connection, given in each client's dialect of that connection:
        ``client`` in kafka-python's (the admin client: EndTxn, DescribeTransactions), ``producer`` in
        confluent-kafka's (fence() re-initialises ids)."""
        client = dict(client)
        return cls(client.pop("bootstrap_servers"), client, producer)

    def close(self) -> None:
        self._admin.close()

    # ---- operations ------------------------------------------------------------------------------
    def find_coordinator(self, transactional_id: str) -> Coordinator:
        return self._run(lambda: self._find_coordinator(transactional_id))

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        from kafka.protocol.admin.transactions import DescribeTransactionsRequest

        async def attempt() -> TransactionDescription:
            found = await self._find_coordinator(transactional_id)
            if found.error != NO_ERROR:
                return TransactionDescription(transactional_id, found.error, FIND_COORDINATOR)
            response = await self._admin._manager.send(
                DescribeTransactionsRequest(transactional_ids=[transactional_id]), node_id=found.node_id)
            return _description(transactional_id, response.transaction_states[0])

        return self._run(attempt)

    def list_transactions(self, states: Sequence[TransactionState]) -> list[TransactionListing]:
        """The transactions in one of ``states`` on every broker (each leads a slice of the coordinators)."""
        with _translated_errors():
            listings = self._admin.list_transactions(state_filters=[str(s) for s in states])
        # kafka-python's own state enum prints as "TransactionState.ONGOING": take its wire value
        return [TransactionListing(row.transactional_id, row.producer_id,
                                   TransactionState(getattr(row.state, "value", row.state)))
                for rows in listings.values() for row in rows]

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> EndTxnResult:
        from kafka.protocol.producer.transaction import EndTxnRequest

        async def attempt() -> EndTxnResult:
            found = await self._find_coordinator(transactional_id)
            if found.error != NO_ERROR:
                return EndTxnResult(found.error, FIND_COORDINATOR)
            request = EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                                    producer_epoch=epoch, committed=commit, max_version=END_TXN_MAX_VERSION)
            response = await self._admin._manager.send(request, node_id=found.node_id)
            return EndTxnResult(_error_name(response.error_code))

        return self._run(attempt)

    def fence(self, transactional_id: str, timeout_s: float) -> None:
        """Re-initialise ``transactional_id`` (InitProducerId): the coordinator aborts whatever it has
        open and bumps the epoch. Raises `FenceError` when that does not happen within ``timeout_s``."""
        from confluent_kafka import Producer

        producer = Producer({**self._producer_config, "bootstrap.servers": self.bootstrap,
                             "transactional.id": transactional_id, "logger": log})
        try:
            producer.init_transactions(timeout_s)
        except Exception as exc:
            raise FenceError(str(exc)) from exc
        finally:
            producer.close()  # nothing is open on this producer, so close() aborts nothing

    # ---- kafka-python's connection manager -------------------------------------------------------
    def _run(self, attempt: Callable[[], Awaitable[T]]) -> T:
        with _translated_errors():
            return cast(T, self._admin._manager.run(attempt))  # kafka-python is untyped

    async def _find_coordinator(self, transactional_id: str) -> Coordinator:
        """Ask for the id's coordinator on every call: after NOT_COORDINATOR a cached answer would be stale."""
        from kafka.protocol.metadata import FindCoordinatorRequest

        request = FindCoordinatorRequest(key_type=_TRANSACTION_KEY_TYPE, coordinator_keys=[transactional_id],
                                         min_version=4)
        response = await self._admin._manager.send(request)
        found = response.coordinators[0]
        error = _error_name(found.error_code)
        if error != NO_ERROR:
            return Coordinator(-1, error)
        cluster = self._admin._manager.cluster
        if cluster.broker_metadata(found.node_id) is None:  # a broker the client has not met yet
            cluster.add_coordinator(found, _TRANSACTION_KEY_TYPE, transactional_id, synthesize_node_id=False)
        return Coordinator(found.node_id)


def _description(transactional_id: str, row: Any) -> TransactionDescription:  # kafka-python's response row: untyped
    error = _error_name(row.error_code)
    if error != NO_ERROR:
        return TransactionDescription(transactional_id, error)
    return TransactionDescription(
        transactional_id, state=TransactionState(row.transaction_state), producer_id=row.producer_id,
        epoch=row.producer_epoch, start_time_ms=row.transaction_start_time_ms, timeout_ms=row.transaction_timeout_ms,
        partitions=tuple(sorted(TopicPartition(t.topic, p) for t in row.topics for p in t.partitions)),
    )


@contextmanager
def _translated_errors() -> Iterator[None]:
    """kafka-python raises its own errors; one Kafka marks retriable becomes a `RetriableKafkaError`,
    so no other module needs kafka-python's error classes. Others pass through unchanged."""
    import kafka.errors as kafka_errors

    try:
        yield
    except kafka_errors.KafkaError as exc:
        if getattr(exc, "retriable", False):
            raise RetriableKafkaError(f"{type(exc).__name__}: {exc}") from exc
        raise


def _error_name(code: int) -> str:
    import kafka.errors as kafka_errors

    return cast(str, kafka_errors.for_code(code).__name__)
