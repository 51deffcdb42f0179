"""Server-side render time of the web view's pages on generated clusters (Flask test client, no network).

Run: .venv/bin/python -m bench.web_bench [--nodes 1000 5000] [--repeat 5]
Each page is fetched once to warm up, then `repeat` times; the median and the worst are printed. The target:
every page under one second at 5000 nodes. The grid classifies every device of every node (exact
per-flavor totals) and draws one page of 100 nodes.
"""

from __future__ import annotations

import argparse
import statistics
import time

from extender.transport.app import create_app
from testkit.web_cluster import varied_service

PAGES = (
    "/ui/nodes",
    "/ui/nodes?page=7",
    "/ui/nodes?state=free&flavor=spot",
    "/ui/nodes/node-special",
    "/ui/pods",
    "/ui/pods/bench/waiting-0",
    "/ui/queues",
)


def measure(nodes: int, repeat: int) -> dict[str, tuple[float, float]]:
    started = time.perf_counter()
    service = varied_service(nodes)
    print(f"{nodes} nodes: cluster built and 2 pods filtered in {time.perf_counter() - started:.1f} s")
    client = create_app(service, serve_scheduling=False).test_client()
    results = {}
    for url in PAGES:
        assert client.get(url).status_code == 200, url
        times = []
        for _ in range(repeat):
            begin = time.perf_counter()
            response = client.get(url)
            times.append(time.perf_counter() - begin)
            assert response.status_code == 200, url
        results[url] = (statistics.median(times), max(times))
        print(f"  {url:<36} median {results[url][0] * 1000:7.1f} ms   worst {results[url][1] * 1000:7.1f} ms")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for nodes in args.nodes:
        measure(nodes, args.repeat)


if __name__ == "__main__":
    main()
