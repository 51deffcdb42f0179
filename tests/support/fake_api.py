"""A scripted Kubernetes API server for the live-source tests (its own tests: tests/tooling/test_live_fake_api.py).

Real API servers are not available in unit tests, and a mock of the client would test nothing of the wire:
this server speaks HTTP on 127.0.0.1 (discovery, paginated lists, chunked watch streams, bindings) and keeps,
per collection, the objects and an event log keyed by a cluster-wide resourceVersion, so tests script what
happens (events, bookmarks, dropped connections, 410 Gone, malformed objects) and then check that the client
converged to what a fresh list of the final objects gives.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import http.server
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from extender.state.kinds import KINDS, KINDS_BY_NAME, KindInfo, object_key
from extender.state.store import ClusterStore
from testkit import builders as b

TOKEN = "test-token"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
KUEUE = "kueue.x-k8s.io"
DRA = "resource.k8s.io"
DRA_PLURALS = ("resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates")
KUEUE_PLURALS = ("clusterqueues", "cohorts", "localqueues", "resourceflavors", "workloads")
CORE_PLURALS = ("nodes", "namespaces", "pods", "configmaps")
INFO_BY_PLURAL: Mapping[str, KindInfo] = {info.plural: info for info in KINDS}
KUEUE_CONFIGMAP = ("kueue-system", "kueue-manager-config")


def default_groups() -> dict[str, dict[str, tuple[str, ...]]]:
    return {DRA: {"v1": DRA_PLURALS}, KUEUE: {"v1beta2": KUEUE_PLURALS}}


class ExpireMode(enum.Enum):
    HTTP = "http"  # live watches are cut; the reconnect gets HTTP 410 (after restore(): 504 ResourceVersionTooLarge)
    EVENT = "event"  # live watches get an ERROR event with code 410 (after restore(): the reconnect gets a 504 one)


@dataclasses.dataclass
class Collection:
    objects: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    log: list[tuple[int, str, dict[str, Any]]] = dataclasses.field(default_factory=list)  # (rv, type, object)
    compacted: int = 0  # a watch from an older resourceVersion is expired
    drop_generation: int = 0  # bumped to cut every live watch
    drop_mid_frame: bool = False
    expire_generation: int = 0  # bumped to send ERROR 410 to every live watch
    list_gate: threading.Event = dataclasses.field(default_factory=threading.Event)
    expire_mode: ExpireMode = ExpireMode.HTTP
    watch_status: int | None = None  # answer new watches with this HTTP status
    live_watches: int = 0


class _Listener(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # fourteen watchers connect at once; a backlog of 5 drops SYNs (1 s retransmits)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (stop(), dropped watches) are part of the script, not errors worth a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class FakeApiServer:
    def __init__(
        self, groups: dict[str, dict[str, tuple[str, ...]]] | None = None, *, split_frames: bool = True
    ) -> None:
        self.groups = groups if groups is not None else default_groups()
        self.split_frames = split_frames  # send each watch frame in two chunks, to exercise reassembly
        self.cond = threading.Condition()
        self.rv = 100
        self.collections: dict[str, Collection] = {}
        for plural in INFO_BY_PLURAL:
            self._collection(plural).list_gate.set()
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (method, path, query)
        self.bindings: list[dict[str, Any]] = []
        self.binding_failures: dict[tuple[str, str], tuple[int, str, str]] = {}
        self.continue_expired = False
        # TokenReview and SubjectAccessReview (authentication.k8s.io/v1, authorization.k8s.io/v1): token -> (user
        # name, the audiences it was minted for), and the (user, verb, path) triples allowed; a path ending in
        # "*" is a prefix, as RBAC's nonResourceURLs. Every review posted is kept, in order.
        self.review_tokens: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.review_grants: set[tuple[str, str, str]] = set()
        self.reviews: list[dict[str, Any]] = []
        self.too_large_mode = ExpireMode.EVENT  # how a watch from a resourceVersion ahead of the server is refused
        self.closing = False
        self.httpd = _Listener(("127.0.0.1", 0), _handler_for(self))
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def close(self) -> None:
        with self.cond:
            self.closing = True
            for collection in self.collections.values():
                collection.list_gate.set()
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, directory: Path, token: str = TOKEN) -> Path:
        path = directory / "kubeconfig"
        path.write_text(
            orjson.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "tester", "user": {"token": token}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
                    "current-context": "fake",
                }
            ).decode()
        )
        return path

    # --- scripting ----------------------------------------------------------------------------------------------

    def _collection(self, plural: str) -> Collection:
        return self.collections.setdefault(plural, Collection())

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def put(self, obj: Mapping[str, Any]) -> int:
        """Create or update (ADDED / MODIFIED event); returns the object's new resourceVersion."""
        info = KINDS_BY_NAME[str(obj["kind"])]
        with self.cond:
            collection = self._collection(info.plural)
            stored = self._stamp(obj)
            key = object_key(info, stored)
            event = "MODIFIED" if key in collection.objects else "ADDED"
            collection.objects[key] = stored
            collection.log.append((self.rv, event, stored))
            self.cond.notify_all()
            return self.rv

    def put_all(self, *objects: Mapping[str, Any]) -> None:
        for obj in objects:
            self.put(obj)

    def delete(self, kind: str, key: str) -> int:
        info = KINDS_BY_NAME[kind]
        with self.cond:
            collection = self._collection(info.plural)
            stored = collection.objects.pop(key)
            gone = copy.deepcopy(stored)
            gone["metadata"]["resourceVersion"] = str(self._next_rv())
            collection.log.append((self.rv, "DELETED", gone))
            self.cond.notify_all()
            return self.rv

    def bookmark(self, plural: str) -> int:
        """Other collections moved the cluster's resourceVersion on; watchers of this one learn it."""
        info = INFO_BY_PLURAL[plural]
        with self.cond:
            rv = self._next_rv()
            bookmark = {"kind": info.kind, "metadata": {"resourceVersion": str(rv)}}
            self._collection(plural).log.append((rv, "BOOKMARK", bookmark))
            self.cond.notify_all()
            return rv

    def raw_event(self, plural: str, event_type: str, obj: Any) -> None:
        """Anything at all on the stream (malformed frames), without touching the stored objects."""
        with self.cond:
            self._collection(plural).log.append((self._next_rv(), event_type, obj))
            self.cond.notify_all()

    def drop(self, plural: str, *, mid_frame: bool = False) -> None:
        with self.cond:
            collection = self._collection(plural)
            collection.drop_generation += 1
            collection.drop_mid_frame = mid_frame
            self.cond.notify_all()

    def expire(
        self, plural: str, change: Callable[[], None] = lambda: None, *, mode: ExpireMode = ExpireMode.HTTP
    ) -> None:
        """Change objects without events (history compacted), so only a relist can see the change."""
        with self.cond:
            collection = self._collection(plural)
            change()
            collection.compacted = self._next_rv()
            collection.expire_mode = mode
            if mode is ExpireMode.HTTP:
                collection.drop_generation += 1
            else:
                collection.expire_generation += 1
            self.cond.notify_all()

    def put_silently(self, obj: Mapping[str, Any]) -> None:
        """For `expire(change=...)`; the caller holds the lock through expire()."""
        info = KINDS_BY_NAME[str(obj["kind"])]
        stored = self._stamp(obj)
        self._collection(info.plural).objects[object_key(info, stored)] = stored

    def delete_silently(self, kind: str, key: str) -> None:
        self._collection(KINDS_BY_NAME[kind].plural).objects.pop(key)

    def hold_lists(self, plural: str) -> None:
        self._collection(plural).list_gate.clear()

    def release_lists(self, plural: str) -> None:
        self._collection(plural).list_gate.set()

    def fail_watches(self, plural: str, status: int | None) -> None:
        with self.cond:
            self._collection(plural).watch_status = status

    def serve_group(self, group: str, version: str, plurals: tuple[str, ...]) -> None:
        with self.cond:
            self.groups.setdefault(group, {})[version] = plurals

    def stop_serving(self, group: str, version: str | None = None, change: Callable[[], None] = lambda: None) -> None:
        """A CRD version (or, with no version, the whole group) no longer served: its live watches end, as the API
        server tears down a CRD's storage, and every later request to it is answered 404. `change` runs under the
        lock first (objects rewritten silently, the way the server converts them to the version still served)."""
        with self.cond:
            change()
            versions = self.groups.get(group, {})
            gone = set(versions) if version is None else {version}
            plurals = {plural for v in gone for plural in versions.get(v, ())}
            for v in gone:
                versions.pop(v, None)
            if not versions:
                self.groups.pop(group, None)
            for plural in plurals:
                self._collection(plural).drop_generation += 1
            self.cond.notify_all()

    def restore(self, change: Callable[[], None] = lambda: None, *, back_by: int = 50, mode: ExpireMode) -> int:
        """etcd restored from a backup under running clients: the cluster's resourceVersion goes back by `back_by`,
        `change` alters objects silently (what the backup held), the history after the new resourceVersion is
        gone and every live watch ends; a reconnect from a resourceVersion ahead of the server is refused with
        504 ResourceVersionTooLarge, as an ERROR event or as the HTTP status (`mode`). Returns the new version."""
        with self.cond:
            self.rv -= back_by
            change()
            for collection in self.collections.values():
                collection.log = [entry for entry in collection.log if entry[0] <= self.rv]
                collection.compacted = min(collection.compacted, self.rv)
                collection.drop_generation += 1
            self.too_large_mode = mode
            self.cond.notify_all()
            return self.rv

    def _stamp(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(dict(obj))
        stored.setdefault("metadata", {})["resourceVersion"] = str(self._next_rv())
        return stored

    # --- reads for assertions -----------------------------------------------------------------------------------

    def current(self, plural: str) -> list[dict[str, Any]]:
        with self.cond:
            return [copy.deepcopy(obj) for obj in self._collection(plural).objects.values()]

    def watch_queries(self, plural: str) -> list[dict[str, str]]:
        return [q for _, path, q in list(self.requests) if path.endswith("/" + plural) and q.get("watch") == "true"]

    def list_queries(self, plural: str) -> list[dict[str, str]]:
        return [
            q for m, path, q in list(self.requests) if m == "GET" and path.endswith("/" + plural) and "watch" not in q
        ]

    def live_watches(self, plural: str) -> int:
        with self.cond:
            return self._collection(plural).live_watches


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def too_large_status(asked: int, current: int) -> dict[str, Any]:
    """What apiserver's storage.NewTooLargeResourceVersionError becomes on the wire: a 504 Timeout Status with
    the ResourceVersionTooLarge cause (StatusCause.Type is spelt "reason" in JSON)."""
    status = _status(504, "Timeout", f"Timeout: Too large resource version: {asked}, current: {current}")
    status["details"] = {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }
    return status


def _handler_for(server: FakeApiServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in separate writes; no 40 ms delayed-ACK stalls

        def log_message(self, format: str, *args: Any) -> None:
            return None

        # --- plumbing ---

        def _send_json(self, code: int, body: Any) -> None:
            data = orjson.dumps(body)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _fail(self, code: int, reason: str, message: str) -> None:
            self._send_json(code, _status(code, reason, message))

        def _authorised(self) -> bool:
            if self.headers.get("Authorization") == f"Bearer {TOKEN}":
                return True
            self._fail(401, "Unauthorized", "Unauthorized")
            return False

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            server.requests.append(("GET", url.path, query))
            if not self._authorised():
                return
            parts = [p for p in url.path.split("/") if p]
            if parts == ["apis"]:
                self._send_json(200, self._group_list())
                return
            if len(parts) == 3 and parts[0] == "apis":
                self._resource_list(parts[1], parts[2])
                return
            route = _route(parts)
            if route is None:
                self._fail(404, "NotFound", f"the server could not find the requested resource ({url.path})")
                return
            group, version, namespace, plural, _name, _sub = route
            if not self._served(group, version, plural):
                self._fail(404, "NotFound", "the server could not find the requested resource")
                return
            if query.get("watch") == "true":
                self._watch(group, version, namespace, plural, query)
            else:
                self._list(group, version, namespace, plural, query)

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            server.requests.append(("POST", url.path, {}))
            length = int(self.headers.get("Content-Length") or 0)
            body = orjson.loads(self.rfile.read(length)) if length else None
            if not self._authorised():
                return
            if url.path in (TOKEN_REVIEWS, ACCESS_REVIEWS):
                self._review(url.path, body or {})
                return
            route = _route([p for p in url.path.split("/") if p])
            if route is None or route[3] != "pods" or route[5] != "binding" or route[2] is None:
                self._fail(405, "MethodNotAllowed", "only pods/binding can be created here")
                return
            namespace, name = route[2], route[4] or ""
            failure = server.binding_failures.get((namespace, name))
            if failure is not None:
                self._fail(*failure)
                return
            server.bindings.append(body)
            self._send_json(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})

        def _review(self, path: str, body: dict[str, Any]) -> None:
            spec = body.get("spec") or {}
            server.reviews.append(body)
            if path == TOKEN_REVIEWS:
                found = server.review_tokens.get(str(spec.get("token", "")))
                wanted = tuple(spec.get("audiences") or ("https://kubernetes.default.svc",))
                if found is None or not set(found[1]) & set(wanted):
                    status: dict[str, Any] = {"authenticated": False, "error": "invalid bearer token"}
                else:
                    status = {
                        "authenticated": True,
                        "user": {"username": found[0], "uid": "u-" + found[0], "groups": ["system:authenticated"]},
                        "audiences": sorted(set(found[1]) & set(wanted)),
                    }
            else:
                attributes = spec.get("nonResourceAttributes") or {}
                verb, asked = attributes.get("verb", ""), attributes.get("path", "")
                allowed = any(
                    user == spec.get("user")
                    and verb == granted_verb
                    and (asked == granted or (granted.endswith("*") and asked.startswith(granted[:-1])))
                    for user, granted_verb, granted in server.review_grants
                )
                status = {"allowed": allowed, "reason": "granted" if allowed else ""}
            self._send_json(201, {**body, "status": status})

        # --- discovery ---

        def _group_list(self) -> dict[str, Any]:
            with server.cond:
                groups = [
                    {
                        "name": group,
                        "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                        "preferredVersion": {
                            "groupVersion": f"{group}/{next(iter(versions))}",
                            "version": next(iter(versions)),
                        },
                    }
                    for group, versions in server.groups.items()
                    if versions
                ]
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

        def _resource_list(self, group: str, version: str) -> None:
            with server.cond:
                plurals = server.groups.get(group, {}).get(version)
            if plurals is None:
                self._fail(404, "NotFound", "the server could not find the requested resource")
                return
            resources = [
                {
                    "name": plural,
                    "singularName": "",
                    "namespaced": INFO_BY_PLURAL[plural].namespaced,
                    "kind": INFO_BY_PLURAL[plural].kind,
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                }
                for plural in plurals
            ]
            resources.append({"name": f"{plurals[0]}/status", "namespaced": False, "kind": "X", "verbs": ["get"]})
            self._send_json(
                200,
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{group}/{version}",
                    "resources": resources,
                },
            )

        def _served(self, group: str, version: str, plural: str) -> bool:
            if group == "":
                return version == "v1" and plural in CORE_PLURALS
            with server.cond:
                return plural in server.groups.get(group, {}).get(version, ())

        # --- lists and watches ---

        def _selected(self, plural: str, namespace: str | None, query: Mapping[str, str]) -> list[dict[str, Any]]:
            selector = query.get("fieldSelector", "")
            wanted_name = selector.removeprefix("metadata.name=") if selector.startswith("metadata.name=") else None
            objects = []
            for obj in server._collection(plural).objects.values():
                meta = obj.get("metadata") or {}
                if namespace is not None and meta.get("namespace", "default") != namespace:
                    continue
                if wanted_name is not None and meta.get("name") != wanted_name:
                    continue
                objects.append(obj)
            return objects

        def _matches(self, obj: Any, namespace: str | None, query: Mapping[str, str]) -> bool:
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            if not isinstance(meta, Mapping):
                return True
            if namespace is not None and meta.get("namespace", "default") != namespace:
                return False
            selector = query.get("fieldSelector", "")
            return not selector.startswith("metadata.name=") or meta.get("name") == selector.removeprefix(
                "metadata.name="
            )

        def _list(self, group: str, version: str, namespace: str | None, plural: str, query: Mapping[str, str]) -> None:
            collection = server._collection(plural)
            collection.list_gate.wait(10)
            if query.get("continue") and server.continue_expired:
                self._fail(410, "Expired", "The provided continue parameter is too old")
                return
            with server.cond:
                objects = self._selected(plural, namespace, query)
                rv = server.rv
            offset = int(query.get("continue") or 0)
            limit = int(query.get("limit") or 0) or len(objects) + 1
            page = objects[offset : offset + limit]
            metadata: dict[str, Any] = {"resourceVersion": str(rv)}
            if offset + limit < len(objects):
                metadata["continue"] = str(offset + limit)
            items = []
            for obj in page:
                item = copy.deepcopy(obj)
                item.pop("apiVersion", None)  # as real lists do
                item.pop("kind", None)
                items.append(item)
            api_version = f"{group}/{version}" if group else version
            info = INFO_BY_PLURAL[plural]
            self._send_json(
                200, {"apiVersion": api_version, "kind": f"{info.kind}List", "metadata": metadata, "items": items}
            )

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _watch(
            self, group: str, version: str, namespace: str | None, plural: str, query: Mapping[str, str]
        ) -> None:
            collection = server._collection(plural)
            api_version = f"{group}/{version}" if group else version
            since = int(query.get("resourceVersion") or 0)
            timeout = float(query.get("timeoutSeconds") or 300)
            with server.cond:
                status = collection.watch_status
                expire_mode = collection.expire_mode
                too_large = too_large_status(since, server.rv) if since > server.rv else None
                too_large_mode = server.too_large_mode
                expired = since < collection.compacted
                drop_generation = collection.drop_generation
                expire_generation = collection.expire_generation
                position = next((i for i, entry in enumerate(collection.log) if entry[0] > since), len(collection.log))
            if status is not None:
                self._fail(status, "InternalError", "watches are failing (scripted)")
                return
            if too_large is not None and too_large_mode is ExpireMode.HTTP:
                self._send_json(504, too_large)
                return
            if expired and expire_mode is ExpireMode.HTTP:
                self._fail(410, "Expired", f"too old resource version: {since} ({collection.compacted})")
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if too_large is not None:
                self._send_frame({"type": "ERROR", "object": too_large})
                self._chunk(b"")
                return
            if expired:
                self._send_frame(
                    {"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {since}")}
                )
                self._chunk(b"")
                return
            deadline = time.monotonic() + timeout
            with server.cond:
                collection.live_watches += 1
            try:
                while True:
                    with server.cond:
                        while (
                            position >= len(collection.log)
                            and collection.drop_generation == drop_generation
                            and collection.expire_generation == expire_generation
                            and not server.closing
                            and time.monotonic() < deadline
                        ):
                            server.cond.wait(max(0.0, min(1.0, deadline - time.monotonic())))
                        entries = collection.log[position:]
                        position = len(collection.log)
                        dropped = collection.drop_generation != drop_generation
                        mid_frame = collection.drop_mid_frame
                        expired_now = collection.expire_generation != expire_generation
                        done = server.closing or time.monotonic() >= deadline
                    if dropped:
                        self._cut(mid_frame)
                        return
                    if expired_now:
                        self._send_frame(
                            {"type": "ERROR", "object": _status(410, "Expired", "too old resource version")}
                        )
                        self._chunk(b"")
                        return
                    for _, event_type, obj in entries:
                        if event_type in ("ADDED", "MODIFIED", "DELETED") and not self._matches(obj, namespace, query):
                            continue
                        if isinstance(obj, dict) and event_type != "BOOKMARK":
                            obj = {**obj, "apiVersion": api_version}
                        self._send_frame({"type": event_type, "object": obj})
                    if done:
                        self._chunk(b"")
                        return
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            finally:
                with server.cond:
                    collection.live_watches -= 1

        def _send_frame(self, event: Any) -> None:
            data = orjson.dumps(event) + b"\n"
            if server.split_frames and len(data) > 2:
                half = len(data) // 2
                self._chunk(data[:half])
                self._chunk(data[half:])
            else:
                self._chunk(data)

        def _cut(self, mid_frame: bool) -> None:
            """Connection lost as a dying API server or load balancer would lose it: no chunk terminator."""
            if mid_frame:
                data = b'{"type":"ADDED","object":{"metadata":'
                self.wfile.write(b"%x\r\n%s" % (len(data) + 40, data))
                self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    return Handler


