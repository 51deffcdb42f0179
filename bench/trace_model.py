"""The production GPU trace (Alibaba, 2023) and a fast model of a cluster placing it, for bench/trace_bench.py.

What the paper "Beware of Fragmentation" (Weng et al., USENIX ATC 2023) measures, as its simulator
(hkust-adsl/kubernetes-scheduler-simulator) runs it, read from that simulator's source and written here anew:

- the pod list is sorted by name and shuffled with the run's seed (simulator SortClusterPods), then tuned to
  130 % of the cluster's GPUs: pods drawn at random from the original list are appended until the next one would
  pass the target, or pods removed at random until the total is under it (TunePodsByNodeTotalResource);
- tasks arrive one after the other and never leave; a task no node takes stays unplaced and the stream goes on;
- after every task the share of the cluster's GPUs allocated (fractions by their share) is recorded beside the GPU
  share that has arrived (every task counts, placed or not); the figure at X % is the mean allocation over the
  records whose arrived share rounds to X % (experiments/analysis/merge_alloc_discrete.py);
- the filter: CPU and memory fit (kube-scheduler's NodeResourcesFit), the GPU model a task allows, and room on the
  GPUs: a sharing task needs one GPU with that much left, a task of k whole GPUs k untouched GPUs (its Open-Gpu-Share
  plugin);
- one score plugin at a time (weight 1000, every in-tree score plugin disabled), the highest score wins, ties at
  random (selectHost);
- FGD's target workload: the task shapes (cpu, GPU share, GPU count, GPU models) of the original list, most popular
  first until they cover 95 % of the tasks, renormalised (utils.GetTypicalPods with popularity threshold 95).

The cluster is arrays (one row per node, one column per GPU): every score is computed for all nodes at once.
Scores that depend only on the node and the task's shape are kept per shape and recomputed only for the nodes
that changed since (`ShapeCache`), which is what makes ten seeds of four workloads a matter of minutes.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

MILLI = 1000  # one GPU
MAX_GPUS = 8  # columns of the GPU array (the trace's largest node)
MAX_SPEC_CPU, MAX_SPEC_GPU = 128_000, 8_000  # the simulator's normalisers (open-gpu-share utils const.go)
NONZERO_CPU, NONZERO_MEMORY_MIB = 100, 200  # kube-scheduler's defaults for a request of 0 (GetNonzeroRequests)
TYPICAL_SHARE = 0.95

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


# --- the trace files ---------------------------------------------------------------------------------------------


class TraceFormatError(ValueError):
    """A trace file that does not have the columns or values the format needs (file and line in the message)."""


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU: < 1000 for a task sharing one GPU, 1000 for whole GPUs, 0 without GPU
    gpu_spec: tuple[str, ...]  # GPU models allowed; empty: any

    @property
    def total_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def shares(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI


def _int(row: dict[str, str], column: str, where: str) -> int:
    text = row.get(column)
    if text is None or text == "":
        raise TraceFormatError(f"{where}: column {column!r} is missing or empty")
    try:
        value = int(float(text))
    except ValueError:
        raise TraceFormatError(f"{where}: column {column!r} is not a number: {text!r}") from None
    if value < 0:
        raise TraceFormatError(f"{where}: column {column!r} is negative: {value}")
    return value


def _rows(path: Path, required: Sequence[str]) -> Iterable[tuple[str, dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [column for column in required if column not in (reader.fieldnames or [])]
        if missing:
            raise TraceFormatError(f"{path}: header lacks {', '.join(missing)}")
        for line, row in enumerate(reader, start=2):
            yield f"{path.name}:{line}", row


def read_nodes(path: Path) -> list[TraceNode]:
    """A node list (`sn,cpu_milli,memory_mib,gpu,model`)."""
    nodes = []
    for where, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        gpus = _int(row, "gpu", where)
        if gpus > MAX_GPUS:
            raise TraceFormatError(f"{where}: {gpus} GPUs on one node, at most {MAX_GPUS}")
        nodes.append(
            TraceNode(row["sn"], _int(row, "cpu_milli", where), _int(row, "memory_mib", where), gpus, row["model"])
        )
    if not nodes:
        raise TraceFormatError(f"{path}: no nodes")
    return nodes


def read_pods(path: Path) -> list[TracePod]:
    """A pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`), GPU shares read as the simulator's
    pod_csv_to_yaml.py writes them: a share above 1000 is a whole GPU, a task without GPUs has none."""
    pods = []
    for where, row in _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")):
        num_gpu = _int(row, "num_gpu", where)
        milli = _int(row, "gpu_milli", where) if num_gpu else 0
        if num_gpu > MAX_GPUS:
            raise TraceFormatError(f"{where}: {num_gpu} GPUs for one task, at most {MAX_GPUS}")
        if num_gpu and milli == 0:
            raise TraceFormatError(f"{where}: {num_gpu} GPUs of 0 milli-GPU")
        milli = min(milli, MILLI)
        if num_gpu > 1 and milli < MILLI:
            raise TraceFormatError(f"{where}: a share of a GPU ({milli}) for {num_gpu} GPUs")
        spec = tuple(model for model in (row.get("gpu_spec") or "").split("|") if model)
        pods.append(
            TracePod(row["name"], _int(row, "cpu_milli", where), _int(row, "memory_mib", where), num_gpu, milli, spec)
        )
    if not pods:
        raise TraceFormatError(f"{path}: no pods")
    return pods


# --- the experiment's streams ------------------------------------------------------------------------------------


def stream(pods: Sequence[TracePod], capacity_milli: int, ratio: float, seed: int) -> list[TracePod]:
    """The tasks of one run: sorted by name, shuffled, then tuned to `ratio` of the cluster's GPUs (see the
    module docstring; the simulator's own quirk kept: tuning up stops when the next task's share of one GPU would
    pass the target, and adds its whole request)."""
    rng = np.random.default_rng(seed)
    ordered = sorted(pods, key=lambda pod: pod.name)
    order = rng.permutation(len(ordered))
    tasks = [ordered[i] for i in order]
    total = sum(pod.total_milli for pod in tasks)
    target = ratio * capacity_milli
    if total > target:
        while total > target and tasks:
            removed = tasks.pop(int(rng.integers(len(tasks))))
            total -= removed.total_milli
    else:
        while True:
            drawn = ordered[int(rng.integers(len(ordered)))]
            if total + drawn.gpu_milli > target:
                break
            total += drawn.total_milli
            tasks.append(drawn)
    return tasks


@dataclass(frozen=True, slots=True)
class Shape:
    """What scores depend on: a task's cpu (non-zero), GPU share, GPU count and allowed models."""

    cpu: int
    milli: int
    count: int
    spec: tuple[str, ...]


def shape_of(pod: TracePod) -> Shape:
    return Shape(pod.cpu_milli or NONZERO_CPU, pod.gpu_milli, pod.num_gpu, pod.gpu_spec)


def typical_shapes(pods: Sequence[TracePod], share: float = TYPICAL_SHARE) -> list[tuple[Shape, float]]:
    """FGD's target workload: shapes by popularity (ties: the larger shape first, as the simulator sorts), the most
    popular until they cover `share` of the tasks, their frequencies renormalised to 1."""
    counts: dict[Shape, int] = {}
    for pod in pods:
        key = shape_of(pod)
        counts[key] = counts.get(key, 0) + 1

    def order(item: tuple[Shape, int]) -> tuple[int, int, int, int, tuple[str, ...]]:
        shape, count = item
        return (count, shape.cpu, shape.milli, shape.count, shape.spec)

    ranked = sorted(counts.items(), key=order, reverse=True)
    wanted, covered, chosen = share * len(pods), 0, []
    for shape, count in ranked:
        if covered >= wanted:
            break
        chosen.append((shape, count))
        covered += count
    return [(shape, count / covered) for shape, count in chosen]


# --- the cluster -------------------------------------------------------------------------------------------------


class Cluster:
    """Nodes as arrays: what each has left of cpu, memory and each GPU, and a version per node that moves with
    every placement there (ShapeCache recomputes a node's scores when it moved)."""

    def __init__(self, nodes: Sequence[TraceNode]) -> None:
        nodes = sorted(nodes, key=lambda node: node.name)
        self.nodes = nodes
        count = len(nodes)
        self.models = sorted({node.model for node in nodes})
        self.model = np.array([self.models.index(node.model) for node in nodes], dtype=np.int64)
        self.cpu_total = np.array([node.cpu_milli for node in nodes], dtype=np.int64)
        self.memory_total = np.array([node.memory_mib for node in nodes], dtype=np.int64)
        self.gpus = np.array([node.gpus for node in nodes], dtype=np.int64)
        self.cpu_left = self.cpu_total.copy()
        self.memory_left = self.memory_total.copy()
        # columns beyond a node's GPUs hold 0: they host nothing and add nothing to any sum
        self.gpu_left = np.zeros((count, MAX_GPUS), dtype=np.int64)
        for row, node in enumerate(nodes):
            self.gpu_left[row, : node.gpus] = MILLI
        self.cpu_nonzero = np.zeros(count, dtype=np.int64)  # kube-scheduler's NonZeroRequested, for scores
        self.memory_nonzero = np.zeros(count, dtype=np.int64)
        self.version = np.zeros(count, dtype=np.int64)
        self.tags = np.zeros((count, MAX_GPUS + 1), dtype=np.int64)  # GPU tasks per kind (share, 1..8 GPUs)
        self.capacity_milli = int(self.gpus.sum()) * MILLI
        self.used_milli = 0
        self._access: dict[tuple[str, ...], BoolArray] = {}

    def accessible(self, spec: tuple[str, ...]) -> BoolArray:
        """Nodes whose GPU model the task allows (every node when it names none)."""
        found = self._access.get(spec)
        if found is None:
            allowed = np.array([model in spec for model in self.models], dtype=np.bool_)
            found = np.ones(len(self.nodes), dtype=np.bool_) if not spec else allowed[self.model]
            self._access[spec] = found
        return found

    def feasible(self, pod: TracePod) -> BoolArray:
        """The filter: cpu and memory fit, the GPU model, room on the GPUs."""
        fits = (self.cpu_left >= pod.cpu_milli) & (self.memory_left >= pod.memory_mib)
        if pod.num_gpu == 0:
            return fits
        fits &= self.accessible(pod.gpu_spec)
        if pod.shares:
            shared: BoolArray = fits & (self.gpu_left.max(axis=1) >= pod.gpu_milli)
            return shared
        whole: BoolArray = fits & ((self.gpu_left == MILLI).sum(axis=1) >= pod.num_gpu)
        return whole

    def place(self, pod: TracePod, node: int, gpus: Sequence[int]) -> None:
        self.cpu_left[node] -= pod.cpu_milli
        self.memory_left[node] -= pod.memory_mib
        self.cpu_nonzero[node] += pod.cpu_milli or NONZERO_CPU
        self.memory_nonzero[node] += pod.memory_mib or NONZERO_MEMORY_MIB
        for gpu in gpus:
            if self.gpu_left[node, gpu] < pod.gpu_milli:
                raise AssertionError(f"GPU {gpu} of node {node} has {self.gpu_left[node, gpu]} left")
            self.gpu_left[node, gpu] -= pod.gpu_milli
        if pod.num_gpu:
            self.tags[node, 0 if pod.shares else pod.num_gpu] += 1
        self.used_milli += pod.total_milli
        self.version[node] += 1


def first_fit(left: IntArray, pod: TracePod) -> list[int]:
    """The GPUs upstream's structured allocator takes on a node for the task (devices in slice order, the first
    that has room: a share on the first GPU with that much capacity left, whole GPUs the first untouched ones)."""
    if pod.num_gpu == 0:
        return []
    if pod.shares:
        return [int(np.argmax(left >= pod.gpu_milli))]
    return [int(i) for i in np.flatnonzero(left == MILLI)[: pod.num_gpu]]


def best_fit_gpu(left: IntArray, pod: TracePod) -> list[int]:
    """The simulator's `best` GPU choice: a share on the fitting GPU with least left (the first on ties), whole
    GPUs the first untouched ones (AllocateExclusiveGpuId)."""
    if pod.shares:
        room = np.where(left >= pod.gpu_milli, left, MILLI + 1)
        return [int(np.argmin(room))]
    return first_fit(left, pod)


# --- per-shape score memo ----------------------------------------------------------------------------------------


RowScorer = Callable[[Cluster, IntArray, Shape], tuple[FloatArray, IntArray]]


class ShapeCache:
    """Per task shape, each node's score and chosen GPU (for a sharing task), recomputed only for nodes whose
    version moved since: `scorer(cluster, rows, shape)` gives both for the rows asked."""

    def __init__(self, scorer: RowScorer) -> None:
        self.scorer = scorer
        self.entries: dict[Shape, tuple[IntArray, FloatArray, IntArray]] = {}

    def get(self, cluster: Cluster, shape: Shape) -> tuple[FloatArray, IntArray]:
        entry = self.entries.get(shape)
        if entry is None:
            count = len(cluster.nodes)
            entry = (np.full(count, -1, dtype=np.int64), np.zeros(count), np.zeros(count, dtype=np.int64))
            self.entries[shape] = entry
        seen, scores, gpus = entry
        stale = np.flatnonzero(seen != cluster.version)
        if stale.size:
            new_scores, new_gpus = self.scorer(cluster, stale, shape)
            scores[stale] = new_scores
            gpus[stale] = new_gpus
            seen[stale] = cluster.version[stale]
        return scores, gpus


# --- fragmentation (FGD) -----------------------------------------------------------------------------------------


class Fragmentation:
    """The simulator's fragmentation of a node against a target workload (utils NodeGpuShareFragAmountScore): for
    each target shape, weighted by its frequency, the node's idle GPU share that shape cannot use, all of it when
    the shape does not fit the node at all (cpu, GPU model, GPUs), the GPUs with less left than the shape's share
    when it fits; shapes without GPU count every idle GPU share. Written as everything idle minus what each
    fitting shape can use:

        frag = sum_t p_t * idle  -  sum_t p_t * [shape t fits] * (idle on GPUs with at least m_t left)
    """

    def __init__(self, cluster: Cluster, target: Sequence[tuple[Shape, float]]) -> None:
        gpu_shapes = [(shape, p) for shape, p in target if shape.count]
        self.total_p = sum(p for _, p in target)
        self.milli = np.array([shape.milli for shape, _ in gpu_shapes], dtype=np.int64)
        self.count = np.array([shape.count for shape, _ in gpu_shapes], dtype=np.int64)
        self.cpu = np.array([shape.cpu for shape, _ in gpu_shapes], dtype=np.int64)
        self.p = np.array([p for _, p in gpu_shapes])
        # access[model, t]: the node's GPU model is one shape t allows
        self.access = np.array(
            [[not shape.spec or model in shape.spec for shape, _ in gpu_shapes] for model in cluster.models],
            dtype=np.bool_,
        ).reshape(len(cluster.models), len(gpu_shapes))

    def of(self, left: IntArray, cpu_left: IntArray, model: IntArray) -> FloatArray:
        """Fragmentation of nodes with GPUs `left` (rows x GPUs), `cpu_left` and GPU `model` (per row)."""
        at_least = left[:, :, None] >= self.milli[None, None, :]  # rows x GPUs x shapes
        usable = (left[:, :, None] * at_least).sum(axis=1)
        fits = (at_least.sum(axis=1) >= self.count) & (cpu_left[:, None] >= self.cpu) & self.access[model]
        fragmentation: FloatArray = self.total_p * left.sum(axis=1) - (fits * usable) @ self.p
        return fragmentation


def _sigmoid_score(before: FloatArray, after: FloatArray) -> FloatArray:
    """FGD's score: int64(sigmoid((before - after) / 1000) * 100)."""
    return np.floor(100.0 / (1.0 + np.exp(-(before - after) / 1000.0)))


def fgd_scorer(fragmentation: Fragmentation, first_fit_gpu: bool = False) -> RowScorer:
    """FGD's score per node; for a share, on the GPU FGD picks (the best score, the first on ties) or, with
    `first_fit_gpu`, on the GPU the DRA allocator would take (the first with room)."""

    def score(cluster: Cluster, rows: IntArray, shape: Shape) -> tuple[FloatArray, IntArray]:
        left, cpu, model = cluster.gpu_left[rows], cluster.cpu_left[rows], cluster.model[rows]
        before = fragmentation.of(left, cpu, model)
        cpu_after = cpu - shape.cpu
        if shape.count == 1 and shape.milli < MILLI and first_fit_gpu:
            chosen = np.argmax(left >= shape.milli, axis=1)
            after_left = left.copy()
            after_left[np.arange(len(rows)), chosen] -= shape.milli
            return _sigmoid_score(before, fragmentation.of(after_left, cpu_after, model)), chosen
        if shape.count == 1 and shape.milli < MILLI:
            best = np.full(len(rows), -1.0)
            chosen = np.zeros(len(rows), dtype=np.int64)
            for gpu in range(MAX_GPUS):
                room = left[:, gpu] >= shape.milli
                if not room.any():
                    continue
                after_left = left.copy()
                after_left[:, gpu] -= shape.milli
                value = _sigmoid_score(before, fragmentation.of(after_left, cpu_after, model))
                better = room & (value > best)
                best = np.where(better, value, best)
                chosen = np.where(better, gpu, chosen)
            return best, chosen
        after_left = left.copy()
        if shape.count:
            # whole GPUs: the first untouched ones (which ones does not change the fragmentation)
            free = np.cumsum(left == MILLI, axis=1)
            after_left[(left == MILLI) & (free <= shape.count)] = 0
        value = _sigmoid_score(before, fragmentation.of(after_left, cpu_after, model))
        return value, np.zeros(len(rows), dtype=np.int64)

    return score
