"""``procs.wait_until``: a service is declared dead only when it looks dead twice, a second apart."""
from __future__ import annotations

import pytest

from lockstep_dev.procs import PlatformError, wait_until


def test_one_false_liveness_reading_does_not_fail_a_start():
    readings = iter([False, True, True, True])
    checks = iter([False, False, True])
    wait_until(lambda: next(checks), "a service", 30, alive=lambda: next(readings))


def test_a_process_that_stays_dead_fails_the_start_with_its_name():
    with pytest.raises(PlatformError, match="a service: the process exited"):
        wait_until(lambda: False, "a service", 30, alive=lambda: False)


def test_free_ports_are_outside_the_ephemeral_range_distinct_and_bindable():
    """The kernel's ephemeral ports go to outgoing connections too: a service given one may find it taken."""
    import socket

    from lockstep_dev import procs

    low, high = procs.ephemeral_range()
    ports = [procs.free_port() for _ in range(50)]
    assert len(set(ports)) == 50 and not any(low <= p <= high for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))
    assert procs.free_port_range((32768, 60999)) == range(10_000, 32768)
    assert procs.free_port_range((12000, 60999)) == range(61000, 65536)


def test_the_ephemeral_range_falls_back_to_linuxs_default(tmp_path):
    from lockstep_dev import procs

    assert procs.ephemeral_range(tmp_path / "absent") == (32768, 60999)
    (tmp_path / "range").write_text("40000\t50000\n")
    assert procs.ephemeral_range(tmp_path / "range") == (40000, 50000)
