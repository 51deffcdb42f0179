"""`dra-extender`: serve kube-scheduler, explain a pod's ranking, or write a snapshot of a live cluster."""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from extender.service import ConfigError, ExtenderConfig, SchedulingService, load_config
from extender.service.config import JOURNAL_AUTO
from extender.service.leadership import Leadership
from extender.state.core import parse_pod
from extender.state.errors import ObjectError
from extender.state.kinds import kind_of_document, object_key
from extender.state.reservation_journal import JournalIdentity, ReservationJournal, default_journal_path
from extender.state.snapshot_file import SnapshotError
from extender.state.sources import ClusterSource, SnapshotSource
from extender.transport.strict_objects import ManifestError, StrictDecodingError, first_pod, load_documents

log = logging.getLogger("extender")

DEMO_SNAPSHOT = "demo/cluster.yaml"
DEFAULT_REQUEST_TIMEOUT_SECONDS = 30.0
READY_TIMEOUT_SECONDS = 60.0

# Exit codes of `dra-extender` and `kubectl dra-quota` (docs/cli.md): every error is one line `error: ...` on
# stderr and one of these codes, so that a script can tell a mistake in its input from a cluster that is down.
EXIT_OK = 0
EXIT_FAILED = 1  # the command could not run (a listen address in use, an unexpected error)
EXIT_USAGE = 2  # the command line is wrong (argparse's own code)
EXIT_INPUT = 3  # a file or object given is missing, unreadable, not YAML, or not a valid object
EXIT_UNREACHABLE = 4  # the API server or the extender did not answer in time (refused, timed out, never ready)
EXIT_REFUSED = 5  # it answered no: an object that does not exist, an error status, credentials refused
EXIT_STDOUT_CLOSED = 141  # stdout closed early (`| head`): 128 + SIGPIPE, as a command killed by SIGPIPE


class CommandError(Exception):
    """An error that ends a command with one line `error: ...` and its exit code."""

    exit_code = EXIT_FAILED


class UsageError(CommandError):
    exit_code = EXIT_USAGE


class InputError(CommandError):
    exit_code = EXIT_INPUT


class UnreachableError(CommandError):
    exit_code = EXIT_UNREACHABLE


class RefusedError(CommandError):
    exit_code = EXIT_REFUSED


class ArgumentParser(argparse.ArgumentParser):
    """argparse with its error as one `error: ...` line (exit code 2) instead of the usage and the message."""

    def error(self, message: str) -> Any:  # argparse's signature is NoReturn; mypy needs no more
        print(f"error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def demo_snapshot_text() -> str:
    return resources.files("extender").joinpath(DEMO_SNAPSHOT).read_text(encoding="utf-8")


def _add_source_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--snapshot",
        metavar="FILE",
        help="the cluster as a snapshot file (`dra-extender snapshot` or `kubectl get -o yaml` output); "
        "without a source flag: the embedded demo cluster",
    )
    group.add_argument("--kubeconfig", metavar="FILE", help="a live cluster, through this kubeconfig")
    group.add_argument("--in-cluster", action="store_true", help="the live cluster this pod runs in")


def _add_config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="the extender's config file (YAML; every key and its default: config/extender.yaml); "
        "default: the built-in defaults",
    )


def check_kubeconfig_file(path: str) -> None:
    """A kubeconfig named on the command line must be a readable file: InputError naming it otherwise, in the
    words of every other missing file (the client's own message, "Invalid kube-config file. No configuration
    found.", does not say that the file is absent). Shared with the kubectl plugin."""
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise InputError(f"cannot use kubeconfig {path}: {error.strerror or error}") from None


def server_url(text: str) -> str:
    """``--server``: an http:// or https:// URL. argparse turns the ArgumentTypeError into a usage error (exit 2)
    that says what to write; urllib would take ``127.0.0.1:8888`` for a URL of scheme ``127.0.0.1``."""
    import urllib.parse

    parts = urllib.parse.urlsplit(text)
    if parts.scheme in ("http", "https") and parts.netloc:
        return text
    if "://" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL: write http://{text} (or https://{text})")
    raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL with a host")


