"""Scheduling scenarios through our extender, asserted on what the real kube-scheduler did.

The `extender_control_plane` runs kube-scheduler (v1.37.2, in-tree DynamicResources plugin on) with our
extender as its filter/prioritize extender. Kueue's objects (ResourceFlavors, ClusterQueues, LocalQueues and
its manager ConfigMap with `deviceClassMappings`) are created through the API; no Kueue controller runs, the
extender reads them. There are no kubelets: "bound" means spec.nodeName is set (pods stay Pending).

Every scenario has its own namespace, ClusterQueue(s), ResourceFlavor(s) and nodes: the nodes carry the label
SCENARIO_LABEL=<scenario>, the scenario's flavors select on it and its pods have it as nodeSelector, so one
scenario's leftovers (claims still being garbage-collected) never touch the next one's devices or quota.
Before a scenario creates pods it asks the extender (POST /diagnostics/explain) until the extender's view
contains everything the pod needs, so no pod is judged against a half-synced view.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.e2e.cluster import DEVICE_CLASS, DRIVER, ControlPlane, pod_manifest, wait_until
from tests.e2e.conftest import ExtenderControlPlane

pytestmark = pytest.mark.e2e

GPU = "example.com/gpu"  # the quota resource the deviceClassMapping maps gpu.example.com to
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SCENARIO_LABEL = "e2e.dra-extender/scenario"
POOL_LABEL = "e2e.dra-extender/pool"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
KUEUE_NAMESPACE, KUEUE_CONFIGMAP, KUEUE_CONFIG_KEY = (
    "kueue-system",
    "kueue-manager-config",
    "controller_manager_config.yaml",
)
QUOTA_EXHAUSTED = "quota exhausted"

SCHEDULE_TIMEOUT = 90.0  # generous: a pod that hit an error backs off up to 10 s between attempts
SYNC_TIMEOUT = 30.0  # the extender's watches deliver within milliseconds; this bounds a broken one


# --- talking to the extender ---------------------------------------------------------------------------


def extender_get(url: str, path: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(f"{url}{path}", timeout=timeout) as response:
        return json.loads(response.read())


def extender_post(url: str, path: str, body: Any, timeout: float = 10.0) -> Any:
    request = urllib.request.Request(
        f"{url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def extender_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def queue_rows(url: str, cluster_queue: str) -> dict[str, dict[str, Any]]:
    """The extender's /diagnostics/queues rows of one ClusterQueue for the GPU resource, by flavor."""
    for queue in extender_get(url, "/diagnostics/queues")["clusterQueues"]:
        if queue["name"] == cluster_queue:
            return {row["flavor"]: row for row in queue["resources"] if row["resource"] == GPU}
    return {}


def queue_usage(url: str, cluster_queue: str) -> dict[str, int]:
    return {flavor: row["usage"] for flavor, row in queue_rows(url, cluster_queue).items() if row["usage"]}


def queue_reserved(url: str, cluster_queue: str) -> dict[str, int]:
    return {flavor: row["reserved"] for flavor, row in queue_rows(url, cluster_queue).items() if row["reserved"]}


# --- Kueue objects -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlavorQuota:
    flavor: str
    nominal: int
    borrowing_limit: int | None = None


def resource_flavor(name: str, node_labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": node_labels},
    }


def cluster_queue(
    name: str, flavors: list[FlavorQuota], cohort: str | None = None, when_can_borrow: str | None = None
) -> dict[str, Any]:
    def quota(entry: FlavorQuota) -> dict[str, Any]:
        resource: dict[str, Any] = {"name": GPU, "nominalQuota": entry.nominal}
        if entry.borrowing_limit is not None:
            resource["borrowingLimit"] = entry.borrowing_limit
        return {"name": entry.flavor, "resources": [resource]}

    spec: dict[str, Any] = {
        "namespaceSelector": {},  # every namespace (null would admit none)
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [quota(f) for f in flavors]}],
    }
    if cohort:
        spec["cohortName"] = cohort
    if when_can_borrow:
        spec["flavorFungibility"] = {"whenCanBorrow": when_can_borrow}
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def kueue_configmap() -> dict[str, Any]:
    configuration = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "resources": {"deviceClassMappings": [{"name": GPU, "deviceClassNames": [DEVICE_CLASS]}]},
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": KUEUE_CONFIGMAP, "namespace": KUEUE_NAMESPACE},
        "data": {KUEUE_CONFIG_KEY: yaml.safe_dump(configuration, sort_keys=False)},
    }


