"""Kueue's controller manager (v0.19.2, built by ``testkit/builds/kubernetes.py``) in the throwaway control plane.

Kueue normally runs as a Deployment: cert-controller (internal cert management) writes its webhook serving
certificate into a Secret that the kubelet mounts, and kustomize points the webhook configurations and the
CRDs' conversion webhooks at a Service. Here there is no kubelet and no Service network, so:

- ``internalCertManagement.enable: false`` (with it on, Kueue waits for the kubelet to mount the Secret and
  never becomes ready) and an openssl CA + serving certificate for IP 127.0.0.1 in ``webhook.certDir``;
- every webhook and conversion ``clientConfig`` is rewritten from the Service to
  ``url: https://127.0.0.1:PORT/<path>`` plus the CA as ``caBundle``;
- all 11 CRDs of the release are applied (``config/components/crd/bases``), the conversion webhook on the
  ones ``config/components/crd/kustomization.yaml`` patches (``patches/webhook_in_*.yaml``);
- the webhook configurations are ``config/components/webhook/manifests.yaml``, and the job-framework webhooks
  get the namespaceSelector that ``config/components/webhook/kustomization.yaml`` gives them (not
  kube-system / kueue-system);
- ``leaderElection.leaderElect: false``, ``--feature-gates=VisibilityOnDemand=false`` (the visibility API
  server wants an APIService and a Service), ``integrations.frameworks: [batch/job]``.

The DRA integration (``KueueDRAIntegration``) is Beta and on by default in v0.19 (pkg/features/
kube_features.go); it charges ``resources.deviceClassMappings`` at admission (pkg/dra/claims.go:
ExactCount only; FirstAvailable, AllocationMode All and AdminAccess make the Workload inadmissible).

The metrics server: with internal cert management off, cmd/kueue/main.go reads its certificate from the fixed
path ``/etc/kueue/metrics/certs/tls.{crt,key}`` (no configuration field or flag changes it) and exits when it
is missing. So Kueue is started in a private mount namespace (``unshare --mount``, ``--map-root-user`` when
not root) with an overlay on ``/etc`` whose upper layer is in the test's temp dir: the certificate appears at
that path for Kueue only, and nothing is written outside the temp dir. Only where no mount namespace can be
made is the fixed path written (and said so).
"""

from __future__ import annotations

import base64
import copy
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from testkit.control_plane import (
    LOOPBACK,
    Component,
    ControlPlane,
    ControlPlaneError,
    free_port,
    spawn,
    wait_http_ready,
    wait_until,
)

KUEUE_NAMESPACE = "kueue-system"
KUEUE_CONFIGMAP = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
METRICS_CERT_PATH = Path("/etc/kueue/metrics/certs")  # cmd/kueue/main.go, fixed when internal certs are off
FEATURE_GATES = "VisibilityOnDemand=false"
FRAMEWORKS = ("batch/job",)


@dataclass
class KueueController:
    """A running Kueue controller manager and where it listens."""

    component: Component
    webhook_url: str  # https://127.0.0.1:PORT
    health_url: str  # http://127.0.0.1:PORT (/readyz, /healthz)
    metrics_url: str  # https://127.0.0.1:PORT/metrics (authenticated)
    configuration: dict[str, Any]
    ca_file: Path
    metrics_cert_mode: str  # "mount-namespace" or "fixed-path"
    phases: str = ""  # how long each start step took


# --- certificates ---------------------------------------------------------------------------------------


def _openssl() -> str:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ControlPlaneError("openssl is needed to make Kueue's webhook serving certificate (apt install openssl)")
    return openssl


