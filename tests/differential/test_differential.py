"""Differential tests: our allocator against the upstream structured allocator (k8s.io/dynamic-resource-allocation
v0.37.2, Kubernetes 1.37.2) built by tests/oracle.

Every generated case is a small cluster (1-4 nodes, 0-10 devices per node) and one pod; per node, our verdict
(feasible with these devices / infeasible / error) must equal upstream's, and every allocation we make must be
valid on its own (`harness.validate_allocation`: selectable, free, reachable, tolerated, constraints and
shared counters respected, no device twice, counts and `All` complete, at most 32 devices per claim).

Features covered (`strategies.FEATURES`; `test_generator_covers_every_feature` checks the generator reaches each):
- requests: ExactCount (count 1-4), All, firstAvailable (2-3 subrequests, ExactCount or All), adminAccess;
- selectors: DeviceClass selectors and request selectors: attribute equality, capacity quantity compareTo and
  isGreaterThan, semver isGreaterThan/compareTo, startsWith/lowerAscii/matches, optional access (`.?x.orValue`),
  `in`, and expressions that raise `no such key` on some devices (error verdicts), a missing DeviceClass;
- constraints: matchAttribute and distinctAttribute over all or some requests (also `request/subrequest`),
  attributes missing on some devices or published with different types;
- device taints NoSchedule / NoExecute / None and request tolerations (Exists, Equal, key-less, effect-less);
- partitionable devices: a counters slice (1-2 counter sets) and devices consuming from them;
- several claims per pod, claims from a ResourceClaimTemplate (ours) / the generated claim (upstream), an
  already allocated claim of the pod (allocation.nodeSelector by node name, by label, or none), shared with
  another pod; other pods' allocations (some with adminAccess);
- slices by nodeName, nodeSelector and allNodes; pool generations (a stale older slice, sometimes on another
  node); incomplete pools (resourceSliceCount above the slices present); invalid pools (duplicate names);
- consumable capacity (a third of the cases): GPUs with allowMultipleAllocations, requestPolicy default /
  validValues / validRange with step (one fractional, milli-unit arithmetic), requests with capacity.requests,
  other claims' shares (shareID, consumedCapacity) and whole-device holds of shareable devices, counters of a
  shared partitionable device; binding conditions (a sixth): bindingConditions, bindingFailureConditions,
  bindsToNode (pools with them come last).

The generator is balanced so that over a third of node verdicts are feasible (device choices can only differ
where there is an allocation); the summary line gives the split per profile.

Feature profiles (`strategies.PROFILES`), each case runs under both unless it uses distinctAttribute, and our
allocator runs with the same gates as upstream's under each (`harness.our_features`):
- "incubating": Kubernetes 1.37 defaults (consumableCapacity, deviceBindingAndStatus and
  fractionalCapacityRange on). Upstream sorts pools and slices by name and searches combinations, our order:
  verdicts and the devices chosen (with the capacity each share consumes) must be equal.
- "stable": consumableCapacity, deviceBindingAndStatus, fractionalCapacityRange off. Upstream visits a
  node's pools in Go map order, so on nodes with devices from several pools the stable allocator may meet a
  failing selector (error) or a violated All-mode constraint before or after a solution: there ours must be
  one of the kinds upstream gives over 40-200 reruns. distinctAttribute does not exist under this profile (the
  API server drops the field), so such cases only run under "incubating". Where ours equals the incubating
  allocator's verdict on the case as the stable one reads it (`strategies.stable_reference`: no capacity
  requests, shares or devices with bindingConditions) but stable differs (its allocator adds every pool's
  sharedCounters slices to every node), the difference is reported as "upstream-differs", not as ours.

Running (the oracle needs Go; these tests skip without it, except with CI=true, where they fail):
    .venv/bin/pytest -m oracle tests/differential                        # 2000 seeded cases + Hypothesis
    DIFF_SCENARIOS=20000 .venv/bin/pytest -m oracle tests/differential   # the long run
    DIFF_SEED=7 ...; DIFF_HYPOTHESIS_EXAMPLES=1000 ...                   # another seed / more Hypothesis cases
A summary line (cases, verdicts, time) is printed either way.

A disagreement is shrunk (the bulk run: greedily, one node/slice/device/claim/request/selector fewer at a time;
Hypothesis: by its own shrinker) and saved as tests/differential/fixtures/<profile>-<digest>.json with
upstream's verdicts; `test_fixtures_regress` replays every fixture without Go.
"""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis.control import current_build_context

from testkit.builds.oracle import OracleBuildError, OracleUnavailableError, ensure_oracle_binary
from tests.differential import harness as h
from tests.differential.strategies import (
    FEATURES,
    coverage,
    diff_cases,
    profiles_for,
    random_cases,
    stable_reference,
)
from tests.oracle.oracle import run_scenarios

