"""The all-or-nothing unit a gang member belongs to: its PodGroup, or the tree of CompositePodGroups above it.

With CompositePodGroup (alpha in 1.37, scheduling.k8s.io/v1alpha3) kube-scheduler schedules a composite of gang
policy all or nothing across its tree (pkg/scheduler/schedule_one_podgroup.go
compositePodGroupSchedulingAlgorithm, recursively and greedily): at least minGroupCount children, each by its own
policy (a PodGroup by its minCount, a composite by its minGroupCount), or nothing of the tree. Children name their
parent in spec.parentCompositePodGroupName; a composite of basic policy schedules its children each on its own,
so the tree a member answers to ends below the first basic composite. The service keeps one attempt, and one
hold, per such tree (keyed by its root), and decides each member for the whole tree (decisions/gang/quota.py
TreeLevel, ChildNeed).
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.decisions.gang.quota import ChildNeed, TreeLevel
from extender.state.core import Pod
from extender.state.podgroups.podgroup import CompositePodGroup, PodGroup
from extender.state.snapshot import ClusterSnapshot

COMPOSITE_PREFIX = "composite:"  # an attempt key naming a CompositePodGroup ("composite:<namespace>/<name>")


@dataclass(frozen=True, slots=True)
class GangTree:
    """The unit of one attempt: its key (the PodGroup's, or "composite:" and the root composite's), the PodGroups
    whose members it holds, and how many members placed make it whole (the cheapest way, by count)."""

    key: str
    leaves: tuple[str, ...]
    min_members: int

    @property
    def composite(self) -> bool:
        return self.key.startswith(COMPOSITE_PREFIX)

    @property
    def root(self) -> str:
        """The key of the group or composite at the root of the tree (namespace/name)."""
        return self.key.removeprefix(COMPOSITE_PREFIX)


def _placed(pod: Pod) -> bool:
    return not pod.is_terminal and bool(pod.node_name or pod.nominated_node_name)


def _children(
    snapshot: ClusterSnapshot, composite: CompositePodGroup
) -> tuple[list[PodGroup], list[CompositePodGroup]]:
    """The PodGroups and composites naming `composite` as their parent. A scan of the view's groups: PodGroups are
    few next to the pods and nodes a verb looks at. In key order."""
    key = composite.key
    groups = sorted((group for group in snapshot.pod_groups.values() if group.parent_key == key), key=_by_key)
    composites = sorted((child for child in snapshot.composite_groups.values() if child.parent_key == key), key=_by_key)
    return groups, composites


def _by_key(group: PodGroup | CompositePodGroup) -> str:
    """Children in key order, the order every tree decision walks them in (the view's maps keep none)."""
    return group.key


def _gang_parent(snapshot: ClusterSnapshot, parent_key: str) -> CompositePodGroup | None:
    parent = snapshot.composite_groups.get(parent_key) if parent_key else None
    return parent if parent is not None and parent.is_gang else None


def tree_of(snapshot: ClusterSnapshot, group: PodGroup, composites: bool) -> GangTree:
    """The attempt unit of a member of `group`: the group itself, or (with `composites`) the topmost composite
    of gang policy above it, through composites of gang policy only."""
    root: CompositePodGroup | None = None
    parent = _gang_parent(snapshot, group.parent_key) if composites else None
    while parent is not None:
        root = parent
        parent = _gang_parent(snapshot, parent.parent_key)
    if root is None:
        return GangTree(group.key, (group.key,), group.min_count)
    leaves: list[str] = []
    minimum = _collect(snapshot, root, leaves)
    return GangTree(f"{COMPOSITE_PREFIX}{root.key}", tuple(leaves), minimum)


def _collect(snapshot: ClusterSnapshot, composite: CompositePodGroup, leaves: list[str]) -> int:
    """Add the PodGroups under `composite` to `leaves`; the fewest members that make it whole."""
    groups, composites = _children(snapshot, composite)
    sizes = [group.min_count for group in groups]
    leaves.extend(group.key for group in groups)
    sizes += [_collect(snapshot, child, leaves) for child in composites]
    sizes.sort()
    return sum(sizes[: composite.min_group_count])


def composite_of_key(snapshot: ClusterSnapshot, key: str) -> CompositePodGroup | None:
    if not key.startswith(COMPOSITE_PREFIX):
        return None
    return snapshot.composite_groups.get(GangTree(key, (), 0).root)


def tree_levels(snapshot: ClusterSnapshot, group: PodGroup, pod: Pod, group_claims: bool) -> tuple[TreeLevel, ...]:
    """What the composites above `group` need besides the child the pod is in, nearest first, up to the last of
    gang policy."""
    levels: list[TreeLevel] = []
    on_path = group.key
    parent = _gang_parent(snapshot, group.parent_key)
    while parent is not None:
        groups, composites = _children(snapshot, parent)
        siblings = [_leaf_need(snapshot, child, pod, group_claims) for child in groups if child.key != on_path]
        siblings += [
            _composite_need(snapshot, child, pod, group_claims)
            for child in composites
            if f"{COMPOSITE_PREFIX}{child.key}" != on_path
        ]
        complete = sum(1 for sibling in siblings if _complete(sibling))
        needed = max(0, parent.min_group_count - 1 - complete)
        open_siblings = tuple(sibling for sibling in siblings if not _complete(sibling))
        levels.append(TreeLevel(parent.key, needed, open_siblings))
        on_path = f"{COMPOSITE_PREFIX}{parent.key}"
        parent = _gang_parent(snapshot, parent.parent_key)
    return tuple(levels)


def _complete(child: ChildNeed) -> bool:
    return (child.groups_needed if child.composite else child.needed) == 0


def _leaf_need(snapshot: ClusterSnapshot, group: PodGroup, pod: Pod, group_claims: bool) -> ChildNeed:
    members = [member for member in snapshot.members_of(group.key) if not member.is_terminal and member.uid != pod.uid]
    placed = sum(1 for member in members if _placed(member))
    pending = tuple(member for member in members if not _placed(member))
    needed = max(0, group.min_count - placed)
    return ChildNeed(group.key, needed, pending, group.claims if group_claims else ())


def _composite_need(snapshot: ClusterSnapshot, composite: CompositePodGroup, pod: Pod, group_claims: bool) -> ChildNeed:
    groups, composites = _children(snapshot, composite)
    children = [_leaf_need(snapshot, child, pod, group_claims) for child in groups]
    children += [_composite_need(snapshot, child, pod, group_claims) for child in composites]
    wanted = composite.min_group_count if composite.is_gang else len(children)
    complete = sum(1 for child in children if _complete(child))
    return ChildNeed(
        f"{COMPOSITE_PREFIX}{composite.key}",
        composite=True,
        groups_needed=max(0, wanted - complete),
        children=tuple(child for child in children if not _complete(child)),
    )