# --- claims --------------------------------------------------------------------------------------------


def claim_template(namespace: str, name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def exactly(count: int, name: str = "gpu") -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": count}}


def all_devices(name: str = "gpu") -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": DEVICE_CLASS, "allocationMode": "All"}}


def first_available(name: str, subrequests: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "name": name,
        "firstAvailable": [
            {"name": sub, "deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": count}
            for sub, count in subrequests
        ],
    }


# --- a scenario: namespace, nodes, queues, pods --------------------------------------------------------


@dataclass
class Scenario:
    plane: ControlPlane
    url: str
    name: str
    namespace: str
    scheduler_name: str = "default-scheduler"  # the profile whose kube-scheduler calls the extender
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> labels
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)  # flavor -> nodeLabels
    cluster_queues: list[str] = field(default_factory=list)

    # setup ----------------------------------------------------------------------------------------------

    def add_nodes(self, prefix: str, count: int, gpus: int, labels: dict[str, str] | None = None) -> list[str]:
        names = [f"{self.name}-{prefix}-{i}" for i in range(1, count + 1)]
        for node in names:
            node_labels = {SCENARIO_LABEL: self.name, **(labels or {})}
            self.plane.create_node(node, labels=node_labels)
            self.plane.publish_gpus(node, count=gpus)
            self.nodes[node] = node_labels
        for node in names:
            wait_until(
                lambda n=node: _node_devices(self.url, n) == gpus,
                timeout=SYNC_TIMEOUT,
                message=f"the extender to see node {node} with {gpus} devices",
            )
        return names

    def add_flavor(self, name: str, extra_labels: dict[str, str] | None = None) -> str:
        node_labels = {SCENARIO_LABEL: self.name, **(extra_labels or {})}
        self.plane.custom.create_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", resource_flavor(name, node_labels)
        )
        self.flavors[name] = node_labels
        return name

    def add_queue(
        self,
        name: str,
        flavors: list[FlavorQuota],
        cohort: str | None = None,
        when_can_borrow: str | None = None,
        local_queue_name: str | None = None,
    ) -> str:
        """A ClusterQueue and a LocalQueue (default: same name) for it in the scenario's namespace; waits until
        the extender shows the ClusterQueue with its quota and no problem."""
        self.plane.custom.create_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", cluster_queue(name, flavors, cohort, when_can_borrow)
        )
        self.cluster_queues.append(name)
        lq = local_queue_name or name
        self.plane.custom.create_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, self.namespace, "localqueues", local_queue(self.namespace, lq, name)
        )
        wanted = {f.flavor: f.nominal for f in flavors}

        def queue_seen() -> bool:
            for queue in extender_get(self.url, "/diagnostics/queues")["clusterQueues"]:
                if queue["name"] == name:
                    nominal = {r["flavor"]: r["nominal"] for r in queue["resources"] if r["resource"] == GPU}
                    return not queue["problem"] and nominal == wanted
            return False

        wait_until(queue_seen, timeout=SYNC_TIMEOUT, message=f"the extender to show ClusterQueue {name}")
        return lq

    def add_template(self, name: str, requests: list[dict[str, Any]]) -> str:
        self.plane.resource.create_namespaced_resource_claim_template(
            self.namespace, claim_template(self.namespace, name, requests)
        )
        return name

    # pods -----------------------------------------------------------------------------------------------

    def manifest(self, name: str, template: str, queue: str) -> dict[str, Any]:
        manifest = pod_manifest(
            self.namespace,
            name,
            claim_templates={"gpu": template},
            labels={QUEUE_LABEL: queue},
            scheduler_name=self.scheduler_name,
        )
        manifest["spec"]["nodeSelector"] = {SCENARIO_LABEL: self.name}
        return manifest

    def wait_extender_sees(self, template: str, queue: str, cluster_queue_name: str) -> dict[str, Any]:
        """Ask the extender where a pod of this template and queue would go until its view has the template,
        the LocalQueue and the devices: at least one of the scenario's nodes passes."""
        manifest = self.manifest("probe", template, queue)
        query = "&".join(f"node={n}" for n in self.nodes)

        def passes() -> dict[str, Any] | None:
            decision = extender_post(self.url, f"/diagnostics/explain?{query}", manifest)
            ok = decision["quota"]["clusterQueue"] == cluster_queue_name and decision["passed"] > 0
            return decision if ok else None

        return wait_until(
            passes, timeout=SYNC_TIMEOUT, message=f"the extender to pass a {template} pod of queue {queue}"
        )

    def create_pod(self, name: str, template: str, queue: str) -> None:
        self.plane.create_pod(self.manifest(name, template, queue))

    def create_pods(self, names: list[str], template: str, queue: str, threads: int = 8) -> None:
        """Create many pods at once (concurrently, so kube-scheduler sees a burst)."""
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(lambda n: self.create_pod(n, template, queue), names))

    def pods(self) -> list[Any]:
        return self.plane.core.list_namespaced_pod(self.namespace).items

    def bound(self) -> dict[str, str]:
        """Pod name -> node, for the pods kube-scheduler has bound."""
        return {p.metadata.name: p.spec.node_name for p in self.pods() if p.spec.node_name}

    def allocated_devices(self, pods: list[Any] | None = None) -> int:
        """Devices held by allocated claims reserved for a live pod of the namespace (the in-tree plugin
        allocates in PreBind, before the pod binds). Claims of deleted pods, waiting for the garbage collector,
        do not count: their quota was given back with the pod."""
        live = {
            p.metadata.name for p in (pods if pods is not None else self.pods()) if not p.metadata.deletion_timestamp
        }
        claims = self.plane.resource.list_namespaced_resource_claim(self.namespace).items
        return sum(
            len(c.status.allocation.devices.results)
            for c in claims
            if c.status and c.status.allocation and {r.name for r in c.status.reserved_for or []} & live
        )

    def failed_scheduling(self) -> dict[str, list[str]]:
        """Pod name -> messages of its FailedScheduling events."""
        messages: dict[str, list[str]] = {}
        for event in self.plane.core.list_namespaced_event(self.namespace).items:
            if event.reason == "FailedScheduling" and event.involved_object.kind == "Pod":
                messages.setdefault(event.involved_object.name, []).append(event.message or "")
        return messages

    def wait_bound(self, name: str, timeout: float = SCHEDULE_TIMEOUT) -> str:
        return self.plane.wait_for_pod_scheduled(self.namespace, name, timeout=timeout).spec.node_name

    def flavor_of(self, node: str) -> str | None:
        labels = self.nodes.get(node)
        if labels is None:
            labels = self.plane.core.read_node(node).metadata.labels or {}
        for flavor, selector in self.flavors.items():
            if all(labels.get(k) == v for k, v in selector.items()):
                return flavor
        return None

    def api_usage(self, queue: str | None = None) -> dict[str, int]:
        """What a fresh list of the API gives: devices in the allocated claims of bound pods (of one LocalQueue,
        or all), by the flavor of their node."""
        usage: Counter[str] = Counter()
        claims = {c.metadata.name: c for c in self.plane.resource.list_namespaced_resource_claim(self.namespace).items}
        for pod in self.pods():
            if not pod.spec.node_name or (queue and (pod.metadata.labels or {}).get(QUEUE_LABEL) != queue):
                continue
            flavor = self.flavor_of(pod.spec.node_name)
            for status in pod.status.resource_claim_statuses or []:
                claim = claims.get(status.resource_claim_name or "")
                if claim is None or not claim.status or not claim.status.allocation:
                    continue
                results = [r for r in claim.status.allocation.devices.results if not r.admin_access]
                if flavor is not None:
                    usage[flavor] += len(results)
        return dict(usage)

    def claims_of(self, pod: str) -> list[Any]:
        return self.plane.pod_claims(self.namespace, pod)

    # teardown -------------------------------------------------------------------------------------------

    def cleanup(self) -> None:
        self.plane.delete_namespace(self.namespace)
        for name in self.cluster_queues:
            _delete_cluster_object(self.plane, "clusterqueues", name)
        for name in self.flavors:
            _delete_cluster_object(self.plane, "resourceflavors", name)


