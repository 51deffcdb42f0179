"""`kubectl dra-quota` (the ``kubectl-dra_quota`` console script) against the real control plane.

The extender control plane's kube-scheduler calls our extender; a pod that exceeds its ClusterQueue's quota stays
Pending with our reason. The plugin is then run as kubectl would run it (a subprocess, kubeconfig from
KUBECONFIG): there is no in-cluster extender behind the diagnostics Service (no Service at first, then a Service
with no endpoints: no kubelet runs pods here), so it says so on stderr and computes the answer from a live read
of the cluster; its table must name the quota reason, and its numbers must be those of the running extender.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from extender.commands.outcomes import EXIT_REFUSED
from testkit import builders as b
from testkit.control_plane import wait_until
from tests.e2e.scenarios import (  # the scenario fixtures and helpers, shared
    GPU,
    QUOTA_EXHAUSTED,
    SCHEDULE_TIMEOUT,
    FlavorQuota,
    Scenario,
    extender_get,
    kueue_plane,  # noqa: F401 - a fixture
    queue_rows,
    scenario,  # noqa: F401 - a fixture
)

pytestmark = pytest.mark.e2e

PLUGIN = Path(sys.executable).parent / "kubectl-dra_quota"
MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def kubectl_dra_quota(kubeconfig: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run([str(PLUGIN), *argv], capture_output=True, text=True, timeout=120, env=env, check=False)


def test_plugin_explains_a_pending_pod_with_the_quota_reason(scenario: Scenario, tmp_path: Path) -> None:  # noqa: F811
    (node,) = scenario.add_nodes("node", 1, gpus=4)
    flavor = scenario.add_flavor(f"{scenario.name}-gpus")
    queue = scenario.add_queue(scenario.name, [FlavorQuota(flavor, 2)])
    scenario.add_template("two-gpus", [b.exact_request("gpu", 2)])
    scenario.wait_extender_sees("two-gpus", queue, scenario.name)
    scenario.create_pod("first", "two-gpus", queue)
    assert scenario.wait_bound("first") == node
    scenario.create_pod("second", "two-gpus", queue)
    wait_until(
        lambda: any(QUOTA_EXHAUSTED in m for m in scenario.failed_scheduling().get("second", [])),
        timeout=SCHEDULE_TIMEOUT,
        message="the second pod to be refused for quota",
    )
    # a kubeconfig whose current context names the scenario's namespace, as `kubectl config set-context` would
    config = yaml.safe_load(Path(scenario.plane.kubeconfig).read_text(encoding="utf-8"))
    context = config["contexts"][0]
    config["contexts"].append({"name": "scenario", "context": {**context["context"], "namespace": scenario.namespace}})
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config), encoding="utf-8")

    # explain, no Service yet: the API server answers 404, the plugin computes from a live read of the cluster
    result = kubectl_dra_quota(kubeconfig, "explain", "-n", scenario.namespace, "second")
    assert result.returncode == 0, result.stderr
    assert "note: service kube-system/dra-quota-scheduler-metrics:9090: HTTP 404" in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"Pod {scenario.namespace}/second  strategy=MostAllocated"
    assert lines[1].startswith(f"ClusterQueue {scenario.name}  flavor ")
    assert lines[2].startswith("0 node(s) pass, ")  # other scenarios' nodes fail by nodeSelector
    (row,) = [line for line in lines if line.startswith("-") and node in line]
    assert "fail" in row and f"ClusterQueue {scenario.name} {QUOTA_EXHAUSTED} for {GPU} in flavor {flavor}" in row

    # the same pod through --context (namespace from the context), as JSON, equals the running extender's answer
    result = kubectl_dra_quota(kubeconfig, "--context", "scenario", "explain", "second", "-o", "json")
    assert result.returncode == 0, result.stderr
    local = json.loads(result.stdout)
    assert local["pod"] == f"{scenario.namespace}/second" and local["passed"] == 0
    (verdict,) = [v for v in local["nodes"] if v["node"] == node]
    assert QUOTA_EXHAUSTED in (verdict.get("detail") or verdict["reason"]), verdict
    result = kubectl_dra_quota(kubeconfig, "--server", scenario.url, "explain", "-n", scenario.namespace, "second")
    assert result.returncode == 0 and result.stderr == "", result.stderr  # the pod read from the cluster
    remote = kubectl_dra_quota(
        kubeconfig, "--server", scenario.url, "-o", "json", "explain", "second", "--context=scenario"
    )
    assert remote.returncode == 0, remote.stderr
    running = json.loads(remote.stdout)
    assert {v["node"]: (v["passed"], v["reason"]) for v in local["nodes"]} == {
        v["node"]: (v["passed"], v["reason"]) for v in running["nodes"]
    }

    # queues: with a Service but no endpoints (503), again computed locally; usage 2 of 2, as the extender says
    scenario.plane.apply_manifest(MANIFESTS / "service.yaml")
    try:
        result = kubectl_dra_quota(kubeconfig, "queues", "-o", "json")
        assert result.returncode == 0, result.stderr
        assert "HTTP 503" in result.stderr, result.stderr
        (queue_report,) = [q for q in json.loads(result.stdout)["clusterQueues"] if q["name"] == scenario.name]
        (row_json,) = queue_report["resources"]
        assert (row_json["nominal"], row_json["usage"], row_json["available"]) == (2, 2, 0)
        assert queue_rows(scenario.url, scenario.name)[flavor]["usage"] == 2
        table = kubectl_dra_quota(kubeconfig, "queues", "--local").stdout
        (line,) = [line for line in table.splitlines() if line.startswith(scenario.name + " ")]
        assert line.split()[1:6] == ["-", flavor, GPU, "2", "2"]
    finally:
        scenario.plane.core.delete_namespaced_service("dra-quota-scheduler-metrics", "kube-system")

    # node: the first pod's claim holds two of the four devices
    result = kubectl_dra_quota(kubeconfig, "--local", "node", node, "-o", "yaml")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    report = yaml.safe_load(result.stdout)
    assert (report["totalDevices"], report["freeDevices"]) == (4, 2)
    assert report == extender_get(scenario.url, f"/diagnostics/nodes/{node}")
    # errors: exit 5 (the API server answered no, docs/cli.md), one line on stderr, nothing on stdout
    result = kubectl_dra_quota(kubeconfig, "explain", "-n", scenario.namespace, "no-such-pod")
    assert (result.returncode, result.stdout) == (EXIT_REFUSED, "")
    assert result.stderr == f'error: pods "no-such-pod" not found in namespace "{scenario.namespace}"\n'
