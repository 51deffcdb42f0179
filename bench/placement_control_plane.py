"""Placement streams on the real control plane: kube-scheduler v1.37.2 with its DynamicResources plugin
allocating, without (a) and with (c) our extender (`dra-extender serve`), for bench/placement_bench.py
`--control-plane`.

One control plane (testkit/control_plane.py, the one the e2e tests and bench/e2e_bench.py start: etcd,
kube-apiserver, kube-controller-manager with the resourceclaim controller), the shape's nodes (marked Ready, no
kubelet) and ResourceSlices, the DeviceClass, Kueue's CRDs (the extender lists them; no ClusterQueue, so every
pod is outside quota), our extender watching it, and two kube-schedulers side by side as in bench/e2e_bench.py:
profile `plain` (in-tree plugins only) and profile `extender` (the same plus our filter + prioritize, weight 1).
Streams run one after the other, each in a fresh namespace, and leave nothing allocated behind.

A stream, tick by tick: the pods whose lifetime ended leave (pod and claim deleted, force, as there is no
kubelet; the tick goes on once the claim is gone, i.e. deallocated by the resourceclaim controller, then
`settle` seconds more so that kube-scheduler's and the extender's informers have seen it); then the tick's pod
arrives: its ResourceClaim (the shape's request, from testkit/placement.py) and, `settle` seconds later, the
pod naming it, for the profile under test. Without that pause the extender's watch can deliver the claim after
kube-scheduler has already sent it the pod, and its filter refuses the nodes the in-tree plugins passed with
"ResourceClaim ... does not exist" (once in 500 pods on a first run): kube-scheduler would retry such a pod,
drop mode would count it as refused; the bench prints any refusal of that kind. The pod is placed when it is
bound (spec.nodeName); refused when kube-scheduler reports it unschedulable (condition PodScheduled=False,
reason Unschedulable: no node passed the in-tree filters, or the extender's filter refused every one that did).
Drop mode: a refused pod and its claim are deleted at once.

What is measured is what kube-scheduler and the DRA allocator did, with their own score plugins and tie
breaking; the extender only ranks (and filters) through its HTTP verbs. The shape's objects are published as
testkit/placement.py builds them, which the API server accepts as they are (a partitionable node's pool is a
slice of counter sets and a slice of devices; a shared GPU's requestPolicy has a default).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from bench.e2e_bench import extender_metrics
from bench.placement_bench import (
    HEADER,
    SHAPES,
    Arrival,
    Outcome,
    Shape,
    _ratio,
    bound,
    report_stream,
    stream,
)
from testkit import builders as b
from testkit.control_plane import (
    KUEUE_CRD_DIR,
    ControlPlane,
    free_port,
    pod_manifest,
    start_control_plane,
    start_extender,
    wait_until,
)

PROFILES = {"a": "plain", "c": "extender"}  # bench mode -> kube-scheduler profile (schedulerName)
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
BUILD_ROOT = Path(__file__).resolve().parents[1] / "tests" / "e2e" / ".build"
POLL = 0.05  # seconds between reads of a pod or claim


@dataclass
class Placed:
    """What one arrival came to: the node it was bound to, or the scheduler's message when it was refused."""

    node: str | None
    message: str = ""
    seconds: float = 0.0


def find_binaries() -> dict[str, Path]:
    """The newest tests/e2e/.build/v*/ holding the control plane's binaries (python -m testkit.builds.kubernetes)."""
    for directory in sorted(BUILD_ROOT.glob("v*"), reverse=True):
        paths = {name: directory / name for name in BINARIES}
        if all(path.is_file() for path in paths.values()):
            return paths
    raise SystemExit(f"no control plane binaries under {BUILD_ROOT}: run .venv/bin/python -m testkit.builds.kubernetes")