def _route(parts: list[str]) -> tuple[str, str, str | None, str, str | None, str | None] | None:
    """(group, version, namespace, plural, name, subresource) of a resource path."""
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if plural not in INFO_BY_PLURAL:
        return None
    return group, version, namespace, plural, name, sub


# --- a small cluster and the comparison the tests make --------------------------------------------------------


def kueue_objects(cq: str = "team-a", flavor: str = "a100") -> list[dict[str, Any]]:
    v = f"{KUEUE}/v1beta2"
    return [
        {
            "apiVersion": v,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": {"gpu.example.com/model": flavor}},
        },
        {"apiVersion": v, "kind": "Cohort", "metadata": {"name": "research"}},
        {
            "apiVersion": v,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "cohortName": "research",
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["whole-gpus"],
                        "flavors": [{"name": flavor, "resources": [{"name": "whole-gpus", "nominalQuota": 8}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": v,
            "kind": "LocalQueue",
            "metadata": {"name": "training", "namespace": "team-a"},
            "spec": {"clusterQueue": cq},
        },
        {
            "apiVersion": v,
            "kind": "Workload",
            "metadata": {"name": "wl-1", "namespace": "team-a", "uid": "wl-uid"},
            "spec": {"queueName": "training", "podSets": [{"name": "main", "count": 1}]},
        },
    ]


def kueue_configmap() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": KUEUE_CONFIGMAP[1], "namespace": KUEUE_CONFIGMAP[0]},
        "data": {
            "controller_manager_config.yaml": (
                "deviceClassMappings:\n- name: whole-gpus\n  deviceClassNames: [gpu.example.com]\n"
            )
        },
    }


def small_cluster(*, kueue: bool = True) -> list[dict[str, Any]]:
    objects = [
        b.namespace("team-a"),
        b.node("n1", {"gpu.example.com/model": "a100"}),
        b.node("n2", {"gpu.example.com/model": "a100"}),
        b.gpu_slice("n1", 4),
        b.gpu_slice("n2", 4),
        b.device_class(),
        b.claim(
            "held",
            "team-a",
            [b.exact_request(count=2)],
            allocated=[("gpu", "n1", "gpu-0"), ("gpu", "n1", "gpu-1")],
            allocated_node="n1",
            reserved_for=[("runner", "uid-team-a-runner")],
        ),
        b.claim_template("one-gpu", "team-a", [b.exact_request()]),
        b.pod("runner", "team-a", claims={"gpu": "held"}, node_name="n1", queue="training"),
        b.pod("waiting", "team-a", templates={"gpu": "one-gpu"}, queue="training"),
        # not ours: another namespace's ConfigMap must not be picked up by the field-selected watch
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "team-a"}, "data": {}},
        kueue_configmap(),
    ]
    return objects + (kueue_objects() if kueue else [])


