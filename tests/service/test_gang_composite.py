"""A CompositePodGroup's tree scheduled all or nothing (gate CompositePodGroup, alpha in 1.37): kube-scheduler's
compositePodGroupSchedulingAlgorithm (pkg/scheduler/schedule_one_podgroup.go) schedules at least minGroupCount
children, each by its own policy, or nothing of the tree. Asked about one member, the extender decides for the
tree, holds one reservation for it, and lets it go as a PodGroup's."""

from __future__ import annotations

from typing import Any

from extender.service.config import parse_config
from extender.service.gang_attempts import hold_id
from extender.state.core import parse_pod
from testkit import builders as b
from testkit.scenarios import RESOURCE, gpu_pod
from tests.service.test_gang_quota import Clock
from tests.support.quota import base_objects
from tests.support.scenarios import engine_for

COMPOSITES_ON = parse_config(
    {
        "features": {
            "GenericWorkload": True,
            "DRAWorkloadResourceClaims": True,
            "TopologyAwareWorkloadScheduling": True,
            "CompositePodGroup": True,
        }
    }
)
OD = ("team-a", "on-demand", RESOURCE)
TREE_HOLD = hold_id("composite:team-a/job")


def tree(quota: int, *, children: int = 3, min_groups: int = 2, members: int = 2, config: Any = COMPOSITES_ON) -> Any:
    """A composite `job` (gang, minGroupCount `min_groups`) of `children` PodGroups (gang, minCount `members`),
    each of `members` pods of 2 GPUs, in a queue of `quota`."""
    objects = [*base_objects({"on-demand": {"nominal": quota}}, od_nodes=4, spot_nodes=0)]
    objects.append(b.composite_pod_group("job", "team-a", min_group_count=min_groups))
    for child in range(children):
        objects.append(b.pod_group(f"g{child}", "team-a", min_count=members, parent="job"))
        objects += [gpu_pod(f"g{child}-{i}", pod_group=f"g{child}") for i in range(members)]
    return engine_for(objects, config, Clock())


def filter_(engine: Any, name: str, group: str) -> Any:
    pod = parse_pod(gpu_pod(name, pod_group=group))
    return engine.filter(pod, sorted(engine.snapshot().nodes))


def test_a_tree_that_fits_is_held_whole_for_its_attempt() -> None:
    engine = tree(8)  # 2 of 3 children x 2 pods x 2 GPUs = 8
    decision = filter_(engine, "g0-0", "g0")
    assert decision.passed and decision.gang is not None
    assert engine.reservations.get(TREE_HOLD).charges == {OD: 8}
    assert engine.reservations.totals() == {OD: 8}
    for name, group in (("g0-1", "g0"), ("g1-0", "g1"), ("g1-1", "g1")):
        assert filter_(engine, name, group).passed
        assert engine.reservations.totals() == {OD: 8}  # one hold for the tree, never added up
    assert not engine.filter(parse_pod(gpu_pod("single")), sorted(engine.snapshot().nodes)).passed
    report = engine.gang_status("team-a", "g1")
    assert report.tree is not None and report.tree.leaves == ("team-a/g0", "team-a/g1", "team-a/g2")
    assert report.tree.min_members == 4 and report.hold == {OD: 8}


def test_a_tree_of_which_only_one_child_fits_holds_nothing() -> None:
    engine = tree(6)  # one child (4) fits, minGroupCount 2 needs 8
    decision = filter_(engine, "g0-0", "g0")
    assert decision.passed == [] and engine.reservations.totals() == {}
    reason = decision.failures["on-demand-0"].reason
    assert "CompositePodGroup team-a/job" in reason and "does not fit its queue as a whole" in reason
    assert engine.filter(parse_pod(gpu_pod("single")), sorted(engine.snapshot().nodes)).passed


