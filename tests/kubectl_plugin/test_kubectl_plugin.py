"""`kubectl dra-quota` (extender/kubectl_plugin/) against the embedded demo cluster.

Three of its sources, each really answering: ``--snapshot`` (computed in-process from the demo snapshot),
``--server`` (a `dra-extender serve` process on the demo, its diagnostics listener), and the default path, the
extender behind its Service reached through the API server's service proxy. For the last one a scripted API
server stands in for kube-apiserver: it checks the bearer token of the kubeconfig, serves the pod, and forwards
``/api/v1/namespaces/kube-system/services/dra-quota-scheduler-metrics:9090/proxy/<path>`` to the running demo
extender as the real proxy would (the real one refuses to proxy to loopback addresses, so the e2e control plane
cannot show this path; tests/e2e/test_kubectl_plugin.py shows the fallback to a live read there).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender import cli, kubectl_plugin
from extender.commands.outcomes import EXIT_INPUT, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE, UsageError
from extender.kubectl_plugin.command import LAST_DECISION_NOTE
from extender.kubectl_plugin.kubeconfig import context_namespace
from extender.kubectl_plugin.remote import _from_extender, parse_service
from extender.reports.answers import DIAGNOSTICS_ELSEWHERE
from testkit.control_plane import free_port
from tests.support.demo_server import demo_listeners
from tests.support.paths import ROOT

DEMO = ROOT / "extender" / "demo" / "cluster.yaml"
DEMO_POD = ROOT / "extender" / "demo" / "pod-two-gpus.yaml"
BIN = Path(sys.executable).parent
TOKEN = "plugin-test-token"
SERVICE_PREFIX = "/api/v1/namespaces/kube-system/services/dra-quota-scheduler-metrics:9090/proxy"


def plugin(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = kubectl_plugin.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def demo(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return plugin(capsys, "--snapshot", str(DEMO), *argv)


# --- offline, against the demo snapshot ----------------------------------------------------------------------


def test_explain_is_the_table_and_json_of_dra_extender_explain(capsys: pytest.CaptureFixture[str]) -> None:
    code, table, err = demo(capsys, "explain", "-f", str(DEMO_POD))
    assert (code, err) == (0, "")
    assert cli.main(["explain", str(DEMO_POD), "--snapshot", str(DEMO)]) == 0
    assert table == capsys.readouterr().out
    lines = table.splitlines()
    assert lines[:3] == [
        "Pod team-a/train-1  strategy=MostAllocated",
        "ClusterQueue team-a  flavor on-demand",
        "2 node(s) pass, 2 fail",
    ]
    assert lines[5].split()[:3] == ["1", "gpu-od-1", "pass"]
    assert "node is in flavor spot" in lines[-1]

    code, out, _ = demo(capsys, "explain", "-f", str(DEMO_POD), "-o", "json")
    report = json.loads(out)
    assert cli.main(["explain", str(DEMO_POD), "--snapshot", str(DEMO), "-o", "json"]) == 0
    assert report == json.loads(capsys.readouterr().out)
    code, out, _ = demo(capsys, "explain", "-f", str(DEMO_POD), "-o", "yaml")
    assert yaml.safe_load(out) == report


def test_queues_table_and_formats(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = demo(capsys, "queues", "-o", "json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    rows = {(q["name"], r["flavor"]): r for q in report["clusterQueues"] for r in q["resources"] if r["resource"]}
    assert rows["team-a", "on-demand"]["nominal"] == 6 and rows["team-a", "on-demand"]["usage"] == 4
    code, table, _ = demo(capsys, "queues")
    header, *lines = table.splitlines()
    assert header.split() == [
        "CLUSTERQUEUE",
        "COHORT",
        "FLAVOR",
        "RESOURCE",
        "NOMINAL",
        "USAGE",
        "RESERVED",
        "ADMITTED-PENDING",
        "AVAILABLE",
        "BORROWING-LIMIT",
        "KUEUE-RESERVED",
        "DRIFT",
        "PROBLEM",
    ]
    cells = {tuple(line.split()[:3]): line.split() for line in lines}
    team_a = rows["team-a", "on-demand"]
    assert cells["team-a", "gpu-sharing", "on-demand"][3:9] == [
        "example.com/gpu",
        str(team_a["nominal"]),
        str(team_a["usage"]),
        str(team_a["reserved"]),
        str(team_a["admittedPending"]),
        str(team_a["available"]),
    ]
    code, out, _ = demo(capsys, "-o", "yaml", "queues")  # flags before the subcommand work too
    assert yaml.safe_load(out) == report


def test_node_shows_devices_and_holders(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = demo(capsys, "node", "gpu-od-1", "-o", "json")
    report = json.loads(out)
    assert (report["totalDevices"], report["freeDevices"]) == (8, 4)
    code, table, _ = demo(capsys, "node", "gpu-od-1")
    assert code == 0
    assert table.splitlines()[0] == "Node gpu-od-1  4/8 device(s) free"
    held = [line.split() for line in table.splitlines() if line.startswith("gpu.example.com/") and " no " in line]
    assert len(held) == 4 and {row[2] for row in held} == {"team-a/trainer-0-gpu"}


def test_errors_go_to_stderr_with_documented_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = demo(capsys, "node", "no-such-node")
    assert (code, out, err) == (EXIT_REFUSED, "", 'error: node "no-such-node" is not known\n')
    code, out, err = demo(capsys, "explain")
    assert code == EXIT_USAGE and out == "" and err.startswith("error: explain needs a POD name")
    not_a_pod = tmp_path / "cm.yaml"
    not_a_pod.write_text("kind: ConfigMap\nmetadata: {name: x}\n", encoding="utf-8")
    code, out, err = demo(capsys, "explain", "-f", str(not_a_pod))
    assert code == EXIT_INPUT and "holds no Pod" in err
    code, _, err = plugin(capsys, "--kubeconfig", str(tmp_path / "missing"), "queues")
    assert (
        code == EXIT_INPUT
        and err == f"error: cannot use kubeconfig {tmp_path / 'missing'}: No such file or directory\n"
    )
    with pytest.raises(SystemExit) as usage:
        kubectl_plugin.main(["queues", "-o", "wide"])
    assert usage.value.code == EXIT_USAGE
    assert capsys.readouterr().err.startswith("error: argument -o/--output: invalid choice: 'wide'")


# --- a running extender, and the same through a service proxy -------------------------------------------------


SCHEDULING_URL: dict[str, str] = {}  # the demo extender's diagnostics URL -> its scheduling listener's


@pytest.fixture(scope="module")
def demo_extender(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`dra-extender serve` on the demo, diagnostics on their own listener; yields the diagnostics URL."""
    log_path = tmp_path_factory.mktemp("demo") / "serve.log"
    with demo_listeners(log_path, separate_diagnostics=True) as server:
        SCHEDULING_URL[server.diagnostics_url] = server.url
        yield server.diagnostics_url


