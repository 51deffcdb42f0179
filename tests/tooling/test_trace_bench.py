"""The production-trace benchmark's model (bench/trace_model.py, bench/trace_policies.py): the trace parser, FGD's
fragmentation and score on a hand-made cluster, the extender's device fit as the bench computes it against
scoring.py's, and the shipped trace files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.trace_bench import TRACE_DIR, allocation_at, policy_factory, run
from bench.trace_model import (
    Cluster,
    Fragmentation,
    Shape,
    TraceFormatError,
    TraceNode,
    TracePod,
    read_nodes,
    read_pods,
    stream,
    typical_shapes,
)
from bench.trace_policies import FGDPolicy, GpuPackingPolicy, KubeSchedulerPolicy, SteeredPolicy, unit_fit_values
from extender.decisions import scoring
from tests.support.requirements import missing_requirement


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_pod_list_parses_shares_whole_gpus_and_models(tmp_path: Path) -> None:
    pods = read_pods(
        write(
            tmp_path / "pods.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
            "p0,4000,8192,1,460,,LS\n"
            "p1,8000,16384,2,1000,V100M16|V100M32,BE\n"
            "p2,2000,4096,0,0,,LS\n"
            "p3,2000,4096,1,1500,T4,LS\n",
        )
    )
    assert [(p.num_gpu, p.gpu_milli, p.gpu_spec) for p in pods] == [
        (1, 460, ()),
        (2, 1000, ("V100M16", "V100M32")),
        (0, 0, ()),
        (1, 1000, ("T4",)),  # a share above one GPU is the whole GPU, as the simulator's converter writes it
    ]
    assert pods[0].shares and not pods[1].shares and pods[1].total_milli == 2000


def test_pod_list_without_model_column_parses(tmp_path: Path) -> None:
    pods = read_pods(write(tmp_path / "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,100\n"))
    assert pods[0].gpu_spec == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,cpu_milli,memory_mib,num_gpu\n", "header lacks gpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,x,1,1,100\n", "p.csv:2: column 'cpu_milli' is not a number"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n", r"a share of a GPU \(500\) for 2 GPUs"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,-1,1,100\n", "negative"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", "no pods"),
    ],
)
def test_bad_pod_lists_are_refused_with_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        read_pods(write(tmp_path / "p.csv", text))


def test_node_list_parses_and_refuses_too_many_gpus(tmp_path: Path) -> None:
    nodes = read_nodes(write(tmp_path / "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,786432,8,G2\n"))
    assert nodes == [TraceNode("n0", 96000, 786432, 8, "G2")]
    with pytest.raises(TraceFormatError, match="9 GPUs on one node"):
        read_nodes(write(tmp_path / "m.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,9,G2\n"))


def pod(name: str, cpu: int, milli: int, count: int = 1, spec: tuple[str, ...] = ()) -> TracePod:
    return TracePod(name, cpu, 1024, count if milli else 0, milli, spec)


def tiny_cluster() -> Cluster:
    """Two nodes of two GPUs: a has 600m left on GPU 0 (a 400m share runs there), b is untouched."""
    cluster = Cluster([TraceNode("a", 32000, 65536, 2, "T4"), TraceNode("b", 32000, 65536, 2, "T4")])
    cluster.place(pod("running", 4000, 400), 0, [0])
    return cluster


def test_fragmentation_by_hand() -> None:
    """Target: half the tasks ask for 500m, half for a whole GPU. Node a (GPUs left 600, 1000; 28 cpu free): the
    500m shape can use all 1600m (nothing fragmented for it); the whole-GPU shape can use only GPU 1, so GPU 0's
    600m is fragmented for it: 0.5 * 600 = 300. Node b: nothing fragmented."""
    cluster = tiny_cluster()
    target = [(Shape(2000, 500, 1, ()), 0.5), (Shape(2000, 1000, 1, ()), 0.5)]
    fragmentation = Fragmentation(cluster, target)
    rows = np.array([0, 1])
    assert fragmentation.of(cluster.gpu_left[rows], cluster.cpu_left[rows], cluster.model[rows]).tolist() == [
        300.0,
        0.0,
    ]
    # Without the cpu a shape asks for, all its idle GPU share counts as fragmented (the simulator's q4).
    starved = np.array([1000, 1000])
    assert fragmentation.of(cluster.gpu_left[rows], starved, cluster.model[rows]).tolist() == [1600.0, 2000.0]


def test_fgd_puts_a_share_beside_the_running_one() -> None:
    """A 500m task on a: on GPU 0 (left 600 -> 100) fragmentation goes 300 -> 0.5 * 100 + 0.5 * 100 = 100,
    a decrease of 200: score int(sigmoid(0.2) * 100) = 54. On b it breaks a fresh GPU: 0 -> 0.5 * 500 = 250,
    score int(sigmoid(-0.25) * 100) = 43. FGD takes a, GPU 0."""
    cluster = tiny_cluster()
    target = [(Shape(2000, 500, 1, ()), 0.5), (Shape(2000, 1000, 1, ()), 0.5)]
    policy = FGDPolicy(cluster, target)
    task = pod("new", 2000, 500)
    scores, gpus = policy.cache.get(cluster, Shape(2000, 500, 1, ()))
    assert scores.tolist() == [54.0, 43.0] and gpus.tolist() == [0, 0]
    feasible = np.flatnonzero(cluster.feasible(task))
    assert policy.choose(cluster, task, feasible, np.random.default_rng(0)) == (0, [0])
    # After a placement on b only b's entry is recomputed, and it sees the change.
    cluster.place(pod("other", 2000, 300), 1, [1])
    scores, gpus = policy.cache.get(cluster, Shape(2000, 500, 1, ()))
    assert scores[0] == 54.0 and gpus[1] == 1


def test_gpu_packing_prefers_the_used_gpu_then_a_used_node() -> None:
    cluster = tiny_cluster()
    feasible = np.array([0, 1])
    share = GpuPackingPolicy().scores(cluster, pod("s", 1000, 500), feasible)
    assert share.tolist() == [94.0, 31.0]  # 100 - 60 / 10 beside the share; an idle node of 2 GPUs: 33 - 2
    whole = GpuPackingPolicy().scores(cluster, pod("w", 1000, 1000), feasible)
    assert whole.tolist() == [49.0, 31.0]


def test_filter_checks_cpu_memory_model_and_gpu_room() -> None:
    cluster = tiny_cluster()
    assert cluster.feasible(pod("fits", 1000, 600)).tolist() == [True, True]
    assert cluster.feasible(pod("two whole", 1000, 1000, 2)).tolist() == [False, True]
    assert cluster.feasible(pod("cpu", 30000, 0)).tolist() == [False, True]
    assert cluster.feasible(pod("model", 1000, 100, 1, ("V100M16",))).tolist() == [False, False]
    cluster.place(pod("second", 1000, 500), 0, [1])  # a: 600m and 500m left
    assert cluster.feasible(pod("too big a share", 1000, 700)).tolist() == [False, True]


def test_extender_fit_in_the_bench_is_scoring_device_fit() -> None:
    """The bench's device fit per node equals scoring.unit_fit for the first-fit GPU: a 500m share on a lands
    on GPU 0 (held 400 of 2000 before, 900 after: node fill 0.45), on b on GPU 0 (fill 0.25)."""
    cluster = tiny_cluster()
    values = unit_fit_values(cluster, np.array([0, 1]), Shape(1000, 500, 1, ()))
    expected = [
        scoring.unit_fit(1000.0, 0.4, 0.9, 400.0, 2000.0, scoring.STRATEGY_MOST).value,
        scoring.unit_fit(1000.0, 0.0, 0.5, 0.0, 2000.0, scoring.STRATEGY_MOST).value,
    ]
    assert values.tolist() == expected
    assert expected[0] > expected[1]
    parts = scoring.unit_fit(1000.0, 0.4, 0.9, 400.0, 2000.0, scoring.STRATEGY_MOST)
    assert parts.node_fill == 0.45 and parts.kept_whole == 1.0


def test_kube_scheduler_spreads_by_least_allocated() -> None:
    cluster = tiny_cluster()
    task = pod("s", 1000, 500)
    node, gpus = KubeSchedulerPolicy().choose(cluster, task, np.array([0, 1]), np.random.default_rng(0))
    assert (node, gpus) == (1, [0])  # b is emptier; the allocator's first fit takes its GPU 0


def test_most_allocated_packs_where_least_allocated_spreads() -> None:
    cluster = tiny_cluster()
    task = pod("s", 1000, 500)
    node, _ = KubeSchedulerPolicy(most_allocated=True).choose(cluster, task, np.array([0, 1]), np.random.default_rng(0))
    assert node == 0  # a already runs 4 cpus


def test_steered_filters_keep_cpu_only_tasks_off_idle_gpus_and_whole_gpus_on_the_fullest_node() -> None:
    cluster = Cluster([TraceNode(name, 32000, 65536, 2, "T4") for name in ("a", "b", "c")])
    cluster.place(pod("whole", 1000, 1000), 0, [0])  # a: one GPU left untouched
    cluster.place(pod("share", 1000, 400), 1, [0])  # b: 1600m idle, one GPU untouched
    rng = np.random.default_rng(0)
    feasible = np.array([0, 1, 2])
    cpu_only = SteeredPolicy("steer-cpu-only", cpu_only=True, whole=False)
    assert cpu_only.choose(cluster, pod("cpu", 1000, 0), feasible, rng)[0] == 0  # a: 1000m idle, the least
    # a task of whole GPUs: spread by kube-scheduler (c is emptiest) unless steered to the fewest untouched
    assert cpu_only.choose(cluster, pod("one", 1000, 1000), feasible, rng)[0] == 2
    whole = SteeredPolicy("steer-whole", cpu_only=False, whole=True)
    for seed in range(8):  # a or b, never c, whatever the tie-break
        node, gpus = whole.choose(cluster, pod("one", 1000, 1000), feasible, np.random.default_rng(seed))
        assert node in (0, 1) and gpus == [1]


def test_stream_tunes_to_the_ratio_and_is_seeded() -> None:
    pods = [pod(f"p{i}", 1000, 500) for i in range(10)]  # 5 GPUs asked in all
    up = stream(pods, 4000, 1.3, seed=7)  # target 5.2 GPUs: no more 500m task fits under it
    assert sum(p.total_milli for p in up) == 5000 and up == stream(pods, 4000, 1.3, seed=7)
    down = stream(pods, 2000, 1.3, seed=7)  # target 2.6 GPUs: tasks removed until under it
    assert sum(p.total_milli for p in down) == 2500 and len(down) == 5


def test_typical_shapes_cover_the_share_and_renormalise() -> None:
    pods = [pod(f"a{i}", 1000, 500) for i in range(6)] + [pod(f"b{i}", 1000, 1000) for i in range(3)] + [pod("c", 1, 0)]
    shapes = typical_shapes(pods, share=0.85)
    assert [(s.milli, round(p, 3)) for s, p in shapes] == [(500, 0.667), (1000, 0.333)]


def test_allocation_figure_is_the_mean_at_the_rounded_point() -> None:
    arrived = np.array([990, 1000, 1004, 1300])
    allocated = np.array([900, 950, 960, 1000])
    assert allocation_at(arrived, allocated, 1000, [100, 130]) == {100: 95.5, 130: 100.0}


def test_a_run_on_a_hand_made_trace(tmp_path: Path) -> None:
    nodes = [TraceNode(f"n{i}", 16000, 65536, 2, "T4") for i in range(4)]
    pods = [pod(f"p{i}", 500, 50 * (1 + i % 4)) for i in range(100)]
    for name in ("FGD", "extender", "kube-scheduler", "Random"):
        result = run(nodes, stream(pods, 8000, 1.3, seed=1), policy_factory(name, pods), seed=1)
        assert 0 < result.alloc_at[100] <= 100 and result.placed + result.failed == len(stream(pods, 8000, 1.3, 1))


def test_shipped_trace_files_parse() -> None:
    if not (TRACE_DIR / "openb_node_list_gpu_node.csv").is_file():
        missing_requirement(f"the production trace is not in {TRACE_DIR} (../shared/traces/openb-gpu-2023)")
    nodes = read_nodes(TRACE_DIR / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213 and sum(node.gpus for node in nodes) == 6212
    default = read_pods(TRACE_DIR / "openb_pod_list_default.csv")
    assert len(default) == 8152
    assert sum(p.num_gpu == 0 for p in default) == 1088
