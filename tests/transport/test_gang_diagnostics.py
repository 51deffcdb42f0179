"""The group-level verdict in /diagnostics/pods and explain, and the PodGroup report (JSON and web page)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from extender.reports.text import render_table
from extender.transport.app import create_app
from testkit import builders as b
from testkit.scenarios import gpu_pod
from tests.service.test_gang_quota import GANGS_ON, Clock
from tests.support.quota import base_objects
from tests.support.scenarios import engine_for


def gang_client(quota: int, authorizer: Any = None) -> Any:
    objects = [*base_objects({"on-demand": {"nominal": quota}}, od_nodes=4, spot_nodes=0)]
    objects.append(b.pod_group("train", "team-a", min_count=4))
    objects += [gpu_pod(f"w{i}", pod_group="train") for i in range(4)]
    engine = engine_for(objects, GANGS_ON, Clock())
    return create_app(engine, authorizer=authorizer).test_client()


def filter_member(client: Any, name: str) -> Any:
    body = {"Pod": gpu_pod(name, pod_group="train"), "NodeNames": ["on-demand-0", "on-demand-1"]}
    return client.post("/filter", data=orjson.dumps(body), content_type="application/json").get_json()


def test_a_refused_gang_member_shows_the_group_verdict() -> None:
    client = gang_client(6)
    answer = filter_member(client, "w0")
    # 8 GPUs of a queue that can never provide more than 6: waiting cannot help, kube-scheduler is told so
    assert answer["FailedNodes"] == {}
    assert set(answer["FailedAndUnresolvableNodes"]) == {"on-demand-0", "on-demand-1"}
    assert "PodGroup team-a/train" in answer["FailedAndUnresolvableNodes"]["on-demand-0"]
    pod = client.get("/diagnostics/pods/team-a/w0").get_json()
    assert pod["gang"]["podGroup"] == "team-a/train" and pod["gang"]["othersNeeded"] == 3
    assert "does not fit its queue as a whole" in pod["gang"]["refused"]
    report = client.get("/diagnostics/podgroups/team-a/train").get_json()
    assert report["policy"] == "gang" and report["minCount"] == 4 and report["hold"] == []
    assert report["attempt"]["outcome"].startswith("lost")
    assert [m["pod"] for m in report["members"]] == [f"team-a/w{i}" for i in range(4)]
    assert report["members"][0]["refusal"].startswith("PodGroup team-a/train")
    page = client.get("/ui/pods/team-a/w0").get_data(as_text=True)  # the pod's page links to its group's
    assert 'href="/ui/podgroups/team-a/train"' in page and "refused as a group" in page
    table = render_table(pod)  # what `kubectl dra-quota explain` and `dra-extender explain` print
    assert "PodGroup team-a/train (gang, minCount 4): 4 present, 0 placed" in table and "Refused as a group" in table
    assert "ClusterQueue team-a  flavor (none: the group does not fit)" in table


def test_a_gang_in_progress_shows_what_it_holds() -> None:
    client = gang_client(8)
    filter_member(client, "w0")
    report = client.get("/diagnostics/podgroups/team-a/train").get_json()
    assert report["hold"] == [
        {"clusterQueue": "team-a", "flavor": "on-demand", "resource": "example.com/gpu", "amount": 8}
    ]
    assert report["attempt"]["outcome"] == "in progress" and report["attempt"]["members"] == ["team-a/w0"]
    assert report["clusterQueues"] == ["team-a"]  # the members' LocalQueue's
    assert report["members"][0]["reserved"][0]["amount"] == 2
    page = client.get("/ui/podgroups/team-a/train")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "PodGroup team-a/train" in text and "minCount 4" in text and "in progress" in text
    assert "<dt>ClusterQueue</dt><dd>team-a</dd>" in text
    assert page.headers["Content-Security-Policy"]
    explained = client.post(
        "/diagnostics/explain",
        data=orjson.dumps(gpu_pod("w1", pod_group="train")),
        content_type="application/json",
    ).get_json()
    # w0 passed in the attempt: it counts as it was charged; two more are estimated like w1
    assert explained["gang"]["othersNeeded"] == 3 and explained["gang"]["counted"]["alike"] == 2
    assert explained["passed"] == 4  # the attempt's hold is the group's own: the group is judged without it


def test_unknown_podgroup_is_a_404() -> None:
    client = gang_client(8)
    assert client.get("/diagnostics/podgroups/team-a/nope").status_code == 404
    assert client.get("/ui/podgroups/team-a/nope").status_code == 404


def test_the_podgroup_report_is_authorized_like_every_diagnostics_path() -> None:
    @dataclass
    class Decision:
        allowed: bool
        status: int
        reason: str

    class DenyAll:
        def review(self, token: str, path: str, verb: str = "get") -> Decision:
            return Decision(False, 401, "token required")

    client = gang_client(8, authorizer=DenyAll())
    assert client.get("/diagnostics/podgroups/team-a/train").status_code == 401
