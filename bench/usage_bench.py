"""The usage index over N bound pods, each with a 2-GPU claim generated for it: a full recompute (what a Kueue
object change costs) and one pod event (what a binding costs), the quota view included.

    .venv/bin/python -m bench.usage_bench --pods 2000
"""

from __future__ import annotations

import argparse
import time

from testkit import builders as b
from testkit.scenarios import gpu_pod
from tests.support.quota import base_objects
from tests.support.scenarios import engine_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--events", type=int, default=200)
    args = parser.parse_args()
    pods = args.pods
    engine = engine_for(base_objects({"on-demand": {"nominal": 10 * pods}}, od_nodes=pods // 4 + 1, spot_nodes=0))
    store = engine.store
    for index in range(pods):
        name, node = f"p{index}", f"on-demand-{index // 4}"
        uid = f"uid-team-a-{name}"
        claim = b.claim(
            f"{name}-gpu",
            "team-a",
            [b.exact_request("gpu", 2)],
            allocated=[("gpu", node, f"gpu-{2 * (index % 4) + offset}") for offset in (0, 1)],
            allocated_node=node,
            reserved_for=[(name, uid)],
            owner_uid=uid,
            owner_name=name,
        )
        store.apply("ResourceClaim", "ADDED", claim)
        store.apply("Pod", "ADDED", gpu_pod(name, claim_statuses={"gpu": f"{name}-gpu"}, node_name=node))
    engine.quota_view()
    best = float("inf")
    for _ in range(3):
        engine.views.usage_index._basis = None  # the next view recomputes everything, as a new quota context does
        started = time.perf_counter()
        engine.quota_view()
        best = min(best, time.perf_counter() - started)
    started = time.perf_counter()
    for index in range(args.events):
        name, node = f"p{index % pods}", f"on-demand-{(index % pods) // 4}"
        phase = "Running" if index % 2 == 0 else "Pending"
        store.apply(
            "Pod", "MODIFIED", gpu_pod(name, claim_statuses={"gpu": f"{name}-gpu"}, node_name=node, phase=phase)
        )
        engine.quota_view()
    per_event = (time.perf_counter() - started) / args.events
    print(f"pods={pods} full recompute {best * 1000:.1f} ms (best of 3), one pod event {per_event * 1000:.2f} ms")


if __name__ == "__main__":
    main()
