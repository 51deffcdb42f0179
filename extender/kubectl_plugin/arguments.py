"""The plugin's command line: kubectl's own flags (which kubectl does not pass to a plugin) and the sources'."""

from __future__ import annotations

import argparse
from typing import Any

from extender.commands.diagnostics_client import server_url
from extender.commands.outcomes import ArgumentParser

PROG = "kubectl dra-quota"
DEFAULT_SERVICE = "kube-system/dra-quota-scheduler-metrics:9090"


def _add_common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """kubectl accepts its flags before or after the subcommand; so do we (the subparsers' copies must not
    overwrite a value given before the subcommand, hence SUPPRESS there)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--kubeconfig", metavar="FILE", default=default(None), help="kubeconfig (default $KUBECONFIG)")
    parser.add_argument("--context", default=default(None), help="the kubeconfig context to use")
    parser.add_argument("-n", "--namespace", default=default(None), help="the namespace of the pod or PodGroup")
    parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default=default("table"))
    parser.add_argument(
        "--server",
        metavar="URL",
        type=server_url,
        default=default(None),
        help="ask this extender diagnostics URL instead (http://HOST:PORT)",
    )
    parser.add_argument(
        "--snapshot", metavar="FILE", default=default(None), help="compute from a snapshot file, offline"
    )
    parser.add_argument(
        "--local", action="store_true", default=default(False), help="compute locally, skip the in-cluster extender"
    )
    parser.add_argument(
        "--service",
        metavar="NS/NAME:PORT",
        default=default(DEFAULT_SERVICE),
        help=f"the extender's diagnostics Service (default {DEFAULT_SERVICE})",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=default(None),
        help="the extender's config file (YAML, config/extender.yaml) for --snapshot and --local answers",
    )
    parser.add_argument(
        "--request-timeout", type=float, metavar="SECONDS", default=default(30.0), help="per request (default 30)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Why the dra-quota-scheduler extender ranks nodes as it does: DRA devices and Kueue quota. "
        "Exit codes: 0 done, 1 failed, 2 usage, 3 bad input, 4 unreachable, 5 refused (docs/cli.md).",
    )
    _add_common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{explain,queues,node,podgroup}")
    explain = sub.add_parser("explain", help="rank every node for a pod and say why")
    _add_common(explain, suppress=True)
    explain.add_argument("pod", nargs="?", metavar="POD", help="a pod of the cluster (in -n NAMESPACE)")
    explain.add_argument("-f", "--filename", metavar="FILE", help="a pod manifest instead (YAML or JSON; - for stdin)")
    queues = sub.add_parser("queues", help="ClusterQueues: quota, usage, reservations, available per flavor")
    _add_common(queues, suppress=True)
    node = sub.add_parser("node", help="a node's devices, free or held by whom")
    _add_common(node, suppress=True)
    node.add_argument("node", metavar="NODE")
    podgroup = sub.add_parser("podgroup", help="a PodGroup's group verdict: what it needs and holds, each member")
    _add_common(podgroup, suppress=True)
    podgroup.add_argument("podgroup", metavar="NAME", help="a PodGroup (in -n NAMESPACE)")
    return parser
