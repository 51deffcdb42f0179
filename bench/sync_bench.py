"""Loading a big cluster through the same path as a live list, and the cost of one claim update.

Run: .venv/bin/python -m bench.sync_bench [--nodes 5000] [--pods 20000]
Objects are decoded from JSON bytes (as the live source receives them), parsed and indexed with
store.replace per kind; then one ResourceClaim update is applied and a snapshot taken, as a watch event
followed by the next filter request would.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time

import orjson

from extender.decisions.quota.attribution import pod_usage
from extender.decisions.quota.context import KueueConfigRef, build_quota_context
from extender.service.gc_tuning import freeze_loaded_state, tune_for_large_heap
from extender.state.indexes.usage import UsageIndex
from extender.state.store import ClusterStore
from testkit import builders as b
from testkit.clusters import cluster_objects


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    args = parser.parse_args()
    tune_for_large_heap()
    objects = cluster_objects(args.nodes, pods=args.pods, with_quota=True)
    payloads = {kind: orjson.dumps({"items": items}) for kind, items in objects.items()}
    del objects
    gc.collect()
    before = rss_mb()
    started = time.perf_counter()
    store = ClusterStore()
    for kind, payload in payloads.items():
        store.replace(kind, orjson.loads(payload)["items"])
    store.set_synced(True)
    snapshot = store.snapshot()
    context = build_quota_context(snapshot, None, KueueConfigRef())
    tracker = UsageIndex()
    tracker.totals(snapshot, context, lambda at, pod: pod_usage(at, pod, context))
    freeze_loaded_state()
    ready = time.perf_counter() - started
    del payloads
    gc.collect()
    after = rss_mb()
    print(f"{args.nodes} nodes x 8 devices, {len(snapshot.pods)} pods, {len(snapshot.claims)} claims")
    print(f"time to ready (decode + parse + index + first snapshot + usage): {ready:.2f} s")
    print(f"peak RSS: {after:.0f} MB (before loading: {before:.0f} MB)")
    update_costs = []
    for index in range(200):
        node = f"node-{index:05d}"
        claim = b.claim(
            f"held-{index}",
            "bench",
            [b.exact_request("gpu", 1)],
            allocated=[("gpu", node, "gpu-7")],
            allocated_node=node,
            reserved_for=[(f"holder-{index}", f"uid-holder-{index}")],
        )
        raw = orjson.loads(orjson.dumps(claim))
        begin = time.perf_counter()
        store.apply("ResourceClaim", "MODIFIED", raw)
        snapshot = store.snapshot()
        tracker.totals(snapshot, context, lambda at, pod: pod_usage(at, pod, context))
        update_costs.append(time.perf_counter() - begin)
    p50 = statistics.median(update_costs) * 1000
    print(
        f"one ResourceClaim update (apply + snapshot + usage delta): p50 {p50:.2f} ms,"
        f" max {max(update_costs) * 1000:.2f} ms; full usage recomputes: {tracker.full_recomputes}"
    )


if __name__ == "__main__":
    main()
