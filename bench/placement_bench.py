"""Placement quality: how much GPU work seeded streams of pods get onto a cluster, placed three ways, against the
exact offline bound.

Run: make bench-placement, or .venv/bin/python -m bench.placement_bench [--seeds 1 2 3 4 5]
     [--shapes partitioned mixed shared nodes] [--pods 300] [--modes drop wait] [--control-plane]

A stream: pods arrive one per tick, each asking for one shape (a MIG-like profile, a memory share, a number of
GPUs) drawn from the shape's mix, and leave a seeded lifetime after they were placed. `drop`: a pod no node
takes is refused and dropped; `wait`: it waits in a FIFO queue and is tried again whenever a pod left (as
kube-scheduler moves unschedulable pods back when a claim is deallocated), and its wait is counted.

Placed by (a) kube-scheduler alone, (b) with the extender's count-based device fit (the score before
docs/placement.md's, recomputed here from the same allocations: the share of the node's devices of the pod's
drivers in use once it lands), (c) with the extender's score (service.filter then service.prioritize). Which
devices a pod gets on a node is the allocator's first fit (decisions/devices, the port of upstream's
structured allocator, the answer the DynamicResources plugin would give); which node kube-scheduler picks is
modelled: its score plugins for a pod that requests no cpu or memory of its own amount to NodeResourcesFit
LeastAllocated over the non-zero defaults (100m cpu, 200Mi memory; pkg/scheduler/util GetNonzeroRequests)
on nodes of 64 cpu and 256Gi, truncated to integers per resource as the plugin does, plus the extender's score
times its weight (1) times MaxNodeScore / MaxExtenderPriority (10); ties go to a seeded random choice
(selectHost's reservoir sampling). (d) is the exact bound: the first arrival at which the live set (every pod
that arrived and has not left, as if all were placed) cannot be packed at all, GPUs repacked freely
(`Packer`: an exhaustive search over each GPU's or node's configurations, memoised).

Per stream: GPU memory (as requested) and pods live at the first refusal, pods placed, utilisation (live GPU
memory over capacity, averaged over the arrivals) and, in wait mode, mean wait in ticks; each as a ratio to (a)
and, at the first refusal, to (d). This runs the extender's decisions in-process, not the real control plane:
see docs/placement.md for what that leaves out. `--control-plane` (make bench-placement-real) places (a) and (c)
on the real one instead, drop mode only (bench/placement_control_plane.py).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import product
from typing import Any

from bench.loop_bench import PrefilledSource
from extender.decisions.devices.results import Allocation
from extender.service import ExtenderConfig, SchedulingService
from extender.state.core import parse_pod
from extender.state.store import ClusterStore
from testkit import builders as b
from testkit import placement as p

NAMESPACE = "bench"
NODE_CPU_MILLI, NODE_MEMORY_MI = 64_000, 256 * 1024
POD_CPU_MILLI, POD_MEMORY_MI = 100, 200  # kube-scheduler's non-zero defaults for a pod without requests
EXTENDER_WEIGHT = 1
MODES = ("a", "b", "c")


# --- cluster shapes ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One kind of pod of a shape: its request, the GPU memory it asks for (Gi) and its share of arrivals."""

    name: str
    request: dict[str, Any]
    memory_gi: int
    weight: float


@dataclass(frozen=True)
class Shape:
    name: str
    objects: Callable[[], list[dict[str, Any]]]
    kinds: tuple[Kind, ...]
    capacity_gi: int
    # one entry per bin (a GPU, or a node for pods of several GPUs): the configurations it can hold, as counts
    # of each kind (maximal ones suffice)
    bins: tuple[tuple[tuple[int, ...], ...], ...]
    lifetime: tuple[int, int]  # ticks, uniform


def _configs(limits: list[int], fits: Callable[[tuple[int, ...]], bool]) -> tuple[tuple[int, ...], ...]:
    """Every maximal count vector within `limits` that `fits`."""
    every = [c for c in product(*(range(n + 1) for n in limits)) if fits(c)]
    every_set = set(every)

    def maximal(c: tuple[int, ...]) -> bool:
        return not any(
            tuple(x + (i == k) for i, x in enumerate(c)) in every_set for k in range(len(c)) if c[k] < limits[k]
        )

    return tuple(c for c in every if maximal(c))


