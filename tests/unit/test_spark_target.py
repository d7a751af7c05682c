"""Where a checkpoint's run goes: spark-submit or a Spark Connect session (pure rules)."""
from __future__ import annotations

from pathlib import Path

import pytest

from lockstep.errors import TerminalError
from lockstep.spark.target import SparkEndpoint, connect_url, resolve_target
from lockstep.spec import SparkSpec


def lookup(**connections):
    return lambda conn_id: connections.get(conn_id)


SUBMIT_CONN = SparkEndpoint("spark", "spark://m", 7077)
CONNECT_CONN = SparkEndpoint("spark", "sc://c", 15003)
AIRFLOW_CONNECT = SparkEndpoint("spark_connect", "sc://10.1.1.1", None)


@pytest.mark.parametrize("spark, connections, expected", [
    (SparkSpec(None), {"spark_connect_default": AIRFLOW_CONNECT}, ("connect", "sc://10.1.1.1:15002")),
    (SparkSpec(None), {"spark_default": SUBMIT_CONN, "spark_connect_default": AIRFLOW_CONNECT},
     ("connect", "sc://10.1.1.1:15002")),
    (SparkSpec(None, mode="submit"), {"spark_default": SUBMIT_CONN}, ("submit", "spark://m:7077")),
    (SparkSpec(None, mode="submit"), {}, ("submit", "local[*]")),
    (SparkSpec("local[2]"), {"spark_default": CONNECT_CONN}, ("submit", "local[2]")),
    (SparkSpec(None), {"spark_default": CONNECT_CONN}, ("connect", "sc://c:15003")),
    (SparkSpec(None, mode="submit"), {"spark_default": CONNECT_CONN}, ("submit", "local[*]")),
    (SparkSpec(None, mode="connect"), {"spark_default": SUBMIT_CONN, "spark_connect_default": AIRFLOW_CONNECT},
     ("connect", "sc://10.1.1.1:15002")),
    (SparkSpec(None, remote="sc://r:1"), {"spark_default": SUBMIT_CONN}, ("connect", "sc://r:1")),
    (SparkSpec("spark://x:7077", mode="connect", remote="sc://r:1"), {}, ("connect", "sc://r:1")),
])
def test_mode_and_address(spark, connections, expected):
    target = resolve_target(spark, lookup(**connections))
    assert (target.mode, target.address) == expected


@pytest.mark.parametrize("spark", [SparkSpec(None, mode="connect"), SparkSpec(None)])
def test_connect_mode_without_an_endpoint_says_where_to_set_one_or_how_to_submit(spark):
    """Connect is the default mode: a spec that says nothing, on a deployment with no Connect
    endpoint, is told where to set one, or to choose submit mode."""
    with pytest.raises(TerminalError, match="spark.remote.*spark_default.*spark_connect_default.*spark.mode: submit"):
        resolve_target(spark, lookup(spark_default=SUBMIT_CONN))


@pytest.mark.parametrize("host, port, url", [
    ("sc://h", None, "sc://h:15002"), ("sc://h:1", None, "sc://h:1"), ("h", 7, "sc://h:7"), ("sc://h:1/", 9, "sc://h:9"),
])
def test_connect_url(host, port, url):
    assert connect_url(host, port) == url


def test_spec_refuses_an_unknown_mode_and_a_remote_that_is_not_connect(tmp_path):
    from lockstep.spec import SpecError, parse_spec

    doc = {"name": "m", "source": {"topics": ["in"]}, "transform": "lockstep_examples.orders:enrich",
           "sink": {"topic": "out", "dead_letter_topic": "dlq"}, "checkpoints": {"store": "s3://b/p"},
           "transactions": {"id_prefix": "tx"}, "spark": {"mode": "yarn", "remote": "spark://h:7077"}}
    with pytest.raises(SpecError) as caught:
        parse_spec(doc, "m.yaml")
    assert "spark.mode" in str(caught.value) and "spark.remote" in str(caught.value)