def refuse_empty_snapshot(service: SchedulingService) -> None:
    """A snapshot file with no Node and no ClusterQueue answers every question with nothing ("0 node(s) pass,
    0 fail"): it is an empty or wrong file, said as such (exit 3) rather than answered."""
    snapshot = service.snapshot()
    if not snapshot.nodes and not snapshot.cluster_queues:
        raise InputError(
            f"{service.source.description} holds no Node and no ClusterQueue: nothing to decide against "
            "(`dra-extender snapshot --kubeconfig FILE` writes one of a live cluster)"
        )


def _source(args: argparse.Namespace, config: ExtenderConfig) -> tuple[ClusterSource, Any]:
    """The cluster source named on the command line, and a binder when the source is live."""
    if getattr(args, "kubeconfig", None) or getattr(args, "in_cluster", False):
        from extender.state import live

        if args.kubeconfig:
            check_kubeconfig_file(args.kubeconfig)
            source = live.from_kubeconfig(
                args.kubeconfig,
                context=getattr(args, "context", None),  # kubectl-dra_quota --context
                kueue_configmap=(config.kueue_config.namespace, config.kueue_config.name),
                stale_grace_seconds=config.source.stale_grace_seconds,
            )
        else:
            source = live.in_cluster(
                kueue_configmap=(config.kueue_config.namespace, config.kueue_config.name),
                stale_grace_seconds=config.source.stale_grace_seconds,
            )
        if getattr(args, "command", "") != "serve":  # a one-shot command: fail at once on a silent API server
            probe_api_server(source.config, getattr(args, "request_timeout", DEFAULT_REQUEST_TIMEOUT_SECONDS))
        return source, source.binder().create_binding
    if getattr(args, "snapshot", None):
        return SnapshotSource(args.snapshot), None
    return SnapshotSource(text=demo_snapshot_text(), description="the embedded demo cluster"), None


def _is_live(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "kubeconfig", None) or getattr(args, "in_cluster", False))


def _journal(
    args: argparse.Namespace, config: ExtenderConfig, binder: object, cluster: str = "", api_config: Any = None
) -> ReservationJournal | None:
    """`serve` with a live source keeps its reservations on disk (reservations.journal), so a restart next to
    the same kube-scheduler keeps the quota the previous process promised; other commands reserve nothing.
    `cluster`: the API server's address, part of the `auto` journal's name."""
    setting = config.reservations.journal
    if not setting or binder is None or getattr(args, "command", "") != "serve":
        return None
    identity = _journal_identity(config, api_config)
    if setting == JOURNAL_AUTO:
        path = default_journal_path(getattr(args, "listen", None) or config.listen, cluster)
        return ReservationJournal(path, identity=identity)
    return ReservationJournal(setting, identity=identity)


def _journal_identity(config: ExtenderConfig, api_config: Any) -> JournalIdentity:
    """Whose promises the journal holds: the cluster (its kube-system Namespace's UID), the kube-scheduler (its
    Lease) and a hash of this configuration."""
    from extender.kube.cluster_identity import cluster_uid

    cluster = cluster_uid(api_config) if api_config is not None else ""
    digest = hashlib.sha256(repr(config).encode()).hexdigest()[:16]
    return JournalIdentity(cluster=cluster, scheduler=config.leader.lease, config=digest)


def _leadership(config: ExtenderConfig, api_config: Any, serving_live: bool) -> Leadership | None:
    """`serve` of a live cluster reads the kube-scheduler's Lease (leader.lease) to know whether it may reserve."""
    if not serving_live or not config.leader.lease or api_config is None:
        return None
    from extender.kube.scheduler_lease import SchedulerLease

    reader = SchedulerLease(api_config, config.leader.lease)
    return Leadership(reader, config.leader.identity, stale_seconds=config.leader.stale_seconds)


