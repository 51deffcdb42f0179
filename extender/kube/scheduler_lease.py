"""The kube-scheduler's leader-election Lease, read once a second: who leads the scheduler replicas.

kube-scheduler with leaderElection.leaderElect holds a coordination.k8s.io Lease (leaderElection.resourceNamespace
/ resourceName, kube-system/kube-scheduler by default) whose spec.holderIdentity is `<hostname>_<uuid>`
(cmd/kube-scheduler/app/options/options.go Config: `id := hostname + "_" + string(uuid.NewUUID())`), renewed
every retryPeriod (2 s by default) while it leads; client-go's leaderelection (tools/leaderelection/
leaderelection.go) lets another replica take it once leaseDuration has passed without a renewal. An extender runs
beside one kube-scheduler (a sidecar in its pod: the same hostname), so the holder's hostname says whether the
scheduler that calls this extender is the one leading (service/leadership.py decides what follows).

A GET per period, not a watch: one small object, and a poll cannot be left silently stale by a broken watch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes.client import Configuration

from extender.kube.api import ApiError, KubeApi
from extender.kube.paths import path_segment

log = logging.getLogger(__name__)

DEFAULT_LEASE = "kube-system/kube-scheduler"


@dataclass(frozen=True, slots=True)
class LeaseReading:
    """One successful read: the holder ("" when the Lease is free), whether the Lease exists at all (a scheduler
    without leader election makes none), and when it was read (monotonic seconds)."""

    holder: str
    exists: bool
    read_at: float


def parse_lease_name(text: str) -> tuple[str, str]:
    """`namespace/name` (a bare name is in kube-system)."""
    namespace, _, name = text.rpartition("/")
    return (namespace or "kube-system", name)


class SchedulerLease:
    """Reads the Lease every `period` seconds in a daemon thread; `reading()` is the newest successful read."""

    def __init__(
        self,
        config: Configuration,
        lease: str = DEFAULT_LEASE,
        *,
        period: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.namespace, self.name = parse_lease_name(lease)
        self.period = period
        self._clock = clock
        self._api = KubeApi(config)
        self._reading: LeaseReading | None = None
        self._stopping = threading.Event()
        self._failing = False

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reading(self) -> LeaseReading | None:
        return self._reading

    def start(self) -> None:
        self.read_once()
        threading.Thread(target=self._run, name="scheduler-lease", daemon=True).start()

    def stop(self) -> None:
        self._stopping.set()
        self._api.close()

    def _run(self) -> None:
        while not self._stopping.wait(self.period):
            self.read_once()

    def read_once(self) -> None:
        path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{path_segment(self.namespace)}/leases/{path_segment(self.name)}"
        )
        try:
            body = self._api.get_json(path, read_timeout=max(self.period * 5, 5.0))
            holder = str((body.get("spec") or {}).get("holderIdentity") or "")
            reading = LeaseReading(holder, True, self._clock())
        except ApiError as error:
            if error.status != 404:
                self._failed(error)
                return
            reading = LeaseReading("", False, self._clock())
        except (OSError, ValueError, AttributeError) as error:
            self._failed(error)
            return
        if self._failing:
            log.info("the kube-scheduler Lease %s is readable again", self.lease)
        self._failing = False
        previous = self._reading
        if previous is None or previous.holder != reading.holder or previous.exists != reading.exists:
            shown = (reading.holder or "(no holder)") if reading.exists else "(absent)"
            log.info("kube-scheduler Lease %s: %s", self.lease, shown)
        self._reading = reading

    def _failed(self, error: Exception) -> None:
        if not self._failing:
            log.warning("cannot read the kube-scheduler Lease %s: %s", self.lease, error)
        self._failing = True
