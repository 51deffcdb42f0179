"""Errors raised while turning API objects into the cluster model.

A malformed object must be reported with the place it came from, so that a person can fix the snapshot or
the manifest; these exceptions carry that place (document index, kind/name, field path) as data.
"""

from __future__ import annotations


class ObjectError(ValueError):
    """One field of one object is malformed."""

    def __init__(self, field: str, message: str, *, where: str = "") -> None:
        self.field = field
        self.message = message
        self.where = where
        super().__init__(self.describe())

    def describe(self) -> str:
        prefix = f"{self.where}: " if self.where else ""
        return f"{prefix}field {self.field}: {self.message}"

    def located(self, where: str) -> ObjectError:
        """The same error with its origin (e.g. 'document 3 (ResourceSlice node-1-gpu)') prefixed."""
        place = f"{where}, {self.where}" if self.where else where
        return ObjectError(self.field, self.message, where=place)
