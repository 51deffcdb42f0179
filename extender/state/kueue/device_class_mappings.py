"""deviceClassMappings of Kueue's Configuration: which DeviceClasses count against which quota resource."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml

from extender.state.dra.devices import qualify
from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_map, get_str, get_str_list, map_items, type_name

CONFIG_API_VERSIONS = ("config.kueue.x-k8s.io/v1beta2", "config.kueue.x-k8s.io/v1beta1")
DEFAULT_CONFIGMAP_NAMESPACE = "kueue-system"
DEFAULT_CONFIGMAP_NAME = "kueue-manager-config"
DEFAULT_CONFIGMAP_KEY = "controller_manager_config.yaml"

# Kueue's config validation limits (pkg/config/validation.go, validateDeviceClassMappings).
MAX_DEVICE_CLASS_MAPPINGS = 16
MAX_DEVICE_CLASSES_PER_MAPPING = 8


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _qualified_name_problem(value: str) -> str | None:
    """Why value is not a label key (IsLabelKey: [DNS-subdomain prefix/]name), or None if it is one."""
    prefix, slash, name = value.rpartition("/")
    if slash and not prefix:
        return "prefix part must be non-empty"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME_PART.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


class DeviceClassSourceKind(StrEnum):
    COUNTER = "counter"
    CAPACITY = "capacity"


@dataclass(frozen=True, slots=True)
class DeviceClassSource:
    """A v1beta2 mapping's accounting source: quota is charged in counter/capacity units, not devices."""

    kind: DeviceClassSourceKind
    name: str
    driver: str
    # deviceSelector.cel.expression: which devices of the driver the source accounts for ("" = every one).
    device_selector: str = ""

    @property
    def capacity_key(self) -> str:
        """The capacity's name as DRA defines it: a QualifiedName, whose name without a domain is in the driver's
        domain (k8s.io/dynamic-resource-allocation cel/compile.go parseQualifiedName, with the driver as the
        default domain), so `memory` and `<driver>/memory` name the same capacity. Device.capacity and consumed
        capacity are keyed so (state/dra/devices.py qualify)."""
        return qualify(self.name, self.driver)

    @property
    def counter_key(self) -> str:
        """The counter's name as a slice's counter set spells it. Counter names carry no domain in DRA (a DNS
        label within the driver's counter set); a name qualified with this source's own driver is read as the
        same counter, the way an unqualified capacity name is in the driver's domain."""
        prefix = f"{self.driver}/"
        return self.name.removeprefix(prefix) if self.name.startswith(prefix) else self.name


@dataclass(frozen=True, slots=True)
class DeviceClassMapping:
    name: str
    device_class_names: tuple[str, ...]
    sources: tuple[DeviceClassSource, ...] = ()

    @property
    def counts_devices(self) -> bool:
        """True when quota is charged per device (no counter/capacity sources), the extender's model."""
        return not self.sources

    @property
    def counter_names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.sources if s.kind is DeviceClassSourceKind.COUNTER)


@dataclass(frozen=True, slots=True)
class DeviceClassMappings:
    mappings: tuple[DeviceClassMapping, ...] = ()

    def resource_for_class(self, class_name: str) -> str | None:
        """The quota resource for a DeviceClass; the first mapping listing it wins, as in Kueue's mapper."""
        for mapping in self.mappings:
            if class_name in mapping.device_class_names:
                return mapping.name
        return None

    def mapping_for_class(self, class_name: str) -> DeviceClassMapping | None:
        for mapping in self.mappings:
            if class_name in mapping.device_class_names:
                return mapping
        return None

    @property
    def resource_names(self) -> tuple[str, ...]:
        return tuple(mapping.name for mapping in self.mappings)

    @property
    def class_names(self) -> frozenset[str]:
        return frozenset(name for mapping in self.mappings for name in mapping.device_class_names)

    def __len__(self) -> int:
        return len(self.mappings)


def _parse_sources(mapping: Mapping[str, Any], path: str) -> tuple[DeviceClassSource, ...]:
    sources = []
    kinds = set()
    for source_path, source in map_items(mapping, "sources", path):
        present = [kind for kind in DeviceClassSourceKind if source.get(kind.value) is not None]
        if len(present) != 1:
            message = "exactly one source type must be set per entry (counter or capacity)"
            raise ObjectError(source_path, message)
        kind = present[0]
        detail = get_map(source, kind.value, source_path)
        detail_path = child_path(source_path, kind.value)
        selector = get_map(detail, "deviceSelector", detail_path)
        selector_path = child_path(detail_path, "deviceSelector")
        cel = get_map(selector, "cel", selector_path)
        sources.append(
            DeviceClassSource(
                kind=kind,
                name=get_str(detail, "name", detail_path, required=True),
                driver=get_str(detail, "driver", detail_path, required=True),
                device_selector=get_str(cel, "expression", child_path(selector_path, "cel")),
            )
        )
        kinds.add(kind)
    if len(kinds) > 1:
        message = "cannot mix counter and capacity sources in the same mapping"
        raise ObjectError(child_path(path, "sources"), message)
    return tuple(sources)


