"""Chaos: a stream of quota-governed pods while the extender is SIGKILLed and respawned, the
API server restarts, and the extender's watches are reset by a TCP proxy between it and the API server; a
namespace of unrelated pods makes the initial lists take real time. Seeded, bounded in count and time, loopback
only.

Invariant, sampled at >= 5 Hz from one consistent read (claims listed, then pods at exactly that
resourceVersion): the devices allocated to live pods of the ClusterQueue never exceed its nominal quota. At the
end the extender's usage equals what a fresh list of the API gives.

In `make test`: one seed, 30 s, 300 unrelated pods (~90 s with its control plane). The long version, with the
large cluster: CHAOS_SEEDS=1,2,3,4,5 CHAOS_SECONDS=40 CHAOS_BACKGROUND_PODS=3000. On an over-commit the report
carries what the API held and what the extender believed ("over-commit detail").

Guards against an over-commit after an extender kill (7-8 devices against 6, the extender counting the same 7
with nothing reserved). Pods and claims arrive on separate watches, which deliver, and after a reset or a relist
resume, independently: the binding can show before the allocation PreBind wrote ahead of it. Were a reservation
let go when kube-scheduler nominates the pod (usage then charges the pod's unallocated claims on its node), but
only while the pod is unbound, such a pod would count as nothing and its quota would be given again. So the
reservation stays until the allocation shows, and a placed pod's claims that usage does not show yet are a
provisional charge for pods without a reservation (a restarted extender's case; decisions/quota/attribution.py
provisional_usage). The window the kill opens with kube-scheduler still
binding what the killed process let through is tests/e2e/test_restart_window.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from testkit import scenarios as ts
from testkit.control_plane import (
    LOOPBACK,
    Component,
    ControlPlane,
    free_port,
    pod_manifest,
    start_extender,
    wait_until,
    write_kubeconfig,
)
from tests.e2e.conftest import _finish, _start
from tests.e2e.proxies import TcpProxy
from tests.e2e.scenarios import (
    GPU,
    KUEUE_NAMESPACE,
    Scenario,
)

pytestmark = pytest.mark.e2e

# The short version (make test): one seed. The long one, with the large cluster:
#   CHAOS_SEEDS=1,2,3,4,5 CHAOS_SECONDS=40 CHAOS_BACKGROUND_PODS=3000 .venv/bin/pytest -s tests/e2e/test_chaos.py
SEEDS = [int(s) for s in os.environ.get("CHAOS_SEEDS", "11").split(",") if s]
SECONDS = float(os.environ.get("CHAOS_SECONDS", "30"))
BACKGROUND_PODS = int(os.environ.get("CHAOS_BACKGROUND_PODS", "300"))
NOMINAL = 6
TICK = 0.25
SAMPLE_PERIOD = 0.1


@dataclass
class ChaosPlane:
    plane: ControlPlane
    proxy: TcpProxy
    extender: Component
    extender_kubeconfig: Path
    extender_port: int
    log: Counter[str] = field(default_factory=Counter)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.extender_port}"

    def respawn_extender(self) -> None:
        self.extender.kill()
        self.extender = start_extender(self.extender_kubeconfig, self.extender_port, log_dir=self.plane.log_dir)


@pytest.fixture(scope="module")
def chaos_plane(pytestconfig: pytest.Config, e2e_binaries: dict[str, Path]) -> Iterator[ChaosPlane]:
    started = _start(pytestconfig, e2e_binaries, "chaos")
    plane = started.plane
    proxy = TcpProxy(int(plane.server.rsplit(":", 1)[1]))
    chaos: ChaosPlane | None = None
    extender: Component | None = None
    try:
        plane.create_device_class()
        plane.create_namespace(KUEUE_NAMESPACE, wait_for_service_account=False)
        plane.core.create_namespaced_config_map(KUEUE_NAMESPACE, ts.kueue_config())
        add_background_pods(plane, BACKGROUND_PODS)
        kubeconfig = write_kubeconfig(
            plane.workdir / "extender-via-proxy.kubeconfig",
            f"https://{LOOPBACK}:{proxy.port}",
            plane.token,
            plane.workdir / "apiserver-certs" / "apiserver.crt",
        )
        port = free_port()
        started_at = time.monotonic()
        extender = start_extender(kubeconfig, port, log_dir=plane.log_dir)
        print(f"\nchaos: extender synced {BACKGROUND_PODS} unrelated pods in {time.monotonic() - started_at:.1f}s")
        plane.start_scheduler(extender_url=f"http://{LOOPBACK}:{port}")
        chaos = ChaosPlane(plane, proxy, extender, kubeconfig, port)
        yield chaos
    finally:
        current = chaos.extender if chaos is not None else extender  # the last one respawned: the plane does not
        if current is not None:  # know it, and it outlived every run before
            current.stop()
        proxy.close()
        _finish(pytestconfig, started, "chaos")


def add_background_pods(plane: ControlPlane, count: int) -> None:
    """Unrelated pods, bound straight to a filler node (no scheduling): they only make lists long."""
    plane.create_node("chaos-filler", pods="100000")
    namespace = plane.create_namespace("chaos-background", wait_for_service_account=False)

    def create(index: int) -> None:
        manifest = pod_manifest(namespace, f"filler-{index}")
        manifest["spec"]["nodeName"] = "chaos-filler"
        plane.create_pod(manifest)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, range(count)))


def consistent_allocated(scenario: Scenario, detail: list[Any] | None = None) -> int:
    """Devices allocated to live pods, from claims and pods read at one resourceVersion (with `detail`, the
    resourceVersion and the pods holding them are appended to it)."""
    claims = scenario.plane.resource.list_namespaced_resource_claim(scenario.namespace, _request_timeout=2)
    version = claims.metadata.resource_version
    pods = scenario.plane.core.list_namespaced_pod(
        scenario.namespace, resource_version=version, resource_version_match="Exact", _request_timeout=2
    ).items
    live = {p.metadata.name: p for p in pods if not p.metadata.deletion_timestamp}
    holding = [
        (c.metadata.name, [r.name for r in c.status.reserved_for or []], len(c.status.allocation.devices.results))
        for c in claims.items
        if c.status and c.status.allocation and {r.name for r in c.status.reserved_for or []} & set(live)
    ]
    total = sum(count for _, _, count in holding)
    if detail is not None:
        pods_of = {name for _, names, _ in holding for name in names}
        detail.append(
            {
                "rv": version,
                "claims": holding,
                "pods": {n: (live[n].spec.node_name, live[n].status.nominated_node_name) for n in pods_of if n in live},
            }
        )
    return total


def extender_usage(url: str, cluster_queue: str) -> int:
    with urllib.request.urlopen(f"{url}/diagnostics/queues", timeout=5) as response:
        queues = json.loads(response.read())["clusterQueues"]
    return sum(
        int(r["usage"]) for q in queues if q["name"] == cluster_queue for r in q["resources"] if r["resource"] == GPU
    )


def seed_namespace(plane: ControlPlane, name: str) -> str:
    """The seed's namespace with its default ServiceAccount (pods are refused without it). Created here rather
    than waited for: after several API server restarts kube-controller-manager's ServiceAccount controller was
    once seen not to create it within 30 s (seed 9 of a 6..10 run), which says nothing about the extender."""
    plane.create_namespace(name, wait_for_service_account=False)
    with contextlib.suppress(ApiException):  # 409: the controller was first
        plane.core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
    return name


def run_seed(chaos: ChaosPlane, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    name = f"chaos-{seed}-{uuid.uuid4().hex[:4]}"
    scenario = Scenario(chaos.plane, chaos.url, name, seed_namespace(chaos.plane, name))
    _, queue = scenario.add_one_gpu_queue(3, 4, NOMINAL)

    samples: list[int] = []
    over_detail: list[dict[str, Any]] = []  # what each over-commit instant held, for the report
    timeline: list[tuple[float, str]] = []  # disruptions, by seconds since the stream started
    errors: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    api_down = [0.0]  # seconds the API server was restarting (no consistent read can be had then)
    stop = threading.Event()

    def sample() -> None:
        # Two of these run, each at most every 2 * SAMPLE_PERIOD: one consistent read is two API calls.
        while not stop.is_set():
            began = time.monotonic()
            try:
                detail: list[Any] = []
                value = consistent_allocated(scenario, detail)
                samples.append(value)
                if value > NOMINAL:
                    seen: dict[str, Any] = {}
                    try:  # what the extender believed at that instant
                        with urllib.request.urlopen(f"{chaos.url}/diagnostics/queues", timeout=2) as response:
                            queues = json.loads(response.read())
                        seen = {
                            "usage": [q["resources"] for q in queues["clusterQueues"] if q["name"] == name],
                            "reservations": [r["pod"] for r in queues["reservations"]],
                            "decisions": {},
                        }
                        for pod_name in detail[0]["pods"]:
                            try:
                                url = f"{chaos.url}/diagnostics/pods/{scenario.namespace}/{pod_name}"
                                with urllib.request.urlopen(url, timeout=2) as response:
                                    record = json.loads(response.read())
                                seen["decisions"][pod_name] = {
                                    "verb": record.get("verb"),
                                    "snapshot": record.get("snapshotVersion"),
                                    "passed": record.get("passed"),
                                    "node0": (record.get("nodes") or [{}])[0],
                                }
                            except (OSError, ValueError):
                                seen["decisions"][pod_name] = None
                        with urllib.request.urlopen(f"{chaos.url}/metrics", timeout=2) as response:
                            seen["released"] = [
                                line
                                for line in response.read().decode().splitlines()
                                if line.startswith("dra_extender_reservations_released")
                            ]
                    except (OSError, ValueError) as error:
                        seen = {"error": str(error)}
                    over_detail.append({"t": round(time.monotonic() - started, 2), **detail[0], "extender": seen})
            except (ApiException, OSError, urllib3.exceptions.HTTPError) as error:  # the API server is restarting
                errors[f"sample {type(error).__name__}"] += 1
            stop.wait(max(0.0, 2 * SAMPLE_PERIOD - (time.monotonic() - began)))

    def stream(rng: random.Random) -> None:
        created = 0
        while not stop.is_set():
            try:
                if rng.random() < 0.75:
                    scenario.create_pod(f"p{created}", "one-gpu", queue)
                    created += 1
                    actions["create"] += 1
                else:
                    bound = sorted(scenario.bound())
                    if bound:
                        victim = rng.choice(bound)
                        chaos.plane.core.delete_namespaced_pod(victim, scenario.namespace, grace_period_seconds=0)
                        actions["delete bound"] += 1
            except (ApiException, OSError, urllib3.exceptions.HTTPError) as error:
                errors[f"stream {type(error).__name__}"] += 1
            stop.wait(TICK)

    def disrupt(rng: random.Random) -> None:
        restarted = False
        first = ["kill extender", "reset watches", "restart apiserver"]
        rng.shuffle(first)  # every seed has each kind, in its own order, then more at random
        while not stop.wait(rng.uniform(2.0, 4.0)):
            what = first.pop() if first else rng.choice(["kill extender", "reset watches", "restart apiserver"])
            if what == "restart apiserver" and restarted:
                what = "reset watches"
            try:
                if what == "kill extender":
                    chaos.respawn_extender()
                elif what == "reset watches":
                    chaos.proxy.reset()
                else:
                    began = time.monotonic()
                    chaos.plane.restart_component("kube-apiserver")
                    api_down[0] += time.monotonic() - began
                    restarted = True
                actions[what] += 1
                timeline.append((round(time.monotonic() - started, 2), what))
            except Exception as error:  # a failed disruption is reported, not fatal
                errors[f"disrupt {what} {type(error).__name__}"] += 1

    threads = [
        threading.Thread(target=sample, daemon=True),
        threading.Thread(target=sample, daemon=True),
        threading.Thread(target=stream, args=(random.Random(rng.random()),), daemon=True),
        threading.Thread(target=disrupt, args=(random.Random(rng.random()),), daemon=True),
    ]
    started = time.monotonic()
    for index, thread in enumerate(threads):
        thread.start()
        if index == 0:
            time.sleep(SAMPLE_PERIOD)  # the two samplers interleave
    time.sleep(SECONDS)
    stop.set()
    for thread in threads:
        thread.join(120)
    if not chaos.extender.alive():
        chaos.respawn_extender()
    stop.clear()
    settling = [threading.Thread(target=sample, daemon=True) for _ in range(2)]  # keep sampling while it settles
    for thread in settling:
        thread.start()
        time.sleep(SAMPLE_PERIOD)
    # settle: the extender's usage converges to the API's
    final_api = 0

    def converged() -> bool:
        nonlocal final_api
        final_api = consistent_allocated(scenario)
        return extender_usage(chaos.url, name) == final_api

    wait_until(converged, timeout=60, interval=0.5, message="the extender's usage to equal the API's")
    stop.set()
    for thread in settling:
        thread.join(5)
    elapsed = time.monotonic() - started
    readable = max(1.0, elapsed - api_down[0])
    over = [value for value in samples if value > NOMINAL]
    report = {
        "seed": seed,
        "seconds": round(elapsed, 1),
        "samples": len(samples),
        "sample Hz (API up)": round(len(samples) / readable, 1),
        "API restarting s": round(api_down[0], 1),
        "max allocated": max(samples, default=0),
        "nominal": NOMINAL,
        "over-commit instants": len(over),
        "actions": dict(actions),
        "errors": dict(errors),
        "final usage (extender = API)": final_api,
        "disruptions": timeline,
        "over-commit detail": over_detail[:3],
    }
    scenario.cleanup()
    # The next seed starts once kube-controller-manager has deleted this one's namespace: its client is rate
    # limited (20 QPS) and one seed's leftovers (claims, events) competed with the next seed's claims.
    began = time.monotonic()
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: namespace_gone(chaos.plane, scenario.namespace), timeout=60, interval=0.5)
    report["namespace deleted in s"] = round(time.monotonic() - began, 1)
    return report


def namespace_gone(plane: ControlPlane, name: str) -> bool:
    try:
        plane.core.read_namespace(name, _request_timeout=2)
    except ApiException as error:
        return error.status == 404
    return False


def test_no_over_commit_under_extender_kills_apiserver_restarts_and_watch_resets(chaos_plane: ChaosPlane) -> None:
    reports = [run_seed(chaos_plane, seed) for seed in SEEDS]
    for report in reports:
        print("chaos:", json.dumps(report))
    for report in reports:
        assert report["over-commit instants"] == 0, report
        assert report["max allocated"] == NOMINAL, f"the seed never reached the quota, so it showed nothing: {report}"
        assert report["sample Hz (API up)"] >= 5, report
        assert sum(report["actions"].get(k, 0) for k in ("kill extender", "reset watches", "restart apiserver"))