def _build_service(args: argparse.Namespace, config: ExtenderConfig, *, start: bool = True) -> SchedulingService:
    source, binder = _source(args, config)
    # Only `serve` of a live cluster keeps a view current and writes; the kubectl plugin's arguments name no command.
    serving_live = binder is not None and getattr(args, "command", "") == "serve"
    requeue = None
    if config.requeue.device_class_name and serving_live:
        from extender.kube.requeue import Requeuer

        requeue = Requeuer(
            source.config,  # type: ignore[attr-defined]  # a live source (binder is not None)
            config.requeue.device_class_name,
            min_interval_seconds=config.requeue.min_interval_seconds,
        )
    cluster = str(getattr(getattr(source, "config", None), "host", "") or "")  # a live source's API server
    api_config = getattr(source, "config", None)  # a live source's API client configuration
    journal = _journal(args, config, binder, cluster, api_config)
    service = SchedulingService(
        source,
        config,
        binder=binder,
        requeue=requeue,
        journal=journal,
        keep_view_current=serving_live,
        leadership=_leadership(config, api_config, serving_live),
    )
    if start:
        service.start()
        if getattr(args, "snapshot", None):
            _stop_on_error(service, refuse_empty_snapshot)
    return service


def _stop_on_error(service: SchedulingService, check: Callable[[SchedulingService], None]) -> None:
    try:
        check(service)
    except BaseException:
        service.stop()
        raise


