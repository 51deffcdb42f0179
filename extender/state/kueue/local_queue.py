"""LocalQueue: a namespace's queue pointing at a ClusterQueue, and the pod labels that name it
(apis/kueue/v1beta2/localqueue_types.go)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.state.fields import get_map, get_str
from extender.state.kueue.cluster_queue import StopPolicy
from extender.state.kueue.parsing import KUEUE_API_VERSIONS, check_kind, enum_field, object_name, object_namespace

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue v0.19 labels the pods of a Job it admitted with the LocalQueue's name (pkg/controller/jobframework,
# AssignQueueLabelsForPods), also when only the Job carries queue-name.
LOCAL_QUEUE_NAME_LABEL = "kueue.x-k8s.io/local-queue-name"


def pod_queue_name(labels: Mapping[str, str]) -> str:
    """The pod's LocalQueue: its own queue-name label, else the one Kueue gave the pods of an admitted Job."""
    return labels.get(QUEUE_NAME_LABEL) or labels.get(LOCAL_QUEUE_NAME_LABEL, "")


@dataclass(frozen=True, slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: StopPolicy = StopPolicy.NONE

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_local_queue(obj: Mapping[str, Any]) -> LocalQueue:
    check_kind(obj, "LocalQueue", KUEUE_API_VERSIONS)
    spec = get_map(obj, "spec", "")
    return LocalQueue(
        namespace=object_namespace(obj),
        name=object_name(obj),
        cluster_queue=get_str(spec, "clusterQueue", "spec", required=True),
        stop_policy=enum_field(spec, "stopPolicy", "spec", StopPolicy, StopPolicy.NONE),
    )
