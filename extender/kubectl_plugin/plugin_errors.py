"""The plugin's errors, printed as one line ``error: ...`` with the exit codes of ``dra-extender``
(extender/cli.py, docs/cli.md), the message of an error answer, and the words for an unknown PodGroup."""

from __future__ import annotations

from extender.cli import InputError, RefusedError, UnreachableError, UsageError, answer_message

__all__ = [
    "InputError",
    "NoExtenderBehindServiceError",
    "RefusedError",
    "UnreachableError",
    "UsageError",
    "podgroup_unknown",
    "status_message",
]


class NoExtenderBehindServiceError(UnreachableError):
    """Nobody answers behind the in-cluster extender's Service (exit code 4 if it ends the command): computing
    locally is the fallback."""


def status_message(data: bytes) -> str:
    """The message of a metav1.Status (or of the extender's error JSON), else the raw text."""
    return answer_message(data)


def podgroup_unknown(namespace: str, name: str) -> str:
    """The refusal (exit code 5) for a PodGroup the source does not know, no PodGroup object and no pod naming
    it: the same words whether the extender answered 404 or a local computation found nothing."""
    return f'podgroup "{name}" is not known in namespace "{namespace}": no PodGroup object and no pod naming it'
