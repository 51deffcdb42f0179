"""`dra-extender`: serve kube-scheduler, explain a pod's ranking, or write a snapshot of a live cluster."""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender.service import ConfigError, ExtenderConfig, SchedulingService, load_config
from extender.service.config import JOURNAL_AUTO
from extender.service.leadership import Leadership
from extender.state.core import parse_pod
from extender.state.errors import ObjectError
from extender.state.reservation_journal import JournalIdentity, ReservationJournal, default_journal_path
from extender.state.snapshot_file import SnapshotError
from extender.state.sources import ClusterSource, SnapshotSource

log = logging.getLogger("extender")

DEMO_SNAPSHOT = "demo/cluster.yaml"


def demo_snapshot_text() -> str:
    return resources.files("extender").joinpath(DEMO_SNAPSHOT).read_text(encoding="utf-8")


def _add_source_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--snapshot", metavar="FILE", help="serve a cluster snapshot (kubectl get -o yaml dump)")
    group.add_argument("--kubeconfig", metavar="FILE", help="follow a live cluster through this kubeconfig")
    group.add_argument("--in-cluster", action="store_true", help="follow the cluster the pod runs in")


def _source(args: argparse.Namespace, config: ExtenderConfig) -> tuple[ClusterSource, Any]:
    """The cluster source named on the command line, and a binder when the source is live."""
    if getattr(args, "kubeconfig", None) or getattr(args, "in_cluster", False):
        from extender.state import live

        if args.kubeconfig:
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
    return service


def cmd_serve(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    from extender.transport.logs import configure_logging

    configure_logging(config.logging.format, config.logging.level)
    listen = args.listen or config.listen
    # gunicorn preloads the app and then forks its worker; threads do not survive a fork. A snapshot is loaded
    # before the fork (the worker inherits it), but a live source's watch threads must start in the worker,
    # or the worker would serve the view frozen at fork time while the watches update the master's copy.
    live = _is_live(args)
    service = _build_service(args, config, start=False)
    log.info(  # the first line an operator sees: what is served, where
        "serving %s on %s",
        service.source.description,
        listen,
        extra={"source": service.source.description, "listen": listen},
    )
    if not live:
        service.start()
    from extender.transport.server import ExtenderServer, ExtenderWorker, ServerLimits, gunicorn_options

    overrides = _read_gunicorn_config(args.gunicorn_config) if args.gunicorn_config else {}
    listeners = listener_settings(
        service,
        config,
        listen,
        args.diagnostics_listen or config.diagnostics.listen,
        args.metrics_listen or config.metrics.listen,
    )
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
    shared: dict[str, Any] = {
        "metrics": ExtenderMetrics(service, foreground_for(service.store)),
        "in_flight": InFlight(),
        "explain_gate": threading.BoundedSemaphore(config.diagnostics.explain.concurrency),
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


def _diagnostics_authorizer(service: SchedulingService, config: ExtenderConfig) -> Any:
    """diagnostics.auth.mode kubernetes: tokens reviewed by the API server the live source watches."""
    if config.diagnostics.auth.mode != "kubernetes":
        return None
    api_config = getattr(service.source, "config", None)
    if api_config is None:
        raise ConfigError("diagnostics.auth.mode: kubernetes needs a live cluster (--kubeconfig or --in-cluster)")
    from extender.transport.access_review import AccessReviewer

    return AccessReviewer(api_config, cache_seconds=config.diagnostics.auth.cache_seconds)


def _read_gunicorn_config(path: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(Path(path).read_text(encoding="utf-8"), path, "exec"), namespace)  # operator-owned config file
    return {k: v for k, v in namespace.items() if not k.startswith("_") and k != "bind"}


def _load_pod(path: str) -> Any:
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    documents = [d for d in yaml.safe_load_all(text) if d]
    pods = [d for d in documents if isinstance(d, dict) and d.get("kind", "Pod") == "Pod"]
    if not pods:
        raise SystemExit(f"dra-extender explain: {path} holds no Pod")
    return pods[0]


def cmd_explain(args: argparse.Namespace) -> int:
    from extender.transport.diagnostics import decision_json, render_table

    raw_pod = _load_pod(args.pod)
    if args.server:
        import urllib.error
        import urllib.request

        url = args.server.rstrip("/") + "/diagnostics/explain"
        request = urllib.request.Request(url, data=orjson.dumps(raw_pod), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                report = orjson.loads(response.read())
        except urllib.error.HTTPError as error:
            print(f"dra-extender explain: {url}: {error.code} {error.read().decode(errors='replace')}", file=sys.stderr)
            return 1
        except urllib.error.URLError as error:
            print(f"dra-extender explain: cannot reach {url}: {error.reason}", file=sys.stderr)
            return 1
    else:
        config = load_config(args.config)
        logging.basicConfig(level=logging.WARNING)
        service = _build_service(args, config)
        if args.kubeconfig:
            _wait_ready(service)
        try:
            pod = parse_pod(raw_pod)
        except ObjectError as error:
            print(f"dra-extender explain: {args.pod}: {error.describe()}", file=sys.stderr)
            return 1
        report = decision_json(service.explain(pod))
        service.stop()
    if args.output == "json":
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(render_table(report))
    return 0


def _wait_ready(service: SchedulingService, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.health().ready:
            return
        time.sleep(0.2)
    raise SystemExit("dra-extender: the cluster view did not become ready in time")


def cmd_snapshot(args: argparse.Namespace) -> int:
    from extender.state import live

    live.write_snapshot_from_kubeconfig(args.kubeconfig, sys.stdout)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-extender",
        description="kube-scheduler extender for DRA devices and Kueue ClusterQueue quota",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="answer kube-scheduler's filter/prioritize(/bind) calls over HTTP")
    _add_source_flags(serve)
    serve.add_argument("--config", metavar="FILE", help="extender config file (see config/extender.yaml)")
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
    serve.set_defaults(handler=cmd_serve)

    explain = sub.add_parser("explain", help="rank every node for a pod and say why")
    explain.add_argument("pod", metavar="POD.yaml", help="the pod (YAML or JSON; - for stdin)")
    _add_source_flags(explain)
    explain.add_argument("--server", metavar="URL", help="ask a running extender instead (http://127.0.0.1:8888)")
    explain.add_argument("--config", metavar="FILE")
    explain.add_argument("-o", "--output", choices=("table", "json"), default="table")
    explain.set_defaults(handler=cmd_explain)

    snapshot = sub.add_parser("snapshot", help="write a live cluster's state as a snapshot file to stdout")
    snapshot.add_argument("--kubeconfig", metavar="FILE", required=True)
    snapshot.set_defaults(handler=cmd_snapshot)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except (ConfigError, SnapshotError) as error:
        print(f"dra-extender: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
