"""What Kueue's manager Configuration says beyond deviceClassMappings that the quota decisions follow: whether
fair sharing is on (apis/config/v1beta2 Configuration.fairSharing; pkg/scheduler/preemption/fairsharing
Enabled: the field being set turns it on; v1beta1's `enable: false` turns it off)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml


def fair_sharing_enabled(configmap_data: Mapping[str, Any], key: str) -> bool:
    """Whether the Configuration under `key` of the ConfigMap's data enables fair sharing; False for anything
    unreadable (device_class_mappings.parse_kueue_configmap reports those errors)."""
    text = configmap_data.get(key)
    if not isinstance(text, str):
        return False
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    if not isinstance(document, Mapping):
        return False
    fair_sharing = document.get("fairSharing")
    if not isinstance(fair_sharing, Mapping):
        return False
    return fair_sharing.get("enable", True) is not False
