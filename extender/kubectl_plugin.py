"""`kubectl dra-quota`: the extender's explanations one kubectl away (console script ``kubectl-dra_quota``).

kubectl runs any ``kubectl-<name>`` executable on PATH as ``kubectl <name>`` (a dash in the command is an
underscore in the file name, krew's convention), passing the remaining arguments and the environment but none of
its own flags, so this plugin reads ``--kubeconfig`` / ``KUBECONFIG``, ``--context`` and ``-n`` itself, as kubectl
would (k8s.io/cli-runtime genericclioptions: the context's namespace, else ``default``).

::

    kubectl dra-quota explain [-n NS] POD     # rank every node for a pod of the cluster and say why
    kubectl dra-quota explain -f pod.yaml     # ... for a pod that is not created yet
    kubectl dra-quota queues                  # ClusterQueues: nominal, usage, reserved, available per flavor
    kubectl dra-quota node NODE               # a node's devices, free or held by whom
    ... [-o table|json|yaml] [--context CTX] [--kubeconfig FILE]

Where the answer comes from, in this order:

1. ``--server URL``: a running extender's diagnostics listener (e.g. through ``kubectl port-forward``);
2. ``--snapshot FILE``: computed locally from a snapshot file (``dra-extender snapshot``, or the embedded demo's
   ``extender/demo/cluster.yaml``);
3. otherwise the cluster of the kubeconfig context: the in-cluster extender, reached through the API server's
   service proxy on its diagnostics Service (``kube-system/dra-quota-scheduler-metrics:9090`` as the manifests
   and the chart install it; ``--service`` to change), so the answer includes its in-flight quota reservations;
   when that Service is absent, has no ready endpoint, or reaches a listener without diagnostics (the default
   deployment keeps them on loopback: its port 9090 answers 404 with reason DIAGNOSTICS_ELSEWHERE), the answer
   is computed locally from a live read of the cluster (as ``dra-extender explain --kubeconfig`` does), with a
   note on stderr. ``--local`` skips the Service.

Exit codes follow kubectl: 0 on success, 1 on an error (printed to stderr as ``error: ...``), 2 on bad usage.

The service, the explanation and its table come from ``extender.cli`` and the diagnostics renderers it uses;
this module only adds kubectl's conventions, the API reads and the service proxy.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender import cli
from extender.service import load_config
from extender.state.core import parse_pod
from extender.state.errors import ObjectError
from extender.transport.wire import DIAGNOSTICS_ELSEWHERE

PROG = "kubectl dra-quota"
DEFAULT_SERVICE = "kube-system/dra-quota-scheduler-metrics:9090"
LOCAL_NOTE = (
    "computed locally from a live read of the cluster: the running extender's in-flight reservations are not included"
)
# API server answers to a service-proxy request that mean "no extender behind this Service": the Service is
# absent (404), has no ready endpoint (503), or the proxy cannot reach it (502, 504); and this user may not use
# the proxy (403). Anything else (401, 400, 5xx from the extender) is an error worth showing.
FALLBACK_STATUSES = frozenset({403, 404, 502, 503, 504})


class PluginError(Exception):
    """An error to print as ``error: ...`` with exit code 1."""


class UnreachableError(PluginError):
    """The in-cluster extender could not be asked; computing locally is the fallback."""


# --- kubeconfig, as kubectl resolves it --------------------------------------------------------------------


def kubeconfig_path(explicit: str | None) -> str | None:
    """--kubeconfig, else the first existing file of $KUBECONFIG, else ~/.kube/config when it exists.

    kubectl merges every file of $KUBECONFIG; the Python client reads one, so the first existing one is used.
    """
    if explicit:
        return explicit
    for candidate in os.environ.get("KUBECONFIG", "").split(os.pathsep):
        if candidate and Path(candidate).is_file():
            return candidate
    default = Path.home() / ".kube" / "config"
    return str(default) if default.is_file() else None


def context_namespace(path: str, context: str | None) -> str:
    """The namespace of the chosen (or current) context of a kubeconfig, ``default`` when it names none."""
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise PluginError(f"cannot read kubeconfig {path}: {error}") from None
    name = context or document.get("current-context")
    for entry in document.get("contexts") or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return str((entry.get("context") or {}).get("namespace") or "default")
    if context:
        raise PluginError(f'context "{context}" does not exist in {path}')
    return "default"


class Cluster:
    """Raw JSON requests to the API server of a kubeconfig context, through the kubernetes client's
    configuration (TLS, client certificates, tokens and exec plugins as the kubeconfig says)."""

    def __init__(self, kubeconfig: str, context: str | None, timeout: float) -> None:
        from kubernetes import config

        try:
            self._api = config.new_client_from_config(  # type: ignore[no-untyped-call]  # client has no annotations
                config_file=kubeconfig, context=context, persist_config=False
            )
        except (config.ConfigException, OSError) as error:
            raise PluginError(f"cannot use kubeconfig {kubeconfig}: {error}") from None
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """(status, body) of one request; raises UnreachableError when no HTTP answer came back."""
        import urllib3
        from kubernetes.client import ApiException

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            serialized = self._api.param_serialize(
                method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            response = self._api.call_api(*serialized[:4], _request_timeout=self.timeout)
            data = response.read()
        except ApiException as error:  # the client's transport errors (SSL, protocol); HTTP statuses come back
            raise UnreachableError(f"{self._api.configuration.host}: {getattr(error, 'reason', error)}") from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise UnreachableError(f"{self._api.configuration.host}: {error}") from None
        return response.status, data

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{_quote(namespace)}/pods/{_quote(name)}"
        try:
            status, data = self.request("GET", path)
        except UnreachableError as error:
            raise PluginError(f"cannot reach the API server: {error}") from None
        if status == 404:
            raise PluginError(f'pods "{name}" not found in namespace "{namespace}"')
        if status != 200:
            raise PluginError(f"reading pod {namespace}/{name}: HTTP {status}: {_status_message(data)}")
        pod: dict[str, Any] = orjson.loads(data)
        pod.setdefault("kind", "Pod")
        pod.setdefault("apiVersion", "v1")
        return pod

    def close(self) -> None:
        self._api.close()


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _status_message(data: bytes) -> str:
    """The message of a metav1.Status (or of the extender's error JSON), else the raw text."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data[:500].decode("utf-8", "replace").strip()
    if isinstance(document, Mapping):
        return str(document.get("message") or document.get("error") or document.get("Error") or document)
    return str(document)[:500]


# --- where the answer comes from ---------------------------------------------------------------------------


class Extender:
    """Asks one source for the three diagnostics: explain(pod), queues(), node(name)."""

    def explain(self, pod: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def queues(self) -> dict[str, Any]:
        raise NotImplementedError

    def node(self, name: str) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the source holds (watches, connections)."""


class HttpExtender(Extender):
    """The diagnostics HTTP API of an extender, at ``send(method, path, body) -> (status, body)``."""

    def __init__(self, send: Callable[[str, str, Any], tuple[int, bytes]], where: str) -> None:
        self._send = send
        self.where = where

    def _json(self, method: str, path: str, body: Any = None, missing: str | None = None) -> dict[str, Any]:
        status, data = self._send(method, path, body)
        if status == 200:
            document: dict[str, Any] = orjson.loads(data)
            return document
        if status == 404 and missing:
            raise PluginError(missing)
        raise PluginError(f"{self.where}{path}: HTTP {status}: {_status_message(data)}")

    def explain(self, pod: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", "/diagnostics/explain", pod)

    def queues(self) -> dict[str, Any]:
        return self._json("GET", "/diagnostics/queues")

    def node(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/diagnostics/nodes/{_quote(name)}", missing=f'node "{name}" is not known')


def url_sender(base: str, timeout: float) -> Callable[[str, str, Any], tuple[int, bytes]]:
    """Plain HTTP to an extender's diagnostics listener (``--server``)."""

    def send(method: str, path: str, body: Any) -> tuple[int, bytes]:
        data = orjson.dumps(body) if body is not None else None
        request = urllib.request.Request(
            base.rstrip("/") + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except (urllib.error.URLError, OSError) as error:
            raise PluginError(f"cannot reach {base}: {getattr(error, 'reason', error)}") from None

    return send


def parse_service(text: str) -> tuple[str, str, str]:
    """``NAMESPACE/NAME:PORT`` -> (namespace, name, port)."""
    namespace, _, rest = text.rpartition("/")
    name, _, port = rest.partition(":")
    if not namespace or not name or not port:
        raise PluginError(f"--service must be NAMESPACE/NAME:PORT, got {text!r}")
    return namespace, name, port


def service_sender(cluster: Cluster, service: str) -> Callable[[str, str, Any], tuple[int, bytes]]:
    """Requests to the extender through the API server's service proxy
    (``/api/v1/namespaces/NS/services/NAME:PORT/proxy/PATH``, core/v1 ServiceProxyOptions): authenticated as
    the kubeconfig user, no port-forward, works wherever kubectl works. Answers that mean "nobody behind the
    Service" raise UnreachableError."""
    namespace, name, port = parse_service(service)
    prefix = f"/api/v1/namespaces/{_quote(namespace)}/services/{_quote(name)}:{_quote(port)}/proxy"

    def send(method: str, path: str, body: Any) -> tuple[int, bytes]:
        try:
            status, data = cluster.request(method, prefix + path, body)
        except UnreachableError as error:  # the API server itself: a local computation could not read it either
            raise PluginError(f"cannot reach the API server: {error}") from None
        if status in FALLBACK_STATUSES and not _from_extender(data):
            raise UnreachableError(f"service {service}: HTTP {status}: {_status_message(data)}")
        return status, data

    return send


def _from_extender(data: bytes) -> bool:
    """The extender's own 404s (unknown node) carry {"error": ...}; the API server's carry a metav1.Status. A
    listener that does not serve diagnostics (the deployment's metrics listener: diagnostics stay on loopback)
    says so with reason DIAGNOSTICS_ELSEWHERE: nobody to ask behind this Service either."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(document, Mapping)
        and document.get("kind") != "Status"
        and "error" in document
        and document.get("reason") != DIAGNOSTICS_ELSEWHERE
    )


class LocalExtender(Extender):
    """A service of our own over a cluster source, built by extender.cli exactly as `dra-extender explain`
    builds it; it reserves nothing."""

    def __init__(self, source_args: argparse.Namespace, config_file: str | None, live: bool) -> None:
        config = load_config(config_file)
        self._service = cli._build_service(source_args, config)
        if live:
            cli._wait_ready(self._service)

    def explain(self, pod: dict[str, Any]) -> dict[str, Any]:
        from extender.transport.diagnostics import decision_json

        try:
            parsed = parse_pod(pod)
        except ObjectError as error:
            raise PluginError(f"pod: {error.describe()}") from None
        return decision_json(self._service.explain(parsed))

    def queues(self) -> dict[str, Any]:
        from extender.transport.diagnostics import queues_json

        view = self._service.quota_view()
        return queues_json(view, self._service.unplaced_workloads(view.snapshot))

    def node(self, name: str) -> dict[str, Any]:
        from extender.transport.diagnostics import node_json

        report = node_json(self._service.snapshot(), name)
        if report is None:
            raise PluginError(f'node "{name}" is not known')
        return report

    def close(self) -> None:
        self._service.stop()


class FallbackExtender(Extender):
    """The in-cluster extender through its Service; on UnreachableError, a LocalExtender (built once, on demand)."""

    def __init__(self, remote: HttpExtender, local: Callable[[], Extender]) -> None:
        self._remote = remote
        self._make_local = local
        self._local: Extender | None = None

    def _call(self, call: Callable[[Extender], dict[str, Any]]) -> dict[str, Any]:
        if self._local is None:
            try:
                return call(self._remote)
            except UnreachableError as error:
                print(f"note: {error}; {LOCAL_NOTE}", file=sys.stderr)
                self._local = self._make_local()
        return call(self._local)

    def explain(self, pod: dict[str, Any]) -> dict[str, Any]:
        return self._call(lambda e: e.explain(pod))

    def queues(self) -> dict[str, Any]:
        return self._call(lambda e: e.queues())

    def node(self, name: str) -> dict[str, Any]:
        return self._call(lambda e: e.node(name))

    def close(self) -> None:
        if self._local is not None:
            self._local.close()


# --- output ------------------------------------------------------------------------------------------------


def _columns(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """kubectl's table layout: upper-case headers, columns padded to the widest cell, three spaces apart."""
    widths = [
        max(len(header[i]), *(len(row[i]) for row in rows)) if rows else len(header[i]) for i in range(len(header))
    ]
    lines = []
    for row in (header, *rows):
        lines.append("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return lines


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def render_queues(report: Mapping[str, Any]) -> str:
    rows = []
    for queue in report["clusterQueues"]:
        for row in queue["resources"] or [{}]:
            rows.append(
                (
                    queue["name"],
                    _text(queue.get("cohort")),
                    _text(row.get("flavor")),
                    _text(row.get("resource")),
                    _text(row.get("nominal")),
                    _text(row.get("usage")),
                    _text(row.get("reserved")),
                    _text(row.get("admittedPending")),
                    _text(row.get("available")),
                    _text(row.get("borrowingLimit")),
                    _text(row.get("kueueReservation")),
                    _text(row.get("drift")),
                    _text(queue.get("problem") or (queue["stopPolicy"] if queue["stopPolicy"] != "None" else "")),
                )
            )
    header = (
        "CLUSTERQUEUE",
        "COHORT",
        "FLAVOR",
        "RESOURCE",
        "NOMINAL",
        "USAGE",
        "RESERVED",
        "ADMITTED-PENDING",
        "AVAILABLE",
        "BORROWING-LIMIT",
        "KUEUE-RESERVED",
        "DRIFT",
        "PROBLEM",
    )
    lines = _columns(header, rows) if rows else ["No ClusterQueues found."]
    if not report.get("kueueEnabled", True):
        lines.insert(0, "Kueue's CRDs are not installed: no pod is quota-governed.")
    reservations = report.get("reservations") or []
    if reservations:
        lines.append("")
        lines.extend(
            _columns(
                ("RESERVED FOR POD", "CLUSTERQUEUE", "NODE", "CHARGES", "EXPIRES-IN"),
                [
                    (
                        r["pod"],
                        r["clusterQueue"],
                        _text(r.get("node")),
                        ", ".join(f"{c['amount']} {c['resource']} in {c['flavor']}" for c in r["charges"]),
                        f"{r['expiresIn']}s",
                    )
                    for r in reservations
                ],
            )
        )
    unplaced = report.get("admittedNotPlaced") or []
    if unplaced:
        lines.append("")
        lines.extend(
            _columns(
                ("ADMITTED, NOT PLACED", "CLUSTERQUEUE", "FLAVORS", "PENDING PODS", "WHY"),
                [
                    (
                        u["workload"],
                        u["clusterQueue"],
                        ", ".join(f"{resource}: {flavor}" for resource, flavor in u["flavors"].items()) or "-",
                        str(len(u["pendingPods"])),
                        _text(u.get("reason")),
                    )
                    for u in unplaced
                ],
            )
        )
    return "\n".join(lines)


def render_node(report: Mapping[str, Any]) -> str:
    lines = [f"Node {report['node']}  {report['freeDevices']}/{report['totalDevices']} device(s) free", ""]
    rows = [
        (
            d["device"],
            "yes" if d["free"] else "no",
            ", ".join(d["heldBy"]) or "-",
            ", ".join(d["taints"]) or "-",
        )
        for d in report["devices"]
    ]
    lines.extend(_columns(("DEVICE", "FREE", "HELD BY", "TAINTS"), rows) if rows else ["No devices published."])
    problems = [p for p in report.get("pools", []) if p.get("incomplete") or p.get("invalid")]
    for pool in problems:
        state = pool["invalid"] or "incomplete (not every ResourceSlice of this generation is published yet)"
        lines.append(f"pool {pool['pool']} generation {pool['generation']}: {state}")
    if report.get("podsWithClaims"):
        lines.append("")
        lines.append("Pods with claims on this node: " + ", ".join(report["podsWithClaims"]))
    return "\n".join(lines)


def emit(report: Mapping[str, Any], output: str, table: Callable[[Mapping[str, Any]], str]) -> None:
    if output == "json":
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(dict(report), sort_keys=False, allow_unicode=True))
    else:
        sys.stdout.write(table(report) + "\n")


# --- command line ------------------------------------------------------------------------------------------


def _add_common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """kubectl accepts its flags before or after the subcommand; so do we (the subparsers' copies must not
    overwrite a value given before the subcommand, hence SUPPRESS there)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--kubeconfig", metavar="FILE", default=default(None), help="kubeconfig (default $KUBECONFIG)")
    parser.add_argument("--context", default=default(None), help="the kubeconfig context to use")
    parser.add_argument("-n", "--namespace", default=default(None), help="the pod's namespace (explain)")
    parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default=default("table"))
    parser.add_argument(
        "--server", metavar="URL", default=default(None), help="ask this extender diagnostics URL instead"
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
    parser.add_argument("--config", metavar="FILE", default=default(None), help="extender config for local computation")
    parser.add_argument(
        "--request-timeout", type=float, metavar="SECONDS", default=default(30.0), help="per request (default 30)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Why the dra-quota-scheduler extender ranks nodes as it does: DRA devices and Kueue quota.",
    )
    _add_common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{explain,queues,node}")
    explain = sub.add_parser("explain", help="rank every node for a pod and say why")
    _add_common(explain, suppress=True)
    explain.add_argument("pod", nargs="?", metavar="POD", help="a pod of the cluster (in -n NAMESPACE)")
    explain.add_argument("-f", "--filename", metavar="FILE", help="a pod manifest instead (YAML or JSON; - for stdin)")
    queues = sub.add_parser("queues", help="ClusterQueues: quota, usage, reservations, available per flavor")
    _add_common(queues, suppress=True)
    node = sub.add_parser("node", help="a node's devices, free or held by whom")
    _add_common(node, suppress=True)
    node.add_argument("node", metavar="NODE")
    return parser


def _source_args(**values: Any) -> argparse.Namespace:
    """The source flags extender.cli's service builder reads."""
    return argparse.Namespace(**{"snapshot": None, "kubeconfig": None, "in_cluster": False, "context": None, **values})


def open_extender(args: argparse.Namespace, cluster: Cluster | None) -> Extender:
    if args.server:
        return HttpExtender(url_sender(args.server, args.request_timeout), args.server.rstrip("/"))
    if args.snapshot:
        return LocalExtender(_source_args(snapshot=args.snapshot), args.config, live=False)
    assert cluster is not None
    kubeconfig = kubeconfig_path(args.kubeconfig)

    def local() -> Extender:
        return LocalExtender(_source_args(kubeconfig=kubeconfig, context=args.context), args.config, live=True)

    if args.local:
        return local()
    remote = HttpExtender(service_sender(cluster, args.service), f"service {args.service}")
    return FallbackExtender(remote, local)


def run(args: argparse.Namespace) -> int:
    if args.command == "explain" and not args.pod and not args.filename:
        raise PluginError("explain needs a POD name (or -f FILE)")
    needs_cluster = not args.server and not args.snapshot
    wants_cluster_pod = args.command == "explain" and not getattr(args, "filename", None)
    cluster: Cluster | None = None
    namespace = args.namespace
    if needs_cluster or wants_cluster_pod:
        kubeconfig = kubeconfig_path(args.kubeconfig)
        if kubeconfig is None:
            raise PluginError("no kubeconfig: pass --kubeconfig FILE or set KUBECONFIG")
        namespace = namespace or context_namespace(kubeconfig, args.context)
        cluster = Cluster(kubeconfig, args.context, args.request_timeout)
    extender: Extender | None = None
    try:
        if args.command == "explain":
            if args.filename:
                pod = cli._load_pod(args.filename)
                if namespace:
                    pod.setdefault("metadata", {}).setdefault("namespace", namespace)
            else:
                assert cluster is not None
                pod = cluster.get_pod(namespace or "default", args.pod)
            extender = open_extender(args, cluster)
            emit(extender.explain(pod), args.output, cli_table)
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


def cli_table(report: Mapping[str, Any]) -> str:
    """The ranking table of `dra-extender explain` (passing nodes first, then why the others fail)."""
    from extender.transport.diagnostics import render_table

    return render_table(report)


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


if __name__ == "__main__":
    sys.exit(main())
