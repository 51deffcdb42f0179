import copy
from fractions import Fraction

import pytest
import yaml

from extender.state.core import Taint
from extender.state.errors import ObjectError
from extender.state.kueue.cluster_queue import FungibilityPolicy, FungibilityPreference, StopPolicy, parse_cluster_queue
from extender.state.kueue.cohort import parse_cohort
from extender.state.kueue.device_class_mappings import (
    DeviceClassSourceKind,
    parse_device_class_mappings,
    parse_kueue_configmap,
)
from extender.state.kueue.local_queue import QUEUE_NAME_LABEL, parse_local_queue
from extender.state.kueue.resource_flavor import parse_resource_flavor
from extender.state.kueue.workload import parse_workload
from extender.state.labels import LabelSelector, parse_label_selector

CLUSTER_QUEUE_V1BETA2 = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: team-a
  uid: 6f1c2f9e-0000-4000-8000-000000000001
  finalizers: [kueue.x-k8s.io/resource-in-use]
spec:
  cohortName: research
  namespaceSelector:
    matchLabels:
      kueue.x-k8s.io/team: a
    matchExpressions:
    - key: env
      operator: NotIn
      values: [sandbox]
  stopPolicy: None
  queueingStrategy: BestEffortFIFO
  preemption:
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
  flavorFungibility:
    whenCanBorrow: TryNextFlavor
    whenCanPreempt: TryNextFlavor
    preference: BorrowingOverPreemption
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources:
      - name: cpu
        nominalQuota: 32
      - name: memory
        nominalQuota: 128Gi
  - coveredResources: [whole-gpus]
    flavors:
    - name: a100
      resources:
      - name: whole-gpus
        nominalQuota: 8
        borrowingLimit: 4
        lendingLimit: "2"
    - name: h100
      resources:
      - name: whole-gpus
        nominalQuota: "4"
status:
  flavorsUsage:
  - name: a100
    resources:
    - name: whole-gpus
      total: "3"
      borrowed: "0"
"""

CLUSTER_QUEUE_V1BETA1 = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: team-b
spec:
  cohort: research
  namespaceSelector: {}
  stopPolicy: HoldAndDrain
  flavorFungibility:
    whenCanBorrow: Borrow
    whenCanPreempt: Preempt
  resourceGroups:
  - coveredResources: [whole-gpus]
    flavors:
    - name: a100
      resources:
      - name: whole-gpus
        nominalQuota: 2
"""

COHORT = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata:
  name: research
spec:
  parentName: org
  fairSharing:
    weight: "2"
  resourceGroups:
  - coveredResources: [whole-gpus]
    flavors:
    - name: a100
      resources:
      - name: whole-gpus
        nominalQuota: 2
        lendingLimit: 6
"""

RESOURCE_FLAVOR = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: a100
spec:
  nodeLabels:
    gpu.example.com/model: a100
    topology.kubernetes.io/zone: zone-a
  nodeTaints:
  - key: gpu.example.com/dedicated
    value: research
    effect: NoSchedule
  tolerations:
  - key: gpu.example.com/dedicated
    operator: Equal
    value: research
    effect: NoSchedule
"""

LOCAL_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: training
  namespace: team-a
spec:
  clusterQueue: team-a
"""

WORKLOAD = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: pod-trainer-0-3b9f1
  namespace: team-a
  uid: wl-uid
  ownerReferences:
  - apiVersion: v1
    kind: Pod
    name: trainer-0
    uid: pod-uid
    controller: true
    blockOwnerDeletion: true
spec:
  queueName: training
  podSets:
  - name: main
    count: 1
status:
  admission:
    clusterQueue: team-a
    podSetAssignments:
    - name: main
      flavors:
        cpu: default
        whole-gpus: a100
      resourceUsage:
        cpu: 500m
        whole-gpus: "2"
      count: 1
  conditions:
  - type: QuotaReserved
    status: "True"
    reason: QuotaReserved
    lastTransitionTime: "2025-01-01T00:00:00Z"
  - type: Admitted
    status: "True"
    reason: Admitted
    lastTransitionTime: "2025-01-01T00:00:00Z"
"""

