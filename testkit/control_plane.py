"""A throwaway Kubernetes control plane on loopback, for the end-to-end tests and the end-to-end benchmark.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built by ``testkit/builds/kubernetes.py``) run as
child processes in a temporary folder, every one listening on 127.0.0.1 at a port chosen at run time. There
are no kubelets: nodes are API objects that the helpers mark Ready, and ResourceSlices are published through
the API the way the DRA example driver publishes them. Pods get bound (spec.nodeName) but never run.
It lives in testkit (not shipped) so that the tests and bench/e2e_bench.py share it (bench/ imports nothing
from tests/).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from testkit import builders as b

T = TypeVar("T")

LOOPBACK = "127.0.0.1"
DRIVER = "gpu.example.com"
DEVICE_CLASS = "gpu.example.com"
GPU_MODEL = "LATEST-GPU-MODEL"
ADMIN_USER = "e2e-admin"

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"
KUEUE_CRD_DIR = SHARED_DIR / "kueue" / "crds"
EXTENDER_BIN = REPO_ROOT / ".venv" / "bin" / "dra-extender"

# the KCM controllers the tests need; node lifecycle stays off since there are no kubelets. job-controller:
# Kueue's batch/job integration unsuspends Jobs and the Job controller creates their pods.
CONTROLLERS = (
    "job-controller",
    "resourceclaim-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
)


# Where each component says it is ready (others: /healthz), and whether asking needs the admin token.
READY_PATHS: dict[str, tuple[str, bool]] = {
    "etcd": ("/health", False),
    "kube-apiserver": ("/readyz", True),
    "extender": ("/readyz", False),
    "kueue": ("/readyz", False),
}


@dataclass(frozen=True)
class ClusterFeatures:
    """The feature gates, served API versions, extra controllers and extra flags a scenario asks for.

    Gates go to kube-apiserver, kube-controller-manager and kube-scheduler alike: a gate such as
    ``GenericWorkload`` switches on the API fields (apiserver), the controllers (kube-controller-manager's
    podgroup-protection-controller, the resourceclaim-controller's PodGroup claims) and the scheduler's pod-group
    cycle, and upstream documents each gate as one setting across the control plane (pkg/features
    kube_features.go). ``runtime_config`` goes to kube-apiserver only (``--runtime-config``): a beta API group
    such as scheduling.k8s.io/v1beta1 is not served by default. ``extra_args`` maps a component name
    (kube-apiserver, kube-controller-manager, kube-scheduler) to further flags.
    """

    gates: Mapping[str, bool] = field(default_factory=dict)
    runtime_config: Mapping[str, str] = field(default_factory=dict)
    controllers: tuple[str, ...] = ()
    extra_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def gate_flags(self) -> list[str]:
        if not self.gates:
            return []
        joined = ",".join(f"{name}={'true' if on else 'false'}" for name, on in sorted(self.gates.items()))
        return [f"--feature-gates={joined}"]

    def apiserver_flags(self) -> list[str]:
        flags = self.gate_flags()
        if self.runtime_config:
            flags.append("--runtime-config=" + ",".join(f"{k}={v}" for k, v in sorted(self.runtime_config.items())))
        return flags + list(self.extra_args.get("kube-apiserver", ()))

    def component_flags(self, component: str) -> list[str]:
        """Flags for kube-controller-manager or kube-scheduler: the gates, then the scenario's extra flags."""
        return self.gate_flags() + list(self.extra_args.get(component, ()))


# Workload-aware scheduling as Kubernetes 1.37 ships it: both beta gates (DRAWorkloadResourceClaims needs
# DynamicResourceAllocation, on by default, and GenericWorkload), the v1beta1 API served, and the controller
# that guards PodGroups in use (cmd/kube-controller-manager/app/scheduling.go).
WORKLOAD_AWARE = ClusterFeatures(
    gates={"GenericWorkload": True, "DRAWorkloadResourceClaims": True},
    runtime_config={"scheduling.k8s.io/v1beta1": "true"},
    controllers=("podgroup-protection-controller",),
)


# The alpha steps beyond it that gang users turn on in 1.37: TopologyAwareWorkloadScheduling (one pod-group cycle
# per candidate placement), CompositePodGroup (needs it and GenericWorkload; its kind is served in
# scheduling.k8s.io/v1alpha3) and WorkloadWithJob (the Job controller makes a Job's Workload and PodGroup).
WORKLOAD_AWARE_ALPHA = ClusterFeatures(
    gates={
        **WORKLOAD_AWARE.gates,
        "TopologyAwareWorkloadScheduling": True,
        "CompositePodGroup": True,
        "WorkloadWithJob": True,
    },
    runtime_config={**WORKLOAD_AWARE.runtime_config, "scheduling.k8s.io/v1alpha3": "true"},
    controllers=WORKLOAD_AWARE.controllers,
)


class ControlPlaneError(RuntimeError):
    """A component did not start or did not become ready."""


# Ports free_port has handed out in this process. A port is free from the moment its probe socket closes until
# the component given it binds, which for kube-scheduler's secure port is seconds later: the kernel may hand the
# same port to the next probe meanwhile, and two components started one after the other (a failover replica's
# scheduler, then the next replica's extender) would then race for it.
_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now and not handed out before by this process."""
    with _HANDED_OUT_LOCK:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((LOOPBACK, 0))
                port = int(sock.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = 30.0,
    interval: float = 0.2,
    message: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy; return it or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except (ApiException, OSError, ValueError, KeyError) as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {message}{detail}")
        time.sleep(interval)


# --- keys -----------------------------------------------------------------------------------------------


def _der_len(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def _der_int(value: int) -> bytes:
    raw = value.to_bytes(value.bit_length() // 8 + 1, "big")  # one spare byte keeps the sign bit clear
    while len(raw) > 1 and raw[0] == 0 and raw[1] < 0x80:
        raw = raw[1:]
    return b"\x02" + _der_len(len(raw)) + raw


def _probable_prime(bits: int) -> int:
    small = [p for p in range(3, 2000, 2) if all(p % d for d in range(3, int(p**0.5) + 1, 2))]
    while True:
        candidate = secrets.randbits(bits) | (1 << (bits - 1)) | (1 << (bits - 2)) | 1
        if any(candidate % p == 0 for p in small):
            continue
        d, r = candidate - 1, 0
        while d % 2 == 0:
            d, r = d // 2, r + 1
        for _ in range(40):  # Miller-Rabin
            x = pow(secrets.randbelow(candidate - 3) + 2, d, candidate)
            if x in (1, candidate - 1):
                continue
            for _ in range(r - 1):
                x = pow(x, 2, candidate)
                if x == candidate - 1:
                    break
            else:
                break
        else:
            return candidate


def _python_rsa_key_pem(bits: int = 2048) -> str:
    """An RSA private key in PKCS#1 PEM, made with the standard library only (used when openssl is absent)."""
    e = 65537
    while True:
        p, q = _probable_prime(bits // 2), _probable_prime(bits // 2)
        phi = (p - 1) * (q - 1)
        if p != q and phi % e:
            break
    n, d = p * q, pow(e, -1, phi)
    fields = [0, n, e, d, p, q, d % (p - 1), d % (q - 1), pow(q, -1, p)]
    body = b"".join(_der_int(v) for v in fields)
    der = b"\x30" + _der_len(len(body)) + body
    b64 = base64.b64encode(der).decode()
    lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
    return "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END RSA PRIVATE KEY-----\n"


def write_rsa_key(path: Path) -> Path:
    """Write a 2048-bit RSA private key (the service-account signing key) to ``path``."""
    openssl = shutil.which("openssl")
    if openssl:
        subprocess.run([openssl, "genrsa", "-out", str(path), "2048"], check=True, capture_output=True, timeout=60)
    else:
        path.write_text(_python_rsa_key_pem())
    path.chmod(0o600)
    return path


# --- processes ------------------------------------------------------------------------------------------


@dataclass
class Component:
    """One child process of the control plane and its log file."""

    name: str
    args: list[str]
    log_path: Path
    process: subprocess.Popen[bytes]
    url: str = ""
    env: dict[str, str] | None = None  # the environment it was started with (None: ours), kept for a respawn

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is not None:
            return
        try:
            # started with its own session: the group is this process and its children
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group at once (a crash, not a shutdown) and reap the process."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.process.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def spawn(name: str, args: list[str], log_dir: Path, env: dict[str, str] | None = None) -> Component:
    """Start ``args`` in its own process group with stdout+stderr appended to ``<log_dir>/<name>.log``."""
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as log:
        log.write(("$ " + " ".join(args) + "\n").encode())
        log.flush()
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    return Component(name=name, args=args, log_path=log_path, process=process, env=env)


def _http_ok(url: str, token: str | None = None, timeout: float = 2.0) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # readiness probe only; the API clients verify the serving cert
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_http_ready(component: Component, url: str, timeout: float = 60.0, token: str | None = None) -> None:
    """Wait until GET ``url`` answers 200, failing early (with the log's tail) if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not component.alive():
            raise ControlPlaneError(
                f"{component.name} exited with code {component.process.returncode} before it was ready; "
                f"log {component.log_path}:\n{component.log_tail()}"
            )
        if _http_ok(url, token=token):
            return
        time.sleep(0.2)
    raise ControlPlaneError(
        f"{component.name} not ready at {url} after {timeout:.0f}s; log {component.log_path}:\n{component.log_tail()}"
    )


def start_extender(
    kubeconfig: Path | str,
    port: int,
    config_file: Path | str | None = None,
    log_dir: Path | None = None,
    timeout: float = 60.0,
) -> Component:
    """Start our extender (``dra-extender serve``) on 127.0.0.1:``port``; return once /readyz answers 200.

    Its temporary directory is the log directory (inside the run's work directory, removed with it): the
    default reservation journal (`reservations.journal: auto`, state/reservation_journal.py) lives there, so a
    restart on the same port in the same run takes it over, and no run leaves journals behind in /tmp."""
    if not os.access(EXTENDER_BIN, os.X_OK):
        raise ControlPlaneError(f"{EXTENDER_BIN} not found: run `make install` in {REPO_ROOT}")
    args = [str(EXTENDER_BIN), "serve", "--kubeconfig", str(kubeconfig), "--listen", f"{LOOPBACK}:{port}"]
    if config_file is not None:
        args += ["--config", str(config_file)]
    directory = log_dir or Path(kubeconfig).parent
    component = spawn("extender", args, directory, env={**os.environ, "TMPDIR": str(directory)})
    component.url = f"http://{LOOPBACK}:{port}"
    try:
        wait_http_ready(component, f"{component.url}/readyz", timeout=timeout)
    except ControlPlaneError:
        component.stop()
        raise
    return component


# --- configuration files --------------------------------------------------------------------------------


def write_kubeconfig(path: Path, server: str, token: str, ca_file: Path) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": ADMIN_USER}}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def scheduler_config(
    kubeconfig: Path,
    extender_url: str | None = None,
    scheduler_name: str = "default-scheduler",
) -> dict[str, Any]:
    """A KubeSchedulerConfiguration; with ``extender_url`` it calls our extender for filter and prioritize."""
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "percentageOfNodesToScore": 100,
        "profiles": [{"schedulerName": scheduler_name}],
    }
    if extender_url:
        config["extenders"] = [
            {
                "urlPrefix": extender_url,
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": 1,
                "nodeCacheCapable": True,
                "ignorable": False,
                "httpTimeout": "5s",
                "enableHTTPS": False,
            }
        ]
    return config


# --- object builders ------------------------------------------------------------------------------------


def gpu_devices(node: str, count: int, memory: str = "80Gi") -> list[dict[str, Any]]:
    """Devices as the DRA example driver publishes them: gpu-0..gpu-(count-1) of one node."""
    return [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "index": {"int": i},
                "uuid": {"string": f"gpu-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu-{i}')}"},
                "model": {"string": GPU_MODEL},
                "driverVersion": {"version": "1.0.0"},
            },
            "capacity": {"memory": {"value": memory}},
        }
        for i in range(count)
    ]


def pod_manifest(
    namespace: str,
    name: str,
    claim_templates: dict[str, str] | None = None,
    claims: dict[str, str] | None = None,
    scheduler_name: str | None = None,
    labels: dict[str, str] | None = None,
    cpu: str = "100m",
) -> dict[str, Any]:
    """A pod that never runs (there is no kubelet). ``claim_templates`` / ``claims``: pod claim name ->
    ResourceClaimTemplate / ResourceClaim name; every claim is attached to the single container."""
    resource_claims = [{"name": k, "resourceClaimTemplateName": v} for k, v in (claim_templates or {}).items()] + [
        {"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()
    ]
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": cpu}},
    }
    if resource_claims:
        container["resources"]["claims"] = [{"name": c["name"]} for c in resource_claims]
    spec: dict[str, Any] = {
        "containers": [container],
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
    }
    if resource_claims:
        spec["resourceClaims"] = resource_claims
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }


# --- the control plane ----------------------------------------------------------------------------------


@dataclass
class ControlPlane:
    """A running control plane and typed clients for it. Build with :func:`start_control_plane`."""

    workdir: Path
    binaries: dict[str, Path]
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    components: dict[str, Component] = field(default_factory=dict)
    server: str = ""
    features: ClusterFeatures = field(default_factory=ClusterFeatures)
    kubeconfig: Path = field(init=False)
    api_client: k8s.ApiClient | None = None

    def __post_init__(self) -> None:
        self.log_dir = self.workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = self.workdir / "admin.kubeconfig"

    # clients -----------------------------------------------------------------------------------------

    @property
    def client(self) -> k8s.ApiClient:
        if self.api_client is None:
            self.api_client = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]  # not annotated
                config_file=str(self.kubeconfig)
            )
        return self.api_client

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.client)

    @property
    def resource(self) -> k8s.ResourceV1Api:
        return k8s.ResourceV1Api(self.client)

    @property
    def apiextensions(self) -> k8s.ApiextensionsV1Api:
        return k8s.ApiextensionsV1Api(self.client)

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.client)

    # components --------------------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> Component:
        if name in self.components and self.components[name].alive():
            raise ControlPlaneError(f"{name} is already running")
        component = spawn(name, args, self.log_dir)
        self.components[name] = component
        return component

    def start_etcd(self) -> Component:
        client_port, peer_port = free_port(), free_port()
        client_url, peer_url = f"http://{LOOPBACK}:{client_port}", f"http://{LOOPBACK}:{peer_port}"
        etcd = self._spawn(
            "etcd",
            [
                str(self.binaries["etcd"]),
                "--name=e2e",
                f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=e2e={peer_url}",
                "--unsafe-no-fsync",  # throwaway data: skip fsync for speed
                "--log-level=warn",
            ],
        )
        etcd.url = client_url
        wait_http_ready(etcd, f"{client_url}/health", timeout=30)
        return etcd

    def start_apiserver(self) -> Component:
        port = free_port()
        cert_dir = self.workdir / "apiserver-certs"
        cert_dir.mkdir(exist_ok=True)
        sa_key = self.workdir / "service-account.key"
        if not sa_key.exists():
            write_rsa_key(sa_key)
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        tokens.chmod(0o600)
        apiserver = self._spawn(
            "kube-apiserver",
            [
                str(self.binaries["kube-apiserver"]),
                f"--etcd-servers={self.components['etcd'].url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--cert-dir={cert_dir}",  # self-signed serving cert (and its CA) generated by the apiserver
                f"--token-auth-file={tokens}",
                "--authorization-mode=Node,RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa_key}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--endpoint-reconciler-type=none",  # a loopback address may not be published as an endpoint
                "--disable-admission-plugins=TaintNodesByCondition",  # nodes are made Ready by hand
                "--profiling=false",
                "--v=1",
                *self.features.apiserver_flags(),
            ],
        )
        self.server = f"https://{LOOPBACK}:{port}"
        apiserver.url = self.server
        wait_http_ready(apiserver, f"{self.server}/readyz", timeout=120, token=self.token)
        write_kubeconfig(self.kubeconfig, self.server, self.token, cert_dir / "apiserver.crt")
        return apiserver

    def _component_flags(self, port: int) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--authentication-skip-lookup",  # no client CA or request-header config to look up
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port}",
            "--leader-elect=false",
            "--v=2",
        ]

    def start_controller_manager(self, controllers: Iterable[str] = CONTROLLERS) -> Component:
        port = free_port()
        kcm = self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries["kube-controller-manager"]),
                *self._component_flags(port),
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                f"--controllers={','.join((*controllers, *self.features.controllers))}",
                f"--service-account-private-key-file={self.workdir / 'service-account.key'}",
                f"--root-ca-file={self.workdir / 'apiserver-certs' / 'apiserver.crt'}",
                "--use-service-account-credentials=false",
                *self.features.component_flags("kube-controller-manager"),
            ],
        )
        kcm.url = f"https://{LOOPBACK}:{port}"
        wait_http_ready(kcm, f"{kcm.url}/healthz", timeout=60)
        return kcm

    def start_scheduler(
        self,
        extender_url: str | None = None,
        config_file: Path | None = None,
        name: str = "kube-scheduler",
        scheduler_name: str = "default-scheduler",
    ) -> Component:
        """Start a kube-scheduler; ``config_file`` wins, else one is written (calling ``extender_url`` if
        given). Several can run side by side under different ``name`` / ``scheduler_name``."""
        if config_file is None:
            config_file = self.workdir / f"{name}-config.yaml"
            config_file.write_text(
                yaml.safe_dump(scheduler_config(self.kubeconfig, extender_url, scheduler_name), sort_keys=False)
            )
        port = free_port()
        scheduler = self._spawn(
            name,
            [
                str(self.binaries["kube-scheduler"]),
                f"--config={config_file}",
                *self._component_flags(port)[1:],  # the kubeconfig comes from the config file
                f"--cert-dir={self.workdir / f'{name}-certs'}",
                *self.features.component_flags("kube-scheduler"),
            ],
        )
        scheduler.url = f"https://{LOOPBACK}:{port}"
        wait_http_ready(scheduler, f"{scheduler.url}/healthz", timeout=60)
        return scheduler

    def respawn_component(self, name: str, timeout: float = 120.0) -> Component:
        """Start a stopped (or killed) component again with exactly the arguments it had, so it listens on
        the same port and everything pointing at it reconnects; wait until it is ready."""
        old = self.components[name]
        if old.alive():
            raise ControlPlaneError(f"{name} is still running; stop or kill it first")
        component = spawn(name, old.args, self.log_dir, env=old.env)
        component.url = old.url
        self.components[name] = component
        path, needs_token = READY_PATHS.get(name, ("/healthz", False))
        wait_http_ready(component, f"{component.url}{path}", timeout=timeout, token=self.token if needs_token else None)
        return component

    def restart_component(self, name: str, *, kill: bool = False, timeout: float = 120.0) -> Component:
        """Stop (SIGTERM, or SIGKILL with ``kill``) and respawn a component on the same port."""
        component = self.components[name]
        if kill:
            component.kill()
        else:
            component.stop()
        return self.respawn_component(name, timeout=timeout)

    def stop_component(self, name: str) -> None:
        component = self.components.pop(name, None)
        if component is not None:
            component.stop()

    def stop(self) -> None:
        """Stop every component, newest first (the scheduler before the apiserver before etcd)."""
        for name in reversed(list(self.components)):
            self.stop_component(name)
        if self.api_client is not None:
            self.api_client.close()  # type: ignore[no-untyped-call]  # not annotated
            self.api_client = None

    def check_alive(self) -> None:
        dead = [c for c in self.components.values() if not c.alive()]
        if dead:
            raise ControlPlaneError(
                "; ".join(f"{c.name} exited ({c.process.returncode}):\n{c.log_tail()}" for c in dead)
            )

    # cluster objects ---------------------------------------------------------------------------------

    def create_namespace(self, name: str, wait_for_service_account: bool = True) -> str:
        """Create a namespace; wait for its default ServiceAccount (pods are refused without it)."""
        self.core.create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type]  # the client sends a dict body as it is
        if wait_for_service_account:
            wait_until(
                lambda: self.core.read_namespaced_service_account("default", name),
                timeout=30,
                message=f"ServiceAccount {name}/default",
            )
        return name

    def delete_namespace(self, name: str) -> None:
        """Force-delete the namespace's pods (no kubelet would confirm a graceful deletion), then it."""
        try:
            self.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
            self.core.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def create_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        cpu: str = "32",
        memory: str = "256Gi",
        pods: str = "110",
    ) -> dict[str, Any]:
        """Create a Node without taints and mark it Ready with the given allocatable resources."""
        self.core.create_node(
            {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}}  # type: ignore[arg-type]
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        resources = {"cpu": cpu, "memory": memory, "pods": pods}
        status = {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "e2e harness: no kubelet, marked Ready by the test",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [{"type": "InternalIP", "address": LOOPBACK}],
            }
        }
        self.core.patch_node_status(name, status)
        node = self.core.read_node(name)
        if node.spec.taints:  # type: ignore[union-attr]  # a node read from the API server has a spec
            self.core.patch_node(name, {"spec": {"taints": None}})
        node_object: dict[str, Any] = self.client.sanitize_for_serialization(  # type: ignore[no-untyped-call]
            self.core.read_node(name)
        )
        return node_object

    def create_device_class(self, name: str = DEVICE_CLASS, driver: str = DRIVER) -> None:
        """Create the DeviceClass (idempotent) selecting ``device.driver == driver``."""
        try:
            device_class = b.device_class(name, [f"device.driver == '{driver}'"])
            self.resource.create_device_class(device_class)  # type: ignore[arg-type]  # the client sends a dict as it is
        except ApiException as exc:
            if exc.status != 409:
                raise

    def publish_gpus(
        self, node: str, count: int = 2, memory: str = "80Gi", driver: str = DRIVER, generation: int = 1
    ) -> dict[str, Any]:
        """Publish (create or replace) the node-local ResourceSlice of the example driver for ``node``:
        pool = node name, devices gpu-0..gpu-(count-1)."""
        name = f"{node}-{driver}"
        body: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                "devices": gpu_devices(node, count, memory),
            },
        }
        try:
            created = self.resource.create_resource_slice(body)  # type: ignore[arg-type]  # the client sends a dict body as it is
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = self.resource.read_resource_slice(name)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version  # type: ignore[union-attr]  # read back
            created = self.resource.replace_resource_slice(name, body)  # type: ignore[arg-type]  # the client sends a dict body as it is
        published: dict[str, Any] = self.client.sanitize_for_serialization(created)  # type: ignore[no-untyped-call]
        return published

    def apply_manifest(self, path: Path) -> list[dict[str, Any]]:
        """Create every object of a YAML file (kinds the kubernetes client's create_from_yaml knows)."""
        from kubernetes import utils

        created = utils.create_from_yaml(self.client, str(path))  # type: ignore[no-untyped-call]  # not annotated
        objects: list[dict[str, Any]] = [
            self.client.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]  # not annotated
            for group in created
            for obj in group
        ]
        return objects

    def read_crd(self, name: str) -> dict[str, Any]:
        """The CustomResourceDefinition as plain JSON (the typed model chokes on some CRD schemas)."""
        # With _preload_content=False the client returns the raw HTTP response, not the model its stub names.
        response: Any = self.apiextensions.read_custom_resource_definition(name, _preload_content=False)
        crd: dict[str, Any] = json.loads(response.data)
        return crd

    def apply_crds(self, crd_dir: Path = KUEUE_CRD_DIR, timeout: float = 60.0) -> list[str]:
        """Create (or replace) the CRDs of every *.yaml in ``crd_dir``; wait for them to be Established."""
        names = []
        for path in sorted(crd_dir.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                name = doc["metadata"]["name"]
                names.append(name)
                response: Any  # the raw HTTP response (_preload_content=False)
                try:
                    response = self.apiextensions.create_custom_resource_definition(doc, _preload_content=False)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    doc["metadata"]["resourceVersion"] = self.read_crd(name)["metadata"]["resourceVersion"]
                    response = self.apiextensions.replace_custom_resource_definition(name, doc, _preload_content=False)
                response.read()  # an unread response would be cut off mid-write
        for name in names:
            wait_until(partial(self.crd_established, name), timeout=timeout, message=f"CRD {name} Established")
        return names

    def crd_established(self, name: str) -> bool:
        conditions = (self.read_crd(name).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    # pods, claims, events ----------------------------------------------------------------------------

    def create_pod(self, manifest: dict[str, Any]) -> k8s.V1Pod:
        return self.core.create_namespaced_pod(manifest["metadata"]["namespace"], manifest)  # type: ignore[arg-type]

    def wait_for_pod_scheduled(self, namespace: str, name: str, timeout: float = 60.0) -> k8s.V1Pod:
        """Wait until the pod is bound to a node (spec.nodeName set)."""

        def bound() -> k8s.V1Pod | None:
            pod = self.core.read_namespaced_pod(name, namespace)
            return pod if pod.spec.node_name else None  # type: ignore[union-attr]  # read pods have a spec

        return wait_until(bound, timeout=timeout, message=f"pod {namespace}/{name} to be scheduled")

    def events_for(self, namespace: str, name: str, reason: str | None = None) -> list[k8s.CoreV1Event]:
        events = self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        return [e for e in events if reason is None or e.reason == reason]

    def wait_for_event(self, namespace: str, name: str, reason: str, timeout: float = 60.0) -> k8s.CoreV1Event:
        return wait_until(
            lambda: next(iter(self.events_for(namespace, name, reason)), None),
            timeout=timeout,
            message=f"event {reason} for {namespace}/{name}",
        )

    def pod_claims(self, namespace: str, pod_name: str, timeout: float = 30.0) -> list[k8s.ResourceV1ResourceClaim]:
        """The ResourceClaims of a pod (generated from templates or named), once they all exist."""

        def claims() -> list[k8s.ResourceV1ResourceClaim] | None:
            pod = self.core.read_namespaced_pod(pod_name, namespace)
            wanted = pod.spec.resource_claims or []  # type: ignore[union-attr]  # read pods have a spec
            statuses = {
                s.name: s.resource_claim_name
                for s in (pod.status.resource_claim_statuses or [])  # type: ignore[union-attr]  # and a status
            }
            names = [c.resource_claim_name or statuses.get(c.name) for c in wanted]
            if not all(names):
                return None
            return [self.resource.read_namespaced_resource_claim(n, namespace) for n in names]  # type: ignore[arg-type]

        return wait_until(claims, timeout=timeout, message=f"claims of pod {namespace}/{pod_name}")


def start_control_plane(
    workdir: Path,
    binaries: dict[str, Path],
    extender_url: str | None = None,
    scheduler_config_file: Path | None = None,
    start_scheduler: bool = True,
    features: ClusterFeatures | None = None,
) -> ControlPlane:
    """Start etcd, kube-apiserver, kube-controller-manager and (unless ``start_scheduler`` is False)
    kube-scheduler in ``workdir``, each with the gates and flags of ``features``. On any failure everything
    started so far is stopped again."""
    plane = ControlPlane(workdir=workdir, binaries=binaries, features=features or ClusterFeatures())
    try:
        plane.start_etcd()
        plane.start_apiserver()
        plane.start_controller_manager()
        if start_scheduler:
            plane.start_scheduler(extender_url=extender_url, config_file=scheduler_config_file)
        wait_until(
            lambda: plane.core.read_namespaced_service_account("default", "default"),
            timeout=60,
            message="ServiceAccount default/default (kube-controller-manager working)",
        )
    except BaseException:
        plane.stop()
        raise
    return plane
