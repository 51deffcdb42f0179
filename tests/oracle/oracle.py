"""Python access to the Go oracle: the real upstream structured allocator.

``ensure_oracle_binary()`` (``testkit/builds/oracle.py``, with the suite's other builds) builds ``tests/oracle``
(a small Go program linking ``k8s.io/dynamic-resource-allocation/structured``) into
``tests/oracle/.build/<key>/oracle`` the first time it is needed; ``run_scenarios()`` evaluates a batch of
scenarios in one process. The scenario and result formats are described in ``tests/oracle/README.md``.

Standard library only (plus ``testkit``), so that the differential tests and the benchmark suite can use it
without extra dependencies.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from testkit.builds.oracle import OracleError, ensure_oracle_binary

__all__ = ["bench_scenario", "run_scenario", "run_scenarios"]


def _run(args: list[str], payload: str, timeout: float | None) -> str:
    binary = ensure_oracle_binary()
    try:
        proc = subprocess.run(
            [str(binary), *args],
            input=payload,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise OracleError(f"oracle {' '.join(args)} timed out after {timeout}s") from exc
    if proc.returncode != 0:
        raise OracleError(f"oracle {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def run_scenarios(
    scenarios: list[dict[str, Any]],
    *,
    timeout: float | None = None,
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """Evaluate scenarios with the upstream allocator in one process (batch mode).

    Returns one result per scenario, in order: ``{"nodes": {name: {"feasible", "allocation",
    "error", "reason"}}, "features", "allocator", "error", "name"}``.
    """
    if not scenarios:
        return []
    args = [] if workers is None else [f"-j={workers}"]
    out = _run(args, json.dumps(scenarios), timeout)
    results = json.loads(out)
    if not isinstance(results, list) or len(results) != len(scenarios):
        raise OracleError(f"oracle returned {type(results).__name__} for {len(scenarios)} scenarios")
    return results


def run_scenario(scenario: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
    """Evaluate one scenario."""
    return run_scenarios([scenario], timeout=timeout)[0]


def bench_scenario(
    scenario: dict[str, Any],
    *,
    bench_time_s: float = 3.0,
    min_iterations: int = 50,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Time upstream decisions (NewAllocator + Allocate on every node) for one scenario.

    Returns the oracle's ``-bench`` JSON: ``{"allocator", "nodes", "iterations",
    "decision": {"meanNs", "p50Ns", "p99Ns", "minNs", "maxNs", "perNodeP50Ns"}, "allocateOnly": {...},
    "feasibleNodes", "errorNodes"}``.
    """
    args = ["-bench", f"-bench-time={bench_time_s}s", f"-bench-min-iters={min_iterations}"]
    return json.loads(_run(args, json.dumps(scenario), timeout))