KUEUE_CONFIG = """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
resources:
  excludeResourcePrefixes: []
  deviceClassMappings:
  - name: whole-gpus
    deviceClassNames: [gpu.example.com, gpu-large.example.com]
  - name: example.com/nics
    deviceClassNames: [nic.example.com]
"""


def load(text):
    return yaml.safe_load(text)


def error_of(parse, obj):
    with pytest.raises(ObjectError) as info:
        parse(obj)
    return info.value


# --- ClusterQueue -------------------------------------------------------------------------------------------


def test_cluster_queue_v1beta2():
    cq = parse_cluster_queue(load(CLUSTER_QUEUE_V1BETA2))
    assert cq.name == "team-a"
    assert cq.uid == "6f1c2f9e-0000-4000-8000-000000000001"
    assert cq.api_version == "kueue.x-k8s.io/v1beta2"
    assert cq.cohort_name == "research"
    assert cq.stop_policy is StopPolicy.NONE
    assert not cq.is_stopped
    assert cq.flavor_fungibility.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR
    assert cq.flavor_fungibility.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    assert cq.flavor_fungibility.preference is FungibilityPreference.BORROWING_OVER_PREEMPTION
    assert [g.covered_resources for g in cq.resource_groups] == [("cpu", "memory"), ("whole-gpus",)]
    assert cq.flavors_for("whole-gpus") == ("a100", "h100")  # order preserved
    assert cq.flavors_for("nvidia.com/gpu") == ()
    assert cq.flavor_names == ("default", "a100", "h100")
    a100 = cq.quota("a100", "whole-gpus")
    assert a100 is not None
    assert (a100.nominal_quota, a100.borrowing_limit, a100.lending_limit) == (8, 4, 2)
    assert cq.quota("h100", "whole-gpus").nominal_quota == 4
    assert cq.quota("h100", "whole-gpus").borrowing_limit is None
    assert cq.quota("default", "memory").nominal_quota == 128 * 2**30
    assert cq.quota("a100", "cpu") is None  # cpu is in another group
    assert cq.selects_namespace({"kueue.x-k8s.io/team": "a"})
    assert cq.selects_namespace({"kueue.x-k8s.io/team": "a", "env": "prod"})
    assert not cq.selects_namespace({"kueue.x-k8s.io/team": "a", "env": "sandbox"})
    assert not cq.selects_namespace({})


def test_cluster_queue_v1beta1_converts_like_kueue():
    cq = parse_cluster_queue(load(CLUSTER_QUEUE_V1BETA1))
    assert cq.api_version == "kueue.x-k8s.io/v1beta1"
    assert cq.cohort_name == "research"  # spec.cohort in v1beta1
    assert cq.stop_policy is StopPolicy.HOLD_AND_DRAIN
    assert cq.is_stopped
    # Deprecated Borrow/Preempt become MayStopSearch, as Kueue's conversion does.
    assert cq.flavor_fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
    assert cq.flavor_fungibility.when_can_preempt is FungibilityPolicy.MAY_STOP_SEARCH
    # An empty selector selects every namespace.
    assert cq.namespace_selector == LabelSelector()
    assert cq.selects_namespace({})


