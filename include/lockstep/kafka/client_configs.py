"""A Kafka connection as each of Lockstep's Kafka clients wants it.

A Kafka connection's ``extra`` holds librdkafka settings, as in Airflow's Kafka provider
(``bootstrap.servers``, ``security.protocol``, ``sasl.username``, ``ssl.ca.location``, ...).
Lockstep talks to Kafka through three client libraries that spell the same settings differently:

* **confluent-kafka** (librdkafka): plan, topic metadata and offsets, ``verify``'s reader, the
  Python writer and fencing. It takes the extras as they are.
* **Java kafka-clients**: Spark's Kafka source (every key becomes a ``kafka.<key>`` option) and
  the JVM writer's producer. SASL credentials become ``sasl.jaas.config``, a PEM CA file a PEM
  trust store, a PEM client certificate a PEM key store.
* **kafka-python**: the committer's admin client (``KafkaAdminClient`` keyword arguments), which
  sends EndTxn and DescribeTransactions itself (``lockstep.kafka.internals``).

This module is the only place that translates; everything else asks ``lockstep.connections`` for
the dialect it needs. Security settings are never dropped: one that a dialect cannot express is a
:class:`TerminalError` naming the connection and the key, raised when the connection is first
resolved (the plan step), before anything is claimed. The functions are pure: no file is read.

Settings outside security go to each client under their own name: unchanged to librdkafka and
to kafka-clients (which warns about, and ignores, a name it does not know); kafka-python's admin
client takes only the connection-level ones (client id, timeouts, back-offs), since producer and
consumer settings do not concern a client that only sends transaction requests.
"""
from __future__ import annotations

__all__ = [
    "CONFLUENT", "ClientConfig", "JAVA", "KAFKA_PYTHON", "client_configs",
]

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep.errors import TerminalError

#: A Kafka connection's extra: JSON values by librdkafka setting name, checked here before any client sees them.
Extra = Mapping[str, object]
#: A connection's settings in one client's dialect (a client config, or kafka-python's keyword arguments):
#: the extra's values and Lockstep's translations of them, handed to the client library as they are, which
#: checks them itself. Any: callers add their own (callbacks, a logger) and read theirs back (``int(...)``).
ClientConfig = dict[str, Any]

CONFLUENT, JAVA, KAFKA_PYTHON = "confluent-kafka", "kafka-clients", "kafka-python"
DIALECTS = (CONFLUENT, JAVA, KAFKA_PYTHON)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: SASL mechanisms every dialect can carry from a connection's extras, with the Java login module.
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
#: Mechanisms users ask for that cannot be carried by all three clients, and why.
UNSUPPORTED_MECHANISMS = {
    "GSSAPI": "Kerberos needs a keytab and krb5 set-up on every host (Java: a Krb5LoginModule JAAS "
              "configuration; kafka-python: the gssapi package), which connection extras cannot carry",
    "OAUTHBEARER": "tokens come from a callback or an OIDC endpoint configured differently in each client; "
                   "connection extras cannot carry it to all three",
    "AWS_MSK_IAM": "librdkafka (confluent-kafka) has no AWS_MSK_IAM mechanism, and the Java one needs the "
                   "aws-msk-iam-auth jar on Spark's classpath; use the cluster's SCRAM listener",
}

#: The security settings this module translates (librdkafka names).
SECURITY_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification",
})
#: Connection-level settings kafka-python's admin client also has: librdkafka name -> (kwarg, type).
KAFKA_PYTHON_CONNECTION_KEYS: Mapping[str, tuple[str, type]] = {
    "client.id": ("client_id", str),
    "request.timeout.ms": ("request_timeout_ms", int),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", int),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "metadata.max.age.ms": ("metadata_max_age_ms", int),
    "connections.max.idle.ms": ("connections_max_idle_ms", int),
}


def _is_security_key(key: str) -> bool:
    return key in SECURITY_KEYS or key.startswith(("ssl.", "sasl.", "enable.ssl.", "enable.sasl.", "https."))


class KafkaConnectionError(TerminalError):
    """A Kafka connection's extras cannot be used (by one client, or at all); names the key."""

    def __init__(self, conn_id: str, key: str, reason: str) -> None:
        self.conn_id, self.key = conn_id, key
        super().__init__(f"Kafka connection {conn_id!r}: {key}: {reason}")