# Differential against the upstream allocator; also the replay of its stored verdicts and the generator checks.
pytestmark = pytest.mark.oracle

SCENARIOS = int(os.environ.get("DIFF_SCENARIOS", "2000"))
SEED = int(os.environ.get("DIFF_SEED", "1"))
HYPOTHESIS_EXAMPLES = int(os.environ.get("DIFF_HYPOTHESIS_EXAMPLES", "150"))
# Distinct problems (finding signatures) shrunk and saved per bulk run; more of the same add nothing.
MAX_SHRUNK = int(os.environ.get("DIFF_MAX_SHRUNK", "12"))


@pytest.fixture(scope="module")
def oracle_binary() -> Path:
    try:
        return ensure_oracle_binary()
    except OracleUnavailableError as exc:
        if h.in_ci():
            pytest.fail(f"CI=true and the oracle cannot be built: {exc}")
        pytest.skip(f"upstream-allocator oracle unavailable: {exc}")
    except OracleBuildError as exc:
        pytest.fail(f"building the upstream-allocator oracle failed: {exc}")


@pytest.fixture(scope="module")
def oracle_stream(oracle_binary: Path) -> Any:
    with h.OracleStream() as stream:
        yield stream


def _batch_rerun(scenario: dict[str, Any], times: int) -> list[dict[str, Any]]:
    return run_scenarios([scenario] * times)


def _stream_rerun(stream: h.OracleStream) -> h.Rerun:
    return lambda scenario, times: [stream.run(scenario) for _ in range(times)]


def _stream_findings(stream: h.OracleStream, case: dict[str, Any], profiles: list[str]) -> list[h.Finding]:
    runs = h.run_profiles(case, profiles)
    upstream = {profile: h.upstream_verdicts(stream.run(h.scenario_for(case, profile))) for profile in profiles}
    run = next(iter(runs.values()))

    def reference() -> dict[str, h.Verdict]:
        return h.upstream_verdicts(stream.run(h.scenario_for(stable_reference(case), "incubating")))

    return h.compare_case(case, runs, upstream, lambda: h.stable_kinds(case, run, _stream_rerun(stream)), reference)


def _save(stream: h.OracleStream, case: dict[str, Any], finding: h.Finding) -> Path:
    """Store the case with upstream's verdicts under every profile it runs in (see harness.save_fixture)."""
    case = h.prune_unused_classes(case)
    profiles = profiles_for(case)
    expected = {profile: h.upstream_verdicts(stream.run(h.scenario_for(case, profile))) for profile in profiles}
    kinds = h.stable_kinds(case, h.run_ours(case), _stream_rerun(stream)) if "stable" in profiles else {}
    # Describe what the (shrunk) case itself shows, not the larger case it came from.
    same = [f for f in _stream_findings(stream, case, profiles) if f.signature == finding.signature]
    return h.save_fixture(case, expected, kinds, same[0] if same else finding)


# --- the bulk run ------------------------------------------------------------------------------------------------


@pytest.mark.oracle
def test_bulk_random_scenarios(oracle_binary: Path, oracle_stream: h.OracleStream, capsys: Any) -> None:
    started = time.monotonic()
    cases = random_cases(SEED, SCENARIOS)
    jobs = [(index, profile) for index, case in enumerate(cases) for profile in profiles_for(case)]
    results = h.run_batches([h.scenario_for(cases[index], profile) for index, profile in jobs])
    oracle_seconds = time.monotonic() - started
    upstream: list[dict[str, dict[str, h.Verdict]]] = [{} for _ in cases]
    for (index, profile), result in zip(jobs, results, strict=True):
        upstream[index][profile] = h.upstream_verdicts(result)

    verdicts: collections.Counter[str] = collections.Counter()
    per_profile: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    problems: list[tuple[dict[str, Any], h.Finding]] = []
    upstream_differs: list[tuple[str, h.Finding]] = []
    ours_started = time.monotonic()
    for index, case in enumerate(cases):
        runs = h.run_profiles(case, upstream[index])
        for profile, run in runs.items():
            for outcome in run.outcomes.values():
                kind = h.our_verdict(outcome)["kind"]
                verdicts[kind] += 1
                per_profile[profile][kind] += 1
        first = next(iter(runs.values()))
        kinds = lambda case=case, run=first: h.stable_kinds(case, run, _batch_rerun)  # noqa: E731
        reference = lambda case=case: h.upstream_verdicts(  # noqa: E731
            run_scenarios([h.scenario_for(stable_reference(case), "incubating")])[0]
        )
        for finding in h.compare_case(case, runs, upstream[index], kinds, reference):
            if finding.kind == "upstream-differs":
                upstream_differs.append((case["name"], finding))
            else:
                problems.append((case, finding))
    ours_seconds = time.monotonic() - ours_started

    saved: list[str] = []
    seen: set[tuple[str, str, str, str]] = set()
    for case, finding in problems:
        if finding.signature in seen or len(seen) >= MAX_SHRUNK:
            continue
        seen.add(finding.signature)

        def still_fails(candidate: dict[str, Any], signature: Any = finding.signature) -> bool:
            found = _stream_findings(oracle_stream, candidate, profiles_for(candidate))
            return any(f.signature == signature for f in found)

        small = h.shrink(case, still_fails)
        path = _save(oracle_stream, small, finding)
        saved.append(f"{path.name} (from {case['name']}): {finding.kind} {finding.profile} {finding.message[:300]}")

    elapsed = time.monotonic() - started
    total = sum(verdicts.values())
    summary = (
        f"differential: {len(cases)} cases (seed {SEED}), {len(jobs)} upstream evaluations, "
        f"{total} node verdicts of ours {dict(verdicts)} ({verdicts['feasible'] / max(total, 1):.1%} feasible; "
        f"per profile { ({p: dict(c) for p, c in sorted(per_profile.items())}) }); oracle {oracle_seconds:.1f}s, "
        f"ours {ours_seconds:.1f}s, total {elapsed:.1f}s; {len(problems)} problems, "
        f"{len(upstream_differs)} stable-vs-incubating differences"
    )
    with capsys.disabled():
        print("\n" + summary)
        for name, finding in upstream_differs[:5]:
            print(f"  upstream-differs {name} {finding.node}: {finding.message[:200]}")
    assert not problems, summary + "\nsaved fixtures:\n" + "\n".join(saved)