def test_cluster_queue_version_specific_cohort_field():
    v1beta2 = load(CLUSTER_QUEUE_V1BETA1)
    v1beta2["apiVersion"] = "kueue.x-k8s.io/v1beta2"
    del v1beta2["spec"]["flavorFungibility"]
    # v1beta2 has no spec.cohort: an unknown field, ignored like the API server prunes it.
    assert parse_cluster_queue(v1beta2).cohort_name is None
    v1beta1 = load(CLUSTER_QUEUE_V1BETA2)
    v1beta1["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    v1beta1["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0].pop("borrowingLimit")
    v1beta1["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0].pop("lendingLimit")
    assert parse_cluster_queue(v1beta1).cohort_name is None


@pytest.mark.parametrize("field", ["cohortName", "cohort"])
def test_cluster_queue_without_api_version_accepts_either_cohort_spelling(field):
    # List items from the API come without apiVersion/kind.
    obj = {"metadata": {"name": "q"}, "spec": {field: "c"}}
    cq = parse_cluster_queue(obj)
    assert cq.cohort_name == "c"
    assert cq.api_version == "kueue.x-k8s.io/v1beta2"


def test_cluster_queue_defaults():
    cq = parse_cluster_queue({"metadata": {"name": "q"}})
    assert cq.cohort_name is None
    assert cq.resource_groups == ()
    assert cq.stop_policy is StopPolicy.NONE
    assert cq.flavor_fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
    assert cq.flavor_fungibility.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    # Kueue: a nil namespaceSelector is labels.Nothing(): no namespace may submit.
    assert cq.namespace_selector is None
    assert not cq.selects_namespace({})
    assert not cq.selects_namespace({"any": "thing"})


def test_models_are_immutable():
    cq = parse_cluster_queue(load(CLUSTER_QUEUE_V1BETA2))
    with pytest.raises(AttributeError):
        cq.name = "other"
    with pytest.raises(TypeError):
        cq.namespace_selector.match_labels["x"] = "y"


def _quota_path(group=1, flavor=0, resource=0):
    return f"spec.resourceGroups[{group}].flavors[{flavor}].resources[{resource}]"


def _set(obj, path, value):
    """Set (or with value=... delete) a nested key given as a list of keys/indexes."""
    target = obj
    for key in path[:-1]:
        target = target[key]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value


RG = ["spec", "resourceGroups"]
H100_GPU = [*RG, 1, "flavors", 1, "resources", 0]


@pytest.mark.parametrize(
    ("path", "value", "field", "fragment"),
    [
        pytest.param(
            [*H100_GPU, "nominalQuota"],
            "lots",
            f"{_quota_path(1, 1)}.nominalQuota",
            "not a quantity",
            id="bad-quantity",
        ),
        pytest.param(
            [*H100_GPU, "nominalQuota"],
            ...,
            f"{_quota_path(1, 1)}.nominalQuota",
            "is required",
            id="missing-nominal",
        ),
        pytest.param(
            [*H100_GPU, "nominalQuota"],
            "-1",
            f"{_quota_path(1, 1)}.nominalQuota",
            "greater than or equal to 0",
            id="negative-nominal",
        ),
        pytest.param(
            [*H100_GPU, "borrowingLimit"],
            [1],
            f"{_quota_path(1, 1)}.borrowingLimit",
            "not a quantity",
            id="limit-wrong-type",
        ),
        pytest.param(
            [*H100_GPU, "name"],
            "gpus",
            f"{_quota_path(1, 1)}.name",
            "must match the name in coveredResources",
            id="resource-name-mismatch",
        ),
        pytest.param(
            [*RG, 1, "flavors", 0, "resources", 0, "lendingLimit"],
            "9",
            f"{_quota_path(1, 0)}.lendingLimit",
            "less than or equal to the nominalQuota",
            id="lending-above-nominal",
        ),
        pytest.param(
            [*RG, 1, "flavors", 1, "resources"],
            [],
            "spec.resourceGroups[1].flavors[1].resources",
            "same number of resources",
            id="resource-count",
        ),
        pytest.param(
            [*RG, 1, "flavors", 1, "name"],
            "default",
            "spec.resourceGroups[1].flavors[1].name",
            "duplicate flavor",
            id="duplicate-flavor-across-groups",
        ),
        pytest.param(
            [*RG, 1, "coveredResources"],
            ["cpu"],
            "spec.resourceGroups[1].coveredResources[0]",
            "duplicate resource",
            id="duplicate-covered-resource",
        ),
        pytest.param(
            [*RG, 0, "coveredResources"],
            "cpu",
            "spec.resourceGroups[0].coveredResources",
            "must be a list",
            id="covered-not-list",
        ),
        pytest.param([*RG, 0, "flavors"], [], "spec.resourceGroups[0].flavors", "at least 1 item", id="no-flavors"),
        pytest.param(
            [*RG, 0, "flavors", 0],
            "default",
            "spec.resourceGroups[0].flavors[0]",
            "must be an object",
            id="flavor-not-object",
        ),
        pytest.param(["spec", "resourceGroups"], {"a": 1}, "spec.resourceGroups", "must be a list", id="groups-map"),
        pytest.param(
            ["spec", "stopPolicy"],
            "Pause",
            "spec.stopPolicy",
            "must be one of None, Hold, HoldAndDrain",
            id="stop-policy",
        ),
        pytest.param(["spec", "cohortName"], 7, "spec.cohortName", "must be a string", id="cohort-type"),
        pytest.param(
            ["spec", "cohortName"],
            ...,
            f"{_quota_path(1, 0)}.borrowingLimit",
            "must be nil when cohort",
            id="limit-without-cohort",
        ),
        pytest.param(
            ["spec", "flavorFungibility", "whenCanBorrow"],
            "Borrow",
            "spec.flavorFungibility.whenCanBorrow",
            "unsupported value 'Borrow'",
            id="v1beta1-value-in-v1beta2",
        ),
        pytest.param(
            ["spec", "flavorFungibility", "whenCanPreempt"],
            "MayStopSearch",
            "spec.flavorFungibility.preference",
            "both whenCanBorrow and whenCanPreempt",
            id="preference-needs-try-next",
        ),
        pytest.param(
            ["spec", "namespaceSelector", "matchExpressions", 0, "operator"],
            "Matches",
            "spec.namespaceSelector.matchExpressions[0].operator",
            "unsupported operator",
            id="selector-operator",
        ),
        pytest.param(
            ["spec", "namespaceSelector", "matchExpressions", 0, "values"],
            [],
            "spec.namespaceSelector.matchExpressions[0].values",
            "must be specified",
            id="selector-values",
        ),
        pytest.param(
            ["spec", "namespaceSelector", "matchLabels"],
            {"team": 1},
            "spec.namespaceSelector.matchLabels.team",
            "must map strings to strings",
            id="selector-labels",
        ),
        pytest.param(["metadata", "name"], ..., "metadata.name", "is required", id="missing-name"),
        pytest.param(["metadata"], ..., "metadata", "is required", id="missing-metadata"),
        pytest.param(["kind"], "LocalQueue", "kind", "expected ClusterQueue", id="wrong-kind"),
        pytest.param(["apiVersion"], "kueue.x-k8s.io/v1alpha1", "apiVersion", "unsupported", id="wrong-version"),
    ],
)
def test_cluster_queue_errors_name_the_field(path, value, field, fragment):
    obj = copy.deepcopy(load(CLUSTER_QUEUE_V1BETA2))
    _set(obj, path, value)
    error = error_of(parse_cluster_queue, obj)
    assert error.field == field
    assert fragment in error.message
    assert field in str(error)


def test_error_path_for_nominal_quota_matches_brief_example():
    obj = load(CLUSTER_QUEUE_V1BETA2)
    obj["spec"]["resourceGroups"][0]["flavors"].append(
        {
            "name": "spot",
            "resources": [{"name": "cpu", "nominalQuota": "1x"}, {"name": "memory", "nominalQuota": 1}],
        }
    )
    error = error_of(parse_cluster_queue, obj)
    assert error.field == "spec.resourceGroups[0].flavors[1].resources[0].nominalQuota"


def test_not_an_object():
    assert error_of(parse_cluster_queue, ["x"]).message.startswith("must be an object")


# --- Cohort -------------------------------------------------------------------------------------------------


def test_cohort():
    cohort = parse_cohort(load(COHORT))
    assert cohort.name == "research"
    assert cohort.parent_name == "org"
    quota = cohort.quota("a100", "whole-gpus")
    # A Cohort may lend more than its own nominal: its subtree's quota is lendable too.
    assert (quota.nominal_quota, quota.lending_limit) == (2, 6)
    assert cohort.quota("h100", "whole-gpus") is None


def test_cohort_v1beta1_and_root_limits():
    obj = load(COHORT)
    obj["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    assert parse_cohort(obj).parent_name == "org"
    del obj["spec"]["parentName"]
    error = error_of(parse_cohort, obj)
    assert error.field == "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit"
    assert "must be nil when parent is empty" in error.message


def test_cohort_minimal():
    cohort = parse_cohort({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "org"}})
    assert (cohort.parent_name, cohort.resource_groups) == (None, ())


# --- ResourceFlavor -----------------------------------------------------------------------------------------


def test_resource_flavor():
    flavor = parse_resource_flavor(load(RESOURCE_FLAVOR))
    assert flavor.name == "a100"
    assert dict(flavor.node_labels) == {
        "gpu.example.com/model": "a100",
        "topology.kubernetes.io/zone": "zone-a",
    }
    assert flavor.node_taints == (Taint(key="gpu.example.com/dedicated", value="research", effect="NoSchedule"),)
    assert flavor.tolerations[0].tolerates(flavor.node_taints[0])
    node = {
        "gpu.example.com/model": "a100",
        "topology.kubernetes.io/zone": "zone-a",
        "kubernetes.io/os": "linux",
    }
    assert flavor.matches_node(node)
    assert not flavor.matches_node({**node, "topology.kubernetes.io/zone": "zone-b"})
    assert not flavor.matches_node({"gpu.example.com/model": "a100"})


def test_resource_flavor_without_labels_matches_every_node():
    flavor = parse_resource_flavor({"kind": "ResourceFlavor", "metadata": {"name": "default"}, "spec": {}})
    assert flavor.matches_node({})
    assert flavor.matches_node({"a": "b"})


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"nodeLabels": {"a": 1}}, "spec.nodeLabels.a"),
        ({"nodeTaints": [{"key": "k", "effect": "Sometimes"}]}, "spec.nodeTaints[0].effect"),
        ({"nodeTaints": [{"effect": "NoSchedule"}]}, "spec.nodeTaints[0].key"),
        ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "spec.tolerations[0].operator"),
        ({"tolerations": [{"key": "k", "tolerationSeconds": "5"}]}, "spec.tolerations[0].tolerationSeconds"),
    ],
)
def test_resource_flavor_errors(spec, field):
    error = error_of(parse_resource_flavor, {"metadata": {"name": "f"}, "spec": spec})
    assert error.field == field