class ScriptedApiServer(http.server.ThreadingHTTPServer):
    """Enough of kube-apiserver for the plugin: bearer-token authentication, one pod, and the service proxy
    forwarding to ``backend`` (or answering 503 "no endpoints" when ``backend`` is None)."""

    def __init__(self, backend: str | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.backend = backend
        self.requests: list[tuple[str, str]] = []
        self.pod = yaml.safe_load(DEMO_POD.read_text(encoding="utf-8"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ScriptedApiServer

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest's output clean
        pass

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, message: str) -> None:
        self._reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code})

    def _handle(self, method: str) -> None:
        self.server.requests.append((method, self.path))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._status(401, "Unauthorized")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
        if self.path == "/api/v1/namespaces/team-a/pods/train-1":
            self._reply(200, self.server.pod)
        elif self.path.startswith("/api/v1/namespaces/team-a/pods/"):
            self._status(404, 'pods "x" not found')
        elif self.path.startswith(SERVICE_PREFIX + "/"):
            if self.server.backend is None:
                self._status(503, 'no endpoints available for service "dra-quota-scheduler-metrics"')
                return
            request = urllib.request.Request(
                self.server.backend + self.path.removeprefix(SERVICE_PREFIX),
                data=body,
                method=method,
                headers={"Content-Type": self.headers.get("Content-Type") or "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    self._reply(response.status, json.loads(response.read()))
            except urllib.error.HTTPError as error:
                self._reply(error.code, json.loads(error.read()))
        else:
            self._status(404, "the server could not find the requested resource")

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


@pytest.fixture
def api_server(demo_extender: str) -> Iterator[ScriptedApiServer]:
    server = ScriptedApiServer(demo_extender)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def kubeconfig(tmp_path: Path, server: str, namespace: str | None = "team-a") -> Path:
    context: dict[str, Any] = {"cluster": "scripted", "user": "tester"}
    if namespace:
        context["namespace"] = namespace
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "scripted", "cluster": {"server": server}}],
        "users": [{"name": "tester", "user": {"token": TOKEN}}, {"name": "nobody", "user": {"token": "wrong"}}],
        "contexts": [
            {"name": "main", "context": context},
            {"name": "intruder", "context": {"cluster": "scripted", "user": "nobody"}},
        ],
        "current-context": "main",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_server_flag_asks_a_running_extender(capsys: pytest.CaptureFixture[str], demo_extender: str) -> None:
    code, out, err = plugin(capsys, "--server", demo_extender, "explain", "-f", str(DEMO_POD), "-o", "json")
    assert (code, err) == (0, "")
    remote = json.loads(out)
    _, local, _ = demo(capsys, "explain", "-f", str(DEMO_POD), "-o", "json")
    assert remote == json.loads(local)
    code, out, _ = plugin(capsys, "--server", demo_extender, "node", "gpu-spot-2", "-o", "json")
    assert json.loads(out)["node"] == "gpu-spot-2"
    code, _, err = plugin(capsys, "--server", f"http://127.0.0.1:{free_port()}", "queues")
    assert code == EXIT_UNREACHABLE and err.startswith("error: cannot reach")


