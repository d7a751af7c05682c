"""The seams where the engine meets a client, and the tests meet it with a fake: each is a
``typing.Protocol``, and both the real class and the fake have what it declares, call for call
(`tests.support.protocols.protocol_gaps`). mypy checks the engine's side; this checks the other two,
which mypy does not see (the fakes are tests; the real clients are untyped or generated at run time)."""
from __future__ import annotations

from typing import Protocol

import pytest

from tests.support.protocols import protocol_gaps, protocol_members


# ---- the check itself ----------------------------------------------------------------------------
class Greeter(Protocol):
    name: str

    def greet(self, who: str, /, *, loud: bool = False) -> str: ...

    def wave(self, times: int = 1) -> None: ...


class Good:
    name = "g"

    def greet(self, person: str, *, loud: bool = False, polite: bool = True) -> str:
        return person

    def wave(self, times: int = 1, *more: int) -> None:
        pass


class Loose:
    def __init__(self) -> None:
        self.name = "l"

    def greet(self, *args: object, **kwargs: object) -> str:
        return ""

    def wave(self, **kwargs: object) -> None:  # `wave(2)` would fail
        pass


class Bad:
    def greet(self, who: str, loud: bool) -> str:  # loud is required, and not keyword-only
        return who

    def wave(self, count: int = 1) -> None:  # wave(times=2) would fail
        pass


def test_the_check_lists_the_protocols_members():
    assert set(protocol_members(Greeter)) == {"name", "greet", "wave"}


def test_the_check_passes_what_accepts_every_call_the_protocol_allows():
    assert protocol_gaps(Good, Greeter) == [] and protocol_gaps(Good(), Greeter) == []
    assert protocol_gaps(Loose(), Greeter) == ["wave: no parameter at position 0 for 'times'"]


def test_the_check_names_missing_members_and_calls_that_would_fail():
    assert protocol_gaps(Bad(), Greeter) == [
        "missing attribute 'name'",
        "greet: 'loud' is optional in the protocol, required here",
        "wave: 'times' is 'count' at position 0",
    ]
    assert protocol_gaps(object(), Greeter) == ["missing attribute 'name'", "missing method 'greet'",
                                                "missing method 'wave'"]


# ---- the checkpoint store --------------------------------------------------------------------------
def test_the_checkpoint_store_and_its_fake_are_a_pipeline_store():
    from lockstep.store.checkpoint_store import CheckpointStore, PipelineStore
    from tests.support.fake_s3 import FakeS3
    from tests.support.fake_store import FakeStore

    assert protocol_gaps(CheckpointStore(FakeS3(), "b", "root", "orders"), PipelineStore) == []
    assert protocol_gaps(FakeStore(), PipelineStore) == []


@pytest.fixture
def boto3_s3():
    """A real boto3 S3 client: its methods are generated when it is made (no request is sent)."""
    import boto3

    return boto3.client("s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:1",
                        aws_access_key_id="unused", aws_secret_access_key="unused")


def test_boto3_and_the_in_memory_s3_are_what_the_store_calls(boto3_s3):
    from lockstep.store.s3 import S3Client, S3Paginator
    from tests.support.fake_s3 import FakeS3

    assert protocol_gaps(boto3_s3, S3Client) == []
    assert protocol_gaps(FakeS3(), S3Client) == []
    assert protocol_gaps(boto3_s3.get_paginator("list_objects_v2"), S3Paginator) == []
    assert protocol_gaps(FakeS3().get_paginator("list_objects_v2"), S3Paginator) == []


# ---- Kafka -----------------------------------------------------------------------------------------
def test_the_committer_and_its_fakes_are_a_committer():
    from lockstep.kafka.committer import Committer, TransactionCommitter
    from tests.support.fake_kafka import FakeCommitter
    from tests.unit.test_pinned import FakeCluster

    assert protocol_gaps(TransactionCommitter, Committer) == []
    assert protocol_gaps(FakeCommitter(clock=lambda: 0), Committer) == []
    assert protocol_gaps(FakeCluster(), Committer) == []


def test_the_transaction_admin_and_its_fake_speak_the_committers_protocol():
    from lockstep.kafka.internals import KafkaTransactionAdmin, TransactionAdmin
    from tests.unit.test_committer import FakeAdmin

    assert protocol_gaps(KafkaTransactionAdmin, TransactionAdmin) == []
    assert protocol_gaps(FakeAdmin(), TransactionAdmin) == []


def test_confluent_kafkas_admin_client_and_the_fake_source_are_a_topic_admin():
    from confluent_kafka.admin import AdminClient

    from lockstep.kafka.topics import TopicAdmin
    from tests.support.fake_kafka import FakeSource

    assert protocol_gaps(AdminClient, TopicAdmin) == []
    assert protocol_gaps(FakeSource().admin, TopicAdmin) == []


def test_confluent_kafkas_admin_client_is_a_config_admin_and_its_consumer_a_record_consumer():
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    from lockstep.kafka.reader import RecordConsumer
    from lockstep.kafka.topics import ConfigAdmin
    from tests.unit.test_kafka_reader import FakeConsumer

    assert protocol_gaps(AdminClient, ConfigAdmin) == []
    assert protocol_gaps(Consumer, RecordConsumer) == []
    assert protocol_gaps(FakeConsumer({}, {}, []), RecordConsumer) == []


# ---- Spark -----------------------------------------------------------------------------------------
def test_classic_and_connect_sessions_and_the_fake_are_what_the_job_uses():
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from lockstep.spark.target import JobSession
    from tests.support.fake_spark import FakeSession

    assert protocol_gaps(SparkSession, JobSession) == []
    assert protocol_gaps(ConnectSession, JobSession) == []
    assert protocol_gaps(FakeSession(), JobSession) == []


def test_classic_and_connect_readers_and_confs_and_the_fakes_are_what_the_job_uses():
    from pyspark.sql.conf import RuntimeConfig
    from pyspark.sql.connect.conf import RuntimeConf
    from pyspark.sql.connect.readwriter import DataFrameReader as ConnectReader
    from pyspark.sql.readwriter import DataFrameReader

    from lockstep.spark.target import JobReader, SessionConf
    from tests.support.fake_spark import FakeSession

    for reader in (DataFrameReader, ConnectReader, FakeSession().read):
        assert protocol_gaps(reader, JobReader) == [], reader
    for conf in (RuntimeConfig, RuntimeConf, FakeSession().conf):
        assert protocol_gaps(conf, SessionConf) == [], conf


def test_both_runs_of_the_run_step_can_be_stopped():
    from lockstep.spark.connect import ConnectRun
    from lockstep.steps.run import Stoppable, SubmitRun

    assert protocol_gaps(SubmitRun, Stoppable) == []
    assert protocol_gaps(ConnectRun, Stoppable) == []