def cmd_serve(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    from extender.transport.logs import configure_logging
    from extender.transport.server import ListenError, check_listen_addresses

    configure_logging(args.log_format or config.logging.format, config.logging.level)
    listen = args.listen or config.listen
    diagnostics_listen = args.diagnostics_listen or config.diagnostics.listen
    metrics_listen = args.metrics_listen or config.metrics.listen
    try:  # before "serving ...": an address in use is one clear error, not gunicorn's retries
        check_listen_addresses([a for a in (listen, diagnostics_listen, metrics_listen) if a])
    except ListenError as error:
        raise CommandError(str(error)) from None
    # gunicorn preloads the app and then forks its worker; threads do not survive a fork. A snapshot is loaded
    # before the fork (the worker inherits it), but a live source's watch threads must start in the worker,
    # or the worker would serve the view frozen at fork time while the watches update the master's copy.
    live = _is_live(args)
    service = _build_service(args, config, start=False)
    if not live:
        service.start()  # a snapshot that cannot be read (or holds nothing) is an error before "serving ..."
        if args.snapshot:
            refuse_empty_snapshot(service)
    log.info(  # what is served, where
        "serving %s on %s",
        service.source.description,
        listen,
        extra={"source": service.source.description, "listen": listen},
    )
    from extender.transport.server import ExtenderServer, ExtenderWorker, ServerLimits, gunicorn_options

    overrides = _read_gunicorn_config(args.gunicorn_config) if args.gunicorn_config else {}
    listeners = listener_settings(service, config, listen, diagnostics_listen, metrics_listen)
    app = listeners[0].app
    ExtenderWorker.configure(
        listeners,
        ServerLimits(
            read_timeout_seconds=config.server.read_timeout_seconds,
            request_timeout_seconds=config.server.request_timeout_seconds,
            max_body_bytes=max(config.limits.max_body_bytes, config.diagnostics.max_body_bytes),
        ),
    )
    if live:
        overrides["post_worker_init"] = lambda _worker: service.start()
    ExtenderServer(app, gunicorn_options([s.address for s in listeners], overrides)).run()
    return 0


def listener_settings(
    service: SchedulingService, config: ExtenderConfig, listen: str, diagnostics_listen: str, metrics_listen: str
) -> list[Any]:
    """The process's listeners (transport.server.ListenerSettings), scheduling first. Without a diagnostics
    listener the scheduling one serves everything; with one, it serves only kube-scheduler's verbs and health;
    a metrics listener serves only /metrics and the probes (the one the deployment exposes to the pod network,
    while diagnostics stay on loopback)."""
    import threading

    from extender.transport.app import create_app
    from extender.transport.foreground import foreground_for
    from extender.transport.liveness import InFlight
    from extender.transport.metrics import ExtenderMetrics
    from extender.transport.server import ListenerSettings

    tls = config.tls
    probe = (listen, bool(tls.cert_file))
    authorizer = _diagnostics_authorizer(service, config)
    check_exposure(config, listen, diagnostics_listen)
    shared: dict[str, Any] = {
        "metrics": ExtenderMetrics(service, foreground_for(service.store)),
        "in_flight": InFlight(),
        "explain_gate": threading.BoundedSemaphore(config.diagnostics.explain.concurrency),
        "people_gate": threading.BoundedSemaphore(config.diagnostics.concurrency),
    }
    app = create_app(
        service,
        serve_diagnostics=not diagnostics_listen,
        serve_metrics=not (diagnostics_listen or metrics_listen),
        authorizer=None if diagnostics_listen else authorizer,
        **shared,
    )
    listeners = [
        ListenerSettings(
            listen,
            app,
            config.server.max_connections,
            tls.cert_file,
            tls.key_file,
            tls.client_ca_file,
            direct=app.extensions.get("dra_scheduling_verbs"),
            client_names=tls.client_names,
        )
    ]
    if diagnostics_listen:
        diagnostics = create_app(service, serve_scheduling=False, self_probe=probe, authorizer=authorizer, **shared)
        listeners.append(ListenerSettings(diagnostics_listen, diagnostics, config.diagnostics.max_connections))
    if metrics_listen:
        metrics = create_app(
            service, serve_scheduling=False, serve_diagnostics=False, serve_metrics=True, self_probe=probe, **shared
        )
        listeners.append(ListenerSettings(metrics_listen, metrics, config.metrics.max_connections))
    return listeners


def check_exposure(config: ExtenderConfig, listen: str, diagnostics_listen: str) -> None:
    """Refuse to serve what only kube-scheduler, or only people with a token, may reach on an address others
    reach: kube-scheduler's verbs (a forged filter holds quota, a forged bind places any pod) listen on anything
    but loopback only with client certificates pinned to kube-scheduler's identity (tls.clientCAFile and
    tls.clientNames); the diagnostics and the web view (every tenant's pods, quota and devices) only with
    diagnostics.auth.mode kubernetes. The metrics listener serves only /metrics and the probes."""
    from extender.transport.server import is_loopback

    tls = config.tls
    if not is_loopback(listen) and not (tls.client_ca_file and tls.client_names):
        raise ConfigError(
            f"--listen {listen} is not a loopback address: kube-scheduler's verbs off loopback need client "
            "certificates pinned to kube-scheduler (tls.clientCAFile and tls.clientNames); or listen on 127.0.0.1"
        )
    if tls.client_ca_file and not tls.client_names:
        log.warning("tls.clientCAFile without tls.clientNames: any certificate of that CA may call the verbs")
    people = diagnostics_listen or listen
    if not is_loopback(people) and config.diagnostics.auth.mode != "kubernetes":
        raise ConfigError(
            f"diagnostics on {people} are not on loopback: set diagnostics.auth.mode: kubernetes (a token "
            "checked by the API server), or listen on 127.0.0.1 and use kubectl port-forward"
        )


def _diagnostics_authorizer(service: SchedulingService, config: ExtenderConfig) -> Any:
    """diagnostics.auth.mode kubernetes: tokens reviewed by the API server the live source watches."""
    if config.diagnostics.auth.mode != "kubernetes":
        return None
    api_config = getattr(service.source, "config", None)
    if api_config is None:
        raise ConfigError("diagnostics.auth.mode: kubernetes needs a live cluster (--kubeconfig or --in-cluster)")
    from extender.transport.access_review import AccessReviewer

    auth = config.diagnostics.auth
    return AccessReviewer(api_config, cache_seconds=auth.cache_seconds, audiences=auth.audiences)


def _read_gunicorn_config(path: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(Path(path).read_text(encoding="utf-8"), path, "exec"), namespace)  # operator-owned config file
    return {k: v for k, v in namespace.items() if not k.startswith("_") and k != "bind"}


@dataclass(frozen=True)
class PodFile:
    """A pod file a person gives: its first Pod, and the objects beside it (a ResourceClaimTemplate the pod
    names, its PodGroup, the group's other members, ...), which a local answer uses on top of the cluster asked
    (``add_objects_beside``)."""

    path: str
    pod: dict[str, Any]
    beside: tuple[dict[str, Any], ...] = ()


def load_pod_file(path: str) -> PodFile:
    """The first Pod of a YAML or JSON file a person gives (``-`` for stdin) and the objects beside it, decoded
    strictly (transport/strict_objects.py ``first_pod``: every object with a schema is checked). Every problem
    is an InputError."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        pod = first_pod(text)
    except ManifestError as error:
        raise InputError(f"{path}: {error}") from None
    objects = [d for d in load_documents(text) if isinstance(d, dict)]
    first = next(i for i, d in enumerate(objects) if d.get("kind", "Pod") == "Pod")  # first_pod's choice
    return PodFile(path, pod, tuple(objects[:first] + objects[first + 1 :]))


def _object_label(document: Mapping[str, Any]) -> str:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return f"{document.get('kind', '?')} {name or '(no name)'}"


def add_objects_beside(service: SchedulingService, pod_file: PodFile, namespace: str) -> None:
    """Add the objects beside the pod to the service's view, on top of the cluster or snapshot it reads, as
    ``kubectl apply -f FILE -n NAMESPACE`` would create them (a namespaced object naming no namespace lands in
    the pod's): the ResourceClaimTemplate written next to the pod is the one its answer uses. Kinds the
    extender does not read are left out. One note on stderr says what was used and what was left out. Only a
    service of the command's own is changed (it reserves nothing and ends with the command)."""
    used: list[str] = []
    ignored: list[str] = []
    for document in pod_file.beside:
        kind = document.get("kind")
        api_version = document.get("apiVersion", "")
        version = api_version if isinstance(api_version, str) else ""
        info = kind_of_document(kind, version) if isinstance(kind, str) and kind else None
        if info is None:
            ignored.append(_object_label(document))
            continue
        raw = dict(document)
        metadata = raw.get("metadata")
        if info.namespaced and isinstance(metadata, Mapping) and not metadata.get("namespace"):
            raw["metadata"] = {**metadata, "namespace": namespace}
        try:
            service.store.apply(info.kind, "ADDED", raw)
        except ObjectError as error:
            raise InputError(f"{pod_file.path}: {_object_label(document)}: {error.describe()}") from None
        used.append(f"{info.wire_kind} {object_key(info, raw)}")
    parts = []
    if used:
        parts.append(f"used beside the Pod, on top of {service.source.description}: {', '.join(used)}")
    if ignored:
        parts.append(f"left out (kinds the extender does not read): {', '.join(ignored)}")
    if parts:
        print(f"note: {pod_file.path}: {'; '.join(parts)}", file=sys.stderr)


GANG_FEATURES_EXAMPLE = "extender/demo/gang-features.yaml"


def note_gates_off(service: SchedulingService, group_key: str) -> None:
    """One note on stderr when a pod names a PodGroup that this service does not decide as a group: with
    GenericWorkload off (the default, as in kube-scheduler 1.37) a pod's schedulingGroup means nothing to
    kube-scheduler nor to the extender (decisions/gang/features.py), so the answer is the pod's alone."""
    if not group_key or service.config.features.generic_workload:
        return
    print(
        f"note: PodGroup {group_key} is not decided as a group: GenericWorkload is off in the extender's "
        "features (the default); when kube-scheduler runs with the gate, pass --config FILE with "
        f"`features: {{GenericWorkload: true}}` ({GANG_FEATURES_EXAMPLE} is one)",
        file=sys.stderr,
    )


def note_objects_not_sent(pod_file: PodFile, where: str) -> None:
    """A running extender is sent the Pod only: one note on stderr naming what the file holds beside it and
    how to have it used."""
    if pod_file.beside:
        names = ", ".join(_object_label(d) for d in pod_file.beside)
        print(
            f"note: {pod_file.path}: {where} is sent the Pod only; not used: {names} (create them in the "
            "cluster, or ask with --snapshot FILE or --kubeconfig FILE to have them used on top of it)",
            file=sys.stderr,
        )


def parse_input_pod(raw_pod: dict[str, Any], path: str) -> Any:
    try:
        return parse_pod(raw_pod)
    except ObjectError as error:
        raise InputError(f"{path}: {error.describe()}") from None


def cmd_explain(args: argparse.Namespace) -> int:
    from extender.reports.decisions import decision_json
    from extender.reports.text import render_table

    pod_file = load_pod_file(args.pod)
    pod = parse_input_pod(pod_file.pod, args.pod)
    if args.server:
        report = explain_remotely(args.server, pod_file.pod, args.request_timeout)
        note_objects_not_sent(pod_file, args.server)
    else:
        config = load_config(args.config)
        one_shot_logging()
        service = _build_service(args, config)
        try:
            if args.kubeconfig:
                wait_ready(service)
            add_objects_beside(service, pod_file, pod.namespace)
            report = decision_json(service.explain(pod))
            note_gates_off(service, pod.group_key)
        finally:
            service.stop()
    if args.output == "json":
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_table(report) + "\n")
    sys.stdout.flush()  # a closed pipe shows here, inside the command's error handling
    return 0


def one_shot_logging(level: int = logging.ERROR) -> None:
    """explain and the kubectl plugin log errors only, as text: the API client's retry warnings and the watches'
    progress are noise for a command that reports its own failure in one line. (snapshot keeps its warnings:
    an object left out of the snapshot, Kueue absent.)"""
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def explain_remotely(server: str, raw_pod: dict[str, Any], timeout: float) -> dict[str, Any]:
    """POST the pod to a running extender's /diagnostics/explain."""
    import urllib.error
    import urllib.request

    url = server.rstrip("/") + "/diagnostics/explain"
    request = urllib.request.Request(url, data=orjson.dumps(raw_pod), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            report: dict[str, Any] = orjson.loads(response.read())
            return report
    except urllib.error.HTTPError as error:
        raise RefusedError(f"{url}: HTTP {error.code}: {answer_message(error.read())}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", None) or error
        raise UnreachableError(
            f"cannot reach {url}: {network_reason(reason) if isinstance(reason, BaseException) else reason}"
        ) from None


def answer_message(data: bytes) -> str:
    """The message of an error answer (the extender's {"error": ...} or a metav1.Status), else its text."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return " ".join(data[:500].decode("utf-8", "replace").split())
    if isinstance(document, dict):
        return str(document.get("message") or document.get("error") or document)
    return str(document)[:500]


def wait_ready(service: SchedulingService, timeout: float = READY_TIMEOUT_SECONDS) -> None:
    """Wait for a live view's initial lists; UnreachableError with the source's last problem when they do not
    complete in time (the source retries an API server that does not answer; a one-shot command must not)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.health().ready:
            return
        time.sleep(0.2)
    raise UnreachableError(f"the cluster view did not become ready within {timeout:.0f}s: {service.health().message}")


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


def is_network_error(error: BaseException) -> bool:
    import urllib3

    return isinstance(error, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)) or (
        isinstance(error, OSError) and not isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError))
    )