def _node_devices(url: str, node: str) -> int:
    try:
        return int(extender_get(url, f"/diagnostics/nodes/{node}")["totalDevices"])
    except urllib.error.HTTPError:
        return -1


def _delete_cluster_object(plane: ControlPlane, plural: str, name: str) -> None:
    try:
        plane.custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name)
    except ApiException as exc:
        if exc.status != 404:
            raise


class QuotaWatch:
    """Polls bound pods and allocated devices of a scenario, remembering the highest numbers seen, so a
    momentary over-commit is caught even if it heals later. API errors (a restarting API server) are skipped."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.max_bound = 0
        self.max_allocated = 0
        self.max_bound_pods: list[str] = []
        self.polls = 0
        self.bound: dict[str, str] = {}

    def poll(self) -> dict[str, str]:
        try:
            pods = self.scenario.pods()
            bound = {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}
            allocated = self.scenario.allocated_devices(pods)
        except (ApiException, OSError):
            return self.bound
        except Exception as exc:  # urllib3 errors while the API server restarts
            if "urllib3" not in type(exc).__module__:
                raise
            return self.bound
        self.polls += 1
        self.bound = bound
        if len(bound) > self.max_bound:
            self.max_bound, self.max_bound_pods = len(bound), sorted(bound)
        self.max_allocated = max(self.max_allocated, allocated)
        return bound

    def within(self, quota: int) -> bool:
        return self.max_bound <= quota and self.max_allocated <= quota

    def report(self, cluster_queue: str) -> str:
        """For a failed assertion: the peaks, which pods were bound at the peak, and the extender's view."""
        try:
            queues = json.dumps(queue_rows(self.scenario.url, cluster_queue))
        except (urllib.error.URLError, OSError) as exc:
            queues = f"unavailable: {exc}"
        return (
            f"max bound {self.max_bound} ({', '.join(self.max_bound_pods)}), max allocated devices "
            f"{self.max_allocated}, {self.polls} polls; extender's rows for {cluster_queue}: {queues}"
        )

    def until(self, predicate: Callable[[dict[str, str]], bool], timeout: float, message: str) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            bound = self.poll()
            if predicate(bound):
                return bound
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {message} (bound: {len(bound)})")
            time.sleep(0.1)

    def hold(self, seconds: float) -> dict[str, str]:
        """Keep polling for a while (nothing more should happen)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll()
            time.sleep(0.1)
        return self.poll()


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kueue_plane(extender_control_plane: ExtenderControlPlane) -> ExtenderControlPlane:
    """The extender control plane with the DeviceClass and Kueue's manager ConfigMap (deviceClassMappings
    gpu.example.com -> example.com/gpu), once the extender has read the mapping."""
    plane = extender_control_plane.plane
    plane.create_device_class()
    try:
        plane.create_namespace(KUEUE_NAMESPACE, wait_for_service_account=False)
    except ApiException as exc:
        if exc.status != 409:
            raise
    try:
        plane.core.create_namespaced_config_map(KUEUE_NAMESPACE, kueue_configmap())
    except ApiException as exc:
        if exc.status != 409:
            raise
    url = extender_control_plane.extender_url
    wait_until(
        lambda: extender_get(url, "/diagnostics/queues")["deviceClassMappings"] == {GPU: [DEVICE_CLASS]},
        timeout=SYNC_TIMEOUT,
        message="the extender to read deviceClassMappings from Kueue's ConfigMap",
    )
    return extender_control_plane


def _extender_profile(plane: ExtenderControlPlane) -> str:
    """The schedulerName of the profile the fixture's kube-scheduler (the one calling our extender) serves."""
    args = plane.plane.components["kube-scheduler"].args
    config_file = next(a.removeprefix("--config=") for a in args if a.startswith("--config="))
    profiles = yaml.safe_load(Path(config_file).read_text())["profiles"]
    return str(profiles[0].get("schedulerName") or "default-scheduler")


