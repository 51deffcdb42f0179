"""The tests mirror the package: tests/<path>/ holds the tests of extender/<path>.

A test module's home is the extender package whose names it uses most (each use of an imported name counts once;
a module directly under extender/, such as cli.py, counts as a package of its own name). Ties allow any of the
tied packages. Modules whose subject the count cannot see (no direct extender import, or a helper's names that
outnumber the subject's) are listed in ELSEWHERE with the reason; suites that are not about one package live in
the directories of SUITES. When this test fails it names the directory the module belongs in.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from tests.support.paths import ROOT

TESTS = ROOT / "tests"
PACKAGE = ROOT / "extender"

# Directories under tests/ that are not an extender package, and what they hold.
SUITES = {
    "browser": "the web view in headless Chromium",
    "deploy": "what ships beside the package: manifests, Helm chart, image, README, monitoring, release pins",
    "differential": "the allocator against the upstream Go allocator",
    "e2e": "scenarios against a real control plane",
    "image": "podman's configuration for the image tests",
    "monitoring": "the alert rules' promtool tests and their expression parser",
    "oracle": "the Go oracle of the differential tests",
    "support": "helpers shared by test modules (no tests)",
    "tooling": "the test kit, the benchmarks' models and tools/ (and this test)",
    "upstream_table": "the upstream scheduler's table-driven cases replayed",
}

# Test modules whose home is not the package whose names they use most, and why.
ELSEWHERE = {
    "decisions/gang/test_gang_claims.py": "drives the service through tests.support; no direct extender import",
    "decisions/quota/test_dra_charges_and_flavors.py": "Kueue's charging and flavor walk, through tests.support",
    "decisions/quota/test_quota_scheduling.py": "quota decisions read through transport.wire's result helpers",
    "kubectl_plugin/test_kubectl_plugin.py": "uses cli.main to write snapshots and its exit codes",
    "kubectl_plugin/test_kubectl_plugin_podgroup.py": "uses cli.main to write snapshots and its exit codes",
    "transport/test_hostile_clients.py": "drives a real `dra-extender serve` over sockets; no extender import",
    "transport/test_tls.py": "drives a real `dra-extender serve` over TLS; no extender import",
    "transport/test_security.py": "the HTTP surface's guards, set up through the service's config",
}


def extender_home(dotted: str) -> str | None:
    """The tests/ directory of an extender module or package (`extender.state.kueue.cohort` -> `state/kueue`)."""
    parts = dotted.split(".")
    path = ROOT.joinpath(*parts)
    if (path / "__init__.py").is_file():
        return "/".join(parts[1:]) or None
    if path.with_suffix(".py").is_file():
        return "/".join(parts[1:]) if len(parts) == 2 else "/".join(parts[1:-1])
    return None


def uses_by_home(source: str) -> Counter[str]:
    """How often the module uses names it imports from each extender package."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "extender":
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                home = extender_home(full) or extender_home(node.module)
                if home is not None:
                    bound[alias.asname or alias.name] = home
        elif isinstance(node, ast.Import):
            for alias in node.names:
                home = extender_home(alias.name)
                if home is not None and alias.asname:
                    bound[alias.asname] = home
    uses: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in bound:
            uses[bound[node.id]] += 1
    return uses


def package_test_modules() -> list[Path]:
    return sorted(
        path
        for path in TESTS.rglob("test_*.py")
        if path.relative_to(TESTS).parts[0] not in SUITES and ".build" not in path.parts
    )


def test_the_tests_root_holds_no_test_modules() -> None:
    assert sorted(path.name for path in TESTS.glob("test_*.py")) == []


def test_every_directory_names_an_extender_package_or_a_suite() -> None:
    strays = []
    for directory in sorted(TESTS.rglob("*")):
        relative = directory.relative_to(TESTS)
        if not directory.is_dir() or relative.parts[0] in SUITES or "__pycache__" in relative.parts:
            continue
        if extender_home("extender." + ".".join(relative.parts)) != relative.as_posix():
            strays.append(relative.as_posix())
    assert strays == [], f"directories under tests/ that name no extender package nor a suite: {strays}"


def test_every_package_directory_is_a_python_package() -> None:
    missing = [
        path.relative_to(TESTS).as_posix()
        for path in {module.parent for module in package_test_modules()}
        if not (path / "__init__.py").is_file()
    ]
    assert missing == [], f"add an empty __init__.py to: {missing}"


@pytest.mark.parametrize("module", package_test_modules(), ids=lambda path: path.relative_to(TESTS).as_posix())
def test_a_test_module_lives_with_the_package_it_uses_most(module: Path) -> None:
    relative = module.relative_to(TESTS).as_posix()
    home = module.parent.relative_to(TESTS).as_posix()
    uses = uses_by_home(module.read_text())
    if relative in ELSEWHERE:
        assert extender_home("extender." + home.replace("/", ".")) == home, f"{relative}: no package {home}"
        return
    assert uses, f"{relative} uses no extender name: move it to a suite directory or list it in ELSEWHERE"
    most = max(uses.values())
    best = sorted(package for package, count in uses.items() if count == most)
    assert home in best, f"{relative} uses {dict(uses.most_common())}: move it to tests/{best[0]}/"


def test_the_exceptions_name_existing_modules() -> None:
    assert [name for name in ELSEWHERE if not (TESTS / name).is_file()] == []
