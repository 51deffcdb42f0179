"""Build helm, kustomize and promtool from Go modules into ``tools/.build/`` (gitignored), like the e2e binaries.

Neither has a Debian package that fits: Debian ships no helm at all, and its kubectl (1.32) embeds a kustomize too
old for the 1.37 surface. So both come from the Go module proxy, pinned by ``tools/go.mod`` (+ ``go.sum``) with
``tool`` directives:

- ``helm.sh/helm/v4/cmd/helm`` v4.3.2, built on k8s.io/* v0.37.2 (the e2e harness's Kubernetes);
- ``sigs.k8s.io/kustomize/kustomize/v5`` v5.8.1: the exact kustomize that ``kubectl kustomize`` of kubectl
  v1.37.2 runs (k8s.io/kubectl v0.37.2 requires kustomize/v5 v5.8.1 and calls its ``commands/build``), and
  already part of helm's module graph through k8s.io/kubectl, so adding it moves no dependency version.

One ``go build`` produces both (they share most packages). With ``-X .../internal/version.version`` helm reports
its real version (its own Makefile sets it the same way).

promtool (``promtool check rules`` / ``test rules`` on the alert rules, tests/deploy/test_monitoring_rules.py) is
``github.com/prometheus/prometheus/cmd/promtool`` at the module version of a Prometheus release (v0.316.0 is
Prometheus 3.16.0), pinned by its own ``tools/promtool/go.mod``: Prometheus' module graph (cloud service discovery,
OpenTelemetry) is far larger than helm's, and in one go.mod it would move helm's dependency versions. Debian's
``prometheus`` package also ships a promtool, but an older one (2.42 in bookworm) with a server and its service
beside it. Version stamped as Prometheus' own Makefile does (``github.com/prometheus/common/version``). Built
with the ``remove_all_sd`` tag (plugins/plugin_*.go): without the cloud service discoveries, which only
``promtool check service-discovery`` uses, the build has a fifth fewer packages (1116, not 1363).

Usage::

    python -m testkit.builds.tools            # build what is missing (all three), print the paths (or: make tools)
    python -m testkit.builds.tools --force    # rebuild
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from testkit.builds.go import build_env, locate_go, pinned_version

# The go.mod files that pin the versions, and the built output, stay in tools/.
TOOLS = Path(__file__).resolve().parents[2] / "tools"
BUILD_ROOT = TOOLS / ".build"

# binary name -> (Go package, its module)
PACKAGES: dict[str, tuple[str, str]] = {
    "helm": ("helm.sh/helm/v4/cmd/helm", "helm.sh/helm/v4"),
    "kustomize": ("sigs.k8s.io/kustomize/kustomize/v5", "sigs.k8s.io/kustomize/kustomize/v5"),
}


class BuildError(RuntimeError):
    """The Go toolchain is missing or `go build` failed."""


def module_version(module: str) -> str:
    """The version of ``module`` pinned in tools/go.mod, e.g. ``v4.3.2`` for helm.sh/helm/v4."""
    version = pinned_version(TOOLS / "go.mod", module)
    if version is None:
        raise BuildError(f"{module} is not required in {TOOLS / 'go.mod'}")
    return version


def build_dir() -> Path:
    """One folder per pinned pair of versions, so a version bump never reuses an old binary."""
    helm, kustomize = module_version("helm.sh/helm/v4"), module_version("sigs.k8s.io/kustomize/kustomize/v5")
    return BUILD_ROOT / f"helm-{helm}-kustomize-{kustomize}"


def binaries(directory: Path | None = None) -> dict[str, Path]:
    directory = directory or build_dir()
    return {name: directory / name for name in PACKAGES}


def find_go() -> str:
    go = locate_go()
    if go is None:
        raise BuildError("the Go toolchain (`go`) is not installed or not on PATH; it builds helm, kustomize, promtool")
    return go


def _go_env() -> dict[str, str]:
    return build_env()


def ensure_tools(force: bool = False, quiet: bool = False) -> dict[str, Path]:
    """Return {"helm": path, "kustomize": path}, building what is missing. Raises BuildError."""
    out_dir = build_dir()
    paths = binaries(out_dir)
    missing = [name for name, path in paths.items() if force or not os.access(path, os.X_OK)]
    if not missing:
        return paths
    ldflags = f"-s -w -X helm.sh/helm/v4/internal/version.version={module_version('helm.sh/helm/v4')}"
    versions = ", ".join(f"{n} {module_version(PACKAGES[n][1])}" for n in missing)
    _go_build(TOOLS, {n: PACKAGES[n][0] for n in missing}, out_dir, ldflags, quiet, f"{versions}: about 4 CPU-minutes")
    return paths


PROMTOOL_MODULE_DIR = TOOLS / "promtool"
PROMTOOL_PACKAGE = "github.com/prometheus/prometheus/cmd/promtool"
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"


def promtool_version() -> str:
    """The pinned Prometheus module version, e.g. ``v0.316.0``."""
    version = pinned_version(PROMTOOL_MODULE_DIR / "go.mod", PROMETHEUS_MODULE)
    if version is None:
        raise BuildError(f"{PROMETHEUS_MODULE} is not required in {PROMTOOL_MODULE_DIR / 'go.mod'}")
    return version


def prometheus_release(module_version: str) -> str:
    """The Prometheus release a module version stands for: v0.316.0 -> 3.16.0 (v0.MMM.P is release M.MM.P)."""
    _, minor, patch = module_version.lstrip("v").split(".", 2)
    return f"{int(minor) // 100}.{int(minor) % 100}.{patch}"


def promtool_path() -> Path:
    return BUILD_ROOT / f"promtool-{promtool_version()}" / "promtool"


def ensure_promtool(force: bool = False, quiet: bool = False) -> Path:
    """The pinned promtool, built when missing. Raises BuildError."""
    path = promtool_path()
    if not force and os.access(path, os.X_OK):
        return path
    release = prometheus_release(promtool_version())
    ldflags = f"-s -w -X github.com/prometheus/common/version.Version={release}"
    packages = {"promtool": PROMTOOL_PACKAGE}
    _go_build(PROMTOOL_MODULE_DIR, packages, path.parent, ldflags, quiet, "about 4 CPU-minutes", tags="remove_all_sd")
    return path


def _go_build(
    module_dir: Path, packages: dict[str, str], out_dir: Path, ldflags: str, quiet: bool, cold: str, tags: str = ""
) -> None:
    """`go build` of `packages` (binary name -> Go package) in `module_dir` into `out_dir`, through a staging
    folder so an interrupted build leaves no binary behind."""
    go = find_go()
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    cmd = [go, "build", "-trimpath", f"-ldflags={ldflags}", *([f"-tags={tags}"] if tags else []), "-o", str(staging)]
    cmd += packages.values()
    log_path = out_dir / "build.log"
    if not quiet:
        print(
            f"tools: building {', '.join(packages)} into {out_dir}; {cold} cold, seconds with a warm Go build "
            f"cache; log: {log_path}",
            file=sys.stderr,
            flush=True,
        )
    start = time.monotonic()
    with log_path.open("w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.run(cmd, cwd=module_dir, env=_go_env(), stdout=log, stderr=subprocess.STDOUT, check=False)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text(encoding="utf-8").splitlines()[-40:])
        raise BuildError(f"go build failed (exit {proc.returncode}) after {elapsed:.0f}s; see {log_path}:\n{tail}")
    for name in packages:
        produced = staging / name  # go build -o DIR names a main after its path, without /vN
        if not produced.is_file():
            raise BuildError(f"go build succeeded but did not produce {produced}")
        produced.replace(out_dir / name)
    shutil.rmtree(staging, ignore_errors=True)
    if not quiet:
        print(f"tools: built {', '.join(packages)} in {elapsed:.1f}s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="rebuild even if the binaries exist")
    args = parser.parse_args(argv)
    try:
        paths = {**ensure_tools(force=args.force), "promtool": ensure_promtool(force=args.force)}
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
