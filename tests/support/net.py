"""Network helpers for the tests that start real servers (tests/commands/test_server_process.py,
tests/transport/test_tls.py)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
