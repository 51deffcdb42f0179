"""Hostile values and hypothesis settings shared by the fuzz tests (tests/state/test_fuzz_inputs.py,
tests/service/test_fuzz_http.py).

The examples are derandomized so CI is reproducible; FUZZ_EXAMPLES=N runs N random examples per test instead,
FUZZ_NO_SHRINK=1 reports failures of long exploratory runs unshrunk.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "0"))
NO_SHRINK = bool(os.environ.get("FUZZ_NO_SHRINK"))  # for long exploratory runs: report failures unshrunk


def fuzz_settings(default: int) -> settings:
    return settings(
        max_examples=FUZZ_EXAMPLES or default,
        derandomize=not FUZZ_EXAMPLES,
        deadline=None,
        database=None if not FUZZ_EXAMPLES else settings.default.database,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        phases=[phase for phase in Phase if phase is not Phase.shrink or not NO_SHRINK],
    )


# --- hostile values -----------------------------------------------------------------------------------------

ODD_STRINGS = [
    "1e999",
    "-1e999",
    "1e-999",
    "0x10",
    "0o17",
    "0b1",
    "-0",
    "+0",
    "-0.0",
    "0.0",
    "NaN",
    "nan",
    ".inf",
    "-.inf",
    "Inf",
    "1Ei",
    "999999999999999999999999999999Ei",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "1.5.5",
    "1e",
    "e3",
    ".5",
    "5.",
    "1 Gi",
    " 1",
    "1Ki1",
    "1_000",
    "1,5",
    "--1",
    "+-1",
    "1m",
    "0.000000001n",
    "1n",
    "100Mi",
    "1E3",
    "1e+3",
    "1e-3",
    "3.0",
    "",
    " ",
    "\t",
    "\n",
    "-",
    "+",
    ".",
    "/",
    "//",
    "a/b/c",
    "true",
    "false",
    "null",
    "~",
    "yes",
    "no",
    "on",
    "off",
    "None",
    "💥",
    "\uff27\uff30\uff35",
    "gpu\u0000",
    "\u202egpu",
    "ǅ",
    "İ",
    "ß",
    "\u0301",
    "\ufeff",
    "\udc80",
    "\ud800x",
    "a" * 300,
    "All",
    "ExactCount",
    "Exists",
    "Equal",
    "NoSchedule",
    "True",
    "False",
    "Admitted",
    "gpu.example.com",
    "example.com/gpu",
    "on-demand",
    "spot",
    "team-a",
    "gpus",
    "kueue.x-k8s.io/queue-name",
    "v1",
    "Pod",
    "metadata.name",
    "In",
    "NotIn",
    "DoesNotExist",
    "device.driver == 'gpu.example.com'",
    "quantity('1e999')",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(ODD_STRINGS),
    st.text(max_size=20),
)
yaml_only = st.one_of(
    st.dates(),
    st.datetimes(),
    st.binary(max_size=8),
    st.frozensets(st.integers(0, 3), max_size=3).map(set),
)
keys = st.one_of(st.sampled_from(["name", "Name", "NAME", "kind", "metadata", "spec", "items", "", "count"]), st.text())


def nested(depth: int, leaf: Any, as_dict: bool) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value} if as_dict else [value]
    return value


deep_values = st.builds(nested, st.integers(10, 180), scalars, st.booleans())
hostile_values = st.one_of(
    scalars,
    deep_values,
    st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=3),
        max_leaves=8,
    ),
)


def paths_of(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every (container path, key) in a JSON-shaped value, parents before children."""
    found = []
    if isinstance(value, dict):
        for key, child in value.items():
            found.append((*prefix, key))
            found.extend(paths_of(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.append((*prefix, index))
            found.extend(paths_of(child, (*prefix, index)))
    return found


def at(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def same_type_values(value: Any) -> st.SearchStrategy:
    """Hostile values of the type already there: the object keeps its shape, so it often still loads and the
    odd value travels on into the decisions."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 2**31, 2**63 - 1, 2**63, 2**64]))
    if isinstance(value, str):
        return st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=12), st.just(value.upper()), st.just(""))
    return hostile_values


def mutate(data: st.DataObject, obj: Any, *, yaml_values: bool = False, max_mutations: int = 4) -> Any:
    """A copy of obj with 1..max_mutations hostile edits at drawn places."""
    obj = copy.deepcopy(obj)
    values = st.one_of(hostile_values, yaml_only) if yaml_values else hostile_values
    for _ in range(data.draw(st.integers(1, max_mutations), label="mutations")):
        paths = paths_of(obj)
        if not paths:
            return data.draw(values)
        path = data.draw(st.sampled_from(paths), label="path")
        parent, key = at(obj, path[:-1]), path[-1]
        action = data.draw(
            st.sampled_from(
                ["same-type", "same-type", "replace", "replace", "delete", "add", "case-duplicate", "wrap", "deepen"]
            ),
            label="action",
        )
        if action == "same-type":
            parent[key] = data.draw(same_type_values(parent[key]), label="value")
        elif action == "replace":
            parent[key] = data.draw(values, label="value")
        elif action == "delete":
            del parent[key]
        elif action == "add":
            target = parent[key]
            if isinstance(target, dict):
                target[data.draw(keys, label="key")] = data.draw(values, label="value")
            elif isinstance(target, list):
                target.append(data.draw(values, label="value"))
            else:
                parent[key] = [target, data.draw(values, label="value")]
        elif action == "case-duplicate" and isinstance(parent, dict) and isinstance(key, str):
            other = data.draw(st.sampled_from([key.upper(), key.lower(), key.swapcase(), key.title()]))
            parent[other] = data.draw(st.one_of(st.just(parent[key]), values), label="value")
        elif action == "wrap":
            parent[key] = [parent[key]] if data.draw(st.booleans()) else {"value": parent[key]}
        elif action == "deepen":
            parent[key] = nested(data.draw(st.integers(10, 150)), parent[key], data.draw(st.booleans()))
    return obj
