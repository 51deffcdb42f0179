"""Build the control-plane binaries that the end-to-end tests run.

The versions are pinned by the Go module in ``tests/e2e/harness`` (go.mod + go.sum); the binaries are
built with the ordinary Go toolchain from the Go module proxy into ``tests/e2e/.build/<k8s-version>/``
(gitignored) and reused while they are there.

Usage from the command line::

    python -m tests.e2e.build            # build what is missing, print the paths
    python tests/e2e/build.py --force    # rebuild everything
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "harness"
BUILD_ROOT = HERE / ".build"

# binary name -> Go package (all resolved through harness/go.mod)
PACKAGES: dict[str, str] = {
    "etcd": "go.etcd.io/etcd/server/v3",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
}

# `go build -o DIR` names a main package after its last path element, ignoring a /vN suffix.
_GO_OUTPUT_NAME = {"etcd": "server"}


class BuildError(RuntimeError):
    """The Go toolchain is missing or `go build` failed."""


def _module_version(module: str) -> str:
    text = (HARNESS / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if not match:
        raise BuildError(f"{module} is not required in {HARNESS / 'go.mod'}")
    return match.group(1)


def kubernetes_version() -> str:
    """The pinned k8s.io/kubernetes version, e.g. ``v1.37.2``."""
    return _module_version("k8s.io/kubernetes")


def etcd_version() -> str:
    """The pinned etcd server version, e.g. ``v3.7.0``."""
    return _module_version("go.etcd.io/etcd/server/v3")


def build_dir() -> Path:
    return BUILD_ROOT / kubernetes_version()


def find_go() -> str:
    go = shutil.which("go")
    if go is None:
        for candidate in ("/usr/local/go/bin/go", str(Path.home() / "go" / "bin" / "go")):
            if os.access(candidate, os.X_OK):
                go = candidate
                break
    if go is None:
        raise BuildError(
            "the Go toolchain (`go`) is not installed or not on PATH; it is needed to build "
            "etcd, kube-apiserver, kube-controller-manager and kube-scheduler for the e2e tests"
        )
    return go


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GOWORK"] = "off"  # never pick up a go.work from a parent folder
    env["CGO_ENABLED"] = "0"  # as the Kubernetes release builds the control plane; faster too
    env["GOFLAGS"] = "-mod=readonly -buildvcs=false"  # go.sum is committed: never rewrite it
    env.setdefault("GOTOOLCHAIN", "local")  # use the installed toolchain, never download another
    return env


def _ldflags(k8s_version: str) -> str:
    major, minor = k8s_version.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return " ".join(
        [
            "-s",
            "-w",
            f"-X {pkg}.gitVersion={k8s_version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    )


def binaries(directory: Path | None = None) -> dict[str, Path]:
    directory = directory or build_dir()
    return {name: directory / name for name in PACKAGES}


def ensure_binaries(force: bool = False, quiet: bool = False) -> dict[str, Path]:
    """Return {name: path} for etcd and the three Kubernetes components, building what is missing.

    Raises BuildError when `go` is missing or the build fails.
    """
    out_dir = build_dir()
    paths = binaries(out_dir)
    missing = [name for name, path in paths.items() if force or not os.access(path, os.X_OK)]
    if not missing:
        return paths

    go = find_go()
    k8s_version = kubernetes_version()
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    cmd = [go, "build", "-trimpath", f"-ldflags={_ldflags(k8s_version)}", "-o", str(staging)]
    cmd += [PACKAGES[name] for name in missing]
    log_path = out_dir / "build.log"
    if not quiet:
        print(
            f"e2e: building {', '.join(missing)} (Kubernetes {k8s_version}, etcd {etcd_version()}) "
            f"into {out_dir}; a cold build takes about 10 minutes on 2 cores, log: {log_path}",
            file=sys.stderr,
            flush=True,
        )
    start = time.monotonic()
    with log_path.open("w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.run(cmd, cwd=HARNESS, env=_go_env(), stdout=log, stderr=subprocess.STDOUT)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text().splitlines()[-40:])
        raise BuildError(f"go build failed (exit {proc.returncode}) after {elapsed:.0f}s; see {log_path}:\n{tail}")
    for name in missing:
        produced = staging / _GO_OUTPUT_NAME.get(name, name)
        if not produced.is_file():
            raise BuildError(f"go build succeeded but did not produce {produced}")
        produced.replace(paths[name])
    shutil.rmtree(staging, ignore_errors=True)
    if not quiet:
        print(f"e2e: built {', '.join(missing)} in {elapsed:.0f}s ({elapsed / 60:.1f} min)", file=sys.stderr)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="rebuild even if the binaries exist")
    args = parser.parse_args(argv)
    try:
        paths = ensure_binaries(force=args.force)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
