"""README.md's `podman run` line, as written (only the port and the container's name changed), against the image
tests/deploy/test_image.py builds: the container serves the demo. Run with podman's own configuration, not the image
test's containers.conf, so the README's flags are what makes it work; on a host with hybrid cgroups with
`--runtime runc`, as the README says. Marker `image`, like the build it needs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from testkit.control_plane import free_port
from tests.deploy.test_image import PODMAN, image, podman  # noqa: F401  (image: the module-scoped build fixture)
from tests.deploy.test_readme import block_with, commands, readme

pytestmark = pytest.mark.image

README_IMAGE = "localhost/dra-quota-extender:0.1.0"


def test_the_readmes_podman_run_serves_the_demo(image: str) -> None:  # noqa: F811
    (line,) = [line for line in commands(block_with(readme(), "podman run")) if line.startswith("podman run")]
    port, name = free_port(), f"dra-extender-readme-{uuid.uuid4().hex[:8]}"
    args = shlex.split(line.replace("127.0.0.1:8888", f"127.0.0.1:{port}").replace(README_IMAGE, image))
    assert args[:3] == ["podman", "run", "--rm"] and image in args
    hybrid = not Path("/sys/fs/cgroup/cgroup.controllers").exists() and Path("/sys/fs/cgroup/unified").is_dir()
    run = [str(PODMAN), *(["--runtime", "runc"] if hybrid else []), "run", "--detach", "--name", name, *args[3:]]
    env = {key: value for key, value in os.environ.items() if key != "CONTAINERS_CONF"}
    started = subprocess.run(run, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                    body = json.loads(response.read())
                    break
            except (urllib.error.URLError, OSError):
                assert time.monotonic() < deadline, podman("logs", name, check=False).stdout
                time.sleep(0.5)
        assert body["ready"] is True and body["source"] == "the embedded demo cluster"
    finally:
        podman("rm", "--force", name, check=False)
