"""Placement policies over bench/trace_model.py's cluster: the paper's six (each a score plugin of its simulator,
read from its source and written here anew), kube-scheduler's in-tree scoring alone, and kube-scheduler with the
extender's prioritize at the shipped weight.

Every policy scores the nodes that pass the filter; the highest total wins and ties go to a seeded random choice
(kube-scheduler's selectHost keeps a uniformly random one of the best). The GPUs a task gets on the chosen node:
the paper's policies choose as their simulator does (`best`: a share on the fitting GPU with least left; Random:
a random fitting GPU; FGD: the GPU whose fragmentation grows least); under kube-scheduler the DynamicResources
plugin's allocator decides, which takes the first device with room (trace_model.first_fit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bench.trace_model import (
    MAX_SPEC_CPU,
    MAX_SPEC_GPU,
    MILLI,
    NONZERO_CPU,
    NONZERO_MEMORY_MIB,
    BoolArray,
    Cluster,
    FloatArray,
    Fragmentation,
    IntArray,
    Shape,
    ShapeCache,
    TracePod,
    best_fit_gpu,
    fgd_scorer,
    first_fit,
    shape_of,
)
from extender.decisions import scoring

EXTENDER_WEIGHT = 1  # config/kube-scheduler-config.yaml: the extender's weight
EXTENDER_SCALE = 10  # MaxNodeScore / MaxExtenderPriority: kube-scheduler scales an extender's 0..10 to 0..100


class Policy:
    """Chooses a node among `feasible` (indices) for the task and the GPUs it takes there."""

    name = ""

    def choose(
        self, cluster: Cluster, pod: TracePod, feasible: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]]:
        raise NotImplementedError


def pick_best(scores: FloatArray, feasible: IntArray, rng: np.random.Generator | None) -> int:
    """The feasible node with the highest score; of those tied a uniformly random one (kube-scheduler's
    selectHost) or, without `rng`, the first by name (the paper's simulator changed selectHost to that, for
    reproducible runs; its nodes are listed by name, Cluster keeps them so)."""
    best = np.flatnonzero(scores == scores.max())
    if best.size == 1 or rng is None:
        return int(feasible[best[0]])
    return int(feasible[best[int(rng.integers(best.size))]])


class ScorePolicy(Policy):
    """A policy made of a score over the feasible nodes and a GPU choice on the node chosen; ties to the first
    node by name (the paper's simulator) unless `random_ties` (kube-scheduler)."""

    random_ties = False

    def scores(self, cluster: Cluster, pod: TracePod, feasible: IntArray) -> FloatArray:
        raise NotImplementedError

    def gpus(self, cluster: Cluster, pod: TracePod, node: int, rng: np.random.Generator) -> list[int]:
        return best_fit_gpu(cluster.gpu_left[node], pod)

    def choose(
        self, cluster: Cluster, pod: TracePod, feasible: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]]:
        node = pick_best(self.scores(cluster, pod, feasible), feasible, rng if self.random_ties else None)
        return node, self.gpus(cluster, pod, node, rng)


# --- the paper's policies ----------------------------------------------------------------------------------------


class RandomPolicy(Policy):
    """RandomScore: one node of those that passed, at random; a share on a random fitting GPU (gpusel random)."""

    name = "Random"

    def choose(
        self, cluster: Cluster, pod: TracePod, feasible: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]]:
        node = int(feasible[int(rng.integers(feasible.size))])
        left = cluster.gpu_left[node]
        if pod.shares:
            fitting = np.flatnonzero(left >= pod.gpu_milli)
            return node, [int(fitting[int(rng.integers(fitting.size))])]
        return node, first_fit(left, pod)


class DotProductPolicy(ScorePolicy):
    """DotProductScore (Tetris), merged GPU dimension, normalised by the largest node: 1 - (node left . task) / 2,
    the node's cpu and all its GPUs' share left against the task's cpu and GPU request."""

    name = "DotProd"

    def scores(self, cluster: Cluster, pod: TracePod, feasible: IntArray) -> FloatArray:
        cpu = pod.cpu_milli or NONZERO_CPU
        gpu_left = cluster.gpu_left[feasible].sum(axis=1)
        dot = (cluster.cpu_left[feasible] / MAX_SPEC_CPU) * (cpu / MAX_SPEC_CPU) + (gpu_left / MAX_SPEC_GPU) * (
            pod.total_milli / MAX_SPEC_GPU
        )
        score: FloatArray = np.trunc(100.0 * (1.0 - dot / 2.0))
        return score


