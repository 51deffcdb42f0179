"""Tests of the scripted Kubernetes API server (tests/support/fake_api.py) itself.

The live-source tests are only as good as the fake's protocol: discovery, lists without item kinds, watch
replays after a resourceVersion, 410 Gone for an expired one.
"""

from __future__ import annotations

import orjson

from testkit import builders as b
from tests.support.fake_api import DRA, KUEUE, TOKEN, FakeApiServer, small_cluster

# --- tests of the fake itself: the live tests are only as good as its protocol ----------------------------------


def _get(server: FakeApiServer, path: str, token: str = TOKEN) -> tuple[int, bytes, dict[str, str]]:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        return response.status, response.read(), dict(response.getheaders())
    finally:
        connection.close()


def test_fake_serves_discovery_and_lists_without_item_kinds(fake_api: FakeApiServer) -> None:
    fake_api.put_all(*small_cluster())
    status, body, _ = _get(fake_api, "/apis")
    assert status == 200
    assert {g["name"] for g in orjson.loads(body)["groups"]} == {DRA, KUEUE}
    status, body, _ = _get(
        fake_api, "/api/v1/namespaces/kueue-system/configmaps?fieldSelector=metadata.name%3Dkueue-manager-config"
    )
    listed = orjson.loads(body)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["kueue-manager-config"]
    assert "kind" not in listed["items"][0]
    assert listed["metadata"]["resourceVersion"] == str(fake_api.rv)
    assert _get(fake_api, "/api/v1/nodes", token="wrong")[0] == 401


def test_fake_watch_replays_history_after_resource_version_then_ends(fake_api: FakeApiServer) -> None:
    first = fake_api.put(b.node("n1"))
    fake_api.put(b.node("n2"))
    status, body, headers = _get(fake_api, f"/api/v1/nodes?watch=true&resourceVersion={first}&timeoutSeconds=0.2")
    assert status == 200
    assert headers["Transfer-Encoding"] == "chunked"
    events = [orjson.loads(line) for line in body.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "n2")]


def test_fake_expired_watch_answers_410(fake_api: FakeApiServer) -> None:
    rv = fake_api.put(b.node("n1"))
    fake_api.expire("nodes")
    assert _get(fake_api, f"/api/v1/nodes?watch=true&resourceVersion={rv}")[0] == 410
