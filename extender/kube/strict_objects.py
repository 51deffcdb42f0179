"""Strict decoding of objects a person hands us (a pod file for `explain`, the web view's what-if form, the kubectl
plugin's ``-f``): an unknown or misspelled field is refused with its JSON path, as kube-apiserver refuses it under
strict field validation (``kubectl --validate=strict``, the default since 1.27).

kube-apiserver decodes with sigs.k8s.io/json's ``UnmarshalStrict`` and reports every unknown field by its path,
keys joined with ``.`` and list positions as ``[i]`` (internal/golang/encoding/json/kubernetes_patch.go
``newFieldError``, ``appendStrictFieldStackIndex``), all of them in one message
(k8s.io/apimachinery/pkg/runtime/error.go ``strictDecodingError``)::

    strict decoding error: unknown field "spec.resourceClaim", unknown field "spec.containers[0].imagex"

Which fields exist comes from the Kubernetes Python client's generated models (its ``attribute_map`` and
``openapi_types``, generated from the same release's OpenAPI schema), not from a hand-kept list. Objects read
from the API server or sent by kube-scheduler are not checked here: the server has validated them already, and a
newer server may carry fields this client does not know.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import yaml

# (apiVersion, kind) -> the client's model class for it. Kinds missing here (Kueue's CRDs, which the client does
# not generate) are decoded leniently.
MODELS: Mapping[tuple[str, str], str] = {
    ("v1", "Pod"): "V1Pod",
    ("resource.k8s.io/v1", "ResourceClaim"): "ResourceV1ResourceClaim",
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): "V1ResourceClaimTemplate",
    ("resource.k8s.io/v1", "DeviceClass"): "V1DeviceClass",
    ("resource.k8s.io/v1", "ResourceSlice"): "V1ResourceSlice",
}
# The client release generated from Kubernetes 1.37's schema (client major version = Kubernetes minor version).
# An older client lacks fields 1.37 has; it would refuse valid objects, so with one the check is skipped.
MIN_CLIENT_MAJOR = 37
# sigs.k8s.io/json stops collecting at 100 strict errors.
MAX_ERRORS = 100

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")


class DuplicateFieldError(yaml.constructor.ConstructorError):
    """A mapping of a YAML document names one key twice (sigs.k8s.io/json: ``duplicate field``); PyYAML would
    keep the last value silently."""


class AliasRefusedError(yaml.composer.ComposerError):
    """A YAML document uses an alias (``*name``). Aliases are refused rather than expanded: a few hundred bytes of
    anchors, each alias repeating the one before several times, expand to millions of nodes (the "billion laughs"
    of XML), and everything after the parse (the strict field walk, the pod parse) walks the expanded tree.
    kube-apiserver's YAML decoder (go-yaml, as sigs.k8s.io/yaml uses it) bounds the expansion by a ratio of
    aliases to nodes instead (yaml.v2 decode.go ``allowedAliasRatio``); a person's Pod manifest has no use for
    aliases, so refusing them outright is the simpler bound with the same effect."""


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader (plain data only, no Python objects) that refuses aliases as they are composed, before
    anything is expanded: the cost of a load is linear in the text."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # typeshed leaves it untyped
            raise AliasRefusedError(
                None, None, f"alias *{event.anchor} refused: YAML aliases are not accepted", event.start_mark
            )
        node: yaml.Node | None = super().compose_node(parent, index)
        return node


class _StrictLoader(_NoAliasLoader):
    """The alias-refusing loader that also refuses a key given twice in one mapping (merge keys ``<<`` aside:
    their keys may be overridden, as YAML defines; with aliases refused a merge key can only merge a mapping
    written in place)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if key_node.value in seen:
                raise DuplicateFieldError(None, None, f'duplicate field "{key_node.value}"', key_node.start_mark)
            seen.add(key_node.value)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)
        return mapping


def load_documents(text: str) -> list[Any]:
    """The non-empty documents of a YAML (or JSON) text a person wrote; a key given twice in one mapping is a
    DuplicateFieldError, an alias an AliasRefusedError (both yaml.YAMLErrors, with the line and column)."""
    return [d for d in yaml.load_all(text, Loader=_StrictLoader) if d]