@pytest.fixture
def scenario(kueue_plane: ExtenderControlPlane, request: pytest.FixtureRequest) -> Iterator[Scenario]:
    name = "-".join(request.node.name.removeprefix("test_").split("_")[:3])
    namespace = f"{name}-{uuid.uuid4().hex[:6]}"
    kueue_plane.plane.create_namespace(namespace)
    started = time.monotonic()
    scenario = Scenario(
        kueue_plane.plane, kueue_plane.extender_url, name, namespace, scheduler_name=_extender_profile(kueue_plane)
    )
    try:
        yield scenario
    finally:
        print(f"scenario {name}: {time.monotonic() - started:.1f}s")
        scenario.cleanup()


# --- scenarios -----------------------------------------------------------------------------------------


def test_seed_pods_get_devices_on_the_node_the_extender_passed(scenario: Scenario) -> None:
    """A 1-GPU and a 4-GPU template claim (ExactCount): each pod is bound to a node with enough free devices,
    the in-tree plugin allocated its claim there, and the extender's diagnostics show that node passed."""
    small, big = scenario.add_nodes("small", 1, gpus=2), scenario.add_nodes("big", 1, gpus=6)
    flavor = scenario.add_flavor(f"{scenario.name}-gpus")
    queue = scenario.add_queue(scenario.name, [FlavorQuota(flavor, 8)])
    scenario.add_template("one-gpu", [exactly(1)])
    scenario.add_template("four-gpus", [exactly(4)])
    explained = scenario.wait_extender_sees("four-gpus", queue, scenario.name)
    verdicts = {n["node"]: n for n in explained["nodes"]}
    assert verdicts[big[0]]["passed"] and not verdicts[small[0]]["passed"]  # only the 6-GPU node fits 4
    assert "quota" not in verdicts[small[0]]["category"], verdicts[small[0]]  # refused for devices, not quota

    scenario.create_pod("four", "four-gpus", queue)
    assert scenario.wait_bound("four") == big[0]
    scenario.create_pod("one", "one-gpu", queue)
    one_node = scenario.wait_bound("one")
    assert one_node in small + big

    for pod, node, count in (("four", big[0], 4), ("one", one_node, 1)):
        (claim,) = scenario.claims_of(pod)
        allocation = claim.status.allocation
        assert allocation is not None, f"claim of {pod} not allocated"
        results = allocation.devices.results
        assert len(results) == count
        assert {(r.driver, r.pool) for r in results} == {(DRIVER, node)}  # the example driver's pool is the node
        assert [r.name for r in claim.status.reserved_for] == [pod]

        diagnostics = extender_get(scenario.url, f"/diagnostics/pods/{scenario.namespace}/{pod}")
        verdicts = {v["node"]: v for v in diagnostics["nodes"]}
        assert verdicts[node]["passed"], f"{pod}: the extender did not pass {node}: {verdicts[node]}"
        assert diagnostics["quota"]["clusterQueue"] == scenario.name
        # the extender's allocator picked the devices the in-tree plugin then allocated
        assert sorted(d["device"] for d in verdicts[node]["devices"]) == sorted(
            f"{r.driver}/{r.pool}/{r.device}" for r in results
        )
    wait_until(
        lambda: queue_usage(scenario.url, scenario.name) == {flavor: 5},
        timeout=SYNC_TIMEOUT,
        message="usage 5 in the extender",
    )


