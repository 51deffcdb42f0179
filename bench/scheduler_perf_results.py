"""What `make bench-scheduler-perf` reads back from a scheduler_perf run, and how it summarizes a case.

scheduler_perf (k8s.io/kubernetes v1.37.2, test/integration/scheduler_perf) writes its measurements as perf-dash
"DataItems" JSON (util.go ``dataItems2JSONFile``): ``{"version": "v1", "dataItems": [{"data": {...}, "unit": ...,
"labels": {"Name": ..., "Metric": ...}}]}``. The throughput collector (util.go ``throughputCollector.collect``)
gives the item labelled ``Metric: SchedulingThroughput`` with the buckets Average, Perc50, Perc90, Perc95 and
Perc99 in pods/s; when the measured pods took less than one sampling interval it gives the item without that
label and without data, which is read here as "no throughput measured", not as zero.

A workload's ``threshold`` (scheduler_perf.go ``thresholds``) is either one number or a map from topic name to
number; ``thresholds.Get`` picks the topic's entry and falls back to the plain number.

The extender's side comes from its /metrics text: ``dra_extender_request_duration_seconds`` (count and sum per
verb) and ``dra_extender_thread_cpu_seconds_total`` (CPU seconds per thread), plus the process tree's CPU seconds
and the pods bound, which the benchmark's prepare hook records when the workload ends
(tests/e2e/harness/schedperf).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

THROUGHPUT_METRIC = "SchedulingThroughput"
BUCKETS = ("Average", "Perc50", "Perc90", "Perc95", "Perc99")
# The verbs kube-scheduler calls on the extender (its extender entry names filter and prioritize).
SCHEDULING_VERBS = ("filter", "prioritize")


class ResultError(ValueError):
    """A result file that is not scheduler_perf's DataItems JSON."""


@dataclass(frozen=True)
class Throughput:
    """One SchedulingThroughput data item: pods/s by bucket."""

    name: str
    average: float
    perc50: float
    perc90: float
    perc95: float
    perc99: float


def parse_data_items(document: Any) -> list[Throughput]:
    """Every SchedulingThroughput item of one DataItems document, in file order."""
    # A run whose workloads all failed writes "dataItems": null (a nil slice): nothing measured.
    if (
        not isinstance(document, dict)
        or "dataItems" not in document
        or not isinstance(document["dataItems"], (list, type(None)))
    ):
        raise ResultError("not a scheduler_perf DataItems document (no dataItems list)")
    found: list[Throughput] = []
    for item in document.get("dataItems") or []:
        if not isinstance(item, dict):
            raise ResultError(f"data item is not an object: {item!r}")
        labels = item.get("labels") or {}
        if not isinstance(labels, dict) or labels.get("Metric") != THROUGHPUT_METRIC:
            continue
        data = item.get("data")
        if not isinstance(data, dict):
            raise ResultError(f"{THROUGHPUT_METRIC} item without data: {item!r}")
        if item.get("unit") not in (None, "pods/s"):
            raise ResultError(f"{THROUGHPUT_METRIC} in unit {item.get('unit')!r}, expected pods/s")
        values: list[float] = []
        for bucket in BUCKETS:
            value = data.get(bucket)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ResultError(f"{THROUGHPUT_METRIC} bucket {bucket} missing or not a number: {value!r}")
            values.append(float(value))
        found.append(Throughput(str(labels.get("Name", "")), *values))
    return found


def read_result_dir(directory: Path) -> list[Throughput]:
    """The SchedulingThroughput items of every BenchmarkPerfScheduling*.json in ``directory``."""
    found: list[Throughput] = []
    for path in sorted(directory.glob("BenchmarkPerfScheduling*.json")):
        try:
            document = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ResultError(f"{path}: {error}") from error
        found.extend(parse_data_items(document))
    return found


