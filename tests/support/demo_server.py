"""`dra-extender serve` on the embedded demo, as `make run` starts it (one listener for the verbs, diagnostics and
the web view), on a free port: for tests that talk to the demo the way a reader of the README does."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testkit.control_plane import free_port

DRA_EXTENDER = Path(sys.executable).parent / "dra-extender"


@dataclass(frozen=True)
class DemoServer:
    """Where the started server listens: `url` serves the verbs (and everything else when `diagnostics_url` is
    the same); `diagnostics_url` serves diagnostics, /readyz and the web view."""

    url: str
    diagnostics_url: str


@contextmanager
def demo_listeners(log_path: Path, *extra_args: str, separate_diagnostics: bool = False) -> Iterator[DemoServer]:
    """Start the demo server (with `separate_diagnostics`, diagnostics on a second port, as a deployment runs
    it), wait for /readyz, yield where it listens; stop it after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["--listen", f"127.0.0.1:{port}"]
    diagnostics_url = url
    if separate_diagnostics:
        diagnostics = free_port()
        args += ["--diagnostics-listen", f"127.0.0.1:{diagnostics}"]
        diagnostics_url = f"http://127.0.0.1:{diagnostics}"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(DRA_EXTENDER), "serve", *args, *extra_args],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"{diagnostics_url}/readyz", timeout=2) as response:
                        if response.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                assert process.poll() is None, f"the demo server exited:\n{log_path.read_text()}"
                assert time.monotonic() < deadline, f"the demo server did not become ready:\n{log_path.read_text()}"
                time.sleep(0.2)
            yield DemoServer(url, diagnostics_url)
        finally:
            process.terminate()
            process.wait(10)


@contextmanager
def demo_server(log_path: Path, *extra_args: str) -> Iterator[str]:
    """The demo server on one listener, as `make run` starts it; yields its base URL (http://127.0.0.1:PORT)."""
    with demo_listeners(log_path, *extra_args) as server:
        yield server.url
