"""Prometheus metrics of one extender process.

Each app gets its own registry (tests build many apps in one process). Gauges that describe state (quota,
reservations, freshness) are computed when scraped, from the service's one quota view (the same the verbs and
/diagnostics/queues read, reconciled first), so they can never drift from it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from extender.reports.queues import queue_rows
from extender.service import QuotaView, SchedulingService
from extender.service.service import ServiceStats
from extender.state.sources import SourceHealth
from extender.transport.foreground import ForegroundWork
from extender.transport.thread_cpu import thread_cpu_seconds

LabelledFamily = TypeVar("LabelledFamily", GaugeMetricFamily, CounterMetricFamily)

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ExtenderMetrics:
    def __init__(self, service: SchedulingService, foreground: ForegroundWork) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_seconds = Histogram(
            "dra_extender_request_duration_seconds",
            "Time to answer one extender or diagnostics request.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "dra_extender_requests_total",
            "Requests answered, by verb and HTTP status.",
            ["verb", "code"],
            registry=self.registry,
        )
        self.filter_outcomes = Counter(
            "dra_extender_filter_node_outcomes_total",
            "Per-node filter verdicts by reason category ('passed' for nodes that pass).",
            ["category"],
            registry=self.registry,
        )
        self.nodes_evaluated = Counter(
            "dra_extender_nodes_evaluated_total",
            "Candidate nodes evaluated, by verb.",
            ["verb"],
            registry=self.registry,
        )
        self.fast_path = Counter(
            "dra_extender_fast_path_total",
            "Requests for pods without claims and without a queue.",
            ["verb"],
            registry=self.registry,
        )
        self.registry.register(_StateCollector(service, foreground))
        self._children: dict[tuple[Counter | Histogram, tuple[str, ...]], Any] = {}

    def child(self, metric: Counter | Histogram, *values: str) -> Any:
        """`metric.labels(*values)`, remembered: prometheus_client's labels() checks its arguments and takes a
        lock on every call, and each verb request records five to eight labelled values."""
        key = (metric, values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found


class _StateCollector(Collector):
    """The families computed when scraped, in this order: reservations, health, watches, threads, background
    pacing, the view's version, memos, quota per queue."""

    def __init__(self, service: SchedulingService, foreground: ForegroundWork) -> None:
        self.service = service
        self.foreground = foreground

    def describe(self) -> list[GaugeMetricFamily]:
        """Nothing up front: the families depend on live state, and collecting at registration is wasted work."""
        return []

    def collect(self) -> Iterator[Metric]:
        service = self.service
        view = service.quota_view()
        stats = service.stats()
        yield from _reservation_families(stats, view)
        yield from _health_families(service.health())
        if watches := service.source.stats_dicts():  # a source without watches has none
            yield from _watch_families(watches)
        yield _thread_cpu_family()
        yield from _background_families(self.foreground)
        yield GaugeMetricFamily(
            "dra_extender_state_version", "Change counter of the cluster view.", value=view.snapshot.version
        )
        yield from _memo_families(stats)
        yield from _quota_families(view)


def _reservation_families(stats: ServiceStats, view: QuotaView) -> Iterator[Metric]:
    """Quota reservations held, let go and restored, and the pods parked for a requeue."""
    yield GaugeMetricFamily(
        "dra_extender_reservations_held", "Pods holding a quota reservation.", value=len(view.reservations)
    )
    yield _per_label(
        CounterMetricFamily("dra_extender_reservations_released", "Reservations let go, by reason.", labels=["reason"]),
        stats.released,
    )
    yield GaugeMetricFamily(
        "dra_extender_parked_pods",
        "Refusals for quota or devices since the last requeue: pods that wait for one (service/parking.py).",
        value=stats.parked,
    )
    yield CounterMetricFamily(
        "dra_extender_requeues",
        "Requeues asked for because quota or devices freed up for pods the extender refused (requeue).",
        value=stats.requeues,
    )
    yield GaugeMetricFamily(
        "dra_extender_reservations_restored",
        "Reservations taken over from the previous process's journal at start (reservations.journal).",
        value=stats.restored,
    )
    yield _per_label(
        CounterMetricFamily(
            "dra_extender_reservations_restored_released",
            "Restored reservations let go, by reason: 'expired' held quota for a pod never seen bound or deleted.",
            labels=["reason"],
        ),
        stats.restored_released,
    )
    yield GaugeMetricFamily(
        "dra_extender_reservations_restored_held",
        "Reservations taken over from the previous process's journal still held (not yet bound, gone or expired).",
        value=stats.restored_held,
    )


def _health_families(health: SourceHealth) -> Iterator[Metric]:
    """Whether the cluster view is ready, and how fresh each watched resource is."""
    yield GaugeMetricFamily(
        "dra_extender_ready", "1 when the cluster view is loaded and in sync.", value=1.0 if health.ready else 0.0
    )
    yield _per_label(
        GaugeMetricFamily(
            "dra_extender_state_age_seconds",
            "Seconds since each watched resource last listed, received an event or a bookmark.",
            labels=["resource"],
        ),
        health.freshness_seconds,
    )


def _thread_cpu_family() -> CounterMetricFamily:
    return _per_label(
        CounterMetricFamily(
            "dra_extender_thread_cpu_seconds",
            "CPU seconds per thread of the process alive now (pool threads summed; Linux only).",
            labels=["thread"],
        ),
        thread_cpu_seconds(),
    )