def test_the_connect_server_gets_every_setting_a_run_needs(tmp_path, built_jars):
    """`lockstep dev up` and the compose service start the server with Lockstep's jars and safety
    settings, on the address asked for, and with a short detached timeout for killed clients."""
    from lockstep.spark.conf import spark_conf
    from lockstep_dev.spark_connect import SERVER_CLASS, ConnectConfig, server_command

    argv = server_command(ConnectConfig(15123, tmp_path, "spark://m:7077", host="0.0.0.0"))
    conf = dict(a.split("=", 1) for a in argv[argv.index("--class") + 2:-1] if "=" in a)
    assert argv[argv.index("--class") + 1] == SERVER_CLASS and argv[-1] == "spark-internal"
    assert argv[argv.index("--master") + 1] == "spark://m:7077"
    assert conf["spark.connect.grpc.binding.port"] == "15123" and conf["spark.connect.grpc.binding.address"] == "0.0.0.0"
    assert conf["spark.speculation"] == "false" and conf["spark.jars"] == spark_conf()["spark.jars"]
    assert conf["spark.connect.execute.manager.detachedTimeout"] == "30s"


def test_the_checkpoints_of_an_epoch_share_their_session_ids_and_other_settings_get_others():
    import uuid

    from lockstep.spark.connect import SESSION_EPOCH, warm_session_id

    conf = {"spark.sql.shuffle.partitions": "4"}
    ids = [warm_session_id("p", 7, conf, k) for k in range(3)]
    assert len(set(ids)) == 3 and ids == [warm_session_id("p", 7, dict(conf), k) for k in range(3)]
    epoch = range(SESSION_EPOCH, 2 * SESSION_EPOCH)
    assert {warm_session_id("p", c, conf, 0) for c in epoch} == {warm_session_id("p", SESSION_EPOCH, conf, 0)}
    assert warm_session_id("p", SESSION_EPOCH - 1, conf, 0) != warm_session_id("p", SESSION_EPOCH, conf, 0)
    assert warm_session_id("q", 7, conf, 0) != ids[0]
    assert warm_session_id("p", 7, {}, 0) != ids[0]  # a setting taken out of the spec must not stay set
    assert warm_session_id("p", 7, {"spark.sql.shuffle.partitions": "8"}, 0) != ids[0]
    assert all(uuid.UUID(i).version == 4 for i in ids)  # Connect takes UUIDs only


def test_only_the_run_of_an_epochs_last_checkpoint_releases_its_session():
    from lockstep.spark.connect import SESSION_EPOCH, ends_epoch

    assert [c for c in range(3 * SESSION_EPOCH) if ends_epoch(c)] == [SESSION_EPOCH - 1, 2 * SESSION_EPOCH - 1,
                                                                     3 * SESSION_EPOCH - 1]


class _FakeServer:
    """Spark Connect's sessions as far as a run's session protocol sees them: a released id is refused for
    good; an open one is joined, and its operations interrupted."""

    def __init__(self) -> None:
        self.open: dict[str, list[str]] = {}  # session id -> operations running
        self.released: set[str] = set()
        self.conf: dict[str, dict[str, str]] = {}


class _FakeSession:
    def __init__(self, server: _FakeServer, session_id: str) -> None:
        self.server, self.session_id = server, session_id
        self.release_session_on_close = True
        self.conf = self

    def interruptAll(self) -> list[str]:
        if self.session_id in self.server.released:
            raise RuntimeError("[INVALID_HANDLE.SESSION_CLOSED] The handle is invalid. Session was closed.")
        running = self.server.open.setdefault(self.session_id, [])
        self.server.open[self.session_id] = []
        return running

    def stop(self) -> None:
        if self.release_session_on_close and self.session_id in self.server.open:
            del self.server.open[self.session_id]
            self.server.released.add(self.session_id)

    def get(self, key: str, default: str = "") -> str:
        return self.server.conf.get(self.session_id, {}).get(key, default)

    def set(self, key: str, value: str) -> None:
        self.server.conf.setdefault(self.session_id, {})[key] = value

    def isModifiable(self, key: str) -> bool:
        return True


