"""The README is an entry page whose commands work as written.

Its demo recipe (the curl commands) and its explain examples are run by bash against a demo server started as
`make run` starts it, from the repository root, with a `python3` on PATH that has no PyYAML (the recipe must not
need it in the system Python); the explain table it shows is the one the embedded demo prints. The README stays
short (depth lives in docs/), every link resolves, and docs/development.md's `make unit` line is the Makefile's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.demo_server import demo_server
from tests.support.paths import ROOT

README = ROOT / "README.md"
MAX_WORDS = 1500
DEMO_ADDRESS = "127.0.0.1:8888"


def readme() -> str:
    return README.read_text(encoding="utf-8")


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced blocks opened with ```language (an empty language: fences without one)."""
    blocks: list[str] = []
    current: list[str] | None = None
    opened_with = ""
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            if current is None:
                current, opened_with = [], line[3:].strip()
            else:
                if opened_with == language:
                    blocks.append("".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def block_with(text: str, needle: str, language: str = "sh") -> str:
    found = [block for block in code_blocks(text, language) if needle in block]
    assert len(found) == 1, f"expected one ```{language} block with {needle!r}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with demo_server(tmp_path_factory.mktemp("readme") / "serve.log") as url:
        yield url


@pytest.fixture(scope="module")
def path_without_pyyaml(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH whose python3 has no site-packages (so no PyYAML), and nothing of .venv/bin."""
    bin_dir = tmp_path_factory.mktemp("bin")
    wrapper = bin_dir / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    probe = subprocess.run([str(wrapper), "-c", "import yaml"], capture_output=True, check=False)
    assert probe.returncode != 0, "the stand-in system python3 must not have PyYAML"
    return f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"


def run_script(lines: list[str], server: str, path: str) -> list[str]:
    """Run the commands in one bash (variables carry over), each output separated; return the outputs."""
    marker = "@@@README-COMMAND@@@"
    script = "set -euo pipefail\n" + "".join(
        f"{line.replace(DEMO_ADDRESS, server.removeprefix('http://'))}\necho; echo {marker}\n" for line in lines
    )
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": path, "HOME": str(ROOT), "LANG": "C.UTF-8"},
        check=False,
    )
    assert result.returncode == 0, f"{script}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return [part.strip() for part in result.stdout.split(marker)[:-1]]


def test_the_demo_curl_recipe_runs_as_written(server: str, path_without_pyyaml: str) -> None:
    lines = commands(block_with(readme(), "curl -s 127.0.0.1:8888/filter"))
    assert lines[0].startswith("POD=$(") and sum(line.startswith("curl") for line in lines) == 5
    pod, filtered, prioritized, pod_diagnostics, queues, node = run_script(lines, server, path_without_pyyaml)
    assert pod == ""
    answer = json.loads(filtered)
    assert answer["NodeNames"] == ["gpu-od-1", "gpu-od-2"]
    assert set(answer["FailedNodes"]) | set(answer["FailedAndUnresolvableNodes"]) == {"gpu-spot-1", "gpu-spot-2"}
    shown = re.search(r"`(\[\{\"Host\".*?\}\])`", readme())
    assert shown and json.loads(prioritized) == json.loads(shown.group(1))  # the answer the README quotes
    assert json.loads(pod_diagnostics)["pod"] == "team-a/train-1"
    assert "team-a" in json.dumps(json.loads(queues))
    assert json.loads(node)["node"] == "gpu-od-1"


@pytest.mark.slow
def test_the_explain_examples_run_and_print_the_table_shown(server: str, path_without_pyyaml: str) -> None:
    text = readme()
    shown = block_with(text, "RANK  NODE", language="").strip()
    examples = commands(block_with(text, "dra-extender explain"))
    runnable = [line for line in examples if all((ROOT / arg).exists() for arg in re.findall(r"\S+\.yaml", line))]
    assert any("--server" in line for line in runnable) and any(line.endswith(".yaml") for line in runnable)
    outputs = run_script(
        [line.replace(".venv/bin/", f"{ROOT}/.venv/bin/") for line in runnable], server, path_without_pyyaml
    )
    for line, output in zip(runnable, outputs, strict=True):
        assert output == shown, f"{line} printed:\n{output}"


def test_readme_is_an_entry_page() -> None:
    prose = re.sub(r"^```.*?^```$", "", readme(), flags=re.S | re.M)
    assert len(prose.split()) <= MAX_WORDS
    headings = re.findall(r"^## (.+)$", readme(), flags=re.M)
    assert headings[:3] == ["What it is for", "Try it against the demo", "Deploying"] and "More" in headings
    # Deploying shows the exact commands, and the kustomize image is set before applying.
    deploying = readme().split("## Deploying", 1)[1]
    for command in ("make image", "podman run", "make tools", "helm lint", "template", "install", "kubectl apply -k"):
        assert command.replace("helm ", "$HELM ") in deploying or command in deploying, command
    assert deploying.index("edit set image") < deploying.index("kubectl apply -k")


def test_every_local_link_resolves() -> None:
    for document in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", document.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (document.parent / target).exists(), f"{document.relative_to(ROOT)} links to {target}"


def test_documented_make_unit_is_the_makefiles() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^unit:.*\n\t\$\(BIN\)/(pytest .*)$", makefile, flags=re.M)
    assert recipe
    development = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    assert f".venv/bin/{recipe.group(1)}" in development
    markers = re.findall(r"not (\w+)", recipe.group(1))
    listed = re.findall(r"^- `(\w+)`:", development.split("## `make unit`", 1)[1].split("\n## ", 1)[0], flags=re.M)
    assert listed == markers


def test_monitoring_says_where_make_run_serves_metrics_and_what_stays_empty(server: str) -> None:
    """docs/monitoring.md: `make run` serves /metrics on its one listener (8888), and the demo, a file rather
    than a watch, exports no watch series, so the dashboard panels it names stay empty against it."""
    import urllib.request

    text = (ROOT / "docs" / "monitoring.md").read_text(encoding="utf-8")
    assert f"<http://{DEMO_ADDRESS}/metrics>" in text
    with urllib.request.urlopen(f"{server}/metrics", timeout=10) as response:
        scraped = response.read().decode()
    samples = [line for line in scraped.splitlines() if line and not line.startswith("#")]
    assert any(line.startswith("dra_extender_") for line in samples)
    watch_series = ("dra_extender_watch_", "dra_extender_state_age_seconds")
    assert not [line for line in samples if line.startswith(watch_series)]
    dashboard = json.loads((ROOT / "docs" / "dashboards" / "dra-quota-extender.json").read_text(encoding="utf-8"))
    panels = {panel["title"]: panel for panel in dashboard["panels"]}
    for row in dashboard["panels"]:
        panels |= {panel["title"]: panel for panel in row.get("panels", [])}
    for title in ("Watch health", "Oldest watched resource"):
        assert f"**{title}**" in text or f'"{title}"' in text, title
        assert title in panels, title
    assert all(
        target["expr"].split("(")[-1].split("[")[0].split(")")[0].startswith(watch_series)
        for title in ("Relists and reconnects", "Age of the view per resource", "Watch events applied")
        for target in panels[title]["targets"]
    )


def shown_runs(section: str) -> list[tuple[str, list[str]]]:
    """The `$ command` lines of a section's ```sh blocks, each with the output lines shown under it."""
    runs: list[tuple[str, list[str]]] = []
    for block in code_blocks(section, "sh"):
        for line in block.splitlines():
            if line.startswith("$ "):
                runs.append((line[2:], []))
            elif runs:
                runs[-1][1].append(line)
    return runs


def matches_shown(shown: list[str], printed: list[str]) -> bool:
    """Line for line: equal, or, for a shown line cut with `...`, printed starting with what is shown."""
    if len(shown) != len(printed):
        return False
    return all(p == s or (s.endswith("...") and p.startswith(s[:-3])) for s, p in zip(shown, printed, strict=True))


@pytest.mark.slow
def test_the_offline_gang_walk_through_prints_what_it_shows() -> None:
    """docs/gangs.md "Gangs offline": every command runs as written against extender/demo/gang.yaml and prints
    the lines shown (stderr's notes included); the group's refusal is cut in the page, so its wording may
    change, while the structure is checked: the group verdict, the members against minCount, one row each."""
    gangs = (ROOT / "docs" / "gangs.md").read_text(encoding="utf-8")
    section = gangs.split("## Gangs offline: a walk-through", 1)[1].split("\n## ", 1)[0]
    runs = shown_runs(section)
    assert len(runs) == 5
    for command, shown in runs:
        assert (ROOT / "extender" / "demo" / "gang.yaml").name in command
        result = subprocess.run(
            ["bash", "-c", command.replace(".venv/bin/", f"{ROOT}/.venv/bin/") + " 2>&1"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT), "LANG": "C.UTF-8"},
            check=False,
        )
        printed = result.stdout.rstrip("\n").splitlines()
        assert result.returncode == 0 and matches_shown(shown, printed), f"{command} printed:\n{result.stdout}"
    by_group = {command.rsplit(" ", 1)[1]: shown for command, shown in runs if " podgroup " in command}
    for group, (min_count, members) in {"train": (4, 4), "wide": (6, 6), "partial": (6, 4)}.items():
        table = by_group[group]
        assert f"Policy           gang, minCount {min_count}" in table
        assert sum(line.startswith(f"team-a/{group}-") for line in table) == members
        assert any(line.startswith("Group verdict    ") for line in table)
        missing = [line for line in table if line.startswith("Members ")]
        assert missing == (
            [f"Members          {members} exist, minCount {min_count}: the group waits for 2 more to be created"]
            if members < min_count
            else []
        )
    assert "Group verdict    does not fit" in "\n".join(by_group["wide"])
    assert "Group verdict    fits" in "\n".join(by_group["train"])