def write_serving_certs(directory: Path, common_name: str = "e2e-kueue") -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for IP 127.0.0.1 signed by it: (ca.crt, tls.crt, tls.key) in
    ``directory``. tls.crt / tls.key are the names controller-runtime's webhook server and certwatcher read."""
    openssl = _openssl()
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "tls.key", directory / "tls.csr", directory / "tls.crt"
    ext = directory / "tls.ext"
    ext.write_text(
        f"subjectAltName=IP:{LOOPBACK}\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)

    run(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
        "-subj", f"/CN={common_name}-ca", "-keyout", str(ca_key), "-out", str(ca_crt),
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-sha256",
        "-subj",
        f"/CN={LOOPBACK}",
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    run(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
        "-days", "2", "-sha256", "-extfile", str(ext), "-out", str(crt),
    )  # fmt: skip
    for path in (ca_key, key):
        path.chmod(0o600)
    return ca_crt, crt, key


# --- Kueue's manifests, rewritten for 127.0.0.1 ------------------------------------------------------------


def _load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def conversion_crd_names(config_dir: Path) -> dict[str, str]:
    """CRD name -> conversion webhook path, for the patches crd/kustomization.yaml applies (webhook_in_*)."""
    kustomization = yaml.safe_load((config_dir / "crd" / "kustomization.yaml").read_text())
    found: dict[str, str] = {}
    for entry in kustomization.get("patches") or []:
        path = entry.get("path", "") if isinstance(entry, dict) else ""
        if not Path(path).name.startswith("webhook_in_"):
            continue
        for doc in _load_all(config_dir / "crd" / path):
            webhook = (doc.get("spec") or {}).get("conversion", {}).get("webhook", {})
            service = webhook.get("clientConfig", {}).get("service", {})
            found[doc["metadata"]["name"]] = service.get("path", "/convert")
    return found


def kueue_crds(config_dir: Path, webhook_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Every CRD of the release; those kustomize gives a conversion webhook get it with our URL and CA."""
    conversions = conversion_crd_names(config_dir)
    crds = []
    for path in sorted((config_dir / "crd" / "bases").glob("*.yaml")):
        for doc in _load_all(path):
            if doc.get("kind") != "CustomResourceDefinition":
                continue
            name = doc["metadata"]["name"]
            if name in conversions:
                doc["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": f"{webhook_url}{conversions[name]}", "caBundle": ca_bundle},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            crds.append(doc)
    return crds


def _job_framework_namespace_selector(config_dir: Path) -> tuple[dict[str, Any] | None, set[str]]:
    """The namespaceSelector webhook/kustomization.yaml puts on vpod.kb.io and copies to the other
    job-framework webhooks (its replacements), and the names of the webhooks it goes to."""
    kustomization = yaml.safe_load((config_dir / "webhook" / "kustomization.yaml").read_text())
    selector: dict[str, Any] | None = None
    for entry in kustomization.get("patches") or []:
        patch = entry.get("patch") if isinstance(entry, dict) else None
        if not patch:
            continue
        for doc in _load_all_text(patch):
            for webhook in doc.get("webhooks") or []:
                if "namespaceSelector" in webhook:
                    selector = webhook["namespaceSelector"]
    names: set[str] = set()
    for replacement in kustomization.get("replacements") or []:
        source = replacement.get("source", {}).get("fieldPath", "")
        if not source.endswith("namespaceSelector"):
            continue
        names.add(_bracketed_name(source))
        for target in replacement.get("targets") or []:
            names.update(_bracketed_name(p) for p in target.get("fieldPaths") or [])
    names.discard("")
    return selector, names


def _load_all_text(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _bracketed_name(field_path: str) -> str:
    """``webhooks.[name=vpod.kb.io].namespaceSelector`` -> ``vpod.kb.io``."""
    start = field_path.find("[name=")
    end = field_path.find("]", start)
    return field_path[start + len("[name=") : end] if start >= 0 and end > start else ""


def kueue_webhook_configurations(config_dir: Path, webhook_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """The Mutating/ValidatingWebhookConfigurations of the release, calling ``webhook_url`` directly."""
    selector, scoped = _job_framework_namespace_selector(config_dir)
    configurations = []
    for doc in _load_all(config_dir / "webhook" / "manifests.yaml"):
        if doc.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]  # config/default's namePrefix
        for webhook in doc.get("webhooks") or []:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"{webhook_url}{path}", "caBundle": ca_bundle}
            if selector is not None and webhook["name"] in scoped:
                webhook["namespaceSelector"] = copy.deepcopy(selector)
        configurations.append(doc)
    return configurations


def kueue_configuration(
    webhook_port: int,
    health_port: int,
    metrics_port: int,
    cert_dir: Path,
    device_class_mappings: list[dict[str, Any]],
    frameworks: tuple[str, ...] = FRAMEWORKS,
) -> dict[str, Any]:
    """The Configuration (config.kueue.x-k8s.io/v1beta2) Kueue runs with; the same text goes into the
    ConfigMap kueue-system/kueue-manager-config that our extender reads its deviceClassMappings from."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"{LOOPBACK}:{health_port}"},
        "metrics": {"bindAddress": f"{LOOPBACK}:{metrics_port}"},
        "webhook": {"host": LOOPBACK, "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(frameworks)},
        "resources": {"deviceClassMappings": device_class_mappings},
    }


# --- the private /etc for the metrics certificate -------------------------------------------------------


def _unshare_prefix() -> list[str] | None:
    """``unshare --mount [--map-root-user]`` if this machine lets us make a mount namespace, else None."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        return None
    prefix = [unshare, "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return prefix if probe.returncode == 0 else None


def _overlay_script(workdir: Path, cert_dir: Path) -> str:
    """Shell run inside the mount namespace: an overlay on /etc (upper layer in ``workdir``) holding the
    metrics certificate at Kueue's fixed path, then exec Kueue ("$@")."""
    upper, work = workdir / "etc-overlay" / "upper", workdir / "etc-overlay" / "work"
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    target = METRICS_CERT_PATH
    return " && ".join(
        [
            "mount --make-rprivate /",
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={shlex.quote(str(upper))},"
            f"workdir={shlex.quote(str(work))} /etc",
            f"mkdir -p {target}",
            f"cp {shlex.quote(str(cert_dir / 'tls.crt'))} {shlex.quote(str(cert_dir / 'tls.key'))} {target}/",
            'exec "$@"',
        ]
    )


def _write_fixed_metrics_cert(cert_dir: Path) -> None:
    """Fallback without mount namespaces: write the certificate where Kueue reads it (outside the temp dir)."""
    try:
        METRICS_CERT_PATH.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy2(cert_dir / name, METRICS_CERT_PATH / name)
    except OSError as exc:
        raise ControlPlaneError(
            f"Kueue reads its metrics certificate from {METRICS_CERT_PATH} when internal cert management is off; "
            f"no mount namespace could be made (unshare --mount) and writing it there failed: {exc}"
        ) from exc
    print(f"e2e: no mount namespace available; wrote Kueue's metrics certificate to {METRICS_CERT_PATH}", flush=True)


# --- start ----------------------------------------------------------------------------------------------


def _ensure_namespace(plane: ControlPlane, name: str) -> None:
    try:
        plane.create_namespace(name, wait_for_service_account=False)
    except ApiException as exc:
        if exc.status != 409:
            raise


def _create_or_replace_webhook_configuration(plane: ControlPlane, body: dict[str, Any]) -> None:
    api = k8s.AdmissionregistrationV1Api(plane.client)
    mutating = body["kind"] == "MutatingWebhookConfiguration"
    create = api.create_mutating_webhook_configuration if mutating else api.create_validating_webhook_configuration
    read = api.read_mutating_webhook_configuration if mutating else api.read_validating_webhook_configuration
    replace = api.replace_mutating_webhook_configuration if mutating else api.replace_validating_webhook_configuration
    name = body["metadata"]["name"]
    try:
        create(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        body["metadata"]["resourceVersion"] = read(name).metadata.resource_version
        replace(name, body)


def _webhooks_serving(plane: ControlPlane) -> bool:
    """True once kube-apiserver calls Kueue's webhooks: a dry-run ClusterQueue comes back with the finalizer
    Kueue's mutating webhook adds, and a dry-run Job with a queue name comes back suspended (mjob.kb.io)."""
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "e2e-webhook-probe"},
        "spec": {"namespaceSelector": {}, "resourceGroups": []},
    }
    created = plane.custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", cq, dry_run="All")
    if "kueue.x-k8s.io/resource-in-use" not in (created.get("metadata", {}).get("finalizers") or []):
        return False
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "e2e-webhook-probe", "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "x"}},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
            }
        },
    }
    result = k8s.BatchV1Api(plane.client).create_namespaced_job("default", job, dry_run="All")
    return bool(result.spec.suspend)


