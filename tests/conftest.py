"""Fixtures shared by the test modules under tests/ (the e2e control planes have their own conftest)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_api import FakeApiServer


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.close()
