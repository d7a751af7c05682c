"""One Kafka connection (librdkafka names in its extras) in each client's dialect: confluent-kafka,
Java kafka-clients (Spark's source, the JVM writer), kafka-python (the committer's admin client)."""
from __future__ import annotations

import pytest

from lockstep.errors import TerminalError
from lockstep.kafka.client_configs import (
    CONFLUENT,
    JAVA,
    KAFKA_PYTHON,
    KafkaConnectionError,
    client_configs,
    confluent_config,
    java_config,
    kafka_python_config,
)

BOOT = "b1:9096,b2:9096"
SCRAM = {"bootstrap.servers": BOOT, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
         "sasl.username": "lockstep", "sasl.password": "s3cret", "ssl.ca.location": "/etc/kafka/ca.pem"}


def test_plaintext_is_the_same_connection_in_every_dialect():
    extra = {"bootstrap.servers": BOOT}
    assert confluent_config("k", extra) == extra
    assert java_config("k", extra) == {"bootstrap.servers": BOOT, "security.protocol": "PLAINTEXT"}
    assert kafka_python_config("k", extra) == {"bootstrap_servers": BOOT, "security_protocol": "PLAINTEXT"}


def test_sasl_ssl_scram_with_a_ca_file():
    assert confluent_config("k", SCRAM) == SCRAM  # librdkafka's own names: unchanged
    assert java_config("k", SCRAM) == {
        "bootstrap.servers": BOOT,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="lockstep" password="s3cret";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
        "ssl.endpoint.identification.algorithm": "https",
    }
    assert kafka_python_config("k", SCRAM) == {
        "bootstrap_servers": BOOT, "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "lockstep", "sasl_plain_password": "s3cret", "ssl_check_hostname": True,
        "ssl_cafile": "/etc/kafka/ca.pem",
    }


