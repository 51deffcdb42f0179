"""Upstream's allocator test table as JSON, extracted at test time (nothing of upstream's is stored here).

``ensure_table()`` copies ``k8s.io/dynamic-resource-allocation@v0.37.2`` from the Go module cache into a temporary
directory, adds a hook to that copy's ``RunTestAllocator`` (structured/internal/allocatortesting/
allocator_testing.go: when the hook is set, the function hands its ``testcases`` map to the hook and returns),
puts our exporter (``exporter/table_export_test.go``) beside it, builds the package's test binary and runs it.
The JSON lands in the gitignored ``tests/upstream_table/.build/<key>/table.json``; the key hashes the module
version, the exporter and the patch, so any of those changing builds afresh. The temporary copy is removed.

Standard library only, like tests/oracle/oracle.py (``find_go`` is the oracle build's, testkit/builds/oracle.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from testkit.builds.oracle import ORACLE_DIR, OracleBuildError, find_go

MODULE = "k8s.io/dynamic-resource-allocation"
# The version kube-scheduler 1.37.2 links (tests/oracle/go.mod pins the same).
VERSION = "v0.37.2"
PACKAGE = "structured/internal/allocatortesting"
HERE = Path(__file__).resolve().parent
BUILD_DIR = HERE / ".build"
EXPORTER = HERE / "exporter" / "table_export_test.go"
BUILD_TIMEOUT_S = 1800

# What the last ensure_table() did, for the run's summary (tests/upstream_table/conftest.py).
build_note = ""

# The patch: RunTestAllocator's opening line (anchor) gets the hook call; the hook variable is appended.
ANCHOR = "\ttestcases map[string]AllocatorTestCase) {\n"
HOOK_CALL = "\tif tableExportHook != nil && tableExportHook(t, testcases) {\n\t\treturn\n\t}\n"
HOOK_DECL = "\nvar tableExportHook func(t *testing.T, testcases map[string]AllocatorTestCase) bool\n"


def table_key() -> str:
    digest = hashlib.sha256()
    for part in (MODULE, VERSION, ANCHOR, HOOK_CALL, HOOK_DECL):
        digest.update(part.encode() + b"\0")
    digest.update(EXPORTER.read_bytes())
    return digest.hexdigest()[:16]


def table_path() -> Path:
    return BUILD_DIR / table_key() / "table.json"


def _go(go: Path, args: list[str], cwd: Path, env: dict[str, str]) -> str:
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [str(go), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise OracleBuildError(f"go {' '.join(args)} timed out after {BUILD_TIMEOUT_S}s") from exc
    if proc.returncode != 0:
        raise OracleBuildError(
            f"go {' '.join(args)} in {cwd} failed (exit {proc.returncode}) after {time.monotonic() - start:.1f}s:\n"
            f"{proc.stderr.strip()}"
        )
    return proc.stdout


def patch_source(text: str) -> str:
    """RunTestAllocator with the hook; fails loudly when upstream's function no longer looks as expected."""
    if text.count(ANCHOR) != 1 or "func RunTestAllocator(" not in text:
        raise OracleBuildError(f"{PACKAGE}/allocator_testing.go: RunTestAllocator's signature changed; update ANCHOR")
    return text.replace(ANCHOR, ANCHOR + HOOK_CALL) + HOOK_DECL


def ensure_table() -> Path:
    """Build and run the exporter if the table for the current sources is not there yet; return its path."""
    global build_note
    target = table_path()
    if target.is_file():
        build_note = f"export reused from {target.relative_to(HERE)}"
        return target
    go = find_go()
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    start = time.monotonic()
    # `go mod download` from the oracle's module: its go.sum already vouches for this module version.
    info = json.loads(_go(go, ["mod", "download", "-json", f"{MODULE}@{VERSION}"], ORACLE_DIR, env))
    source_dir = Path(info["Dir"])
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="upstream-table-") as tmp:
        copy = Path(tmp) / "module"
        shutil.copytree(source_dir, copy)
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
        package = copy / PACKAGE
        testing_go = package / "allocator_testing.go"
        testing_go.write_text(patch_source(testing_go.read_text()))
        shutil.copy(EXPORTER, package / EXPORTER.name)
        binary = Path(tmp) / "tableexport.test"
        _go(go, ["test", "-c", "-vet=off", "-trimpath", "-o", str(binary), f"./{PACKAGE}"], copy, env)
        built = time.monotonic()
        fd, tmp_json = tempfile.mkstemp(prefix=".table-", suffix=".json", dir=target.parent)
        os.close(fd)
        run_env = {**env, "TABLE_EXPORT_OUT": tmp_json}
        proc = subprocess.run(
            [str(binary), "-test.run", "^TestTableExport$", "-test.count=1"],
            cwd=tmp,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            Path(tmp_json).unlink(missing_ok=True)
            raise OracleBuildError(f"table exporter failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}")
        Path(tmp_json).replace(target)
    done = time.monotonic()
    build_note = f"built the exporter in {built - start:.1f}s, exported in {done - built:.1f}s"
    print(f"upstream table: {build_note} -> {target}", file=sys.stderr)
    for entry in BUILD_DIR.iterdir():
        if entry.is_dir() and entry != target.parent:
            shutil.rmtree(entry, ignore_errors=True)
    return target


def load_table() -> list[dict[str, Any]]:
    return json.loads(ensure_table().read_text())


if __name__ == "__main__":
    print(ensure_table())