def network_reason(error: BaseException) -> str:
    """A network failure in a few words ("Connection refused", "connect timed out"), not urllib3's repr chain."""
    import urllib3

    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        return network_reason(error.reason)
    if isinstance(error, urllib3.exceptions.NewConnectionError):  # (a ConnectTimeoutError subclass in urllib3 2)
        reason = str(error).rpartition("Failed to establish a new connection: ")[2] or str(error)
        return reason.partition("] ")[2] if reason.startswith("[Errno") else reason
    if isinstance(error, urllib3.exceptions.ConnectTimeoutError):
        return "connect timed out"
    if isinstance(error, urllib3.exceptions.ReadTimeoutError):
        return "read timed out"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def cmd_snapshot(args: argparse.Namespace) -> int:
    from extender.kube.api import load_kubeconfig
    from extender.state import live

    one_shot_logging(logging.WARNING)
    check_kubeconfig_file(args.kubeconfig)
    api_config = load_kubeconfig(args.kubeconfig)
    probe_api_server(api_config, args.request_timeout)
    live.write_snapshot(api_config, sys.stdout, read_timeout=args.request_timeout)
    sys.stdout.flush()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="dra-extender",
        description="kube-scheduler extender for DRA devices and Kueue ClusterQueue quota. Exit codes: 0 done, "
        "1 failed, 2 usage, 3 bad input, 4 unreachable, 5 refused, 141 stdout closed (docs/cli.md).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="answer kube-scheduler's filter/prioritize(/bind) calls over HTTP")
    _add_source_flags(serve)
    _add_config_flag(serve)
    serve.add_argument("--listen", metavar="HOST:PORT", help="address to listen on (default 127.0.0.1:8888)")
    serve.add_argument(
        "--diagnostics-listen",
        metavar="HOST:PORT",
        help="serve diagnostics, metrics and health on this separate listener (overrides diagnostics.listen)",
    )
    serve.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve only /metrics and the probes on this listener (overrides metrics.listen)",
    )
    serve.add_argument("--gunicorn-config", metavar="FILE", help="gunicorn settings file (config/gunicorn.conf.py)")
    serve.add_argument(
        "--log-format",
        choices=("json", "text"),
        help="json: one JSON object per line (default, overrides logging.format); text: lines for people",
    )
    serve.set_defaults(handler=cmd_serve)

    explain = sub.add_parser("explain", help="rank every node for a pod and say why")
    explain.add_argument("pod", metavar="POD.yaml", help="the pod (YAML or JSON; - for stdin)")
    _add_source_flags(explain)
    explain.add_argument(
        "--server", metavar="URL", type=server_url, help="ask a running extender instead (http://127.0.0.1:8888)"
    )
    _add_config_flag(explain)
    explain.add_argument("-o", "--output", choices=("table", "json"), default="table")
    _add_timeout_flag(explain)
    explain.set_defaults(handler=cmd_explain)

    snapshot = sub.add_parser("snapshot", help="write a live cluster's state as a snapshot file to stdout")
    snapshot.add_argument("--kubeconfig", metavar="FILE", required=True, help="the live cluster's kubeconfig")
    _add_timeout_flag(snapshot)
    snapshot.set_defaults(handler=cmd_snapshot)
    return parser