def _partition_configs(memory_gi: int, wanted: list[int]) -> tuple[tuple[int, ...], ...]:
    """A partitionable GPU's configurations for kinds asking for `wanted` Gi (0: this GPU cannot serve it):
    each kind takes the smallest profile with that much memory (the first fit, profiles listed small first)."""
    profiles = [(name, slices, memory_gi // divisor, count) for name, slices, divisor, count in p.PROFILES]
    chosen = []
    for gi in wanted:
        chosen.append(next(((s, m, n) for _, s, m, n in profiles if m >= gi), None))
    limits = [entry[2] if entry else 0 for entry in chosen]

    def fits(c: tuple[int, ...]) -> bool:
        slices = sum(k * entry[0] for k, entry in zip(c, chosen, strict=True) if entry)
        memory = sum(k * entry[1] for k, entry in zip(c, chosen, strict=True) if entry)
        return slices <= 7 and memory <= memory_gi

    return _configs(limits, fits)


def _eight_nodes_of_two_40gi(
    name: str,
    node_objects: Callable[[str, list[int]], list[dict[str, Any]]],
    kinds: tuple[Kind, ...],
    configs: tuple[tuple[int, ...], ...],
) -> Shape:
    """A shape of 8 nodes with two 40Gi GPUs each, built by `node_objects` (a testkit/placement.py node), every
    GPU one bin with `configs`; pods live 30 to 90 ticks."""
    return Shape(
        name,
        lambda: [obj for i in range(8) for obj in node_objects(f"node-{i}", [40, 40])],
        kinds,
        8 * 2 * 40,
        (configs,) * 16,
        (30, 90),
    )


def partitioned() -> Shape:
    kinds = tuple(
        Kind(profile, p.profile_request(profile), gi, weight)
        for profile, gi, weight in (("1g", 5, 0.45), ("2g", 10, 0.25), ("3g", 20, 0.15), ("whole", 40, 0.15))
    )
    return _eight_nodes_of_two_40gi("partitioned", p.partitioned_node, kinds, _partition_configs(40, [5, 10, 20, 40]))


def mixed() -> Shape:
    mix = ((5, 0.40), (10, 0.25), (20, 0.15), (40, 0.12), (80, 0.08))
    kinds = tuple(Kind(f"{gi}Gi", p.memory_at_least_request(gi), gi, weight) for gi, weight in mix)
    wanted = [gi for gi, _ in mix]
    small, big = _partition_configs(40, wanted), _partition_configs(80, wanted)
    return Shape(
        "mixed",
        lambda: [
            obj for i in range(8) for obj in p.partitioned_node(f"node-{i}", [40, 40] if i % 2 == 0 else [80, 80])
        ],
        kinds,
        8 * 40 + 8 * 80,
        (small,) * 8 + (big,) * 8,
        (30, 90),
    )


def shared() -> Shape:
    mix = ((5, 0.45), (10, 0.25), (20, 0.15), (40, 0.15))
    kinds = tuple(Kind(f"{gi}Gi", p.share_request(gi), gi, weight) for gi, weight in mix)
    configs = _configs([8, 4, 2, 1], lambda c: 5 * c[0] + 10 * c[1] + 20 * c[2] + 40 * c[3] <= 40)
    return _eight_nodes_of_two_40gi("shared", p.shared_node, kinds, configs)


def nodes_2_and_8() -> Shape:
    mix = ((1, 0.45), (2, 0.25), (4, 0.15), (8, 0.15))
    kinds = tuple(Kind(f"{n}gpu", b.exact_request("gpu", n), 80 * n, weight) for n, weight in mix)

    def node_configs(gpus: int) -> tuple[tuple[int, ...], ...]:
        return _configs(
            [gpus, gpus // 2, gpus // 4, gpus // 8], lambda c: c[0] + 2 * c[1] + 4 * c[2] + 8 * c[3] <= gpus
        )

    return Shape(
        "nodes",
        lambda: [
            obj for i in range(12) for obj in (p.plain_node(f"node-{i}", 8) if i < 4 else p.plain_node(f"node-{i}", 2))
        ],
        kinds,
        48 * 80,
        (node_configs(8),) * 4 + (node_configs(2),) * 8,
        (20, 60),
    )


SHAPES = {"partitioned": partitioned, "mixed": mixed, "shared": shared, "nodes": nodes_2_and_8}


# --- the exact bound ---------------------------------------------------------------------------------------------


class Packer:
    """Whether a multiset of pods (counts per kind) packs into the shape's bins, repacked freely: bins taken one
    at a time, each given one of its configurations (capped by what is left), memoised on (bin, what is left).
    Exhaustive, so exact; bins of one kind of configuration list are interchangeable, which the memo makes
    cheap."""

    def __init__(self, shape: Shape) -> None:
        self.bins = shape.bins

        @lru_cache(maxsize=2_000_000)
        def packs(index: int, left: tuple[int, ...]) -> bool:
            if not any(left):
                return True
            if index == len(self.bins):
                return False
            seen = set()
            for config in self.bins[index]:
                rest = tuple(max(0, n - c) for n, c in zip(left, config, strict=True))
                if rest in seen:
                    continue
                seen.add(rest)
                if packs(index + 1, rest):
                    return True
            return False

        self.packs = packs

    def fits(self, counts: tuple[int, ...]) -> bool:
        return self.packs(0, counts)


# --- streams -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    index: int
    kind: int
    lifetime: int


def stream(shape: Shape, pods: int, seed: int) -> list[Arrival]:
    rng = random.Random(seed)
    weights = [kind.weight for kind in shape.kinds]
    return [
        Arrival(i, rng.choices(range(len(shape.kinds)), weights)[0], rng.randint(*shape.lifetime)) for i in range(pods)
    ]


@dataclass
class Outcome:
    first_refusal_gi: int | None = None
    first_refusal_pods: int | None = None
    placed: int = 0
    utilisation: list[float] = field(default_factory=list)
    waits: list[int] = field(default_factory=list)


def bound(shape: Shape, arrivals: list[Arrival]) -> Outcome:
    """(d): the first arrival at which the live set cannot be packed, with every pod before it placed."""
    packer = Packer(shape)
    live: list[tuple[int, Arrival]] = []  # (leaves at, arrival)
    counts = [0] * len(shape.kinds)
    outcome = Outcome()
    for arrival in arrivals:
        for left in [entry for entry in live if entry[0] <= arrival.index]:
            live.remove(left)
            counts[left[1].kind] -= 1
        counts[arrival.kind] += 1
        if not packer.fits(tuple(counts)):
            outcome.first_refusal_gi = sum(shape.kinds[a.kind].memory_gi for _, a in live)
            outcome.first_refusal_pods = len(live)
            return outcome
        live.append((arrival.index + arrival.lifetime, arrival))
    return outcome


class Cluster:
    """The extender's service over the shape's objects; pods bound and released as watch events."""

    def __init__(self, shape: Shape) -> None:
        store = ClusterStore()
        for obj in [b.namespace(NAMESPACE), b.device_class(), *shape.objects()]:
            store.apply(obj["kind"], "ADDED", obj)
        store.set_synced(True)
        self.service = SchedulingService(PrefilledSource(), ExtenderConfig(), store=store)
        self.service.start()
        self.names = sorted(store.snapshot().nodes)
        self.pods_on = dict.fromkeys(self.names, 0)

    def arrive(self, arrival: Arrival, kind: Kind) -> dict[str, Any]:
        name = f"pod-{arrival.index}"
        claim = b.claim(f"{name}-gpu", NAMESPACE, [kind.request])
        self.service.store.apply("ResourceClaim", "ADDED", claim)
        pod = b.pod(name, NAMESPACE, claims={"gpu": f"{name}-gpu"})
        self.service.store.apply("Pod", "ADDED", pod)
        return pod

    def bind(self, pod: dict[str, Any], claim: dict[str, Any], allocation: Allocation, node: str) -> dict[str, Any]:
        results = []
        for chosen in allocation.claims[0].devices:
            result: dict[str, Any] = {
                "request": chosen.request,
                "driver": chosen.device.driver,
                "pool": chosen.device.pool,
                "device": chosen.device.name,
            }
            if chosen.shared:
                result["shareID"] = str(uuid.uuid5(uuid.NAMESPACE_URL, pod["metadata"]["name"]))
                result["consumedCapacity"] = {name: str(amount) for name, amount in chosen.consumed_capacity}
            results.append(result)
        allocated = {
            **claim,
            "status": {
                "allocation": {
                    "devices": {"results": results},
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    },
                },
                "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}],
            },
        }
        store = self.service.store
        store.apply("ResourceClaim", "MODIFIED", allocated)
        store.apply("Pod", "MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": node}})
        self.pods_on[node] += 1
        return allocated

    def drop(self, pod: dict[str, Any]) -> None:
        """A refused pod leaves without having held anything (drop mode)."""
        self.service.store.apply("Pod", "DELETED", pod)
        self.service.store.apply("ResourceClaim", "DELETED", _claim_of(pod))

    def release(self, pod: dict[str, Any], claim: dict[str, Any], node: str) -> None:
        store = self.service.store
        store.apply("Pod", "DELETED", pod)
        store.apply("ResourceClaim", "DELETED", claim)
        self.pods_on[node] -= 1


