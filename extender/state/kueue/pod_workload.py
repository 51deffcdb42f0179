"""Which Kueue Workload a pod belongs to, and which of its pod sets, read from the pod as Kueue marks it.

Kueue v0.19.2 owns a Workload by the top object of a job (a batch Job, a JobSet, an MPIJob, a RayJob, a
TrainJob, a LeaderWorkerSet group, the pods of a plain pod group, a plain pod), while the pods are often owned
one or two levels further down (JobSet -> Job -> Pod; TrainJob -> JobSet -> Job -> Pod; RayJob -> RayCluster ->
Pod). Kueue itself never walks that chain to find a pod's Workload; it marks the pods when it starts the job:

- `kueue.x-k8s.io/podset` (label): the pod set of the admitted Workload the pod template belongs to, set on
  every pod template of a job Kueue starts (pkg/controller/jobframework/reconciler.go getPodSetsInfoFromStatus;
  for pod groups the pod set is the role hash, pkg/controller/jobs/pod Run);
- `kueue.x-k8s.io/workload` (annotation): the admitted Workload's name, set on the same pod templates while
  TopologyAwareScheduling is on (Beta, on by default): what Kueue's own TAS ungater and pod indexer read to find
  a pod's Workload (pkg/controller/tas/topology_ungater.go, pkg/controller/core/indexer IndexPodWorkloadSliceName);
- `kueue.x-k8s.io/pod-group-name` (annotation, else label; pkg/util/pod GetPodGroupName): a pod group's Workload
  is named after the group (pkg/controller/jobs/pod: plain pod groups, and LeaderWorkerSet and StatefulSet,
  whose integrations put their pods in groups);
- a plain pod's Workload (a Deployment's pods are plain pods to Kueue) is owned by the pod itself, a batch
  Job's or MPIJob's worker's by the pods' direct owner.

So the Workload is found, in order: by the name the pod carries (workload annotation, then pod group name), in
the pod's namespace; then among admitted Workloads by owner uid: the pod's own uid, its owners' uids, and the
JobSet uid the JobSet controller labels its pods with (`jobset.sigs.k8s.io/jobset-uid`, sigs.k8s.io/jobset
v0.12.0 labelAndAnnotateObject), so a JobSet's pods find their Workload even with TopologyAwareScheduling off.
Owner objects between the pod and the Workload's owner (Jobs, RayClusters) are not watched: every integration
Kueue ships marks its pods with one of the above, and watching every Job of the cluster would cost a watch
stream and memory for what the pods already say.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.state.core import Pod
from extender.state.kueue.workload import PodSetAssignment, Workload

POD_SET_LABEL = "kueue.x-k8s.io/podset"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"  # Kueue's GroupNameAnnotation and GroupNameLabel alike
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"


def named_workload_keys(pod: Pod) -> tuple[str, ...]:
    """Keys (namespace/name) of the Workloads the pod names: Kueue's workload annotation, then its pod group's
    name (GetPodGroupName reads the annotation first, then the label)."""
    names = (
        pod.annotations.get(WORKLOAD_ANNOTATION, ""),
        pod.annotations.get(POD_GROUP_NAME, ""),
        pod.labels.get(POD_GROUP_NAME, ""),
    )
    return tuple(dict.fromkeys(f"{pod.namespace}/{name}" for name in names if name))


def owner_uids(pod: Pod) -> tuple[str, ...]:
    """The uids a Workload owning this pod's job may be owned by: the pod's (plain pods, pod groups), its
    owners' (a batch Job, an MPIJob) and its JobSet's (a JobSet's pods are owned by its Jobs)."""
    uids = (pod.uid, *pod.owner_uids, pod.labels.get(JOBSET_UID_LABEL, ""))
    return tuple(dict.fromkeys(uid for uid in uids if uid))


def workload_refs(pod: Pod) -> tuple[str, ...]:
    """Everything a Workload event may match the pod by: the named keys and the owner uids (uids hold no '/',
    keys always one, so the two never collide)."""
    return (*named_workload_keys(pod), *owner_uids(pod))


def pod_workload(
    pod: Pod, workloads: Mapping[str, Workload], admitted_by_owner: Mapping[str, str], *, admitted: bool = True
) -> Workload | None:
    """The pod's Workload: the one it names if that exists (and is admitted, when `admitted`), else the admitted
    one owned by one of `owner_uids(pod)`; with `admitted` False, else any Workload in the pod's namespace owned
    by one of them (a scan: only for a pod whose Workload is not admitted yet)."""
    for key in named_workload_keys(pod):
        workload = workloads.get(key)
        if workload is not None and (workload.admission is not None or not admitted):
            return workload
    uids = owner_uids(pod)
    for uid in uids:
        owned = admitted_by_owner.get(uid)
        if owned is not None and (workload := workloads.get(owned)) is not None:
            return workload
    if admitted:
        return None
    wanted = set(uids)
    return next(
        (
            candidate
            for candidate in workloads.values()
            if candidate.namespace == pod.namespace and any(owner.uid in wanted for owner in candidate.owners)
        ),
        None,
    )


def pod_set_name(pod: Pod) -> str:
    """The pod set Kueue started the pod for ("" when Kueue did not label it)."""
    return pod.labels.get(POD_SET_LABEL, "")


def pod_set_assignment(workload: Workload, pod: Pod) -> PodSetAssignment | None:
    """The admission's assignment of the pod's own pod set: the one its `kueue.x-k8s.io/podset` label names,
    or the only one; None when the admission has several and the pod names none of them."""
    admission = workload.admission
    if admission is None:
        return None
    assignments = admission.pod_set_assignments
    name = pod_set_name(pod)
    if name:
        return next((a for a in assignments if a.name == name), None)
    return assignments[0] if len(assignments) == 1 else None


def admitted_flavors_of_pod(workload: Workload, pod: Pod) -> dict[str, str]:
    """Resource -> flavor Kueue assigned the pod's own pod set. A pod that names no pod set of a Workload with
    several gets the flavors all pod sets agree on (a resource they assign differently is left out, so the
    node's flavor decides it): one pod set's flavor never stands for another's."""
    own = pod_set_assignment(workload, pod)
    if own is not None:
        return dict(own.flavors)
    admission = workload.admission
    if admission is None:
        return {}
    agreed: dict[str, str] = {}
    conflicting: set[str] = set()
    for assignment in admission.pod_set_assignments:
        for resource, flavor in assignment.flavors.items():
            if agreed.setdefault(resource, flavor) != flavor:
                conflicting.add(resource)
    return {resource: flavor for resource, flavor in agreed.items() if resource not in conflicting}