def test_quota_bounds_bound_pods_and_a_deleted_pod_frees_its_share(scenario: Scenario) -> None:
    """Quota for 8 GPUs, six 2-GPU pods, 16 free devices: exactly 4 bind, 2 stay Pending with our quota reason
    in their FailedScheduling event; deleting a bound pod lets one of them schedule."""
    scenario.add_nodes("node", 2, gpus=8)
    flavor = scenario.add_flavor(f"{scenario.name}-gpus")
    queue = scenario.add_queue(scenario.name, [FlavorQuota(flavor, 8)])
    scenario.add_template("two-gpus", [exactly(2)])
    scenario.wait_extender_sees("two-gpus", queue, scenario.name)

    names = [f"pod-{i}" for i in range(6)]
    watch = QuotaWatch(scenario)
    scenario.create_pods(names, "two-gpus", queue)

    def settled(bound: dict[str, str]) -> bool:
        if len(bound) < 4:
            return False
        failed = scenario.failed_scheduling()
        pending = [n for n in names if n not in bound]
        return all(any(QUOTA_EXHAUSTED in m for m in failed.get(n, [])) for n in pending)

    watch.until(settled, SCHEDULE_TIMEOUT, "4 pods bound and the others refused for quota")
    bound = watch.hold(3.0)
    assert len(bound) == 4 and watch.max_bound == 4 and watch.max_allocated == 8, watch.report(scenario.name)
    pending = sorted(set(names) - set(bound))
    failed = scenario.failed_scheduling()
    for name in pending:
        message = next(m for m in failed[name] if QUOTA_EXHAUSTED in m)
        assert f"ClusterQueue {scenario.name} {QUOTA_EXHAUSTED} for {GPU} in flavor {flavor}" in message, message
        pod = scenario.plane.core.read_namespaced_pod(name, scenario.namespace)
        assert pod.status.phase == "Pending" and not pod.spec.node_name
    assert queue_usage(scenario.url, scenario.name) == {flavor: 8} == scenario.api_usage()

    victim = sorted(bound)[0]
    scenario.plane.core.delete_namespaced_pod(victim, scenario.namespace, grace_period_seconds=0)
    after = watch.until(
        lambda b: victim not in b and len(b) == 4, SCHEDULE_TIMEOUT, "a pending pod to take the freed quota"
    )
    assert len(set(after) & set(pending)) == 1
    after = watch.hold(3.0)
    assert len(after) == 4 and watch.max_bound == 4 and watch.max_allocated <= 8, watch.report(scenario.name)
    wait_until(
        lambda: queue_usage(scenario.url, scenario.name) == {flavor: 8} == scenario.api_usage(),
        timeout=SYNC_TIMEOUT,
        message="usage 8 in the extender and in the API",
    )