def in_tree_score(pods_on_node: int) -> int:
    """NodeResourcesFit LeastAllocated for pods without requests (the non-zero defaults), both resources."""
    cpu = (NODE_CPU_MILLI - (pods_on_node + 1) * POD_CPU_MILLI) * 100 // NODE_CPU_MILLI
    memory = (NODE_MEMORY_MI - (pods_on_node + 1) * POD_MEMORY_MI) * 100 // NODE_MEMORY_MI
    return (cpu + memory) // 2


def count_based_fit(cluster: Cluster, allocation: Allocation) -> int:
    """(b): the extender's total with the count-based device fit (weights 2/1/1, no quota, first subrequests)."""
    snapshot = cluster.service.snapshot()
    drivers = {chosen.device.driver for claim in allocation.claims for chosen in claim.devices}
    devices = snapshot.node_devices(allocation.node).devices
    total = sum(1 for d in devices if d.driver in drivers)
    in_use = sum(1 for d in devices if d.driver in drivers and d.key in snapshot.allocated)
    taken = sum(len(claim.devices) for claim in allocation.claims)
    share = min(1.0, (in_use + taken) / total) if total else 0.5
    return round(10 * (2 * share + 1 + 1) / 4)


def place(cluster: Cluster, mode: str, pod: dict[str, Any], rng: random.Random) -> tuple[str, Allocation] | None:
    parsed = parse_pod(pod)
    decision = cluster.service.filter(parsed, cluster.names)
    passed = list(decision.passed)
    if not passed:
        return None
    allocations = decision.verdicts.allocations
    if mode == "c":
        ranking = cluster.service.prioritize(parsed, passed)
        extender = {node: ranking.scores[node].total for node in passed}
    elif mode == "b":
        extender = {node: count_based_fit(cluster, allocations[node]) for node in passed}
    else:
        extender = dict.fromkeys(passed, 0)
    totals = {node: in_tree_score(cluster.pods_on[node]) + extender[node] * EXTENDER_WEIGHT * 10 for node in passed}
    best = max(totals.values())
    node = rng.choice([node for node in passed if totals[node] == best])
    return node, allocations[node]


