"""The extender scenarios' shared pieces: Kueue objects, the extender's diagnostics, the Scenario helper and its
fixtures (used by test_extender_scenarios, test_kueue_scenarios, test_kueue_v019_scenarios, test_kubectl_plugin)."""

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

from testkit import builders as b
from testkit import scenarios as ts
from testkit.control_plane import DEVICE_CLASS, ControlPlane, pod_manifest, wait_until
from tests.e2e.conftest import ExtenderControlPlane

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

    def quota(self) -> dict[str, Any]:
        """The flavor's entry in testkit.scenarios.cluster_queue's quotas."""
        limit = {} if self.borrowing_limit is None else {"borrowingLimit": self.borrowing_limit}
        return {"nominal": self.nominal, **limit}


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
                lambda n=node: node_devices(self.url, n) == gpus,
                timeout=SYNC_TIMEOUT,
                message=f"the extender to see node {node} with {gpus} devices",
            )
        return names

    def add_flavor(self, name: str, extra_labels: dict[str, str] | None = None) -> str:
        node_labels = {SCENARIO_LABEL: self.name, **(extra_labels or {})}
        self.plane.custom.create_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", ts.flavor(name, node_labels)
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
            KUEUE_GROUP,
            KUEUE_VERSION,
            "clusterqueues",
            ts.cluster_queue(
                name, {f.flavor: f.quota() for f in flavors}, cohort=cohort, when_can_borrow=when_can_borrow
            ),
        )
        self.cluster_queues.append(name)
        lq = local_queue_name or name
        self.plane.custom.create_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, self.namespace, "localqueues", ts.local_queue(self.namespace, name, lq)
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
            self.namespace, b.claim_template(name, self.namespace, requests)
        )
        return name

    # pods -----------------------------------------------------------------------------------------------

    def add_one_gpu_queue(self, nodes: int, gpus: int, nominal: int, *, wait: bool = True) -> tuple[str, str]:
        """`nodes` nodes of `gpus` GPUs in one flavor, a ClusterQueue named after the scenario with `nominal` GPUs
        there, the template "one-gpu"; waits until the extender sees them (unless `wait` is False: a caller with
        several extenders waits for each). Returns (flavor, queue)."""
        self.add_nodes("n", nodes, gpus=gpus)
        flavor = self.add_flavor(f"{self.name}-gpus")
        queue = self.add_queue(self.name, [FlavorQuota(flavor, nominal)])
        self.add_template("one-gpu", [b.exact_request("gpu", 1)])
        if wait:
            self.wait_extender_sees("one-gpu", queue, self.name)
        return flavor, queue

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
            delete_cluster_object(self.plane, "clusterqueues", name)
        for name in self.flavors:
            delete_cluster_object(self.plane, "resourceflavors", name)


def node_devices(url: str, node: str) -> int:
    try:
        return int(extender_get(url, f"/diagnostics/nodes/{node}")["totalDevices"])
    except urllib.error.HTTPError:
        return -1


def delete_cluster_object(plane: ControlPlane, plural: str, name: str) -> None:
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
                names = ", ".join(sorted(bound)[:20]) + (" ..." if len(bound) > 20 else "")
                raise TimeoutError(
                    f"timed out after {timeout:.0f}s waiting for {message} (bound {len(bound)}: {names})"
                )
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
        plane.core.create_namespaced_config_map(KUEUE_NAMESPACE, ts.kueue_config())
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