def load_data(text: str | bytes) -> Any:
    """One YAML (or JSON) document sent to the extender, as data; aliases refused (AliasRefusedError), so that
    the work of a load stays linear in the text's length."""
    return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass: plain data only


class StrictDecodingError(ValueError):
    """Unknown fields in a user-supplied object; the message is kube-apiserver's."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        super().__init__("strict decoding error: " + ", ".join(f'unknown field "{p}"' for p in paths))


@functools.cache
def _client_models() -> Any:
    """The client's models module, or None when the installed client is older than the schema we follow."""
    try:
        import kubernetes
        from kubernetes.client import models
    except ImportError:  # pragma: no cover - a dependency of the package
        return None
    major = str(getattr(kubernetes, "__version__", "0")).split(".", 1)[0]
    return models if major.isdigit() and int(major) >= MIN_CLIENT_MAJOR else None


@functools.cache
def _fields(model_name: str) -> Mapping[str, str] | None:
    """JSON field name -> the client's type string, for one model class (None: not a model, e.g. ``str``)."""
    models = _client_models()
    model = getattr(models, model_name, None) if models is not None else None
    if model is None or not hasattr(model, "attribute_map"):
        return None
    return {model.attribute_map[attr]: kind for attr, kind in model.openapi_types.items()}


def unknown_fields(document: Mapping[str, Any]) -> list[str]:
    """The paths of the fields of ``document`` its kind does not have ([] for kinds without a schema here)."""
    model = MODELS.get((str(document.get("apiVersion", "v1")), str(document.get("kind", "Pod"))))
    paths: list[str] = []
    if model is not None and _client_models() is not None:
        _walk(document, model, "", paths)
    return paths


def check(document: Mapping[str, Any]) -> None:
    """Raise StrictDecodingError when ``document`` has fields its kind does not have."""
    paths = unknown_fields(document)
    if paths:
        raise StrictDecodingError(paths)


def _walk(value: Any, type_name: str, path: str, paths: list[str]) -> None:
    """Check ``value`` against the client's type string ``type_name`` (a model, ``List[T]``, ``Dict[str, T]``,
    or a scalar/``object``, which has no fields to check). Values of the wrong shape are the parser's to refuse."""
    if len(paths) >= MAX_ERRORS:
        return
    if (match := _LIST.match(type_name)) is not None:
        if isinstance(value, list):
            for index, item in enumerate(value):
                _walk(item, match.group(1), f"{path}[{index}]", paths)
        return
    if (match := _DICT.match(type_name)) is not None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                _walk(item, match.group(1), _join(path, str(key)), paths)
        return
    fields = _fields(type_name)
    if fields is None or not isinstance(value, Mapping):
        return
    for key, item in value.items():
        field_path = _join(path, str(key))
        field_type = fields.get(str(key))
        if field_type is None:
            if len(paths) < MAX_ERRORS:
                paths.append(field_path)
            continue
        _walk(item, field_type, field_path, paths)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class ManifestError(ValueError):
    """A manifest a person wrote cannot be used: not YAML, a field unknown or given twice, no Pod in it."""


def first_pod(text: str) -> dict[str, Any]:
    """The first Pod of a YAML or JSON text a person wrote, decoded strictly: every object of the text whose kind
    has a schema is checked for unknown fields, as kubectl --validate=strict has the API server check them."""
    try:
        documents = load_documents(text)
    except DuplicateFieldError as error:
        raise ManifestError(f"strict decoding error: {yaml_problem(error)}") from None
    except yaml.YAMLError as error:
        raise ManifestError(f"not YAML: {yaml_problem(error)}") from None
    except RecursionError:
        raise ManifestError("not YAML: nested too deeply") from None
    objects = [d for d in documents if isinstance(d, dict)]
    for document in objects:
        paths = unknown_fields(document)
        if paths:
            raise ManifestError(f"{_kind_of(document)}: {StrictDecodingError(paths)}")
    pods = [d for d in objects if d.get("kind", "Pod") == "Pod"]
    if not pods:
        raise ManifestError("holds no Pod")
    return pods[0]


def _kind_of(document: Mapping[str, Any]) -> str:
    """``Pod trainer-0``: which object of a text an error is about."""
    kind = str(document.get("kind", "Pod"))
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return f"{kind} {name}" if name else kind


def yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's error on one line: where (line, column) and what, without its excerpt of the text."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else str(problem)
