"""Loading a cluster from a file: `kubectl get -o yaml` dumps, multi-document YAML, JSON, `kind: List`.

A snapshot is how people reproduce a scheduling question offline and how the embedded demo ships, so a
malformed document stops the load with its index and field, while kinds we do not read are skipped with one
warning each (a full `kubectl get all -o yaml` dump should load).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender.state.errors import ObjectError
from extender.state.kinds import kind_of_document
from extender.state.store import ClusterStore

log = logging.getLogger(__name__)


class SnapshotError(ValueError):
    """The snapshot file cannot be read as a cluster."""


def iter_documents(text: str) -> Iterator[tuple[str, Any]]:
    """Every object in the text with a label naming where it came from; `List`s are flattened."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            documents: list[Any] = [orjson.loads(text)]
        except orjson.JSONDecodeError as error:
            raise SnapshotError(f"invalid JSON: {error}") from None
        if isinstance(documents[0], list):
            documents = documents[0]
    else:
        try:
            documents = list(
                yaml.load_all(text, Loader=yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader)
            )
        except yaml.YAMLError as error:
            raise SnapshotError(f"invalid YAML: {error}") from None
        except RecursionError:  # the pure-Python loader (no libyaml) recurses on deep nesting
            raise SnapshotError("invalid YAML: nested too deeply") from None
    for index, document in enumerate(documents):
        if document is None:
            continue
        label = f"document {index}"
        if not isinstance(document, Mapping):
            raise SnapshotError(f"{label}: must be an object with apiVersion and kind")
        kind = document.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(document.get("items"), list):
            for item_index, item in enumerate(document["items"]):
                if not isinstance(item, Mapping):
                    raise SnapshotError(f"{label}, item {item_index}: must be an object")
                yield f"{label}, item {item_index}", item
        else:
            yield label, document


def load_snapshot_text(text: str, store: ClusterStore | None = None) -> ClusterStore:
    store = store if store is not None else ClusterStore()
    skipped: set[str] = set()
    for label, document in iter_documents(text):
        kind = document.get("kind")
        if not isinstance(kind, str) or not kind:
            raise SnapshotError(f"{label}: field kind: is required")
        api_version = document.get("apiVersion", "")
        info = kind_of_document(kind, api_version if isinstance(api_version, str) else "")
        if info is None:
            if kind not in skipped:
                skipped.add(kind)
                log.warning("skipping kind %s: the extender does not read it (first seen in %s)", kind, label)
            continue
        if info.group and isinstance(api_version, str) and "/" in api_version:
            group, version = api_version.split("/", 1)
            if group != info.group or version not in info.versions:
                raise SnapshotError(f"{label}: field apiVersion: {kind} {api_version} is not supported")
        try:
            store.apply(info.kind, "ADDED", document)
        except ObjectError as error:
            name = (
                (document.get("metadata") or {}).get("name", "?")
                if isinstance(document.get("metadata"), Mapping)
                else "?"
            )
            raise SnapshotError(error.located(f"{label} ({kind} {name})").describe()) from None
    store.set_synced(True)
    return store


def load_snapshot_file(path: str | Path, store: ClusterStore | None = None) -> ClusterStore:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise SnapshotError(f"cannot read snapshot {path}: {error.strerror}") from None
    return load_snapshot_text(text, store)
