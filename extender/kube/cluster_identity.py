"""Which cluster the extender talks to, as one string that survives an API server's address being reused.

The kube-system Namespace exists in every cluster from its first start and is never deleted; its UID is made
once, when the cluster's API server first creates it (pkg/controlplane/controller/systemnamespaces), so it names
the cluster where an address (test clusters on one machine reusing a port, a cluster re-created behind the same
load balancer) does not. The reservation journal records it (state/reservation_journal.py JournalIdentity).
"""

from __future__ import annotations

import logging

from kubernetes.client import Configuration

from extender.kube.api import ApiError, KubeApi

log = logging.getLogger(__name__)

IDENTITY_NAMESPACE = "kube-system"


def cluster_uid(config: Configuration, *, read_timeout: float = 10.0) -> str:
    """The kube-system Namespace's UID; "" (with a log line) when it cannot be read: unknown, not a reason
    not to start."""
    api = KubeApi(config)
    try:
        body = api.get_json(f"/api/v1/namespaces/{IDENTITY_NAMESPACE}", read_timeout=read_timeout)
        return str(body["metadata"]["uid"])
    except (ApiError, OSError, KeyError, TypeError, ValueError) as error:
        log.warning("cannot read the %s Namespace's UID (the cluster's identity): %s", IDENTITY_NAMESPACE, error)
        return ""
    finally:
        api.close()
