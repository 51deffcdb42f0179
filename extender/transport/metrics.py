"""Prometheus metrics of one extender process.

Each app gets its own registry (tests build many apps in one process). Gauges that describe state (quota,
reservations, freshness) are computed when scraped, from the engine, so they can never drift from it.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from extender.transport.engine import SchedulingEngine

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ExtenderMetrics:
    def __init__(self, engine: SchedulingEngine) -> None:
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
        self.registry.register(_StateCollector(engine))


class _StateCollector(Collector):
    def __init__(self, engine: SchedulingEngine) -> None:
        self.engine = engine

    def describe(self) -> list[GaugeMetricFamily]:
        """Nothing up front: the families depend on live state, and collecting at registration is wasted work."""
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        engine = self.engine
        held = GaugeMetricFamily("dra_extender_reservations_held", "Pods holding a quota reservation.")
        held.add_metric([], len(engine.reservations))
        yield held
        health = engine.health()
        ready = GaugeMetricFamily("dra_extender_ready", "1 when the cluster view is loaded and in sync.")
        ready.add_metric([], 1.0 if health.ready else 0.0)
        yield ready
        freshness = GaugeMetricFamily(
            "dra_extender_state_age_seconds",
            "Seconds since each watched resource last listed, received an event or a bookmark.",
            labels=["resource"],
        )
        for resource, age in sorted(health.freshness_seconds.items()):
            freshness.add_metric([resource], age)
        yield freshness
        stats = getattr(engine.source, "stats_dicts", None)
        if stats is not None:
            yield from _watch_families(stats())
        snapshot = engine.snapshot()
        version = GaugeMetricFamily("dra_extender_state_version", "Change counter of the cluster view.")
        version.add_metric([], snapshot.version)
        yield version
        available = GaugeMetricFamily(
            "dra_extender_quota_available",
            "Kueue 'available' per ClusterQueue, flavor and resource, after usage and reservations.",
            labels=["cluster_queue", "flavor", "resource"],
        )
        usage_family = GaugeMetricFamily(
            "dra_extender_quota_usage",
            "Devices held by bound pods per ClusterQueue, flavor and resource.",
            labels=["cluster_queue", "flavor", "resource"],
        )
        context = engine.quota_context(snapshot)
        if context.enabled and context.cluster_queues:
            usage = engine.usage.usage(snapshot, context)
            ledger = context.tree.ledger(engine.usage_with_reservations(snapshot, context))
            for cq in context.cluster_queues.values():
                for group in cq.resource_groups:
                    for flavor in group.flavors:
                        for quota in flavor.resources:
                            labels = [cq.name, flavor.name, quota.name]
                            available.add_metric(labels, float(ledger.available(cq.name, flavor.name, quota.name)))
                            used = usage.get((cq.name, flavor.name, quota.name), Fraction(0))
                            usage_family.add_metric(labels, float(used))
        yield available
        yield usage_family


_WATCH_COUNTERS = {
    "events_applied": ("dra_extender_watch_events_total", "Watch events applied, per resource."),
    "relists": ("dra_extender_watch_relists_total", "Full relists (initial, 410 Gone), per resource."),
    "reconnects": ("dra_extender_watch_reconnects_total", "Watch reconnects after errors, per resource."),
    "malformed": ("dra_extender_watch_malformed_total", "Objects skipped because they could not be parsed."),
}


def _watch_families(stats: dict[str, dict[str, object]]) -> Iterator[CounterMetricFamily]:
    for key, (name, help_text) in _WATCH_COUNTERS.items():
        family = CounterMetricFamily(name, help_text, labels=["resource"])
        for resource, values in sorted(stats.items()):
            value = values.get(key)
            if isinstance(value, int | float):
                family.add_metric([resource], float(value))
        yield family
