"""The composition root: a cluster source and the SchedulingService over it, built in one place for `serve`,
`explain`, the kubectl plugin's local answers and the tests.

Who reads which cluster is said by a typed `SourceSpec`; what only `serve` of a live cluster adds (its view kept
current between calls, the reservation journal, the kube-scheduler Lease it follows, the requeue class it
touches) by a `ServeSpec`. A one-shot command's service reserves nothing, writes nothing and ends with the
command. Every function here raises the commands' own errors (commands/outcomes.py) for what a person can fix.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from extender.commands.outcomes import InputError, RefusedError, UnreachableError, is_network_error, network_reason

if TYPE_CHECKING:  # imported where a service is built: a command failing on its input has not loaded them
    from extender.service import ExtenderConfig, SchedulingService
    from extender.service.leadership import Leadership
    from extender.state.reservation_journal import JournalIdentity, ReservationJournal
    from extender.state.sources import ClusterSource

DEMO_SNAPSHOT = "demo/cluster.yaml"
DEMO_DESCRIPTION = "the embedded demo cluster"
DEFAULT_REQUEST_TIMEOUT_SECONDS = 30.0
READY_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """Which cluster a command reads: a live API server through `kubeconfig` (and `context`) or the pod's own
    service account (`in_cluster`), a snapshot file (`snapshot`), or, when none is named, the embedded demo.
    `request_timeout`: how long a one-shot command waits for the API server before it says it is unreachable."""

    kubeconfig: str = ""
    context: str | None = None
    in_cluster: bool = False
    snapshot: str = ""
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_SECONDS

    @property
    def live(self) -> bool:
        return bool(self.kubeconfig or self.in_cluster)


@dataclass(frozen=True, slots=True)
class ServeSpec:
    """`serve`: the service answers kube-scheduler for as long as the process lives. `listen`: the address
    kube-scheduler calls, part of the `auto` journal's file name (one journal per extender per cluster)."""

    listen: str


def demo_snapshot_text() -> str:
    return resources.files("extender").joinpath(DEMO_SNAPSHOT).read_text(encoding="utf-8")


def check_kubeconfig_file(path: str) -> None:
    """A kubeconfig named on the command line must be a readable file: InputError naming it otherwise, in the
    words of every other missing file (the client's own message, "Invalid kube-config file. No configuration
    found.", does not say that the file is absent)."""
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise InputError(f"cannot use kubeconfig {path}: {error.strerror or error}") from None


def probe_api_server(api_config: Any, timeout: float) -> None:
    """One GET /version with connect and read timeouts, before a one-shot command starts its watches: an API
    server that does not answer is an UnreachableError now, not a wait on the watches' retries."""
    from extender.kube.api import ApiError, KubeApi

    api = KubeApi(api_config)
    try:
        api.get_json("/version", read_timeout=timeout)
    except ApiError as error:
        if error.status == 401:
            raise RefusedError(f"the API server at {api.host} refused the credentials: {error.describe()}") from None
    except Exception as error:
        if not is_network_error(error):
            raise
        raise UnreachableError(f"cannot reach the API server at {api.host}: {network_reason(error)}") from None
    finally:
        api.close()


@dataclass(frozen=True, slots=True)
class _Source:
    """The source built for a spec; for a live one also its API client configuration and kube-scheduler's
    binding call (a snapshot source has neither)."""

    source: ClusterSource
    api_config: Any = None
    binder: Any = None


def _open_source(spec: SourceSpec, config: ExtenderConfig, serving: bool) -> _Source:
    from extender.state.sources import SnapshotSource

    if spec.live:
        from extender.state import live

        options: dict[str, Any] = {
            "kueue_configmap": (config.kueue_config.namespace, config.kueue_config.name),
            "stale_grace_seconds": config.source.stale_grace_seconds,
        }
        if spec.kubeconfig:
            check_kubeconfig_file(spec.kubeconfig)
            source = live.from_kubeconfig(spec.kubeconfig, context=spec.context, **options)
        else:
            source = live.in_cluster(**options)
        if not serving:  # a one-shot command: fail at once on a silent API server
            probe_api_server(source.api_config, spec.request_timeout)
        return _Source(source, source.api_config, source.binder().create_binding)
    if spec.snapshot:
        return _Source(SnapshotSource(spec.snapshot))
    return _Source(SnapshotSource(text=demo_snapshot_text(), description=DEMO_DESCRIPTION))


