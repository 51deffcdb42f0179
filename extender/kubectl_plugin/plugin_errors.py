"""The plugin's errors (printed as ``error: ...`` with exit code 1) and the message of an error answer."""

from __future__ import annotations

from collections.abc import Mapping

import orjson


class PluginError(Exception):
    """An error to print as ``error: ...`` with exit code 1."""


class UnreachableError(PluginError):
    """The in-cluster extender could not be asked; computing locally is the fallback."""


def status_message(data: bytes) -> str:
    """The message of a metav1.Status (or of the extender's error JSON), else the raw text."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data[:500].decode("utf-8", "replace").strip()
    if isinstance(document, Mapping):
        return str(document.get("message") or document.get("error") or document.get("Error") or document)
    return str(document)[:500]
