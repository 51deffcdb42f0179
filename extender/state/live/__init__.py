"""Live cluster state from an API server through list+watch (the `--kubeconfig` / `--in-cluster` sources).

Sits in the state layer: it fills a ClusterStore and knows nothing of decisions or HTTP serving. The
composition root (commands/assembly.py build_service) builds a LiveSource with `from_kubeconfig` or
`in_cluster`; the service and transport read it through the ClusterSource protocol (state/sources.py), and
`dra-extender snapshot` uses `write_snapshot`. The API client itself (KubeApi, Binder) lives in
extender/kube/ and is imported from there.
"""

from extender.state.live.resources import (
    DEFAULT_KUEUE_CONFIGMAP,
    KUEUE_ABSENT_MESSAGE,
    Discovery,
    Resource,
    discover,
    list_objects,
)
from extender.state.live.snapshot_writer import write_snapshot, write_snapshot_from_kubeconfig
from extender.state.live.source import LiveSource, from_kubeconfig, in_cluster
from extender.state.live.watcher import Backoff, ResourceStats, ResourceWatcher, WatchSettings

__all__ = [
    "DEFAULT_KUEUE_CONFIGMAP",
    "KUEUE_ABSENT_MESSAGE",
    "Backoff",
    "Discovery",
    "LiveSource",
    "Resource",
    "ResourceStats",
    "ResourceWatcher",
    "WatchSettings",
    "discover",
    "from_kubeconfig",
    "in_cluster",
    "list_objects",
    "write_snapshot",
    "write_snapshot_from_kubeconfig",
]
