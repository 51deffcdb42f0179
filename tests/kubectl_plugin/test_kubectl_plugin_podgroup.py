"""`kubectl dra-quota podgroup`: a PodGroup's group verdict and its members, from every source of an answer.

Offline (``--snapshot``, computed in-process) against a snapshot holding a gang of three (one member bound, one
nominated, one pending); the table of a gang refused as a whole and of one in progress (rendered from the
extender's own report); and a running extender on that snapshot, asked directly (``--server``) and through the
API server's service proxy (the scripted API server of tests/kubectl_plugin/test_kubectl_plugin.py).
"""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender import cli, kubectl_plugin
from extender.commands.outcomes import EXIT_REFUSED, EXIT_USAGE
from extender.kubectl_plugin.podgroup_rendering import render_podgroup
from testkit import builders as b
from testkit.scenarios import gpu_pod
from tests.kubectl_plugin.test_kubectl_plugin import ScriptedApiServer, kubeconfig
from tests.support.demo_server import demo_listeners
from tests.support.paths import ROOT
from tests.support.quota import base_objects
from tests.transport.test_gang_diagnostics import filter_member, gang_client

UNKNOWN = 'error: podgroup "nope" is not known in namespace "team-a": no PodGroup object and no pod naming it\n'


@pytest.fixture(scope="module")
def gang_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(snapshot, config): ClusterQueue team-a with 8 GPUs on demand, PodGroup team-a/train (gang, minCount 3)
    with w0 bound, w1 nominated and w2 pending; GenericWorkload on, so the extender decides for the group."""
    folder = tmp_path_factory.mktemp("gang")
    objects = [*base_objects({"on-demand": {"nominal": 8}}, od_nodes=4, spot_nodes=0)]
    objects.append(b.pod_group("train", "team-a", min_count=3))
    objects.append(gpu_pod("w0", pod_group="train", node_name="on-demand-0"))
    objects.append(gpu_pod("w1", pod_group="train", nominated_node="on-demand-1"))
    objects.append(gpu_pod("w2", pod_group="train"))
    snapshot = folder / "snapshot.yaml"
    snapshot.write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    config = folder / "extender.yaml"
    config.write_text("features:\n  GenericWorkload: true\n", encoding="utf-8")
    return snapshot, config


def plugin(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = kubectl_plugin.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def offline(capsys: pytest.CaptureFixture[str], files: tuple[Path, Path], *argv: str) -> tuple[int, str, str]:
    snapshot, config = files
    return plugin(capsys, "--snapshot", str(snapshot), "--config", str(config), *argv)


# --- offline, computed in-process ------------------------------------------------------------------------------


def test_offline_table_shows_the_group_and_its_members(
    capsys: pytest.CaptureFixture[str], gang_files: tuple[Path, Path]
) -> None:
    code, table, err = offline(capsys, gang_files, "podgroup", "-n", "team-a", "train")
    assert (code, err) == (0, "")
    assert table.splitlines() == [
        "PodGroup team-a/train",
        "Policy           gang, minCount 3",
        "ClusterQueue     team-a",
        "Placed           2 of 3 member(s) bound or nominated: needs 1 more",
        "Held for group   nothing",
        "Group verdict    fits (computed now for team-a/w2, nothing reserved)",
        "Condition        none yet",
        "Last attempt     none seen since the extender started",
        "",
        "POD         NODE                      RESERVED   VERDICT",
        "team-a/w0   on-demand-0 (bound)       -          no decision remembered",
        "team-a/w1   on-demand-1 (nominated)   -          no decision remembered",
        "team-a/w2   -                         -          what-if: 4 node(s) pass, first on-demand-0",
    ]


def test_offline_json_and_yaml_are_the_extenders_report(
    capsys: pytest.CaptureFixture[str], gang_files: tuple[Path, Path]
) -> None:
    code, out, err = offline(capsys, gang_files, "podgroup", "train", "-n", "team-a", "-o", "json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert (report["podGroup"], report["known"], report["policy"], report["minCount"]) == (
        "team-a/train",
        True,
        "gang",
        3,
    )
    assert report["clusterQueues"] == ["team-a"] and report["placed"] == 2 and report["hold"] == []
    assert [(m["pod"], m["state"], m["node"]) for m in report["members"]] == [
        ("team-a/w0", "bound", "on-demand-0"),
        ("team-a/w1", "nominated", "on-demand-1"),
        ("team-a/w2", "pending", ""),
    ]
    code, out, _ = offline(capsys, gang_files, "-n", "team-a", "-o", "yaml", "podgroup", "train")
    assert code == 0 and yaml.safe_load(out) == report


def test_an_unknown_podgroup_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], gang_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert offline(capsys, gang_files, "podgroup", "-n", "team-a", "nope") == (EXIT_REFUSED, "", UNKNOWN)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no kubeconfig: the namespace is "default", as kubectl's
    code, out, err = offline(capsys, gang_files, "podgroup", "train")
    assert (code, out) == (EXIT_REFUSED, "") and 'not known in namespace "default"' in err
    with pytest.raises(SystemExit) as usage:
        offline(capsys, gang_files, "podgroup")
    assert usage.value.code == EXIT_USAGE
    assert capsys.readouterr().err.startswith("error: the following arguments are required: NAME")


# --- offline, a newcomer's PodGroups: gates off, fewer members than minCount, a group that never fits ---------

GATES_OFF_NOTE = (
    "note: PodGroup team-a/{} is not decided as a group: GenericWorkload is off in the extender's features "
    "(the default); when kube-scheduler runs with the gate, pass --config FILE with "
    "`features: {{GenericWorkload: true}}` (extender/demo/gang-features.yaml is one)\n"
)
GANG_DEMO = ROOT / "extender" / "demo" / "gang.yaml"
GANG_FEATURES = GANG_DEMO.with_name("gang-features.yaml")


@pytest.mark.slow
def test_without_the_gate_a_note_says_the_group_is_not_decided(
    capsys: pytest.CaptureFixture[str], gang_files: tuple[Path, Path]
) -> None:
    snapshot, _ = gang_files
    code, out, err = plugin(capsys, "--snapshot", str(snapshot), "explain", "-n", "team-a", "w2")
    assert (code, err) == (0, GATES_OFF_NOTE.format("train")) and "PodGroup" not in out
    code, out, err = plugin(capsys, "--snapshot", str(snapshot), "podgroup", "-n", "team-a", "train", "-o", "json")
    assert (code, err) == (0, GATES_OFF_NOTE.format("train"))
    assert json.loads(out)["verdictNow"] is None  # no group decision to show
    assert offline(capsys, gang_files, "explain", "-n", "team-a", "w2")[2] == ""  # gate on: no note
    member = snapshot.with_name("w2.yaml")
    member.write_text(yaml.safe_dump(gpu_pod("w2", pod_group="train")), encoding="utf-8")
    assert cli.main(["explain", str(member), "--snapshot", str(snapshot)]) == 0  # dra-extender explain: the same
    assert capsys.readouterr().err == GATES_OFF_NOTE.format("train")


def test_fewer_members_than_min_count_are_said(capsys: pytest.CaptureFixture[str]) -> None:
    code, table, err = plugin(
        capsys, "--snapshot", str(GANG_DEMO), "--config", str(GANG_FEATURES), "podgroup", "-n", "team-a", "partial"
    )
    assert (code, err) == (0, "")
    lines = table.splitlines()
    assert lines[1:3] == [
        "Policy           gang, minCount 6",
        "Members          4 exist, minCount 6: the group waits for 2 more to be created",
    ]
    assert sum(line.startswith("team-a/partial-") for line in lines) == 4
    _, full, _ = plugin(
        capsys, "--snapshot", str(GANG_DEMO), "--config", str(GANG_FEATURES), "podgroup", "-n", "team-a", "train"
    )
    assert not [line for line in full.splitlines() if line.startswith("Members")]  # 4 of minCount 4: no line


def test_a_group_that_never_fits_is_refused_once_with_its_queue_named(capsys: pytest.CaptureFixture[str]) -> None:
    """The group verdict computed offline, each member's row pointing at it; `explain` of a member names the
    ClusterQueue in its header (the group's refusal names none of its own) and the group's reason per node."""
    args = ("--snapshot", str(GANG_DEMO), "--config", str(GANG_FEATURES))
    code, out, err = plugin(capsys, *args, "podgroup", "-n", "team-a", "wide", "-o", "json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    verdict = report["verdictNow"]
    assert (verdict["pod"], verdict["fits"]) == ("team-a/wide-0", False)
    assert verdict["refusal"].startswith("PodGroup team-a/wide (gang, minCount 6)")
    assert {(m["lastVerb"], m["passedNodes"], m["refusal"]) for m in report["members"]} == {
        ("what-if", 0, verdict["refusal"])
    }
    code, table, _ = plugin(capsys, *args, "podgroup", "-n", "team-a", "wide")
    assert (
        f"Group verdict    does not fit (computed now for team-a/wide-0, nothing reserved): {verdict['refusal']}"
        in (table)
    )
    assert table.count("what-if: refused as a group (Group verdict above)") == 6
    code, explained, _ = plugin(capsys, *args, "explain", "-n", "team-a", "wide-0")
    lines = explained.splitlines()
    assert lines[1] == "ClusterQueue team-a  flavor (none: the group does not fit)"
    assert lines[3] == f"Refused as a group: {verdict['refusal']}"
    assert lines[4] == "0 node(s) pass, 3 fail"
    assert all(verdict["refusal"] in line for line in lines[7:10])
    _, as_json, _ = plugin(capsys, *args, "explain", "-n", "team-a", "wide-0", "-o", "json")
    assert json.loads(as_json)["quota"]["clusterQueue"] == "team-a"


# --- the group verdict as the extender reports it after its decisions ------------------------------------------


def test_a_gang_refused_as_a_whole_shows_the_refusal() -> None:
    client = gang_client(6)  # 4 members of 2 GPUs, 6 GPUs of quota: never fits
    filter_member(client, "w0")
    table = render_podgroup(client.get("/diagnostics/podgroups/team-a/train").get_json())
    lines = table.splitlines()
    assert lines[3] == "Placed           0 of 4 member(s) bound or nominated: needs 4 more"
    assert lines[4] == "Held for group   nothing"
    assert lines[6].startswith("Last attempt     lost: refused for the group's quota")
    refusal = "PodGroup team-a/train (gang, minCount 4) does not fit its queue as a whole"
    assert lines[7].startswith(f"Refused          {refusal}")
    assert lines[10].startswith("team-a/w0   -      -          refused: " + refusal)


def test_a_gang_in_progress_shows_what_it_holds() -> None:
    client = gang_client(8)
    filter_member(client, "w0")
    table = render_podgroup(client.get("/diagnostics/podgroups/team-a/train").get_json())
    assert "Held for group   8 example.com/gpu in team-a/on-demand" in table  # the whole group, w0 too
    assert "Last attempt     in progress (started 0s ago; reserved in it: team-a/w0)" in table  # a frozen clock
    assert "team-a/w0   -      2 example.com/gpu (on-demand)   filter: 2 node(s) pass, first on-demand-0" in table


# --- a running extender: --server, and through the service proxy ----------------------------------------------


@pytest.fixture(scope="module")
def gang_extender(tmp_path_factory: pytest.TempPathFactory, gang_files: tuple[Path, Path]) -> Iterator[str]:
    """`dra-extender serve` on the gang snapshot, diagnostics on their own listener, after kube-scheduler asked
    it about the pending member w2; yields the diagnostics URL."""
    snapshot, config = gang_files
    log_path = tmp_path_factory.mktemp("gang-serve") / "serve.log"
    args = ("--snapshot", str(snapshot), "--config", str(config))
    with demo_listeners(log_path, *args, separate_diagnostics=True) as server:
        body: dict[str, Any] = {"Pod": gpu_pod("w2", pod_group="train"), "NodeNames": ["on-demand-2", "on-demand-3"]}
        request = urllib.request.Request(
            server.url + "/filter", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(request, timeout=10).read()
        yield server.diagnostics_url


def test_server_flag_shows_the_extenders_decisions(capsys: pytest.CaptureFixture[str], gang_extender: str) -> None:
    code, out, err = plugin(capsys, "--server", gang_extender, "podgroup", "-n", "team-a", "train", "-o", "json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    w2 = report["members"][2]
    assert (w2["pod"], w2["lastVerb"], w2["passedNodes"], w2["refusal"]) == ("team-a/w2", "filter", 2, "")
    code, table, _ = plugin(capsys, "--server", gang_extender, "podgroup", "-n", "team-a", "train")
    assert code == 0 and table.splitlines()[0] == "PodGroup team-a/train"
    lines = table.splitlines()
    assert lines[6].startswith("Last attempt     in progress (started ")
    assert lines[6].endswith("s ago; reserved in it: team-a/w2)")
    assert lines[8:] == [
        "POD         NODE                      RESERVED                        VERDICT",
        "team-a/w0   on-demand-0 (bound)       -                               no decision remembered",
        "team-a/w1   on-demand-1 (nominated)   -                               no decision remembered",
        "team-a/w2   -                         2 example.com/gpu (on-demand)   "
        "filter: 2 node(s) pass, first on-demand-2",
    ]
    assert plugin(capsys, "--server", gang_extender, "podgroup", "-n", "team-a", "nope") == (EXIT_REFUSED, "", UNKNOWN)


def _without_ages(table: str) -> str:
    return re.sub(r"started \d+s ago", "started Ns ago", table)


def test_the_in_cluster_extender_through_the_service_proxy(
    capsys: pytest.CaptureFixture[str], gang_extender: str, tmp_path: Path
) -> None:
    api_server = ScriptedApiServer(gang_extender)
    thread = threading.Thread(target=api_server.serve_forever, daemon=True)
    thread.start()
    try:
        config = kubeconfig(tmp_path, api_server.url)  # its context's namespace: team-a
        code, table, err = plugin(capsys, "--kubeconfig", str(config), "podgroup", "train")
        assert (code, err) == (0, "")
        _, expected, _ = plugin(capsys, "--server", gang_extender, "podgroup", "-n", "team-a", "train")
        # the same report, read a moment apart: the attempt's age may have ticked over a second between the two
        assert _without_ages(table) == _without_ages(expected)
        assert plugin(capsys, "--kubeconfig", str(config), "podgroup", "nope") == (EXIT_REFUSED, "", UNKNOWN)
        proxied = [path for _, path in api_server.requests]
        assert proxied == [
            "/api/v1/namespaces/kube-system/services/dra-quota-scheduler-metrics:9090/proxy"
            f"/diagnostics/podgroups/team-a/{name}"
            for name in ("train", "nope")
        ]
    finally:
        api_server.shutdown()
        api_server.server_close()