# --- LocalQueue ---------------------------------------------------------------------------------------------


def test_local_queue():
    queue = parse_local_queue(load(LOCAL_QUEUE))
    assert (queue.namespace, queue.name, queue.cluster_queue, queue.key) == (
        "team-a",
        "training",
        "team-a",
        "team-a/training",
    )
    assert queue.stop_policy is StopPolicy.NONE
    assert QUEUE_NAME_LABEL == "kueue.x-k8s.io/queue-name"


def test_local_queue_requires_cluster_queue():
    obj = load(LOCAL_QUEUE)
    obj["spec"] = {}
    assert error_of(parse_local_queue, obj).field == "spec.clusterQueue"


# --- Workload -----------------------------------------------------------------------------------------------


def test_workload_admitted():
    workload = parse_workload(load(WORKLOAD))
    assert workload.key == "team-a/pod-trainer-0-3b9f1"
    assert workload.queue_name == "training"
    assert workload.admission is not None
    assert workload.admission.cluster_queue == "team-a"
    (assignment,) = workload.admission.pod_set_assignments
    assert assignment.name == "main"
    assert dict(assignment.flavors) == {"cpu": "default", "whole-gpus": "a100"}
    assert dict(assignment.resource_usage) == {"cpu": Fraction(1, 2), "whole-gpus": 2}
    assert assignment.count == 1
    assert workload.owner is not None
    assert (workload.owner.kind, workload.owner.name, workload.owner.uid) == ("Pod", "trainer-0", "pod-uid")
    assert [pod.name for pod in workload.owner_pods] == ["trainer-0"]
    assert workload.quota_reserved
    assert not workload.finished
    assert workload.holds_quota


