"""The workload-aware scheduling gates kube-scheduler runs with, mirrored so the extender sees pods as it does.

pkg/features/kube_features.go at v1.37.2: GenericWorkload (beta, off by default) turns on PodGroups and the
pod-group cycle (schedule_one_podgroup.go); DRAWorkloadResourceClaims (beta, off, needs GenericWorkload and
DynamicResourceAllocation) makes a claim of a PodGroup one claim reserved for the group (the DynamicResources
plugin's podResourceClaimBindings returns nothing while it is off); TopologyAwareWorkloadScheduling (alpha, off,
needs GenericWorkload) repeats the cycle once per candidate placement; CompositePodGroup (alpha, off, needs it)
schedules a tree of PodGroups (scheduling.k8s.io/v1alpha3 CompositePodGroup) all or nothing; WorkloadWithJob
(alpha, off) has the Job controller make a Job's Workload and PodGroup. With GenericWorkload off a pod's
schedulingGroup means nothing to kube-scheduler, and nothing to the extender either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Gate as upstream spells it -> (WorkloadFeatures field, on by default in 1.37)
WORKLOAD_GATES: Mapping[str, tuple[str, bool]] = {
    "GenericWorkload": ("generic_workload", False),
    "DRAWorkloadResourceClaims": ("workload_resource_claims", False),
    "TopologyAwareWorkloadScheduling": ("topology_aware", False),
    "CompositePodGroup": ("composite_pod_group", False),
    "WorkloadWithJob": ("workload_with_job", False),
}

# Gate -> the gate it needs (kube_features.go defaultKubernetesFeatureGateDependencies)
WORKLOAD_GATE_DEPENDENCIES: Mapping[str, str] = {
    "DRAWorkloadResourceClaims": "GenericWorkload",
    "TopologyAwareWorkloadScheduling": "GenericWorkload",
    # CompositePodGroup needs GenericWorkload too, through TopologyAwareWorkloadScheduling
    "CompositePodGroup": "TopologyAwareWorkloadScheduling",
    "WorkloadWithJob": "GenericWorkload",
}


@dataclass(frozen=True, slots=True)
class WorkloadFeatures:
    generic_workload: bool = False
    workload_resource_claims: bool = False
    topology_aware: bool = False
    composite_pod_group: bool = False
    workload_with_job: bool = False

    @property
    def gangs(self) -> bool:
        """Whether kube-scheduler schedules PodGroups as groups (and the extender decides for the group)."""
        return self.generic_workload

    @property
    def group_claims(self) -> bool:
        """Whether a PodGroup's claims are the group's (charged once) rather than each pod's."""
        return self.generic_workload and self.workload_resource_claims

    def gates(self) -> dict[str, bool]:
        return {name: getattr(self, field_name) for name, (field_name, _) in sorted(WORKLOAD_GATES.items())}


WORKLOAD_FEATURES_OFF = WorkloadFeatures()
