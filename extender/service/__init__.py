"""The application service: owns the process's state and runs the verbs (see service.py)."""

from extender.service.config import ConfigError, ExtenderConfig, load_config, parse_config
from extender.service.errors import BindError, NotLeadingError, NotSyncedError
from extender.service.history import DecisionRecord
from extender.service.quota_view import QuotaView
from extender.service.service import Binder, SchedulingService

__all__ = [
    "BindError",
    "Binder",
    "ConfigError",
    "DecisionRecord",
    "ExtenderConfig",
    "NotLeadingError",
    "NotSyncedError",
    "QuotaView",
    "SchedulingService",
    "load_config",
    "parse_config",
]