def run(shape: Shape, arrivals: list[Arrival], mode: str, waiting: bool, seed: int) -> Outcome:
    cluster = Cluster(shape)
    rng = random.Random(seed * 7919 + 1)
    outcome = Outcome()
    live: list[tuple[int, dict[str, Any], dict[str, Any], str, Arrival]] = []  # leaves at, pod, claim, node
    queue: list[tuple[Arrival, dict[str, Any]]] = []
    live_gi = 0
    tick = 0
    pending = list(arrivals)
    last_tick = len(arrivals) + 10 * shape.lifetime[1]
    while (pending or (waiting and queue)) and tick < last_tick:
        leaving = [entry for entry in live if entry[0] <= tick]
        for entry in leaving:
            live.remove(entry)
            cluster.release(entry[1], entry[2], entry[3])
            live_gi -= shape.kinds[entry[4].kind].memory_gi
        tries: list[tuple[Arrival, dict[str, Any]]] = []
        if waiting and leaving:
            tries, queue = queue, []
        if pending and pending[0].index == tick:
            arrival = pending.pop(0)
            tries.append((arrival, cluster.arrive(arrival, shape.kinds[arrival.kind])))
        for arrival, pod in tries:
            placed = place(cluster, mode, pod, rng)
            if placed is None:
                if outcome.first_refusal_gi is None:
                    outcome.first_refusal_gi, outcome.first_refusal_pods = live_gi, len(live)
                if waiting:
                    queue.append((arrival, pod))
                else:
                    cluster.drop(pod)
                continue
            node, allocation = placed
            claim = _claim_of(pod)
            allocated = cluster.bind(pod, claim, allocation, node)
            live.append((tick + arrival.lifetime, pod, allocated, node, arrival))
            live_gi += shape.kinds[arrival.kind].memory_gi
            outcome.placed += 1
            outcome.waits.append(tick - arrival.index)
        if tick < len(arrivals):
            outcome.utilisation.append(live_gi / shape.capacity_gi)
        tick += 1
    return outcome


