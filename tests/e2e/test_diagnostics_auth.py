"""diagnostics.auth.mode kubernetes against the real kube-apiserver: TokenReview + SubjectAccessReview with
ServiceAccount tokens, one granted `get` on the non-resource URLs /diagnostics/* (and get and post on the web
view's /ui, /ui/*), one not; a token minted for the audience dra-extender."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import orjson
import pytest
from kubernetes import client as k8s

from extender.kube.api import load_kubeconfig
from extender.transport.access_review import AccessReviewer
from extender.transport.app import create_app
from testkit.control_plane import ControlPlane
from tests.support.scenarios import engine_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tokens(control_plane: ControlPlane) -> Iterator[dict[str, str]]:
    namespace = control_plane.create_namespace(f"auth-{uuid.uuid4().hex[:6]}")
    rbac = k8s.RbacAuthorizationV1Api(control_plane.client)
    role = f"dra-diagnostics-reader-{namespace}"
    rbac.create_cluster_role(
        {
            "metadata": {"name": role},
            "rules": [
                {"nonResourceURLs": ["/diagnostics/*"], "verbs": ["get"]},  # get only, not post
                {"nonResourceURLs": ["/ui", "/ui/*"], "verbs": ["get", "post"]},  # the web view and its what-if
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        }
    )
    issued = {}
    for name in ("reader", "stranger"):
        control_plane.core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
        request = control_plane.core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": 3600}}
        )
        issued[name] = request.status.token
    minted = control_plane.core.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"expirationSeconds": 3600, "audiences": ["dra-extender"]}}
    )
    issued["reader-for-us"] = minted.status.token
    try:
        yield issued
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)
        control_plane.delete_namespace(namespace)


def test_token_and_access_reviews_decide_who_reads_diagnostics(
    control_plane: ControlPlane, tokens: dict[str, str]
) -> None:
    reviewer = AccessReviewer(load_kubeconfig(control_plane.kubeconfig), cache_seconds=60)
    reader = reviewer.review(tokens["reader"], "/diagnostics/queues")
    assert reader.allowed and reader.user.endswith(":reader"), reader
    stranger = reviewer.review(tokens["stranger"], "/diagnostics/queues")
    assert not stranger.allowed and stranger.status == 403 and ":stranger may not get" in stranger.reason
    forged = reviewer.review("not-a-token", "/diagnostics/queues")
    assert not forged.allowed and forged.status == 401
    reviews = reviewer.reviews
    assert reviewer.review(tokens["reader"], "/diagnostics/queues").allowed
    assert reviewer.reviews == reviews, "a second look within cacheSeconds asks the API server nothing"

    app = create_app(engine_for([]), serve_scheduling=False, authorizer=reviewer).test_client()
    assert app.get("/diagnostics/queues").status_code == 401
    assert app.get("/diagnostics/queues", headers={"Authorization": "Bearer " + tokens["stranger"]}).status_code == 403
    answer = app.get("/diagnostics/queues", headers={"Authorization": "Bearer " + tokens["reader"]})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert app.get("/metrics").status_code == 200, "metrics stay open"
    explain = app.post(
        "/diagnostics/explain",
        data=orjson.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "d"}}),
        content_type="application/json",
    )
    assert explain.status_code == 401
    explain = app.post(
        "/diagnostics/explain",
        data=b"{}",
        content_type="application/json",
        headers={"Authorization": "Bearer " + tokens["reader"]},
    )
    assert explain.status_code == 403 and "may not post /diagnostics/explain" in explain.get_json()["error"]
    reviewer.close()


def test_the_web_view_is_behind_the_same_reviews(control_plane: ControlPlane, tokens: dict[str, str]) -> None:
    """Every page, the stylesheet and the what-if form: no token 401, a token without RBAC for /ui 403, the
    reader (nonResourceURLs /ui, /ui/*) served; the sign-in cookie works like the header."""
    reviewer = AccessReviewer(load_kubeconfig(control_plane.kubeconfig), cache_seconds=60)
    app = create_app(engine_for([]), serve_scheduling=False, authorizer=reviewer).test_client()
    reader = {"Authorization": "Bearer " + tokens["reader"]}
    stranger = {"Authorization": "Bearer " + tokens["stranger"]}
    for path in ("/ui/pods", "/ui/nodes", "/ui/queues", "/ui/explain", "/ui/static/style.css", "/ui/"):
        assert app.get(path).status_code == 401, path
        assert app.get(path, headers=stranger).status_code == 403, path
        assert app.get(path, headers=reader).status_code in (200, 302), path
    pod = '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "d"}}'
    assert app.post("/ui/explain", data={"pod": pod}).status_code == 401
    assert app.post("/ui/explain", data={"pod": pod}, headers=stranger).status_code == 403
    assert app.post("/ui/explain", data={"pod": pod}, headers=reader).status_code == 200
    assert app.post("/ui/login", data={"token": tokens["reader"], "next": "/ui/queues"}).status_code == 303
    assert app.get("/ui/queues").status_code == 200, "the cookie is reviewed as the header"
    reviewer.close()


def test_audiences_keep_api_server_tokens_and_ours_apart(control_plane: ControlPlane, tokens: dict[str, str]) -> None:
    ours = AccessReviewer(load_kubeconfig(control_plane.kubeconfig), audiences=("dra-extender",))
    assert ours.review(tokens["reader-for-us"], "/diagnostics/queues").allowed
    refused = ours.review(tokens["reader"], "/diagnostics/queues")
    assert not refused.allowed and refused.status == 401, refused
    anyone = AccessReviewer(load_kubeconfig(control_plane.kubeconfig))
    assert anyone.review(tokens["reader"], "/diagnostics/queues").allowed
    assert not anyone.review(tokens["reader-for-us"], "/diagnostics/queues").allowed, "not an API server token"
    ours.close()
    anyone.close()
