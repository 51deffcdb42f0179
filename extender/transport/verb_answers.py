"""kube-scheduler's filter and prioritize as functions of a parsed request body: parse the ExtenderArgs, call the
service, count what the metrics count, format the answer. The scheduling blueprint (transport/scheduling_routes.py)
and the WSGI fast path (transport/verb_fast_path.py) both answer through them, so the two paths cannot differ.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from extender.decisions.pod_decision import PodDecision
from extender.decisions.ranking import Ranking
from extender.service import NotLeadingError, NotSyncedError, SchedulingService
from extender.transport.metrics import ExtenderMetrics
from extender.transport.wire import (
    filter_error,
    filter_result,
    host_priority_list,
    parse_extender_args,
    prioritize_result,
)

# A verb's answer to a parsed request body: a payload to encode, or bytes encoded already.
VerbAnswer = Callable[[SchedulingService, ExtenderMetrics, Any], Any]


class PrioritizeAhead:
    """prioritize's HostPriorityList encoded ahead: once filter's answer is written, the service ranks the pod
    for the nodes filter passed (SchedulingService.rank_ahead says why and when) and this encodes that ranking;
    prioritize, inside the serial cycle, then answers with those bytes when the service hands it that very
    ranking. One answer is kept: the scheduling cycle is serial, and a second scheduler's pod in between only
    means prioritize encodes its own."""

    __slots__ = ("_answer", "service")

    def __init__(self, service: SchedulingService) -> None:
        self.service = service
        self._answer: tuple[Ranking, bytes] | None = None

    def follow(self, decision: PodDecision) -> Callable[[], None]:
        """The work to do once filter's answer for `decision` is written (the service says whether there is any:
        a pod with nothing of ours to decide, or refused everywhere, has nothing to score)."""
        return partial(self._make, decision)

    def _make(self, decision: PodDecision) -> None:
        ranking = self.service.rank_ahead(decision)
        if ranking is not None:
            self._answer = (ranking, host_priority_list(decision.passed, ranking))

    def answer(self, ranking: Ranking) -> bytes | None:
        """The encoded answer made ahead for this very ranking, if it was."""
        kept = self._answer
        return kept[1] if kept is not None and kept[0] is ranking else None


class FollowedAnswer(NamedTuple):
    """A verb's payload, and the work to do once the server has written it (filter's: PrioritizeAhead)."""

    payload: Any
    then: Callable[[], None]


def answer_filter(
    service: SchedulingService, metrics: ExtenderMetrics, body: Any, ahead: PrioritizeAhead | None = None
) -> Any:
    """ExtenderFilterResult for a parsed ExtenderArgs body (WireError for one that breaks the protocol). With
    `ahead`, a FollowedAnswer when prioritize's answer can be made once this one is written."""
    args = parse_extender_args(body, max_nodes=service.config.limits.max_nodes_per_request, stored=service.stored_pod)
    try:
        decision = service.filter(args.pod, args.node_names)
    except NotLeadingError as error:
        metrics.child(metrics.filter_outcomes, "not-leading").inc()
        return filter_error(str(error))
    except NotSyncedError as error:
        metrics.child(metrics.filter_outcomes, "not-synced").inc()
        return filter_error(str(error))
    metrics.child(metrics.nodes_evaluated, "filter").inc(len(args.node_names))
    if decision.fast_path:
        metrics.child(metrics.fast_path, "filter").inc()
    for category, count in decision.outcome_counts().items():
        metrics.child(metrics.filter_outcomes, category).inc(count)
    result = filter_result(args, decision)
    return result if ahead is None else FollowedAnswer(result, ahead.follow(decision))


def answer_prioritize(
    service: SchedulingService,
    metrics: ExtenderMetrics,
    body: Any,
    encoded: bool = False,
    ahead: PrioritizeAhead | None = None,
) -> Any:
    """HostPriorityList for a parsed ExtenderArgs body; raises NotSyncedError when verdicts cannot be given.
    With `encoded`, the list comes encoded already (bytes: wire.host_priority_list, or the answer `ahead` made
    of the very ranking the service hands back)."""
    args = parse_extender_args(body, max_nodes=service.config.limits.max_nodes_per_request, stored=service.stored_pod)
    ranking = service.prioritize(args.pod, args.node_names)
    metrics.child(metrics.nodes_evaluated, "prioritize").inc(len(args.node_names))
    if ranking.decision.fast_path:
        metrics.child(metrics.fast_path, "prioritize").inc()
    if encoded:
        encoded_ahead = ahead.answer(ranking) if ahead is not None else None
        return encoded_ahead if encoded_ahead is not None else host_priority_list(args.node_names, ranking)
    return prioritize_result(args, ranking)
