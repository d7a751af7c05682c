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