def parse_device_class_mappings(config: Mapping[str, Any]) -> DeviceClassMappings:
    """Read and validate `resources.deviceClassMappings` of a Kueue Configuration document.

    Validation follows Kueue's validateDeviceClassMappings so that a configuration Kueue would refuse to
    start with is refused here too, rather than silently charging quota differently from Kueue.
    """
    if not isinstance(config, Mapping):
        raise ObjectError("", f"must be an object, got {type_name(config)}")
    kind = get_str(config, "kind", "")
    if kind and kind != "Configuration":
        raise ObjectError("kind", f"expected Configuration, got {kind!r}")
    api_version = get_str(config, "apiVersion", "")
    if api_version and api_version not in CONFIG_API_VERSIONS:
        raise ObjectError(
            "apiVersion", f"unsupported {api_version!r}; expected one of {', '.join(CONFIG_API_VERSIONS)}"
        )
    path = "resources.deviceClassMappings"
    raw_mappings = list(map_items(get_map(config, "resources", ""), "deviceClassMappings", "resources"))
    if len(raw_mappings) > MAX_DEVICE_CLASS_MAPPINGS:
        raise ObjectError(path, f"must have at most {MAX_DEVICE_CLASS_MAPPINGS} mappings, got {len(raw_mappings)}")
    mappings = []
    seen_names: set[str] = set()
    class_owner: dict[str, str] = {}
    class_counters: dict[str, set[str]] = {}
    for mapping_path, raw in raw_mappings:
        name = get_str(raw, "name", mapping_path, required=True)
        problem = _qualified_name_problem(name)
        if problem is None and len(name) > 253:
            problem = "must not exceed 253 characters"
        if problem:
            raise ObjectError(child_path(mapping_path, "name"), f"invalid resource name {name!r}: {problem}")
        if name in seen_names:
            raise ObjectError(child_path(mapping_path, "name"), f"duplicate mapping name {name!r}")
        seen_names.add(name)
        classes = get_str_list(raw, "deviceClassNames", mapping_path, required=True)
        classes_path = child_path(mapping_path, "deviceClassNames")
        if not classes:
            raise ObjectError(classes_path, "at least one device class name is required")
        if len(classes) > MAX_DEVICE_CLASSES_PER_MAPPING:
            raise ObjectError(
                classes_path,
                f"must have at most {MAX_DEVICE_CLASSES_PER_MAPPING} device class names, got {len(classes)}",
            )
        sources = _parse_sources(raw, mapping_path) if api_version != CONFIG_API_VERSIONS[1] else ()
        # Kueue keys the exception below on the mapping's first source, when that source is a counter.
        counter = sources[0].name if sources and sources[0].kind is DeviceClassSourceKind.COUNTER else ""
        seen_here: set[str] = set()
        for index, class_name in enumerate(classes):
            class_path = child_path(classes_path, index)
            problem = _qualified_name_problem(class_name)
            if problem is None and len(class_name) > 253:
                problem = "must not exceed 253 characters"
            if problem:
                raise ObjectError(class_path, f"invalid device class name {class_name!r}: {problem}")
            if class_name in seen_here:
                raise ObjectError(class_path, f"duplicate device class {class_name!r}")
            seen_here.add(class_name)
            owner = class_owner.get(class_name)
            if owner is None:
                class_owner[class_name] = name
                class_counters[class_name] = {counter} if counter else set()
                continue
            # Kueue lets one class feed several mappings only when each tracks a different driver counter.
            existing = class_counters[class_name]
            if not counter or not existing:
                message = f"device class {class_name!r} already mapped to resource {owner!r}"
                raise ObjectError(class_path, message)
            if counter in existing:
                message = f"device class {class_name!r} already has a counter source for counter {counter!r}"
                raise ObjectError(class_path, message)
            existing.add(counter)
        mappings.append(DeviceClassMapping(name, classes, sources))
    return DeviceClassMappings(tuple(mappings))


def parse_kueue_configmap(configmap: Mapping[str, Any], key: str = DEFAULT_CONFIGMAP_KEY) -> DeviceClassMappings:
    """deviceClassMappings from Kueue's manager ConfigMap (default kueue-system/kueue-manager-config)."""
    if not isinstance(configmap, Mapping):
        raise ObjectError("", f"must be an object, got {type_name(configmap)}")
    data = get_map(configmap, "data", "", required=True)
    field_path = child_path("data", key)
    if data.get(key) is None:
        raise ObjectError(field_path, "is required")
    text = get_str(data, key, "data")  # present but empty: a Configuration with defaults, no mappings
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ObjectError(field_path, f"is not valid YAML: {exc}") from None
    if document is None:
        return DeviceClassMappings()
    if not isinstance(document, Mapping):
        raise ObjectError(field_path, f"must hold a Configuration object, got {type_name(document)}")
    try:
        return parse_device_class_mappings(document)
    except ObjectError as exc:
        raise ObjectError(f"{field_path}: {exc.field}" if exc.field else field_path, exc.message) from None