def journal_for(
    config: ExtenderConfig, serve: ServeSpec | None, *, cluster: str = "", api_config: Any = None
) -> ReservationJournal | None:
    """`serve` of a live cluster keeps its reservations on disk (reservations.journal), so a restart next to the
    same kube-scheduler keeps the quota the previous process promised; other commands reserve nothing.
    `cluster`: the API server's address, part of the `auto` journal's name."""
    from extender.service.config import JOURNAL_AUTO
    from extender.state.reservation_journal import ReservationJournal, default_journal_path

    setting = config.reservations.journal
    if not setting or serve is None:
        return None
    identity = journal_identity(config, api_config)
    if setting == JOURNAL_AUTO:
        return ReservationJournal(default_journal_path(serve.listen or config.listen, cluster), identity=identity)
    return ReservationJournal(setting, identity=identity)


def journal_identity(config: ExtenderConfig, api_config: Any) -> JournalIdentity:
    """Whose promises the journal holds: the cluster (its kube-system Namespace's UID), the kube-scheduler (its
    Lease) and a hash of this configuration."""
    from extender.kube.cluster_identity import cluster_uid
    from extender.state.reservation_journal import JournalIdentity

    cluster = cluster_uid(api_config) if api_config is not None else ""
    digest = hashlib.sha256(repr(config).encode()).hexdigest()[:16]
    return JournalIdentity(cluster=cluster, scheduler=config.leader.lease, config=digest)


def _leadership(config: ExtenderConfig, api_config: Any) -> Leadership | None:
    """`serve` of a live cluster reads the kube-scheduler's Lease (leader.lease) to know whether it may reserve."""
    if not config.leader.lease:
        return None
    from extender.kube.scheduler_lease import SchedulerLease
    from extender.service.leadership import Leadership

    reader = SchedulerLease(api_config, config.leader.lease)
    return Leadership(reader, config.leader.identity, stale_seconds=config.leader.stale_seconds)


def build_service(
    spec: SourceSpec, config: ExtenderConfig, *, serve: ServeSpec | None = None, start: bool = True
) -> SchedulingService:
    """The service over the cluster `spec` names. With `serve` and a live source it keeps its view current, binds,
    journals its reservations, follows the kube-scheduler Lease and touches the requeue class; otherwise it
    reserves nothing. `start=False` leaves starting to the caller (`serve` starts a live source's watches in the
    forked worker: threads do not survive a fork). A snapshot that holds nothing is refused once started."""
    from extender.service import SchedulingService

    opened = _open_source(spec, config, serving=serve is not None)
    live_serve = serve if opened.binder is not None else None
    requeue = None
    if live_serve is not None and config.requeue.device_class_name:
        from extender.kube.requeue import Requeuer

        requeue = Requeuer(
            opened.api_config,
            config.requeue.device_class_name,
            min_interval_seconds=config.requeue.min_interval_seconds,
        )
    cluster = str(opened.api_config.host) if opened.api_config is not None else ""
    service = SchedulingService(
        opened.source,
        config,
        binder=opened.binder,
        requeue=requeue,
        journal=journal_for(config, live_serve, cluster=cluster, api_config=opened.api_config),
        keep_view_current=live_serve is not None,
        leadership=_leadership(config, opened.api_config) if live_serve is not None else None,
    )
    if start:
        service.start()
        if spec.snapshot:
            try:
                refuse_empty_snapshot(service)
            except BaseException:
                service.stop()
                raise
    return service


def refuse_empty_snapshot(service: SchedulingService) -> None:
    """A snapshot file with no Node and no ClusterQueue answers every question with nothing ("0 node(s) pass,
    0 fail"): it is an empty or wrong file, said as such (exit 3) rather than answered."""
    snapshot = service.snapshot()
    if not snapshot.nodes and not snapshot.cluster_queues:
        raise InputError(
            f"{service.source.description} holds no Node and no ClusterQueue: nothing to decide against "
            "(`dra-extender snapshot --kubeconfig FILE` writes one of a live cluster)"
        )


def wait_ready(service: SchedulingService, timeout: float = READY_TIMEOUT_SECONDS) -> None:
    """Wait for a live view's initial lists; UnreachableError with the source's last problem when they do not
    complete in time (the source retries an API server that does not answer; a one-shot command must not)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.health().ready:
            return
        time.sleep(0.2)
    raise UnreachableError(f"the cluster view did not become ready within {timeout:.0f}s: {service.health().message}")
