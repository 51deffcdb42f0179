"""Build the Go oracle (the real upstream structured allocator) in ``tests/oracle``.

``ensure_oracle_binary()`` builds ``tests/oracle`` (a small Go program linking
``k8s.io/dynamic-resource-allocation/structured``) into ``tests/oracle/.build/<key>/oracle``
the first time it is needed and returns its path. It lives in ``testkit`` rather than beside the Go sources
so that the benchmarks (``bench/compare_upstream.py``) can build and run the oracle without importing
``tests``; ``tests/oracle/oracle.py`` re-exports it and adds the scenario runners.

Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testkit.builds.go import locate_go

# The Go sources stay beside the Python half of the oracle, in tests/oracle.
ORACLE_DIR = Path(__file__).resolve().parents[2] / "tests" / "oracle"
BUILD_DIR = ORACLE_DIR / ".build"
BINARY_NAME = "oracle"

# Where Go usually lives when it is not on PATH (the official tarball's location).

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
    found = locate_go()
    if found:
        return Path(found)
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