def test_workload_pending_and_finished():
    obj = load(WORKLOAD)
    del obj["status"]["admission"]
    obj["status"]["conditions"] = []
    pending = parse_workload(obj)
    assert pending.admission is None
    assert not pending.holds_quota

    obj = load(WORKLOAD)
    obj["status"]["conditions"].append({"type": "Finished", "status": "True"})
    assert not parse_workload(obj).holds_quota


def test_workload_owner_prefers_controller():
    obj = load(WORKLOAD)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": "1"},
        {"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "2", "controller": True},
        {"apiVersion": "v1", "kind": "Pod", "name": "p2", "uid": "3"},
    ]
    workload = parse_workload(obj)
    assert workload.owner.name == "job"
    assert [pod.name for pod in workload.owner_pods] == ["p1", "p2"]
    obj["metadata"]["ownerReferences"] = []
    assert parse_workload(obj).owner is None


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda o: o["status"]["admission"].pop("clusterQueue"), "status.admission.clusterQueue"),
        (lambda o: o["status"]["admission"].pop("podSetAssignments"), "status.admission.podSetAssignments"),
        (
            lambda o: o["status"]["admission"]["podSetAssignments"][0]["resourceUsage"].update(cpu="fast"),
            "status.admission.podSetAssignments[0].resourceUsage.cpu",
        ),
        (
            lambda o: o["status"]["admission"]["podSetAssignments"][0].update(count=-1),
            "status.admission.podSetAssignments[0].count",
        ),
        (lambda o: o["metadata"]["ownerReferences"][0].pop("kind"), "metadata.ownerReferences[0].kind"),
        (lambda o: o["status"]["conditions"][0].pop("type"), "status.conditions[0].type"),
    ],
)
def test_workload_errors(mutate, field):
    obj = load(WORKLOAD)
    mutate(obj)
    assert error_of(parse_workload, obj).field == field