def _with_fake_server(monkeypatch):
    from lockstep.spark import connect

    server = _FakeServer()
    monkeypatch.setattr(connect, "new_session", lambda url, session_id=None: _FakeSession(server, session_id or "x"))
    monkeypatch.setattr(connect, "hold_to_session", lambda spark: None)
    monkeypatch.setattr(connect, "_active", lambda spark: __import__("contextlib").nullcontext())
    return server


def test_a_pipelines_runs_share_a_warm_session_until_the_epoch_ends(monkeypatch):
    from lockstep.spark.connect import SESSION_EPOCH, checkpoint_session, warm_session_id

    server = _with_fake_server(monkeypatch)
    joined = []
    for checkpoint in range(1, SESSION_EPOCH + 2):
        with checkpoint_session("sc://h:1", "p", checkpoint) as run:
            joined.append(run.session_id)
    assert joined[:SESSION_EPOCH - 1] == [warm_session_id("p", 1, {}, 0)] * (SESSION_EPOCH - 1)
    # the epoch's last released its session; the next epoch's first run opened a session of its own
    assert warm_session_id("p", 1, {}, 0) in server.released
    assert joined[-1] == warm_session_id("p", SESSION_EPOCH, {}, 0) and list(server.open) == [joined[-1]]


def test_a_failed_run_releases_its_session_and_the_next_attempt_takes_the_next_id(monkeypatch):
    from lockstep.spark.connect import checkpoint_session, warm_session_id

    server = _with_fake_server(monkeypatch)
    with pytest.raises(ValueError), checkpoint_session("sc://h:1", "p", 3):
        raise ValueError("the run failed")
    assert server.released == {warm_session_id("p", 3, {}, 0)} and not server.open
    with checkpoint_session("sc://h:1", "p", 3) as run:
        assert run.session_id == warm_session_id("p", 3, {}, 1)


def test_a_killed_attempts_session_is_joined_and_what_it_left_running_interrupted(monkeypatch, caplog):
    """A killed client neither releases nor closes: its session stays open with its operation running. The
    next attempt (or the next checkpoint's run in the epoch) joins it and interrupts the operation first."""
    from lockstep.spark.connect import checkpoint_session, warm_session_id

    server = _with_fake_server(monkeypatch)
    server.open[warm_session_id("p", 3, {}, 0)] = ["op-of-the-killed-attempt"]
    with caplog.at_level("WARNING", logger="lockstep.spark.connect"), checkpoint_session("sc://h:1", "p", 4) as run:
        assert run.session_id == warm_session_id("p", 3, {}, 0)
        assert server.open[run.session_id] == []
    assert "interrupted 1 operation(s) an earlier attempt left running" in caplog.text


def test_code_already_in_a_warm_session_is_not_shipped_again_and_other_code_makes_it_stale(monkeypatch, tmp_path):
    from lockstep import transform
    from lockstep.transform import StaleSession

    server = _FakeServer()
    session = _FakeSession(server, "s")
    added: list[str] = []
    session.addArtifacts = lambda path, pyfile: added.append(Path(path).name)  # type: ignore[attr-defined]
    monkeypatch.setattr(transform, "is_connect_session", lambda spark: True)
    package = tmp_path / "my_transform"
    package.mkdir()
    (package / "__init__.py").write_text("def transform(df):\n    return df\n")
    monkeypatch.setattr(transform, "package_source", lambda name: package)
    spec = type("Spec", (), {"name": "p", "is_sql": False, "transform_target": ("my_transform", "transform")})()

    assert transform.ship_to_executors(session, spec) == ["my_transform.zip"] and added == ["my_transform.zip"]
    assert transform.ship_to_executors(session, spec) == ["my_transform.zip (in the session already)"]
    assert added == ["my_transform.zip"]
    (package / "__init__.py").write_text("def transform(df):\n    return df.limit(1)\n")  # redeployed
    with pytest.raises(StaleSession, match="my_transform.zip"):
        transform.ship_to_executors(session, spec)
    assert added == ["my_transform.zip"]