def _claim_of(pod: dict[str, Any]) -> dict[str, Any]:
    name = pod["metadata"]["name"]
    return b.claim(f"{name}-gpu", NAMESPACE, [{"name": "gpu", "exactly": {"deviceClassName": b.GPU_CLASS}}])


# --- the tables --------------------------------------------------------------------------------------------------


def _ratio(value: float | None, against: float | None) -> str:
    if value is None or not against:
        return "-"
    return f"{value / against:.3f}"


def report_stream(
    shape: Shape,
    seed: int,
    waiting: bool,
    outcomes: dict[str, Outcome],
    limit: Outcome,
    modes: tuple[str, ...] = MODES,
) -> list[str]:
    rows = []
    a = outcomes["a"]
    for mode in modes:
        o = outcomes[mode]
        util = statistics.fmean(o.utilisation) if o.utilisation else 0.0
        util_a = statistics.fmean(a.utilisation) if a.utilisation else 0.0
        wait = statistics.fmean(o.waits) if o.waits else 0.0
        wait_a = statistics.fmean(a.waits) if a.waits else 0.0
        rows.append(
            f"{shape.name:<12}{seed:>5} {'wait' if waiting else 'drop':<5}{mode:>3}"
            f"{o.first_refusal_gi if o.first_refusal_gi is not None else '-':>8}"
            f"{o.first_refusal_pods if o.first_refusal_pods is not None else '-':>6}"
            f"{_ratio(o.first_refusal_gi, a.first_refusal_gi):>8}"
            f"{_ratio(o.first_refusal_gi, limit.first_refusal_gi):>8}"
            f"{o.placed:>7}{_ratio(o.placed, a.placed):>8}{util:>7.3f}{_ratio(util, util_a):>8}"
            + (f"{wait:>8.1f}{_ratio(wait, wait_a):>8}" if waiting else "")
        )
    return rows


