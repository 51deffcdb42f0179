"""The one label-selector requirement matcher (extender/state/labels.py) and the per-API operator sets."""

import pytest

from extender.state.core import Node, parse_node_selector
from extender.state.errors import ObjectError
from extender.state.labels import Operator, Requirement, parse_label_selector


def node(name: str = "n1", **labels: str) -> Node:
    return Node(name=name, labels=labels)


@pytest.mark.parametrize(
    ("requirement", "labels", "expected"),
    [
        (Requirement("a", Operator.IN, ("x", "y")), {"a": "y"}, True),
        (Requirement("a", Operator.IN, ("x",)), {}, False),
        (Requirement("a", Operator.NOT_IN, ("x",)), {}, True),  # absent keys satisfy NotIn ...
        (Requirement("a", Operator.DOES_NOT_EXIST), {}, True),  # ... and DoesNotExist
        (Requirement("a", Operator.NOT_IN, ("x",)), {"a": "x"}, False),
        (Requirement("a", Operator.EXISTS), {"a": ""}, True),
        (Requirement("a", Operator.GT, ("5",)), {}, False),  # Gt/Lt never hold for an absent key
        (Requirement("a", Operator.GT, ("5",)), {"a": "6"}, True),
        (Requirement("a", Operator.LT, ("5",)), {"a": "-6"}, True),
        (Requirement("a", Operator.GT, ("5",)), {"a": "+6"}, True),  # strconv.ParseInt takes a sign
        (Requirement("a", Operator.GT, ("5",)), {"a": "0006"}, True),  # and leading zeros
        (Requirement("a", Operator.GT, ("-9223372036854775808",)), {"a": "9223372036854775807"}, True),
        # int() would take these; strconv.ParseInt(s, 10, 64) does not, so upstream never matches them.
        (Requirement("a", Operator.GT, ("5",)), {"a": " 6"}, False),
        (Requirement("a", Operator.GT, ("5",)), {"a": "1_0"}, False),
        (Requirement("a", Operator.GT, ("5",)), {"a": "\u0666"}, False),  # ARABIC-INDIC DIGIT SIX
        (Requirement("a", Operator.GT, ("5",)), {"a": "9223372036854775808"}, False),  # beyond int64
        (Requirement("a", Operator.GT, ("5", "6")), {"a": "7"}, False),  # exactly one value
        (Requirement("a", Operator.GT, ("5", "5")), {"a": "7"}, False),  # a list, duplicates count
        (Requirement("a", Operator.LT, ("x",)), {"a": "1"}, False),
    ],
)
def test_requirement_matches(requirement, labels, expected):
    assert requirement.matches(labels) is expected


def _terms(expressions=(), fields=()) -> dict:
    term = {}
    if expressions:
        term["matchExpressions"] = list(expressions)
    if fields:
        term["matchFields"] = list(fields)
    return {"nodeSelectorTerms": [term]}


def test_node_and_label_selectors_share_the_requirement():
    node_selector = parse_node_selector(_terms([{"key": "zone", "operator": "In", "values": ["a"]}]), "ns")
    label_selector = parse_label_selector(
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}, "ls"
    )
    assert node_selector.terms[0].match_expressions == label_selector.match_expressions
    assert node_selector.matches(node(zone="a")) and label_selector.matches({"zone": "a"})


def test_node_selector_gt_lt():
    selector = parse_node_selector(
        _terms([{"key": "gen", "operator": "Gt", "values": ["3"]}, {"key": "gen", "operator": "Lt", "values": ["6"]}]),
        "ns",
    )
    assert [selector.matches(node(gen=str(gen))) for gen in range(2, 8)] == [False, False, True, True, False, False]
    assert not selector.matches(node(gen=" 4"))


@pytest.mark.parametrize("operator", ["Exists", "DoesNotExist", "Gt", "Lt"])
def test_match_fields_take_only_in_and_not_in(operator):
    # nodeSelectorRequirementsAsFieldSelector and ValidateNodeFieldSelectorRequirement accept In and NotIn only.
    raw = _terms(fields=[{"key": "metadata.name", "operator": operator, "values": ["1"]}])
    with pytest.raises(ObjectError) as info:
        parse_node_selector(raw, "ns")
    assert info.value.field == "ns.nodeSelectorTerms[0].matchFields[0].operator"


def test_match_fields_in_and_not_in():
    selector = parse_node_selector(
        _terms(fields=[{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]), "ns"
    )
    assert selector.matches(node("n1")) and not selector.matches(node("n2"))


@pytest.mark.parametrize("operator", ["Gt", "Lt", "Equals", "in"])
def test_label_selectors_refuse_node_only_and_unknown_operators(operator):
    with pytest.raises(ObjectError, match="unsupported operator"):
        parse_label_selector({"matchExpressions": [{"key": "a", "operator": operator, "values": ["1"]}]}, "ls")


def test_node_selector_refuses_unknown_operators():
    with pytest.raises(ObjectError, match="unsupported operator 'Equals'"):
        parse_node_selector(_terms([{"key": "a", "operator": "Equals", "values": ["1"]}]), "ns")
