"""Extended resources backed by DRA (KEP-5004): a container asking for `example.com/gpu` gets devices of the
DeviceClass that names it, through a claim kube-scheduler makes for the pod.

Follows kube-scheduler 1.37's DynamicResources plugin (pkg/scheduler/framework/plugins/dynamicresources,
extendeddynamicresources.go):

- which names count: an extended resource name (v1helper.IsExtendedResourceName, or the
  `deviceclass.resource.kubernetes.io/<class>` prefix) that a DeviceClass answers to, explicitly
  (`spec.extendedResourceName`) or implicitly (`deviceclass.resource.kubernetes.io/<class>`), with the pod's
  effective request (resourcehelper.PodRequests: init containers as the scheduler sums them) above zero;
- on which nodes: only where the node does not advertise the name in `status.allocatable` (there a device
  plugin serves it, filterExtendedResources);
- how: one in-memory claim `<extended-resources>` with an ExactCount request of that class per resource;
  PreBind writes it to the API server (annotation `resource.kubernetes.io/extended-resource-claim: "true"`,
  owned by the pod) and records it in `pod.status.extendedResourceClaimStatus`.

Quota follows Kueue v0.19.2's pkg/dra/extended_resources.go (resolveQuotaKey): the resource is charged under
the deviceClassMapping of its class when there is one, else under the extended resource name itself; a class
whose mapping has counter or capacity sources is refused (Kueue marks such a workload inadmissible).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from extender.decisions.devices.results import PendingClaim
from extender.state.core import Node, Pod
from extender.state.dra.claims import ALLOCATION_MODE_EXACT, ClaimSpec, DeviceRequest, DeviceSubRequest
from extender.state.dra.device_class import DeviceClass
from extender.state.kueue.device_class_mappings import DeviceClassMappings

EXTENDED_CLAIM_NAME = "<extended-resources>"  # the scheduler's in-memory name (specialClaimInMemName)
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


@dataclass(frozen=True, slots=True)
class ExtendedResource:
    resource: str  # the name in the pod's containers
    count: int
    device_class: str
    request_name: str  # the request of the node's claim that asks for it


@dataclass(frozen=True, slots=True)
class ExtendedRequests:
    """The pod's DRA-backed extended resources; `problems` refuse the pod on every node."""

    resources: tuple[ExtendedResource, ...] = ()
    problems: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.resources or self.problems)

    def served_by_dra(self, node: Node) -> tuple[ExtendedResource, ...]:
        """The resources this node must provide through DRA: those it does not advertise as allocatable."""
        allocatable = node.allocatable
        if not allocatable:
            return self.resources
        return tuple(item for item in self.resources if not allocatable.get(item.resource))

    def claim_for(self, served: tuple[ExtendedResource, ...]) -> PendingClaim | None:
        if not served:
            return None
        requests = tuple(
            DeviceRequest(
                name=item.request_name,
                exactly=DeviceSubRequest(
                    name=item.request_name,
                    device_class_name=item.device_class,
                    selectors=(),
                    allocation_mode=ALLOCATION_MODE_EXACT,
                    count=item.count,
                    admin_access=False,
                    tolerations=(),
                ),
                first_available=(),
            )
            for item in served
        )
        label = "extended resources (" + ", ".join(f"{item.count} {item.resource}" for item in served) + ")"
        return PendingClaim(label, EXTENDED_CLAIM_NAME, "", ClaimSpec(requests, ()))


NO_EXTENDED = ExtendedRequests()


def class_for_resource(classes: Mapping[str, DeviceClass], resource: str) -> tuple[DeviceClass | None, str]:
    """The DeviceClass behind an extended resource name, and a problem text when the name is ambiguous.

    The scheduler's ExtendedResourceCache resolves an explicit name shared by several classes to the newest
    (ties: the smallest name). Kueue picks the same class, but two classes claiming one name is a cluster
    misconfiguration whose quota meaning depends on creation order, so it is refused here with both names.
    """
    if resource.startswith(IMPLICIT_PREFIX):
        return classes.get(resource[len(IMPLICIT_PREFIX) :]), ""
    owners = sorted(
        (device_class for device_class in classes.values() if device_class.extended_resource_name == resource),
        key=lambda device_class: device_class.name,
    )
    if len(owners) > 1:
        names = ", ".join(device_class.name for device_class in owners)
        newest = min(owners, key=lambda device_class: (_negated(device_class.created), device_class.name))
        return None, (
            f"extended resource {resource} is named by several DeviceClasses ({names}); kube-scheduler would "
            f"allocate from {newest.name}, the newest, but the quota it is charged to is ambiguous"
        )
    return (owners[0] if owners else None), ""


def _negated(text: str) -> tuple[int, ...]:
    return tuple(-ord(character) for character in text)


def is_dra_backed(classes: Mapping[str, DeviceClass], pod: Pod) -> bool:
    """Cheap test for the fast path: does any extended request of the pod name a DeviceClass?"""
    if not pod.extended_requests:
        return False
    for resource in pod.extended_requests:
        if resource.startswith(IMPLICIT_PREFIX):
            if resource[len(IMPLICIT_PREFIX) :] in classes:
                return True
        elif any(device_class.extended_resource_name == resource for device_class in classes.values()):
            return True
    return False


def resolve_extended(classes: Mapping[str, DeviceClass], pod: Pod) -> ExtendedRequests:
    """The pod's DRA-backed extended resources, each with its class and the request that will ask for it."""
    if not pod.extended_requests:
        return NO_EXTENDED
    if pod.extended_claim_name:
        # PreBind already created the claim and recorded it: from now on it is an ordinary claim of the pod.
        return NO_EXTENDED
    resources: list[ExtendedResource] = []
    problems: list[str] = []
    for resource, quantity in pod.extended_requests.items():
        device_class, problem = class_for_resource(classes, resource)
        if problem:
            problems.append(problem)
            continue
        if device_class is None:
            continue  # not backed by DRA: the NodeResourcesFit plugin's business
        if quantity.denominator != 1:
            problems.append(f"extended resource {resource} backed by DRA must be requested in whole devices")
            continue
        resources.append(ExtendedResource(resource, int(quantity), device_class.name, f"extended-{len(resources)}"))
    return ExtendedRequests(tuple(resources), tuple(problems))


def quota_resource(mappings: DeviceClassMappings, item_resource: str, device_class: str) -> tuple[str, str]:
    """Kueue's resolveQuotaKey: (resource to charge, problem). The class's mapping name when it is mapped,
    else the extended resource name itself."""
    mapping = mappings.mapping_for_class(device_class) if len(mappings) else None
    if mapping is None:
        return item_resource, ""
    if mapping.sources:
        kind = mapping.sources[0].kind.value
        return "", (
            f"extended resource {item_resource} resolves to DeviceClass {device_class}, whose deviceClassMapping "
            f"{mapping.name} has {kind} sources; Kueue refuses such requests (use a ResourceClaimTemplate)"
        )
    return mapping.name, ""


def extended_charges(requests: ExtendedRequests, mappings: DeviceClassMappings) -> tuple[dict[str, Fraction], str]:
    """The quota charge of the pod's extended resources: the same on every node (ExactCount), whether DRA or a
    device plugin serves them there, as Kueue charges it before any node is chosen."""
    charges: dict[str, Fraction] = {}
    for item in requests.resources:
        resource, problem = quota_resource(mappings, item.resource, item.device_class)
        if problem:
            return {}, problem
        charges[resource] = charges.get(resource, Fraction(0)) + item.count
    return charges, ""