def start_kueue(
    plane: ControlPlane,
    kueue_dir: Path,
    device_class_mappings: list[dict[str, Any]],
    feature_gates: str = FEATURE_GATES,
    timeout: float = 120.0,
    *,
    frameworks: tuple[str, ...] = FRAMEWORKS,
    extra_crd_dirs: tuple[Path, ...] = (),
) -> KueueController:
    """Apply Kueue's CRDs and webhook configurations to ``plane`` and start its controller manager; return
    once kube-apiserver reaches its webhooks. ``kueue_dir`` is ``build.ensure_kueue()``; ``extra_crd_dirs``
    hold the CRDs of the job kinds ``frameworks`` name beyond batch/job (applied before Kueue starts, which
    sets up an integration only for a kind the API serves)."""
    started = time.monotonic()
    workdir = plane.workdir
    config_dir = kueue_dir / "config"
    cert_dir = workdir / "kueue-certs"
    ca_crt, _, _ = write_serving_certs(cert_dir)
    ca_bundle = base64.b64encode(ca_crt.read_bytes()).decode()
    webhook_port, health_port, metrics_port = free_port(), free_port(), free_port()
    webhook_url = f"https://{LOOPBACK}:{webhook_port}"

    phases: list[str] = [f"certificates {time.monotonic() - started:.1f}s"]
    crd_dir = workdir / "kueue-crds"
    crd_dir.mkdir(exist_ok=True)
    for crd in kueue_crds(config_dir, webhook_url, ca_bundle):
        (crd_dir / f"{crd['metadata']['name']}.yaml").write_text(yaml.safe_dump(crd, sort_keys=False))
    mark = time.monotonic()
    plane.apply_crds(crd_dir)
    for extra in extra_crd_dirs:
        plane.apply_crds(extra)
    phases.append(f"{len(list(crd_dir.glob('*.yaml')))} CRDs Established {time.monotonic() - mark:.1f}s")

    configuration = kueue_configuration(
        webhook_port, health_port, metrics_port, cert_dir, device_class_mappings, frameworks
    )
    config_text = yaml.safe_dump(configuration, sort_keys=False)
    config_file = workdir / "kueue-config.yaml"
    config_file.write_text(config_text)
    _ensure_namespace(plane, KUEUE_NAMESPACE)
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": KUEUE_CONFIGMAP, "namespace": KUEUE_NAMESPACE},
        "data": {KUEUE_CONFIG_KEY: config_text},
    }
    try:
        plane.core.create_namespaced_config_map(KUEUE_NAMESPACE, configmap)
    except ApiException as exc:
        if exc.status != 409:
            raise
        plane.core.replace_namespaced_config_map(KUEUE_CONFIGMAP, KUEUE_NAMESPACE, configmap)

    kueue_args = [
        str(kueue_dir / "kueue"),
        f"--config={config_file}",
        f"--kubeconfig={plane.kubeconfig}",
        f"--feature-gates={feature_gates}",
        "--zap-log-level=2",
    ]
    prefix = _unshare_prefix()
    if prefix is not None:
        args = [*prefix, "sh", "-c", _overlay_script(workdir, cert_dir), "kueue", *kueue_args]
        mode = "mount-namespace"
    else:
        _write_fixed_metrics_cert(cert_dir)
        args, mode = kueue_args, "fixed-path"
    mark = time.monotonic()
    component = spawn("kueue", args, plane.log_dir)
    component.url = f"http://{LOOPBACK}:{health_port}"
    plane.components["kueue"] = component
    wait_http_ready(component, f"{component.url}/readyz", timeout=timeout)
    phases.append(f"controller ready {time.monotonic() - mark:.1f}s")

    mark = time.monotonic()
    for body in kueue_webhook_configurations(config_dir, webhook_url, ca_bundle):
        _create_or_replace_webhook_configuration(plane, body)
    wait_until(lambda: _webhooks_serving(plane), timeout=60, message="kube-apiserver to call Kueue's webhooks")
    phases.append(f"webhooks called {time.monotonic() - mark:.1f}s")
    plane.check_alive()
    phases.append(f"{mode} metrics certificate")
    return KueueController(
        component=component,
        webhook_url=webhook_url,
        health_url=component.url,
        metrics_url=f"https://{LOOPBACK}:{metrics_port}/metrics",
        configuration=configuration,
        ca_file=ca_crt,
        metrics_cert_mode=mode,
        phases=", ".join(phases),
    )
