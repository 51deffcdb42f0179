"""The plugin's errors, printed as one line ``error: ...`` with the exit codes of ``dra-extender``
(extender/cli.py, docs/cli.md), and the message of an error answer."""

from __future__ import annotations

from extender.cli import InputError, RefusedError, UnreachableError, UsageError, answer_message

__all__ = [
    "InputError",
    "NoExtenderBehindServiceError",
    "RefusedError",
    "UnreachableError",
    "UsageError",
    "status_message",
]


class NoExtenderBehindServiceError(UnreachableError):
    """Nobody answers behind the in-cluster extender's Service (exit code 4 if it ends the command): computing
    locally is the fallback."""


def status_message(data: bytes) -> str:
    """The message of a metav1.Status (or of the extender's error JSON), else the raw text."""
    return answer_message(data)
