"""The plugin's own error: nobody behind the extender's Service. Every other error and exit code is the one
`dra-extender` uses (commands/outcomes.py, docs/cli.md)."""

from __future__ import annotations

from extender.commands.outcomes import UnreachableError


class NoExtenderBehindServiceError(UnreachableError):
    """Nobody answers behind the in-cluster extender's Service (exit code 4 if it ends the command): computing
    locally is the fallback."""
