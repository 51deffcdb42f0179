"""Which kubeconfig file and which namespace, resolved as kubectl resolves them
(k8s.io/cli-runtime genericclioptions, k8s.io/client-go/tools/clientcmd)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from extender.commands.assembly import check_kubeconfig_file
from extender.commands.outcomes import InputError


def kubeconfig_path(explicit: str | None) -> str | None:
    """--kubeconfig, else the first existing file of $KUBECONFIG, else ~/.kube/config when it exists.

    kubectl merges every file of $KUBECONFIG; the Python client reads one, so the first existing one is used.
    """
    if explicit:
        return explicit
    for candidate in os.environ.get("KUBECONFIG", "").split(os.pathsep):
        if candidate and Path(candidate).is_file():
            return candidate
    default = Path.home() / ".kube" / "config"
    return str(default) if default.is_file() else None


def context_namespace(path: str, context: str | None) -> str:
    """The namespace of the chosen (or current) context of a kubeconfig, ``default`` when it names none."""
    check_kubeconfig_file(path)
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"cannot use kubeconfig {path}: {error}") from None
    name = context or document.get("current-context")
    for entry in document.get("contexts") or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return str((entry.get("context") or {}).get("namespace") or "default")
    if context:
        raise InputError(f'context "{context}" does not exist in {path}')
    return "default"