def workload_threshold(workload: dict[str, Any], topic: str) -> float | None:
    """The workload's threshold for ``topic`` as scheduler_perf reads it; None when absent or zero (disabled)."""
    raw = workload.get("threshold")
    if raw is None:
        return None
    if isinstance(raw, dict):
        value = raw.get(topic)
        if value is None:
            return None
    else:
        value = raw
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ResultError(f"threshold is neither a number nor a topic map: {raw!r}")
    return float(value) or None


_HISTOGRAM = re.compile(r'^dra_extender_request_duration_seconds_(sum|count)\{verb="([^"]+)"\} (\S+)$', re.M)
_THREAD_CPU = re.compile(r'^dra_extender_thread_cpu_seconds_total\{thread="([^"]+)"\} (\S+)$', re.M)


@dataclass(frozen=True)
class VerbTotals:
    calls: int
    seconds: float


@dataclass
class ExtenderRecord:
    """The extender's side of one workload: calls and time per verb, CPU per thread and in all."""

    verbs: dict[str, VerbTotals] = field(default_factory=dict)
    thread_cpu_seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    pods_scheduled: int = 0
    pods_bound: int = 0
    pods_total: int = 0

    @property
    def scheduling_calls(self) -> int:
        return sum(self.verbs[verb].calls for verb in SCHEDULING_VERBS if verb in self.verbs)

    def calls_per_pod(self, verb: str = "filter") -> float | None:
        """Calls per pod scheduled in the workload (per pod bound at its end when that count is missing)."""
        totals = self.verbs.get(verb)
        pods = self.pods_scheduled or self.pods_bound
        if totals is None or not pods:
            return None
        return totals.calls / pods

    def cpu_ms_per_call(self) -> float | None:
        calls = self.scheduling_calls
        return self.cpu_seconds / calls * 1000 if calls else None

    def latency_ms(self, verb: str) -> float | None:
        totals = self.verbs.get(verb)
        return totals.seconds / totals.calls * 1000 if totals and totals.calls else None


def parse_extender_metrics(text: str) -> tuple[dict[str, VerbTotals], dict[str, float]]:
    """Per verb (calls, seconds) and per thread CPU seconds from the extender's /metrics text."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for kind, verb, value in _HISTOGRAM.findall(text):
        (sums if kind == "sum" else counts)[verb] = float(value)
    verbs = {verb: VerbTotals(int(counts.get(verb, 0)), sums.get(verb, 0.0)) for verb in sums.keys() | counts.keys()}
    threads = {name: float(value) for name, value in _THREAD_CPU.findall(text)}
    return verbs, threads


def read_extender_record(path: Path) -> ExtenderRecord:
    """The record the benchmark's prepare hook writes (extender.json): CPU, pods, the /metrics text."""
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict):
        raise ResultError(f"{path}: not an object")
    verbs, threads = parse_extender_metrics(str(raw.get("metrics", "")))
    return ExtenderRecord(
        verbs=verbs,
        thread_cpu_seconds=threads,
        cpu_seconds=float(raw.get("cpuSeconds", 0.0)),
        pods_scheduled=int(raw.get("podsScheduled", 0)),
        pods_bound=int(raw.get("podsBound", 0)),
        pods_total=int(raw.get("podsTotal", 0)),
    )