def test_children_short_of_members_cannot_complete_the_tree() -> None:
    """Two of three children are short of members: the tree needs two children, only the pod's can be completed."""
    objects = [*base_objects({"on-demand": {"nominal": 16}}, od_nodes=4, spot_nodes=0)]
    objects.append(b.composite_pod_group("job", "team-a", min_group_count=2))
    for child, count in (("g0", 2), ("g1", 1), ("g2", 1)):
        objects.append(b.pod_group(child, "team-a", min_count=2, parent="job"))
        objects += [gpu_pod(f"{child}-{i}", pod_group=child) for i in range(count)]
    engine = engine_for(objects, COMPOSITES_ON, Clock())
    decision = filter_(engine, "g0-0", "g0")
    assert decision.passed == [] and engine.reservations.totals() == {}
    assert "cannot be completed" in decision.failures["on-demand-0"].reason


def test_the_tree_is_won_when_its_cheapest_way_is_placed_and_lost_as_a_podgroup() -> None:
    engine = tree(8)
    for name, group in (("g0-0", "g0"), ("g0-1", "g0"), ("g1-0", "g1"), ("g1-1", "g1")):
        assert filter_(engine, name, group).passed
    for index, (name, group) in enumerate((("g0-0", "g0"), ("g0-1", "g0"), ("g1-0", "g1"), ("g1-1", "g1"))):
        engine.store.apply("Pod", "MODIFIED", gpu_pod(name, pod_group=group, nominated_node=f"on-demand-{index}"))
    engine.quota_view()
    assert engine.reservations.totals() == {}
    assert engine.gangs.view("composite:team-a/job", 0).outcome == "won"
    lost = tree(8)
    assert filter_(lost, "g0-0", "g0").passed
    failed = b.pod_group(
        "g0",
        "team-a",
        min_count=2,
        parent="job",
        conditions=[{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}],
    )
    lost.store.apply("PodGroup", "MODIFIED", failed)
    lost.quota_view()
    assert lost.reservations.totals() == {}


def test_with_the_gate_off_each_child_is_its_own_gang() -> None:
    config = parse_config({"features": {"GenericWorkload": True, "DRAWorkloadResourceClaims": True}})
    engine = tree(6, config=config)
    decision = filter_(engine, "g0-0", "g0")
    assert decision.passed and engine.reservations.get(hold_id("team-a/g0")).charges == {OD: 4}


def test_the_tree_shows_in_the_podgroup_report_the_web_page_and_the_plugin() -> None:
    from extender.kubectl_plugin.podgroup_rendering import render_podgroup
    from extender.transport.app import create_app

    engine = tree(8)
    assert filter_(engine, "g0-0", "g0").passed
    client = create_app(engine).test_client()
    report = client.get("/diagnostics/podgroups/team-a/g1").get_json()
    assert report["tree"] == {
        "root": "team-a/job",
        "podGroups": ["team-a/g0", "team-a/g1", "team-a/g2"],
        "minMembers": 4,
    }
    assert report["hold"][0]["amount"] == 8 and report["attempt"]["placements"][0]["members"] == 1
    page = client.get("/ui/podgroups/team-a/g1").get_data(as_text=True)
    assert "CompositePodGroup team-a/job, all or nothing" in page and 'href="/ui/podgroups/team-a/g2"' in page
    assert "Scheduled with   CompositePodGroup team-a/job, all or nothing" in render_podgroup(report)


def test_children_beyond_min_group_count_are_refused_when_the_queue_cannot_take_them() -> None:
    """kube-scheduler places as many children of a composite as fit, greedily: a third child in a queue that
    holds two is refused, and the tree's hold covers the two."""
    engine = tree(8)
    for name, group in (("g0-0", "g0"), ("g0-1", "g0"), ("g1-0", "g1"), ("g1-1", "g1")):
        assert filter_(engine, name, group).passed
    for name in ("g2-0", "g2-1"):
        assert filter_(engine, name, "g2").passed == []
        assert engine.reservations.totals() == {OD: 8}
