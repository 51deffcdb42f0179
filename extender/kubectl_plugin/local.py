"""The answer computed in-process: a service of our own over a snapshot file or a live read of the cluster."""

from __future__ import annotations

from typing import Any

from extender.commands.assembly import SourceSpec, build_service, wait_ready
from extender.commands.diagnostics_client import podgroup_unknown
from extender.commands.outcomes import InputError, RefusedError
from extender.commands.pod_file import PodFile, add_objects_beside, note_gates_off
from extender.state.core import parse_pod
from extender.state.errors import ObjectError

# The service and the reports are imported where an answer is computed: a command that fails on its input (or asks
# a running extender) does not load them (commands/outcomes.py).


class LocalExtender:
    """A service of our own over a cluster source, built by the composition root exactly as `dra-extender
    explain` builds it; it reserves nothing."""

    def __init__(self, spec: SourceSpec, config_file: str | None) -> None:
        from extender.service import load_config

        config = load_config(config_file)
        self._service = build_service(spec, config)
        if spec.live:
            try:
                wait_ready(self._service)
            except BaseException:
                self._service.stop()  # its watch threads would keep the process from exiting
                raise

    def explain(self, pod: dict[str, Any], pod_file: PodFile | None = None) -> dict[str, Any]:
        from extender.reports.decisions import decision_json

        try:
            parsed = parse_pod(pod)
        except ObjectError as error:
            raise InputError(f"pod: {error.describe()}") from None
        if pod_file is not None:
            add_objects_beside(self._service, pod_file, parsed.namespace)
        report = decision_json(self._service.explain(parsed))
        note_gates_off(self._service, parsed.group_key)
        return report

    def explain_named(self, namespace: str, name: str) -> dict[str, Any]:
        """A pod of the source's own cluster (a snapshot's pods), by name: no API server needed."""
        from extender.reports.decisions import decision_json

        pod = self._service.snapshot().pods.get(f"{namespace}/{name}")
        if pod is None:
            raise RefusedError(f'pods "{name}" not found in namespace "{namespace}"')
        report = decision_json(self._service.explain(pod))
        note_gates_off(self._service, pod.group_key)
        return report

    def queues(self) -> dict[str, Any]:
        from extender.reports.queues import queues_json

        view = self._service.quota_view()
        return queues_json(view, self._service.unplaced_workloads(view.snapshot), self._service.uncharged_pods())

    def node(self, name: str) -> dict[str, Any]:
        from extender.reports.devices import node_json

        report = node_json(self._service.snapshot(), name)
        if report is None:
            raise RefusedError(f'node "{name}" is not known')
        return report

    def podgroup(self, namespace: str, name: str) -> dict[str, Any]:
        """The service's view of the group, as the extender's endpoint renders it. A service of our own has made
        no decision and holds nothing (no hold, no attempt): each pending member is explained now instead
        (``what-if``, reserving nothing), and the first one's answer is the group's verdict (``verdictNow``):
        deciding a member of a gang decides the group as a whole (docs/gangs.md)."""
        from extender.reports.podgroups import podgroup_json, what_if_members

        group_key = f"{namespace}/{name}"
        status = self._service.gang_status(namespace, name)
        if status is None:
            raise RefusedError(podgroup_unknown(namespace, name))
        report = podgroup_json(status, self._service.group_claims(namespace, name))
        note_gates_off(self._service, group_key)
        report["verdictNow"] = what_if_members(report["members"], self._service.snapshot().pods, self._service.explain)
        return report

    def close(self) -> None:
        self._service.stop()