# --- Hypothesis ---------------------------------------------------------------------------------------------------


@pytest.mark.oracle
@settings(
    max_examples=HYPOTHESIS_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(case=diff_cases())
def test_hypothesis_scenarios(oracle_stream: h.OracleStream, case: dict[str, Any]) -> None:
    findings = [f for f in _stream_findings(oracle_stream, case, profiles_for(case)) if f.kind != "upstream-differs"]
    if findings and current_build_context().is_final:
        # Hypothesis replays the shrunk example last: that one becomes the fixture.
        note(f"saved as {_save(oracle_stream, case, findings[0])}: {json.dumps(case)}")
    assert not findings, "\n".join(f"{f.kind} {f.profile} {f.node}: {f.message}" for f in findings)


# --- generator coverage -------------------------------------------------------------------------------------------


def test_generator_covers_every_feature() -> None:
    counts: collections.Counter[str] = collections.Counter()
    for case in random_cases(SEED, 1000):
        counts.update(coverage(case))
        json.dumps(case)  # fixtures must be plain JSON
    missing = [feature for feature in FEATURES if counts[feature] == 0]
    assert not missing, f"the generator no longer produces: {missing}"


# --- fixtures -----------------------------------------------------------------------------------------------------


def _fixture_ids() -> list[Path]:
    return [path for path, _ in h.load_fixtures()]


@pytest.mark.parametrize("path", _fixture_ids(), ids=lambda path: path.stem)
def test_fixtures_regress(path: Path) -> None:
    """Every saved problem case, replayed against the upstream verdicts stored with it (no Go needed)."""
    fixture = json.loads(path.read_text())
    findings = [f for f in h.fixture_findings(fixture) if f.kind != "upstream-differs"]
    assert not findings, "\n".join(f"{f.kind} {f.profile} {f.node}: {f.message}" for f in findings)


@pytest.mark.oracle
def test_fixtures_still_match_upstream(oracle_binary: Path) -> None:
    """The stored verdicts are still what the oracle says (a version bump of the oracle shows up here)."""
    fixtures = h.load_fixtures()
    if not fixtures:
        pytest.skip("no fixtures")
    jobs = [(path, fixture, profile) for path, fixture in fixtures for profile in fixture["expected"]]
    scenarios = [{**h.scenario_for(f["case"], profile), "features": f["features"][profile]} for _, f, profile in jobs]
    for (path, fixture, profile), scenario, result in zip(jobs, scenarios, run_scenarios(scenarios), strict=True):
        for node, verdict in h.upstream_verdicts(result).items():
            stored = fixture["expected"][profile][node]
            kinds = fixture["stableKinds"].get(node) if profile == "stable" else None
            if kinds:
                assert verdict["kind"] in kinds, f"{path.name} {profile} {node}: upstream now {verdict}"
            elif h.disagreement(verdict, stored, exact=profile == "incubating"):
                # The stable allocator visits pools in random order: a verdict recorded from one of its runs is
                # matched if any of a few reruns gives it.
                reruns = run_scenarios([scenario] * 40) if profile == "stable" else []
                assert any(
                    not h.disagreement(h.upstream_verdicts(again)[node], stored, exact=False) for again in reruns
                ), f"{path.name} {profile} {node}: upstream now {verdict}"
