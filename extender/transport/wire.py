"""kube-scheduler's extender wire format (k8s.io/kube-scheduler/extender/v1), both directions.

The Go structs have no json tags, so the scheduler sends capitalised field names and Go's decoder accepts any
letter case; we accept any case too and always answer with the canonical names, in the form the request used
(NodeNames in -> NodeNames out, Nodes in -> Nodes out).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, itemgetter
from typing import Any

import orjson

from extender.decisions.pod_decision import PodDecision
from extender.decisions.ranking import Ranking
from extender.decisions.scoring import MAX_SCORE, ScoreBreakdown
from extender.state.core import Pod, parse_pod, pod_identity
from extender.state.errors import ObjectError
from extender.state.fields import type_name


class WireError(ValueError):
    """The request does not follow the extender protocol; answered with 400 and this message."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Pod
    node_names: list[str]
    # The NodeList items when the scheduler sent full nodes (nodeCacheCapable false), in request order.
    node_objects: list[Mapping[str, Any]] | None


def _fold(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Keys folded to lower case; the first spelling wins when a client sends two."""
    folded: dict[str, Any] = {}
    for key, value in obj.items():
        if isinstance(key, str):
            folded.setdefault(key.lower(), value)
    return folded


# The view's copy of a pod at the version asked about: (namespace, name, uid, resourceVersion) -> Pod or None.
StoredPod = Callable[[str, str, str, str], Pod | None]


def parse_extender_args(body: Any, *, max_nodes: int, stored: StoredPod | None = None) -> ExtenderArgs:
    """`stored` (SchedulingService.stored_pod): the pod comes from the extender's view when the view holds it at
    the very resourceVersion sent (state/core.py pod_identity), instead of being parsed again: parsing is cold
    code between two calls, a sizeable part of each verb's CPU, and the watch has parsed that very version
    already. A copy at that version is that pod, whatever else a request sent with it."""
    if not isinstance(body, Mapping):
        raise WireError(f"request body must be a JSON object (ExtenderArgs), got {type_name(body)}")
    fields = _fold(body)
    raw_pod = fields.get("pod")
    if raw_pod is None:
        raise WireError("field Pod is required")
    if not isinstance(raw_pod, Mapping):
        raise WireError(f"field Pod must be an object, got {type_name(raw_pod)}")
    identity = pod_identity(raw_pod) if stored is not None else None
    pod = stored(*identity) if stored is not None and identity is not None else None
    if pod is None:
        try:
            pod = parse_pod(raw_pod)
        except ObjectError as error:
            raise WireError(f"field Pod: {error.describe()}") from None

    node_names_raw = fields.get("nodenames")
    nodes_raw = fields.get("nodes")
    if node_names_raw is not None:
        if not isinstance(node_names_raw, list) or not set(map(type, node_names_raw)) <= {str}:
            raise WireError("field NodeNames must be a list of strings")
        if len(node_names_raw) > max_nodes:
            raise WireError(f"field NodeNames has {len(node_names_raw)} entries; the limit is {max_nodes}")
        return ExtenderArgs(pod, node_names_raw, None)  # the body's own list, not copied: no one changes it
    if nodes_raw is not None:
        if not isinstance(nodes_raw, Mapping):
            raise WireError(f"field Nodes must be a NodeList object, got {type_name(nodes_raw)}")
        items = _fold(nodes_raw).get("items") or []
        if not isinstance(items, list):
            raise WireError("field Nodes.items must be a list")
        if len(items) > max_nodes:
            raise WireError(f"field Nodes.items has {len(items)} entries; the limit is {max_nodes}")
        names = []
        for index, item in enumerate(items):
            metadata = item.get("metadata") if isinstance(item, Mapping) else None
            name = metadata.get("name") if isinstance(metadata, Mapping) else None
            if not isinstance(name, str) or not name:
                raise WireError(f"field Nodes.items[{index}].metadata.name is required")
            names.append(name)
        return ExtenderArgs(pod, names, items)
    raise WireError("one of NodeNames or Nodes is required")


def filter_result(args: ExtenderArgs, decision: PodDecision) -> dict[str, Any]:
    """ExtenderFilterResult. Failed nodes go to FailedAndUnresolvableNodes when preemption cannot help.

    kube-scheduler asks about each node once and the decision covers exactly the nodes asked: then the answer
    takes no Python work per passing node (the failed ones leave a copy of the nodes asked in C, and each
    group of nodes failing alike goes in with one update)."""
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    verdicts = decision.verdicts
    decided = verdicts.keys()  # a dict's view: membership tests and comparisons in C
    failures = decision.failures  # only the failed nodes need a look at their verdict
    failed_names = failures.names
    # The decision made for this very list, each node once (the filter verb's): the nodes asked are the ones
    # decided, known without a look at each.
    same_list = verdicts.asked is args.node_names and len(decided) == len(args.node_names)
    # each node once, in the order asked (the very list decided needs none: its passing nodes are the decision's)
    asked = {} if same_list else dict.fromkeys(args.node_names)
    every_node_asked = same_list or asked.keys() >= decided  # so every failed node was asked (the usual case)
    for name, failure in failures.built.items():
        if not every_node_asked and name not in asked:
            continue
        if failure.unresolvable:
            unresolvable[name] = failure.reason
        else:
            failed[name] = failure.reason
    for template, group_names in failures.groups:  # nodes failing alike: their reason, a group at a time
        answer = unresolvable if template.unresolvable else failed
        in_answer = group_names if every_node_asked else asked.keys() & set(group_names)
        answer.update(dict.fromkeys(in_answer, template.reason))
    if same_list:  # built once, in C, and kept: prioritize recognises the same list coming back
        passed = decision.passed
    elif every_node_asked and len(asked) == len(decided) == len(args.node_names):  # each node decided, asked once
        deque(map(asked.pop, failed_names), maxlen=0)  # the failed nodes leave, in C (they are all asked)
        passed = list(asked)
    else:  # a node asked twice is answered twice, as asked
        passed = [name for name in args.node_names if name in decided and name not in failed_names]
    result: dict[str, Any] = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }
    if args.node_objects is None:
        result["NodeNames"] = passed
    else:
        keep = set(passed)
        result["Nodes"] = {
            "apiVersion": "v1",
            "kind": "NodeList",
            "metadata": {},
            "items": [item for item, name in zip(args.node_objects, args.node_names, strict=True) if name in keep],
        }
    return result


def filter_error(message: str) -> dict[str, Any]:
    """ExtenderFilterResult carrying only an Error: kube-scheduler (pkg/scheduler/extender.go HTTPExtender.Filter)
    turns a non-empty Error into a failed scheduling attempt and ignores the rest of the result."""
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def prioritize_result(args: ExtenderArgs, ranking: Ranking) -> list[dict[str, Any]]:
    """HostPriorityList: each node asked whose score is above the lowest among them, with its score less that
    lowest (`relative_scores`); empty for a pod with nothing of ours to decide (`scores_nothing`)."""
    return _entries(*_answered(args.node_names, ranking))


def _entries(hosts: list[str], scores: list[int]) -> list[dict[str, Any]]:
    return [{"Host": host, "Score": score} for host, score in zip(hosts, scores, strict=True)]


def _answered(names: list[str], ranking: Ranking) -> tuple[list[str], list[int]]:
    """The nodes prioritize's answer names, in the order asked, and their scores in it (`relative_scores`)."""
    if scores_nothing(ranking) or not names:
        return [], []
    keep, scores = relative_scores(list(_totals(names, ranking.scores)))
    return list(compress(names, keep)), scores


def scores_nothing(ranking: Ranking) -> bool:
    """A pod with no claims, no queue and no DRA-backed extended resource (the decision's fast path): prioritize
    answers an empty HostPriorityList without scoring a node. kube-scheduler (pkg/scheduler/
    schedule_one.go prioritizeNodes) adds an extender's score only to the nodes the answer names, and gives
    only those a random tie-breaker (NodePluginScores.Randomizer); so the pod is ranked exactly as without an
    extender, and kube-scheduler skips decoding an entry per node (encoding/json, inside the serial scheduling
    cycle) for every pod that does not use devices."""
    return ranking.decision.fast_path


def relative_scores(totals: list[int]) -> tuple[list[bool], list[int]]:
    """Which of the nodes asked prioritize's answer names (`keep`, in the order asked), and their scores in it:
    each node's score less the lowest score among the nodes asked; a node at the lowest is left out.

    Why: kube-scheduler (pkg/scheduler/schedule_one.go prioritizeNodes) adds score x weight x 10 to the total of
    each node an answer names and nothing to the others, then takes the node with the highest total. Taking the same
    amount off every node's score changes no difference between two totals, so the nodes rank as with the plain
    scores; a node left out is one whose score less the lowest is 0, which is what kube-scheduler adds to a node an
    answer does not name. What the answer saves is kube-scheduler's work per entry inside its serial cycle:
    encoding/json decoding the entry, a map entry and two allocations to merge it. Binpacking leaves most nodes of a
    large cluster empty, all at the same lowest score, so the answer shrinks to about the nodes already in use.

    What changes is the tie-breaking among nodes of equal total: kube-scheduler draws a random tie-breaker
    (NodePluginScores.Randomizer) only for the nodes an answer names, so a named node wins a tie against one
    left out, and ties among nodes left out go by kube-scheduler's heap order, as they do for every pod of a
    kube-scheduler without extenders (sorted_nodes.go nodeScoreHeap)."""
    if not totals:
        return [], []
    lowest = min(totals)
    keep = list(map(lowest.__lt__, totals))  # in C: 1000 nodes and more, inside the serial cycle
    return keep, list(map((-lowest).__add__, compress(totals, keep)))


# What follows a node's name in its HostPriority entry, by score, when another entry follows; the last entry
# drops the trailing `,{"Host":"` and closes the list.
_AFTER_NAME = {score: f'","Score":{score}}},{{"Host":"' for score in range(MAX_SCORE + 1)}
_NEXT_ENTRY_OPENING = len(',{"Host":"')
_total = attrgetter("total")


def host_priority_list(names: list[str], ranking: Ranking) -> bytes:
    """prioritize's answer for the nodes asked (`names`, ExtenderArgs.node_names) as JSON bytes: byte for byte
    orjson's encoding of `prioritize_result` (what the tests compare), built without a Python object per node
    named.

    Why: kube-scheduler asks prioritize about every node that passed (a thousand and more), inside its serial cycle.
    Between two calls the API server, etcd and kube-scheduler evict the extender's memory from the CPU caches, and
    every long-lived object an answer touches per node costs a miss (entries encoded once and kept per node name
    cost far more per answer under the real kube-scheduler than in a loop on their own). Here the answer is one
    string join over the request's own names (just parsed, so still cached) and one separator per node chosen by its
    score, with a lookup per node in the fresh scores only, all of it in C.

    Node names are DNS subdomains (letters, digits, '-' and '.'), which JSON takes as they are; a request with
    any other name is answered through orjson, which escapes whatever the names hold."""
    hosts, scores = _answered(names, ranking)
    if not hosts:
        return b"[]"
    if _plain_names(hosts):
        try:
            after_name = list(map(_AFTER_NAME.__getitem__, scores))
        except KeyError:  # a score outside 0..MAX_SCORE (scoring.combine makes none): orjson says it as it is
            pass
        else:
            after_name[-1] = after_name[-1][:-_NEXT_ENTRY_OPENING] + "]"
            pieces: list[str] = [""] * (2 * len(hosts))
            pieces[0::2] = hosts
            pieces[1::2] = after_name
            return ('[{"Host":"' + "".join(pieces)).encode()
    return orjson.dumps(_entries(hosts, scores))  # names JSON must escape, or a score out of range


def _plain_names(names: list[str]) -> bool:
    """Every name of letters, digits, '-' and '.' only (at least one letter or digit among them all)."""
    joined = "".join(names)
    return joined.isascii() and joined.encode().translate(None, b"-.").isalnum()


def _totals(names: list[str], scores: Mapping[str, ScoreBreakdown]) -> Iterable[int]:
    """Each node's score in the order asked; 0 for a node that did not pass."""
    if not scores:
        return repeat(0, len(names))
    try:  # kube-scheduler asks only about the nodes that passed: every name has a score, one lookup each in C
        found = itemgetter(*names)(scores) if len(names) > 1 else (scores[names[0]],)
        return map(_total, found)
    except KeyError:
        score_of = scores.get
        return [score.total if (score := score_of(name)) is not None else 0 for name in names]


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def parse_binding_args(body: Any) -> BindingArgs:
    if not isinstance(body, Mapping):
        raise WireError(f"request body must be a JSON object (ExtenderBindingArgs), got {type_name(body)}")
    fields = _fold(body)
    values = {}
    for key, label in (
        ("podname", "PodName"),
        ("podnamespace", "PodNamespace"),
        ("poduid", "PodUID"),
        ("node", "Node"),
    ):
        value = fields.get(key, "")
        if not isinstance(value, str):
            raise WireError(f"field {label} must be a string")
        if not value and key != "poduid":
            raise WireError(f"field {label} is required")
        values[key] = value
    return BindingArgs(values["podname"], values["podnamespace"], values["poduid"], values["node"])
