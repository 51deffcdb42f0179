"""The Go toolchain as the test harnesses use it (e2e control plane and Kueue, the upstream-allocator oracle and
table exporter, helm and kustomize): where `go` is, the environment every build runs with, and the version a
go.mod pins. Each harness raises its own error when something is missing, saying what it needed Go for."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

FALLBACK_GO = (Path("/usr/local/go/bin/go"), Path.home() / "go" / "bin" / "go")


def locate_go() -> str | None:
    """`go` on PATH, else in $GOROOT/bin or the usual install folders; None when there is none."""
    found = shutil.which("go")
    if found:
        return found
    goroot = os.environ.get("GOROOT")
    for candidate in ([Path(goroot) / "bin" / "go"] if goroot else []) + list(FALLBACK_GO):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def build_env() -> dict[str, str]:
    """Builds are reproducible from the committed go.mod/go.sum and never fetch a toolchain."""
    env = dict(os.environ)
    env["GOWORK"] = "off"  # never pick up a go.work from a parent folder
    env["CGO_ENABLED"] = "0"  # as the upstream releases build these binaries; faster too
    env["GOFLAGS"] = "-mod=readonly -buildvcs=false"  # go.sum is committed: never rewrite it
    env.setdefault("GOTOOLCHAIN", "local")  # use the installed toolchain, never download another
    return env


def pinned_version(go_mod: Path, module: str) -> str | None:
    """The version of `module` that go.mod requires (e.g. v1.37.2), or None."""
    text = go_mod.read_text(encoding="utf-8")
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    return match.group(1) if match else None