# --- label selectors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {}, True),
        ({}, {"a": "b"}, True),
        ({"matchLabels": {"a": "b"}}, {"a": "b", "c": "d"}, True),
        ({"matchLabels": {"a": "b"}}, {"a": "x"}, False),
        ({"matchLabels": {"a": "b"}}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]}]}, {"a": "y"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]}, {"a": "x"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "a"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
        (
            {
                "matchLabels": {"team": "a"},
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["prod", "staging"]},
                    {"key": "legacy", "operator": "DoesNotExist"},
                ],
            },
            {"team": "a", "env": "prod"},
            True,
        ),
        (
            {
                "matchLabels": {"team": "a"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["p"]}],
            },
            {"team": "b", "env": "p"},
            False,
        ),
    ],
)
def test_label_selector_semantics(selector, labels, expected):
    assert parse_label_selector(selector, "sel").matches(labels) is expected


@pytest.mark.parametrize(
    ("selector", "field"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "sel.matchExpressions[0].values",
        ),
        ({"matchExpressions": [{"operator": "Exists"}]}, "sel.matchExpressions[0].key"),
        ({"matchExpressions": [{"key": "a"}]}, "sel.matchExpressions[0].operator"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            "sel.matchExpressions[0].operator",
        ),
        ({"matchExpressions": "a=b"}, "sel.matchExpressions"),
        ("a=b", "sel"),
    ],
)
def test_label_selector_errors(selector, field):
    with pytest.raises(ObjectError) as info:
        parse_label_selector(selector, "sel")
    assert info.value.field == field


# --- deviceClassMappings ------------------------------------------------------------------------------------


