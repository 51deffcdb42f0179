"""The two cel-expr-python environments that together emulate Kubernetes' DRA CEL environment.

* The checking environment types expressions exactly as kube-apiserver/kube-scheduler do: Quantity and
  Semver are distinct abstract types, `device.capacity[d][id]` is a Quantity, `device.driver` a string,
  attributes are dyn, Kubernetes' libraries (quantity, semver, lists, regex), the strings extension at
  version 2, optional types, cel.bind, sets, cel-go's list extension and two-variable comprehensions are
  declared, ordering comparisons accept mixed int/uint/double (cel.CrossTypeNumericComparisons), and
  the cel-go-only functions that cel-cpp's own libraries lack are declared in YAML.
  It never evaluates anything.
* The runtime environment evaluates the checked AST (handed over serialized, see selector.py). In it a
  Quantity or Semver is tagged `bytes` and the Kubernetes functions are Python callbacks (library.py).

Variables: `device` and the qualified names `device.driver`, `device.allowMultipleAllocations`,
`device.attributes`, `device.capacity`. CEL resolves `device.capacity` to the longest declared name, so
selectors get precise types without a protobuf message type (cel-expr-python has no protobuf runtime here).
"""

from __future__ import annotations

import threading
from typing import Any

import yaml
from cel_expr_python import cel

from extender.decisions.devices.cel import library, quantity_type, semver_type

QUANTITY = cel.Type.AbstractType(quantity_type.QUANTITY_TYPE_NAME)
SEMVER = cel.Type.AbstractType(semver_type.SEMVER_TYPE_NAME)

VAR_DEVICE = "device"
VAR_DRIVER = "device.driver"
VAR_MULTI = "device.allowMultipleAllocations"
VAR_ATTRIBUTES = "device.attributes"
VAR_CAPACITY = "device.capacity"
DEVICE_FIELDS = ("driver", "allowMultipleAllocations", "attributes", "capacity")

_EXTENSIONS = ("optional", "bindings", "sets", "lists", "two-var-comprehensions")
_COMPARISONS = {"_<_": "less", "_<=_": "less_equals", "_>_": "greater", "_>=_": "greater_equals"}
_ORDERED = {
    "bool": "bool",
    "int": "int64",
    "uint": "uint64",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "timestamp": "timestamp",
    "duration": "duration",
}
_NUMERIC = {"int": "int64", "uint": "uint64", "double": "double"}
_SUMMABLE = ("int", "uint", "double", "duration")


def _t(name: str, *params: dict[str, Any], type_param: bool = False) -> dict[str, Any]:
    info: dict[str, Any] = {"type_name": name}
    if type_param:
        info["is_type_param"] = True
    if params:
        info["params"] = list(params)
    return info