def test_a_server_that_stopped_answering_is_named_with_grpcs_reason():
    """pyspark says only "The maximum number of retries has been exceeded"; the run's cause names
    the server, gRPC's status and details, and where to look."""
    from enum import Enum

    from pyspark.errors.exceptions.base import RetriesExceeded

    from lockstep.spark.connect import server_away

    class Code(Enum):
        UNAVAILABLE = 14

    class RpcError(Exception):
        def code(self):
            return Code.UNAVAILABLE

        def details(self):
            return "failed to connect to all addresses"

    try:
        try:
            raise RpcError()
        except RpcError as grpc_error:
            raise RetriesExceeded(errorClass="RETRIES_EXCEEDED", messageParameters={}) from grpc_error
    except RetriesExceeded as exc:
        cause = server_away(exc, "sc://h:15002", "connection spark_connect_default")
    assert cause is not None and "UNAVAILABLE: failed to connect" in cause
    assert "sc://h:15002 (from connection spark_connect_default)" in cause
    assert "lockstep dev status" in cause and "point the spark_connect_default connection" in cause
    assert server_away(RuntimeError("a task failed"), "sc://h:15002") is None


def test_spec_refuses_connect_url_parameters_so_no_token_reaches_a_log():
    from lockstep.spec import SpecError, parse_spec

    doc = {"name": "m", "source": {"topics": ["in"]}, "transform": "lockstep_examples.orders:enrich",
           "sink": {"topic": "out", "dead_letter_topic": "dlq"}, "checkpoints": {"store": "s3://b/p"},
           "transactions": {"id_prefix": "tx"}, "spark": {"remote": "sc://h:15002/;token=s3cr3t"}}
    with pytest.raises(SpecError) as caught:
        parse_spec(doc, "m.yaml")
    assert "SPARK_CONNECT_AUTHENTICATE_TOKEN" in str(caught.value) and "s3cr3t" not in str(caught.value)


def test_a_connect_session_takes_the_specs_runtime_settings_and_names_the_ones_it_cannot(caplog):
    """Connect is the default mode: a spec's spark.conf must not be dropped in silence there."""
    from lockstep.spark.connect import set_session_conf
    from tests.support.fake_spark import FakeSession

    session = FakeSession(modifiable=lambda key: key.startswith("spark.sql."))
    conf = {"spark.sql.shuffle.partitions": "4", "spark.executor.memory": "2g", "spark.speculation": "false"}
    with caplog.at_level("WARNING", logger="lockstep.spark.connect"):
        ignored = set_session_conf(session, conf, 7)
    assert session.conf.values == {"spark.sql.shuffle.partitions": "4"}
    assert ignored == ["spark.executor.memory"]
    assert "checkpoint 7: spark.conf spark.executor.memory cannot be set on a Spark Connect session" in caplog.text


