"""The pod file a person gives (`dra-extender explain POD.yaml`, `kubectl dra-quota explain -f FILE`): its first
Pod, decoded strictly, and the objects beside it, which a local answer uses on top of the cluster it reads; and
the notes a command prints about what it used and what it did not."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extender.commands.outcomes import InputError
from extender.kube.strict_objects import ManifestError, first_pod, load_documents
from extender.state.core import Pod, parse_pod
from extender.state.errors import ObjectError
from extender.state.kinds import kind_of_document, object_key

if TYPE_CHECKING:  # a command that fails on its input has not loaded the service (commands/outcomes.py)
    from extender.service import SchedulingService


@dataclass(frozen=True)
class PodFile:
    """A pod file a person gives: its first Pod, and the objects beside it (a ResourceClaimTemplate the pod
    names, its PodGroup, the group's other members, ...), which a local answer uses on top of the cluster asked
    (``add_objects_beside``)."""

    path: str
    pod: dict[str, Any]
    beside: tuple[dict[str, Any], ...] = ()


def load_pod_file(path: str) -> PodFile:
    """The first Pod of a YAML or JSON file a person gives (``-`` for stdin) and the objects beside it, decoded
    strictly (kube/strict_objects.py ``first_pod``: every object with a schema is checked). Every problem
    is an InputError."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        pod = first_pod(text)
    except ManifestError as error:
        raise InputError(f"{path}: {error}") from None
    objects = [d for d in load_documents(text) if isinstance(d, dict)]
    first = next(i for i, d in enumerate(objects) if d.get("kind", "Pod") == "Pod")  # first_pod's choice
    return PodFile(path, pod, tuple(objects[:first] + objects[first + 1 :]))


def _object_label(document: Mapping[str, Any]) -> str:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return f"{document.get('kind', '?')} {name or '(no name)'}"


def add_objects_beside(service: SchedulingService, pod_file: PodFile, namespace: str) -> None:
    """Add the objects beside the pod to the service's view, on top of the cluster or snapshot it reads, as
    ``kubectl apply -f FILE -n NAMESPACE`` would create them (a namespaced object naming no namespace lands in
    the pod's): the ResourceClaimTemplate written next to the pod is the one its answer uses. Kinds the
    extender does not read are left out. One note on stderr says what was used and what was left out. Only a
    service of the command's own is changed (it reserves nothing and ends with the command)."""
    used: list[str] = []
    ignored: list[str] = []
    for document in pod_file.beside:
        kind = document.get("kind")
        api_version = document.get("apiVersion", "")
        version = api_version if isinstance(api_version, str) else ""
        info = kind_of_document(kind, version) if isinstance(kind, str) and kind else None
        if info is None:
            ignored.append(_object_label(document))
            continue
        raw = dict(document)
        metadata = raw.get("metadata")
        if info.namespaced and isinstance(metadata, Mapping) and not metadata.get("namespace"):
            raw["metadata"] = {**metadata, "namespace": namespace}
        try:
            service.store.apply(info.kind, "ADDED", raw)
        except ObjectError as error:
            raise InputError(f"{pod_file.path}: {_object_label(document)}: {error.describe()}") from None
        used.append(f"{info.wire_kind} {object_key(info, raw)}")
    parts = []
    if used:
        parts.append(f"used beside the Pod, on top of {service.source.description}: {', '.join(used)}")
    if ignored:
        parts.append(f"left out (kinds the extender does not read): {', '.join(ignored)}")
    if parts:
        print(f"note: {pod_file.path}: {'; '.join(parts)}", file=sys.stderr)


GANG_FEATURES_EXAMPLE = "extender/demo/gang-features.yaml"


def note_gates_off(service: SchedulingService, group_key: str) -> None:
    """One note on stderr when a pod names a PodGroup that this service does not decide as a group: with
    GenericWorkload off (the default, as in kube-scheduler 1.37) a pod's schedulingGroup means nothing to
    kube-scheduler nor to the extender (decisions/gang/features.py), so the answer is the pod's alone."""
    if not group_key or service.config.features.generic_workload:
        return
    print(
        f"note: PodGroup {group_key} is not decided as a group: GenericWorkload is off in the extender's "
        "features (the default); when kube-scheduler runs with the gate, pass --config FILE with "
        f"`features: {{GenericWorkload: true}}` ({GANG_FEATURES_EXAMPLE} is one)",
        file=sys.stderr,
    )


def note_objects_not_sent(pod_file: PodFile, where: str) -> None:
    """A running extender is sent the Pod only: one note on stderr naming what the file holds beside it and
    how to have it used."""
    if pod_file.beside:
        names = ", ".join(_object_label(d) for d in pod_file.beside)
        print(
            f"note: {pod_file.path}: {where} is sent the Pod only; not used: {names} (create them in the "
            "cluster, or ask with --snapshot FILE or --kubeconfig FILE to have them used on top of it)",
            file=sys.stderr,
        )


def parse_input_pod(raw_pod: dict[str, Any], path: str) -> Pod:
    try:
        return parse_pod(raw_pod)
    except ObjectError as error:
        raise InputError(f"{path}: {error.describe()}") from None
