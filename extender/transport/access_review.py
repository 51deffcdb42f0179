"""Who may read the diagnostics: a bearer token checked by the API server, the way kube-rbac-proxy (and the
secure ports of kube-scheduler and kube-controller-manager, through k8s.io/apiserver's delegated authn/authz)
check theirs.

1. TokenReview (authentication.k8s.io/v1): is the token valid, and whose is it (user, uid, groups, extra)?
2. SubjectAccessReview (authorization.k8s.io/v1) for that user on the non-resource URL requested with verb
   get, e.g. `nonResourceURLs: ["/diagnostics/*"]` in a ClusterRole.
Answers are cached per (token digest, verb, path) for `cache_seconds`, allowed and denied alike, so a scrape loop
does not turn into two API requests per call; an API server that cannot be reached denies (fail closed),
uncached. Allowed and denied answers are kept apart, each bounded and evicting its least recently used entries:
a flood of made-up tokens fills only the denied cache, and the people already allowed keep their answers (the
requests that may wait on a review at once are bounded by diagnostics.concurrency, transport/diagnostics_auth.py).

With `audiences` the TokenReview asks for those audiences and a token is accepted only when the API server says
it was minted for one of them (status.audiences), as kube-rbac-proxy's --auth-token-audiences; without, the API
server's own audiences apply (any token valid against the API server).
The extender's ServiceAccount needs `create` on tokenreviews and subjectaccessreviews
(system:auth-delegator).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from cachetools import LRUCache
from kubernetes.client import Configuration

from extender.kube.api import ApiError, KubeApi

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
MAX_CACHED = 4096  # entries of each cache (allowed, denied)


@dataclass(frozen=True, slots=True)
class AccessDecision:
    allowed: bool
    user: str  # "" when the token did not authenticate
    reason: str
    status: int  # the HTTP status to answer with when not allowed: 401 (who are you?) or 403 (not you)


class AccessReviewer:
    def __init__(
        self,
        api_client_config: Configuration,
        *,
        cache_seconds: float = 60.0,
        timeout_seconds: float = 5.0,
        audiences: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = KubeApi(api_client_config)
        self._cache_seconds = cache_seconds
        self._timeout = timeout_seconds
        self._audiences = audiences
        self._clock = clock
        self._lock = threading.Lock()
        self._allowed: LRUCache[tuple[str, str], tuple[float, AccessDecision]] = LRUCache(maxsize=MAX_CACHED)
        self._denied: LRUCache[tuple[str, str], tuple[float, AccessDecision]] = LRUCache(maxsize=MAX_CACHED)
        self.reviews = 0  # API round trips (TokenReview + SubjectAccessReview pairs), for tests and metrics

    def review(self, token: str, path: str, verb: str = "get") -> AccessDecision:
        if not token:
            return AccessDecision(False, "", "a bearer token is required (Authorization: Bearer ...)", 401)
        key = (hashlib.sha256(token.encode()).hexdigest(), f"{verb} {path}")
        now = self._clock()
        with self._lock:
            cached = self._allowed.get(key) or self._denied.get(key)
            if cached is not None and cached[0] > now:
                return cached[1]
        try:
            decision = self._ask(token, path, verb)
        except (ApiError, urllib3.exceptions.HTTPError, OSError) as error:
            detail = error.describe() if isinstance(error, ApiError) else str(error)
            return AccessDecision(False, "", f"cannot review the token with the API server: {detail}", 503)
        if self._cache_seconds > 0:
            with self._lock:
                (self._allowed if decision.allowed else self._denied)[key] = (now + self._cache_seconds, decision)
        return decision

    def _ask(self, token: str, path: str, verb: str) -> AccessDecision:
        self.reviews += 1
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = list(self._audiences)
        review = self._api.post_json(
            TOKEN_REVIEWS,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec},
            read_timeout=self._timeout,
        )
        status: dict[str, Any] = review.get("status") or {}
        if not status.get("authenticated"):
            return AccessDecision(False, "", status.get("error") or "the token is not valid", 401)
        # An authenticator that ignores spec.audiences answers without status.audiences: not good enough.
        if self._audiences and not set(status.get("audiences") or ()) & set(self._audiences):
            wanted = ", ".join(self._audiences)
            return AccessDecision(
                False, "", f"the token is not for this audience (diagnostics.auth.audiences: {wanted})", 401
            )
        user: dict[str, Any] = status.get("user") or {}
        username = str(user.get("username", ""))
        access_spec = {
            "user": username,
            "uid": user.get("uid", ""),
            "groups": user.get("groups") or [],
            "extra": user.get("extra") or {},
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        access = self._api.post_json(
            ACCESS_REVIEWS,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": access_spec},
            read_timeout=self._timeout,
        )
        verdict: dict[str, Any] = access.get("status") or {}
        if verdict.get("allowed"):
            return AccessDecision(True, username, str(verdict.get("reason", "")), 200)
        reason = verdict.get("reason") or verdict.get("evaluationError") or "no RBAC rule allows it"
        return AccessDecision(False, username, f"{username} may not {verb} {path}: {reason}", 403)

    def close(self) -> None:
        self._api.close()
