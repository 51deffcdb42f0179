"""`dra-extender`: serve kube-scheduler, explain a pod's ranking, or write a snapshot of a live cluster."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from extender.commands.assembly import (
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    ServeSpec,
    SourceSpec,
    build_service,
    check_kubeconfig_file,
    probe_api_server,
    refuse_empty_snapshot,
    wait_ready,
)
from extender.commands.diagnostics_client import DiagnosticsClient, server_url, url_sender
from extender.commands.outcomes import ArgumentParser, CommandError, one_shot_logging, run_reporting_errors
from extender.commands.pod_file import add_objects_beside, load_pod_file, note_gates_off, parse_input_pod

if TYPE_CHECKING:  # loaded where a command builds a service: an input error is said before (commands/outcomes.py)
    from extender.service import ExtenderConfig, SchedulingService

log = logging.getLogger("extender")


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


def cmd_serve(args: argparse.Namespace) -> int:
    from extender.service import load_config

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
    spec = source_spec(args)
    live = spec.live
    service = build_service(spec, config, serve=ServeSpec(listen), start=False)
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
    from extender.service import ConfigError
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
    from extender.service import ConfigError

    if config.diagnostics.auth.mode != "kubernetes":
        return None
    api_config = service.source.api_config
    if api_config is None:
        raise ConfigError("diagnostics.auth.mode: kubernetes needs a live cluster (--kubeconfig or --in-cluster)")
    from extender.transport.access_review import AccessReviewer

    auth = config.diagnostics.auth
    return AccessReviewer(api_config, cache_seconds=auth.cache_seconds, audiences=auth.audiences)


def _read_gunicorn_config(path: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(Path(path).read_text(encoding="utf-8"), path, "exec"), namespace)  # operator-owned config file
    return {k: v for k, v in namespace.items() if not k.startswith("_") and k != "bind"}


def source_spec(args: argparse.Namespace) -> SourceSpec:
    """The cluster a command's flags name (--kubeconfig, --in-cluster, --snapshot, or none: the demo)."""
    return SourceSpec(
        kubeconfig=args.kubeconfig or "",
        in_cluster=args.in_cluster,
        snapshot=args.snapshot or "",
        request_timeout=args.request_timeout,
    )


def cmd_explain(args: argparse.Namespace) -> int:
    pod_file = load_pod_file(args.pod)  # before the service and the reports load: a wrong file is said at once
    pod = parse_input_pod(pod_file.pod, args.pod)
    from extender.reports.decisions import decision_json
    from extender.reports.text import render_table

    if args.server:
        report = DiagnosticsClient(url_sender(args.server, args.request_timeout), args.server.rstrip("/")).explain(
            pod_file.pod, pod_file
        )
    else:
        from extender.service import load_config

        config = load_config(args.config)
        one_shot_logging()
        service = build_service(source_spec(args), config)
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
    serve.set_defaults(handler=cmd_serve, request_timeout=DEFAULT_REQUEST_TIMEOUT_SECONDS)  # serve probes nothing

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
    return run_reporting_errors(lambda: handler(args), json_logs=_json_logs)


def _json_logs() -> bool:
    """Whether `serve` has made its logs JSON by the time an error ends it (its last line is then a log record)."""
    from extender.transport.logs import json_logging_configured

    return json_logging_configured()


if __name__ == "__main__":
    sys.exit(main())
