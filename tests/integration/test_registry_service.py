"""The platform's Schema Registry (Apicurio, lockstep_dev.registry), through Confluent's own client:
it serves the Confluent API, listens on loopback only, and keeps schemas in its H2 file across a restart."""
from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient


def _avro(name: str, *fields: str) -> Schema:
    return Schema(json.dumps({"type": "record", "name": name,
                              "fields": [{"name": f, "type": "string"} for f in fields]}), "AVRO")


def _client() -> SchemaRegistryClient:
    """The client configured as the library will be: from the connection the platform exports."""
    conn = json.loads(os.environ["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"])
    return SchemaRegistryClient({"url": conn["extra"]["url"], "timeout": 10})


def test_the_registry_registers_and_serves_a_schema_through_confluents_client(platform, unique):
    assert platform.running("registry")
    subject = f"{unique}-value"
    client = _client()
    schema_id = client.register_schema(subject, _avro("Order", "id", "item"))
    assert json.loads(client.get_schema(schema_id).schema_str)["name"] == "Order"
    latest = client.get_latest_version(subject)
    assert (latest.schema_id, latest.version) == (schema_id, 1)
    assert subject in client.get_subjects()


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket the process listens on, from /proc: its socket inodes, then
    the kernel's tables of IPv4 and IPv6 sockets (state 0A is LISTEN)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:
                continue
            hex_address, hex_port = fields[1].split(":")
            # The kernel prints each 32-bit word of the address in host (little-endian) order.
            raw = b"".join(bytes.fromhex(hex_address[i:i + 8])[::-1] for i in range(0, width, 8))
            found.append((str(ipaddress.ip_address(raw)), int(hex_port, 16)))
    return found


def test_the_registry_listens_on_loopback_only(platform):
    sockets = _listening(platform.state.pids["registry"])
    config = platform.registry
    assert {port for _, port in sockets} >= {config.port, config.management_port}, sockets
    for address, port in sockets:
        ip = ipaddress.ip_address(address)
        loopback = ip.ipv4_mapped.is_loopback if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else \
            ip.is_loopback
        assert loopback, f"the registry listens on {address}:{port}, not only on 127.0.0.1"


def test_a_schema_survives_a_stop_and_start_of_the_registry(platform, unique):
    subject = f"{unique}-value"
    schema_id = _client().register_schema(subject, _avro("Kept", "id"))
    platform.stop("registry")
    assert not platform.running("registry")
    platform.start("registry")
    latest = _client().get_latest_version(subject)  # a new client: nothing cached
    assert latest.schema_id == schema_id and json.loads(latest.schema.schema_str)["name"] == "Kept"
    assert (platform.registry.data_dir / "registry.mv.db").is_file()