@dataclass(frozen=True)
class Security:
    """The security settings of one connection, checked, in no client's spelling."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    verify_hostname: bool = True
    #: Security keys confluent-kafka takes but the other two cannot be given (reported by them).
    librdkafka_only: tuple[str, ...] = ()

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


@dataclass(frozen=True)
class KafkaClientConfigs:
    """One connection in each dialect; built (and so checked) all at once."""

    conn_id: str
    confluent: ClientConfig = field(repr=False)
    java: dict[str, str] = field(repr=False)
    kafka_python: ClientConfig = field(repr=False)

    def for_dialect(self, dialect: str) -> ClientConfig:
        configs = {CONFLUENT: self.confluent, JAVA: self.java, KAFKA_PYTHON: self.kafka_python}
        if dialect not in configs:
            raise ValueError(f"unknown Kafka client dialect {dialect!r}; one of {', '.join(DIALECTS)}")
        return dict(configs[dialect])


def client_configs(conn_id: str, extra: Extra) -> KafkaClientConfigs:
    """Every dialect of a connection: a setting one client cannot express fails here, for all."""
    return KafkaClientConfigs(conn_id, confluent_config(conn_id, extra), java_config(conn_id, extra),
                              kafka_python_config(conn_id, extra))


# ---- the connection, read once -------------------------------------------------------------------
def _text(conn_id: str, extra: Extra, key: str) -> str | None:
    value = extra.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise KafkaConnectionError(conn_id, key, "must be a non-empty string")
    return value


def bootstrap_servers(conn_id: str, extra: Extra) -> str:
    value = extra.get("bootstrap.servers")
    if not value:
        raise TerminalError(f"Kafka connection {conn_id!r} has no 'bootstrap.servers' in its extra")
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return str(value)


def _flag(conn_id: str, extra: Extra, key: str, default: bool) -> bool:
    value = extra.get(key, default)
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise KafkaConnectionError(conn_id, key, f"must be true or false, not {value!r}")


def security(conn_id: str, extra: Extra) -> Security:
    """Read and check the security settings; what no client can use is an error here."""
    protocol = (_text(conn_id, extra, "security.protocol") or "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise KafkaConnectionError(conn_id, "security.protocol",
                                   f"{extra['security.protocol']!r} is not one of {', '.join(PROTOCOLS)}")
    tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol.startswith("SASL_")

    present = [k for k in extra if _is_security_key(k) and k != "security.protocol"]
    for key in present:
        if key.startswith(("sasl.", "enable.sasl.")) and not sasl:
            raise KafkaConnectionError(conn_id, key, f"is set but security.protocol is {protocol}, so it would not "
                                                     "be used: set security.protocol to SASL_SSL or SASL_PLAINTEXT")
        if key.startswith(("ssl.", "enable.ssl.")) and not tls:
            raise KafkaConnectionError(conn_id, key, f"is set but security.protocol is {protocol}, so it would not "
                                                     "be used: set security.protocol to SSL or SASL_SSL")

    mechanism = username = password = None
    if sasl:
        mechanism = _mechanism(conn_id, extra)
        username = _text(conn_id, extra, "sasl.username")
        password = _text(conn_id, extra, "sasl.password")
        for key, value in (("sasl.username", username), ("sasl.password", password)):
            if value is None:
                raise KafkaConnectionError(conn_id, key, f"is required with sasl.mechanism {mechanism}")

    ca_file = cert_file = key_file = key_password = None
    verify_hostname = True
    if tls:
        ca_file = _text(conn_id, extra, "ssl.ca.location")
        cert_file = _text(conn_id, extra, "ssl.certificate.location")
        key_file = _text(conn_id, extra, "ssl.key.location")
        key_password = _text(conn_id, extra, "ssl.key.password")
        if (cert_file is None) != (key_file is None):
            missing = "ssl.key.location" if key_file is None else "ssl.certificate.location"
            raise KafkaConnectionError(conn_id, missing, "a client certificate needs both ssl.certificate.location "
                                                         "and ssl.key.location")
        if key_password is not None and key_file is None:
            raise KafkaConnectionError(conn_id, "ssl.key.password", "is set but there is no ssl.key.location")
        algorithm = (_text(conn_id, extra, "ssl.endpoint.identification.algorithm") or "https").lower()
        if algorithm not in ("https", "none"):
            raise KafkaConnectionError(conn_id, "ssl.endpoint.identification.algorithm",
                                       f"{algorithm!r} is not https (check the broker's host name) or none")
        verify_hostname = algorithm == "https"
    librdkafka_only = tuple(sorted(k for k in present if k not in SECURITY_KEYS))
    if tls and not _flag(conn_id, extra, "enable.ssl.certificate.verification", True):
        librdkafka_only = tuple(sorted({*librdkafka_only, "enable.ssl.certificate.verification"}))
    return Security(protocol, mechanism, username, password, ca_file, cert_file, key_file, key_password,
                    verify_hostname, librdkafka_only)


def _mechanism(conn_id: str, extra: Extra) -> str:
    single, plural = _text(conn_id, extra, "sasl.mechanism"), _text(conn_id, extra, "sasl.mechanisms")
    if single and plural and single.upper() != plural.upper():
        raise KafkaConnectionError(conn_id, "sasl.mechanisms", f"{plural!r} contradicts sasl.mechanism {single!r}")
    key = "sasl.mechanism" if single else "sasl.mechanisms"
    mechanism = (single or plural or "").upper()
    if not mechanism:
        # librdkafka would silently pick GSSAPI (Kerberos); the other clients have other defaults.
        raise KafkaConnectionError(conn_id, "sasl.mechanism", f"is required with a SASL security.protocol: one of "
                                                              f"{', '.join(LOGIN_MODULES)}")
    if mechanism in UNSUPPORTED_MECHANISMS:
        raise KafkaConnectionError(conn_id, key, f"{mechanism} is not supported: {UNSUPPORTED_MECHANISMS[mechanism]}")
    if mechanism not in LOGIN_MODULES:
        raise KafkaConnectionError(conn_id, key, f"{mechanism!r} is not one of {', '.join(LOGIN_MODULES)}")
    return mechanism


def _cannot(conn_id: str, dialect: str, key: str, why: str = "") -> KafkaConnectionError:
    return KafkaConnectionError(conn_id, key, f"{dialect} cannot express this setting{': ' + why if why else ''}. "
                                              "Lockstep uses confluent-kafka, Java kafka-clients (Spark) and "
                                              "kafka-python (the committer) on every connection; remove it or use a "
                                              "setting all three support (see docs/platform.md, Secured clusters)")


_LIBRDKAFKA_ONLY_WHY = {
    "enable.ssl.certificate.verification": "it has no switch to accept any broker certificate; give the CA "
                                           "with ssl.ca.location instead",
}


# ---- dialects --------------------------------------------------------------------------------------
def confluent_config(conn_id: str, extra: Extra) -> ClientConfig:
    """confluent-kafka (librdkafka) settings: the extras as they are, once checked."""
    bootstrap_servers(conn_id, extra)
    security(conn_id, extra)
    return dict(extra)


def java_config(conn_id: str, extra: Extra) -> dict[str, str]:
    """Java kafka-clients properties (all strings): Spark's Kafka source options (``kafka.<key>``)
    and the JVM writer's producer. File paths must exist where the client runs: on every executor."""
    sec = security(conn_id, extra)
    for key in sec.librdkafka_only:
        raise _cannot(conn_id, JAVA, key, _LIBRDKAFKA_ONLY_WHY.get(key, ""))
    config = {"bootstrap.servers": bootstrap_servers(conn_id, extra)}
    config.update({k: _java_value(v) for k, v in extra.items() if not _is_security_key(k) and k != "bootstrap.servers"})
    config["security.protocol"] = sec.protocol
    if sec.sasl:
        assert sec.mechanism is not None  # security() refuses SASL without a mechanism
        config["sasl.mechanism"] = sec.mechanism
        config["sasl.jaas.config"] = (f"{LOGIN_MODULES[sec.mechanism]} required "
                                      f"username={_jaas_quote(sec.username)} password={_jaas_quote(sec.password)};")
    if sec.tls:
        if sec.ca_file:
            config["ssl.truststore.type"] = "PEM"
            config["ssl.truststore.location"] = sec.ca_file
        if sec.cert_file:
            if sec.cert_file != sec.key_file:
                raise _cannot(conn_id, JAVA, "ssl.key.location",
                              "its PEM key store is one file holding the private key (PKCS#8) and the certificate "
                              "chain; concatenate them and point ssl.certificate.location and ssl.key.location "
                              "at that one file")
            config["ssl.keystore.type"] = "PEM"
            config["ssl.keystore.location"] = sec.cert_file
            if sec.key_password:
                config["ssl.key.password"] = sec.key_password
        config["ssl.endpoint.identification.algorithm"] = "https" if sec.verify_hostname else ""
    return config


