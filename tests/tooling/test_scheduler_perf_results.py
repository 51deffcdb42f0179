"""The scheduler_perf results parser and the bench's case summary (bench/scheduler_perf_results.py), and the
configuration the driver generates from an upstream test case (bench/scheduler_perf_bench.py). No Go runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import scheduler_perf_bench as driver
from bench.scheduler_perf_results import (
    CaseResult,
    ExtenderRecord,
    ResultError,
    Throughput,
    VerbTotals,
    parse_data_items,
    parse_extender_metrics,
    read_extender_record,
    read_result_dir,
    summary_line,
    workload_threshold,
)

# The shape scheduler_perf writes (util.go dataItems2JSONFile): labels every item shares are filled with
# "not applicable", the throughput item carries Metric SchedulingThroughput, the others their own metric.
DOCUMENT: dict[str, Any] = {
    "version": "v1",
    "dataItems": [
        {
            "data": {"Average": 0.012, "Perc50": 0.01, "Perc90": 0.02, "Perc95": 0.02, "Perc99": 0.03},
            "unit": "ms",
            "labels": {
                "Metric": "scheduler_framework_extension_point_duration_seconds",
                "Name": "SchedulingWithResourceClaimTemplate/5000pods_500nodes",
                "extension_point": "Filter",
            },
        },
        {
            "data": {"Average": 71.5, "Perc50": 72, "Perc90": 80, "Perc95": 81.5, "Perc99": 90},
            "unit": "pods/s",
            "labels": {
                "Metric": "SchedulingThroughput",
                "Name": "SchedulingWithResourceClaimTemplate/5000pods_500nodes",
                "extension_point": "not applicable",
            },
        },
    ],
}


def test_parse_picks_the_throughput_item_with_every_bucket() -> None:
    (found,) = parse_data_items(DOCUMENT)
    assert found == Throughput("SchedulingWithResourceClaimTemplate/5000pods_500nodes", 71.5, 72.0, 80.0, 81.5, 90.0)


def test_a_workload_too_short_to_sample_gives_no_throughput_rather_than_zero() -> None:
    # util.go throughputCollector.collect: no samples -> the item has neither the Metric label nor data.
    document = {"version": "v1", "dataItems": [{"data": None, "unit": "", "labels": {"Name": "x/y"}}]}
    assert parse_data_items(document) == []
    # Every workload failed: Go writes the nil slice as null.
    assert parse_data_items({"version": "v1", "dataItems": None}) == []


@pytest.mark.parametrize(
    "document",
    [
        {"version": "v1"},
        [],
        {"dataItems": ["text"]},
        {"dataItems": [{"labels": {"Metric": "SchedulingThroughput"}, "unit": "pods/s"}]},
        {"dataItems": [{"labels": {"Metric": "SchedulingThroughput"}, "unit": "pods/s", "data": {"Average": 1}}]},
        {
            "dataItems": [
                {
                    "labels": {"Metric": "SchedulingThroughput"},
                    "unit": "ms",
                    "data": dict.fromkeys(["Average", "Perc50", "Perc90", "Perc95", "Perc99"], 1.0),
                }
            ]
        },
        {
            "dataItems": [
                {
                    "labels": {"Metric": "SchedulingThroughput"},
                    "unit": "pods/s",
                    "data": {**dict.fromkeys(["Average", "Perc50", "Perc90", "Perc95"], 1.0), "Perc99": "fast"},
                }
            ]
        },
    ],
)
def test_malformed_documents_are_refused(document: Any) -> None:
    with pytest.raises(ResultError):
        parse_data_items(document)


def test_read_result_dir_reads_only_the_benchmark_files(tmp_path: Path) -> None:
    (tmp_path / "BenchmarkPerfScheduling_benchmark_dra_2026-12-07T16:00:00Z.json").write_text(json.dumps(DOCUMENT))
    (tmp_path / "SchedulingWithResourceClaimTemplate_5000pods_500nodes.dat").write_text("0.0s 0 0\n")
    assert [t.average for t in read_result_dir(tmp_path)] == [71.5]
    (tmp_path / "BenchmarkPerfScheduling_broken.json").write_text("{")
    with pytest.raises(ResultError):
        read_result_dir(tmp_path)


def test_threshold_by_topic_falls_back_to_the_plain_number_and_zero_disables() -> None:
    assert workload_threshold({"threshold": {"dra": 56}}, "dra") == 56.0
    assert workload_threshold({"threshold": {"dra": 56}}, "dra_experimental") is None
    assert workload_threshold({"threshold": 40}, "gangscheduling") == 40.0
    assert workload_threshold({"threshold": 0}, "dra") is None
    assert workload_threshold({}, "dra") is None
    with pytest.raises(ResultError):
        workload_threshold({"threshold": "fast"}, "dra")


METRICS = """# HELP dra_extender_request_duration_seconds Time to answer one extender or diagnostics request.
dra_extender_request_duration_seconds_bucket{le="0.001",verb="filter"} 10.0
dra_extender_request_duration_seconds_count{verb="filter"} 5000.0
dra_extender_request_duration_seconds_sum{verb="filter"} 4.0
dra_extender_request_duration_seconds_count{verb="prioritize"} 4000.0
dra_extender_request_duration_seconds_sum{verb="prioritize"} 1.0
dra_extender_thread_cpu_seconds_total{thread="verbs"} 3.5
dra_extender_thread_cpu_seconds_total{thread="watch pods"} 1.25
"""


def test_extender_metrics_give_calls_latency_cpu_and_calls_per_pod(tmp_path: Path) -> None:
    verbs, threads = parse_extender_metrics(METRICS)
    assert verbs == {"filter": VerbTotals(5000, 4.0), "prioritize": VerbTotals(4000, 1.0)}
    assert threads == {"verbs": 3.5, "watch pods": 1.25}
    path = tmp_path / "extender.json"
    path.write_text(json.dumps({"cpuSeconds": 9.0, "podsBound": 2500, "podsTotal": 2500, "metrics": METRICS}))
    record = read_extender_record(path)
    assert record.calls_per_pod("filter") == 2.0
    assert record.calls_per_pod("prioritize") == 1.6
    assert record.cpu_ms_per_call() == pytest.approx(1.0)  # 9 s over 9000 filter + prioritize calls
    assert record.latency_ms("filter") == pytest.approx(0.8)
    assert ExtenderRecord().calls_per_pod() is None and ExtenderRecord().cpu_ms_per_call() is None
    # A steady-state workload deletes what it scheduled: calls count per pod scheduled, not per pod left bound.
    path.write_text(json.dumps({"cpuSeconds": 9.0, "podsScheduled": 1000, "podsBound": 10, "metrics": METRICS}))
    assert read_extender_record(path).calls_per_pod("filter") == 5.0


def throughput(average: float) -> Throughput:
    return Throughput("n", average, average, average, average, average)


def test_time_ratio_line_and_summary_name_the_worst_case() -> None:
    a = CaseResult("claim-template", "5000pods_500nodes", 56.0, throughput(80), throughput(64), None)
    b = CaseResult("gang-3x1000", "w", None, throughput(100), throughput(95), None)
    c = CaseResult("tas", "w", None, throughput(100), None, None, failures=["with: benchmark exited 1"])
    assert a.time_ratio == pytest.approx(1.25)
    assert c.time_ratio is None
    assert "without 80.0 pods/s, with 64.0 pods/s, time ratio 1.250 (threshold 56)" in a.line()
    assert "FAILED: with: benchmark exited 1" in c.line()
    assert summary_line([a, b, c]) == "scheduler-perf: 3 cases, worst time ratio 1.250 (claim-template)"
    assert summary_line([c]) == "scheduler-perf: 1 cases, worst time ratio n/a"
    assert json.loads(json.dumps(a.to_json()))["timeRatio"] == pytest.approx(1.25)


def test_the_protocol_floor_is_reported_beside_and_never_counts_as_the_case_ratio() -> None:
    result = CaseResult("gang", "w", None, throughput(100), throughput(50), None, floor=throughput(80))
    assert result.floor_ratio == pytest.approx(1.25) and result.time_ratio == pytest.approx(2.0)
    assert "[protocol floor: 80.0 pods/s, time ratio 1.250]" in result.line()
    encoded = json.loads(json.dumps(result.to_json()))
    assert encoded["floorTimeRatio"] == pytest.approx(1.25) and encoded["floor"]["average"] == 80
    assert summary_line([result]) == "scheduler-perf: 1 cases, worst time ratio 2.000 (gang)"
    assert "protocol floor" not in CaseResult("gang", "w", None, throughput(100), throughput(50), None).line()


def test_the_go_floor_and_each_floors_cpu_are_reported_beside_the_python_floor() -> None:
    result = CaseResult(
        "tas",
        "w",
        None,
        throughput(100),
        throughput(40),
        None,
        floor=throughput(50),
        go_floor=throughput(80),
        floor_cpu_seconds={"floor": 12.5, "go-floor": 3.0},
    )
    assert result.go_floor_ratio == pytest.approx(1.25)
    line = result.line()
    assert line.index("[protocol floor: 50.0 pods/s, time ratio 2.000]") < line.index(
        "[Go floor: 80.0 pods/s, time ratio 1.250]"
    )
    encoded = json.loads(json.dumps(result.to_json()))
    assert encoded["goFloorTimeRatio"] == pytest.approx(1.25) and encoded["goFloor"]["average"] == 80
    assert encoded["floorCpuSeconds"] == {"floor": 12.5, "go-floor": 3.0}
    assert summary_line([result]) == "scheduler-perf: 1 cases, worst time ratio 2.500 (tas)"


# --- the generated configuration -------------------------------------------------------------------------

UPSTREAM = """
- name: GangScheduling
  featureGates:
    GenericWorkload: true
  workloadTemplate:
  - opcode: createNodes
    countParam: $initNodes
  - opcode: createNamespaces
    prefix: gang-ns
    count: 1
  - opcode: createPods
    countParam: $initPodGroups
    namespace: gang-ns-0
    podTemplatePath: templates/gang-pod.yaml
    collectMetrics: true
  workloads:
  - name: small
    labels: [integration-test]
    threshold:
      gangscheduling: 30
    params:
      initNodes: 10
      initPodGroups: 3
