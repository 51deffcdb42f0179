"""`dra-extender snapshot`: the live cluster written once as a snapshot file the extender can load offline.

A person reproducing a scheduling question needs exactly what the extender would have seen, so the writer
uses the same discovery and kinds as the live source, and leaves out what the loader would reject (malformed
objects, with a warning) and what only adds bulk (managedFields).
"""

from __future__ import annotations

import datetime
import logging
import os
from typing import Any, TextIO

import yaml
from kubernetes.client import Configuration

from extender.kube.api import KubeApi, load_kubeconfig
from extender.state.errors import ObjectError
from extender.state.kinds import KINDS, object_key
from extender.state.live.resources import DEFAULT_KUEUE_CONFIGMAP, KUEUE_ABSENT_MESSAGE, discover, list_objects
from extender.state.live.source import LiveSource

log = logging.getLogger(__name__)

_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def write_snapshot(
    source_config: Configuration | LiveSource,
    out_stream: TextIO,
    *,
    kueue_configmap: tuple[str, str] | None = None,
    page_size: int = 500,
    read_timeout: float = 60.0,
) -> int:
    """List every kind once and write multi-document YAML; returns the number of objects written."""
    if isinstance(source_config, LiveSource):
        config = source_config.api_config
        configmap = kueue_configmap or source_config.kueue_configmap
    else:
        config = source_config
        configmap = kueue_configmap or DEFAULT_KUEUE_CONFIGMAP
    api = KubeApi(config)
    try:
        discovery = discover(api, kueue_configmap=configmap, read_timeout=read_timeout)
        if not discovery.kueue_available:
            log.warning(KUEUE_ABSENT_MESSAGE)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        out_stream.write(f"# cluster snapshot of {config.host} taken {stamp} by dra-extender snapshot\n")
        written = 0
        for info in KINDS:
            resource = discovery.resources.get(info.kind)
            if resource is None:
                continue
            items, _ = list_objects(api, resource, page_size=page_size, read_timeout=read_timeout)
            documents = []
            for item in items:
                document = _snapshot_document(item)
                try:
                    info.parse(document)
                except ObjectError as error:
                    where = f"{info.kind} {object_key(info, document)}"
                    log.warning("leaving malformed object out of the snapshot: %s", error.located(where).describe())
                    continue
                documents.append(document)
            if documents:
                yaml.dump_all(
                    documents,
                    out_stream,
                    Dumper=_DUMPER,
                    explicit_start=True,
                    sort_keys=False,
                    default_flow_style=False,
                    allow_unicode=True,
                )
            written += len(documents)
            log.info("snapshot: %d %s", len(documents), resource.describe())
        return written
    finally:
        api.close()


def write_snapshot_from_kubeconfig(path: str | os.PathLike[str], out_stream: TextIO, **options: Any) -> int:
    """`dra-extender snapshot --kubeconfig FILE`."""
    return write_snapshot(load_kubeconfig(path), out_stream, **options)


def _snapshot_document(item: dict[str, Any]) -> dict[str, Any]:
    """apiVersion and kind first (as kubectl prints them), managedFields dropped."""
    document = {"apiVersion": item.get("apiVersion"), "kind": item.get("kind")}
    document.update(item)
    metadata = document.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        document["metadata"] = {key: value for key, value in metadata.items() if key != "managedFields"}
    return document
