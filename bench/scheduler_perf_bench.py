"""kube-scheduler's own scale benchmark, scheduler_perf, without and with our extender in the loop.

Run: make bench-scheduler-perf [BENCH_ARGS="--cases claim-template gang-1000x3 --param gang-1000x3.initNodes=1000"]
or .venv/bin/python -m bench.scheduler_perf_bench --help.

What runs: k8s.io/kubernetes's test/integration/scheduler_perf at the version tests/e2e/harness/go.mod pins, built
once with `go test -c` from the package tests/e2e/harness/schedperf into bench/.build/scheduler-perf/ (gitignored).
Per workload it starts its own etcd (tests/e2e/.build's, on PATH as the integration framework expects), API server
and in-process kube-scheduler, runs the workload's operations and measures SchedulingThroughput (pods/s sampled
every second while the measured pods are scheduled: Average, Perc50/90/95/99).

The cases are bench/scheduler_perf/config.yaml's: upstream test cases by name, with their operations and templates
as upstream has them (read from the Go module cache), and our additions said there (the scheduler configuration,
the Kueue objects by createAny, the queue label on the pods). Each case runs twice in one invocation, the in-tree
scheduler alone and then the same scheduler configuration plus the extender (filter + prioritize over HTTP,
nodeCacheCapable, as config/kube-scheduler-config.yaml), the extender watching the benchmark's own API server
(started by the benchmark's prepare hook, tests/e2e/harness/schedperf). The time ratio is throughput without /
throughput with (Average): the goal is <= 1.10. With --floor a third run calls an extender that decides nothing
(bench/null_extender.py under our own server, launched as the harness launches `dra-extender serve`): the floor
of the protocol in this case, what calling any extender this way costs the scheduler's cycle. With --go-floor one
more run calls bench/null_extender_go (the same answers from a minimal Go server, as `bench.e2e_bench --floor`
builds it): the floor without our server's request handling, so that the two floors apart say what our server
costs the case and what any extender costs it.

Output: one line per case, the JSON of every case under bench/results/ (gitignored), and last
`scheduler-perf: N cases, worst time ratio R (CASE)`. Exit status 1 only when a run failed (the benchmark binary
failed, or a result is missing), never because a ratio is slow.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bench.null_extender import build_go_null_extender
from bench.scheduler_perf_results import (
    CaseResult,
    ExtenderRecord,
    ResultError,
    Throughput,
    read_extender_record,
    read_result_dir,
    summary_line,
    workload_threshold,
)
from testkit.builds.go import build_env, locate_go
from testkit.control_plane import EXTENDER_BIN, free_port

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "tests" / "e2e" / "harness"
PACKAGE = "./schedperf/"
BUILD_DIR = REPO / "bench" / ".build" / "scheduler-perf"
BINARY = BUILD_DIR / "schedperf.test"
CONFIG = REPO / "bench" / "scheduler_perf" / "config.yaml"
QUOTA_TEMPLATES = REPO / "bench" / "scheduler_perf" / "quota"
KUEUE_CRDS = REPO.parent / "shared" / "kueue" / "crds"
RESULTS = REPO / "bench" / "results"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
QUEUE_NAME = "scheduler-perf"
MODES = ("without", "with")
FLOOR = "floor"  # with --floor, after the two modes
GO_FLOOR = "go-floor"  # with --go-floor, last


class RunError(RuntimeError):
    """A build or a benchmark run failed."""


# --- the upstream module and the binary ---------------------------------------------------------------------


def go() -> str:
    found = locate_go()
    if found is None:
        raise RunError("the Go toolchain (`go`) is not on PATH; it builds scheduler_perf")
    return found


def module_cache() -> Path:
    """The Go module cache (``go env GOMODCACHE``)."""
    proc = subprocess.run([go(), "env", "GOMODCACHE"], env=build_env(), capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RunError(f"go env GOMODCACHE failed: {proc.stderr[-2000:]}")
    return Path(proc.stdout.strip())


def scheduler_perf_dir() -> Path:
    """test/integration/scheduler_perf of the pinned k8s.io/kubernetes module in the Go module cache."""
    proc = subprocess.run(
        [go(), "mod", "download", "-json", "k8s.io/kubernetes"],
        cwd=HARNESS,
        env=build_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise RunError(f"go mod download k8s.io/kubernetes failed: {proc.stderr[-2000:]}")
    directory = Path(json.loads(proc.stdout)["Dir"]) / "test" / "integration" / "scheduler_perf"
    if not directory.is_dir():
        raise RunError(f"{directory} is missing from the module cache")
    return directory


def ensure_binary(force: bool = False) -> Path:
    """Build the benchmark binary unless it is newer than its sources (the package and the harness module)."""
    sources = [*(HARNESS / "schedperf").glob("*.go"), HARNESS / "go.mod", HARNESS / "go.sum"]
    if not force and BINARY.exists() and BINARY.stat().st_mtime >= max(s.stat().st_mtime for s in sources):
        return BINARY
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    log = BUILD_DIR / "build.log"
    print(f"scheduler-perf: building {BINARY} (a cold build takes about 20 minutes on 2 cores; log: {log})", flush=True)
    start = time.monotonic()
    # Built beside and renamed into place: a binary another run is executing cannot be overwritten.
    partial = BINARY.with_suffix(".partial")
    cmd = [go(), "test", "-c", "-trimpath", "-o", str(partial), PACKAGE]
    with log.open("w") as out:
        proc = subprocess.run(cmd, cwd=HARNESS, env=build_env(), stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RunError(f"go test -c failed (exit {proc.returncode}); see {log}")
    partial.replace(BINARY)
    print(f"scheduler-perf: built in {time.monotonic() - start:.0f}s", flush=True)
    return BINARY


def etcd_dir() -> Path:
    """The directory of the etcd the e2e tests build (testkit/builds/kubernetes.py), which the integration framework
    runs."""
    from testkit.builds.kubernetes import ensure_binaries

    return ensure_binaries()["etcd"].parent


# --- the configuration of one run ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    file: str
    test_case: str
    workload: str
    topic: str
    quota: bool
    params: dict[str, Any]


def load_cases(path: Path, selected: list[str] | None, overrides: list[str]) -> list[Case]:
    """The cases of our config file, those named in ``selected`` (all when None), with ``CASE.PARAM=VALUE``
    overrides applied."""
    raw = yaml.safe_load(path.read_text())
    cases = [
        Case(
            name=entry["name"],
            file=entry["file"],
            test_case=entry["testCase"],
            workload=entry["workload"],
            topic=entry.get("topic", "dra"),
            quota=bool(entry.get("quota", False)),
            params=dict(entry.get("params") or {}),
        )
        for entry in raw["cases"]
    ]
    by_name = {case.name: case for case in cases}
    if selected:
        unknown = [name for name in selected if name not in by_name]
        if unknown:
            raise SystemExit(f"unknown case(s) {unknown}; known: {sorted(by_name)}")
        cases = [by_name[name] for name in selected]
    for override in overrides:
        match = re.fullmatch(r"([^.=]+)\.([^=]+)=(.*)", override)
        if match is None:
            raise SystemExit(f"--param wants CASE.PARAM=VALUE, got {override!r}")
        name, key, value = match.groups()
        target = next((case for case in cases if case.name == name), None)
        if target is None:
            raise SystemExit(f"--param {override}: case {name!r} is not selected")
        target.params[key] = yaml.safe_load(value)
    return cases


def upstream_case(perf_dir: Path, case: Case) -> tuple[dict[str, Any], dict[str, Any]]:
    """The upstream test case and workload a case names."""
    test_cases = yaml.safe_load((perf_dir / case.file).read_text())
    test_case = next((tc for tc in test_cases if tc.get("name") == case.test_case), None)
    if test_case is None:
        raise RunError(f"{case.file} has no test case {case.test_case}")
    workload = next((w for w in test_case["workloads"] if w.get("name") == case.workload), None)
    if workload is None:
        raise RunError(f"{case.file} {case.test_case} has no workload {case.workload}")
    return test_case, workload


def with_queue_label(pod_template: str, queue: str) -> str:
    """A pod template (YAML with Go template actions) with ``kueue.x-k8s.io/queue-name: queue`` among its
    metadata labels. Text-level, since the template is not YAML before Go renders it: the label goes under an
    existing two-space ``labels:`` of the top-level ``metadata:``, or a ``labels:`` block is added there."""
    lines = pod_template.splitlines()
    try:
        start = lines.index("metadata:")
    except ValueError as error:
        raise RunError("pod template without a top-level metadata: line") from error
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    label = f"    {QUEUE_LABEL}: {queue}"
    for i in range(start + 1, end):
        if lines[i].rstrip() == "  labels:":
            return "\n".join([*lines[: i + 1], label, *lines[i + 1 :]]) + "\n"
        if lines[i].startswith("  labels:"):
            raise RunError(f"pod template has inline metadata labels ({lines[i].strip()}); not supported")
    return "\n".join([*lines[: start + 1], "  labels:", label, *lines[start + 1 :]]) + "\n"


def generated_config(
    perf_dir: Path, case: Case, workdir: Path, scheduler_config: Path
) -> tuple[list[dict[str, Any]], float | None]:
    """The scheduler_perf configuration of one case (one test case, one workload) and upstream's threshold."""
    test_case, workload = upstream_case(perf_dir, case)
    test_case = copy.deepcopy(test_case)
    workload = copy.deepcopy(workload)
    threshold = None if case.params else workload_threshold(workload, case.topic)
    workload.pop("threshold", None)
    workload["params"] = {**workload.get("params", {}), **case.params}
    workload["labels"] = ["performance"]
    test_case.pop("labels", None)
    test_case["workloads"] = [workload]
    test_case["schedulerConfigPath"] = str(scheduler_config)
    if case.quota:
        base = (perf_dir / case.file).parent
        ops: list[dict[str, Any]] = []
        namespaces: list[str] = []
        default_template = test_case.pop("defaultPodTemplatePath", None)
        for index, op in enumerate(test_case["workloadTemplate"]):
            if op.get("opcode") != "createPods":
                continue
            template = op.get("podTemplatePath", default_template)
            if template is None:
                # scheduler_perf's own default pod (no template path) cannot carry the label.
                raise RunError(f"{case.name}: createPods without podTemplatePath; quota needs a labelled template")
            labelled = workdir / f"pod-{index}-{Path(template).name}"
            labelled.write_text(with_queue_label((base / template).read_text(), QUEUE_NAME))
            op["podTemplatePath"] = str(labelled)
            namespace = op.get("namespace")
            if namespace is None:
                raise RunError(f"{case.name}: createPods without a namespace; no LocalQueue can be placed")
            if namespace not in namespaces:
                namespaces.append(namespace)
        ops.append({"opcode": "createAny", "templatePath": str(QUOTA_TEMPLATES / "resourceflavor.yaml")})
        ops.append({"opcode": "createAny", "templatePath": str(QUOTA_TEMPLATES / "clusterqueue.yaml")})
        for namespace in namespaces:
            ops.append(
                {
                    "opcode": "createAny",
                    "templatePath": str(QUOTA_TEMPLATES / "localqueue.yaml"),
                    "namespace": namespace,
                }
            )
        first = next(i for i, op in enumerate(test_case["workloadTemplate"]) if op.get("opcode") == "createPods")
        test_case["workloadTemplate"][first:first] = ops
    return [test_case], threshold