@dataclass
class CaseResult:
    """One case run in both modes."""

    case: str
    workload: str
    threshold: float | None
    without: Throughput | None
    with_extender: Throughput | None
    extender: ExtenderRecord | None
    failures: list[str] = field(default_factory=list)
    # With --floor: the same scheduler configuration calling an extender that decides nothing (bench/null_extender.py)
    floor: Throughput | None = None
    # With --go-floor: the same answers from bench/null_extender_go, a minimal Go server: what any extender costs,
    # our server's request handling left out
    go_floor: Throughput | None = None
    # The CPU seconds of each floor's process tree over its run (the harness's extender.json), by mode
    floor_cpu_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def time_ratio(self) -> float | None:
        """Time per pod with the extender over time per pod without: throughput without / throughput with."""
        return _ratio(self.without, self.with_extender)

    @property
    def floor_ratio(self) -> float | None:
        """The same ratio for the extender that decides nothing: what calling any extender costs this case."""
        return _ratio(self.without, self.floor)

    @property
    def go_floor_ratio(self) -> float | None:
        """The same ratio for the Go server that decides nothing."""
        return _ratio(self.without, self.go_floor)

    def line(self) -> str:
        def pods(throughput: Throughput | None) -> str:
            return f"{throughput.average:.1f}" if throughput else "n/a"

        ratio = self.time_ratio
        parts = [
            f"{self.case} ({self.workload}):",
            f"without {pods(self.without)} pods/s,",
            f"with {pods(self.with_extender)} pods/s,",
            f"time ratio {ratio:.3f}" if ratio is not None else "time ratio n/a",
        ]
        if self.threshold is not None:
            parts.append(f"(threshold {self.threshold:g})")
        if self.floor is not None:
            floor_ratio = self.floor_ratio
            shown = f"{floor_ratio:.3f}" if floor_ratio is not None else "n/a"
            parts.append(f"[protocol floor: {pods(self.floor)} pods/s, time ratio {shown}]")
        if self.go_floor is not None:
            go_ratio = self.go_floor_ratio
            shown = f"{go_ratio:.3f}" if go_ratio is not None else "n/a"
            parts.append(f"[Go floor: {pods(self.go_floor)} pods/s, time ratio {shown}]")
        if self.extender is not None:
            per_pod = self.extender.calls_per_pod()
            cpu = self.extender.cpu_ms_per_call()
            if per_pod is not None:
                parts.append(f"filter calls/pod {per_pod:.2f},")
            if cpu is not None:
                parts.append(f"extender CPU {cpu:.2f} ms/call")
        if self.failures:
            parts.append("FAILED: " + "; ".join(self.failures))
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        extender: dict[str, Any] | None = None
        if self.extender is not None:
            extender = {
                "verbs": {verb: asdict(totals) for verb, totals in sorted(self.extender.verbs.items())},
                "threadCpuSeconds": self.extender.thread_cpu_seconds,
                "cpuSeconds": self.extender.cpu_seconds,
                "podsScheduled": self.extender.pods_scheduled,
                "podsBound": self.extender.pods_bound,
                "podsTotal": self.extender.pods_total,
                "filterCallsPerPod": self.extender.calls_per_pod("filter"),
                "prioritizeCallsPerPod": self.extender.calls_per_pod("prioritize"),
                "cpuMsPerCall": self.extender.cpu_ms_per_call(),
                "filterLatencyMs": self.extender.latency_ms("filter"),
            }
        return {
            "case": self.case,
            "workload": self.workload,
            "threshold": self.threshold,
            "without": asdict(self.without) if self.without else None,
            "with": asdict(self.with_extender) if self.with_extender else None,
            "timeRatio": self.time_ratio,
            "floor": asdict(self.floor) if self.floor else None,
            "floorTimeRatio": self.floor_ratio,
            "goFloor": asdict(self.go_floor) if self.go_floor else None,
            "goFloorTimeRatio": self.go_floor_ratio,
            "floorCpuSeconds": self.floor_cpu_seconds,
            "extender": extender,
            "failures": self.failures,
        }


def _ratio(without: Throughput | None, other: Throughput | None) -> float | None:
    if without is None or other is None or other.average <= 0:
        return None
    return without.average / other.average


def summary_line(results: list[CaseResult]) -> str:
    """``scheduler-perf: N cases, worst time ratio R (CASE)``; ``n/a`` when no case has both throughputs."""
    measured = [(result.time_ratio, result.case) for result in results if result.time_ratio is not None]
    if not measured:
        return f"scheduler-perf: {len(results)} cases, worst time ratio n/a"
    ratio, case = max(measured)
    return f"scheduler-perf: {len(results)} cases, worst time ratio {ratio:.3f} ({case})"
