"""Watch events recorded from a real control plane, replayed: what one event costs the extender, per node count.

Run: .venv/bin/python -m bench.watch_replay [--nodes 200 1000] [--pods 400] [--replays 2]

The e2e control plane (testkit/control_plane.py, binaries from tests/e2e/.build) with N nodes x 8 GPUs and
Kueue's objects, as bench/e2e_bench.py builds it; a snapshot of the cluster (`write_snapshot`); then one burst
of one-GPU pods through a plain kube-scheduler (e2e_bench.run_round: the round's namespace, LocalQueue, claims,
pods, bindings, deletion) while the extender's own watcher class (ResourceWatcher) records every frame of those
four collections. No extender runs there: the frames are what the extender's watches would have received.

Each replay starts a fresh extender state in this process (SchedulingService over the snapshot) and takes the
frames in the order received through ResourceWatcher.apply_frame, the watch threads' own path (decode, parse,
store), each that made a new version followed by the view keeper's work (`SchedulingService.catch_up`: the
snapshot, the usage indexes and the reservations brought to it; the keeper waits for a new version, and a frame
that changes nothing the models parse makes none). Timed with the thread's CPU clock, warm and with the CPU
caches evicted before each frame (bench/loop_bench.py --cold says why); medians over frames, then over replays.

One watch event should cost the same whatever the cluster's size: compare the rows.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from io import StringIO
from pathlib import Path
from threading import Lock
from typing import Any

import bench.loop_bench as loop_bench
from bench.e2e_bench import KUEUE, find_binaries, kueue_objects, populate, run_round, start_schedulers
from extender.kube.api import KubeApi, load_kubeconfig
from extender.service import ExtenderConfig, SchedulingService
from extender.state.kinds import KINDS_BY_NAME
from extender.state.live.resources import Resource
from extender.state.live.snapshot_writer import write_snapshot
from extender.state.live.watcher import ResourceWatcher, WatchSettings
from extender.state.sources import SnapshotSource
from extender.state.store import ClusterStore
from testkit.control_plane import KUEUE_CRD_DIR, start_control_plane

# What a burst changes, at the versions the e2e control plane serves.
RECORDED = (("Namespace", "v1"), ("LocalQueue", KUEUE[1]), ("ResourceClaim", "v1"), ("Pod", "v1"))
QUIET_SECONDS = 2.0  # the recording ends once no frame arrived for this long after the round


class RecordingWatcher(ResourceWatcher):
    """The extender's own watcher (list, then watch, resumed where a dropped stream stopped) into a store of its
    own, keeping every frame it applies, in the order received across the recorded collections."""

    def __init__(
        self, api: KubeApi, resource: Resource, store: ClusterStore, frames: list[tuple[str, bytes]], lock: Lock
    ) -> None:
        super().__init__(api, resource, store, WatchSettings())
        self._frames = frames
        self._frames_lock = lock

    def apply_frame(self, line: bytes) -> Any:
        with self._frames_lock:
            self._frames.append((self.resource.kind, line))
        return super().apply_frame(line)


def record(nodes: int, gpus: int, pods: int, qps: int) -> tuple[str, list[tuple[str, bytes]]]:
    """The cluster before the burst (snapshot text) and every frame of the burst, in the order received."""
    workdir = Path(tempfile.mkdtemp(prefix=f"dra-bench-replay-{nodes}-"))
    plane = start_control_plane(workdir, find_binaries(), start_scheduler=False)
    try:
        plane.apply_crds(KUEUE_CRD_DIR)
        populate(plane, nodes, gpus)
        kueue_objects(plane, nodes * gpus)
        start_schedulers(plane, {}, qps)
        run_round(plane, "plain", -1, max(10, pods // 8))  # warm-up: kube-scheduler's informers and caches
        api = KubeApi(load_kubeconfig(plane.kubeconfig))
        snapshot = StringIO()
        write_snapshot(api.config, snapshot)
        frames: list[tuple[str, bytes]] = []
        lock = threading.Lock()
        recorders = [
            RecordingWatcher(api, Resource(KINDS_BY_NAME[kind], version), ClusterStore(), frames, lock)
            for kind, version in RECORDED
        ]
        for recorder in recorders:
            recorder.start()
        while not all(recorder.listed for recorder in recorders):
            time.sleep(0.05)
        run_round(plane, "plain", 0, pods)
        seen = -1
        while seen != len(frames):
            seen = len(frames)
            time.sleep(QUIET_SECONDS)
        for recorder in recorders:
            recorder.stop()
            recorder.join(10)
            if recorder.stats().relists:  # a watch expired and was healed by a relist: frames are missing
                raise SystemExit(f"the watch of {recorder.name} expired while recording; run again")
        return snapshot.getvalue(), frames
    finally:
        plane.stop()


def replay(snapshot: str, frames: list[tuple[str, bytes]], cold: bool) -> dict[str, list[float]]:
    """CPU seconds per frame: applying it (per kind) and the view keeper's work after it."""
    service = SchedulingService(SnapshotSource(text=snapshot), ExtenderConfig())
    service.start()
    service.catch_up()
    versions = dict(RECORDED)
    watchers = {
        kind: ResourceWatcher(None, Resource(KINDS_BY_NAME[kind], versions[kind]), service.store, WatchSettings())  # type: ignore[arg-type]  # never connects
        for kind in versions
    }
    spent: dict[str, list[float]] = {kind: [] for kind in versions}
    spent["keeper"] = []
    clock = time.thread_time
    try:
        for kind, line in frames:
            if cold:
                loop_bench.evict_caches()
            version = service.store.version
            started = clock()
            watchers[kind].apply_frame(line)
            applied = clock()
            spent[kind].append(applied - started)
            if service.store.version != version:  # the keeper wakes only for a new version (a no-op makes none)
                service.catch_up()
                spent["keeper"].append(clock() - applied)
    finally:
        service.stop()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--replays", type=int, default=2)
    parser.add_argument("--qps", type=int, default=5000, help="kube-scheduler clientConnection qps and burst")
    args = parser.parse_args()
    print(f"Watch frames of a {args.pods}-pod burst through a plain kube-scheduler, replayed {args.replays} times;")
    print("CPU per event in us (medians), then per pod in ms (all of a kind's frames / pods)")
    kinds = ("Pod", "ResourceClaim", "keeper")
    print(
        f"{'nodes':>6} {'caches':>7} {'frames':>7} "
        + " ".join(f"{k:>13}" for k in kinds)
        + "   per pod: "
        + " ".join(f"{k:>13}" for k in kinds)
    )
    loop_bench.enable_cache_eviction()
    for nodes in args.nodes:
        snapshot, frames = record(nodes, args.gpus, args.pods, args.qps)
        for cold in (False, True):
            per_event: dict[str, list[float]] = {kind: [] for kind in kinds}
            per_pod: dict[str, list[float]] = {kind: [] for kind in kinds}
            for _ in range(args.replays):
                spent = replay(snapshot, frames, cold)
                for kind in kinds:
                    per_event[kind].append(statistics.median(spent[kind]) * 1e6)
                    per_pod[kind].append(sum(spent[kind]) * 1000 / args.pods)
            events = " ".join(f"{statistics.median(per_event[k]):13.1f}" for k in kinds)
            pods = " ".join(f"{statistics.median(per_pod[k]):13.3f}" for k in kinds)
            print(f"{nodes:>6} {'cold' if cold else 'warm':>7} {len(frames):>7} {events}   per pod: {pods}", flush=True)


if __name__ == "__main__":
    main()
