"""The container image: built by `make image` (image/build.sh), run as the deployment runs it.

Builds the image (a warm build reuses podman's layer cache), then starts it with a read-only root filesystem,
as its non-root numeric user, every capability dropped, tmpfs only where the deployment has writable volumes
(/tmp; HOME for gunicorn's control socket), and serving the embedded demo: /healthz, /readyz and one filter
answer must be the demo's. Also checks what the image promises: the user, the labels, nothing writable for the
user but HOME and the temp dirs, the entrypoint.

Podman settings this machine needs (tests/image/containers.conf, through CONTAINERS_CONF for this test only):
explicit ulimits and runc. Networking is the host's, and the extender listens on 127.0.0.1 only.
Skipped without podman outside CI (`make deps` installs it; with CI=true a missing podman fails).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from testkit.control_plane import free_port
from tests.support.paths import ROOT
from tests.support.requirements import missing_requirement

pytestmark = pytest.mark.image

CONTAINERS_CONF = ROOT / "tests" / "image" / "containers.conf"
IMAGE = "localhost/dra-quota-extender:test"
UID = 65532
PODMAN = shutil.which("podman")


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert PODMAN is not None
    result = subprocess.run(
        [PODMAN, *args], capture_output=True, text=True, timeout=timeout, env=podman_env(), check=False
    )
    if check:
        assert result.returncode == 0, f"podman {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def image() -> str:
    if PODMAN is None:
        missing_requirement(
            "podman is not installed (apt-get install podman buildah mmdebstrap runc; make deps installs them)"
        )
    started = time.monotonic()
    result = subprocess.run(
        [str(ROOT / "image" / "build.sh")],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**podman_env(), "IMAGE": IMAGE},
        check=False,
    )
    assert result.returncode == 0, f"image/build.sh failed:\n{result.stdout}\n{result.stderr}"
    print(f"{result.stdout.strip()}\nimage test: build step {time.monotonic() - started:.1f}s")
    return IMAGE


def http(url: str, body: Any = None, timeout: float = 5.0) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[dict[str, str]]:
    name = f"dra-extender-test-{uuid.uuid4().hex[:8]}"
    port, diagnostics = free_port(), free_port()
    run = podman(
        "run",
        "--detach",
        "--name",
        name,
        "--network",
        "host",
        "--read-only",
        "--read-only-tmpfs=false",  # no implicit tmpfs: only the writable places the deployment has
        "--tmpfs",
        "/tmp:rw,size=64m,mode=1777",
        "--tmpfs",
        "/home/extender:rw,size=16m,mode=0700,U",  # U: owned by the container user, as an emptyDir
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        image,
        "--listen",
        f"127.0.0.1:{port}",
        "--diagnostics-listen",
        f"127.0.0.1:{diagnostics}",
    )
    container_id = run.stdout.strip()
    urls = {"name": name, "main": f"http://127.0.0.1:{port}", "diagnostics": f"http://127.0.0.1:{diagnostics}"}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if http(f"{urls['main']}/healthz")[0] == 200:
                    break
            except (urllib.error.URLError, OSError):
                pass
            state = podman("inspect", "--format", "{{.State.Status}}", container_id, check=False).stdout.strip()
            if state != "running" or time.monotonic() > deadline:
                logs = podman("logs", container_id, check=False)
                pytest.fail(f"the container did not serve /healthz (state {state}):\n{logs.stdout}\n{logs.stderr}")
            time.sleep(0.2)
        yield urls
    finally:
        podman("rm", "--force", "--time", "5", container_id, check=False)


def demo_pod() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "extender" / "demo" / "pod-two-gpus.yaml").read_text(encoding="utf-8"))


def test_the_container_serves_health_readiness_and_the_demos_filter_answer(container: dict[str, str]) -> None:
    assert http(f"{container['main']}/healthz") == (200, {"status": "ok"})
    status, ready = http(f"{container['main']}/readyz")
    assert status == 200, ready
    nodes = ["gpu-od-1", "gpu-od-2", "gpu-spot-1", "gpu-spot-2"]
    status, answer = http(f"{container['main']}/filter", {"Pod": demo_pod(), "NodeNames": nodes})
    assert status == 200, answer
    # the demo: team-a's ClusterQueue puts this pod in flavor on-demand, so only the on-demand nodes pass
    assert answer["NodeNames"] == ["gpu-od-1", "gpu-od-2"], answer
    assert set(answer["FailedNodes"]) == {"gpu-spot-1", "gpu-spot-2"}
    assert "flavor on-demand" in answer["FailedNodes"]["gpu-spot-1"]
    assert answer["Error"] == ""
    # diagnostics are on their own listener only
    status, queues = http(f"{container['diagnostics']}/diagnostics/queues")
    assert status == 200 and {q["name"] for q in queues["clusterQueues"]} == {"team-a", "team-b"}
    assert http(f"{container['main']}/diagnostics/queues")[0] == 404


def test_the_container_runs_as_its_numeric_user_and_writes_nothing_outside_its_tmpfs(
    container: dict[str, str],
) -> None:
    top = podman("top", container["name"], "user", "huser", "args").stdout
    assert "dra-extender serve" in top and "root" not in top, top
    logs = podman("logs", container["name"]).stdout + podman("logs", container["name"]).stderr
    assert "Failed to start control socket" not in logs, logs  # HOME is writable where it must be
    assert "the embedded demo cluster" in logs
    probe = "for d in / /etc /opt/dra-extender /opt/dra-extender/bin /var /home/extender /tmp; do " + (
        'if touch "$d/.probe" 2>/dev/null; then echo "$d writable"; else echo "$d read-only"; fi; done'
    )
    result = podman("exec", container["name"], "sh", "-c", probe).stdout.splitlines()
    writable = sorted(line.split()[0] for line in result if line.endswith(" writable"))
    assert writable == ["/home/extender", "/tmp"], result


def test_the_image_promises(image: str) -> None:
    config = json.loads(podman("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["dra-extender", "serve"]
    assert config["WorkingDir"] == "/home/extender"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "dra-quota-extender"
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["org.opencontainers.image.base.name"] in {
        "python:3.12-slim",  # the default, when a registry is reachable
        "localhost/dra-quota-extender-base:bookworm",  # made by mmdebstrap otherwise
    }
    # everything the user can write: its HOME and the sticky temp directories, nothing of the app or the system
    found = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "find",
        image,
        "/",
        "-xdev",
        "(",
        "-path",
        "/proc",
        "-o",
        "-path",
        "/sys",
        "-o",
        "-path",
        "/dev",
        ")",
        "-prune",
        "-o",
        "-writable",
        "-print",
        check=False,  # find exits 1 on the directories the user may not even read (/root, ...): fine
    ).stdout.split()
    assert set(found) <= {"/home/extender", "/tmp", "/var/tmp", "/run/lock", "/var/lock"}, found
    assert "/home/extender" in found
    # the package is installed (not a source checkout) and its console scripts are on PATH
    which = podman(
        "run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c", "command -v kubectl-dra_quota"
    )
    assert which.stdout.strip() == "/opt/dra-extender/bin/kubectl-dra_quota"
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    print(f"image size: {size / 1e6:.0f} MB")
