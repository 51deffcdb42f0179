"""The live cluster as a ClusterSource: discovery, one watcher thread per collection, health and counters.

`start()` returns at once and everything that talks to the network runs in background threads, so an API
server that is down when the extender starts shows up as "not ready" with a reason (and heals by itself)
instead of a crash loop. Kinds the server does not serve yet (Kueue installed after the extender, a DRA API
enabled later) are looked for periodically and picked up without a restart. A collection that stops being
served (404: Kueue uninstalled or upgraded past the version picked at start, an alpha API switched off) makes
the source rediscover at once: the kind moves to another version it understands (relisted there), or it is
retired (its objects dropped, the feature it feeds off, one log line, a counter and a reason in health()), so
the view becomes ready again by itself, as a fresh process would.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from dataclasses import asdict
from typing import Any

from kubernetes.client import Configuration

from extender.kube.api import KubeApi, load_in_cluster, load_kubeconfig
from extender.kube.binder import Binder
from extender.state.kinds import KINDS_BY_NAME, RESOURCE_GROUP
from extender.state.kueue.parsing import KUEUE_GROUP
from extender.state.live.resources import (
    DEFAULT_KUEUE_CONFIGMAP,
    DRA_ABSENT_MESSAGE,
    KUEUE_ABSENT_MESSAGE,
    Discovery,
    Resource,
    discover,
)
from extender.state.live.watcher import Backoff, ResourceStats, ResourceWatcher, WatchSettings
from extender.state.sources import SourceHealth
from extender.state.store import ClusterStore

log = logging.getLogger(__name__)

STOP_JOIN_SECONDS = 5.0
KUEUE_RETIRED_MESSAGE = "Kueue CRDs no longer served: quota features off, Kueue objects dropped; devices still served"


class LiveSource:
    """List+watch of every kind the extender reads; implements extender.state.sources.ClusterSource."""

    follows_changes = True  # the store changes under the verbs (service/service.py await_named_claims waits for it)

    def __init__(
        self,
        api_client_config: Configuration,
        *,
        kueue_configmap: tuple[str, str] = DEFAULT_KUEUE_CONFIGMAP,
        stale_grace_seconds: float = 60.0,
        resync_seconds: float | None = None,
        kueue_recheck_seconds: float = 30.0,
        watch_timeout_seconds: float = 300.0,
        request_timeout_seconds: float = 60.0,
        list_page_size: int = 500,
        backoff_initial_seconds: float = 0.5,
        backoff_max_seconds: float = 30.0,
        description: str = "",
    ) -> None:
        self.api_config = api_client_config
        self.kueue_configmap = kueue_configmap
        self.stale_grace_seconds = stale_grace_seconds
        self.kueue_recheck_seconds = kueue_recheck_seconds
        self.settings = WatchSettings(
            watch_timeout_seconds=watch_timeout_seconds,
            request_timeout_seconds=request_timeout_seconds,
            list_page_size=list_page_size,
            backoff_initial_seconds=backoff_initial_seconds,
            backoff_max_seconds=backoff_max_seconds,
            resync_seconds=resync_seconds,
        )
        self.description = description or f"live cluster at {api_client_config.host}"
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._store: ClusterStore | None = None
        self._api: KubeApi | None = None
        self._supervisor: threading.Thread | None = None
        self._watchers: dict[str, ResourceWatcher] = {}  # kind -> watcher
        self._initial_kinds: frozenset[str] = frozenset()
        self._kueue_pending: frozenset[str] = frozenset()  # Kueue kinds started late, not listed yet
        self._kueue_enabled = False
        self._discovery: Discovery | None = None
        self._discovery_error = ""
        self._reported_missing: dict[str, str] = {}
        self._started_at = 0.0
        self._rediscover = threading.Event()  # a watcher was answered 404: its API may have changed
        self._retired: dict[str, str] = {}  # plural -> the collection no longer served (health's reason)
        self._api_changes: Counter[str] = Counter()  # plural -> moves to another version and retirements

    # --- ClusterSource ------------------------------------------------------------------------------------------

    def start(self, store: ClusterStore) -> None:
        with self._lock:
            if self._supervisor is not None:
                raise RuntimeError("LiveSource.start() called twice")
            self._store = store
            self._api = KubeApi(self.api_config)
            self._started_at = time.monotonic()
            self._supervisor = threading.Thread(target=self._supervise, name="live-source", daemon=True)
        store.set_synced(False)
        self._supervisor.start()

    def stop(self) -> None:
        self._stopping.set()
        self._rediscover.set()
        with self._lock:
            watchers = list(self._watchers.values())
            supervisor = self._supervisor
        for watcher in watchers:
            watcher.stop()
        deadline = time.monotonic() + STOP_JOIN_SECONDS
        for watcher in watchers:
            watcher.join(max(0.0, deadline - time.monotonic()))
        if supervisor is not None:
            supervisor.join(max(0.0, deadline - time.monotonic()))
        if self._api is not None:
            self._api.close()

    def ready_for_verdicts(self, grace_seconds: float) -> bool:
        """True when health() would say ready and no watch has been reconnecting for more than `grace_seconds`:
        the verbs' check on every call, in a few attribute reads per watched collection. False says only "ask
        health()" (which has the reason)."""
        with self._lock:
            if self._supervisor is None or self._discovery is None or self._kueue_pending:
                return False
            watchers = tuple(self._watchers.values())
        now = time.monotonic()
        grace = min(grace_seconds, self.stale_grace_seconds)
        return all(watcher.quiet_since_listed(now, grace) for watcher in watchers)

    def health(self) -> SourceHealth:
        now = time.monotonic()
        with self._lock:
            if self._supervisor is None:
                return SourceHealth(False, "not started")
            if self._discovery is None:
                detail = self._discovery_error or "in progress"
                return SourceHealth(False, f"discovering API resources at {self.api_config.host}: {detail}")
            watchers = list(self._watchers.values())
            kueue_enabled = self._kueue_enabled
            kueue_pending = sorted(self._kueue_pending)
        freshness: dict[str, float] = {}
        waiting: list[str] = []
        stale: list[str] = []
        longest = ("", 0.0)
        for watcher in watchers:
            age = watcher.freshness(now)
            if age is None:
                error = watcher.last_error
                waiting.append(f"{watcher.name} ({error})" if error else watcher.name)
            else:
                freshness[watcher.name] = round(age, 3)
            disconnected = watcher.disconnected_for(now)
            if watcher.listed and disconnected > longest[1]:
                longest = (watcher.name, disconnected)
            if watcher.listed and disconnected > self.stale_grace_seconds:
                error = watcher.last_error
                stale.append(f"{watcher.name} for {disconnected:.0f}s" + (f" ({error})" if error else ""))
        problems = []
        if kueue_pending and not waiting:
            # Listed, but quota not switched on yet (the store learns it in _listed): not a verdict's moment.
            problems.append("Kueue CRDs found: enabling quota for " + ", ".join(kueue_pending))
        if waiting:
            problems.append("waiting for the initial list of " + ", ".join(sorted(waiting)))
        if stale:
            problems.append(f"disconnected longer than {self.stale_grace_seconds:g}s: " + ", ".join(sorted(stale)))
        with self._lock:
            retired = sorted(self._retired.values())
        if problems:
            return SourceHealth(False, "; ".join(problems), freshness, longest)
        message = f"watching {len(watchers)} resources at {self.api_config.host}"
        if not kueue_enabled:
            message += f"; {KUEUE_ABSENT_MESSAGE}"
        if retired:
            message += "; no longer served, objects dropped: " + ", ".join(retired)
        return SourceHealth(True, message, freshness, longest)

    def liveness_problem(self) -> str:
        """Why only a restart would bring the view back ("" when nothing would): a watch thread or the supervisor
        ended although nobody stopped it. Everything an API server does (errors, 404s, versions from the future)
        heals without one, so /livez fails for this alone."""
        with self._lock:
            supervisor = self._supervisor
            watchers = list(self._watchers.values())
        if supervisor is None or self._stopping.is_set():
            return ""
        dead = sorted(watcher.name for watcher in watchers if watcher.died())
        if not supervisor.is_alive():
            dead.insert(0, "API discovery")
        return f"cluster view threads ended: {', '.join(dead)}" if dead else ""

    # --- extras for the CLI, metrics and tests ------------------------------------------------------------------

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until every initially discovered collection has been listed once (or the timeout passes)."""
        return self._synced.wait(timeout)

    @property
    def kueue_enabled(self) -> bool:
        with self._lock:
            return self._kueue_enabled

    @property
    def discovery(self) -> Discovery | None:
        with self._lock:
            return self._discovery

    def stats(self) -> dict[str, ResourceStats]:
        """Per-collection counters (events applied, relists, reconnects, last sync...), keyed by plural name."""
        with self._lock:
            watchers = list(self._watchers.values())
        return {watcher.name: watcher.stats() for watcher in watchers}

    def binder(self) -> Binder:
        """A Binder on the same API server and credentials; callable as (namespace, pod, uid, node)."""
        return Binder(self.api_config)

    def api_changes(self) -> dict[str, int]:
        """Per collection (plural), how often it moved to another served version or was retired."""
        with self._lock:
            return dict(self._api_changes)

    def stats_dicts(self) -> dict[str, dict[str, Any]]:
        """The same counters as plain dicts, for JSON diagnostics and metrics; a retired collection keeps an entry
        with its `api_changes` and `served: False`."""
        with self._lock:
            changes = dict(self._api_changes)
            retired = set(self._retired)
        result: dict[str, dict[str, Any]] = {
            name: {**asdict(stats), "api_changes": changes.get(name, 0), "served": True}
            for name, stats in self.stats().items()
        }
        for name in retired - set(result):
            result[name] = {"resource": name, "api_changes": changes.get(name, 0), "served": False}
        return result

    # --- background work ----------------------------------------------------------------------------------------

    def _supervise(self) -> None:
        backoff = Backoff(self.settings.backoff_initial_seconds, self.settings.backoff_max_seconds)
        while not self._stopping.is_set():
            try:
                discovery = self._discover()
            except Exception as error:
                message = f"{type(error).__name__}: {error}"
                with self._lock:
                    self._discovery_error = message
                log.warning("API discovery at %s failed: %s; retrying", self.api_config.host, message)
                self._stopping.wait(backoff.next())
                continue
            self._apply_discovery(discovery, initial=True)
            break
        backoff.reset()
        while not self._stopping.is_set():
            triggered = self._rediscover.wait(self.kueue_recheck_seconds)
            if self._stopping.is_set():
                break
            self._rediscover.clear()
            with self._lock:
                missing = self._discovery is not None and bool(self._discovery.missing)
            if not (triggered or missing):
                continue
            try:
                discovery = self._discover()
            except Exception as error:
                log.log(logging.WARNING if triggered else logging.DEBUG, "API re-discovery failed: %s", error)
                if triggered:  # a collection answers 404: keep looking, with backoff, until discovery answers
                    self._stopping.wait(backoff.next())
                    self._rediscover.set()
                continue
            backoff.reset()
            self._apply_discovery(discovery, initial=False)

    def _not_served(self, watcher: ResourceWatcher) -> None:
        """A watcher's collection answered 404: rediscover now rather than at the next periodic check."""
        log.warning("%s is not served any more; rediscovering the API", watcher.resource.describe())
        self._rediscover.set()

    def _discover(self) -> Discovery:
        assert self._api is not None
        return discover(
            self._api, kueue_configmap=self.kueue_configmap, read_timeout=self.settings.request_timeout_seconds
        )

    def _apply_discovery(self, discovery: Discovery, *, initial: bool) -> None:
        """Start a watcher per newly served kind; after the first discovery also move a kind whose version is no
        longer served to the one now picked, and retire a kind no longer served at all."""
        store = self._store
        assert store is not None and self._api is not None
        started: list[ResourceWatcher] = []
        stopped: list[ResourceWatcher] = []
        moved: list[tuple[Resource, Resource]] = []
        retired: list[Resource] = []
        # Published (health's "no longer served", kueue_enabled off) only once the store has dropped their objects:
        # a reader told they are gone must not find them in the next snapshot.
        retired_reasons: dict[str, str] = {}
        with self._lock:
            if self._stopping.is_set():
                return
            self._discovery = discovery
            self._discovery_error = ""
            for kind, watcher in list(self._watchers.items()):
                resource = discovery.resources.get(kind)
                if initial or resource == watcher.resource:
                    continue
                del self._watchers[kind]
                stopped.append(watcher)
                self._api_changes[watcher.name] += 1
                if resource is None:
                    retired.append(watcher.resource)
                    retired_reasons[watcher.name] = watcher.resource.describe()
                else:
                    moved.append((watcher.resource, resource))
            new = [resource for kind, resource in discovery.resources.items() if kind not in self._watchers]
            new_kueue = frozenset(r.kind for r in new if r.info.group == KUEUE_GROUP)
            for resource in new:
                watcher = ResourceWatcher(
                    self._api,
                    resource,
                    store,
                    self.settings,
                    on_listed=self._listed,
                    on_not_served=self._not_served,
                )
                self._watchers[resource.kind] = watcher
                self._retired.pop(watcher.name, None)
                started.append(watcher)
            kueue_retired = not initial and self._kueue_enabled and not discovery.kueue_available
            if initial:
                self._initial_kinds = frozenset(r.kind for r in new)
                self._kueue_enabled = discovery.kueue_available
            elif kueue_retired:
                pass  # kueue_enabled goes off below, once the store has dropped Kueue's objects
            elif new_kueue and not self._kueue_enabled and discovery.kueue_available:
                self._kueue_pending = new_kueue
            # A kind that went away can no longer hold up the first sync or quota being switched on.
            self._initial_kinds &= frozenset(self._watchers)
            self._kueue_pending = (
                self._kueue_pending & frozenset(self._watchers) if discovery.kueue_available else frozenset()
            )
        for watcher in stopped:
            watcher.stop()  # returns once the watcher can write no more, so its kind is ours to drop or hand on
        if initial:
            store.set_kueue_enabled(discovery.kueue_available)
            self._log_discovery(discovery)
        elif new_kueue and self._kueue_pending:
            log.warning("Kueue CRDs found: starting quota watchers for %s", ", ".join(sorted(new_kueue)))
        if kueue_retired:
            store.set_kueue_enabled(False)
            log.error(KUEUE_RETIRED_MESSAGE)
        for resource in retired:
            store.replace(resource.kind, ())
            self._reported_missing[resource.kind] = discovery.missing.get(resource.kind, "")  # said here, once
            covered = kueue_retired and resource.info.group == KUEUE_GROUP
            if not covered:
                log.error("%s is no longer served: not watching it, its objects dropped", resource.describe())
        if retired_reasons or kueue_retired:
            with self._lock:
                self._retired.update(retired_reasons)
                if kueue_retired:
                    self._kueue_enabled = False
        for old, new_resource in moved:
            log.warning(
                "%s is no longer served: watching %s instead (relisting)", old.describe(), new_resource.describe()
            )
        if retired and not discovery.dra_available and any(r.info.group == RESOURCE_GROUP for r in retired):
            log.error(DRA_ABSENT_MESSAGE)
        self._report_missing(discovery)
        if started:
            log.info("watching %s", ", ".join(watcher.resource.describe() for watcher in started))
        for watcher in started:
            watcher.start()
        if stopped:
            self._update_listed()

    def _log_discovery(self, discovery: Discovery) -> None:
        versions = {
            group: resource.version
            for resource in discovery.resources.values()
            for group in (resource.info.group,)
            if group
        }
        log.info(
            "API server %s serves %s",
            self.api_config.host,
            ", ".join(f"{group}/{version}" for group, version in sorted(versions.items())) or "no extension APIs",
        )
        if not discovery.dra_available:
            log.error(DRA_ABSENT_MESSAGE)
        if not discovery.kueue_available:
            log.warning(KUEUE_ABSENT_MESSAGE)

    def _report_missing(self, discovery: Discovery) -> None:
        """One line per kind and reason, not one every re-check."""
        for kind, reason in discovery.missing.items():
            if self._reported_missing.get(kind) == reason:
                continue
            self._reported_missing[kind] = reason
            group = _group_of(kind)
            if group == KUEUE_GROUP and not discovery.kueue_available:
                continue  # covered by the single "Kueue CRDs not found" line
            if group == RESOURCE_GROUP and not discovery.dra_available:
                continue
            log.warning("not watching %s: %s", kind, reason)

    def _listed(self, watcher: ResourceWatcher) -> None:
        self._update_listed()

    def _update_listed(self) -> None:
        """Announce the first sync and switch quota on once the kinds they wait for are listed."""
        store = self._store
        assert store is not None
        announce_synced = False
        enable_kueue = False
        with self._lock:
            listed = {kind for kind, w in self._watchers.items() if w.listed}
            if not self._synced.is_set() and self._initial_kinds <= listed:
                announce_synced = True
            if self._kueue_pending and self._kueue_pending <= listed:
                # Under the lock, so health() never reports ready between the lists and quota being on.
                store.set_kueue_enabled(True)
                self._kueue_pending = frozenset()
                self._kueue_enabled = True
                enable_kueue = True
        if enable_kueue:
            log.warning("Kueue quota watchers synced: quota features on")
        if announce_synced:
            store.set_synced(True)
            self._synced.set()
            log.info(
                "initial lists of %d resources done in %.1fs",
                len(self._initial_kinds),
                time.monotonic() - self._started_at,
            )


def _group_of(kind: str) -> str:
    info = KINDS_BY_NAME.get(kind)
    return info.group if info is not None else ""


def from_kubeconfig(path: str | os.PathLike[str], *, context: str | None = None, **options: Any) -> LiveSource:
    """A LiveSource for `--kubeconfig FILE`; options are LiveSource's keyword arguments."""
    return LiveSource(load_kubeconfig(path, context=context), **options)


def in_cluster(**options: Any) -> LiveSource:
    """A LiveSource from the pod's service account (`--in-cluster`)."""
    return LiveSource(load_in_cluster(), **options)