@pytest.mark.parametrize("mechanism,module", [
    ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
    ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ("scram-sha-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
])
def test_sasl_plaintext_mechanisms(mechanism, module):
    extra = {"bootstrap.servers": BOOT, "security.protocol": "sasl_plaintext", "sasl.mechanisms": mechanism,
             "sasl.username": "u", "sasl.password": "p"}
    java = java_config("k", extra)
    assert java["security.protocol"] == "SASL_PLAINTEXT" and java["sasl.mechanism"] == mechanism.upper()
    assert java["sasl.jaas.config"] == f'{module} required username="u" password="p";'
    assert not any(k.startswith("ssl.") for k in java)  # no TLS on a PLAINTEXT transport
    kp = kafka_python_config("k", extra)
    assert (kp["security_protocol"], kp["sasl_mechanism"]) == ("SASL_PLAINTEXT", mechanism.upper())
    assert not any(k.startswith("ssl_") for k in kp)


def test_jaas_values_are_escaped_for_kafkas_jaas_parser():
    extra = {**SCRAM, "sasl.username": 'we"ird', "sasl.password": 'a\\b"c\nd'}
    jaas = java_config("k", extra)["sasl.jaas.config"]
    assert jaas.endswith('username="we\\"ird" password="a\\\\b\\"c\\nd";')


def test_mutual_tls_with_one_pem_file_and_hostname_verification_off():
    extra = {"bootstrap.servers": BOOT, "security.protocol": "SSL", "ssl.ca.location": "/tls/ca.pem",
             "ssl.certificate.location": "/tls/client.pem", "ssl.key.location": "/tls/client.pem",
             "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": "none"}
    assert java_config("k", extra) == {
        "bootstrap.servers": BOOT, "security.protocol": "SSL",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/tls/ca.pem",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": "/tls/client.pem", "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": "",
    }
    assert kafka_python_config("k", extra) == {
        "bootstrap_servers": BOOT, "security_protocol": "SSL", "ssl_check_hostname": False,
        "ssl_cafile": "/tls/ca.pem", "ssl_certfile": "/tls/client.pem", "ssl_keyfile": "/tls/client.pem",
        "ssl_password": "kp",
    }


def test_separate_certificate_and_key_files_are_fine_for_librdkafka_and_kafka_python_but_not_java():
    extra = {"bootstrap.servers": BOOT, "security.protocol": "SSL", "ssl.certificate.location": "/tls/c.pem",
             "ssl.key.location": "/tls/k.pem"}
    assert confluent_config("k", extra) == extra
    assert kafka_python_config("k", extra)["ssl_keyfile"] == "/tls/k.pem"
    with pytest.raises(KafkaConnectionError, match=r"'k': ssl.key.location: kafka-clients cannot express .* one file"):
        java_config("k", extra)
    with pytest.raises(KafkaConnectionError):
        client_configs("k", extra)  # so the connection as a whole is refused, before anything runs


def test_tls_without_a_ca_uses_each_clients_default_trust_store():
    extra = {"bootstrap.servers": BOOT, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.username": "u", "sasl.password": "p"}  # e.g. Amazon MSK: a public CA
    java = java_config("k", extra)
    assert "ssl.truststore.location" not in java and "ssl.truststore.type" not in java
    assert "ssl_cafile" not in kafka_python_config("k", extra)


def test_other_settings_reach_each_client_under_its_own_name():
    extra = {"bootstrap.servers": BOOT, "client.id": "etl", "request.timeout.ms": "20000", "linger.ms": 5,
             "enable.idempotence": True}
    java = java_config("k", extra)
    assert (java["client.id"], java["request.timeout.ms"], java["linger.ms"], java["enable.idempotence"]) == \
        ("etl", "20000", "5", "true")
    kp = kafka_python_config("k", extra)
    assert (kp["client_id"], kp["request_timeout_ms"]) == ("etl", 20000)
    assert "linger_ms" not in kp and "linger.ms" not in kp  # a producer setting; the admin client has none


def test_kafka_python_kwargs_are_ones_kafka_admin_client_accepts():
    from kafka import KafkaAdminClient

    extra = {**SCRAM, "ssl.certificate.location": "/c.pem", "ssl.key.location": "/c.pem", "ssl.key.password": "x",
             "client.id": "c", "request.timeout.ms": 1, "reconnect.backoff.ms": 1, "reconnect.backoff.max.ms": 1,
             "retry.backoff.ms": 1, "metadata.max.age.ms": 1, "connections.max.idle.ms": 1}
    accepted = set(KafkaAdminClient.DEFAULT_CONFIG)
    assert set(kafka_python_config("k", extra)) <= accepted


def test_client_configs_gives_every_dialect():
    configs = client_configs("kafka_secure", SCRAM)
    assert configs.for_dialect(CONFLUENT) == SCRAM
    assert configs.for_dialect(JAVA)["sasl.mechanism"] == "SCRAM-SHA-512"
    assert configs.for_dialect(KAFKA_PYTHON)["sasl_plain_password"] == "s3cret"
    assert "s3cret" not in repr(configs)
    configs.for_dialect(JAVA).clear()  # callers get copies
    assert configs.java


@pytest.mark.parametrize("extra,key,message", [
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanism", "is required"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism", "GSSAPI is not supported"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism", "not supported"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM"}, "sasl.mechanism", "librdkafka"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "MD5"}, "sasl.mechanism", "not one of"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"}, "sasl.password",
     "is required"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256",
      "sasl.username": "u", "sasl.password": "p"}, "sasl.mechanisms", "contradicts"),
    ({"security.protocol": "TLS"}, "security.protocol", "not one of"),
    # Credentials next to a protocol that would not send them: librdkafka ignores them silently.
    ({"sasl.username": "u", "sasl.password": "p"}, "sasl.username", "security.protocol is PLAINTEXT"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
      "ssl.ca.location": "/ca.pem"}, "ssl.ca.location", "security.protocol is SASL_PLAINTEXT"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"}, "ssl.key.location", "needs both"),
    ({"security.protocol": "SSL", "ssl.key.password": "x"}, "ssl.key.password", "no ssl.key.location"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
     "ssl.endpoint.identification.algorithm", "not https"),
    ({"security.protocol": "SSL", "ssl.ca.location": ""}, "ssl.ca.location", "non-empty string"),
    # librdkafka-only security settings: the other two clients cannot be given them.
    ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"},
     "enable.ssl.certificate.verification", "cannot express"),
    ({"security.protocol": "SSL", "ssl.ca.pem": "-----BEGIN CERTIFICATE-----"}, "ssl.ca.pem", "cannot express"),
    ({"security.protocol": "SSL", "ssl.crl.location": "/crl.pem"}, "ssl.crl.location", "cannot express"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
      "sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name", "cannot express"),
])
def test_a_setting_that_cannot_be_used_is_a_terminal_error_naming_the_connection_and_key(extra, key, message):
    with pytest.raises(TerminalError) as caught:
        client_configs("kafka_secure", {"bootstrap.servers": BOOT, **extra})
    assert isinstance(caught.value, KafkaConnectionError)
    assert (caught.value.conn_id, caught.value.key) == ("kafka_secure", key)
    assert str(caught.value).startswith(f"Kafka connection 'kafka_secure': {key}: ")
    assert message in str(caught.value)


def test_librdkafka_only_settings_stay_usable_by_confluent_alone():
    extra = {"bootstrap.servers": BOOT, "security.protocol": "SSL", "ssl.ca.pem": "-----BEGIN CERTIFICATE-----"}
    assert confluent_config("k", extra) == extra
    with pytest.raises(KafkaConnectionError, match="kafka-python cannot express"):
        kafka_python_config("k", extra)


def test_certificate_verification_left_on_is_not_an_error():
    extra = {"bootstrap.servers": BOOT, "security.protocol": "SSL", "enable.ssl.certificate.verification": True}
    assert "enable.ssl.certificate.verification" not in java_config("k", extra)
    assert kafka_python_config("k", extra)["security_protocol"] == "SSL"


def test_missing_bootstrap_servers():
    with pytest.raises(TerminalError, match="'k' has no 'bootstrap.servers'"):
        client_configs("k", {"security.protocol": "SSL"})


def test_connections_kafka_config_resolves_each_dialect(monkeypatch):
    import json

    from lockstep.connections import kafka_config

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SECURE", json.dumps({"conn_type": "kafka", "extra": SCRAM}))
    assert kafka_config("kafka_secure") == SCRAM
    assert kafka_config("kafka_secure", JAVA)["ssl.truststore.location"] == "/etc/kafka/ca.pem"
    assert kafka_config("kafka_secure", KAFKA_PYTHON)["sasl_plain_username"] == "lockstep"
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SECURE",
                       json.dumps({"conn_type": "kafka", "extra": {**SCRAM, "sasl.mechanism": "GSSAPI"}}))
    with pytest.raises(KafkaConnectionError, match="'kafka_secure': sasl.mechanism: GSSAPI"):
        kafka_config("kafka_secure")  # even the confluent dialect: the pipeline needs all three
