"""Which source subjects a checkpoint needs (`lockstep.formats.resolution`): a topic it reads no record of needs
none, a topic it reads records of does, and the reader schema is pinned from the first subject the registry
holds. On an in-memory registry: no service."""
from __future__ import annotations

import pytest

from lockstep.errors import TerminalError
from lockstep.formats import resolution
from lockstep.formats.registry import RegisteredSchema, RegistryError
from lockstep.spec import parse_spec

ORDER = '{"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"}]}'


class Registry:
    """The reads `readings` and `pin` make, of subjects held in a dict."""

    name = "fake-registry"

    def __init__(self, subjects: dict[str, list[RegisteredSchema]]) -> None:
        self.subjects = subjects
        self.asked: list[str] = []

    def subject_schemas(self, subject: str) -> list[RegisteredSchema]:
        self.asked.append(subject)
        if subject not in self.subjects:
            raise RegistryError(f"subject {subject} not found", 404, 40401)
        return self.subjects[subject]

    def version(self, subject: str) -> RegisteredSchema:
        return self.subject_schemas(subject)[-1]

    def schema(self, schema_id: int) -> RegisteredSchema:
        return next(s for versions in self.subjects.values() for s in versions if s.id == schema_id)


@pytest.fixture
def registry(monkeypatch):
    held = Registry({"orders-value": [RegisteredSchema(7, "AVRO", ORDER, 1)]})
    monkeypatch.setattr(resolution, "registry_for", lambda conn_id: held)
    return held


def spec(topics: list[str]):
    return parse_spec({"name": "p", "source": {"topics": topics, "value": "avro-confluent"}, "transform": "m:f",
                       "sink": {"topic": "out", "dead_letter_topic": "dlq"},
                       "checkpoints": {"store": "s3://bucket/p"}}, "p.yaml")


def test_a_topic_the_checkpoint_reads_nothing_of_needs_no_subject(registry):
    (reading,) = resolution.readings(spec(["new", "orders"]), read={"orders"})
    assert dict(reading.subjects) == {"orders": "orders-value"} and dict(reading.ids) == {"orders": (7,)}
    assert reading.reader == ORDER
    assert resolution.pin(spec(["new", "orders"]), read={"orders"}) == {"source.value": 7}  # the first subject held
    assert resolution.pin(spec(["new", "orders"]), read=set()) == {"source.value": 7}


def test_a_missing_subject_of_a_topic_the_checkpoint_reads_is_terminal_naming_topic_subject_and_the_way_out(registry):
    for call in (lambda: resolution.readings(spec(["new", "orders"]), read={"new", "orders"}),
                 lambda: resolution.readings(spec(["new", "orders"])),  # None: every topic is read (an audit)
                 lambda: resolution.pin(spec(["new", "orders"]), read={"new"})):
        with pytest.raises(TerminalError) as err:
            call()
        assert all(w in str(err.value) for w in ("p.yaml: source.value", "subject 'new-value' of topic new",
                                                  "fake-registry", "reads records of new", "Register",
                                                  "source.value.subject")), str(err.value)


def test_without_any_subject_there_is_no_schema_to_decode_into(registry):
    with pytest.raises(TerminalError, match="subject 'new-value' of topic new"):
        resolution.readings(spec(["new"]), read=set())
    assert resolution.pin(spec(["new"]), read=set()) == {}  # nothing read: the plan pins nothing, and claims
