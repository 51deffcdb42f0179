"""Kueue's CRDs served at another version while the extender runs, on the real API server: the extender follows
(rediscovers on the watches' 404s and relists at the version served) and answers the verbs again without a
restart, quota still enforced.

The CRDs (the release's, conversion strategy None here) serve v1beta1 and v1beta2, v1beta2 stored. The test
stops serving v1beta2 (the extender moves to v1beta1), then serves only v1beta2 again (a Kueue upgrade: the
extender moves back), then restores both; the extender process is the same one throughout. The session's other
modules share this extender and find it watching v1beta2 as before.
"""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import pytest

from testkit.control_plane import wait_until
from tests.e2e.scenarios import KUEUE_GROUP, QUOTA_EXHAUSTED, SYNC_TIMEOUT, Scenario, kueue_plane, scenario

__all__ = ["kueue_plane", "scenario"]  # fixtures used by this module's tests

pytestmark = pytest.mark.e2e

PLURALS = ("clusterqueues", "cohorts", "localqueues", "resourceflavors", "workloads")


def crd_names() -> list[str]:
    return [f"{plural}.{KUEUE_GROUP}" for plural in PLURALS]


def serve(scn: Scenario, served: dict[str, bool]) -> None:
    """Set which versions every Kueue CRD serves (the storage version stays v1beta2)."""
    for name in crd_names():
        crd = scn.plane.read_crd(name)
        for version in crd["spec"]["versions"]:
            version["served"] = served[version["name"]]
        scn.plane.apiextensions.replace_custom_resource_definition(name, crd, _preload_content=False).read()


def api_changes(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    pattern = re.compile(r'^dra_extender_watch_api_changes_total\{resource="([a-z]+)"\} ([0-9.e+]+)$', re.M)
    return {resource: float(value) for resource, value in pattern.findall(text)}


def ready(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
            body: dict[str, Any] = json.loads(response.read())
    except OSError:
        return None
    return body if body.get("ready") else None


def moved(scn: Scenario, times: float) -> None:
    """Every Kueue collection has moved `times` times in all, and the view is ready again."""
    wait_until(
        lambda: all(api_changes(scn.url).get(plural, 0.0) >= times for plural in PLURALS) and ready(scn.url),
        timeout=SYNC_TIMEOUT,
        message=f"the extender to follow the CRDs' served versions ({times:g})",
    )


def test_kueue_served_at_another_version_keeps_the_verbs_answered_without_a_restart(scenario: Scenario) -> None:
    _, queue = scenario.add_one_gpu_queue(1, 2, 1)
    extender = scenario.plane.components["extender"]
    pid = extender.process.pid
    before = api_changes(scenario.url)
    base = min((before.get(plural, 0.0) for plural in PLURALS), default=0.0)
    try:
        serve(scenario, {"v1beta1": True, "v1beta2": False})
        moved(scenario, base + 1)
        # verbs answered at v1beta1: the first pod binds, the second is over the 1-GPU quota
        scenario.create_pod("at-v1beta1", "one-gpu", queue)
        scenario.wait_bound("at-v1beta1")
        # Kueue upgraded: only v1beta2 served
        serve(scenario, {"v1beta1": False, "v1beta2": True})
        moved(scenario, base + 2)
        # answered at v1beta2 with the quota's verdict (not "not synced"): the queue's one GPU is taken
        scenario.create_pod("over-quota", "one-gpu", queue)
        wait_until(
            lambda: any(QUOTA_EXHAUSTED in m for m in scenario.failed_scheduling().get("over-quota", [])),
            timeout=SYNC_TIMEOUT,
            message="the pod over quota to be refused for quota",
        )
        assert "over-quota" not in scenario.bound()
        scenario.plane.core.delete_namespaced_pod("at-v1beta1", scenario.namespace, grace_period_seconds=0)
        scenario.wait_bound("over-quota")
    finally:
        serve(scenario, {"v1beta1": True, "v1beta2": True})
    assert extender.process.pid == pid and extender.process.poll() is None, "the extender was restarted"
    assert ready(scenario.url)
