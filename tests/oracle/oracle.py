"""Python access to the Go oracle: the real upstream structured allocator.

``ensure_oracle_binary()`` builds ``tests/oracle`` (a small Go program linking
``k8s.io/dynamic-resource-allocation/structured``) into ``tests/oracle/.build/<key>/oracle``
the first time it is needed; ``run_scenarios()`` evaluates a batch of scenarios in one process.
The scenario and result formats are described in ``tests/oracle/README.md``.

Standard library only, so that the differential tests and the benchmark suite can import it
without extra dependencies.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ORACLE_DIR = Path(__file__).resolve().parent
BUILD_DIR = ORACLE_DIR / ".build"
BINARY_NAME = "oracle"

# Where Go usually lives when it is not on PATH (the official tarball's location).
_FALLBACK_GO = (Path("/usr/local/go/bin/go"), Path.home() / "go" / "bin" / "go")

# A cold build downloads modules and compiles the Kubernetes dependencies: minutes on 2 cores.
BUILD_TIMEOUT_S = 1800


class OracleError(RuntimeError):
    """The oracle could not be built or run."""


class OracleUnavailableError(OracleError):
    """The Go toolchain is missing, so the oracle cannot be built here."""


class OracleBuildError(OracleError):
    """``go build`` failed."""


def find_go() -> Path:
    """Return the ``go`` executable or raise :class:`OracleUnavailableError`."""
    found = shutil.which("go")
    if found:
        return Path(found)
    goroot = os.environ.get("GOROOT")
    candidates = ([Path(goroot) / "bin" / "go"] if goroot else []) + list(_FALLBACK_GO)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise OracleUnavailableError(
        "the Go toolchain ('go') was not found on PATH, in $GOROOT/bin or /usr/local/go/bin; "
        "the upstream-allocator oracle in tests/oracle needs Go >= 1.26 to build "
        "(https://go.dev/doc/install, or your distribution's golang package)"
    )


def source_key() -> str:
    """Hash of go.sum (the pinned dependency set) plus the oracle's own Go sources.

    The build folder is named by it, so a dependency bump or a source edit builds afresh
    and a stale binary is never used.
    """
    digest = hashlib.sha256()
    files = [ORACLE_DIR / "go.sum", ORACLE_DIR / "go.mod", *sorted(ORACLE_DIR.glob("*.go"))]
    for path in files:
        digest.update(path.name.encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def binary_path() -> Path:
    """Where the binary for the current sources lives (it may not exist yet)."""
    return BUILD_DIR / source_key() / BINARY_NAME


def ensure_oracle_binary() -> Path:
    """Build the oracle if it is not built yet for the current go.sum and sources; return its path.

    Prints the build time to stderr when it builds. Raises :class:`OracleUnavailableError`
    when Go is missing and :class:`OracleBuildError` when the build fails.
    """
    target = binary_path()
    if target.is_file() and os.access(target, os.X_OK):
        return target
    go = find_go()
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build to a temporary name and rename: concurrent test processes never see half a file.
    fd, tmp_name = tempfile.mkstemp(prefix=".oracle-", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    cmd = [str(go), "build", "-trimpath", "-o", str(tmp), "."]
    start = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            cwd=ORACLE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        tmp.unlink(missing_ok=True)
        raise OracleBuildError(f"'{' '.join(cmd)}' timed out after {BUILD_TIMEOUT_S}s") from exc
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise OracleBuildError(
            f"'{' '.join(cmd)}' in {ORACLE_DIR} failed (exit {proc.returncode}) after {elapsed:.1f}s:\n"
            f"{proc.stderr.strip()}"
        )
    tmp.chmod(0o755)
    tmp.replace(target)
    print(f"oracle: built {target} in {elapsed:.1f}s", file=sys.stderr)
    _prune_stale_builds(keep=target.parent)
    return target


def _prune_stale_builds(keep: Path) -> None:
    """Remove binaries built from other sources (older go.sum or Go files)."""
    for entry in BUILD_DIR.iterdir():
        if entry.is_dir() and entry != keep:
            shutil.rmtree(entry, ignore_errors=True)


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