def _add_timeout_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--request-timeout",
        type=float,
        metavar="SECONDS",
        default=DEFAULT_REQUEST_TIMEOUT_SECONDS,
        help=f"per request to the API server or --server (default {DEFAULT_REQUEST_TIMEOUT_SECONDS:.0f})",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return run_reporting_errors(lambda: handler(args))


def run_reporting_errors(command: Callable[[], int]) -> int:
    """Run a command; every error becomes one line `error: ...` on stderr and its exit code (the table above),
    never a traceback. Shared with the kubectl plugin."""
    try:
        with _stdout_closed_quietly():
            return command()
    except CommandError as error:
        return _report(str(error), error.exit_code)
    except (ConfigError, SnapshotError, ObjectError, StrictDecodingError) as error:
        return _report(str(error), EXIT_INPUT)
    except _StdoutClosedError:
        return EXIT_STDOUT_CLOSED
    except KeyboardInterrupt:
        return _report("interrupted", 130)
    except Exception as error:
        return _report_other(error)


def _report(message: str, code: int) -> int:
    """The one error line: `error: ...`, or a JSON log line once `serve` has made its logs JSON."""
    from extender.transport.logs import json_logging_configured

    text = " ".join(message.split())
    if json_logging_configured():
        log.error("error: %s", text, extra={"exitCode": code})
    else:
        print(f"error: {text}", file=sys.stderr)
    return code


