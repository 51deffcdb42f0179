"""What the extender decided recently: for /diagnostics/pods and for prioritize right after filter.

Not caches (nothing here is recomputed on a miss): records, bounded so a big cluster cannot grow them without
limit. The history is bounded by pods AND by node verdicts held (one decision over 5000 nodes weighs 5000),
least recently written first; the filter decisions prioritize reuses are few (prioritize follows filter
within one scheduling cycle) and each holds a verdict per candidate node.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from cachetools import Cache, LRUCache

from extender.decisions.pod_decision import PodDecision
from extender.decisions.ranking import Ranking

# kube-scheduler calls prioritize right after filter in the same cycle; an older filter answer is not reused.
PRIORITIZE_REUSE_SECONDS = 10.0
LAST_FILTER_KEPT = 64
# Evicted records a background thread has not let go of yet; past this the verb's own thread lets them go.
EVICTED_KEPT = 16


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    verb: str  # filter | prioritize
    at: float  # wall-clock time
    ranking: Ranking
    duration_seconds: float

    @property
    def decision(self) -> PodDecision:
        return self.ranking.decision


def _weight(record: DecisionRecord) -> int:
    return max(1, len(record.decision.verdicts))


class DecisionHistory:
    """Thread-safe (cachetools caches are not: an eviction racing a write raises).

    A full history evicts its oldest record for every new pod, and letting go of a record frees its decision:
    a verdict per node asked, long-lived objects out of the CPU caches by then, inside kube-scheduler's serial
    cycle (measured in docs/performance.md, "State and decisions"). So `record`
    only moves evicted records aside, and a background thread lets go of them (`release_evicted`: the view
    keeper, between verbs); at most EVICTED_KEPT wait, past that the verb's thread lets go of them itself."""

    def __init__(self, max_pods: int, max_verdicts: int, last_filter_kept: int = LAST_FILTER_KEPT) -> None:
        self._lock = threading.Lock()
        self._max_pods = max_pods
        self._records: LRUCache[str, DecisionRecord] = LRUCache(maxsize=max_verdicts, getsizeof=_weight)
        # pod id -> (when, the filter's decision, prioritize's ranking of it when made ahead, else None)
        self._last_filter: LRUCache[str, tuple[float, PodDecision, Ranking | None]] = LRUCache(maxsize=last_filter_kept)
        self._evicted: list[object] = []

    def record(self, verb: str, ranking: Ranking, started: float) -> None:
        record = DecisionRecord(verb, time.time(), ranking, time.perf_counter() - started)
        weight = _weight(record)
        released: list[object] = []
        with self._lock:
            records = self._records
            if weight > records.maxsize:
                return  # larger than the whole history allows: not kept
            evicted = self._evicted
            key = ranking.decision.pod_key
            if key in records:
                evicted.append(records.pop(key))
            # Room made here (the cache's own setitem would free what it evicts on the spot)
            while records and (records.currsize + weight > records.maxsize or len(records) >= self._max_pods):
                evicted.append(records.popitem())
            records[key] = record
            if len(evicted) > EVICTED_KEPT:
                released, self._evicted = evicted, []
        del released  # outside the lock

    def release_evicted(self) -> None:
        """Let go of the evicted records (a background thread, between verbs)."""
        with self._lock:
            released, self._evicted = self._evicted, []
        del released

    def get(self, pod_key: str) -> DecisionRecord | None:
        with self._lock:
            return self._records.get(pod_key)

    def recent(self, limit: int | None = None) -> list[DecisionRecord]:
        """The records held, newest first (at most `limit`): what the web view's pod list shows.

        A copy taken under the history's own lock (never the reservation lock), so a reader cannot see a record
        half-evicted; O(records held), which the history bounds."""
        with self._lock:
            # Cache.__getitem__ reads without LRUCache's move-to-end: looking must not change what is evicted next.
            records = [Cache.__getitem__(self._records, key) for key in self._records]
        records.sort(key=lambda record: record.at, reverse=True)
        return records if limit is None else records[:limit]

    def __len__(self) -> int:
        return len(self._records)

    def remember_filter(self, pod_id: str, decision: PodDecision) -> None:
        with self._lock:
            self._last_filter[pod_id] = (time.monotonic(), decision, None)

    def remember_ranking(self, pod_id: str, ranking: Ranking) -> bool:
        """prioritize's ranking of the pod's filter decision, made ahead (SchedulingService.rank_ahead); False
        when that decision is no longer the pod's latest (another filter came in between)."""
        with self._lock:
            last = self._last_filter.get(pod_id)
            if last is None or last[1] is not ranking.decision:
                return False
            self._last_filter[pod_id] = (last[0], last[1], ranking)
        return True

    def recent_filter(self, pod_id: str) -> PodDecision | None:
        """The pod's filter decision of this scheduling cycle, if there is one."""
        found = self.recent_filter_ranked(pod_id)
        return found[0] if found is not None else None

    def recent_filter_ranked(self, pod_id: str) -> tuple[PodDecision, Ranking | None] | None:
        """The pod's filter decision of this scheduling cycle, with its ranking when one was made ahead."""
        with self._lock:
            last = self._last_filter.get(pod_id)
        if last is None or time.monotonic() - last[0] >= PRIORITIZE_REUSE_SECONDS:
            return None
        return last[1], last[2]