def test_the_in_cluster_extender_through_the_service_proxy(
    capsys: pytest.CaptureFixture[str], api_server: ScriptedApiServer, tmp_path: Path, demo_extender: str
) -> None:
    config = kubeconfig(tmp_path, api_server.url)
    # the pod is read from the cluster (namespace from the context), explained by the extender behind the Service
    code, table, err = plugin(capsys, "--kubeconfig", str(config), "explain", "train-1")
    assert (code, err) == (0, ""), err
    _, expected, _ = plugin(capsys, "--server", demo_extender, "explain", "-f", str(DEMO_POD))
    assert table == expected
    assert api_server.requests[:2] == [
        ("GET", "/api/v1/namespaces/team-a/pods/train-1"),
        ("POST", f"{SERVICE_PREFIX}/diagnostics/explain"),
    ]
    code, out, _ = plugin(capsys, "--kubeconfig", str(config), "queues", "-o", "json")
    assert json.loads(out)["clusterQueues"][0]["name"] == "team-a"
    code, out, err = plugin(capsys, "--kubeconfig", str(config), "node", "no-such-node")
    assert (code, out) == (EXIT_REFUSED, "") and err == 'error: node "no-such-node" is not known\n'  # its 404
    code, _, err = plugin(capsys, "--kubeconfig", str(config), "explain", "-n", "team-a", "nope")
    assert code == EXIT_REFUSED and err == 'error: pods "nope" not found in namespace "team-a"\n'
    # KUBECONFIG is honoured like kubectl does, --context picks another user (refused: 401 is an error, no fallback)
    os.environ["KUBECONFIG"] = f"{tmp_path / 'absent'}{os.pathsep}{config}"
    try:
        code, out, _ = plugin(capsys, "queues", "-o", "json")
        assert code == 0 and json.loads(out)["clusterQueues"]
        code, out, err = plugin(capsys, "--context", "intruder", "queues")
        assert code == EXIT_REFUSED and "HTTP 401" in err and out == ""
        code, _, err = plugin(capsys, "--context", "no-such-context", "queues")
        assert code == EXIT_INPUT and 'context "no-such-context" does not exist' in err
    finally:
        del os.environ["KUBECONFIG"]


