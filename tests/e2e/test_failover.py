"""Failover: two kube-scheduler replicas with leader election, each with its own extender,
as manifests/ deploys them. The leader's pair is SIGKILLed in the middle of a burst; the new leader's extender
has none of the old one's reservations and must not over-commit: it counts what the API shows in flight
(claims allocated and reserved for pods not bound yet, pods nominated for a node).

Invariant, sampled at >= 5 Hz from one list of the namespace's ResourceClaims (one resourceVersion): devices
allocated to the ClusterQueue's pods never exceed its nominal quota; at the end exactly the quota is in use.

Each kube-scheduler runs with a hostname of its own (a UTS namespace, as each replica's pod has), so its Lease
holderIdentity (`<hostname>_<uuid>`) says which extender is beside the leader; each extender is told its
scheduler's hostname (`leader.identity`) and the Lease (`leader.lease`, service/leadership.py). The second test
kills the leader's kube-scheduler only: its extender lives on, as a sidecar whose scheduler container died, or
an old leader's scheduler still finishing a cycle after its Lease passed on. Once the Lease names the other
scheduler, that extender must refuse what it would reserve for: quota is counted from the new leader's ledger
only.
"""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testkit.control_plane import LOOPBACK, Component, free_port, scheduler_config, spawn, start_extender, wait_until
from tests.e2e.conftest import ExtenderControlPlane
from tests.e2e.scenarios import (
    FlavorQuota,
    Scenario,
    extender_get,
    extender_post,
)
from tests.support.requirements import missing_requirement

pytestmark = pytest.mark.e2e

PROFILE = "dra-failover"
NOMINAL = 12
PODS = 40
SAMPLE_PERIOD = 0.1  # 10 Hz


class Burst:
    """PODS one-GPU pods created on a thread while the devices allocated are sampled every SAMPLE_PERIOD."""

    def __init__(self, scenario: Scenario, queue: str) -> None:
        self.scenario = scenario
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        self.started = time.monotonic()
        self._creator = threading.Thread(
            target=scenario.create_pods, args=([f"p{i}" for i in range(PODS)], "one-gpu", queue), daemon=True
        )
        self._creator.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.samples.append(allocated(self.scenario))
            self._stop.wait(SAMPLE_PERIOD)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def leader(self, replicas: list[tuple[Component, Component]]) -> int:
        """The replica whose extender gets filter calls: its kube-scheduler holds the Lease."""
        (leader,) = wait_until(
            lambda: next(((i,) for i, (e, _) in enumerate(replicas) if filter_calls(str(e.url)) >= 6), None),
            timeout=60,
            interval=0.02,
            message="a leader to start filtering",
        )
        return leader

    def created(self) -> None:
        self._creator.join(60)

    def stop_sampling(self) -> list[int]:
        self._stop.set()
        self._sampler.join(5)
        return self.samples


def filter_calls(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("dra_extender_requests_total{") and 'verb="filter"' in line
    )


def own_hostname(host: str, command: list[str]) -> list[str]:
    """`command` in a UTS namespace (inside a user namespace, so no privilege is needed) named `host`."""
    return [
        "unshare",
        "--user",
        "--map-root-user",
        "--uts",
        "sh",
        "-c",
        f'hostname {host} && exec "$@"',
        "sh",
        *command,
    ]


def require_uts_namespaces() -> None:
    try:
        done = subprocess.run(own_hostname("probe", ["hostname"]), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        missing_requirement(f"unshare (util-linux) cannot start a process with its own hostname: {error}")
    if done.returncode != 0 or done.stdout.strip() != "probe":
        missing_requirement(f"unprivileged user and UTS namespaces are not available: {done.stderr.strip()}")


def start_replica(plane: ExtenderControlPlane, index: int, workdir: Path) -> tuple[Component, Component]:
    """One replica: an extender and a kube-scheduler calling it, electing a leader on one Lease. The scheduler's
    hostname is `failover-<index>`, the extender knows it as its scheduler's."""
    control = plane.plane
    host = f"failover-{index}"
    extender_config = workdir / f"failover-extender-{index}.yaml"
    extender_config.write_text(yaml.safe_dump({"leader": {"lease": f"default/{PROFILE}", "identity": host}}))
    extender = start_extender(control.kubeconfig, free_port(), config_file=extender_config, log_dir=control.log_dir)
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
        own_hostname(
            host,
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
        ),
        control.log_dir,
    )
    return extender, scheduler