def scheduler_configuration(extender_url: str | None) -> dict[str, Any]:
    """The KubeSchedulerConfiguration of both modes, as config/kube-scheduler-config.yaml sets what matters here:
    every feasible node scored (percentageOfNodesToScore: 100), and in the "with" mode the extender's entry."""
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "percentageOfNodesToScore": 100,
        "profiles": [{"schedulerName": "default-scheduler"}],
    }
    if extender_url is not None:
        config["extenders"] = [
            {
                "urlPrefix": extender_url,
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": 1,
                "nodeCacheCapable": True,
                "httpTimeout": "5s",
                "ignorable": False,
            }
        ]
    return config


# The extender's configuration for the benchmark: the shipped defaults, except that scheduler_perf's in-process
# scheduler holds no leader-election Lease (config/extender.yaml's leader.lease names kube-scheduler's).
EXTENDER_CONFIG: dict[str, Any] = {"leader": {"lease": ""}}


# --- one run -----------------------------------------------------------------------------------------------


def run_mode(
    binary: Path, perf_dir: Path, case: Case, mode: str, run_dir: Path, etcd: Path, timeout: float
) -> tuple[Throughput | None, ExtenderRecord | None, float | None, list[str]]:
    workdir = run_dir / f"{case.name}-{mode}"
    workdir.mkdir(parents=True)
    listen = f"127.0.0.1:{free_port()}"
    extender_url = f"http://{listen}" if mode in ("with", FLOOR, GO_FLOOR) else None
    scheduler_config = workdir / "scheduler-config.yaml"
    scheduler_config.write_text(yaml.safe_dump(scheduler_configuration(extender_url)))
    config, threshold = generated_config(perf_dir, case, workdir, scheduler_config)
    config_path = workdir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {
        **os.environ,
        "PATH": f"{etcd}{os.pathsep}{os.environ.get('PATH', '')}",
        "SCHEDPERF_CONFIG": str(config_path),
        "SCHEDPERF_TOPIC": case.topic,
        "SCHEDPERF_WORKDIR": str(workdir),
        "SCHEDPERF_CRDS": str(KUEUE_CRDS),
        # scheduler_perf writes each workload's log to $ARTIFACTS and deletes it when the workload passes.
        "ARTIFACTS": str(workdir),
        # The binary is built with -trimpath (sharing the build cache with testkit/builds/kubernetes.py's), so the
        # test API server cannot find its own source directory (its serving-certificate fixtures) from the call
        # stack; cmd/kube-apiserver/app/testing/testserver.go pkgPath then joins these two with the trimmed
        # path, module@version/..., which resolves in the module cache.
        "TEST_SRCDIR": str(module_cache()),
        "TEST_WORKSPACE": ".",
    }
    env.pop("SCHEDPERF_EXTENDER_BIN", None)
    if mode == FLOOR:
        env |= {"SCHEDPERF_EXTENDER_BIN": str(null_extender_launcher(workdir)), "SCHEDPERF_EXTENDER_LISTEN": listen}
    if mode == GO_FLOOR:
        launcher = go_null_extender_launcher(workdir, build_go_null_extender())
        env |= {"SCHEDPERF_EXTENDER_BIN": str(launcher), "SCHEDPERF_EXTENDER_LISTEN": listen}
    if mode == "with":
        extender_config = workdir / "extender.yaml"
        extender_config.write_text(yaml.safe_dump(EXTENDER_CONFIG))
        env |= {
            "SCHEDPERF_EXTENDER_BIN": str(EXTENDER_BIN),
            "SCHEDPERF_EXTENDER_LISTEN": listen,
            "SCHEDPERF_EXTENDER_CONFIG": str(extender_config),
        }
    data_dir = workdir / "data"
    cmd = [
        str(binary),
        "-test.run=^$",
        "-test.bench=^BenchmarkPerfScheduling$",
        "-test.benchtime=1x",
        "-test.timeout=0",
        f"-data-items-dir={data_dir}",
    ]
    log = workdir / "benchmark.log"
    failures: list[str] = []
    # The working directory is the upstream configuration's, so that its relative template paths resolve.
    with log.open("w") as out:
        try:
            proc = subprocess.run(
                cmd,
                cwd=perf_dir / Path(case.file).parent,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
            if proc.returncode != 0:
                failures.append(f"{mode}: benchmark exited {proc.returncode} (log: {log})")
        except subprocess.TimeoutExpired:
            failures.append(f"{mode}: benchmark timed out after {timeout:.0f}s (log: {log})")
    throughput: Throughput | None = None
    try:
        items = read_result_dir(data_dir) if data_dir.is_dir() else []
        throughput = items[0] if items else None
    except ResultError as error:
        failures.append(f"{mode}: {error}")
    if throughput is None and not failures:
        failures.append(f"{mode}: no SchedulingThroughput measured (log: {log})")
    record: ExtenderRecord | None = None
    if extender_url is not None:
        records = sorted(workdir.glob("*/extender.json"))
        if records:
            record = read_extender_record(records[0])
        elif not failures:
            failures.append(f"{mode}: the extender's record is missing")
    return throughput, record, threshold, failures


def null_extender_launcher(directory: Path) -> Path:
    """An executable the harness starts as it starts `dra-extender serve` (same arguments), which serves
    bench/null_extender.py on the address it is given."""
    launcher = directory / "null-extender"
    launcher.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m bench.null_extender "$@"\n')
    launcher.chmod(0o755)
    return launcher


def go_null_extender_launcher(directory: Path, binary: Path) -> Path:
    """An executable the harness starts as it starts `dra-extender serve`, which runs bench/null_extender_go on the
    address after --listen (the Go server takes only that)."""
    launcher = directory / "go-null-extender"
    launcher.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do\n  if [ "$1" = --listen ]; then exec '
        f'{binary} "$2"; fi\n  shift\ndone\necho "no --listen" >&2\nexit 2\n'
    )
    launcher.chmod(0o755)
    return launcher


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=CONFIG, help="our cases file (default: %(default)s)")
    parser.add_argument("--cases", nargs="+", help="case names from the config (default: all)")
    parser.add_argument(
        "--param", action="append", default=[], metavar="CASE.PARAM=VALUE", help="override a workload parameter"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run (default: %(default)s)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the benchmark binary")
    parser.add_argument("--floor", action="store_true", help="also run each case with an extender that decides nothing")
    parser.add_argument(
        "--go-floor", action="store_true", help="also run each case with a Go server that decides nothing"
    )
    args = parser.parse_args(argv)

    cases = load_cases(args.config, args.cases, args.param)
    if not KUEUE_CRDS.is_dir() and any(case.quota for case in cases):
        raise SystemExit(f"{KUEUE_CRDS} is missing: the Kueue CRDs come from ../shared")
    perf_dir = scheduler_perf_dir()
    binary = ensure_binary(force=args.rebuild)
    etcd = etcd_dir()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = args.results / f"scheduler-perf-{stamp}"
    run_dir.mkdir(parents=True)
    results: list[CaseResult] = []
    for case in cases:
        throughputs: dict[str, Throughput | None] = {}
        record: ExtenderRecord | None = None
        threshold: float | None = None
        failures: list[str] = []
        floor_cpu: dict[str, float] = {}
        for mode in (*MODES, *((FLOOR,) if args.floor else ()), *((GO_FLOOR,) if args.go_floor else ())):
            throughput, mode_record, threshold, mode_failures = run_mode(
                binary, perf_dir, case, mode, run_dir, etcd, args.timeout
            )
            throughputs[mode] = throughput
            if mode == "with":
                record = mode_record
            elif mode_record is not None:
                floor_cpu[mode] = mode_record.cpu_seconds
            failures += mode_failures
        workload = case.workload + (f" {case.params}" if case.params else "")
        result = CaseResult(
            case.name,
            workload,
            threshold,
            throughputs["without"],
            throughputs["with"],
            record,
            floor=throughputs.get(FLOOR),
            go_floor=throughputs.get(GO_FLOOR),
            floor_cpu_seconds=floor_cpu,
        )
        result.failures = failures
        results.append(result)
        print(result.line(), flush=True)
    summary = {
        "date": stamp,
        "nproc": os.cpu_count(),
        "loadavg": os.getloadavg(),
        "command": " ".join([sys.executable, "-m", "bench.scheduler_perf_bench", *(argv or sys.argv[1:])]),
        "cases": [result.to_json() for result in results],
    }
    (run_dir / "results.json").write_text(json.dumps(summary, indent=2))
    print(f"scheduler-perf: results in {run_dir / 'results.json'}")
    print(summary_line(results))
    return 1 if any(result.failures for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
