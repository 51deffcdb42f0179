"""One collection kept in sync with the API server: list, then watch from the list's resourceVersion, as
client-go's Reflector does (tools/cache/reflector.go, ListAndWatch and watchHandler).

The store must converge to exactly what a fresh list would give, whatever happens to the connection: a dropped
stream resumes from the last resourceVersion seen (events or bookmarks); a resourceVersion the server cannot
serve, expired (410 Gone) or ahead of it (504 with the ResourceVersionTooLarge cause: etcd restored or migrated),
is healed by a relist that replaces the kind wholesale, as the Reflector's setIsLastSyncResourceVersionUnavailable
and relistResourceVersion do (our lists never name a resourceVersion, so every list is the quorum read client-go
falls back to); a collection that is no longer served (404) is reported to the source, which rediscovers and
moves or retires this watcher. An object that cannot be parsed, whatever the reason, is treated as absent in
both paths so that the two cannot disagree. Nothing an API server sends may end the thread; only `stop()` does.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3

from extender.kube.api import ApiError, KubeApi, iter_lines, status_causes, too_large_resource_version
from extender.state.collector import bulk_load
from extender.state.errors import ObjectError
from extender.state.kinds import object_key
from extender.state.live.resources import Resource, list_objects, normalise_item
from extender.state.store import ClusterStore

log = logging.getLogger(__name__)

# The server ends a watch after timeoutSeconds; a read timeout a little beyond that is the last resort against a
# connection that died without a FIN. The first line of defence is TCP keepalive (see api.py): a quiet
# collection may legitimately send nothing, not even bookmarks, for the whole watch, so silence alone proves
# nothing before the server's own deadline.
READ_TIMEOUT_MARGIN_SECONDS = 30.0
# A watch that ends sooner than this with nothing received counts as a failure for backoff purposes, so a
# server that closes every watch at once is not hammered in a tight loop.
MIN_HEALTHY_WATCH_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class WatchSettings:
    # Jittered to [1x, 2x), as the Reflector jitters its minWatchTimeout, so watches do not reconnect in step.
    watch_timeout_seconds: float = 300.0
    request_timeout_seconds: float = 60.0
    list_page_size: int = 500
    backoff_initial_seconds: float = 0.5
    backoff_max_seconds: float = 30.0
    resync_seconds: float | None = None  # periodic relist as a safety net; None: only on 410


class Backoff:
    """Capped exponential backoff with jitter, so many extenders reconnecting after an outage spread out."""

    def __init__(self, initial: float, maximum: float, rng: Callable[[], float] = random.random) -> None:
        self.initial = initial
        self.maximum = maximum
        self._rng = rng
        self._attempt = 0

    def next(self) -> float:
        delay = min(self.maximum, self.initial * (2 ** min(self._attempt, 32)))
        self._attempt += 1
        return float(delay * (0.5 + self._rng() / 2))

    def reset(self) -> None:
        self._attempt = 0


@dataclass(frozen=True, slots=True)
class ResourceStats:
    """Counters for one watched collection; the transport layer exports them as metrics."""

    resource: str
    kind: str
    api_version: str
    listed: bool
    connected: bool
    resource_version: str
    events_applied: int  # ADDED/MODIFIED/DELETED applied to the store
    bookmarks: int
    malformed: int  # objects skipped because they could not be parsed
    relists: int  # lists after the first (410 Gone, ResourceVersionTooLarge, resync)
    reconnects: int  # watch requests after the first
    errors: int  # failed requests and broken streams
    last_sync: float | None  # wall-clock time of the last list, event or bookmark
    last_error: str


class _Outcome(enum.Enum):
    ENDED = "ended"  # the stream finished or broke; resume from the current resourceVersion
    EXPIRED = "expired"  # 410 Gone or ResourceVersionTooLarge: the resourceVersion cannot be served, relist


class WatchStreamError(Exception):
    """The watch stream carried something other than events (an ERROR event other than 410, bad framing)."""


class NotServedError(Exception):
    """The collection answered 404 (as a status or an ERROR event): its API version is no longer served."""


class ResourceWatcher:
    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        store: ClusterStore,
        settings: WatchSettings,
        *,
        on_listed: Callable[[ResourceWatcher], None] = lambda watcher: None,
        on_not_served: Callable[[ResourceWatcher], None] = lambda watcher: None,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.api = api
        self.resource = resource
        self.store = store
        self.settings = settings
        self._on_listed = on_listed
        self._on_not_served = on_not_served
        self._rng = rng
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        # Held around every write to the store and by stop(): once stop() returns, this watcher writes no more,
        # so the source can drop a retired kind's objects or hand the kind to a watcher of another version.
        self._write_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._response: urllib3.BaseHTTPResponse | None = None
        self._started_at = time.monotonic()
        # state below is written by the watch thread only, read by anyone under _lock
        self._resource_version = ""
        self._listed = False
        self._connected = False
        self._disconnected_since: float | None = None
        self._last_fresh: float | None = None  # monotonic
        self._last_sync: float | None = None  # wall clock
        self._last_list: float = 0.0  # monotonic
        self._events_applied = 0
        self._bookmarks = 0
        self._malformed = 0
        self._relists = 0
        self._watches_opened = 0
        self._errors = 0
        self._last_error = ""

    # --- lifecycle ----------------------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.resource.name

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"watcher for {self.name} already started")
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the thread soon; when this returns no write of this watcher's reaches the store any more."""
        self._stopping.set()
        self._abort_response()
        with self._write_lock:
            pass  # a write in progress finishes; every later one sees _stopping under the lock

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def died(self) -> bool:
        """Started, not stopped, and its thread is gone: nothing but a new process brings this collection back."""
        return self._thread is not None and not self._thread.is_alive() and not self._stopping.is_set()

    # --- reads for health and metrics ---------------------------------------------------------------------------

    @property
    def listed(self) -> bool:
        return self._listed

    @property
    def resource_version(self) -> str:
        with self._lock:
            return self._resource_version

    def freshness(self, now: float | None = None) -> float | None:
        """Seconds since the last list, event or bookmark; None before the first list."""
        with self._lock:
            if self._last_fresh is None:
                return None
            return max(0.0, (now if now is not None else time.monotonic()) - self._last_fresh)

    def quiet_since_listed(self, now: float, grace: float) -> bool:
        """Listed, and not without a watch for longer than `grace` seconds: what a verdict needs, read without
        the lock (two attribute reads; the verbs ask it on every call, health() asks far more)."""
        since = self._disconnected_since
        return self._listed and (since is None or now - since <= grace)

    def disconnected_for(self, now: float | None = None) -> float:
        with self._lock:
            if self._disconnected_since is None:
                return 0.0
            return max(0.0, (now if now is not None else time.monotonic()) - self._disconnected_since)

    def stats(self) -> ResourceStats:
        with self._lock:
            return ResourceStats(
                resource=self.resource.name,
                kind=self.resource.kind,
                api_version=self.resource.api_version,
                listed=self._listed,
                connected=self._connected,
                resource_version=self._resource_version,
                events_applied=self._events_applied,
                bookmarks=self._bookmarks,
                malformed=self._malformed,
                relists=self._relists,
                reconnects=max(0, self._watches_opened - 1),
                errors=self._errors,
                last_sync=self._last_sync,
                last_error=self._last_error,
            )

    @property
    def last_error(self) -> str:
        with self._lock:
            return self._last_error

    # --- the loop -----------------------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = Backoff(self.settings.backoff_initial_seconds, self.settings.backoff_max_seconds, self._rng)
        need_list = True
        while not self._stopping.is_set():
            try:
                if need_list or self._resync_due():
                    self._list()
                    need_list = False
                    backoff.reset()
                outcome, productive = self._watch()
            except ApiError as error:
                if self._stopping.is_set():
                    break
                if error.resource_version_unavailable:
                    log.info("%s: %s; relisting", self.resource.describe(), error.describe())
                    need_list = True
                    self._pause_if_just_listed(backoff)
                    continue
                self._failed(error.describe())
                if error.not_found:
                    self._on_not_served(self)
                self._stopping.wait(backoff.next())
                continue
            except NotServedError as error:
                if self._stopping.is_set():
                    break
                self._failed(str(error))
                self._on_not_served(self)
                self._stopping.wait(backoff.next())
                continue
            except Exception as error:  # never let a network or server oddity end the thread
                if self._stopping.is_set():
                    break
                self._failed(_describe_exception(error))
                self._stopping.wait(backoff.next())
                continue
            if outcome is _Outcome.EXPIRED:
                need_list = True
                self._pause_if_just_listed(backoff)
            elif productive:
                backoff.reset()
            elif not self._stopping.is_set():
                self._stopping.wait(backoff.next())
        self._set_connected(False)

    def _pause_if_just_listed(self, backoff: Backoff) -> None:
        """A server that expires every watch straight after the list must not be relisted in a tight loop."""
        if time.monotonic() - self._last_list < MIN_HEALTHY_WATCH_SECONDS:
            self._stopping.wait(backoff.next())
        else:
            backoff.reset()

    def _resync_due(self) -> bool:
        resync = self.settings.resync_seconds
        return resync is not None and resync > 0 and time.monotonic() - self._last_list >= resync

    def _list(self) -> None:
        with bulk_load():  # the decoded pages stay alive until they are parsed: the collector paused throughout
            items, resource_version = list_objects(
                self.api,
                self.resource,
                page_size=self.settings.list_page_size,
                read_timeout=self.settings.request_timeout_seconds,
            )
            with self._write_lock:
                if self._stopping.is_set():
                    return
                errors = self.store.replace(self.resource.kind, items)
            listed = len(items)
            del items  # freed before the load ends and what exists is frozen
        for error in errors:
            log.warning("skipping malformed object from the API: %s", error.describe())
        first = not self._listed
        now = time.monotonic()
        with self._lock:
            self._resource_version = resource_version
            self._malformed += len(errors)
            self._relists += 0 if first else 1
            self._listed = True
            self._last_list = now
            self._touch(now)
            self._disconnected_since = None
        log.debug("%s: listed %d objects at resourceVersion %s", self.resource.describe(), listed, resource_version)
        if first:
            self._on_listed(self)

    def _watch_timeout(self) -> int:
        timeout = self.settings.watch_timeout_seconds * (1 + self._rng())
        if self.settings.resync_seconds:
            timeout = min(timeout, max(1.0, self.settings.resync_seconds - (time.monotonic() - self._last_list)))
        return max(1, int(timeout))

    def _watch(self) -> tuple[_Outcome, bool]:
        """One watch connection until it ends; whether it was productive decides the backoff."""
        timeout = self._watch_timeout()
        query = {
            **self.resource.query(),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(timeout),
        }
        opened_at = time.monotonic()
        with self._lock:
            self._watches_opened += 1
        read_timeout = timeout + READ_TIMEOUT_MARGIN_SECONDS
        response = self.api.request("GET", self.resource.path, query=query, read_timeout=read_timeout)
        with self._lock:
            self._response = response
        self._set_connected(True)
        received = 0
        clean = False
        try:
            if self._stopping.is_set():
                return _Outcome.ENDED, False
            for line in iter_lines(response):
                if self._stopping.is_set():
                    return _Outcome.ENDED, False
                received += 1
                self.store.pacing.step_aside()  # a verb kube-scheduler waits for goes first (state/pacing.py)
                if self.apply_frame(line) is _Outcome.EXPIRED:
                    return _Outcome.EXPIRED, True
            clean = True
        finally:
            with self._lock:
                self._response = None
            if not clean:
                response.close()
            response.release_conn()
            self._set_connected(False)
        productive = received > 0 or time.monotonic() - opened_at >= MIN_HEALTHY_WATCH_SECONDS
        return _Outcome.ENDED, productive

    def apply_frame(self, line: bytes) -> _Outcome | None:
        """One frame of the watch stream: an event decoded and applied to the store, a bookmark, or the server's
        error (EXPIRED when the resourceVersion is gone). Public so that frames recorded from a real control
        plane can be replayed through the same path the watch takes."""
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            raise WatchStreamError(f"undecodable watch frame: {error}") from None
        if not isinstance(event, Mapping):
            raise WatchStreamError("watch frame is not an object")
        event_type = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            log.warning("%s: %s event without an object; ignored", self.resource.describe(), event_type)
            return None
        if event_type == "ERROR":
            code = obj.get("code")
            detail = f"{code} {obj.get('reason', '')}: {obj.get('message', '')}"
            if code == 410:
                log.info("%s: watch expired (%s); relisting", self.resource.describe(), detail)
                return _Outcome.EXPIRED
            if too_large_resource_version(code, status_causes(obj)):
                # The watch cache gave up waiting for a resourceVersion it has not reached (apiserver
                # cacher/watch_cache.go waitUntilFreshAndBlock): etcd restored or migrated under a running client.
                # Waiting for it would miss what the restore changed; the Reflector relists, and so do we.
                log.warning(
                    "%s: resourceVersion %s is ahead of the server (%s); relisting",
                    self.resource.describe(),
                    self.resource_version,
                    detail,
                )
                return _Outcome.EXPIRED
            if code == 404:
                raise NotServedError(f"ERROR event: {detail}")
            raise WatchStreamError(f"ERROR event: {detail}")
        resource_version = _resource_version(obj)
        if event_type == "BOOKMARK":
            with self._lock:
                self._bookmarks += 1
                self._advance(resource_version)
            return None
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("%s: unknown watch event type %r; ignored", self.resource.describe(), event_type)
            return None
        applied = self._apply(event_type, normalise_item(self.resource, obj))
        with self._lock:
            if applied:
                self._events_applied += 1
            else:
                self._malformed += 1
            self._advance(resource_version)
        return None

    def _apply(self, event_type: str, obj: dict[str, Any]) -> bool:
        with self._write_lock:
            if self._stopping.is_set():
                return True  # this watcher is being retired or replaced: its events no longer count
            return self._apply_locked(event_type, obj)

    def _apply_locked(self, event_type: str, obj: dict[str, Any]) -> bool:
        kind = self.resource.kind
        try:
            self.store.apply(kind, event_type, obj)
            return True
        except ObjectError as error:
            where = f"{kind} {_safe_key(self.resource, obj)}"
            log.warning("skipping malformed object from the API: %s", error.located(where).describe())
        except Exception:
            log.exception("skipping %s %s: cannot apply it", kind, _safe_key(self.resource, obj))
        if event_type != "DELETED":
            # A relist would leave this object out (store.replace skips it); forgetting the previous version
            # here keeps the watch path equal to the list path.
            try:
                self.store.apply(kind, "DELETED", obj)
            except Exception:
                log.debug("cannot forget malformed %s", kind, exc_info=True)
        return False

    # --- helpers (the caller holds _lock where noted) -----------------------------------------------------------

    def _advance(self, resource_version: str) -> None:
        """Caller holds _lock."""
        if resource_version:
            self._resource_version = resource_version
        self._touch(time.monotonic())

    def _touch(self, now: float) -> None:
        """Caller holds _lock."""
        self._last_fresh = now
        self._last_sync = time.time()

    def _set_connected(self, connected: bool) -> None:
        with self._lock:
            self._connected = connected
            if connected:
                self._disconnected_since = None
            elif self._disconnected_since is None:
                self._disconnected_since = time.monotonic()

    def _failed(self, message: str) -> None:
        log.warning("%s: %s; retrying", self.resource.describe(), message)
        with self._lock:
            self._errors += 1
            self._last_error = message
            if self._disconnected_since is None:
                self._disconnected_since = time.monotonic()

    def _abort_response(self) -> None:
        """Unblock a thread waiting on a quiet watch; shutting the socket down is the only thread-safe way."""
        with self._lock:
            response = self._response
        if response is None:
            return
        try:
            response.shutdown()  # urllib3 >= 2.3
        except Exception:
            try:
                response.close()
            except Exception:
                log.debug("closing the watch of %s failed", self.name, exc_info=True)


def _resource_version(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        value = metadata.get("resourceVersion")
        if isinstance(value, str):
            return value
    return ""


def _safe_key(resource: Resource, obj: Mapping[str, Any]) -> str:
    try:
        return object_key(resource.info, obj) or "?"
    except Exception:
        return "?"


def _describe_exception(error: BaseException) -> str:
    if isinstance(error, urllib3.exceptions.ReadTimeoutError):
        return "the watch outlived its own timeout without ending: connection presumed dead"
    if isinstance(error, urllib3.exceptions.ProtocolError):
        return f"connection lost: {error}"
    if isinstance(error, urllib3.exceptions.HTTPError | OSError):
        return f"cannot reach the API server: {error}"
    return f"{type(error).__name__}: {error}"