def test_a_checkpoint_reads_exactly_its_ranges_of_committed_records_in_at_most_its_tasks():
    """The job's read, through the session it is given: Lockstep's reader gets the claimed partitions
    from their start to their (exclusive) end, empty ranges left out, and the task count; the
    connection's settings (credentials) travel in the session's conf under a redacted key, never as
    options, and leave the session once the run is done."""
    import json

    from lockstep.model.offsets import OffsetRange
    from lockstep.spark.jvm_writer import JVM_SETTINGS_CONF_PREFIX
    from lockstep.spark.kafka_reader import RANGES_FORMAT, forget_read_settings, read_ranges
    from tests.support.fake_spark import FakeSession

    session = FakeSession(loaded="the rows")
    ranges = (OffsetRange("orders", 0, 5, 9), OffsetRange("orders", 1, 7, 7), OffsetRange("orders", 2, 0, 3))
    kafka = {"bootstrap.servers": "b:9092", "sasl.jaas.config": "... password=\"s3cr3t\";"}
    assert read_ranges(session, kafka, ranges, tasks=1) == "the rows"
    [(source, options)] = session.reads
    assert source == RANGES_FORMAT and options["headers"] == "false"
    assert "s3cr3t" not in json.dumps(options)
    [(key, value)] = session.conf.values.items()
    assert key == JVM_SETTINGS_CONF_PREFIX + options["read_id"] and "secret" in key
    settings = json.loads(value)
    assert settings["ranges"] == [["orders", 0, 5, 9], ["orders", 2, 0, 3]] and settings["tasks"] == 1
    assert settings["consumer_config"]["bootstrap.servers"] == "b:9092"
    assert settings["consumer_config"]["fetch.max.wait.ms"] == "20"
    forget_read_settings(session)
    assert session.conf.values == {}
    read_ranges(session, kafka, ranges, headers=True)
    assert session.reads[-1][1]["headers"] == "true"
    assert json.loads(next(iter(session.conf.values.values())))["tasks"] == 2  # default: one per non-empty range


def test_the_cluster_default_parallelism_is_asked_of_the_session():
    from lockstep.spark.kafka_reader import default_parallelism
    from tests.support.fake_spark import FakeSession

    assert default_parallelism(FakeSession(default_parallelism=6)) == 6


def test_once_the_server_stopped_answering_the_runs_cleanup_calls_are_tried_once_each():
    """The write failed through the client's retries (a killed server): the JVM writer's cleanup of the
    session's conf, the reads' and the session's release then try once, instead of waiting the retries out
    again each (a run took 51 s to fail, four times the retries). Any other failure leaves the retries be."""
    from pyspark.errors.exceptions.base import RetriesExceeded

    from lockstep.spark import jvm_writer
    from lockstep.spark.connect import ONCE

    calls: list[str] = []

    class Client:
        def set_retry_policies(self, policies):
            calls.append(f"retries {policies[0].max_retries}")

    class Conf:
        def set(self, key, value):
            calls.append("conf.set")

        def unset(self, key):
            calls.append("conf.unset")

    class Writer:
        def __init__(self, exc):
            self.exc = exc

        def format(self, *_):
            return self

        def mode(self, *_):
            return self

        def option(self, *_):
            return self

        def save(self):
            raise self.exc

    class Session:  # as a Connect session (the module is what says so)
        client, conf = Client(), Conf()

    Session.__module__ = "pyspark.sql.connect.session"

    class Classic:  # a classic session's `client` raises
        conf = Conf()

        @property
        def client(self):
            raise RuntimeError("[ONLY_SUPPORTED_WITH_SPARK_CONNECT] SparkSession.client")

    class Frame:
        def __init__(self, exc):
            self.write = Writer(exc)

    settings = object.__new__(jvm_writer.WriterSettings)
    away = RetriesExceeded(errorClass="RETRIES_EXCEEDED", messageParameters={})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jvm_writer, "jvm_settings", lambda s: {})
        with pytest.raises(RetriesExceeded):
            jvm_writer.write_with_jvm(Session(), Frame(away), settings)
        assert calls == ["conf.set", f"retries {ONCE['max_retries']}", "conf.unset"]
        calls.clear()
        with pytest.raises(RuntimeError):
            jvm_writer.write_with_jvm(Session(), Frame(RuntimeError("a task failed")), settings)
        assert calls == ["conf.set", "conf.unset"]
        calls.clear()
        for exc in (away, RuntimeError("a task failed")):  # a classic session: its own failure, untouched
            with pytest.raises(type(exc)):
                jvm_writer.write_with_jvm(Classic(), Frame(exc), settings)
        assert calls == ["conf.set", "conf.unset"] * 2


