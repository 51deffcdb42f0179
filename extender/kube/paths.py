"""URL paths of the API server and of the extender's own diagnostics: one escaping rule for both, kept apart from
the API client (kube/api.py) so that a command building a diagnostics URL does not load the Kubernetes client."""

from __future__ import annotations

from urllib.parse import quote


def path_segment(value: str) -> str:
    """One path segment (a namespace, a name, a port), escaped: "/" and every reserved character included."""
    return quote(value, safe="")