def _report_other(error: Exception) -> int:
    """Errors of the layers below that a command does not catch itself: the API client's configuration and
    answers, the network; anything else is a bug, reported as one line all the same."""
    from extender.kube.api import ApiConfigError, ApiError

    if isinstance(error, ApiConfigError):
        return _report(str(error), EXIT_INPUT)
    if isinstance(error, ApiError):
        return _report(f"the API server answered {error.describe()}", EXIT_REFUSED)
    if is_network_error(error):
        return _report(f"cannot reach the API server: {network_reason(error)}", EXIT_UNREACHABLE)
    if isinstance(error, OSError):
        return _report(f"{getattr(error, 'filename', '') or ''}: {error.strerror or error}".lstrip(": "), EXIT_INPUT)
    return _report(f"unexpected {type(error).__name__}: {error}", EXIT_FAILED)


class _StdoutClosedError(Exception):
    """stdout's reader went away (`| head`)."""


@contextmanager
def _stdout_closed_quietly() -> Iterator[None]:
    """A BrokenPipeError on stdout ends the command with EXIT_STDOUT_CLOSED and no message: the reader has what
    it wanted. stdout is pointed at /dev/null so that the interpreter's flush at exit does not fail again."""
    try:
        yield
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise _StdoutClosedError() from None


if __name__ == "__main__":
    sys.exit(main())
