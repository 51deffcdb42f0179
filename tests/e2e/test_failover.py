"""Failover (issue 15, point 4): two kube-scheduler replicas with leader election, each with its own extender,
as manifests/ deploys them. The leader's pair is SIGKILLed in the middle of a burst; the new leader's extender
has none of the old one's reservations and must not over-commit: it counts what the API shows in flight
(claims allocated and reserved for pods not bound yet, pods nominated for a node).

Invariant, sampled at >= 5 Hz from one list of the namespace's ResourceClaims (one resourceVersion): devices
allocated to the ClusterQueue's pods never exceed its nominal quota; at the end exactly the quota is in use.
"""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.cluster import LOOPBACK, Component, free_port, scheduler_config, spawn, start_extender, wait_until
from tests.e2e.conftest import ExtenderControlPlane
from tests.e2e.scenarios import (
    FlavorQuota,
    Scenario,
    exactly,
)

pytestmark = pytest.mark.e2e

PROFILE = "dra-failover"
NOMINAL = 12
PODS = 40
SAMPLE_PERIOD = 0.1  # 10 Hz


def filter_calls(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("dra_extender_requests_total{") and 'verb="filter"' in line
    )


def start_replica(plane: ExtenderControlPlane, index: int, workdir: Path) -> tuple[Component, Component]:
    """One replica: an extender and a kube-scheduler calling it, electing a leader on one Lease."""
    control = plane.plane
    extender = start_extender(control.kubeconfig, free_port(), log_dir=control.log_dir)
    config = scheduler_config(control.kubeconfig, str(extender.url), PROFILE)
    config["leaderElection"] = {
        "leaderElect": True,
        "resourceName": PROFILE,
        "resourceNamespace": "default",
        "leaseDuration": "4s",
        "renewDeadline": "3s",
        "retryPeriod": "1s",
    }
    config_file = workdir / f"failover-scheduler-{index}.yaml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    scheduler = spawn(
        f"kube-scheduler-failover-{index}",
        [
            str(control.binaries["kube-scheduler"]),
            f"--config={config_file}",
            f"--authentication-kubeconfig={control.kubeconfig}",
            f"--authorization-kubeconfig={control.kubeconfig}",
            "--authentication-skip-lookup",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port}",
            f"--cert-dir={workdir / f'failover-{index}-certs'}",
            "--v=2",
        ],
        control.log_dir,
    )
    return extender, scheduler


@pytest.fixture
def replicas(
    kueue_plane: ExtenderControlPlane,
    tmp_path: Path,
) -> Iterator[list[tuple[Component, Component]]]:
    pairs = [start_replica(kueue_plane, index, tmp_path) for index in (0, 1)]
    try:
        yield pairs
    finally:
        for extender, scheduler in pairs:
            scheduler.stop()
            extender.stop()


def allocated(scenario: Scenario) -> int:
    """Devices of allocated claims reserved for a pod: one list, one resourceVersion."""
    claims = scenario.plane.resource.list_namespaced_resource_claim(scenario.namespace).items
    return sum(
        len(c.status.allocation.devices.results)
        for c in claims
        if c.status and c.status.allocation and c.status.reserved_for
    )


def test_new_leader_does_not_over_commit_after_the_leader_pair_is_killed_mid_burst(
    kueue_plane: ExtenderControlPlane,
    replicas: list[tuple[Component, Component]],
) -> None:
    name = f"failover-{uuid.uuid4().hex[:4]}"
    scenario = Scenario(kueue_plane.plane, str(replicas[0][0].url), name, kueue_plane.plane.create_namespace(name))
    scenario.scheduler_name = PROFILE
    try:
        scenario.add_nodes("n", 2, gpus=8)
        flavor = scenario.add_flavor(f"{name}-gpus")
        queue = scenario.add_queue(name, [FlavorQuota(flavor, NOMINAL)])
        scenario.add_template("one-gpu", [exactly(1)])
        for extender, _ in replicas:  # both replicas' extenders see the scenario before pods arrive
            scenario.url = str(extender.url)
            scenario.wait_extender_sees("one-gpu", queue, name)

        samples: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append(allocated(scenario))
                stop.wait(SAMPLE_PERIOD)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        creator = threading.Thread(
            target=scenario.create_pods, args=([f"p{i}" for i in range(PODS)], "one-gpu", queue), daemon=True
        )
        creator.start()
        # The leader is the replica whose extender gets filter calls; kill its pair mid-burst.
        (leader,) = wait_until(
            lambda: next(((i,) for i, (e, _) in enumerate(replicas) if filter_calls(str(e.url)) >= 6), None),
            timeout=60,
            interval=0.02,
            message="a leader to start filtering",
        )
        extender, scheduler = replicas[leader]
        scheduler.kill()
        extender.kill()
        killed_at = time.monotonic() - started
        bound_at_kill = len(scenario.bound())
        creator.join(60)
        survivor = replicas[1 - leader][0]
        wait_until(lambda: len(scenario.bound()) >= NOMINAL, timeout=90, message="the new leader to fill the quota")
        time.sleep(3)  # let any over-admission show
        stop.set()
        sampler.join(5)
        final_bound = len(scenario.bound())
        final_allocated = allocated(scenario)
        print(
            f"\nfailover: leader {leader} killed at {killed_at:.1f}s with {bound_at_kill} bound; "
            f"{len(samples)} samples ({len(samples) / (time.monotonic() - started):.1f} Hz), max allocated "
            f"{max(samples)} of {NOMINAL}; final bound {final_bound}, allocated {final_allocated}; "
            f"survivor filter calls {filter_calls(str(survivor.url)):.0f}"
        )
        assert len(samples) / (time.monotonic() - started) >= 5
        over = [value for value in samples if value > NOMINAL]
        assert not over, f"{len(over)} over-commit instants, max {max(over)} of {NOMINAL}"
        assert final_bound == NOMINAL and final_allocated == NOMINAL
    finally:
        scenario.cleanup()
