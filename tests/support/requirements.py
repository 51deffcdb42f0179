"""What a test does when something it needs from the system is missing: under CI=true that is a failure (CI
installs everything through `make deps`), elsewhere the test skips with the message, which names the package and
how to install it."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing_requirement(message: str) -> NoReturn:
    """Fail under CI=true, skip elsewhere, with `message`."""
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)
