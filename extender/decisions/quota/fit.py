"""Kueue's verdict on one request of one resource in one flavor of a ClusterQueue, with the numbers behind it.

The outcomes are those of Kueue v0.19.2's FlavorAssigner.fitsResourceQuota
(pkg/scheduler/flavorassigner/flavorassigner.go): beyond potentialAvailable a request never fits; within
available it fits, by borrowing when usage would pass nominal; in between only preemption (or workloads
finishing) could make room. NotCovered and Inactive are the ClusterQueue's own problems, told per resource.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

_ZERO = Fraction(0)


class FitOutcome(StrEnum):
    """How a request stands against the quota (ordered by severity in `_SEVERITY`)."""

    FITS = "Fits"
    FITS_BY_BORROWING = "FitsByBorrowing"
    NEEDS_PREEMPTION = "NeedsPreemption"
    NEVER_FITS = "NeverFits"
    NOT_COVERED = "NotCovered"
    INACTIVE = "Inactive"


# Worst first: when one pod needs several resources, its verdict is the worst of theirs.
_SEVERITY = {
    FitOutcome.INACTIVE: 5,
    FitOutcome.NOT_COVERED: 4,
    FitOutcome.NEVER_FITS: 3,
    FitOutcome.NEEDS_PREEMPTION: 2,
    FitOutcome.FITS_BY_BORROWING: 1,
    FitOutcome.FITS: 0,
}


@dataclass(frozen=True, slots=True)
class Fit:
    """A verdict with the numbers behind it, so that the explanation layer never recomputes them."""

    outcome: FitOutcome
    cluster_queue: str
    flavor: str
    resource: str
    requested: Fraction
    usage: Fraction = _ZERO
    nominal: Fraction = _ZERO
    available: Fraction = _ZERO
    potential_available: Fraction = _ZERO
    borrowing_limit: Fraction | None = None
    lending_limit: Fraction | None = None
    cohort: str | None = None
    reason: str = ""

    @property
    def admissible(self) -> bool:
        return self.outcome in (FitOutcome.FITS, FitOutcome.FITS_BY_BORROWING)

    @property
    def borrowing(self) -> Fraction:
        """How far past its nominal quota the ClusterQueue would be after this request (Kueue: borrowing)."""
        return max(_ZERO, self.usage + self.requested - self.nominal)

    @property
    def shortfall(self) -> Fraction:
        """How much more would have to be freed (by preemption or completion) for the request to fit."""
        return max(_ZERO, self.requested - self.available)

    @property
    def severity(self) -> int:
        return _SEVERITY[self.outcome]


def worst_fit(fits: Iterable[Fit]) -> Fit | None:
    """The verdict that decides a multi-resource request: the most severe one, first in order on ties."""
    worst: Fit | None = None
    for fit in fits:
        if worst is None or fit.severity > worst.severity:
            worst = fit
    return worst