def test_burst_never_exceeds_quota(scenario: Scenario) -> None:
    """40 one-GPU pods at once against quota 16 and 32 free devices: never more than 16 bound (or devices
    allocated) at any moment, exactly 16 in the end."""
    scenario.add_nodes("node", 4, gpus=8)
    flavor = scenario.add_flavor(f"{scenario.name}-gpus")
    queue = scenario.add_queue(scenario.name, [FlavorQuota(flavor, 16)])
    scenario.add_template("one-gpu", [exactly(1)])
    scenario.wait_extender_sees("one-gpu", queue, scenario.name)

    names = [f"pod-{i:02d}" for i in range(40)]
    watch = QuotaWatch(scenario)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as creator:
        creating = creator.submit(scenario.create_pods, names, "one-gpu", queue)
        while not creating.done():
            watch.poll()
            time.sleep(0.05)
        creating.result()

    def settled(bound: dict[str, str]) -> bool:
        if len(bound) < 16:
            return False
        failed = scenario.failed_scheduling()
        return all(any(QUOTA_EXHAUSTED in m for m in failed.get(n, [])) for n in names if n not in bound)

    watch.until(settled, SCHEDULE_TIMEOUT, "16 pods bound and the other 24 refused for quota")
    elapsed = time.monotonic() - started
    bound = watch.hold(3.0)
    print(f"burst: 16 of 40 bound in {elapsed:.1f}s; {watch.polls} polls, max bound {watch.max_bound}")
    assert watch.within(16), watch.report(scenario.name)
    assert len(bound) == 16
    wait_until(
        lambda: queue_usage(scenario.url, scenario.name) == {flavor: 16} == scenario.api_usage(),
        timeout=SYNC_TIMEOUT,
        message="usage 16 in the extender and in the API",
    )


