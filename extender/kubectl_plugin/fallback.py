"""The in-cluster extender first, a local computation when nobody answers behind its Service."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from extender.commands.diagnostics_client import DiagnosticsClient
from extender.commands.pod_file import PodFile
from extender.kubectl_plugin.answer_source import Extender
from extender.kubectl_plugin.plugin_errors import NoExtenderBehindServiceError

LOCAL_NOTE = (
    "computed locally from a live read of the cluster: the running extender's in-flight reservations are not included"
)


class FallbackExtender:
    """The in-cluster extender through its Service; on NoExtenderBehindServiceError, a LocalExtender (built
    once, on demand)."""

    def __init__(self, remote: DiagnosticsClient, local: Callable[[], Extender]) -> None:
        self._remote = remote
        self._make_local = local
        self._local: Extender | None = None

    def _call(self, call: Callable[[Extender], dict[str, Any]]) -> dict[str, Any]:
        if self._local is None:
            try:
                return call(self._remote)
            except NoExtenderBehindServiceError as error:
                print(f"note: {error}; {LOCAL_NOTE}", file=sys.stderr)
                self._local = self._make_local()
        return call(self._local)

    def explain(self, pod: dict[str, Any], pod_file: PodFile | None = None) -> dict[str, Any]:
        return self._call(lambda e: e.explain(pod, pod_file))

    def queues(self) -> dict[str, Any]:
        return self._call(lambda e: e.queues())

    def node(self, name: str) -> dict[str, Any]:
        return self._call(lambda e: e.node(name))

    def podgroup(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call(lambda e: e.podgroup(namespace, name))

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
