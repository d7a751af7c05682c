"""Issue 45: the client libraries stay in their packages. confluent-kafka and kafka-python are imported
only in ``lockstep.kafka``, boto3 and botocore only in ``lockstep.store``; everything else in the core
asks those packages for a client or an operation. ``lockstep.connections`` resolves connections into
settings and ``lockstep.kafka`` / ``lockstep.store`` turn settings into clients: the latter never import
the former, so the two sides do not import each other."""
from __future__ import annotations

import pytest

from tests.unit.test_layout import _third_party_imports, engine_modules, import_graph

#: Each client library, and the one package of the core that may import it.
HOMES = {"confluent_kafka": "lockstep.kafka", "kafka": "lockstep.kafka", "boto3": "lockstep.store",
         "botocore": "lockstep.store"}
#: Imports under ``TYPE_CHECKING`` only, for the types of a client made in its home package: the Python
#: writer is a wrapper of librdkafka's transactional producer (its callbacks get confluent-kafka's errors
#: and messages), made by ``lockstep.kafka.clients.producer``.
TYPES_ONLY = {("lockstep.spark.python_writer", "confluent_kafka")}


def outside_their_package() -> list[str]:
    return sorted(f"{module} imports {lib}" for module, path in engine_modules().items()
                  for lib in _third_party_imports(path) if lib in HOMES
                  and not (module + ".").startswith(HOMES[lib] + ".") and (module, lib) not in TYPES_ONLY)


def test_kafka_and_s3_clients_are_imported_only_in_their_packages():
    assert outside_their_package() == []


def test_the_check_sees_a_client_imported_elsewhere(monkeypatch: pytest.MonkeyPatch):
    import tests.unit.test_layout as layout

    real = layout._third_party_imports
    monkeypatch.setattr("tests.unit.test_client_packages._third_party_imports",
                        lambda path: real(path) | ({"boto3"} if path.name == "verify.py" else set()))
    assert outside_their_package() == ["lockstep.ops.verify imports boto3"]


@pytest.mark.parametrize("package", ["lockstep.kafka", "lockstep.store"])
def test_the_client_packages_do_not_import_connections(package: str):
    graph = import_graph()
    assert sorted(m for m, targets in graph.items() if m.startswith(package + ".") and "lockstep.connections" in targets) == []