def normal(value: Any) -> Any:
    """Parsed objects as plain data: some records compare by identity, the tests compare by content."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, {f.name: normal(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, Mapping):
        return {normal(k): normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normal(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(repr(normal(v)) for v in value)
    return value


def state_of(store: ClusterStore) -> dict[str, Any]:
    snapshot = store.snapshot()
    return {
        "objects": {kind: {key: normal(obj) for key, obj in objs.items()} for kind, objs in snapshot.objects.items()},
        "allocated": dict(snapshot.allocated),
        "generated_claims": dict(snapshot.generated_claims),
    }


def fresh_store(server: FakeApiServer, configmap: tuple[str, str] = KUEUE_CONFIGMAP) -> ClusterStore:
    """What a client that only ever listed would hold: the comparison baseline of every test."""
    store = ClusterStore()
    for info in KINDS:
        if info.group and not any(info.plural in plurals for plurals in server.groups.get(info.group, {}).values()):
            continue
        objects = server.current(info.plural)
        if info.kind == "ConfigMap":
            objects = [o for o in objects if (o["metadata"].get("namespace"), o["metadata"]["name"]) == configmap]
        store.replace(info.kind, objects)
    return store


def wait_for(condition: Callable[[], Any], timeout: float = 4.0, message: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(0.005)


def assert_converges(store: ClusterStore, server: FakeApiServer, timeout: float = 4.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        expected = state_of(fresh_store(server))
        actual = state_of(store)
        if actual == expected:
            return
        if time.monotonic() > deadline:
            for kind in expected["objects"]:
                assert actual["objects"][kind] == expected["objects"][kind], kind
            assert actual == expected
        time.sleep(0.005)