HEADER = (
    f"{'shape':<12}{'seed':>5} {'queue':<5}{'by':>3}{'GiAt1st':>8}{'pods':>6}{'/(a)':>8}{'/(d)':>8}"
    f"{'placed':>7}{'/(a)':>8}{'util':>7}{'/(a)':>8}{'wait':>8}{'/(a)':>8}"
)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", help="default 1 2 3 4 5; with --control-plane 1 2")
    parser.add_argument(
        "--shapes", nargs="+", choices=sorted(SHAPES), help="default all; with --control-plane partitioned"
    )
    parser.add_argument("--pods", type=int, help="default 300; with --control-plane 120")
    parser.add_argument(
        "--modes", nargs="+", choices=["drop", "wait"], help="default drop wait; --control-plane: drop only"
    )
    parser.add_argument(
        "--control-plane",
        action="store_true",
        help="place (a) and (c) on a real control plane from the test kit (kube-scheduler v1.37.2 allocating, "
        "our extender served over HTTP) instead of in-process; (b) is not run there",
    )
    parser.add_argument(
        "--settle", type=float, default=0.3, help="--control-plane: seconds after departures before the next pod"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="--control-plane: seconds a pod may take to be decided"
    )
    args = parser.parse_args()
    real = args.control_plane
    args.seeds = args.seeds or ([1, 2] if real else [1, 2, 3, 4, 5])
    args.shapes = args.shapes or (["partitioned"] if real else list(SHAPES))
    args.pods = args.pods or (120 if real else 300)
    args.modes = args.modes or (["drop"] if real else ["drop", "wait"])
    if real and args.modes != ["drop"]:
        parser.error("--control-plane runs drop mode only")
    return args


def main() -> None:
    args = arguments()
    if args.control_plane:
        from bench.placement_control_plane import main_control_plane

        main_control_plane(args)
        return
    print(HEADER)
    summary: dict[str, list[tuple[float, float, float]]] = {}
    started = time.perf_counter()
    for shape_name in args.shapes:
        shape = SHAPES[shape_name]()
        for seed in args.seeds:
            arrivals = stream(shape, args.pods, seed)
            limit = bound(shape, arrivals)
            print(
                f"{shape.name:<12}{seed:>5} {'':<5}{'d':>3}"
                f"{limit.first_refusal_gi if limit.first_refusal_gi is not None else '-':>8}"
                f"{limit.first_refusal_pods if limit.first_refusal_pods is not None else '-':>6}",
                flush=True,
            )
            for queue_mode in args.modes:
                waiting = queue_mode == "wait"
                outcomes = {mode: run(shape, arrivals, mode, waiting, seed) for mode in MODES}
                for row in report_stream(shape, seed, waiting, outcomes, limit):
                    print(row, flush=True)
                if not waiting and limit.first_refusal_gi:
                    summary.setdefault(shape.name, []).append(
                        tuple(  # type: ignore[arg-type]
                            (outcomes[m].first_refusal_gi or 0) / limit.first_refusal_gi for m in MODES
                        )
                    )
    print(
        f"\nfirst refusal, GPU memory / bound (d), drop mode; median over seeds ({time.perf_counter() - started:.0f} s)"
    )
    for name, rows in summary.items():
        medians = [statistics.median(row[i] for row in rows) for i in range(3)]
        worst_c_minus_b = min(row[2] - row[1] for row in rows)
        below = sum(row[2] < row[1] for row in rows)
        # share of (b)'s gap to the bound that (c) closes, over the streams where (b) left one
        closed = [(row[2] - row[1]) / (1 - row[1]) for row in rows if row[1] < 1]
        closed_text = f"{statistics.median(closed):.2f} over {len(closed)}" if closed else "no gap"
        print(
            f"{name:<12} (a) {medians[0]:.3f}  (b) {medians[1]:.3f}  (c) {medians[2]:.3f}  "
            f"(c)-(b) worst {worst_c_minus_b:+.3f}, (c) < (b) in {below} of {len(rows)}; "
            f"(b)'s gap closed by (c): median {closed_text}"
        )
    print("\nfirst refusal, GPU memory / bound (d), drop mode; mean and worst over seeds; (c) against (a) per stream")
    for name, rows in summary.items():
        means = [statistics.fmean(row[i] for row in rows) for i in range(3)]
        worst = [min(row[i] for row in rows) for i in range(3)]
        below_a = sum(row[2] < row[0] for row in rows)
        print(
            f"{name:<12} mean (a) {means[0]:.3f} (b) {means[1]:.3f} (c) {means[2]:.3f}  "
            f"worst (a) {worst[0]:.3f} (b) {worst[1]:.3f} (c) {worst[2]:.3f}  "
            f"(c)-(a) worst {min(row[2] - row[0] for row in rows):+.3f}, (c) < (a) in {below_a} of {len(rows)}"
        )


if __name__ == "__main__":
    main()
