"""The answer computed in-process: a service of our own over a snapshot file or a live read of the cluster."""

from __future__ import annotations

import argparse
from typing import Any

from extender import cli
from extender.kubectl_plugin.answer_source import Extender
from extender.kubectl_plugin.plugin_errors import InputError, RefusedError, podgroup_unknown
from extender.service import load_config
from extender.state.core import parse_pod
from extender.state.errors import ObjectError


class LocalExtender(Extender):
    """A service of our own over a cluster source, built by extender.cli exactly as `dra-extender explain`
    builds it; it reserves nothing."""

    def __init__(self, source_args: argparse.Namespace, config_file: str | None, live: bool) -> None:
        config = load_config(config_file)
        self._service = cli._build_service(source_args, config)
        if live:
            try:
                cli.wait_ready(self._service)
            except BaseException:
                self._service.stop()  # its watch threads would keep the process from exiting
                raise

    def explain(self, pod: dict[str, Any]) -> dict[str, Any]:
        from extender.transport.diagnostics import decision_json

        try:
            parsed = parse_pod(pod)
        except ObjectError as error:
            raise InputError(f"pod: {error.describe()}") from None
        return decision_json(self._service.explain(parsed))

    def explain_named(self, namespace: str, name: str) -> dict[str, Any]:
        """A pod of the source's own cluster (a snapshot's pods), by name: no API server needed."""
        from extender.transport.diagnostics import decision_json

        pod = self._service.snapshot().pods.get(f"{namespace}/{name}")
        if pod is None:
            raise RefusedError(f'pods "{name}" not found in namespace "{namespace}"')
        return decision_json(self._service.explain(pod))

    def queues(self) -> dict[str, Any]:
        from extender.transport.diagnostics import queues_json

        view = self._service.quota_view()
        return queues_json(view, self._service.unplaced_workloads(view.snapshot), self._service.uncharged_pods())

    def node(self, name: str) -> dict[str, Any]:
        from extender.transport.diagnostics import node_json

        report = node_json(self._service.snapshot(), name)
        if report is None:
            raise RefusedError(f'node "{name}" is not known')
        return report

    def podgroup(self, namespace: str, name: str) -> dict[str, Any]:
        """The service's view of the group, as the extender's endpoint renders it. A service of our own has made
        no decision and holds nothing: members show no last decision, the group no hold or attempt."""
        from extender.transport.podgroup_routes import podgroup_json

        status = self._service.gang_status(namespace, name)
        if status is None:
            raise RefusedError(podgroup_unknown(namespace, name))
        return podgroup_json(status)

    def close(self) -> None:
        self._service.stop()


def source_args(**values: Any) -> argparse.Namespace:
    """The source flags extender.cli's service builder reads."""
    defaults = {"snapshot": None, "kubeconfig": None, "in_cluster": False, "context": None}
    return argparse.Namespace(**{**defaults, "request_timeout": cli.DEFAULT_REQUEST_TIMEOUT_SECONDS, **values})