"""

POD = """apiVersion: v1
kind: Pod
metadata:
  name: test-gang-scheduling-{{.Index}}
spec:
  schedulingGroup:
    podGroupName: gang-{{DivideInt .Index .podsPerGroup}}
"""


def test_generated_config_adds_quota_objects_label_and_scheduler_config(tmp_path: Path) -> None:
    perf = tmp_path / "perf"
    (perf / "podgroup" / "templates").mkdir(parents=True)
    (perf / "podgroup" / "config.yaml").write_text(UPSTREAM)
    (perf / "podgroup" / "templates" / "gang-pod.yaml").write_text(POD)
    case = driver.Case("gang", "podgroup/config.yaml", "GangScheduling", "small", "gangscheduling", True, {})
    work = tmp_path / "work"
    work.mkdir()
    (test_case,), threshold = driver.generated_config(perf, case, work, work / "scheduler.yaml")
    assert threshold == 30.0
    assert test_case["schedulerConfigPath"] == str(work / "scheduler.yaml")
    (workload,) = test_case["workloads"]
    assert "threshold" not in workload and workload["labels"] == ["performance"]
    opcodes = [(op["opcode"], Path(op.get("templatePath", "")).name) for op in test_case["workloadTemplate"]]
    assert opcodes == [
        ("createNodes", ""),
        ("createNamespaces", ""),
        ("createAny", "resourceflavor.yaml"),
        ("createAny", "clusterqueue.yaml"),
        ("createAny", "localqueue.yaml"),
        ("createPods", ""),
    ]
    assert test_case["workloadTemplate"][4]["namespace"] == "gang-ns-0"
    pods = Path(test_case["workloadTemplate"][5]["podTemplatePath"])
    assert pods.parent == work
    # Rendered the way Go's template would leave it, the labelled template is the upstream pod plus the label.
    rendered = yaml.safe_load(
        pods.read_text().replace("{{.Index}}", "0").replace("{{DivideInt .Index .podsPerGroup}}", "0")
    )
    assert rendered["metadata"] == {"name": "test-gang-scheduling-0", "labels": {driver.QUEUE_LABEL: "scheduler-perf"}}
    assert rendered["spec"] == {"schedulingGroup": {"podGroupName": "gang-0"}}

    # A size override keeps the case but drops the threshold, which belongs to upstream's size.
    sized = driver.Case(**{**case.__dict__, "params": {"initNodes": 50}})
    (test_case,), threshold = driver.generated_config(perf, sized, work, work / "scheduler.yaml")
    assert threshold is None
    assert test_case["workloads"][0]["params"] == {"initNodes": 50, "initPodGroups": 3}


def test_queue_label_joins_existing_labels() -> None:
    template = "apiVersion: v1\nkind: Pod\nmetadata:\n  generateName: p\n  labels:\n    app: x\nspec: {}\n"
    labelled = yaml.safe_load(driver.with_queue_label(template, "q"))
    assert labelled["metadata"]["labels"] == {driver.QUEUE_LABEL: "q", "app": "x"}


def test_the_shipped_cases_name_upstream_workloads_and_both_modes_share_the_scheduler_config() -> None:
    cases = driver.load_cases(driver.CONFIG, None, [])
    assert {case.test_case for case in cases} >= {
        "SchedulingWithResourceClaimTemplate",
        "GangScheduling",
        "TopologyAwareScheduling",
        "Partitionable",
    }
    picked = driver.load_cases(driver.CONFIG, ["gang-3x1000"], ["gang-3x1000.initNodes=500"])
    assert [(c.name, c.params) for c in picked] == [("gang-3x1000", {"initNodes": 500})]
    without = driver.scheduler_configuration(None)
    with_extender = driver.scheduler_configuration("http://127.0.0.1:1")
    assert without["percentageOfNodesToScore"] == with_extender["percentageOfNodesToScore"] == 100
    (entry,) = with_extender["extenders"]
    assert entry["nodeCacheCapable"] is True and entry["filterVerb"] == "filter"
    assert entry["prioritizeVerb"] == "prioritize"
    assert {k: v for k, v in with_extender.items() if k != "extenders"} == without


def test_the_go_floor_launcher_takes_the_listen_address_the_harness_passes(tmp_path: Path) -> None:
    launcher = driver.go_null_extender_launcher(tmp_path, Path("/bin/echo"))
    args = ["serve", "--kubeconfig", "/k", "--listen", "127.0.0.1:8888", "--config", "/c"]
    proc = subprocess.run([str(launcher), *args], capture_output=True, text=True, check=True)
    assert proc.stdout == "127.0.0.1:8888\n"
    refused = subprocess.run([str(launcher), "serve"], capture_output=True, text=True)
    assert refused.returncode == 2 and "no --listen" in refused.stderr