def kafka_python_config(conn_id: str, extra: Extra) -> ClientConfig:
    """kafka-python ``KafkaAdminClient`` keyword arguments (``bootstrap_servers`` included)."""
    sec = security(conn_id, extra)
    for key in sec.librdkafka_only:
        raise _cannot(conn_id, KAFKA_PYTHON, key, _LIBRDKAFKA_ONLY_WHY.get(key, ""))
    config: ClientConfig = {"bootstrap_servers": bootstrap_servers(conn_id, extra)}
    for key, (kwarg, kind) in KAFKA_PYTHON_CONNECTION_KEYS.items():
        if key in extra:
            try:
                config[kwarg] = kind(extra[key])
            except (TypeError, ValueError):
                raise KafkaConnectionError(conn_id, key, f"must be {kind.__name__}, not {extra[key]!r}") from None
    config["security_protocol"] = sec.protocol
    if sec.sasl:
        config.update(sasl_mechanism=sec.mechanism, sasl_plain_username=sec.username,
                      sasl_plain_password=sec.password)
    if sec.tls:
        config["ssl_check_hostname"] = sec.verify_hostname
        if sec.ca_file:
            config["ssl_cafile"] = sec.ca_file
        if sec.cert_file:
            config.update(ssl_certfile=sec.cert_file, ssl_keyfile=sec.key_file)
            if sec.key_password:
                config["ssl_password"] = sec.key_password
    return config


def _java_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _jaas_quote(value: str | None) -> str:
    """A JAAS option value in double quotes; Kafka's JAAS parser (a StreamTokenizer) reads
    backslash escapes inside quotes, so backslash, quote and line breaks are escaped."""
    text = (value or "").replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{text}"'