def test_device_class_mappings_v1beta2():
    mappings = parse_device_class_mappings(load(KUEUE_CONFIG))
    assert mappings.resource_names == ("whole-gpus", "example.com/nics")
    assert mappings.resource_for_class("gpu.example.com") == "whole-gpus"
    assert mappings.resource_for_class("gpu-large.example.com") == "whole-gpus"
    assert mappings.resource_for_class("nic.example.com") == "example.com/nics"
    assert mappings.resource_for_class("fpga.example.com") is None
    assert mappings.class_names == {"gpu.example.com", "gpu-large.example.com", "nic.example.com"}
    assert len(mappings) == 2
    assert all(mapping.counts_devices for mapping in mappings.mappings)


def test_device_class_mappings_v1beta1_and_empty():
    config = load(KUEUE_CONFIG)
    config["apiVersion"] = "config.kueue.x-k8s.io/v1beta1"
    assert parse_device_class_mappings(config).resource_for_class("nic.example.com") == "example.com/nics"
    assert len(parse_device_class_mappings({"apiVersion": "config.kueue.x-k8s.io/v1beta2"})) == 0
    assert len(parse_device_class_mappings({"resources": {}})) == 0


def test_device_class_mappings_from_configmap():
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
        "data": {"controller_manager_config.yaml": KUEUE_CONFIG},
    }
    assert parse_kueue_configmap(configmap).resource_for_class("gpu.example.com") == "whole-gpus"
    renamed = {"data": {"config.yaml": KUEUE_CONFIG}}
    assert parse_kueue_configmap(renamed, key="config.yaml").resource_names == (
        "whole-gpus",
        "example.com/nics",
    )
    assert len(parse_kueue_configmap({"data": {"controller_manager_config.yaml": ""}})) == 0


@pytest.mark.parametrize(
    ("configmap", "field", "fragment"),
    [
        ({"data": {}}, "data.controller_manager_config.yaml", "is required"),
        ({}, "data", "is required"),
        (
            {"data": {"controller_manager_config.yaml": "resources: [unclosed"}},
            "data.controller_manager_config.yaml",
            "not valid YAML",
        ),
        (
            {"data": {"controller_manager_config.yaml": "- a list"}},
            "data.controller_manager_config.yaml",
            "Configuration object",
        ),
        (
            {"data": {"controller_manager_config.yaml": "resources:\n  deviceClassMappings:\n  - name: x\n"}},
            "data.controller_manager_config.yaml: resources.deviceClassMappings[0].deviceClassNames",
            "is required",
        ),
    ],
)
def test_configmap_errors(configmap, field, fragment):
    with pytest.raises(ObjectError) as info:
        parse_kueue_configmap(configmap)
    assert info.value.field == field
    assert fragment in info.value.message


def _mappings(*entries):
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "resources": {"deviceClassMappings": list(entries)},
    }