def test_flavor_order_and_borrowing(scenario: Scenario) -> None:
    """Two labelled node pools, ResourceFlavors on-demand and spot. A ClusterQueue without a cohort fills
    on-demand first, then spot, then refuses. A ClusterQueue in a cohort with `whenCanBorrow: TryNextFlavor`
    goes to spot before borrowing on-demand, and a pod that fits only by borrowing from its peer binds."""
    od_nodes = scenario.add_nodes("od", 2, gpus=4, labels={POOL_LABEL: "on-demand"})
    spot_nodes = scenario.add_nodes("spot", 2, gpus=4, labels={POOL_LABEL: "spot"})
    on_demand = scenario.add_flavor("on-demand", {POOL_LABEL: "on-demand"})
    spot = scenario.add_flavor("spot", {POOL_LABEL: "spot"})
    scenario.add_template("two-gpus", [exactly(2)])

    # order: first flavor, then the next when the first is full, then quota exhausted
    solo = scenario.add_queue("fl-solo", [FlavorQuota(on_demand, 2), FlavorQuota(spot, 2)])
    scenario.wait_extender_sees("two-gpus", solo, "fl-solo")
    scenario.create_pod("solo-1", "two-gpus", solo)
    assert scenario.wait_bound("solo-1") in od_nodes
    scenario.create_pod("solo-2", "two-gpus", solo)
    assert scenario.wait_bound("solo-2") in spot_nodes
    scenario.create_pod("solo-3", "two-gpus", solo)
    event = scenario.plane.wait_for_event(scenario.namespace, "solo-3", "FailedScheduling", timeout=SCHEDULE_TIMEOUT)
    assert QUOTA_EXHAUSTED in event.message, event.message
    assert queue_usage(scenario.url, "fl-solo") == {on_demand: 2, spot: 2} == scenario.api_usage(solo)

    # borrowing: team-b lends its on-demand quota to team-a through the cohort
    lender = scenario.add_queue("fl-team-b", [FlavorQuota(on_demand, 2), FlavorQuota(spot, 0)], cohort="fl-cohort")
    team_a = scenario.add_queue(
        "fl-team-a",
        [FlavorQuota(on_demand, 2, borrowing_limit=2), FlavorQuota(spot, 2, borrowing_limit=0)],
        cohort="fl-cohort",
        when_can_borrow="TryNextFlavor",
    )
    assert lender
    scenario.wait_extender_sees("two-gpus", team_a, "fl-team-a")
    scenario.create_pod("a-1", "two-gpus", team_a)
    assert scenario.wait_bound("a-1") in od_nodes  # fits on-demand without borrowing
    scenario.create_pod("a-2", "two-gpus", team_a)
    assert scenario.wait_bound("a-2") in spot_nodes  # on-demand would need borrowing: TryNextFlavor -> spot
    scenario.create_pod("a-3", "two-gpus", team_a)
    assert scenario.wait_bound("a-3") in od_nodes  # spot is full: borrow team-b's on-demand quota
    decision = extender_get(scenario.url, f"/diagnostics/pods/{scenario.namespace}/a-3")
    assert decision["quota"]["chosenFlavor"] == on_demand
    outcomes = {f["outcome"] for v in decision["nodes"] if v["passed"] for f in v["quota"]["fits"]}
    assert outcomes == {"FitsByBorrowing"}, outcomes
    scenario.create_pod("a-4", "two-gpus", team_a)  # on-demand 4 = 2 nominal + 2 borrowed, spot 2: nothing left
    event = scenario.plane.wait_for_event(scenario.namespace, "a-4", "FailedScheduling", timeout=SCHEDULE_TIMEOUT)
    assert QUOTA_EXHAUSTED in event.message, event.message

    wait_until(
        lambda: queue_usage(scenario.url, "fl-team-a") == {on_demand: 4, spot: 2} == scenario.api_usage(team_a),
        timeout=SYNC_TIMEOUT,
        message="fl-team-a usage on-demand 4, spot 2 in the extender and in the API",
    )
    rows = queue_rows(scenario.url, "fl-team-b")
    assert rows[on_demand]["usage"] == 0 and rows[on_demand]["available"] == 0  # lent out
    for pod in ("solo-3", "a-4"):
        assert not scenario.plane.core.read_namespaced_pod(pod, scenario.namespace).spec.node_name


def test_all_and_first_available_are_charged_what_was_allocated(scenario: Scenario) -> None:
    """allocationMode All takes (and is charged) every device of its node; firstAvailable is charged the
    subrequest the in-tree plugin chose on the node it landed on."""
    scenario.add_nodes("node", 2, gpus=3)
    flavor = scenario.add_flavor(f"{scenario.name}-gpus")
    queue = scenario.add_queue(scenario.name, [FlavorQuota(flavor, 16)])
    scenario.add_template("all-gpus", [all_devices()])
    scenario.add_template("four-or-two", [first_available("gpu", [("four", 4), ("two", 2)])])
    scenario.wait_extender_sees("all-gpus", queue, scenario.name)

    scenario.create_pod("all", "all-gpus", queue)
    all_node = scenario.wait_bound("all")
    (claim,) = scenario.claims_of("all")
    assert len(claim.status.allocation.devices.results) == 3
    wait_until(
        lambda: queue_usage(scenario.url, scenario.name) == {flavor: 3},
        timeout=SYNC_TIMEOUT,
        message="All charged 3",
    )

    scenario.create_pod("first-available", "four-or-two", queue)
    fa_node = scenario.wait_bound("first-available")
    assert fa_node != all_node  # the All pod holds every device of its node
    (claim,) = scenario.claims_of("first-available")
    results = claim.status.allocation.devices.results
    assert [r.request for r in results] == ["gpu/two", "gpu/two"]  # no node has 4: the second subrequest
    decision = extender_get(scenario.url, f"/diagnostics/pods/{scenario.namespace}/first-available")
    (verdict,) = [v for v in decision["nodes"] if v["node"] == fa_node]
    assert verdict["quota"]["charges"][0]["amount"] == 2
    wait_until(
        lambda: queue_usage(scenario.url, scenario.name) == {flavor: 5} == scenario.api_usage(),
        timeout=SYNC_TIMEOUT,
        message="usage 5 (3 for All, 2 for firstAvailable) in the extender and in the API",
    )
    assert queue_reserved(scenario.url, scenario.name) == {}


