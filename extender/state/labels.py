"""One label-selector requirement, matched as k8s.io/apimachinery/pkg/labels does, for every API that has one.

metav1.LabelSelector (Kueue's ClusterQueue.namespaceSelector) and v1.NodeSelectorRequirement (node selectors
of ResourceSlices, devices and allocations) both become a labels.Requirement upstream (LabelSelectorAsSelector;
component-helpers' nodeSelectorRequirementsAsSelector), and Requirement.Matches decides them alike. What each
API accepts differs, so the operator sets are per API here and each parser keeps its own value checks:

- LabelSelector: In, NotIn, Exists, DoesNotExist;
- NodeSelectorTerm.matchExpressions: those and Gt, Lt;
- NodeSelectorTerm.matchFields: In, NotIn (nodeSelectorRequirementsAsFieldSelector, and the API validation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_str, get_str_list, get_str_map, map_items, parse_int64, type_name


class Operator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


LABEL_SELECTOR_OPERATORS = (Operator.IN, Operator.NOT_IN, Operator.EXISTS, Operator.DOES_NOT_EXIST)
NODE_SELECTOR_OPERATORS = (*LABEL_SELECTOR_OPERATORS, Operator.GT, Operator.LT)
NODE_FIELD_SELECTOR_OPERATORS = (Operator.IN, Operator.NOT_IN)


@dataclass(frozen=True, slots=True)
class Requirement:
    """labels.Requirement: a key, an operator and the values, in the order the object lists them."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """labels.Requirement.Matches: NotIn and DoesNotExist hold for an absent key, Gt and Lt never do."""
        value = labels.get(self.key)
        if self.operator is Operator.IN:
            return value is not None and value in self.values
        if self.operator is Operator.NOT_IN:
            return value is None or value not in self.values
        if self.operator is Operator.EXISTS:
            return value is not None
        if self.operator is Operator.DOES_NOT_EXIST:
            return value is None
        # Gt / Lt: both sides must read as strconv.ParseInt(s, 10, 64), and there must be exactly one value.
        if value is None or len(self.values) != 1:
            return False
        label_value, bound = parse_int64(value), parse_int64(self.values[0])
        if label_value is None or bound is None:
            return False
        return label_value > bound if self.operator is Operator.GT else label_value < bound


def parse_requirement(raw: Mapping[str, Any], path: str, allowed: tuple[Operator, ...]) -> Requirement:
    """Read key, operator and values, refusing an operator the API does not accept; value rules stay per API."""
    key = get_str(raw, "key", path, required=True)
    operator = get_str(raw, "operator", path, required=True)
    values = get_str_list(raw, "values", path)
    if operator not in allowed:
        names = ", ".join(allowed)
        raise ObjectError(child_path(path, "operator"), f"unsupported operator {operator!r}; must be one of {names}")
    return Requirement(key, Operator(operator), values)


_NO_LABELS: Mapping[str, str] = MappingProxyType({})


def _no_labels() -> Mapping[str, str]:
    return _NO_LABELS


# Immutable (a MappingProxyType), as the models holding a selector are shared by every snapshot.
@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector. All requirements must hold; an empty selector matches everything.

    A *missing* selector is represented by None at the field that holds it, because its meaning depends on
    the field (for ClusterQueue.namespaceSelector it matches nothing, as LabelSelectorAsSelector(nil) does).
    """

    match_labels: Mapping[str, str] = field(default_factory=_no_labels)
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        return all(requirement.matches(labels) for requirement in self.match_expressions)


def parse_label_selector(raw: object, path: str) -> LabelSelector:
    """Parse a LabelSelector, validating operators and values as ValidateLabelSelector does."""
    if not isinstance(raw, Mapping):
        raise ObjectError(path, f"must be an object, got {type_name(raw)}")
    requirements = []
    for item_path, item in map_items(raw, "matchExpressions", path):
        requirement = parse_requirement(item, item_path, LABEL_SELECTOR_OPERATORS)
        op, values = requirement.operator, requirement.values
        if op in (Operator.IN, Operator.NOT_IN) and not values:
            raise ObjectError(child_path(item_path, "values"), f"must be specified when operator is {op.value}")
        if op in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
            message = f"may not be specified when operator is {op.value}"
            raise ObjectError(child_path(item_path, "values"), message)
        requirements.append(requirement)
    return LabelSelector(MappingProxyType(get_str_map(raw, "matchLabels", path)), tuple(requirements))