def test_context_namespace_follows_kubectl(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, "http://127.0.0.1:1", namespace=None)
    assert context_namespace(str(config), None) == "default"
    config = kubeconfig(tmp_path, "http://127.0.0.1:1", namespace="team-b")
    assert context_namespace(str(config), "main") == "team-b"
    assert parse_service("ns/name:9090") == ("ns", "name", "9090")
    with pytest.raises(UsageError):
        parse_service("name:9090")


def test_the_console_script_is_installed() -> None:
    result = subprocess.run(
        [str(BIN / "kubectl-dra_quota"), "--snapshot", str(DEMO), "queues"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("CLUSTERQUEUE")


def test_an_unreachable_api_server_is_an_error_not_a_fallback(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    config = kubeconfig(tmp_path, f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    for argv in (["queues"], ["explain", "train-1"]):
        code, out, err = plugin(capsys, "--kubeconfig", str(config), "--request-timeout", "5", *argv)
        assert (code, out) == (EXIT_UNREACHABLE, "") and err.startswith("error: cannot reach the API server"), err
    assert time.monotonic() - started < 30  # no 60 s wait for a live view that can never sync


def test_the_deployments_metrics_listener_behind_the_service_means_compute_locally() -> None:
    """The deployment keeps diagnostics on loopback; its Service reaches the metrics listener, which answers
    /diagnostics and /ui with a 404 naming the reason, and the plugin treats that as "nobody to ask" (it falls
    back to a live read), while an extender's own 404 (unknown node) and other listeners' 404s stay errors."""
    from extender.transport.app import create_app
    from tests.support.scenarios import engine_for

    service = engine_for([])
    metrics_only = create_app(service, serve_scheduling=False, serve_diagnostics=False, serve_metrics=True)
    client = metrics_only.test_client()
    for path in ("/diagnostics/queues", "/diagnostics/nodes/x", "/ui/pods"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.get_json()["reason"] == DIAGNOSTICS_ELSEWHERE
        assert not _from_extender(response.get_data())
    assert client.get("/metrics").status_code == 200
    assert client.get("/nothing-here").get_json().get("reason") is None
    unknown_node = create_app(service).test_client().get("/diagnostics/nodes/no-such-node")
    assert unknown_node.status_code == 404 and _from_extender(unknown_node.get_data())


def test_server_without_a_kubeconfig_shows_the_extenders_last_decision(
    capsys: pytest.CaptureFixture[str], demo_extender: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`--server URL explain POD` with no kubeconfig anywhere asks only the extender: its record of the pod."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out, err = plugin(capsys, "--server", demo_extender, "explain", "-n", "team-a", "trainer-0")
    assert (code, out) == (EXIT_REFUSED, "")  # the demo extender has decided nothing yet
    assert err == (
        "error: the extender has no decision recorded for pod team-a/trainer-0: "
        "pass -f FILE, or a kubeconfig to read the pod from\n"
    )
    pod = next(
        d for d in yaml.safe_load_all(DEMO.read_text(encoding="utf-8")) if d and d["metadata"]["name"] == "trainer-0"
    )
    nodes = ["gpu-od-1", "gpu-od-2", "gpu-spot-1", "gpu-spot-2"]
    request = urllib.request.Request(
        SCHEDULING_URL[demo_extender] + "/filter",
        data=json.dumps({"Pod": pod, "NodeNames": nodes}).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).read()  # kube-scheduler asks about the pod
    code, out, err = plugin(capsys, "--server", demo_extender, "-o", "json", "explain", "-n", "team-a", "trainer-0")
    assert code == 0 and err == f"note: {LAST_DECISION_NOTE}\n"
    report = json.loads(out)
    assert (report["pod"], report["verb"]) == ("team-a/trainer-0", "filter")
    assert sorted(v["node"] for v in report["nodes"]) == nodes


# --- objects beside the pod in -f FILE ---------------------------------------------------------------------------

THREE_GPUS = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: three-gpus
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.example.com
          count: 3
---
apiVersion: v1
kind: Pod
metadata:
  name: mine
  namespace: team-a
  labels:
    kueue.x-k8s.io/queue-name: gpus
spec:
  containers:
  - name: main
    image: busybox
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: three-gpus
---
apiVersion: v1
kind: Service
metadata:
  name: svc
"""


def charged(report: dict[str, Any]) -> set[Any]:
    return {c["amount"] for node in report["nodes"] for c in node.get("quota", {}).get("charges", [])}


def test_a_template_beside_the_pod_is_used_on_top_of_the_snapshot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The ResourceClaimTemplate written next to the pod is the one its answer uses (3 GPUs charged, not a
    template "that does not exist"); the Service beside it is named as left out; one note on stderr."""
    manifest = tmp_path / "mine.yaml"
    manifest.write_text(THREE_GPUS, encoding="utf-8")
    note = (
        f"note: {manifest}: used beside the Pod, on top of {{}}: ResourceClaimTemplate team-a/three-gpus; "
        "left out (kinds the extender does not read): Service svc\n"
    )
    code, out, err = demo(capsys, "explain", "-f", str(manifest), "-o", "json")
    assert (code, err) == (0, note.format(f"snapshot {DEMO}"))
    report = json.loads(out)
    assert report["passed"] == 2 and charged(report) == {3}
    code, out, err = plugin(capsys, "--snapshot", str(DEMO), "explain", "-f", str(manifest), "-o", "json")
    assert json.loads(out) == report
    assert cli.main(["explain", str(manifest), "-o", "json"]) == 0  # dra-extender explain: the same
    out, err = capsys.readouterr()
    assert json.loads(out) | {"snapshotVersion": 0} == report | {"snapshotVersion": 0}
    assert err == note.format("the embedded demo cluster")
    # a namespaced object naming no namespace lands in the pod's (-n), as kubectl apply -n would create it
    manifest.write_text(THREE_GPUS.replace("  namespace: team-a\n", ""), encoding="utf-8")
    code, out, err = demo(capsys, "-n", "team-a", "explain", "-f", str(manifest), "-o", "json")
    assert code == 0 and charged(json.loads(out)) == {3} and "ResourceClaimTemplate team-a/three-gpus" in err


def test_a_running_extender_is_sent_the_pod_only_and_says_so(
    capsys: pytest.CaptureFixture[str], demo_extender: str, tmp_path: Path
) -> None:
    manifest = tmp_path / "mine.yaml"
    manifest.write_text(THREE_GPUS, encoding="utf-8")
    expected = (
        f"note: {manifest}: {demo_extender} is sent the Pod only; not used: ResourceClaimTemplate three-gpus, "
        "Service svc (create them in the cluster, or ask with --snapshot FILE or --kubeconfig FILE to have them "
        "used on top of it)\n"
    )
    code, out, err = plugin(capsys, "--server", demo_extender, "explain", "-f", str(manifest), "-o", "json")
    assert (code, err) == (0, expected)
    assert "three-gpus" in json.dumps(json.loads(out))  # the running extender does not know the template
    assert cli.main(["explain", str(manifest), "--server", demo_extender, "-o", "json"]) == 0
    assert capsys.readouterr().err == expected
