"""What every source of an answer offers: the extender's four diagnostics."""

from __future__ import annotations

from typing import Any, Protocol

from extender.commands.pod_file import PodFile


class Extender(Protocol):
    """Asks one source for the four diagnostics: explain(pod), queues(), node(name), podgroup(namespace, name).
    A running extender's diagnostics API (commands/diagnostics_client.py DiagnosticsClient), a service of our
    own (local.py LocalExtender) and the one with the other as fallback (fallback.py) all offer them."""

    def explain(self, pod: dict[str, Any], pod_file: PodFile | None = None) -> dict[str, Any]:
        """The explanation of ``pod``; ``pod_file``: the file it came from (``-f``), whose objects beside the
        pod a local answer uses on top of its cluster and a running extender is not sent (a note says so)."""
        ...

    def queues(self) -> dict[str, Any]: ...

    def node(self, name: str) -> dict[str, Any]: ...

    def podgroup(self, namespace: str, name: str) -> dict[str, Any]:
        """A PodGroup's report, as GET /diagnostics/podgroups/NS/NAME answers it."""
        ...

    def close(self) -> None:
        """Release what the source holds (watches, connections)."""
        ...