class RealCluster:
    """The control plane for one shape, with our extender and the two kube-scheduler profiles running."""

    def __init__(self, objects: list[dict[str, Any]], settle: float) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="dra-bench-placement-"))
        self.plane: ControlPlane = start_control_plane(self.workdir, find_binaries(), start_scheduler=False)
        self.settle = settle
        self.streams = 0
        try:
            self._populate(objects)
            extender = start_extender(self.plane.kubeconfig, free_port(), log_dir=self.plane.log_dir, timeout=300)
            self.plane.components["extender"] = extender
            self.plane.start_scheduler(name="kube-scheduler-plain", scheduler_name=PROFILES["a"])
            self.plane.start_scheduler(
                extender_url=extender.url, name="kube-scheduler-extender", scheduler_name=PROFILES["c"]
            )
        except BaseException:
            self.stop()
            raise

    def _populate(self, objects: list[dict[str, Any]]) -> None:
        self.plane.apply_crds(KUEUE_CRD_DIR)
        self.plane.create_device_class()
        for obj in objects:
            if obj["kind"] == "Node":
                self.plane.create_node(obj["metadata"]["name"])
            elif obj["kind"] == "ResourceSlice":
                self.plane.resource.create_resource_slice(obj)  # type: ignore[arg-type]  # the client sends a dict body as it is

    def stop(self) -> None:
        """Stop every component and remove the work directory (etcd's data, the logs)."""
        self.plane.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def new_namespace(self, label: str) -> str:
        self.streams += 1
        return self.plane.create_namespace(f"placement-{self.streams}-{label}")

    # one arrival -------------------------------------------------------------------------------------

    def arrive(self, namespace: str, name: str, request: dict[str, Any], mode: str, timeout: float) -> Placed:
        """Create the pod's claim and the pod for the profile of `mode`; wait until bound or refused."""
        claim = b.claim(f"{name}-gpu", namespace, [request])
        del claim["metadata"]["uid"]
        self.plane.resource.create_namespaced_resource_claim(namespace, claim)  # type: ignore[arg-type]
        time.sleep(self.settle)  # the extender's watch may see the claim later than kube-scheduler sees the pod
        manifest = pod_manifest(namespace, name, claims={"gpu": f"{name}-gpu"}, scheduler_name=PROFILES[mode])
        started = time.monotonic()
        self.plane.create_pod(manifest)
        outcome = wait_until(
            lambda: self._verdict(namespace, name), timeout=timeout, interval=POLL, message=f"{name} decided"
        )
        outcome.seconds = time.monotonic() - started
        return outcome

    def _verdict(self, namespace: str, name: str) -> Placed | None:
        pod = self.plane.core.read_namespaced_pod(name, namespace)
        if pod.spec and pod.spec.node_name:
            return Placed(pod.spec.node_name)
        for condition in (pod.status.conditions or []) if pod.status else []:
            if condition.type == "PodScheduled" and condition.status == "False" and condition.reason:
                return Placed(None, f"{condition.reason}: {condition.message}")
        return None

    def leave(self, namespace: str, names: list[str]) -> None:
        """Delete the pods and their claims; return once every claim is gone (deallocated), plus `settle`."""
        if not names:
            return
        for name in names:
            self._ignore_missing(
                partial(self.plane.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0)
            )
            self._ignore_missing(
                partial(self.plane.resource.delete_namespaced_resource_claim, f"{name}-gpu", namespace)
            )
        for name in names:
            wait_until(
                partial(self._gone, namespace, f"{name}-gpu"),
                timeout=120,
                interval=POLL,
                message=f"claim of {name} gone",
            )
        time.sleep(self.settle)

    def _gone(self, namespace: str, claim: str) -> bool:
        try:
            self.plane.resource.read_namespaced_resource_claim(claim, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    @staticmethod
    def _ignore_missing(call: Callable[[], object]) -> None:
        try:
            call()
        except ApiException as exc:
            if exc.status != 404:
                raise

    def finish(self, namespace: str, names: list[str]) -> None:
        """End a stream: whatever is left leaves, then the namespace goes."""
        self.leave(namespace, names)
        self.plane.delete_namespace(namespace)


# --- a stream ----------------------------------------------------------------------------------------------------


def run_stream(
    cluster: RealCluster, shape: Shape, arrivals: list[Arrival], mode: str, timeout: float
) -> tuple[Outcome, list[float]]:
    """(a) or (c) over one stream in drop mode, as placement_bench.run does in-process: departures first in each
    tick, then the arrival. Returns the outcome and each arrival's seconds until it was decided."""
    namespace = cluster.new_namespace(f"{shape.name}-{mode}")
    outcome = Outcome()
    live: list[tuple[int, str, int]] = []  # leaves at, pod name, GPU memory (Gi)
    decided: list[float] = []
    for arrival in arrivals:
        leaving = [entry for entry in live if entry[0] <= arrival.index]
        for entry in leaving:
            live.remove(entry)
        cluster.leave(namespace, [name for _, name, _ in leaving])
        live_gi = sum(gi for _, _, gi in live)
        kind = shape.kinds[arrival.kind]
        name = f"pod-{arrival.index}"
        placed = cluster.arrive(namespace, name, kind.request, mode, timeout)
        decided.append(placed.seconds)
        if placed.node is None:
            if outcome.first_refusal_gi is None:
                outcome.first_refusal_gi, outcome.first_refusal_pods = live_gi, len(live)
                print(f"    ({mode}) first refusal at pod {arrival.index} ({kind.name}): {placed.message}", flush=True)
            if "does not exist" in placed.message:
                print(f"    ({mode}) pod {arrival.index} refused before its claim was seen: {placed.message}")
            cluster.leave(namespace, [name])
        else:
            live.append((arrival.index + arrival.lifetime, name, kind.memory_gi))
            live_gi += kind.memory_gi
            outcome.placed += 1
            outcome.waits.append(0)
        outcome.utilisation.append(live_gi / shape.capacity_gi)
    cluster.finish(namespace, [name for _, name, _ in live])
    return outcome, decided


# --- the table ---------------------------------------------------------------------------------------------------


def main_control_plane(args: argparse.Namespace) -> None:
    """One control plane per shape; per seed the bound (d), then (a) and (c) on the real kube-scheduler."""
    print(HEADER[: HEADER.index("wait") - 4].rstrip(), flush=True)
    summary: list[tuple[str, int, Outcome, Outcome, Outcome]] = []
    seconds: dict[str, list[float]] = {mode: [] for mode in PROFILES}
    started = time.monotonic()
    for shape_name in args.shapes:
        shape = SHAPES[shape_name]()
        began = time.monotonic()
        cluster = RealCluster(shape.objects(), args.settle)
        print(f"  {shape.name}: control plane up in {time.monotonic() - began:.0f} s", flush=True)
        try:
            for seed in args.seeds:
                arrivals = stream(shape, args.pods, seed)
                limit = bound(shape, arrivals)
                outcomes = {}
                for mode in PROFILES:
                    outcomes[mode], decided = run_stream(cluster, shape, arrivals, mode, args.timeout)
                    seconds[mode].extend(decided)
                print(_bound_row(shape, seed, limit), flush=True)
                for row in report_stream(shape, seed, False, outcomes, limit, modes=tuple(PROFILES)):
                    print(row, flush=True)
                summary.append((shape.name, seed, limit, outcomes["a"], outcomes["c"]))
            calls = extender_metrics(cluster.plane.components["extender"].url)
            print(
                f"  {shape.name}: the extender answered "
                + ", ".join(f"{int(count)} {verb}" for verb, (_, count) in sorted(calls.items())),
                flush=True,
            )
        finally:
            cluster.stop()
    print(f"\nreal control plane, drop mode ({time.monotonic() - started:.0f} s); (b) not run in this mode")
    for name, seed, limit, a, c in summary:
        print(
            f"{name:<12}{seed:>5}  GiAt1st (d) {limit.first_refusal_gi}  (a) {a.first_refusal_gi}  "
            f"(c) {c.first_refusal_gi}  (a)/(d) {_ratio(a.first_refusal_gi, limit.first_refusal_gi)}  "
            f"(c)/(d) {_ratio(c.first_refusal_gi, limit.first_refusal_gi)}  "
            f"(c)/(a) {_ratio(c.first_refusal_gi, a.first_refusal_gi)}  placed (a) {a.placed} (c) {c.placed}"
        )
    for mode, values in seconds.items():
        if values:
            print(
                f"({mode}) seconds from pod creation to bound/refused: median {statistics.median(values):.3f}, "
                f"max {max(values):.3f} over {len(values)} pods"
            )


def _bound_row(shape: Shape, seed: int, limit: Outcome) -> str:
    gi = limit.first_refusal_gi if limit.first_refusal_gi is not None else "-"
    pods = limit.first_refusal_pods if limit.first_refusal_pods is not None else "-"
    return f"{shape.name:<12}{seed:>5} {'':<5}{'d':>3}{gi:>8}{pods:>6}"
