"""Build the control-plane binaries (and Kueue's controller manager) that the end-to-end tests run.

The versions are pinned by the Go modules in ``tests/e2e/harness`` (Kubernetes, etcd) and
``tests/e2e/kueue`` (Kueue; its own module because Kueue v0.19.2 builds against the k8s.io v0.36 libraries,
the control plane against v0.37); the binaries are built with the ordinary Go toolchain from the Go module
proxy into ``tests/e2e/.build/<k8s-version>/`` and ``tests/e2e/.build/kueue-<version>/`` (gitignored) and
reused while they are there.

Usage from the command line::

    python -m testkit.builds.kubernetes            # build what is missing, print the paths
    python -m testkit.builds.kubernetes --force    # rebuild everything
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testkit.builds.go import build_env, locate_go, pinned_version

# The Go modules that pin the versions, and the built output, stay beside the end-to-end tests.
E2E = Path(__file__).resolve().parents[2] / "tests" / "e2e"
HARNESS = E2E / "harness"
KUEUE_MODULE = E2E / "kueue"
BUILD_ROOT = E2E / ".build"

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


def _module_version(module: str, go_module_dir: Path = HARNESS) -> str:
    version = pinned_version(go_module_dir / "go.mod", module)
    if version is None:
        raise BuildError(f"{module} is not required in {go_module_dir / 'go.mod'}")
    return version


def kubernetes_version() -> str:
    """The pinned k8s.io/kubernetes version, e.g. ``v1.37.2``."""
    return _module_version("k8s.io/kubernetes")


def etcd_version() -> str:
    """The pinned etcd server version, e.g. ``v3.7.0``."""
    return _module_version("go.etcd.io/etcd/server/v3")


def build_dir() -> Path:
    return BUILD_ROOT / kubernetes_version()


def find_go() -> str:
    go = locate_go()
    if go is None:
        raise BuildError(
            "the Go toolchain (`go`) is not installed or not on PATH; it is needed to build "
            "etcd, kube-apiserver, kube-controller-manager and kube-scheduler for the e2e tests"
        )
    return go


def _go_env() -> dict[str, str]:
    return build_env()


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


# --- Kueue -------------------------------------------------------------------------------------------------

KUEUE_GO_MODULE = "sigs.k8s.io/kueue"
KUEUE_PACKAGE = "sigs.k8s.io/kueue/cmd/kueue"
# Kueue's own manifests, copied from its module next to the binary: the CRDs with the kustomization that says
# which of them get a conversion webhook, and the webhook configurations with the kustomization that scopes
# the job-framework webhooks (tests/e2e/kueue_controller.py reads them; nothing of Kueue's is committed here).
KUEUE_CONFIG_DIRS = ("config/components/crd", "config/components/webhook")


def kueue_version() -> str:
    """The pinned Kueue version, e.g. ``v0.19.2``."""
    return _module_version(KUEUE_GO_MODULE, KUEUE_MODULE)


def kueue_build_dir() -> Path:
    return BUILD_ROOT / f"kueue-{kueue_version()}"


def kueue_binary(directory: Path | None = None) -> Path:
    return (directory or kueue_build_dir()) / "kueue"


def kueue_config_dir(directory: Path | None = None) -> Path:
    """Where the copied ``config/components/{crd,webhook}`` of the pinned Kueue module are."""
    return (directory or kueue_build_dir()) / "config"


def _downloaded_module(go: str, module: str) -> dict[str, Any]:
    """``go mod download -json`` of a module at the version tests/e2e/kueue/go.mod pins (downloaded when absent):
    its Dir in the module cache, among the rest."""
    proc = subprocess.run(
        [go, "mod", "download", "-json", module],
        cwd=KUEUE_MODULE,
        env=_go_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise BuildError(f"go mod download {module} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    info: dict[str, Any] = json.loads(proc.stdout)
    if not info.get("Dir"):
        raise BuildError(f"go mod download {module} did not report a module directory: {proc.stdout}")
    return info


def _kueue_module_info(go: str) -> dict[str, Any]:
    """The pinned Kueue module in the module cache."""
    return _downloaded_module(go, KUEUE_GO_MODULE)


JOBSET_GO_MODULE = "sigs.k8s.io/jobset"  # the version Kueue v0.19.2's go.mod requires (tests/e2e/kueue/go.mod)
JOBSET_CRD = "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"


def ensure_jobset_crd() -> Path:
    """The folder holding the JobSet CRD of the JobSet module Kueue v0.19.2 builds against, copied from the
    module cache (downloaded when absent): Kueue's jobset integration needs the kind to exist. The JobSet
    controller itself is not built: scenarios create the Jobs it would (tests/e2e/test_kueue_workload_scenarios.py)."""
    out_dir = kueue_build_dir() / "jobset-crd"
    target = out_dir / Path(JOBSET_CRD).name
    if target.is_file():
        return out_dir
    module_dir = Path(_downloaded_module(find_go(), JOBSET_GO_MODULE)["Dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / ".partial"
    shutil.copyfile(module_dir / JOBSET_CRD, staging)
    staging.chmod(0o644)
    staging.replace(target)
    return out_dir


def ensure_kueue(force: bool = False, quiet: bool = False) -> Path:
    """Return the folder holding Kueue's controller manager (``kueue``) and its ``config/`` manifests,
    building / copying what is missing. Raises BuildError when `go` is missing or the build fails."""
    out_dir = kueue_build_dir()
    binary, config_dir = kueue_binary(out_dir), kueue_config_dir(out_dir)
    have_config = all((config_dir / Path(d).name).is_dir() for d in KUEUE_CONFIG_DIRS)
    if not force and os.access(binary, os.X_OK) and have_config:
        return out_dir

    go = find_go()
    version = kueue_version()
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    info = _kueue_module_info(go)
    module_dir = Path(info["Dir"])
    staging_config = out_dir / ".config-partial"
    shutil.rmtree(staging_config, ignore_errors=True)
    for relative in KUEUE_CONFIG_DIRS:
        shutil.copytree(module_dir / relative, staging_config / Path(relative).name)
    for path in staging_config.rglob("*"):  # the module cache is read-only; our copy need not be
        path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(config_dir, ignore_errors=True)
    staging_config.replace(config_dir)
    if os.access(binary, os.X_OK) and not force:
        return out_dir

    ldflags = f"-s -w -X {KUEUE_GO_MODULE}/pkg/version.GitVersion={version}"
    staging = out_dir / ".kueue-partial"
    cmd = [go, "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(staging), KUEUE_PACKAGE]
    log_path = out_dir / "build.log"
    if not quiet:
        print(
            f"e2e: building Kueue {version} ({KUEUE_PACKAGE}) into {out_dir}; a cold build takes about "
            f"5 minutes on 2 cores, log: {log_path}",
            file=sys.stderr,
            flush=True,
        )
    with log_path.open("w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.run(cmd, cwd=KUEUE_MODULE, env=_go_env(), stdout=log, stderr=subprocess.STDOUT)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text().splitlines()[-40:])
        raise BuildError(
            f"go build of Kueue failed (exit {proc.returncode}) after {elapsed:.0f}s; see {log_path}:\n{tail}"
        )
    if not staging.is_file():
        raise BuildError(f"go build succeeded but did not produce {staging}")
    staging.replace(binary)
    if not quiet:
        print(f"e2e: built Kueue {version} in {elapsed:.0f}s ({elapsed / 60:.1f} min)", file=sys.stderr)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="rebuild even if the binaries exist")
    args = parser.parse_args(argv)
    try:
        paths = ensure_binaries(force=args.force)
        paths["kueue"] = kueue_binary(ensure_kueue(force=args.force))
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
