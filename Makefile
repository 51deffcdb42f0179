# One entry point for people and CI. Every target creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install deps run test unit lint fmt bench bench-scale bench-e2e bench-placement bench-placement-real bench-trace bench-scheduler-perf differential clean image tools soak

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/dra-extender serve

# What the suite needs from the system (installed when missing) and the builds it runs against: tools/deps.sh.
deps:
	tools/deps.sh

# The whole suite. pytest's closing summary (-ra) lists every skip with its reason.
test: deps lint
	$(BIN)/pytest -q

# The fast loop, on two pytest-xdist workers: no stress, fuzz, long property runs, differential, e2e or browser.
# Markers in pyproject.toml; make test still runs all of them. Loading and compiling were a quarter of the loop:
# the schemathesis plugin is not loaded (only tests/service/test_fuzz_http.py uses it, all of it marked slow),
# and bytecode with pytest's rewritten asserts is cached between runs even where the environment sets
# PYTHONDONTWRITEBYTECODE (__pycache__ is gitignored).
unit: export PYTHONDONTWRITEBYTECODE =
unit: $(STAMP)
	$(BIN)/pytest -q -n 2 -p no:schemathesis --ignore=tests/service/test_fuzz_http.py -m "not slow and not e2e and not oracle and not browser and not image and not helm"

# Style, formatting, the type checker (mypy strict on the package, the test kit and the benchmarks) and the layer
# contract (import-linter).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Benchmarks print measured numbers; they are not part of make test.
bench: $(STAMP)
	$(BIN)/python -m bench.allocator_bench
	$(BIN)/python -m bench.loop_bench
	$(BIN)/python -m bench.loop_bench --nodes 1000 --clock cpu --cold
	$(BIN)/python -m bench.scaling_bench
	$(BIN)/python -m bench.preemption_bench
	$(BIN)/python -m bench.http_bench
	$(BIN)/python -m bench.sync_bench
	$(BIN)/python -m bench.compare_upstream
	$(BIN)/python -m bench.web_bench
	$(BIN)/python -m bench.gang_bench

# The largest clusters: time to ready, memory, one event's and one verb's cost at 5k / 15k / 65k nodes (one
# process per size; 65k needs about 3 GB). A subset: make bench-scale SCALE_ARGS="--sizes 5000:20000 15000:150000"
bench-scale: $(STAMP)
	$(BIN)/python -m bench.scale_bench $(SCALE_ARGS)

# The end-to-end throughput benchmark (real control plane; builds tests/e2e/.build when missing).
bench-e2e: $(STAMP)
	$(BIN)/python -m testkit.builds.kubernetes
	$(BIN)/python -m bench.e2e_bench --floor

# kube-scheduler's own scale benchmark (k8s.io/kubernetes test/integration/scheduler_perf) without and with the
# extender, the cases of bench/scheduler_perf/config.yaml (docs/benchmarks.md). Builds the benchmark binary into
# bench/.build and the e2e etcd when missing; JSON under bench/results/. A subset or other sizes:
# make bench-scheduler-perf BENCH_ARGS="--cases gang-1000x3 --param gang-1000x3.initNodes=1000"
bench-scheduler-perf: $(STAMP)
	$(BIN)/python -m bench.scheduler_perf_bench $(BENCH_ARGS)

# Placement quality (docs/placement.md): seeded streams placed three ways against the exact packing bound.
# The production GPU trace (../shared/traces/openb-gpu-2023): the paper's policies, kube-scheduler, the extender.
# A subset: make bench-trace TRACE_ARGS="--workloads default --seeds 101 102 --policies FGD extender";
# another pod list of the trace's format: make bench-trace TRACE_PODS=path/to/openb_pod_list_x.csv
bench-trace: $(STAMP)
	TRACE_PODS=$(TRACE_PODS) $(BIN)/python -m bench.trace_bench $(TRACE_ARGS)

# A subset: make bench-placement PLACEMENT_ARGS="--seeds 1 2 --shapes partitioned --pods 200"
bench-placement: $(STAMP)
	$(BIN)/python -m bench.placement_bench $(PLACEMENT_ARGS)

# The same streams placed by the real kube-scheduler (test kit control plane), without and with our extender:
# partitioned shape, seeds 1 2, 120 pods, drop mode unless PLACEMENT_ARGS says otherwise (builds tests/e2e/.build
# when missing).
bench-placement-real: $(STAMP)
	$(BIN)/python -m testkit.builds.kubernetes
	$(BIN)/python -m bench.placement_bench --control-plane $(PLACEMENT_ARGS)

# The long differential run against the upstream allocator (CI runs 2000 scenarios inside make test).
# Repetition (not in `make test`): the over-commit stress test, the restart-window and chaos e2e N times each
# with distinct seeds (tools/soak.py); failures' full output under SOAK_RESULTS, `runs / failures` per test, and
# the reliability table of tests/e2e/README.md rewritten. Hours on a quiet machine with the defaults.
SOAK_STRESS ?= 300
SOAK_RESTART_WINDOW ?= 20
SOAK_CHAOS_SEEDS ?= 1,2,3,4
SOAK_CHAOS_LARGE_SEEDS ?= 5
SOAK_RESULTS ?= soak-results
soak: $(STAMP)
	$(BIN)/python -m testkit.builds.kubernetes
	nice -n 10 $(BIN)/python -m tools.soak --stress $(SOAK_STRESS) --restart-window $(SOAK_RESTART_WINDOW) \
		--chaos-seeds "$(SOAK_CHAOS_SEEDS)" --chaos-large-seeds "$(SOAK_CHAOS_LARGE_SEEDS)" \
		--results $(SOAK_RESULTS) --table

differential: $(STAMP)
	DIFF_SCENARIOS=20000 $(BIN)/pytest -q -m oracle tests/differential

# Shipping: the container image and the Go-built helm/kustomize; both print their build times.
# make image [IMAGE=name:tag] [BASE=image] [LOCAL_BASE=1]   (image/build.sh documents every knob)
image:
	image/build.sh

# helm, kustomize and promtool from Go modules (tools/go.mod, tools/promtool/go.mod) into tools/.build/ (gitignored).
tools: $(STAMP)
	$(BIN)/python -m testkit.builds.tools

clean:
	rm -rf $(VENV) build *.egg-info
