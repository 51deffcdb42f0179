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

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from testkit import builders as b
from testkit.control_plane import DRIVER, wait_until
from tests.e2e.conftest import ExtenderControlPlane
from tests.e2e.scenarios import (
    GPU,
    POOL_LABEL,
    QUOTA_EXHAUSTED,
    SCHEDULE_TIMEOUT,
    SYNC_TIMEOUT,
    FlavorQuota,
    QuotaWatch,
    Scenario,
    extender_get,
    extender_ready,
    queue_reserved,
    queue_rows,
    queue_usage,
)

pytestmark = pytest.mark.e2e


def test_seed_pods_get_devices_on_the_node_the_extender_passed(scenario: Scenario) -> None:
    """A 1-GPU and a 4-GPU template claim (ExactCount): each pod is bound to a node with enough free devices,
    the in-tree plugin allocated its claim there, and the extender's diagnostics show that node passed."""
    small, big = scenario.add_nodes("small", 1, gpus=2), scenario.add_nodes("big", 1, gpus=6)
    flavor = scenario.add_flavor(f"{scenario.name}-gpus")
    queue = scenario.add_queue(scenario.name, [FlavorQuota(flavor, 8)])
    scenario.add_template("one-gpu", [b.exact_request("gpu", 1)])
    scenario.add_template("four-gpus", [b.exact_request("gpu", 4)])
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
    scenario.add_template("two-gpus", [b.exact_request("gpu", 2)])
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
    scenario.add_template("one-gpu", [b.exact_request("gpu", 1)])
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
    scenario.add_template("two-gpus", [b.exact_request("gpu", 2)])

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
    scenario.add_template("all-gpus", [b.exact_request("gpu", mode="All")])
    scenario.add_template(
        "four-or-two", [b.first_available_request("gpu", [b.subrequest("four", 4), b.subrequest("two", 2)])]
    )
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
    scenario.add_template("one-gpu", [b.exact_request("gpu", 1)])
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