def _overload(
    overload_id: str, result: dict[str, Any], *args: dict[str, Any], target: dict[str, Any] | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": overload_id}
    if target is not None:
        entry["target"] = target
    if args:
        entry["args"] = list(args)
    entry["return"] = result
    return entry


# The types the checker's YAML declarations below use (cel-expr-python's EnvConfig type form); read only.
_STRING, _INT, _BOOL = _t("string"), _t("int"), _t("bool")
_PARAM_A = _t("A", type_param=True)
_LIST_A = _t("list", _t("A", type_param=True))


def _cross_type_comparisons() -> list[dict[str, Any]]:
    """The ordering operators over every ordered type plus mixed int/uint/double, as cel-go declares them
    under cel.CrossTypeNumericComparisons(true) (k8s.io/apiserver/pkg/cel/environment/base.go); the standard
    library's own declarations of these operators are excluded in new_checker_env."""
    functions: list[dict[str, Any]] = []
    for name, prefix in _COMPARISONS.items():
        overloads = [
            _overload(f"{prefix}_{ident}", _BOOL, _t(cel_name), _t(cel_name)) for cel_name, ident in _ORDERED.items()
        ]
        for left, left_id in _NUMERIC.items():
            for right, right_id in _NUMERIC.items():
                if left != right:
                    overloads.append(_overload(f"{prefix}_{left_id}_{right_id}", _BOOL, _t(left), _t(right)))
        functions.append({"name": name, "overloads": overloads})
    return functions


def _index_functions() -> list[dict[str, Any]]:
    """indexOf and lastIndexOf of the strings extension and of k8s.io/apiserver/pkg/cel/library/lists.go in one
    declaration each: cel-cpp refuses a second declaration of a function name."""
    return [
        {
            "name": "indexOf",
            "overloads": [
                _overload("string_index_of_string", _INT, _STRING, target=_STRING),
                _overload("string_index_of_string_int", _INT, _STRING, _INT, target=_STRING),
                _overload("list_a_index_of_int", _INT, _PARAM_A, target=_LIST_A),
            ],
        },
        {
            "name": "lastIndexOf",
            "overloads": [
                _overload("string_last_index_of_string", _INT, _STRING, target=_STRING),
                _overload("string_last_index_of_string_int", _INT, _STRING, _INT, target=_STRING),
                _overload("list_a_last_index_of_int", _INT, _PARAM_A, target=_LIST_A),
            ],
        },
    ]


def _strings_extension() -> list[dict[str, Any]]:
    """cel-go ext.Strings(ext.StringsVersion(2)) (ext/strings.go), as k8s.io/apiserver/pkg/cel/environment
    enables it; its indexOf and lastIndexOf come from _index_functions."""
    string, integer = _STRING, _INT
    return [
        {"name": "charAt", "overloads": [_overload("string_char_at_int", string, integer, target=string)]},
        *_index_functions(),
        {"name": "lowerAscii", "overloads": [_overload("string_lower_ascii", string, target=string)]},
        {"name": "upperAscii", "overloads": [_overload("string_upper_ascii", string, target=string)]},
        {
            "name": "replace",
            "overloads": [
                _overload("string_replace_string_string", string, string, string, target=string),
                _overload("string_replace_string_string_int", string, string, string, integer, target=string),
            ],
        },
        {
            "name": "split",
            "overloads": [
                _overload("string_split_string", _t("list", _STRING), string, target=string),
                _overload("string_split_string_int", _t("list", _STRING), string, integer, target=string),
            ],
        },
        {
            "name": "substring",
            "overloads": [
                _overload("string_substring_int", string, integer, target=string),
                _overload("string_substring_int_int", string, integer, integer, target=string),
            ],
        },
        {"name": "trim", "overloads": [_overload("string_trim", string, target=string)]},
        {
            "name": "format",
            "overloads": [
                _overload("string_format", string, _t("list", _t("dyn")), target=string),
            ],
        },
        {"name": "strings.quote", "overloads": [_overload("strings_quote", string, string)]},
        {
            "name": "join",
            "overloads": [
                _overload("list_join", string, target=_t("list", _STRING)),
                _overload("list_join_string", string, string, target=_t("list", _STRING)),
            ],
        },
    ]


def _regex_library() -> list[dict[str, Any]]:
    """find and findAll of k8s.io/apiserver/pkg/cel/library/regex.go."""
    return [
        {"name": "find", "overloads": [_overload("string_find_string", _STRING, _STRING, target=_STRING)]},
        {
            "name": "findAll",
            "overloads": [
                _overload("string_find_all_string", _t("list", _STRING), _STRING, target=_STRING),
                _overload("string_find_all_string_int", _t("list", _STRING), _STRING, _INT, target=_STRING),
            ],
        },
    ]


def _lists_library() -> list[dict[str, Any]]:
    """isSorted, min, max and sum of k8s.io/apiserver/pkg/cel/library/lists.go (indexOf and lastIndexOf are in
    _index_functions)."""
    functions: list[dict[str, Any]] = []
    for name in ("isSorted", "min", "max"):
        overloads = []
        for cel_name in _ORDERED:
            element = _t(cel_name)
            result = _BOOL if name == "isSorted" else element
            overloads.append(_overload(f"list_{cel_name}_{name.lower()}", result, target=_t("list", element)))
        functions.append({"name": name, "overloads": overloads})
    functions.append(
        {
            "name": "sum",
            "overloads": [
                _overload(f"list_{cel_name}_sum_{cel_name}", _t(cel_name), target=_t("list", _t(cel_name)))
                for cel_name in _SUMMABLE
            ],
        }
    )
    return functions


def _checker_function_config() -> list[dict[str, Any]]:
    """Declarations (no implementations) of what cel-go has and cel-cpp's bundled libraries don't."""
    return _cross_type_comparisons() + _strings_extension() + _regex_library() + _lists_library()


def _kubernetes_functions(quantity: cel.Type, semver: cel.Type, *, runtime: bool) -> list[cel.FunctionDecl]:
    """The quantity and semver libraries. At runtime both types are bytes, so the overloads that the
    checker keeps apart collapse into one Python callback per name."""
    string, integer, boolean, double = cel.Type.STRING, cel.Type.INT, cel.Type.BOOL, cel.Type.DOUBLE

    def decl(name: str, *overloads: cel.Overload) -> cel.FunctionDecl:
        return cel.FunctionDecl(name, list(overloads))

    def ov(overload_id: str, result: cel.Type, params: list[cel.Type], impl: Any, member: bool = False) -> cel.Overload:
        if runtime:
            return cel.Overload(overload_id, result, params, is_member=member, impl=impl)
        return cel.Overload(overload_id, result, params, is_member=member)

    q, s = quantity, semver
    decls = [
        decl("quantity", ov("string_to_quantity", q, [string], quantity_type.cel_quantity)),
        decl("isQuantity", ov("is_quantity_string", boolean, [string], quantity_type.cel_is_quantity)),
        decl("sign", ov("quantity_sign", integer, [q], library.QUANTITY_METHODS["sign"])),
        decl(
            "asApproximateFloat",
            ov("quantity_get_float", double, [q], library.QUANTITY_METHODS["asApproximateFloat"], True),
        ),
        decl("asInteger", ov("quantity_get_int", integer, [q], library.QUANTITY_METHODS["asInteger"], True)),
        decl("isInteger", ov("quantity_is_integer", boolean, [q], library.QUANTITY_METHODS["isInteger"], True)),
        decl(
            "add",
            ov("quantity_add", q, [q, q], library.QUANTITY_METHODS["add"], True),
            ov("quantity_add_int", q, [q, integer], library.QUANTITY_METHODS["add"], True),
        ),
        decl(
            "sub",
            ov("quantity_sub", q, [q, q], library.QUANTITY_METHODS["sub"], True),
            ov("quantity_sub_int", q, [q, integer], library.QUANTITY_METHODS["sub"], True),
        ),
        decl(
            "semver",
            ov("string_to_semver", s, [string], library.cel_semver),
            ov("string_bool_to_semver", s, [string, boolean], library.cel_semver),
        ),
        decl(
            "isSemver",
            ov("is_semver_string", boolean, [string], library.cel_is_semver),
            ov("is_semver_string_bool", boolean, [string, boolean], library.cel_is_semver),
        ),
        decl("major", ov("semver_major", integer, [s], library.SEMVER_METHODS["major"], True)),
        decl("minor", ov("semver_minor", integer, [s], library.SEMVER_METHODS["minor"], True)),
        decl("patch", ov("semver_patch", integer, [s], library.SEMVER_METHODS["patch"], True)),
    ]
    shared = (
        ("compareTo", "compare_to", integer, library.cel_compare_to),
        ("isGreaterThan", "is_greater_than", boolean, library.cel_is_greater_than),
        ("isLessThan", "is_less_than", boolean, library.cel_is_less_than),
    )
    for name, suffix, result, impl in shared:
        if runtime:
            decls.append(decl(name, ov(f"tagged_{suffix}", result, [q, q], impl, True)))
        else:
            decls.append(
                decl(
                    name,
                    ov(f"quantity_{suffix}", result, [q, q], None, True),
                    ov(f"semver_{suffix}", result, [s, s], None, True),
                )
            )
    return decls


# cel-cpp's runtime does not match a Python overload declared with a `dyn` parameter against any value,
# so generic parameters are spelled out for every runtime kind.
_VALUE_KINDS = (
    cel.Type.NULL,
    cel.Type.BOOL,
    cel.Type.INT,
    cel.Type.UINT,
    cel.Type.DOUBLE,
    cel.Type.STRING,
    cel.Type.BYTES,
    cel.Type.LIST,
    cel.Type.MAP,
    cel.Type.TIMESTAMP,
    cel.Type.DURATION,
    cel.Type.TYPE,
)
_KEY_KINDS = (cel.Type.BOOL, cel.Type.INT, cel.Type.UINT, cel.Type.STRING)


def _runtime_functions() -> list[cel.FunctionDecl]:
    lst, dyn, string, integer = cel.Type.LIST, cel.Type.DYN, cel.Type.STRING, cel.Type.INT
    mapping = cel.Type.MAP

    def member(name: str, overload_id: str, result: cel.Type, params: list[cel.Type], impl: Any) -> cel.FunctionDecl:
        return cel.FunctionDecl(name, [cel.Overload(overload_id, result, params, is_member=True, impl=impl)])

    def per_kind(name: str, overload_id: str, impl: Any) -> cel.FunctionDecl:
        return cel.FunctionDecl(
            name,
            [
                cel.Overload(f"{overload_id}_{index}", integer, [lst, kind], is_member=True, impl=impl)
                for index, kind in enumerate(_VALUE_KINDS)
            ],
        )

    map_insert = [cel.Overload("cel_map_insert_map", mapping, [mapping, mapping], impl=library.cel_map_insert)]
    for key_index, key in enumerate(_KEY_KINDS):
        for value_index, value in enumerate(_VALUE_KINDS):
            map_insert.append(
                cel.Overload(
                    f"cel_map_insert_{key_index}_{value_index}",
                    mapping,
                    [mapping, key, value],
                    impl=library.cel_map_insert,
                )
            )
    return [
        member("isSorted", "list_is_sorted", cel.Type.BOOL, [lst], library.cel_is_sorted),
        member("sum", "list_sum", dyn, [lst], library.cel_sum),
        member("min", "list_min", dyn, [lst], library.cel_min),
        member("max", "list_max", dyn, [lst], library.cel_max),
        per_kind("indexOf", "list_index_of", library.cel_index_of),
        per_kind("lastIndexOf", "list_last_index_of", library.cel_last_index_of),
        member("find", "string_find", string, [string, string], library.cel_find),
        cel.FunctionDecl(
            "findAll",
            [
                cel.Overload(
                    "string_find_all",
                    cel.Type.List(string),
                    [string, string],
                    is_member=True,
                    impl=library.cel_find_all,
                ),
                cel.Overload(
                    "string_find_all_int",
                    cel.Type.List(string),
                    [string, string, integer],
                    is_member=True,
                    impl=library.cel_find_all,
                ),
            ],
        ),
        cel.FunctionDecl("cel.@mapInsert", map_insert),
    ]


def _variables(quantity: cel.Type) -> dict[str, cel.Type]:
    string_map = cel.Type.Map
    return {
        VAR_DEVICE: string_map(cel.Type.STRING, cel.Type.DYN),
        VAR_DRIVER: cel.Type.STRING,
        VAR_MULTI: cel.Type.BOOL,
        VAR_ATTRIBUTES: string_map(cel.Type.STRING, string_map(cel.Type.STRING, cel.Type.DYN)),
        VAR_CAPACITY: string_map(cel.Type.STRING, string_map(cel.Type.STRING, quantity)),
    }


def new_checker_env() -> cel.Env:
    config = {
        "extensions": [{"name": name} for name in _EXTENSIONS],
        "stdlib": {"exclude_functions": [{"name": name} for name in _COMPARISONS]},
        "functions": _checker_function_config(),
    }
    return cel.NewEnv(
        config=cel.NewEnvConfigFromYaml(yaml.safe_dump(config, sort_keys=False)),
        variables=_variables(QUANTITY),
        functions=_kubernetes_functions(QUANTITY, SEMVER, runtime=False),
    )


def new_runtime_env() -> cel.Env:
    config = {"extensions": [{"name": name} for name in _EXTENSIONS] + [{"name": "strings", "version": 2}]}
    return cel.NewEnv(
        config=cel.NewEnvConfigFromYaml(yaml.safe_dump(config, sort_keys=False)),
        variables=_variables(cel.Type.BYTES),
        functions=_kubernetes_functions(cel.Type.BYTES, cel.Type.BYTES, runtime=True) + _runtime_functions(),
    )


class Environments:
    """Both environments, built once. cel-expr-python builds its compiler and runtime lazily and without
    locking, so they are warmed up here and compiling is serialized by `lock`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checker = new_checker_env()
        self.runtime = new_runtime_env()
        warm = self.checker.compile("device.driver == '' && quantity('1').compareTo(quantity('1')) == 0")
        self.runtime.deserialize(warm.serialize()).eval(data={VAR_DRIVER: ""})


_environments: Environments | None = None
_environments_lock = threading.Lock()


def environments() -> Environments:
    global _environments
    if _environments is None:
        with _environments_lock:
            if _environments is None:
                _environments = Environments()
    return _environments
