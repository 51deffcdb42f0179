"""Requeue pods our filter parked, with an unmodified kube-scheduler: a harmless DeviceClass update.

kube-scheduler gives extenders no queueing hints: a pod the extender rejected gets the fake plugin name
"Extender" in its UnschedulablePlugins (pkg/scheduler/schedule_one.go), which is registered for every cluster
event of the unrolled wildcard list (framework/runtime/framework.go defaultEnqueueExtension,
framework/types.go UnrollWildCardResource: Pods, Nodes, PVs, PVCs, CSI objects, StorageClasses,
ResourceClaims, DeviceClasses; not ResourceSlices, not Kueue's objects, not ConfigMaps) with the default hint
Queue. Quota or devices that free up without such an event (a ClusterQueue's nominal quota raised, a cohort
changed, a reservation expiring, a slice published), or through one kube-scheduler saw before our view did,
would leave those pods parked until the unschedulable pool is flushed (5 minutes): service/parking.py.

An update of a DeviceClass no claim uses is such an event: pods parked by "Extender" go back to the queue (after
their backoff), pods rejected by other plugins are unaffected (DynamicResources' DeviceClass hint skips pods
whose claims do not name the class). So the extender owns one DeviceClass that selects nothing and bumps an
annotation on it, at most once per `min_interval_seconds`, when the service says quota or devices may have freed
up for pods it refused. Needs patch on that DeviceClass (the manifests ship it), and create where it is missing.
"""

from __future__ import annotations

import logging
import threading
import time

import orjson
import urllib3
from kubernetes.client import Configuration

from extender.kube.api import ApiError, KubeApi
from extender.kube.paths import path_segment

log = logging.getLogger(__name__)

REQUEUE_ANNOTATION = "dra-extender.kueue.x-k8s.io/requeue"
DEVICE_CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


def requeue_class(name: str) -> dict[str, object]:
    """A DeviceClass no device matches (CEL `false`): nothing can be allocated through it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "dra-extender"},
            "annotations": {REQUEUE_ANNOTATION: "0"},
        },
        "spec": {"selectors": [{"cel": {"expression": "false"}}]},
    }


class Requeuer:
    """Coalescing: any number of `request()` calls between two bumps make one bump."""

    def __init__(self, api_client_config: Configuration, class_name: str, *, min_interval_seconds: float = 1.0) -> None:
        self._api = KubeApi(api_client_config)
        self.class_name = class_name
        self.min_interval_seconds = min_interval_seconds
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.bumps = 0
        self.failures = 0

    def request(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="requeue", daemon=True)
            self._thread.start()
        self._wanted.set()

    def __call__(self) -> None:
        self.request()

    def stop(self) -> None:
        self._stopping.set()
        self._wanted.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wanted.wait()
            if self._stopping.is_set():
                return
            self._wanted.clear()
            try:
                self._bump()
            except (ApiError, urllib3.exceptions.HTTPError, OSError) as error:
                self.failures += 1
                detail = error.describe() if isinstance(error, ApiError) else str(error)
                log.warning("cannot requeue parked pods through DeviceClass %s: %s", self.class_name, detail)
            self._stopping.wait(self.min_interval_seconds)

    def _bump(self) -> None:
        """Patch the class; create it first where it is missing (the manifests ship it, and grant patch on it by
        name only: `resourceNames` cannot restrict create)."""
        try:
            self._patch()
        except ApiError as error:
            if error.status != 404:
                raise
            try:
                self._api.post_json(DEVICE_CLASSES, requeue_class(self.class_name), read_timeout=10)
            except ApiError as create_error:
                if create_error.status != 409:  # 409: another replica created it meanwhile
                    raise
            self._patch()
        self.bumps += 1
        log.info("requeued parked pods (DeviceClass %s updated)", self.class_name)

    def _patch(self) -> None:
        patch = {"metadata": {"annotations": {REQUEUE_ANNOTATION: str(time.time_ns())}}}
        response = self._api.request(
            "PATCH",
            f"{DEVICE_CLASSES}/{path_segment(self.class_name)}",
            raw_body=orjson.dumps(patch),
            content_type="application/merge-patch+json",
            read_timeout=10,
        )
        response.release_conn()