def _per_label(family: LabelledFamily, values: Mapping[str, float]) -> LabelledFamily:
    """`family` (declared with one label) with a sample per entry of `values`, in the order of the label's values."""
    for label_value, value in sorted(values.items()):
        family.add_metric([label_value], value)
    return family


# ForegroundWork's counter -> (metric name, help): how often and how long the background threads waited for verbs
_BACKGROUND_COUNTERS = {
    "stepped_aside": (
        "dra_extender_background_stepped_aside",
        "Times a watch thread or the view keeper waited for a running filter or prioritize to finish.",
    ),
    "stepped_aside_for_arrivals": (
        "dra_extender_background_stepped_aside_for_requests",
        "Times a watch thread or the view keeper held off for a verb's request waiting to be read.",
    ),
    "waited_seconds": (
        "dra_extender_background_wait_seconds",
        "Seconds watch threads and the view keeper spent waiting for running verbs (at most 50 ms per gap).",
    ),
}


def _background_families(foreground: ForegroundWork) -> Iterator[Metric]:
    """How often and how long the background threads waited for verbs (transport/foreground.py)."""
    for counter, (name, help_text) in _BACKGROUND_COUNTERS.items():
        yield CounterMetricFamily(name, help_text, value=getattr(foreground, counter))


def _memo_families(stats: ServiceStats) -> Iterator[Metric]:
    memo_entries = GaugeMetricFamily("dra_extender_memo_entries", "Entries held per memo.", labels=["memo"])
    memo_clears = CounterMetricFamily("dra_extender_memo_clears", "Wholesale clears of a full memo.", labels=["memo"])
    for memo in stats.memos:
        memo_entries.add_metric([memo.name], len(memo))
        memo_clears.add_metric([memo.name], memo.clears)
    yield memo_entries
    yield memo_clears


# queue_rows' number -> (metric name, help) of a gauge per ClusterQueue, flavor and resource: the quota of every
# governed queue ...
_QUOTA_GAUGES = {
    "available": (
        "dra_extender_quota_available",
        "Kueue 'available' per ClusterQueue, flavor and resource, after usage, reservations and admitted holds.",
    ),
    "usage": ("dra_extender_quota_usage", "Devices held by bound pods per ClusterQueue, flavor and resource."),
    "reserved": (
        "dra_extender_quota_reserved",
        "Quota held by reservations of pods that passed filter, per ClusterQueue, flavor and resource.",
    ),
    "admittedPending": (
        "dra_extender_quota_admitted_pending",
        "Quota admitted Workloads hold beyond what their pods hold on nodes (Kueue charged it at admission), "
        "per ClusterQueue, flavor and resource.",
    ),
}
# ... and Kueue's own account of it, for the rows where Kueue reports a reservation (drift is not None).
_KUEUE_GAUGES = {
    "kueueReservation": (
        "dra_extender_kueue_quota_reservation",
        "Quota Kueue reports reserved for admitted Workloads (ClusterQueue status.flavorsReservation).",
    ),
    "drift": (
        "dra_extender_quota_drift",
        "Kueue's reservation minus what is allocated or reserved on nodes: > 0 while admitted Workloads' "
        "pods are not placed, < 0 when pods outside Kueue use the queue's devices.",
    ),
}


def _queue_gauge(name: str, help_text: str) -> GaugeMetricFamily:
    """A gauge labelled by ClusterQueue, flavor and resource (one sample per row of reports/queues.py
    queue_rows)."""
    return GaugeMetricFamily(name, help_text, labels=["cluster_queue", "flavor", "resource"])


def _quota_families(view: QuotaView) -> list[GaugeMetricFamily]:
    """The quota per ClusterQueue, flavor and resource, from the same rows as /diagnostics/queues."""
    quota = {number: _queue_gauge(*text) for number, text in _QUOTA_GAUGES.items()}
    kueue = {number: _queue_gauge(*text) for number, text in _KUEUE_GAUGES.items()}
    if view.governed:
        for cq_name, flavor, resource, numbers in queue_rows(view):
            labels = [cq_name, flavor, resource]
            for number, family in quota.items():
                family.add_metric(labels, float(numbers[number]))
            if numbers["drift"] is not None:
                for number, family in kueue.items():
                    family.add_metric(labels, float(numbers[number]))
    return [*quota.values(), *kueue.values()]


_WATCH_COUNTERS = {
    "events_applied": ("dra_extender_watch_events_total", "Watch events applied, per resource."),
    "relists": ("dra_extender_watch_relists_total", "Full relists (initial, 410 Gone), per resource."),
    "reconnects": ("dra_extender_watch_reconnects_total", "Watch reconnects after errors, per resource."),
    "malformed": ("dra_extender_watch_malformed_total", "Objects skipped because they could not be parsed."),
    "api_changes": (
        "dra_extender_watch_api_changes_total",
        "Collections moved to another served version, or retired, because their API stopped being served.",
    ),
}


def _watch_families(stats: dict[str, dict[str, object]]) -> Iterator[CounterMetricFamily]:
    for key, (name, help_text) in _WATCH_COUNTERS.items():
        family = CounterMetricFamily(name, help_text, labels=["resource"])
        for resource, values in sorted(stats.items()):
            value = values.get(key)
            if isinstance(value, int | float):
                family.add_metric([resource], float(value))
        yield family
