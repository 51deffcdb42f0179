"""The workload-aware scheduling model: PodGroup and scheduling.k8s.io Workload parsed, stored, discovered.

Upstream: k8s.io/api@v0.37.2 scheduling/v1beta1/types.go (PodGroupSpec, PodGroupStatus), core/v1
PodSchedulingGroup (spec.schedulingGroup.podGroupName), pkg/features kube_features.go (the gates).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from extender.service.config import ConfigError, parse_config
from extender.state.errors import ObjectError
from extender.state.live import discover
from extender.state.podgroups.podgroup import parse_pod_group
from extender.state.snapshot_file import load_snapshot_text
from extender.state.store import ClusterStore
from testkit import builders as b
from tests.kube.test_live_discovery import api_for
from tests.support.fake_api import FakeApiServer, default_groups


def test_gang_policy_claims_and_condition_are_read() -> None:
    raw = b.pod_group(
        "train",
        "ns",
        min_count=4,
        claim_templates={"gpu": "two-gpus"},
        claim_statuses={"gpu": "train-gpu-x7"},
        conditions=[
            {
                "type": "PodGroupInitiallyScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes",
                "lastTransitionTime": "2026-12-06T03:00:00Z",
            }
        ],
    )
    group = parse_pod_group(raw)
    assert (group.key, group.is_gang, group.min_count) == ("ns/train", True, 4)
    assert group.claim_names() == {"train-gpu-x7"}
    assert group.unschedulable_since() == "2026-12-06T03:00:00Z"
    assert not parse_pod_group(b.pod_group("basic", "ns")).is_gang


@pytest.mark.parametrize(
    ("policy", "where"),
    [({"gang": {}}, "gang.minCount"), ({"gang": {"minCount": 0}}, "minCount"), ({"gang": 3}, "gang")],
)
def test_a_malformed_gang_policy_names_its_field(policy: dict[str, object], where: str) -> None:
    raw = b.pod_group("g", "ns")
    raw["spec"]["schedulingPolicy"] = policy
    with pytest.raises(ObjectError) as error:
        parse_pod_group(raw)
    assert where in str(error.value)


def test_store_indexes_group_members_through_pod_events() -> None:
    store = ClusterStore()
    store.apply("Pod", "ADDED", b.pod("a", "ns", pod_group="g"))
    store.apply("Pod", "ADDED", b.pod("b", "ns", pod_group="g"))
    store.apply("Pod", "ADDED", b.pod("solo", "ns"))
    assert [p.name for p in store.snapshot().members_of("ns/g")] == ["a", "b"]
    moved = b.pod("b", "ns", pod_group="h")
    store.apply("Pod", "MODIFIED", moved)
    store.apply("Pod", "DELETED", b.pod("a", "ns", pod_group="g"))
    snapshot = store.snapshot()
    assert snapshot.members_of("ns/g") == ()
    assert "ns/g" not in snapshot.group_members
    assert [p.name for p in snapshot.members_of("ns/h")] == ["b"]


def test_snapshot_file_tells_the_two_workload_kinds_apart() -> None:
    scheduling_workload = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "job-1", "namespace": "ns"},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]},
    }
    text = yaml.safe_dump_all([scheduling_workload, b.pod_group("g", "ns", min_count=2)])
    snapshot = load_snapshot_text(text).snapshot()
    assert snapshot.scheduling_workloads["ns/job-1"].templates[0].min_count == 2
    assert len(snapshot.workloads) == 0
    assert snapshot.pod_groups["ns/g"].min_count == 2


def test_absent_scheduling_api_is_a_missing_kind_not_an_error(tmp_path: Path) -> None:
    server = FakeApiServer(groups=default_groups()).start()
    try:
        discovery = discover(api_for(server, tmp_path), kueue_configmap=("kq", "cfg"))
    finally:
        server.close()
    assert "PodGroup" not in discovery.resources
    assert "scheduling.k8s.io" in discovery.missing["PodGroup"]


def test_served_scheduling_api_is_watched(tmp_path: Path) -> None:
    groups = default_groups()
    groups["scheduling.k8s.io"] = {"v1beta1": ("podgroups", "workloads")}
    server = FakeApiServer(groups=groups).start()
    try:
        discovery = discover(api_for(server, tmp_path), kueue_configmap=("kq", "cfg"))
    finally:
        server.close()
    assert discovery.resources["PodGroup"].path == "/apis/scheduling.k8s.io/v1beta1/podgroups"
    assert discovery.resources["SchedulingWorkload"].path == "/apis/scheduling.k8s.io/v1beta1/workloads"
    assert discovery.resources["Workload"].path.startswith("/apis/kueue.x-k8s.io/")


def test_workload_gates_mirror_kube_scheduler() -> None:
    config = parse_config({"features": {"GenericWorkload": True, "DRAWorkloadResourceClaims": True}})
    workload = config.decisions.workload
    assert workload.gangs and workload.group_claims and not workload.topology_aware
    assert not parse_config({}).decisions.workload.gangs
    with pytest.raises(ConfigError, match="DRAWorkloadResourceClaims needs GenericWorkload"):
        parse_config({"features": {"DRAWorkloadResourceClaims": True}})
    with pytest.raises(ConfigError, match="TopologyAwareWorkloadScheduling needs GenericWorkload"):
        parse_config({"features": {"TopologyAwareWorkloadScheduling": True}})