@pytest.fixture
def replicas(
    kueue_plane: ExtenderControlPlane,
    tmp_path: Path,
) -> Iterator[list[tuple[Component, Component]]]:
    require_uts_namespaces()
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
        _, queue = scenario.add_one_gpu_queue(2, 8, NOMINAL, wait=False)
        for extender, _ in replicas:  # both replicas' extenders see the scenario before pods arrive
            scenario.url = str(extender.url)
            scenario.wait_extender_sees("one-gpu", queue, name)

        burst = Burst(scenario, queue)
        leader = burst.leader(replicas)  # kill its pair mid-burst
        extender, scheduler = replicas[leader]
        scheduler.kill()
        extender.kill()
        killed_at = burst.elapsed()
        bound_at_kill = len(scenario.bound())
        burst.created()
        survivor = replicas[1 - leader][0]
        wait_until(lambda: len(scenario.bound()) >= NOMINAL, timeout=90, message="the new leader to fill the quota")
        time.sleep(3)  # let any over-admission show
        samples = burst.stop_sampling()
        final_bound = len(scenario.bound())
        final_allocated = allocated(scenario)
        print(
            f"\nfailover: leader {leader} killed at {killed_at:.1f}s with {bound_at_kill} bound; "
            f"{len(samples)} samples ({len(samples) / burst.elapsed():.1f} Hz), max allocated "
            f"{max(samples)} of {NOMINAL}; final bound {final_bound}, allocated {final_allocated}; "
            f"survivor filter calls {filter_calls(str(survivor.url)):.0f}"
        )
        assert len(samples) / burst.elapsed() >= 5
        over = [value for value in samples if value > NOMINAL]
        assert not over, f"{len(over)} over-commit instants, max {max(over)} of {NOMINAL}"
        assert final_bound == NOMINAL and final_allocated == NOMINAL
    finally:
        scenario.cleanup()


def reserved(url: str, cluster_queue: str) -> float:
    """What the extender's ledger holds for the ClusterQueue (/diagnostics/queues)."""
    queues = extender_get(url, "/diagnostics/queues")["clusterQueues"]
    return sum(
        float(row.get("reserved") or 0)
        for queue in queues
        if queue["name"] == cluster_queue
        for row in queue["resources"]
    )


def probe_filter(url: str, scenario: Scenario, queue: str) -> dict:
    """A filter call as a kube-scheduler would make it for a pod of `queue` (one with quota free)."""
    manifest = scenario.manifest(f"probe-{uuid.uuid4().hex[:6]}", "one-gpu", queue)
    manifest["metadata"]["uid"] = str(uuid.uuid4())
    return extender_post(url, "/filter", {"Pod": manifest, "NodeNames": list(scenario.nodes)})


def test_only_the_leading_scheduler_s_extender_reserves_after_the_leader_s_scheduler_dies(
    kueue_plane: ExtenderControlPlane,
    replicas: list[tuple[Component, Component]],
) -> None:
    name = f"lead-{uuid.uuid4().hex[:4]}"
    scenario = Scenario(kueue_plane.plane, str(replicas[0][0].url), name, kueue_plane.plane.create_namespace(name))
    scenario.scheduler_name = PROFILE
    try:
        flavor, queue = scenario.add_one_gpu_queue(2, 8, NOMINAL, wait=False)
        spare = scenario.add_queue(f"{name}-spare", [FlavorQuota(flavor, 2)])  # nobody's pods: quota free
        for extender, _ in replicas:
            scenario.url = str(extender.url)
            scenario.wait_extender_sees("one-gpu", queue, name)
            scenario.wait_extender_sees("one-gpu", spare, f"{name}-spare")

        burst = Burst(scenario, queue)
        leader = burst.leader(replicas)
        old_extender, old_scheduler = replicas[leader]
        new_extender = replicas[1 - leader][0]
        old_url = str(old_extender.url)
        old_scheduler.kill()  # its extender lives on
        killed_at = burst.elapsed()

        def refuses() -> str | None:
            error = probe_filter(old_url, scenario, spare).get("Error") or ""
            return error if "does not lead" in error else None

        refusal = wait_until(
            refuses, timeout=30, interval=0.2, message="the old leader's extender to see the Lease move"
        )
        told_at = burst.elapsed()
        # What it held for probes it answered while its scheduler still led (passes, rightly): nothing more after.
        held_then = reserved(old_url, f"{name}-spare")
        old_ledger = [reserved(old_url, name)]
        for _ in range(5):  # an old scheduler's last cycles: refused, nothing held for them
            assert refuses(), "the old leader's extender let a pod through after the Lease moved"
            old_ledger.append(reserved(old_url, name))
        burst.created()
        wait_until(lambda: len(scenario.bound()) >= NOMINAL, timeout=90, message="the new leader to fill the quota")
        time.sleep(3)  # let any over-admission show
        old_ledger.append(reserved(old_url, name))
        samples = burst.stop_sampling()
        final_bound = len(scenario.bound())
        final_allocated = allocated(scenario)
        print(
            f"\nfailover (scheduler only): leader {leader}'s scheduler killed at {killed_at:.1f}s, its extender "
            f"refused from {told_at:.1f}s ({refusal!r}); its ledger for the queue {old_ledger}; "
            f"{len(samples)} samples, max allocated {max(samples)} of {NOMINAL}; final bound {final_bound}, "
            f"allocated {final_allocated}; new leader's filter calls {filter_calls(str(new_extender.url)):.0f}"
        )
        assert reserved(old_url, f"{name}-spare") == held_then, "the old extender reserved after the Lease moved"
        assert all(b <= a for a, b in itertools.pairwise(old_ledger)), old_ledger
        assert filter_calls(str(new_extender.url)) > 0
        over = [value for value in samples if value > NOMINAL]
        assert not over, f"{len(over)} over-commit instants, max {max(over)} of {NOMINAL}"
        assert final_bound == NOMINAL and final_allocated == NOMINAL
    finally:
        scenario.cleanup()