class GpuClusteringPolicy(ScorePolicy):
    """GpuClusteringScore: nodes already running only tasks of the same kind (share, 1, 2, 4, 8 GPUs) first, then
    mixed nodes with that kind, then idle nodes, then nodes of other kinds; within each band the fuller node."""

    name = "GpuClustering"

    def scores(self, cluster: Cluster, pod: TracePod, feasible: IntArray) -> FloatArray:
        if pod.num_gpu == 0:
            return np.zeros(feasible.size)
        tags = cluster.tags[feasible]
        mine = tags[:, 0 if pod.shares else pod.num_gpu] > 0
        kinds = (tags > 0).sum(axis=1)
        fill = (25 * (MAX_SPEC_GPU - cluster.gpu_left[feasible].sum(axis=1))) // MAX_SPEC_GPU
        band = np.where(mine, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
        packed: FloatArray = (fill + band).astype(np.float64)
        return packed


class GpuPackingPolicy(ScorePolicy):
    """GpuPackingScore: a share beside other shares first (the less left on that GPU the better), then free GPUs of
    a node in use (the fewer the better), then an idle node (the fewer GPUs the better)."""

    name = "GpuPacking"

    def scores(self, cluster: Cluster, pod: TracePod, feasible: IntArray) -> FloatArray:
        if pod.num_gpu == 0:
            return np.zeros(feasible.size)
        left = cluster.gpu_left[feasible]
        free = (left == MILLI).sum(axis=1)
        idle = np.maximum(33 - free, free)
        if pod.shares:
            tightest = np.where(left >= pod.gpu_milli, left, MILLI + 1).min(axis=1)
            touched = np.where(tightest == MILLI, 49, np.maximum(100 - (tightest * 100 // MILLI) // 10, 50))
        else:
            touched = np.full(feasible.size, max(50 - pod.num_gpu, 33))
        return np.where(free == cluster.gpus[feasible], idle, touched).astype(np.float64)


class BestFitPolicy(ScorePolicy):
    """BestFitScore: the least cpu and GPU left after the task (half each, by the largest node), scaled so the
    nodes scored span 0..100 (its NormalizeScore)."""

    name = "BestFit"

    def scores(self, cluster: Cluster, pod: TracePod, feasible: IntArray) -> FloatArray:
        cpu = pod.cpu_milli or NONZERO_CPU
        left = (cluster.cpu_left[feasible] - cpu) / MAX_SPEC_CPU * 0.5 + (
            cluster.gpu_left[feasible].sum(axis=1) - pod.total_milli
        ) / MAX_SPEC_GPU * 0.5
        raw = np.trunc((1.0 - left) * 100.0).astype(np.int64)
        low, high = raw.min(), raw.max()
        if high == low:
            return np.zeros(feasible.size)
        normalized: FloatArray = ((raw - low) * 100 // (high - low)).astype(np.float64)
        return normalized


class FGDPolicy(ScorePolicy):
    """FGDScore: the node (and GPU, for a share) where the fragmentation against the target workload grows
    least, sigmoid of the decrease in GPUs times 100, truncated."""

    name = "FGD"

    def __init__(
        self,
        cluster: Cluster,
        target: Sequence[tuple[Shape, float]],
        first_fit_gpu: bool = False,
        random_ties: bool = False,
    ) -> None:
        self.cache = ShapeCache(fgd_scorer(Fragmentation(cluster, target), first_fit_gpu))
        self.random_ties = random_ties

    def choose(
        self, cluster: Cluster, pod: TracePod, feasible: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]]:
        scores, gpus = self.cache.get(cluster, shape_of(pod))
        node = pick_best(scores[feasible], feasible, rng if self.random_ties else None)
        if pod.shares:
            return node, [int(gpus[node])]
        return node, first_fit(cluster.gpu_left[node], pod)


# --- kube-scheduler ----------------------------------------------------------------------------------------------


def in_tree_scores(cluster: Cluster, pod: TracePod, feasible: IntArray, most_allocated: bool = False) -> FloatArray:
    """kube-scheduler v1.37's default score plugins that tell these nodes apart for a bare pod with cpu and memory
    requests, at their default weight 1 (pkg/scheduler/apis/config/v1 default plugins): NodeResourcesFit
    LeastAllocated over cpu and memory (noderesources/least_allocated.go: (allocatable - requested) * 100 /
    allocatable per resource, integer, averaged; requested counts the non-zero defaults) and
    NodeResourcesBalancedAllocation (balanced_allocation.go: (1 - std of the cpu and memory fractions) * 100, the
    fractions of what pods request, capped at 1). TaintToleration, NodeAffinity, PodTopologySpread (no spread
    constraints, no owner for the system defaults), InterPodAffinity and ImageLocality score every node of the
    trace the same and drop out of the choice; the DynamicResources plugin does not score. `most_allocated`: the
    profile's NodeResourcesFit set to MostAllocated instead (most_allocated.go: requested * 100 / allocatable per
    resource, requested capped at allocatable, averaged)."""
    cpu_alloc, memory_alloc = cluster.cpu_total[feasible], cluster.memory_total[feasible]
    cpu = cluster.cpu_nonzero[feasible] + (pod.cpu_milli or NONZERO_CPU)
    memory = cluster.memory_nonzero[feasible] + (pod.memory_mib or NONZERO_MEMORY_MIB)
    if most_allocated:
        fit_cpu = np.minimum(cpu, cpu_alloc) * 100 // cpu_alloc
        fit_memory = np.minimum(memory, memory_alloc) * 100 // memory_alloc
    else:
        fit_cpu = np.where(cpu <= cpu_alloc, (cpu_alloc - cpu) * 100 // cpu_alloc, 0)
        fit_memory = np.where(memory <= memory_alloc, (memory_alloc - memory) * 100 // memory_alloc, 0)
    fit = (fit_cpu + fit_memory) // 2
    cpu_share = np.minimum(1.0, (cluster.cpu_total[feasible] - cluster.cpu_left[feasible] + pod.cpu_milli) / cpu_alloc)
    memory_share = np.minimum(
        1.0, (cluster.memory_total[feasible] - cluster.memory_left[feasible] + pod.memory_mib) / memory_alloc
    )
    balanced = np.trunc((1.0 - np.abs(cpu_share - memory_share) / 2.0) * 100.0)
    total: FloatArray = (fit + balanced).astype(np.float64)
    return total


class KubeSchedulerPolicy(ScorePolicy):
    """kube-scheduler alone: its in-tree scores; the allocator's first fit decides the GPUs. `most_allocated`:
    a profile with NodeResourcesFit MostAllocated (a what-if)."""

    name = "kube-scheduler"
    random_ties = True

    def __init__(self, most_allocated: bool = False) -> None:
        self.most_allocated = most_allocated
        if most_allocated:
            self.name = "kube-scheduler-MostAllocated"

    def scores(self, cluster: Cluster, pod: TracePod, feasible: IntArray) -> FloatArray:
        return in_tree_scores(cluster, pod, feasible, self.most_allocated)

    def gpus(self, cluster: Cluster, pod: TracePod, node: int, rng: np.random.Generator) -> list[int]:
        return first_fit(cluster.gpu_left[node], pod)


# --- the extender ------------------------------------------------------------------------------------------------


FitValues = Callable[[Cluster, IntArray, Shape], FloatArray]


@dataclass(frozen=True)
class ExtenderScoring:
    """How the extender's prioritize scores a node for a task, on the DRA surface the trace maps to: each GPU a
    device that allows multiple allocations with a capacity of 1000 (a share consumes its milli-GPU, a whole GPU
    all of it), taken by the allocator's first fit. `fit`: the device-fit value per node (scoring.py's, from
    what the units drawn on hold before and after), the rest is scoring.fit_scale and scoring.combine with no
    quota (the trace's tasks are in no ClusterQueue: headroom 1) and no firstAvailable alternatives (1)."""

    fit: FitValues
    weights: scoring.ScoringWeights = scoring.ScoringWeights()


def extender_totals(values: FloatArray, weights: scoring.ScoringWeights) -> FloatArray:
    """The 0..10 totals prioritize answers for nodes with device-fit `values`: scaled over the nodes scored
    (scoring.fit_scale) and combined (scoring.combine), each distinct value once."""
    distinct, inverse = np.unique(values, return_inverse=True)
    plain = distinct.tolist()
    scale = scoring.fit_scale(plain)
    totals = np.array(
        [scoring.combine(scoring.bare_fit(v), 1.0, 1.0, scoring.STRATEGY_MOST, weights, scale).total for v in plain],
        dtype=np.float64,
    )
    return totals[inverse]


def unit_fit_values(cluster: Cluster, rows: IntArray, shape: Shape) -> FloatArray:
    """scoring.device_fit's MostAllocated value on each row for the task's first-fit GPUs, from the numbers it
    reads in the node's room (state/indexes/device_room.py): each unit a GPU of size 1000, used = its share
    taken, the node's in-use total; computed by scoring.unit_fit for each distinct set of inputs."""
    left = cluster.gpu_left[rows]
    held_total = (cluster.gpus[rows] * MILLI - left.sum(axis=1)).astype(np.float64)
    node_total = (cluster.gpus[rows] * MILLI).astype(np.float64)
    if shape.count == 1 and shape.milli < MILLI:
        gpu = np.argmax(left >= shape.milli, axis=1)
        before = left[np.arange(rows.size), gpu]
        used = (MILLI - before) / MILLI
        after = (MILLI - before + shape.milli) / MILLI
        sizes = np.full(rows.size, float(MILLI))
    else:
        used = np.zeros(rows.size)
        after = np.ones(rows.size)
        sizes = np.full(rows.size, float(MILLI * shape.count))
    out = np.empty(rows.size)
    columns = (sizes.tolist(), used.tolist(), after.tolist(), held_total.tolist(), node_total.tolist())
    for position, key in enumerate(zip(*columns, strict=True)):
        value = _UNIT_FITS.get(key)
        if value is None:
            value = _UNIT_FITS[key] = scoring.unit_fit(*key, scoring.STRATEGY_MOST).value
        out[position] = value
    return out


_UNIT_FITS: dict[tuple[float, float, float, float, float], float] = {}  # a pure function's answers, by its inputs


class ExtenderPolicy(ScorePolicy):
    """kube-scheduler with the extender: its in-tree scores plus the extender's 0..10 x weight x 10."""

    name = "extender"
    random_ties = True

    def __init__(self, scoring_: ExtenderScoring) -> None:
        self.scoring = scoring_
        self.cache = ShapeCache(self._rows)

    def _rows(self, cluster: Cluster, rows: IntArray, shape: Shape) -> tuple[FloatArray, IntArray]:
        return self.scoring.fit(cluster, rows, shape), np.zeros(rows.size, dtype=np.int64)

    def scores(self, cluster: Cluster, pod: TracePod, feasible: IntArray) -> FloatArray:
        own = in_tree_scores(cluster, pod, feasible)
        if pod.num_gpu == 0:  # no claim: nothing for the extender to decide, no score from it
            return own
        values, _ = self.cache.get(cluster, shape_of(pod))
        totals = extender_totals(values[feasible], self.scoring.weights)
        return own + EXTENDER_WEIGHT * EXTENDER_SCALE * totals

    def gpus(self, cluster: Cluster, pod: TracePod, node: int, rng: np.random.Generator) -> list[int]:
        return first_fit(cluster.gpu_left[node], pod)


# --- what-ifs -----------------------------------------------------------------------------------------------------


class SteeredPolicy(ScorePolicy):
    """What-if (docs/trace.md, "Where cpu-only tasks go"): kube-scheduler alone, after an extender's filter has
    kept only some of the feasible nodes, as a filter may (pkg/scheduler/extender.go HTTPExtender.Filter: the
    nodes it names are all that pass). `cpu_only`: a task without GPUs keeps the nodes with the least idle GPU
    share (its cpu and memory then strand no idle GPU). `whole`: a task of whole GPUs keeps the nodes with the
    fewest untouched GPUs (it fills the node that has least room for its kind). kube-scheduler's in-tree scores
    and random ties choose among the nodes kept; the allocator's first fit takes the GPUs."""

    random_ties = True

    def __init__(self, name: str, cpu_only: bool, whole: bool) -> None:
        self.name, self.cpu_only, self.whole = name, cpu_only, whole

    def kept(self, cluster: Cluster, pod: TracePod, feasible: IntArray) -> BoolArray | None:
        left = cluster.gpu_left[feasible]
        if pod.num_gpu == 0 and self.cpu_only:
            idle = left.sum(axis=1)
            kept: BoolArray = idle == idle.min()
            return kept
        if pod.num_gpu and not pod.shares and self.whole:
            untouched = (left == MILLI).sum(axis=1)  # columns past a node's GPUs hold 0
            fullest: BoolArray = untouched == untouched.min()
            return fullest
        return None

    def scores(self, cluster: Cluster, pod: TracePod, feasible: IntArray) -> FloatArray:
        own = in_tree_scores(cluster, pod, feasible)
        kept = self.kept(cluster, pod, feasible)
        if kept is None:
            return own
        # the nodes dropped are out of the choice: below every node kept (in-tree scores are at most 200)
        steered: FloatArray = np.where(kept, own, own - 1000.0)
        return steered

    def gpus(self, cluster: Cluster, pod: TracePod, node: int, rng: np.random.Generator) -> list[int]:
        return first_fit(cluster.gpu_left[node], pod)


STEERED = {
    "steer-cpu-only": (True, False),
    "steer-whole": (False, True),
    "steer-both": (True, True),
}


PAPER_POLICIES = ("Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD")
OUR_POLICIES = ("kube-scheduler", "extender")
ALL_POLICIES = PAPER_POLICIES + OUR_POLICIES
# What-ifs that take FGD apart (docs/trace.md): ties as kube-scheduler breaks them (at random, not by node name),
# GPUs as the DRA allocator takes them (the first with room, not FGD's pick), and both; and kube-scheduler alone
# after a filter that steers cpu-only tasks, whole-GPU tasks, or both (SteeredPolicy), or with a profile whose
# NodeResourcesFit packs (MostAllocated).
WHAT_IFS = ("FGD-random-ties", "FGD-first-fit", "FGD-first-fit-random-ties", *STEERED, "kube-scheduler-MostAllocated")
