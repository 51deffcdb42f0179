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
from pathlib import Path

from tests.e2e.cluster import free_port

DRA_EXTENDER = Path(sys.executable).parent / "dra-extender"


@contextmanager
def demo_server(log_path: Path, *extra_args: str) -> Iterator[str]:
    """Start the demo server, wait for /readyz, yield its base URL (http://127.0.0.1:PORT); stop it after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(DRA_EXTENDER), "serve", "--listen", f"127.0.0.1:{port}", *extra_args],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
                        if response.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                assert process.poll() is None, f"the demo server exited:\n{log_path.read_text()}"
                assert time.monotonic() < deadline, f"the demo server did not become ready:\n{log_path.read_text()}"
                time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            process.wait(10)