class _Rpc(Exception):
    """A gRPC call's error as the Connect client sees it (an RpcError that is also a Call)."""

    def __init__(self, code_name: str, details: str) -> None:
        import grpc

        super().__init__(details)
        self._code, self._details = getattr(grpc.StatusCode, code_name), details

    def code(self):
        return self._code

    def details(self):
        return self._details


def _rpc_error(code_name: str, details: str) -> BaseException:
    import grpc

    return type("RpcError", (_Rpc, grpc.RpcError), {})(code_name, details)


REFUSED = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:20524: Failed to connect to "
           "remote host: Connection refused")


def test_a_session_open_on_its_server_gives_up_at_once_when_the_server_refuses_and_retries_anything_else():
    """kill_connect in the soak: the run's write waited out 6 retries (16 s) against a refused port, though a
    session cannot outlive its server. Once open, a refused connection ends the call at once (RetriesExceeded,
    as before, so it is classified and reported alike); a dropped stream is still retried."""
    from pyspark.errors.exceptions.base import RetriesExceeded
    from pyspark.sql.connect.client.retries import Retrying

    from lockstep.spark.connect import RETRIES, hold_to_session, refused, server_away

    policies: list = []

    class Session:
        class client:
            @staticmethod
            def set_retry_policies(given):
                policies[:] = given

    hold_to_session(Session())  # type: ignore[arg-type]
    assert policies[-1].max_retries == RETRIES["max_retries"]

    def attempts(errors: list[BaseException]) -> tuple[int, list[float], BaseException | None]:
        slept: list[float] = []
        tries = 0
        try:
            for attempt in Retrying(policies, sleep=slept.append):
                with attempt:
                    tries += 1
                    if errors:
                        raise errors.pop(0)
        except RetriesExceeded as exc:
            return tries, slept, exc
        return tries, slept, None

    tries, slept, failed = attempts([_rpc_error("UNAVAILABLE", REFUSED)])
    assert (tries, slept) == (1, []) and failed is not None and refused(failed.__cause__)
    away = server_away(failed, "sc://127.0.0.1:20524", "connection spark_connect_default")
    assert away is not None and "did not answer (it refused the connection: it is down or restarting" in away
    # The stream dropped as the server died, then refused: one quick retry, then at once.
    tries, slept, failed = attempts([_rpc_error("UNAVAILABLE", "Socket closed"), _rpc_error("UNAVAILABLE", REFUSED)])
    assert tries == 2 and len(slept) == 1 and failed is not None
    # Anything else unavailable is retried, and then succeeds.
    tries, slept, failed = attempts([_rpc_error("UNAVAILABLE", "Socket closed")] * 3)
    assert (tries, len(slept), failed) == (4, 3, None)
    assert not refused(_rpc_error("INTERNAL", "Connection refused")) and not refused(ValueError("Connection refused"))


def test_the_default_parallelism_is_read_from_the_ranges_plan_when_it_says_and_counted_when_not():
    from lockstep.spark.kafka_reader import default_parallelism
    from tests.support.fake_spark import FakeFrame, FakeSession

    class Planned(FakeFrame):
        def __init__(self, partitions: int, plan: str | Exception) -> None:
            super().__init__(partitions)
            self.plan = plan

        def _explain_string(self, mode: str) -> str:
            assert mode == "simple"
            if isinstance(self.plan, Exception):
                raise self.plan
            return self.plan

    class Session(FakeSession):
        def __init__(self, plan: str | Exception) -> None:
            super().__init__(default_parallelism=3)
            self.plan = plan

        def range(self, start: int, end: int | None = None) -> FakeFrame:
            return Planned(self.default_parallelism, self.plan)

    plan = "== Physical Plan ==\n*(1) Range (0, 65536, step=1, splits=8)\n\n"
    assert default_parallelism(Session(plan)) == 8  # the plan's, no job
    # A plan that does not say, or an analysis refused: the job's count.
    assert default_parallelism(Session("== Physical Plan ==\n*(1) Scan ExistingRDD\n")) == 3
    assert default_parallelism(Session(RuntimeError("analysis failed"))) == 3