@pytest.mark.parametrize(
    ("config", "field", "fragment"),
    [
        pytest.param(
            _mappings(*({"name": f"r{i}", "deviceClassNames": [f"c{i}"]} for i in range(17))),
            "resources.deviceClassMappings",
            "at most 16 mappings",
            id="too-many-mappings",
        ),
        pytest.param(
            _mappings({"name": "gpus", "deviceClassNames": []}),
            "resources.deviceClassMappings[0].deviceClassNames",
            "at least one device class",
            id="no-classes",
        ),
        pytest.param(
            _mappings({"name": "gpus", "deviceClassNames": [f"c{i}" for i in range(9)]}),
            "resources.deviceClassMappings[0].deviceClassNames",
            "at most 8",
            id="too-many-classes",
        ),
        pytest.param(
            _mappings({"name": "", "deviceClassNames": ["a"]}),
            "resources.deviceClassMappings[0].name",
            "must not be empty",
            id="empty-name",
        ),
        pytest.param(
            _mappings({"deviceClassNames": ["a"]}),
            "resources.deviceClassMappings[0].name",
            "is required",
            id="missing-name",
        ),
        pytest.param(
            _mappings({"name": "Bad Name", "deviceClassNames": ["a"]}),
            "resources.deviceClassMappings[0].name",
            "invalid resource name",
            id="invalid-name",
        ),
        pytest.param(
            _mappings({"name": "gpus", "deviceClassNames": ["a", "-b"]}),
            "resources.deviceClassMappings[0].deviceClassNames[1]",
            "invalid device class name",
            id="invalid-class",
        ),
        pytest.param(
            _mappings({"name": "gpus", "deviceClassNames": ["a"]}, {"name": "gpus", "deviceClassNames": ["b"]}),
            "resources.deviceClassMappings[1].name",
            "duplicate mapping name",
            id="duplicate-name",
        ),
        pytest.param(
            _mappings({"name": "gpus", "deviceClassNames": ["a", "a"]}),
            "resources.deviceClassMappings[0].deviceClassNames[1]",
            "duplicate device class",
            id="duplicate-class-in-mapping",
        ),
        pytest.param(
            _mappings({"name": "gpus", "deviceClassNames": ["a"]}, {"name": "more", "deviceClassNames": ["a"]}),
            "resources.deviceClassMappings[1].deviceClassNames[0]",
            "already mapped to resource 'gpus'",
            id="class-in-two-mappings",
        ),
        pytest.param(
            _mappings({"name": "gpus", "deviceClassNames": "a"}),
            "resources.deviceClassMappings[0].deviceClassNames",
            "must be a list",
            id="classes-not-list",
        ),
        pytest.param(
            {"kind": "Configuration", "apiVersion": "config.kueue.x-k8s.io/v1alpha1"},
            "apiVersion",
            "unsupported",
            id="config-version",
        ),
        pytest.param(
            _mappings({"name": "gpus", "deviceClassNames": ["a"], "sources": [{}]}),
            "resources.deviceClassMappings[0].sources[0]",
            "exactly one source type",
            id="empty-source",
        ),
    ],
)
def test_device_class_mapping_validation(config, field, fragment):
    with pytest.raises(ObjectError) as info:
        parse_device_class_mappings(config)
    assert info.value.field == field
    assert fragment in info.value.message


def _counter(name):
    return {
        "counter": {
            "name": name,
            "driver": "gpu.example.com",
            "deviceSelector": {"cel": {"expression": "true"}},
        }
    }


def test_device_class_in_several_counter_mappings_like_kueue():
    # Kueue v0.19 allows one class in several mappings when each tracks a different driver counter.
    config = _mappings(
        {"name": "gpu-memory", "deviceClassNames": ["mig.example.com"], "sources": [_counter("memory")]},
        {"name": "gpu-compute", "deviceClassNames": ["mig.example.com"], "sources": [_counter("compute")]},
    )
    mappings = parse_device_class_mappings(config)
    assert mappings.resource_for_class("mig.example.com") == "gpu-memory"  # first mapping wins, as Kueue's mapper
    first = mappings.mapping_for_class("mig.example.com")
    assert not first.counts_devices
    assert first.sources[0].kind is DeviceClassSourceKind.COUNTER
    assert first.counter_names == {"memory"}

    same_counter = _mappings(
        {"name": "gpu-memory", "deviceClassNames": ["mig.example.com"], "sources": [_counter("memory")]},
        {"name": "gpu-memory2", "deviceClassNames": ["mig.example.com"], "sources": [_counter("memory")]},
    )
    with pytest.raises(ObjectError, match="already has a counter source for counter 'memory'"):
        parse_device_class_mappings(same_counter)
    mixed = _mappings(
        {"name": "gpus", "deviceClassNames": ["mig.example.com"]},
        {"name": "gpu-memory", "deviceClassNames": ["mig.example.com"], "sources": [_counter("memory")]},
    )
    with pytest.raises(ObjectError, match="already mapped to resource 'gpus'"):
        parse_device_class_mappings(mixed)