def test_extender_and_apiserver_restarts_mid_burst(kueue_plane: ExtenderControlPlane, scenario: Scenario) -> None:
    """The extender is SIGKILLed mid-burst and restarted, later the API server is restarted: never more than
    the quota bound, scheduling resumes each time, and the extender's usage equals a fresh list of the API."""
    plane = scenario.plane
    scenario.add_nodes("node", 4, gpus=8)
    flavor = scenario.add_flavor(f"{scenario.name}-gpus")
    queue = scenario.add_queue(scenario.name, [FlavorQuota(flavor, 16)])
    scenario.add_template("one-gpu", [exactly(1)])
    scenario.wait_extender_sees("one-gpu", queue, scenario.name)
    watch = QuotaWatch(scenario)
    names = [f"pod-{i:02d}" for i in range(40)]

    # 1. a first wave; kill the extender as soon as a few pods are bound (others are in flight)
    with ThreadPoolExecutor(max_workers=1) as creator:
        creating = creator.submit(scenario.create_pods, names[:12], "one-gpu", queue)
        watch.until(lambda b: len(b) >= 3, SCHEDULE_TIMEOUT, "the first pods to bind")
        plane.components["extender"].kill()
        killed_at = len(watch.bound)
        creating.result()
    # 2. the rest of the burst arrives while the extender is down: the scheduler cannot filter, nothing binds
    scenario.create_pods(names[12:], "one-gpu", queue)
    during = watch.hold(3.0)
    assert not set(during) & set(names[12:]), f"pods bound while the extender was down: {sorted(during)}"
    down_since = time.monotonic()
    # 3. the extender comes back on the same port; it rebuilds its state from the API
    plane.respawn_component("extender", timeout=60)
    print(
        f"extender killed with {killed_at} bound, {len(during)} after in-flight bindings; back after "
        f"{time.monotonic() - down_since:.1f}s"
    )

    def settled(bound: dict[str, str]) -> bool:
        if len(bound) < 16:
            return False
        failed = scenario.failed_scheduling()
        return all(any(QUOTA_EXHAUSTED in m for m in failed.get(n, [])) for n in names if n not in bound)

    watch.until(settled, SCHEDULE_TIMEOUT, "scheduling to resume after the extender restart and fill the quota")
    bound = watch.hold(3.0)
    assert watch.within(16), watch.report(scenario.name)
    assert len(bound) == 16
    wait_until(
        lambda: queue_usage(scenario.url, scenario.name) == {flavor: 16} == scenario.api_usage(),
        timeout=SYNC_TIMEOUT,
        message="the restarted extender's usage to equal the API's",
    )

    # 4. two bound pods are deleted and, while kube-scheduler hands their quota to pending pods, the API server
    #    restarts (same port, same etcd): bindings in flight may fail, watches of the extender and the scheduler
    #    resume or relist
    victims = sorted(watch.poll())[:4]
    for victim in victims[:2]:
        plane.core.delete_namespaced_pod(victim, scenario.namespace, grace_period_seconds=0)
    plane.restart_component("kube-apiserver", timeout=120)
    wait_until(lambda: extender_ready(scenario.url), timeout=SYNC_TIMEOUT, message="extender ready")
    watch.until(
        lambda b: len(b) == 16 and not set(victims[:2]) & set(b),
        SCHEDULE_TIMEOUT,
        "pending pods to take the quota freed across the API server restart",
    )
    # 5. scheduling goes on after the restart: freeing quota again lets pending pods in, never more than 16
    for victim in victims[2:]:
        plane.core.delete_namespaced_pod(victim, scenario.namespace, grace_period_seconds=0)
    watch.until(
        lambda b: len(b) == 16 and not set(victims) & set(b),
        SCHEDULE_TIMEOUT,
        "pending pods to take the quota freed after the API server restart",
    )
    bound = watch.hold(3.0)
    assert watch.within(16), watch.report(scenario.name)
    assert len(bound) == 16
    wait_until(
        lambda: (
            queue_usage(scenario.url, scenario.name) == {flavor: 16} == scenario.api_usage()
            and queue_reserved(scenario.url, scenario.name) == {}
        ),
        timeout=SYNC_TIMEOUT,
        message="the extender's usage to equal the API's after the API server restart",
    )
    plane.check_alive()
