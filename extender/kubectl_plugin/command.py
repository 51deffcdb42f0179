"""The entry point: parse the command line, pick the source of the answer, print it, exit as kubectl does."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from typing import Any

from extender.commands.assembly import SourceSpec
from extender.commands.diagnostics_client import DiagnosticsClient, url_sender
from extender.commands.outcomes import InputError, UsageError, one_shot_logging, run_reporting_errors
from extender.commands.pod_file import PodFile, load_pod_file, parse_input_pod
from extender.kubectl_plugin.answer_source import Extender
from extender.kubectl_plugin.arguments import build_parser
from extender.kubectl_plugin.cluster import Cluster
from extender.kubectl_plugin.fallback import FallbackExtender
from extender.kubectl_plugin.kubeconfig import context_namespace, kubeconfig_path
from extender.kubectl_plugin.local import LocalExtender
from extender.kubectl_plugin.podgroup_rendering import render_podgroup
from extender.kubectl_plugin.remote import service_sender
from extender.kubectl_plugin.rendering import emit, render_explanation, render_node, render_queues


def open_extender(args: argparse.Namespace, cluster: Cluster | None) -> Extender:
    """The source of the answer, in the order of the package docstring: --server, --snapshot, the cluster."""
    if args.server:
        return DiagnosticsClient(url_sender(args.server, args.request_timeout), args.server.rstrip("/"))
    if args.snapshot:
        return LocalExtender(SourceSpec(snapshot=args.snapshot), args.config)
    assert cluster is not None
    kubeconfig = kubeconfig_path(args.kubeconfig)

    def local() -> Extender:
        return LocalExtender(
            SourceSpec(kubeconfig=kubeconfig or "", context=args.context, request_timeout=args.request_timeout),
            args.config,
        )

    if args.local:
        return local()
    remote = DiagnosticsClient(service_sender(cluster, args.service), f"service {args.service}")
    return FallbackExtender(remote, local)


def _connect(args: argparse.Namespace) -> tuple[Cluster | None, str | None]:
    """The API server of the kubeconfig context and the namespace, when the source or the pod is read there. A
    named pod is read from the API server only when the answer comes from it too, or from ``--server`` with a
    kubeconfig at hand: with ``--snapshot`` it is the snapshot's pod, with ``--server`` alone the extender's own
    last decision for it. A PodGroup is never read from the API server (the extender's view of it is the
    answer), but its namespace is resolved as a named pod's."""
    offline = bool(args.server or args.snapshot)
    kubeconfig = kubeconfig_path(args.kubeconfig)
    named_pod = args.command == "explain" and not args.filename
    wants_cluster_pod = named_pod and (not offline or (args.server and kubeconfig is not None))
    if offline and not wants_cluster_pod:
        namespace = args.namespace
        # the context's namespace when a kubeconfig says one, as kubectl
        if namespace is None and (named_pod or args.command == "podgroup"):
            namespace = context_namespace(kubeconfig, args.context) if kubeconfig is not None else "default"
        return None, namespace
    if kubeconfig is None:
        raise InputError("no kubeconfig: pass --kubeconfig FILE or set KUBECONFIG (or --snapshot FILE, --server URL)")
    namespace = args.namespace or context_namespace(kubeconfig, args.context)
    return Cluster(kubeconfig, args.context, args.request_timeout), namespace


def _pod_to_explain(
    args: argparse.Namespace, cluster: Cluster | None, namespace: str | None
) -> tuple[dict[str, Any], PodFile | None]:
    """The manifest of ``-f FILE`` (decoded strictly; in the namespace when it names none) with the file, else
    the pod read from the cluster."""
    if args.filename:
        pod_file = load_pod_file(args.filename)
        pod = pod_file.pod
        parse_input_pod(pod, args.filename)
        if namespace:
            pod.setdefault("metadata", {}).setdefault("namespace", namespace)
        return pod, pod_file
    assert cluster is not None
    return cluster.get_pod(namespace or "default", args.pod), None


def _explain(
    args: argparse.Namespace, cluster: Cluster | None, namespace: str | None, source: Callable[[], Extender]
) -> dict[str, Any]:
    """The explanation, offline for a named pod when the source allows (see ``_connect``)."""
    namespace = namespace or "default"
    if args.filename or cluster is not None:
        pod, pod_file = _pod_to_explain(args, cluster, namespace)
        return source().explain(pod, pod_file)
    extender = source()
    if isinstance(extender, LocalExtender):
        return extender.explain_named(namespace, args.pod)
    assert isinstance(extender, DiagnosticsClient)
    report = extender.last_decision(namespace, args.pod)
    print(f"note: {LAST_DECISION_NOTE}", file=sys.stderr)
    return report


LAST_DECISION_NOTE = "no kubeconfig to read the pod from: this is the extender's last decision for it"


def run(args: argparse.Namespace) -> int:
    if args.command == "explain" and not args.pod and not args.filename:
        raise UsageError("explain needs a POD name (or -f FILE)")
    cluster, namespace = _connect(args)
    with contextlib.ExitStack() as resources:
        if cluster is not None:
            resources.callback(cluster.close)

        def source() -> Extender:
            extender = open_extender(args, cluster)
            resources.callback(extender.close)
            return extender

        if args.command == "explain":
            emit(_explain(args, cluster, namespace, source), args.output, render_explanation)
        elif args.command == "queues":
            emit(source().queues(), args.output, render_queues)
        elif args.command == "podgroup":
            emit(source().podgroup(namespace or "default", args.podgroup), args.output, render_podgroup)
        else:
            emit(source().node(args.node), args.output, render_node)
        sys.stdout.flush()  # a closed pipe shows here, inside the command's error handling
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    one_shot_logging()
    return run_reporting_errors(lambda: run(args))
