"""CPU per thread (extender/transport/thread_cpu.py, metric dra_extender_thread_cpu_seconds_total)."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from extender.transport.thread_cpu import thread_cpu_seconds

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_busy_thread_shows_its_cpu_under_its_name_and_a_pool_as_one_row() -> None:
    done = threading.Event()
    threads = [
        threading.Thread(target=lambda: (burn(0.3), done.wait(10)), name="cpu-test-burner"),
        *(threading.Thread(target=lambda: (burn(0.1), done.wait(10)), name=f"cpu-test-pool_{i}") for i in range(2)),
        threading.Thread(target=lambda: done.wait(10), name="cpu-test-idle"),
    ]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            seen = thread_cpu_seconds()
            if seen.get("cpu-test-burner", 0) >= 0.25 and seen.get("cpu-test-pool", 0) >= 0.15:
                break
            time.sleep(0.05)
        assert seen["cpu-test-burner"] >= 0.25 and seen["cpu-test-pool"] >= 0.15, seen
        assert seen["cpu-test-idle"] < 0.05 and "cpu-test-pool_0" not in seen
    finally:
        done.set()
        for thread in threads:
            thread.join()


def test_no_proc_means_no_rows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert thread_cpu_seconds(str(tmp_path / "missing")) == {}
