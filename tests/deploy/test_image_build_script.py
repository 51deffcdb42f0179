"""image/build.sh's choice of OCI runtime, without building anything: a stand-in podman records how it is called.

crun, podman's usual runtime, refuses hosts whose cgroups are in hybrid mode (v1 controllers with cgroup2 at
/sys/fs/cgroup/unified: "cgroups in hybrid mode not supported"); runc runs there. The script must build with runc
on such a host, say to install runc when it is missing, and leave the runtime alone elsewhere. The cgroup layout
comes from a stand-in root (CGROUP_ROOT). The real build is tests/deploy/test_image.py's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.paths import ROOT

BUILD = ROOT / "image" / "build.sh"

FAKE_PODMAN = """#!/bin/sh
echo "$@" >> "$PODMAN_LOG"
case "$*" in
  *"image inspect --format"*) echo 1000000 ;;
esac
exit 0
"""


def cgroup_root(tmp_path: Path, layout: str) -> Path:
    root = tmp_path / f"cgroup-{layout}"
    if layout == "hybrid":
        (root / "unified").mkdir(parents=True)
        (root / "unified" / "cgroup.controllers").write_text("", encoding="utf-8")
        (root / "memory").mkdir()
    else:  # unified (v2)
        root.mkdir()
        (root / "cgroup.controllers").write_text("cpu memory\n", encoding="utf-8")
    return root


def system_bin_without_runc(tmp_path: Path) -> Path:
    """The commands of /usr/bin and /bin, runc left out: a host without runc."""
    directory = tmp_path / "system-bin"
    if not directory.exists():
        directory.mkdir()
        for source in (Path("/usr/bin"), Path("/bin")):
            for command in source.iterdir():
                target = directory / command.name
                if command.name != "runc" and not target.exists():
                    target.symlink_to(command)
    return directory


def run_build(
    tmp_path: Path, layout: str, *, runc: bool, runtime: str = ""
) -> tuple[subprocess.CompletedProcess[str], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("podman", FAKE_PODMAN), *((("runc", "#!/bin/sh\nexit 0\n"),) if runc else ())):
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    path = f"{bin_dir}:{system_bin_without_runc(tmp_path)}"
    log = tmp_path / "podman.log"
    log.write_text("", encoding="utf-8")
    env = {
        "PATH": path,
        "HOME": str(tmp_path),
        "PODMAN_LOG": str(log),
        "CGROUP_ROOT": str(cgroup_root(tmp_path, layout)),
        "BASE": "localhost/some-base:1",
        "IMAGE": "localhost/dra-quota-extender:script-test",
        "PIP_CERT": os.devnull,
    }
    if runtime:
        env["RUNTIME"] = runtime
    result = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=60, env=env, check=False)
    return result, log.read_text(encoding="utf-8")


def build_call(log: str) -> str:
    (call,) = [line for line in log.splitlines() if " build " in f" {line} "]
    return call


def test_hybrid_cgroups_build_with_runc(tmp_path: Path) -> None:
    result, log = run_build(tmp_path, "hybrid", runc=True)
    assert result.returncode == 0, result.stderr
    assert build_call(log).startswith("--runtime runc build ")
    assert "cgroups in hybrid mode; building with runc" in result.stdout


def test_hybrid_cgroups_without_runc_say_what_to_install(tmp_path: Path) -> None:
    result, log = run_build(tmp_path, "hybrid", runc=False)
    assert result.returncode == 1
    assert "hybrid mode" in result.stderr and "apt-get install runc" in result.stderr
    assert " build " not in f" {log} "


def test_unified_cgroups_keep_the_builders_runtime(tmp_path: Path) -> None:
    result, log = run_build(tmp_path, "unified", runc=True)
    assert result.returncode == 0, result.stderr
    assert build_call(log).startswith("build ") and "--runtime" not in build_call(log)


def test_an_explicit_runtime_wins(tmp_path: Path) -> None:
    result, log = run_build(tmp_path, "hybrid", runc=False, runtime="crun")
    assert result.returncode == 0, result.stderr
    assert build_call(log).startswith("--runtime crun build ")
