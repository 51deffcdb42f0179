"""The entry point: parse the command line, pick the source of the answer, print it, exit as kubectl does."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from extender import cli
from extender.kubectl_plugin.answer_source import Extender
from extender.kubectl_plugin.arguments import build_parser
from extender.kubectl_plugin.cluster import Cluster
from extender.kubectl_plugin.fallback import FallbackExtender
from extender.kubectl_plugin.kubeconfig import context_namespace, kubeconfig_path
from extender.kubectl_plugin.local import LocalExtender, source_args
from extender.kubectl_plugin.plugin_errors import PluginError
from extender.kubectl_plugin.remote import HttpExtender, service_sender, url_sender
from extender.kubectl_plugin.rendering import emit, render_explanation, render_node, render_queues


def open_extender(args: argparse.Namespace, cluster: Cluster | None) -> Extender:
    """The source of the answer, in the order of the package docstring: --server, --snapshot, the cluster."""
    if args.server:
        return HttpExtender(url_sender(args.server, args.request_timeout), args.server.rstrip("/"))
    if args.snapshot:
        return LocalExtender(source_args(snapshot=args.snapshot), args.config, live=False)
    assert cluster is not None
    kubeconfig = kubeconfig_path(args.kubeconfig)

    def local() -> Extender:
        return LocalExtender(source_args(kubeconfig=kubeconfig, context=args.context), args.config, live=True)

    if args.local:
        return local()
    remote = HttpExtender(service_sender(cluster, args.service), f"service {args.service}")
    return FallbackExtender(remote, local)


def _connect(args: argparse.Namespace) -> tuple[Cluster | None, str | None]:
    """The API server of the kubeconfig context and the namespace, when the source or the pod is read there."""
    needs_cluster = not args.server and not args.snapshot
    wants_cluster_pod = args.command == "explain" and not getattr(args, "filename", None)
    if not (needs_cluster or wants_cluster_pod):
        return None, args.namespace
    kubeconfig = kubeconfig_path(args.kubeconfig)
    if kubeconfig is None:
        raise PluginError("no kubeconfig: pass --kubeconfig FILE or set KUBECONFIG")
    namespace = args.namespace or context_namespace(kubeconfig, args.context)
    return Cluster(kubeconfig, args.context, args.request_timeout), namespace


def _pod_to_explain(args: argparse.Namespace, cluster: Cluster | None, namespace: str | None) -> dict[str, Any]:
    """The manifest of ``-f FILE`` (in the namespace when it names none), else the pod read from the cluster."""
    if args.filename:
        pod: dict[str, Any] = cli._load_pod(args.filename)
        if namespace:
            pod.setdefault("metadata", {}).setdefault("namespace", namespace)
        return pod
    assert cluster is not None
    return cluster.get_pod(namespace or "default", args.pod)


def run(args: argparse.Namespace) -> int:
    if args.command == "explain" and not args.pod and not args.filename:
        raise PluginError("explain needs a POD name (or -f FILE)")
    cluster, namespace = _connect(args)
    extender: Extender | None = None
    try:
        if args.command == "explain":
            pod = _pod_to_explain(args, cluster, namespace)
            extender = open_extender(args, cluster)
            emit(extender.explain(pod), args.output, render_explanation)
        elif args.command == "queues":
            extender = open_extender(args, cluster)
            emit(extender.queues(), args.output, render_queues)
        else:
            extender = open_extender(args, cluster)
            emit(extender.node(args.node), args.output, render_node)
    finally:
        if extender is not None:
            extender.close()
        if cluster is not None:
            cluster.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except PluginError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except ValueError as error:  # the config, snapshot and kubeconfig loaders' errors (ConfigError, ...)
        print(f"error: {error}", file=sys.stderr)
        return 1
    except SystemExit as error:  # extender.cli's own exits (a pod file without a Pod, a view never ready)
        if isinstance(error.code, str):
            print(f"error: {error.code.removeprefix('dra-extender: ')}", file=sys.stderr)
            return 1
        raise
